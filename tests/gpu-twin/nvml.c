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
struct gpu {
  int index;
  struct link links[MAX_LINKS];
  int nlinks;
};
typedef struct gpu *nvmlDevice_t;

#define NVML_FNS(X)                                                                          \
  X(nvmlInit_v2) X(nvmlShutdown) X(nvmlSystemGetDriverVersion) X(nvmlSystemGetNVMLVersion)   \
  X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2) X(nvmlDeviceGetName)             \
  X(nvmlDeviceGetUUID) X(nvmlDeviceGetPciInfo_v3) X(nvmlDeviceGetNumaNodeId)                 \
  X(nvmlDeviceGetMemoryInfo_v2) X(nvmlDeviceGetNvLinkState) X(nvmlDeviceGetNvLinkRemotePciInfo_v2) \
  X(nvmlDeviceGetNvLinkRemoteDeviceType) X(nvmlDeviceGetTopologyCommonAncestor)
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

static void load(void) {
  g_n = twin_gpu_count();
  for (int i = 0; i < g_n; i++) g_gpus[i].index = i;
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

#define DEV_OK(d)                                                               \
  do {                                                                          \
    if (!g_init) return NVML_ERROR_UNINITIALIZED;                               \
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
