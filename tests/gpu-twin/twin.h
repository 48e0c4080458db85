/* The GPU twin: fake libcuda.so.1, libnccl.so.2 and libnvidia-ml.so.1 for burnin's
 * tests on machines without a GPU (README.md here). Shared by the three libraries:
 * the environment they read, the device table, call counting. */
#ifndef BURNIN_TWIN_H
#define BURNIN_TWIN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TWIN_MAX_GPUS 16

/* ---- call counting: every exported entry point counts its calls; with
 * TWIN_COUNTS_DIR set, a library writes "<name> <count>" lines for all of its entry
 * points to <dir>/<lib>.<pid>.counts when the process exits (then "# <name> <value>"
 * lines of what else it measured). */
typedef struct {
  const char *name;
  unsigned long long calls;
} twin_counter;

#define TWIN_COUNT(table, idx) __atomic_add_fetch(&(table)[idx].calls, 1, __ATOMIC_RELAXED)

static inline void twin_write_counts(const char *lib, twin_counter *t, int n, const char *extra) {
  const char *dir = getenv("TWIN_COUNTS_DIR");
  if (!dir || !*dir) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d.counts", dir, lib, (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  for (int i = 0; i < n; i++) fprintf(f, "%s %llu\n", t[i].name, t[i].calls);
  if (extra) fputs(extra, f); /* "# name value" lines: measurements, not entry points */
  fclose(f);
}

/* ---- the environment */
static inline long twin_env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return (end && *end == 0) ? x : dflt;
}

/* This process's world rank as the launcher says (for per-rank settings). */
static inline int twin_world_rank(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (unsigned i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

/* GPUs of this host: TWIN_GPUS (default 2), or for this world rank the n of a
 * "rank:n" item of TWIN_RANK_GPUS ("1:0" = world rank 1 sees no GPU). */
static inline int twin_gpu_count(void) {
  long n = twin_env_long("TWIN_GPUS", 2);
  const char *per = getenv("TWIN_RANK_GPUS");
  if (per) {
    int me = twin_world_rank();
    const char *p = per;
    while (*p) {
      int r, c, used = 0;
      if (sscanf(p, "%d:%d%n", &r, &c, &used) == 2) {
        if (r == me) n = c;
        p += used;
      } else {
        break;
      }
      while (*p == ',' || *p == ' ') p++;
    }
  }
  if (n < 0) n = 0;
  if (n > TWIN_MAX_GPUS) n = TWIN_MAX_GPUS;
  return (int)n;
}

/* The PCI bus number of physical GPU i (DGX-like for the first eight). */
static inline unsigned twin_bus(int i) {
  static const unsigned bus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
  return i < 8 ? bus[i] : (unsigned)(0x10 + 0x10 * (i - 8) + 0x08);
}

/* A UUID per (host, GPU), the same in the CUDA and NVML twins. */
static inline void twin_uuid(int i, unsigned char out[16]) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  for (int k = 0; k < 16; k++) {
    h = (h ^ (uint64_t)(i * 16 + k)) * 1099511628211ULL;
    out[k] = (unsigned char)(h >> 24);
  }
  out[0] = 0xb7; /* every twin UUID starts GPU-b7 */
}

static inline unsigned long long twin_gpu_memory(void) {
  return (unsigned long long)twin_env_long("TWIN_GPU_MEMORY_MIB", 81920) << 20;
}

#endif
