/* The GPU twin's NVML: libnvidia-ml.so.1 with the entry points burnin's fabric
 * discovery calls, describing the CUDA twin's GPUs (same names, UUIDs, bus ids) and a
 * link topology read from TWIN_TOPOLOGY, a small text file, one statement a line:
 *
 *   nvswitch 18          every GPU has 18 NVLinks to NVSwitches (an HGX board)
 *   nvlink 0 1 4         4 direct NVLinks between GPU 0 and GPU 1
 *   down 3 5             GPU 3's link 5 is down
 *   pcie 0 1 PIX         the PCIe relation of a GPU pair (PIX PXB PHB NODE SYS)
 *   pcie-default SYS     of every other pair (default: NODE within a NUMA half, else SYS)
 *
 * Without a file the GPUs have no NVLink (NVML answers "not supported"), as a PCIe box.
 * NVML lists every GPU of the host, whatever CUDA_VISIBLE_DEVICES says (as NVML does).
 *
 * Health (what `burnin gpu` reads): clocks, power, temperature, clocks-event reasons,
 * PCIe link, ECC counts, retired pages (not supported, as on Ampere and later), remapped
 * rows and XID events, healthy H100-like values unless TWIN_NVML_HEALTH says otherwise:
 *
 *   TWIN_NVML_HEALTH="[rank=R:]gpu=N|all:key=value,...;..."
 *
 * keys: clock_errors=N (the next N clock reads answer NVML_ERROR_UNKNOWN),
 * throttle (reason names joined by '+', or a bit mask), sm_mhz, temp_c, power_w,
 * pcie_gen, pcie_width, pcie_max_gen, pcie_max_width, ecc_uncorrected_after,
 * ecc_corrected_after, rows_uncorrected_after, pcie_replays_after (each counter reads N
 * more after its first read), remap_pending=1, remap_failure=1, xid=N (one XID event delivered once after
 * registration), events=unsupported (registering events answers "not supported").
 */
#define _GNU_SOURCE
#include "twin.h"

#include <pthread.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_UNKNOWN = 999,
};
#define MAX_LINKS 18

typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

struct link {
  int exists, up, peer; /* peer: a GPU index, or -1 for an NVSwitch */
};
/* What one GPU's health calls answer (TWIN_NVML_HEALTH; healthy H100-like defaults). */
struct health {
  unsigned long long reasons;
  unsigned sm_mhz, mem_mhz, temp_c, power_mw;
  unsigned pcie_gen, pcie_width, pcie_max_gen, pcie_max_width;
  unsigned long long ecc_unc_after, ecc_corr_after, rows_unc_after, replays_after;
  int remap_pending, remap_failure, events_unsupported;
  int clock_errors; /* clock reads that answer NVML_ERROR_UNKNOWN, from the first on */
  unsigned long long xid;
  int ecc_reads[2][2]; /* [uncorrected?][aggregate?]: reads so far */
  int rows_reads;
  int replay_reads;
};
struct gpu {
  int index;
  struct link links[MAX_LINKS];
  int nlinks;
  struct health h;
};
typedef struct gpu *nvmlDevice_t;

#define NVML_FNS(X)                                                                          \
  X(nvmlInit_v2) X(nvmlShutdown) X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion)   \
  X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetName)             \
  X(nvmlDeviceGetUUID) X(nvmlDeviceGetPciInfo_v3) X(nvmlDeviceGetNumaNodeId)                 \
  X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetNvLinkState) X(nvmlDeviceGetNvLinkRemotePciInfo_v2) \
  X(nvmlDeviceGetNvLinkRemoteDeviceType) X(nvmlDeviceGetTopologyCommonAncestor)                \
  X(nvmlDeviceGetClockInfo) X(nvmlDeviceGetPowerUsage) X(nvmlDeviceGetTemperature)             \
  X(nvmlDeviceGetCurrentClocksThrottleReasons) X(nvmlDeviceGetCurrPcieLinkGeneration)          \
  X(nvmlDeviceGetCurrPcieLinkWidth) X(nvmlDeviceGetMaxPcieLinkGeneration)                      \
  X(nvmlDeviceGetMaxPcieLinkWidth) X(nvmlDeviceGetTotalEccErrors) X(nvmlDeviceGetRetiredPages) \
  X(nvmlDeviceGetRetiredPagesPendingStatus) X(nvmlDeviceGetRemappedRows) X(nvmlEventSetCreate)  \
  X(nvmlDeviceGetPcieReplayCounter)                                                          \
  X(nvmlDeviceRegisterEvents) X(nvmlEventSetWait_v2) X(nvmlEventSetFree)
enum {
#define X(n) I_##n,
  NVML_FNS(X)
#undef X
      N_FNS
};
static twin_counter counts[N_FNS] = {
#define X(n) {#n, 0},
    NVML_FNS(X)
#undef X
};
#define COUNT(n) TWIN_COUNT(counts, I_##n)
__attribute__((destructor)) static void write_counts(void) {
  twin_write_counts("nvml", counts, N_FNS, NULL);
}

static struct gpu g_gpus[TWIN_MAX_GPUS];
static int g_n, g_init;
static int g_pcie[TWIN_MAX_GPUS][TWIN_MAX_GPUS]; /* 0: default */
static int g_pcie_default;                       /* 0: by NUMA half */

static int level(const char *s) {
  static const char *names[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
  static const int v[] = {10, 20, 30, 40, 50};
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, names[i])) return v[i];
  return -1;
}

static int add_link(int g, int peer) {
  if (g < 0 || g >= g_n || g_gpus[g].nlinks >= MAX_LINKS) return -1;
  struct link *l = &g_gpus[g].links[g_gpus[g].nlinks++];
  l->exists = 1;
  l->up = 1;
  l->peer = peer;
  return 0;
}

static void load_health(void);

static void load(void) {
  g_n = twin_gpu_count();
  for (int i = 0; i < g_n; i++) g_gpus[i].index = i;
  load_health();
  const char *path = getenv("TWIN_TOPOLOGY");
  if (!path || !*path) return;
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "burnin-twin: TWIN_TOPOLOGY %s: cannot open it\n", path);
    return;
  }
  char line[256];
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    int a, b, k;
    char word[32], lvl[16];
    if (sscanf(line, " %31s", word) != 1) continue;
    int ok = 0;
    if (!strcmp(word, "nvswitch") && sscanf(line, " nvswitch %d", &k) == 1) {
      ok = 1;
      for (int g = 0; g < g_n; g++)
        for (int i = 0; i < k; i++) ok &= add_link(g, -1) == 0;
    } else if (!strcmp(word, "nvlink") && sscanf(line, " nvlink %d %d %d", &a, &b, &k) == 3) {
      ok = a >= 0 && b >= 0 && a < g_n && b < g_n && a != b;
      for (int i = 0; ok && i < k; i++) ok &= add_link(a, b) == 0 && add_link(b, a) == 0;
    } else if (!strcmp(word, "down") && sscanf(line, " down %d %d", &a, &k) == 2) {
      ok = a >= 0 && a < g_n && k >= 0 && k < g_gpus[a].nlinks;
      if (ok) g_gpus[a].links[k].up = 0;
    } else if (!strcmp(word, "pcie") && sscanf(line, " pcie %d %d %15s", &a, &b, lvl) == 3) {
      ok = a >= 0 && b >= 0 && a < g_n && b < g_n && level(lvl) > 0;
      if (ok) g_pcie[a][b] = g_pcie[b][a] = level(lvl);
    } else if (!strcmp(word, "pcie-default") && sscanf(line, " pcie-default %15s", lvl) == 1) {
      ok = level(lvl) > 0;
      if (ok) g_pcie_default = level(lvl);
    }
    if (!ok) fprintf(stderr, "burnin-twin: TWIN_TOPOLOGY %s line %d: cannot use '%s'\n", path, lineno, word);
  }
  fclose(f);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void apply_due(void); /* TWIN_NVML_HEALTH's changes that are due */
#define DEV_OK(d)                                                               \
  do {                                                                          \
    if (!g_init) return NVML_ERROR_UNINITIALIZED;                               \
    apply_due();                                                                \
    if (!(d) || (d) < g_gpus || (d) >= g_gpus + g_n) return NVML_ERROR_INVALID_ARGUMENT; \
  } while (0)

API nvmlReturn_t nvmlInit_v2(void) {
  COUNT(nvmlInit_v2);
  pthread_once(&g_once, load);
  g_init++;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlShutdown(void) {
  COUNT(nvmlShutdown);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  g_init--;
  return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(char *dst, unsigned len, const char *src) {
  if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(dst, src, strlen(src) + 1);
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned len) {
  COUNT(nvmlSystemGetDriverVersion);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  return copy_str(v, len, "580.00-burnin-twin");
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned len) {
  COUNT(nvmlSystemGetNVMLVersion);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  return copy_str(v, len, "13.580.00-burnin-twin");
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) {
  COUNT(nvmlDeviceGetCount_v2);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!n) return NVML_ERROR_INVALID_ARGUMENT;
  *n = (unsigned)g_n;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
  COUNT(nvmlDeviceGetHandleByIndex_v2);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!d || i >= (unsigned)g_n) return NVML_ERROR_INVALID_ARGUMENT;
  *d = &g_gpus[i];
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len) {
  COUNT(nvmlDeviceGetName);
  DEV_OK(d);
  char s[64];
  const char *model = getenv("TWIN_GPU_NAME"); /* as cuDeviceGetName */
  if (model && *model)
    snprintf(s, sizeof s, "%s", model);
  else
    snprintf(s, sizeof s, "burnin-twin GPU %d", d->index);
  return copy_str(name, len, s);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *out, unsigned len) {
  COUNT(nvmlDeviceGetUUID);
  DEV_OK(d);
  unsigned char u[16];
  twin_uuid(d->index, u);
  char s[64];
  snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
           u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return copy_str(out, len, s);
}

static void pci_of_bus(unsigned bus, nvmlPciInfo_t *p) {
  memset(p, 0, sizeof *p);
  p->bus = bus;
  p->pciDeviceId = 0x233510de; /* NVIDIA vendor id in the low half */
  snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", bus);
  snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", bus);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
  COUNT(nvmlDeviceGetPciInfo_v3);
  DEV_OK(d);
  if (!p) return NVML_ERROR_INVALID_ARGUMENT;
  pci_of_bus(twin_bus(d->index), p);
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned *node) {
  COUNT(nvmlDeviceGetNumaNodeId);
  DEV_OK(d);
  if (!node) return NVML_ERROR_INVALID_ARGUMENT;
  *node = (unsigned)(d->index >= (g_n + 1) / 2);
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
  COUNT(nvmlDeviceGetMemoryInfo_v2);
  DEV_OK(d);
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  m->total = twin_gpu_memory();
  m->reserved = 0;
  m->used = 0;
  m->free = m->total;
  return NVML_SUCCESS;
}

static nvmlReturn_t link_of(nvmlDevice_t d, unsigned link, struct link **l) {
  if (d->nlinks == 0) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= (unsigned)d->nlinks) return NVML_ERROR_INVALID_ARGUMENT;
  *l = &d->links[link];
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned link, int *active) {
  COUNT(nvmlDeviceGetNvLinkState);
  DEV_OK(d);
  struct link *l;
  nvmlReturn_t r = link_of(d, link, &l);
  if (r) return r;
  if (!active) return NVML_ERROR_INVALID_ARGUMENT;
  *active = l->up;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned link, nvmlPciInfo_t *p) {
  COUNT(nvmlDeviceGetNvLinkRemotePciInfo_v2);
  DEV_OK(d);
  struct link *l;
  nvmlReturn_t r = link_of(d, link, &l);
  if (r) return r;
  if (!p) return NVML_ERROR_INVALID_ARGUMENT;
  /* an NVSwitch: one of four, by link */
  pci_of_bus(l->peer >= 0 ? twin_bus(l->peer) : 0xc0 + link % 4, p);
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned link, int *type) {
  COUNT(nvmlDeviceGetNvLinkRemoteDeviceType);
  DEV_OK(d);
  struct link *l;
  nvmlReturn_t r = link_of(d, link, &l);
  if (r) return r;
  if (!type) return NVML_ERROR_INVALID_ARGUMENT;
  *type = l->peer >= 0 ? 0 : 2; /* NVML_NVLINK_DEVICE_TYPE_GPU, _SWITCH */
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *lvl) {
  COUNT(nvmlDeviceGetTopologyCommonAncestor);
  DEV_OK(a);
  DEV_OK(b);
  if (!lvl) return NVML_ERROR_INVALID_ARGUMENT;
  if (a == b) {
    *lvl = 0;
    return NVML_SUCCESS;
  }
  int v = g_pcie[a->index][b->index];
  if (!v) v = g_pcie_default;
  if (!v) v = (a->index >= (g_n + 1) / 2) == (b->index >= (g_n + 1) / 2) ? 40 : 50;
  *lvl = v;
  return NVML_SUCCESS;
}

/* ---- health: TWIN_NVML_HEALTH */

static const struct {
  const char *name;
  unsigned long long bit;
} g_reasons[] = {
    {"gpu_idle", 0x1},     {"applications_clocks_setting", 0x2}, {"sw_power_cap", 0x4},
    {"hw_slowdown", 0x8},  {"sync_boost", 0x10},                 {"sw_thermal_slowdown", 0x20},
    {"hw_thermal_slowdown", 0x40}, {"hw_power_brake_slowdown", 0x80}, {"display_clock_setting", 0x100},
};

/* "hw_slowdown+sw_power_cap" or "0x48" as NVML's clocks-event reason bits; -1: neither. */
static long long reasons_of(const char *v) {
  char *end = NULL;
  unsigned long long x = strtoull(v, &end, 0);
  if (end && end != v && *end == 0) return (long long)x;
  unsigned long long bits = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
    int found = 0;
    for (unsigned i = 0; i < sizeof g_reasons / sizeof g_reasons[0]; i++)
      if (!strcmp(t, g_reasons[i].name)) bits |= g_reasons[i].bit, found = 1;
    if (!found) return -1;
  }
  return (long long)bits;
}

static int set_key(struct health *h, const char *k, const char *v) {
  unsigned long long n = strtoull(v, NULL, 10);
  if (!strcmp(k, "throttle")) {
    long long r = reasons_of(v);
    if (r < 0) return -1;
    h->reasons = (unsigned long long)r;
  } else if (!strcmp(k, "sm_mhz")) h->sm_mhz = (unsigned)n;
  else if (!strcmp(k, "temp_c")) h->temp_c = (unsigned)n;
  else if (!strcmp(k, "power_w")) h->power_mw = (unsigned)n * 1000;
  else if (!strcmp(k, "pcie_gen")) h->pcie_gen = (unsigned)n;
  else if (!strcmp(k, "pcie_width")) h->pcie_width = (unsigned)n;
  else if (!strcmp(k, "pcie_max_gen")) h->pcie_max_gen = (unsigned)n;
  else if (!strcmp(k, "pcie_max_width")) h->pcie_max_width = (unsigned)n;
  else if (!strcmp(k, "ecc_uncorrected_after")) h->ecc_unc_after = n;
  else if (!strcmp(k, "ecc_corrected_after")) h->ecc_corr_after = n;
  else if (!strcmp(k, "rows_uncorrected_after")) h->rows_unc_after = n;
  else if (!strcmp(k, "pcie_replays_after")) h->replays_after = n;
  else if (!strcmp(k, "remap_pending")) h->remap_pending = n != 0;
  else if (!strcmp(k, "remap_failure")) h->remap_failure = n != 0;
  else if (!strcmp(k, "xid")) h->xid = n;
  else if (!strcmp(k, "events") && !strcmp(v, "unsupported")) h->events_unsupported = 1;
  else if (!strcmp(k, "clock_errors")) h->clock_errors = (int)n;
  else return -1;
  return 0;
}

/* One "[rank=R:]gpu=N|all:key=value,..." item. */
/* Changes that take effect later: "key=value@T" applies value T seconds after
 * nvmlInit (a clock that drops mid-burn, a remap that begins during the run, an XID
 * at a given second). */
#define MAX_PENDING 64
static struct {
  int gpu; /* -1: all */
  char key[32], value[64];
  double at;
  int done;
} g_pending[MAX_PENDING];
static int g_npending;
static double g_t0;
static pthread_mutex_t g_pending_mu = PTHREAD_MUTEX_INITIALIZER;

static double mono_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int set_key(struct health *h, const char *k, const char *v);

static void apply_due(void) {
  if (!g_npending) return;
  double now = mono_s() - g_t0;
  pthread_mutex_lock(&g_pending_mu);
  for (int i = 0; i < g_npending; i++) {
    if (g_pending[i].done || g_pending[i].at > now) continue;
    g_pending[i].done = 1;
    for (int g = 0; g < g_n; g++)
      if (g_pending[i].gpu < 0 || g_pending[i].gpu == g) set_key(&g_gpus[g].h, g_pending[i].key, g_pending[i].value);
  }
  pthread_mutex_unlock(&g_pending_mu);
}

static void health_item(char *item) {
  int rank = -1, gpu = -1;
  char *p = item;
  if (!strncmp(p, "rank=", 5)) {
    rank = atoi(p + 5);
    p = strchr(p, ':');
    if (!p) goto bad;
    p++;
  }
  if (strncmp(p, "gpu=", 4)) goto bad;
  p += 4;
  if (!strncmp(p, "all", 3)) gpu = -1;
  else gpu = atoi(p);
  p = strchr(p, ':');
  if (!p) goto bad;
  p++;
  if (rank >= 0 && rank != twin_world_rank()) return;
  for (char *save = NULL, *kv = strtok_r(p, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) goto bad;
    *eq = 0;
    char *at = strchr(eq + 1, '@');
    if (at) {
      *at = 0;
      struct health probe = g_gpus[0].h;
      if (g_npending >= MAX_PENDING || set_key(&probe, kv, eq + 1)) {
        fprintf(stderr, "burnin-twin: TWIN_NVML_HEALTH: cannot use '%s=%s@%s'\n", kv, eq + 1, at + 1);
        continue;
      }
      g_pending[g_npending].gpu = gpu;
      snprintf(g_pending[g_npending].key, sizeof g_pending[0].key, "%s", kv);
      snprintf(g_pending[g_npending].value, sizeof g_pending[0].value, "%s", eq + 1);
      g_pending[g_npending].at = atof(at + 1);
      g_npending++;
      continue;
    }
    for (int g = 0; g < g_n; g++)
      if ((gpu < 0 || gpu == g) && set_key(&g_gpus[g].h, kv, eq + 1)) {
        fprintf(stderr, "burnin-twin: TWIN_NVML_HEALTH: cannot use '%s=%s'\n", kv, eq + 1);
        break;
      }
  }
  return;
bad:
  fprintf(stderr, "burnin-twin: TWIN_NVML_HEALTH: cannot use '%s'\n", item);
}

static void load_health(void) {
  g_t0 = mono_s();
  g_npending = 0;
  for (int g = 0; g < g_n; g++) {
    struct health *h = &g_gpus[g].h;
    memset(h, 0, sizeof *h);
    h->sm_mhz = 1980;
    h->mem_mhz = 2619;
    h->temp_c = 45;
    h->power_mw = 350000;
    h->pcie_gen = h->pcie_max_gen = 5;
    h->pcie_width = h->pcie_max_width = 16;
  }
  const char *env = getenv("TWIN_NVML_HEALTH");
  if (!env || !*env) return;
  char *buf = strdup(env);
  if (!buf) return;
  for (char *save = NULL, *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    char one[512];
    snprintf(one, sizeof one, "%s", item);
    health_item(one);
  }
  free(buf);
}

static pthread_mutex_t g_health_lock = PTHREAD_MUTEX_INITIALIZER;

static nvmlReturn_t put_uint(unsigned *out, unsigned v) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  *out = v;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
  COUNT(nvmlDeviceGetClockInfo);
  DEV_OK(d);
  /* NVML_CLOCK_GRAPHICS 0, _SM 1, _MEM 2, _VIDEO 3 */
  if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
  if (d->h.clock_errors > 0) {
    d->h.clock_errors--;
    return NVML_ERROR_UNKNOWN;
  }
  return put_uint(mhz, type == 2 ? d->h.mem_mhz : type == 3 ? 1755 : d->h.sm_mhz);
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw) {
  COUNT(nvmlDeviceGetPowerUsage);
  DEV_OK(d);
  return put_uint(mw, d->h.power_mw);
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *c) {
  COUNT(nvmlDeviceGetTemperature);
  DEV_OK(d);
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU */
  return put_uint(c, d->h.temp_c);
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
  COUNT(nvmlDeviceGetCurrentClocksThrottleReasons);
  DEV_OK(d);
  if (!r) return NVML_ERROR_INVALID_ARGUMENT;
  *r = d->h.reasons;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned *v) {
  COUNT(nvmlDeviceGetCurrPcieLinkGeneration);
  DEV_OK(d);
  return put_uint(v, d->h.pcie_gen);
}

API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned *v) {
  COUNT(nvmlDeviceGetCurrPcieLinkWidth);
  DEV_OK(d);
  return put_uint(v, d->h.pcie_width);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned *v) {
  COUNT(nvmlDeviceGetMaxPcieLinkGeneration);
  DEV_OK(d);
  return put_uint(v, d->h.pcie_max_gen);
}

API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned *v) {
  COUNT(nvmlDeviceGetMaxPcieLinkWidth);
  DEV_OK(d);
  return put_uint(v, d->h.pcie_max_width);
}

/* A counter that reads `base` the first time and `base + after` from then on. */
static unsigned long long rising(int *reads, unsigned long long base, unsigned long long after) {
  pthread_mutex_lock(&g_health_lock);
  int n = (*reads)++;
  pthread_mutex_unlock(&g_health_lock);
  return n == 0 ? base : base + after;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n) {
  COUNT(nvmlDeviceGetTotalEccErrors);
  DEV_OK(d);
  /* NVML_MEMORY_ERROR_TYPE_CORRECTED 0, _UNCORRECTED 1; NVML_VOLATILE_ECC 0, _AGGREGATE 1 */
  if (!n || type < 0 || type > 1 || counter < 0 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long after = type ? d->h.ecc_unc_after : d->h.ecc_corr_after;
  *n = rising(&d->h.ecc_reads[type][counter], 0, after);
  return NVML_SUCCESS;
}

/* Page retirement is the pre-Ampere mechanism: an H100 answers "not supported". */
API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned *count, unsigned long long *addr) {
  COUNT(nvmlDeviceGetRetiredPages);
  DEV_OK(d);
  (void)cause, (void)count, (void)addr;
  return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *pending) {
  COUNT(nvmlDeviceGetRetiredPagesPendingStatus);
  DEV_OK(d);
  (void)pending;
  return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corr, unsigned *unc, unsigned *pending,
                                           unsigned *failure) {
  COUNT(nvmlDeviceGetRemappedRows);
  DEV_OK(d);
  if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
  *corr = 0;
  *unc = (unsigned)rising(&d->h.rows_reads, 0, d->h.rows_unc_after);
  *pending = (unsigned)d->h.remap_pending;
  *failure = (unsigned)d->h.remap_failure;
  return NVML_SUCCESS;
}

/* PCIe replays (link-level retransmissions): 0, then pcie_replays_after more. */
API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned *v) {
  COUNT(nvmlDeviceGetPcieReplayCounter);
  DEV_OK(d);
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  *v = (unsigned)rising(&d->h.replay_reads, 0, d->h.replays_after);
  return NVML_SUCCESS;
}

/* ---- events: a set holds the GPUs registered for critical XIDs; each GPU's XID (if
 * any) is delivered once, on the first wait after its registration. */
#define XID_CRITICAL 8ULL /* nvmlEventTypeXidCriticalError */
typedef struct {
  nvmlDevice_t device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
} nvmlEventData_t;
struct event_set {
  int registered[TWIN_MAX_GPUS], delivered[TWIN_MAX_GPUS];
};
typedef struct event_set *nvmlEventSet_t;

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
  COUNT(nvmlEventSetCreate);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  *set = calloc(1, sizeof **set);
  return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  COUNT(nvmlDeviceRegisterEvents);
  DEV_OK(d);
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  if (d->h.events_unsupported || (types & ~XID_CRITICAL)) return NVML_ERROR_NOT_SUPPORTED;
  set->registered[d->index] = 1;
  return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
  COUNT(nvmlEventSetWait_v2);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
  apply_due();
  for (int g = 0; g < g_n; g++) {
    if (!set->registered[g] || !g_gpus[g].h.xid || set->delivered[g]) continue;
    set->delivered[g] = 1;
    memset(data, 0, sizeof *data);
    data->device = &g_gpus[g];
    data->type = XID_CRITICAL;
    data->data = g_gpus[g].h.xid;
    return NVML_SUCCESS;
  }
  usleep((useconds_t)(timeout_ms > 1000 ? 1000 : timeout_ms) * 1000);
  return NVML_ERROR_TIMEOUT;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  COUNT(nvmlEventSetFree);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  free(set);
  return NVML_SUCCESS;
}
