/* The GPU twin's CUDA driver: libcuda.so.1 with exactly the entry points burnin
 * calls, over host memory.
 *
 * - TWIN_GPUS devices per host (TWIN_RANK_GPUS per world rank), honouring
 *   CUDA_VISIBLE_DEVICES; names "burnin-twin GPU <n>", DGX-like PCI bus ids, UUIDs
 *   GPU-b7...; TWIN_GPU_MEMORY_MIB of memory each; TWIN_CUDA_VERSION (default 13000).
 * - Device memory is host memory behind opaque device addresses: an address the twin
 *   did not hand out, one past the end of its allocation, or one already freed is an
 *   error printed to stderr ("burnin-twin: ...") and returned as an error code; a bad
 *   pointer found when a queued operation runs makes the context's error sticky
 *   (CUDA_ERROR_ILLEGAL_ADDRESS), as a real device does.
 * - Streams run their work in order on a worker thread each (TWIN_STREAM_THREADS=0:
 *   at once, in the caller), so a missing wait shows as a wrong result or a race.
 *   Events record completion times; cuStreamWaitEvent makes a stream wait for an
 *   event of another (how burnin orders NCCL after libtorch's default stream).
 * - burnin's PTX kernels run as their host build: kernels.cu compiled here with
 *   BURNIN_KERNEL_HOST, so the loops that ship are the loops CI runs, called once for
 *   every (block, thread) of the launch's grid with the GPU's index arithmetic; a
 *   block larger than the entry's .maxntid fails as on a GPU; the occupancy query
 *   answers 2048 threads an SM (TWIN_OCCUPANCY caps the burn's blocks per SM).
 * - Loaded from a folder named "stubs", it is CUDA's stub driver: every call answers
 *   CUDA_ERROR_STUB_LIBRARY.
 * - Pinned host memory (cuMemHostAlloc): copies from and into it are asynchronous, as
 *   on a GPU (no staging, no wait), so a missing stream wait shows.
 * - Peer access between any two GPUs, with faults: TWIN_PEER_DENY=src>dst,... (no
 *   peer access for that ordered pair; its cuMemcpyPeerAsync still copies, as the
 *   driver stages it through the host), TWIN_PEER_SLOW=src>dst,... (that pair's peer
 *   copies take 20 ms more each, so its events read slow). burnin_fma with
 *   TWIN_FMA_WRONG=gpu: each launch on that GPU (visible ordinal) flips the lowest bit
 *   of one element: a different one every launch, or the same one every launch with
 *   TWIN_FMA_WRONG_AT = first, middle or last (a fault that repeats itself).
 *   TWIN_COPY_MS=N: every copy and memset on a stream runs N ms late (a slow link).
 *   TWIN_LAUNCH_FAIL=gpu:N: from the Nth launch of the tensor-core product kernel on
 *   that GPU (visible ordinal) on, every kernel launch on it fails (sticky
 *   CUDA_ERROR_LAUNCH_FAILED: a GPU lost in the middle of a run).
 *   TWIN_CUDA_ECC_COPY=N: this process's Nth cuMemcpyHtoDAsync meets an uncorrectable
 *   ECC error when it runs (sticky CUDA_ERROR_ECC_UNCORRECTABLE, seen by the next
 *   stream query or synchronize, as on a GPU).
 * - burnin_twin_enqueue / burnin_twin_host_ptr let the NCCL twin queue collectives on
 *   these streams and reach this memory.
 */
#define _GNU_SOURCE
#include "twin.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct twin_ctx *CUcontext;
typedef struct twin_stream *CUstream;
typedef struct twin_event *CUevent;
typedef struct twin_module *CUmodule;
typedef struct twin_fn *CUfunction;
typedef struct {
  char bytes[16];
} CUuuid;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_ECC_UNCORRECTABLE = 214,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_UNKNOWN = 999,
};

/* ------------------------------------------------------------------ counting */
#define CUDA_FNS(X)                                                                        \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)    \
  X(cuDeviceTotalMem_v2) X(cuDeviceGetPCIBusId) X(cuDeviceGetUuid) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) X(cuCtxSetCurrent)          \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuStreamCreate) X(cuStreamDestroy_v2)           \
  X(cuStreamQuery) X(cuStreamSynchronize) X(cuEventCreate)            \
  X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventElapsedTime) X(cuMemAlloc_v2)            \
  X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemGetInfo_v2)                  \
  X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2)                  \
  X(cuMemsetD8Async) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload)          \
  X(cuLaunchKernel) X(cuGetErrorName) X(cuGetErrorString) X(cuMemHostAlloc) X(cuMemFreeHost)   \
  X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuMemcpyPeerAsync)                 \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

enum {
#define X(n) I_##n,
  CUDA_FNS(X)
#undef X
      N_FNS
};
static twin_counter counts[N_FNS] = {
#define X(n) {#n, 0},
    CUDA_FNS(X)
#undef X
};
#define COUNT(n) TWIN_COUNT(counts, I_##n)

/* Bytes copied between host and device memory (cuMemcpy*): what a fill or check on
 * the GPU must not need. */
static unsigned long long g_htod_bytes, g_dtoh_bytes;

/* Entry points of error paths count at once: the process may end by MPI_Abort or a
 * signal, which runs no destructor. */
#define COUNT_NOW(n)  \
  do {                \
    COUNT(n);         \
    write_counts();   \
  } while (0)

__attribute__((destructor)) static void write_counts(void) {
  char extra[128];
  snprintf(extra, sizeof extra, "# bytes_htod %llu\n# bytes_dtoh %llu\n", g_htod_bytes, g_dtoh_bytes);
  twin_write_counts("cuda", counts, N_FNS, extra);
}

/* ------------------------------------------------------------------ kernels */
#define BURNIN_KERNEL_HOST 1
#include "../../src/backend/nccl/kernels.cu"
#include "../../src/backend/nccl/sdc.cu"

/* The twin's compute capability, major * 10 + minor (TWIN_CC, default 90: Hopper). */
static int twin_cc(void) {
  long cc = twin_env_long("TWIN_CC", 90);
  return cc >= 30 && cc <= 200 ? (int)cc : 90;
}

/* ------------------------------------------------------------------ devices */
static int g_init;
static int g_count;
static int g_phys[TWIN_MAX_GPUS]; /* visible ordinal -> physical twin GPU */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static volatile int g_sticky; /* an error every later call returns */

static void setup(void) {
  int n = twin_gpu_count();
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (!vis) {
    for (int i = 0; i < n; i++) g_phys[i] = i;
    g_count = n;
    return;
  }
  /* A comma list of indices; the first invalid one ends it, as CUDA does. */
  const char *p = vis;
  while (*p && g_count < TWIN_MAX_GPUS) {
    char *end;
    long i = strtol(p, &end, 10);
    if (end == p || i < 0 || i >= n) break;
    g_phys[g_count++] = (int)i;
    p = end;
    if (*p == ',') p++;
    else break;
  }
}

static void complain(const char *fmt, const char *a, unsigned long long x) {
  fprintf(stderr, "burnin-twin: ");
  fprintf(stderr, fmt, a, x);
  fprintf(stderr, "\n");
}

#define CHECK_INIT()                                  \
  do {                                                \
    pthread_once(&g_once, setup);                     \
    if (g_sticky) return g_sticky;                    \
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;   \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Loaded from a folder named "stubs" (as CUDA's link-time stub, lib64/stubs/libcuda.so,
 * is): every call answers CUDA_ERROR_STUB_LIBRARY, as that stub does. */
static int is_stub(void) {
  static int stub = -1;
  if (stub < 0) {
    Dl_info info;
    stub = dladdr((void *)is_stub, &info) && info.dli_fname && strstr(info.dli_fname, "/stubs/");
  }
  return stub;
}

API CUresult cuInit(unsigned flags) {
  COUNT(cuInit);
  if (is_stub()) return CUDA_ERROR_STUB_LIBRARY;
  pthread_once(&g_once, setup);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_init = 1;
  return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v) {
  COUNT(cuDriverGetVersion);
  if (is_stub()) return CUDA_ERROR_STUB_LIBRARY;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = (int)twin_env_long("TWIN_CUDA_VERSION", 13000);
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n) {
  COUNT(cuDeviceGetCount);
  CHECK_INIT();
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = g_count;
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  COUNT(cuDeviceGet);
  CHECK_INIT();
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_count) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

#define CHECK_DEV(d)                                             \
  do {                                                           \
    if ((d) < 0 || (d) >= g_count) return CUDA_ERROR_INVALID_DEVICE; \
  } while (0)

API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  COUNT(cuDeviceGetName);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  /* TWIN_GPU_NAME: one model name for every GPU, as a real node's GPUs share one */
  const char *model = getenv("TWIN_GPU_NAME");
  if (model && *model)
    snprintf(name, (size_t)len, "%s", model);
  else
    snprintf(name, (size_t)len, "burnin-twin GPU %d", g_phys[d]);
  return CUDA_SUCCESS;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  COUNT(cuDeviceTotalMem_v2);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = (size_t)twin_gpu_memory();
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
  COUNT(cuDeviceGetPCIBusId);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!id || len < 13) return CUDA_ERROR_INVALID_VALUE;
  snprintf(id, (size_t)len, "0000:%02x:00.0", twin_bus(g_phys[d]));
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  COUNT(cuDeviceGetUuid);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!u) return CUDA_ERROR_INVALID_VALUE;
  twin_uuid(g_phys[d], (unsigned char *)u->bytes);
  return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  COUNT(cuDeviceGetAttribute);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case 16: *v = 132; break; /* multiprocessors */
    case 75: *v = twin_cc() / 10; break; /* compute capability major */
    case 76: *v = twin_cc() % 10; break; /* minor */
    case 115: *v = 1; break;  /* memory pools supported (cuMemAllocAsync) */
    default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ streams */
typedef struct item {
  void (*fn)(void *);
  void *arg;
  struct item *next;
} item;

struct twin_stream {
  int dev;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  item *head, *tail;
  unsigned long long queued, done;
  int threaded, quit, destroyed;
};

struct twin_ctx {
  int dev;
  int retained;
  struct twin_stream *null_stream;
};
static struct twin_ctx g_ctx[TWIN_MAX_GPUS];
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread CUcontext t_current;

static void *worker(void *p) {
  struct twin_stream *s = p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    item *it = s->head;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    it->fn(it->arg);
    free(it);
    pthread_mutex_lock(&s->mu);
    s->done++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct twin_stream *stream_new(int dev) {
  struct twin_stream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->dev = dev;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->threaded = twin_env_long("TWIN_STREAM_THREADS", 1) != 0;
  if (s->threaded) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker, s) != 0) {
      free(s);
      return NULL;
    }
    pthread_detach(th);
  }
  return s;
}

/* Queue fn(arg) on s; its ticket (done >= ticket: it has run). */
static unsigned long long enqueue(struct twin_stream *s, void (*fn)(void *), void *arg) {
  if (!s->threaded) {
    fn(arg);
    pthread_mutex_lock(&s->mu);
    unsigned long long t = ++s->queued;
    s->done++;
    pthread_mutex_unlock(&s->mu);
    return t;
  }
  item *it = malloc(sizeof *it);
  if (!it) abort();
  it->fn = fn;
  it->arg = arg;
  it->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  unsigned long long t = ++s->queued;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return t;
}

static void wait_ticket(struct twin_stream *s, unsigned long long ticket) {
  pthread_mutex_lock(&s->mu);
  while (s->done < ticket) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static int idle(struct twin_stream *s) {
  pthread_mutex_lock(&s->mu);
  int r = s->done == s->queued;
  pthread_mutex_unlock(&s->mu);
  return r;
}

/* The stream a handle means: NULL, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2)
 * are the current context's default stream. */
static struct twin_stream *resolve(CUstream h) {
  if ((uintptr_t)h > 2) {
    if (h->destroyed) {
      complain("%sstream %#llx used after cuStreamDestroy", "", (unsigned long long)(uintptr_t)h);
      return NULL;
    }
    return h;
  }
  if (!t_current) return NULL;
  return t_current->null_stream;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  COUNT(cuDevicePrimaryCtxRetain);
  CHECK_INIT();
  CHECK_DEV(d);
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_ctx_mu);
  struct twin_ctx *x = &g_ctx[d];
  if (!x->null_stream) {
    x->dev = d;
    x->null_stream = stream_new(d);
  }
  x->retained++;
  pthread_mutex_unlock(&g_ctx_mu);
  if (!x->null_stream) return CUDA_ERROR_OUT_OF_MEMORY;
  *c = x;
  return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  COUNT(cuDevicePrimaryCtxRelease_v2);
  CHECK_INIT();
  CHECK_DEV(d);
  pthread_mutex_lock(&g_ctx_mu);
  int ok = g_ctx[d].retained > 0;
  if (ok) g_ctx[d].retained--;
  pthread_mutex_unlock(&g_ctx_mu);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuCtxSetCurrent(CUcontext c) {
  COUNT(cuCtxSetCurrent);
  CHECK_INIT();
  if (c && (c < g_ctx || c >= g_ctx + TWIN_MAX_GPUS || !c->null_stream)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = c;
  return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *c) {
  COUNT(cuCtxGetCurrent);
  CHECK_INIT();
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = t_current;
  return CUDA_SUCCESS;
}

/* Every stream made on a device, for cuCtxSynchronize. */
static struct twin_stream *g_streams[4096];
static int g_nstreams;

/* Wait for everything queued so far on every stream of the current context's device. */
static void drain_device(void) {
  struct twin_stream *s = t_current->null_stream;
  wait_ticket(s, s->queued);
  pthread_mutex_lock(&g_ctx_mu);
  int n = g_nstreams;
  pthread_mutex_unlock(&g_ctx_mu);
  for (int i = 0; i < n; i++)
    if (g_streams[i]->dev == t_current->dev) wait_ticket(g_streams[i], g_streams[i]->queued);
}

API CUresult cuCtxSynchronize(void) {
  COUNT(cuCtxSynchronize);
  CHECK_INIT();
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  drain_device();
  return g_sticky;
}

API CUresult cuStreamCreate(CUstream *out, unsigned flags) {
  COUNT(cuStreamCreate);
  CHECK_INIT();
  if (!out || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  struct twin_stream *s = stream_new(t_current->dev);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_ctx_mu);
  if (g_nstreams < (int)(sizeof g_streams / sizeof g_streams[0])) g_streams[g_nstreams++] = s;
  pthread_mutex_unlock(&g_ctx_mu);
  *out = s;
  return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(CUstream h) {
  COUNT(cuStreamDestroy_v2);
  CHECK_INIT();
  if ((uintptr_t)h <= 2 || h->destroyed) return CUDA_ERROR_INVALID_HANDLE;
  /* As CUDA: returns at once; queued work still runs; the worker ends after it. */
  pthread_mutex_lock(&h->mu);
  h->destroyed = 1;
  h->quit = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(CUstream h) {
  COUNT(cuStreamQuery);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (g_sticky) return g_sticky;
  return idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuStreamSynchronize(CUstream h) {
  COUNT(cuStreamSynchronize);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  wait_ticket(s, s->queued);
  return g_sticky;
}

/* ------------------------------------------------------------------ events */
struct twin_event {
  unsigned flags;
  unsigned long long recorded, done;
  double t;
  int destroyed;
};
static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ev_cv = PTHREAD_COND_INITIALIZER;

struct ev_arg {
  struct twin_event *e;
  unsigned long long gen;
};

static void ev_fire(void *p) {
  struct ev_arg *a = p;
  pthread_mutex_lock(&g_ev_mu);
  a->e->t = now_s();
  if (a->gen > a->e->done) a->e->done = a->gen;
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
  free(a);
}

static int bad_event(CUevent e, const char *api) {
  if (!e) return 1;
  if (e->destroyed) {
    complain("%s: event %#llx used after cuEventDestroy", api, (unsigned long long)(uintptr_t)e);
    return 1;
  }
  return 0;
}

static int g_live_events;

API CUresult cuEventCreate(CUevent *out, unsigned flags) {
  COUNT(cuEventCreate);
  CHECK_INIT();
  if (!out || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  struct twin_event *e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->flags = flags;
  *out = e;
  __atomic_add_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

/* Events created and not destroyed in this process (tests: tests/backend_twin.rs). */
API int burnin_twin_live_events(void) { return __atomic_load_n(&g_live_events, __ATOMIC_SEQ_CST); }

API CUresult cuEventDestroy_v2(CUevent e) {
  COUNT(cuEventDestroy_v2);
  CHECK_INIT();
  if (bad_event(e, "cuEventDestroy")) return CUDA_ERROR_INVALID_HANDLE;
  e->destroyed = 1; /* kept: queued work may still fire it, and reuse is reported */
  __atomic_sub_fetch(&g_live_events, 1, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

/* Queue fn on s with e's record generation: a new record (record = 1) or the latest. */
static CUresult queue_event(struct twin_stream *s, CUevent e, int record, void (*fn)(void *)) {
  struct ev_arg *a = malloc(sizeof *a);
  if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_ev_mu);
  a->e = e;
  a->gen = record ? ++e->recorded : e->recorded;
  pthread_mutex_unlock(&g_ev_mu);
  enqueue(s, fn, a);
  return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream h) {
  COUNT(cuEventRecord);
  CHECK_INIT();
  if (bad_event(e, "cuEventRecord")) return CUDA_ERROR_INVALID_HANDLE;
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  return queue_event(s, e, 1, ev_fire);
}

static void ev_wait(void *p) {
  struct ev_arg *a = p;
  pthread_mutex_lock(&g_ev_mu);
  while (a->e->done < a->gen) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
  pthread_mutex_unlock(&g_ev_mu);
  free(a);
}

/* Work queued on h after this call waits for the event's latest record (none: no
 * wait), as the driver orders one stream after another. Not counted with the entry
 * points above: burnin calls it only for libtorch's buffers (tests/backend_twin.rs). */
API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags) {
  CHECK_INIT();
  if (bad_event(e, "cuStreamWaitEvent")) return CUDA_ERROR_INVALID_HANDLE;
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE; /* CU_EVENT_WAIT_DEFAULT, _EXTERNAL */
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  return queue_event(s, e, 0, ev_wait);
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  COUNT(cuEventElapsedTime);
  CHECK_INIT();
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (bad_event(a, "cuEventElapsedTime") || bad_event(b, "cuEventElapsedTime")) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & 0x2) return CUDA_ERROR_INVALID_HANDLE; /* CU_EVENT_DISABLE_TIMING */
  pthread_mutex_lock(&g_ev_mu);
  int recorded = a->recorded && b->recorded;
  int complete = a->done == a->recorded && b->done == b->recorded;
  double d = b->t - a->t;
  pthread_mutex_unlock(&g_ev_mu);
  if (!recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (!complete) return CUDA_ERROR_NOT_READY;
  *ms = (float)(d * 1e3);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ memory */
typedef struct {
  CUdeviceptr base;
  size_t size;
  unsigned char *host;
  int dev, freed, mapped;
} alloc_t;
static alloc_t *g_allocs;
static size_t g_nallocs, g_cap;
static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr g_next[TWIN_MAX_GPUS];
static unsigned long long g_used[TWIN_MAX_GPUS];

#define ROUND(x, a) (((x) + (a) - 1) / (a) * (a))

static CUresult mem_alloc(CUdeviceptr *out, size_t size, int dev) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rsize = ROUND(size, 256);
  pthread_mutex_lock(&g_mem_mu);
  if (g_used[dev] + rsize > twin_gpu_memory()) {
    pthread_mutex_unlock(&g_mem_mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  unsigned char *host;
  int mapped = rsize >= (1u << 20);
  if (mapped) {
    host = mmap(NULL, rsize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (host == MAP_FAILED) host = NULL;
  } else {
    host = calloc(1, rsize);
  }
  if (!host) {
    pthread_mutex_unlock(&g_mem_mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!g_next[dev]) g_next[dev] = 0x7a0000000000ULL + ((CUdeviceptr)dev << 40);
  CUdeviceptr base = g_next[dev];
  /* never reused, with a gap after each: a stale or overrunning pointer is caught */
  g_next[dev] += ROUND(rsize, 1u << 20) + (1u << 20);
  if (g_nallocs == g_cap) {
    g_cap = g_cap ? 2 * g_cap : 256;
    g_allocs = realloc(g_allocs, g_cap * sizeof *g_allocs);
    if (!g_allocs) abort();
  }
  /* keep the table sorted by base */
  size_t at = g_nallocs;
  while (at > 0 && g_allocs[at - 1].base > base) at--;
  memmove(&g_allocs[at + 1], &g_allocs[at], (g_nallocs - at) * sizeof *g_allocs);
  g_allocs[at] = (alloc_t){base, rsize, host, dev, 0, mapped};
  g_nallocs++;
  g_used[dev] += rsize;
  pthread_mutex_unlock(&g_mem_mu);
  *out = base;
  return CUDA_SUCCESS;
}

/* The allocation holding [p, p + len), or NULL (reported as `api` did it). */
static alloc_t *find(CUdeviceptr p, size_t len, const char *api) {
  size_t lo = 0, hi = g_nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_allocs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  alloc_t *a = lo ? &g_allocs[lo - 1] : NULL;
  if (!a || p >= a->base + a->size) {
    complain("%s: device pointer %#llx was not allocated by the twin", api, p);
    return NULL;
  }
  if (a->freed) {
    complain("%s: device pointer %#llx used after it was freed", api, p);
    return NULL;
  }
  if (len > a->size - (p - a->base)) {
    complain("%s: access past the end of the allocation at %#llx", api, p);
    return NULL;
  }
  return a;
}

/* Host address of [p, p + len), or NULL (reported). */
static unsigned char *host_ptr(CUdeviceptr p, size_t len, const char *api) {
  pthread_mutex_lock(&g_mem_mu);
  alloc_t *a = find(p, len, api);
  unsigned char *h = a ? a->host + (p - a->base) : NULL;
  pthread_mutex_unlock(&g_mem_mu);
  return h;
}

static CUresult mem_free(CUdeviceptr p, const char *api) {
  pthread_mutex_lock(&g_mem_mu);
  alloc_t *a = find(p, 0, api);
  if (!a || a->base != p) {
    if (a) complain("%s: %#llx is not the start of an allocation", api, p);
    pthread_mutex_unlock(&g_mem_mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (a->mapped) munmap(a->host, a->size);
  else free(a->host);
  a->host = NULL;
  a->freed = 1;
  g_used[a->dev] -= a->size;
  pthread_mutex_unlock(&g_mem_mu);
  return CUDA_SUCCESS;
}

/* A bad pointer met by queued work: the context is broken from now on. */
static void fault(void) { g_sticky = CUDA_ERROR_ILLEGAL_ADDRESS; }

/* ---- pinned host memory: the ranges cuMemHostAlloc handed out */
#define MAX_PINNED 256
static struct {
  unsigned char *p;
  size_t n;
} g_pinned[MAX_PINNED];
static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;

/* Whether [p, p + n) lies in one pinned allocation. */
static int is_pinned(const void *p, size_t n) {
  const unsigned char *c = p;
  int r = 0;
  pthread_mutex_lock(&g_pin_mu);
  for (int i = 0; i < MAX_PINNED && !r; i++)
    r = g_pinned[i].p && c >= g_pinned[i].p && n <= g_pinned[i].n - (size_t)(c - g_pinned[i].p);
  pthread_mutex_unlock(&g_pin_mu);
  return r;
}

API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags) {
  COUNT(cuMemHostAlloc);
  CHECK_INIT();
  if (!pp || !size || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  void *p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_pin_mu);
  int i = 0;
  while (i < MAX_PINNED && g_pinned[i].p) i++;
  if (i < MAX_PINNED) {
    g_pinned[i].p = p;
    g_pinned[i].n = size;
  }
  pthread_mutex_unlock(&g_pin_mu);
  if (i == MAX_PINNED) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pp = p;
  return CUDA_SUCCESS;
}

API CUresult cuMemFreeHost(void *p) {
  COUNT(cuMemFreeHost);
  CHECK_INIT();
  pthread_mutex_lock(&g_pin_mu);
  int i = 0;
  while (i < MAX_PINNED && (!p || g_pinned[i].p != p)) i++;
  if (i < MAX_PINNED) g_pinned[i].p = NULL;
  pthread_mutex_unlock(&g_pin_mu);
  if (i == MAX_PINNED) {
    complain("cuMemFreeHost: %s%#llx is not pinned memory from cuMemHostAlloc", "", (unsigned long long)(uintptr_t)p);
    return CUDA_ERROR_INVALID_VALUE;
  }
  free(p);
  return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size) {
  COUNT(cuMemAlloc_v2);
  CHECK_INIT();
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  return mem_alloc(out, size, t_current->dev);
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
  COUNT(cuMemFree_v2);
  CHECK_INIT();
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  drain_device(); /* cuMemFree synchronises the device first */
  return mem_free(p, "cuMemFree");
}

API CUresult cuMemAllocAsync(CUdeviceptr *out, size_t size, CUstream h) {
  COUNT(cuMemAllocAsync);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  return mem_alloc(out, size, s->dev);
}

static void free_later(void *p) {
  mem_free((CUdeviceptr)(uintptr_t)p, "cuMemFreeAsync (when it ran)");
}

API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream h) {
  COUNT(cuMemFreeAsync);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (!host_ptr(p, 0, "cuMemFreeAsync")) return CUDA_ERROR_INVALID_VALUE;
  enqueue(s, free_later, (void *)(uintptr_t)p);
  return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  COUNT(cuMemGetInfo_v2);
  CHECK_INIT();
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  if (!free_b || !total) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mem_mu);
  *total = (size_t)twin_gpu_memory();
  *free_b = *total - (size_t)g_used[t_current->dev];
  pthread_mutex_unlock(&g_mem_mu);
  return CUDA_SUCCESS;
}

struct copy {
  CUdeviceptr dst, src; /* device ends (0 when the end is host memory) */
  unsigned char *hdst;
  const unsigned char *hsrc;
  unsigned char *staged; /* owned copy of a pageable source */
  size_t n;
  int value; /* memset */
  int ecc;   /* TWIN_CUDA_ECC_COPY: this copy meets an uncorrectable ECC error */
  const char *api;
};

static void do_copy(void *p) {
  struct copy *c = p;
  /* TWIN_COPY_MS: every copy on a stream starts that much later (a slow link), so a
   * test can tell whether later work waited for it */
  long late = twin_env_long("TWIN_COPY_MS", 0);
  if (late > 0) {
    struct timespec t = {late / 1000, (late % 1000) * 1000000L};
    while (nanosleep(&t, &t) == -1 && errno == EINTR) {
    }
  }
  if (c->ecc) {
    /* as a GPU whose memory fails under the copy: the context's error is sticky */
    g_sticky = CUDA_ERROR_ECC_UNCORRECTABLE;
    fprintf(stderr, "burnin-twin: %s: uncorrectable ECC error (TWIN_CUDA_ECC_COPY)\n", c->api);
    free(c->staged);
    free(c);
    return;
  }
  unsigned char *d = c->dst ? host_ptr(c->dst, c->n, c->api) : c->hdst;
  const unsigned char *s = c->src ? host_ptr(c->src, c->n, c->api) : c->hsrc;
  if (c->value >= 0 && d) memset(d, c->value, c->n);
  else if (d && s) memmove(d, s, c->n);
  else fault();
  free(c->staged);
  free(c);
}

static struct copy *new_copy(const char *api) {
  struct copy *c = calloc(1, sizeof *c);
  if (c) {
    c->api = api;
    c->value = -1;
  }
  return c;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream h) {
  COUNT(cuMemcpyHtoDAsync_v2);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !host_ptr(dst, n, "cuMemcpyHtoDAsync")) return CUDA_ERROR_INVALID_VALUE;
  struct copy *c = new_copy("cuMemcpyHtoDAsync");
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  __atomic_add_fetch(&g_htod_bytes, n, __ATOMIC_RELAXED);
  if (is_pinned(src, n)) {
    c->hsrc = src; /* pinned: read when the copy runs */
  } else {
    /* a pageable source is staged before the call returns, as the driver does */
    c->staged = malloc(n);
    if (!c->staged) {
      free(c);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(c->staged, src, n);
    c->hsrc = c->staged;
  }
  c->dst = dst;
  c->n = n;
  static unsigned long long htod;
  const char *ecc = getenv("TWIN_CUDA_ECC_COPY");
  c->ecc = ecc && strtoull(ecc, NULL, 10) == __atomic_add_fetch(&htod, 1, __ATOMIC_SEQ_CST);
  enqueue(s, do_copy, c);
  return CUDA_SUCCESS;
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream h) {
  COUNT(cuMemcpyDtoHAsync_v2);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !host_ptr(src, n, "cuMemcpyDtoHAsync")) return CUDA_ERROR_INVALID_VALUE;
  struct copy *c = new_copy("cuMemcpyDtoHAsync");
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->hdst = dst;
  c->src = src;
  c->n = n;
  __atomic_add_fetch(&g_dtoh_bytes, n, __ATOMIC_RELAXED);
  int pinned = is_pinned(dst, n);
  unsigned long long t = enqueue(s, do_copy, c);
  if (pinned) return CUDA_SUCCESS; /* pinned: asynchronous, as on a GPU */
  /* into pageable memory the call returns once the copy is done */
  wait_ticket(s, t);
  return g_sticky;
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  COUNT(cuMemcpyDtoDAsync_v2);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!host_ptr(dst, n, "cuMemcpyDtoDAsync") || !host_ptr(src, n, "cuMemcpyDtoDAsync")) return CUDA_ERROR_INVALID_VALUE;
  struct copy *c = new_copy("cuMemcpyDtoDAsync");
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->dst = dst;
  c->src = src;
  c->n = n;
  enqueue(s, do_copy, c);
  return CUDA_SUCCESS;
}

API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h) {
  COUNT(cuMemsetD8Async);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (!host_ptr(dst, n, "cuMemsetD8Async")) return CUDA_ERROR_INVALID_VALUE;
  struct copy *c = new_copy("cuMemsetD8Async");
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->dst = dst;
  c->n = n;
  c->value = v;
  enqueue(s, do_copy, c);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ peers */
/* Whether "src>dst" is an item of the comma list in env var `name`. */
static int pair_listed(const char *name, int src, int dst) {
  const char *p = getenv(name);
  while (p && *p) {
    int a, b, used = 0;
    if (sscanf(p, "%d>%d%n", &a, &b, &used) != 2) break;
    if (a == src && b == dst) return 1;
    p += used;
    while (*p == ',' || *p == ' ') p++;
  }
  return 0;
}

static unsigned char g_peer_on[TWIN_MAX_GPUS][TWIN_MAX_GPUS];

API CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
  COUNT(cuDeviceCanAccessPeer);
  CHECK_INIT();
  CHECK_DEV(d);
  CHECK_DEV(peer);
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  *can = d != peer && !pair_listed("TWIN_PEER_DENY", d, peer);
  return CUDA_SUCCESS;
}

API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  COUNT(cuCtxEnablePeerAccess);
  CHECK_INIT();
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  if (!peer || peer < g_ctx || peer >= g_ctx + TWIN_MAX_GPUS || !peer->null_stream) return CUDA_ERROR_INVALID_CONTEXT;
  int a = t_current->dev, b = peer->dev;
  if (a == b) return CUDA_ERROR_INVALID_DEVICE;
  if (pair_listed("TWIN_PEER_DENY", a, b)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (g_peer_on[a][b]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  g_peer_on[a][b] = 1;
  return CUDA_SUCCESS;
}

/* Peer copies take a modelled time, TWIN_PEER_COPY_MS (default 40 ms) from their start
 * whatever the host's memcpy took, so a healthy matrix reads even under a loaded CI
 * machine; TWIN_PEER_SLOW's pairs take three times as long. A stream worker woken
 * late adds its lateness to a copy's events: copies long enough (40 ms) that a loaded
 * machine's few ms do not read as a slow pair (at 10 ms one read 0.72x the median). */
static void copy_for(void *p, long times) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  do_copy(p);
  long ms = twin_env_long("TWIN_PEER_COPY_MS", 40) * times;
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
  }
}
static void peer_copy(void *p) { copy_for(p, 1); }
static void slow_copy(void *p) { copy_for(p, 3); }

API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                               CUstream h) {
  COUNT(cuMemcpyPeerAsync);
  CHECK_INIT();
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (!dctx || !sctx || !dctx->null_stream || !sctx->null_stream) return CUDA_ERROR_INVALID_CONTEXT;
  if (n == 0) return CUDA_SUCCESS;
  if (!host_ptr(dst, n, "cuMemcpyPeerAsync") || !host_ptr(src, n, "cuMemcpyPeerAsync")) return CUDA_ERROR_INVALID_VALUE;
  struct copy *c = new_copy("cuMemcpyPeerAsync");
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  c->dst = dst;
  c->src = src;
  c->n = n;
  enqueue(s, pair_listed("TWIN_PEER_SLOW", sctx->dev, dctx->dev) ? slow_copy : peer_copy, c);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ modules */
/* burnin's two PTX images: kernels.ptx (fill, check, fma; sm_52) and sdc.ptx (the SDC
 * vote's operands, mma, pattern and reduce; sm_80). */
enum { FN_FILL, FN_CHECK, FN_FMA, FN_OPERANDS, FN_MMA, FN_PATTERN, FN_REDUCE, FN_MEMTEST, FN_N };
static const char *const fn_names[FN_N] = {"burnin_fill",        "burnin_check",       "burnin_fma",
                                           "burnin_sdc_operands", "burnin_mma",         "burnin_sdc_pattern",
                                           "burnin_sdc_reduce",   "burnin_memtest"};
struct twin_module {
  int unloaded;
  int has[FN_N];           /* the entries the image holds */
  unsigned maxntid[FN_N];  /* each kernel's .maxntid (0: none), by FN_* */
};
struct twin_fn {
  int which;
  struct twin_module *m;
};

static int g_live_modules;

API CUresult cuModuleLoadData(CUmodule *out, const void *image) {
  COUNT(cuModuleLoadData);
  CHECK_INIT();
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  if (!t_current) return CUDA_ERROR_INVALID_CONTEXT;
  const char *ptx = image;
  /* burnin ships PTX text with its kernels; anything else is not an image the twin
   * can run (it has no JIT: it runs the host build of kernels.cu and sdc.cu). */
  const char *target = strstr(ptx, ".target sm_");
  if (!strstr(ptx, ".version") || !target) return CUDA_ERROR_INVALID_IMAGE;
  /* The JIT cannot build code for a newer GPU than this one. */
  if (atoi(target + 11) > twin_cc()) {
    complain("%s: PTX for sm_%llu on an older GPU (TWIN_CC)", "cuModuleLoadData",
             (unsigned long long)atoi(target + 11));
    return CUDA_ERROR_INVALID_PTX;
  }
  struct twin_module *m = calloc(1, sizeof *m);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  int found = 0;
  for (int i = 0; i < FN_N; i++) {
    char entry[64];
    snprintf(entry, sizeof entry, ".entry %s(", fn_names[i]);
    const char *e = strstr(ptx, entry), *body = e ? strchr(e, '{') : NULL, *n = e ? strstr(e, ".maxntid ") : NULL;
    if (!e) continue;
    m->has[i] = 1;
    found++;
    /* The JIT honours each entry's .maxntid: a launch with a larger block fails. */
    if (n && n < body) m->maxntid[i] = (unsigned)strtoul(n + 9, NULL, 10);
  }
  int kernels = m->has[FN_FILL] && m->has[FN_CHECK] && m->has[FN_FMA] && m->has[FN_MEMTEST];
  int sdc = m->has[FN_OPERANDS] && m->has[FN_MMA] && m->has[FN_PATTERN] && m->has[FN_REDUCE];
  if (found != (kernels ? 4 : 0) + (sdc ? 4 : 0) || !found) {
    free(m);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  *out = m;
  __atomic_add_fetch(&g_live_modules, 1, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

/* Modules loaded and not unloaded in this process (tests: tests/backend_twin.rs). */
API int burnin_twin_live_modules(void) { return __atomic_load_n(&g_live_modules, __ATOMIC_SEQ_CST); }

API CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
  COUNT(cuModuleGetFunction);
  CHECK_INIT();
  if (!out || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  if (m->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  int which = -1;
  for (int i = 0; i < FN_N; i++)
    if (m->has[i] && !strcmp(name, fn_names[i])) which = i;
  if (which < 0) return CUDA_ERROR_NOT_FOUND;
  struct twin_fn *f = calloc(1, sizeof *f);
  if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
  f->which = which;
  f->m = m;
  *out = f;
  return CUDA_SUCCESS;
}

API CUresult cuModuleUnload(CUmodule m) {
  COUNT(cuModuleUnload);
  CHECK_INIT();
  if (!m || m->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  m->unloaded = 1;
  __atomic_sub_fetch(&g_live_modules, 1, __ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

struct launch {
  int which;
  unsigned grid, block; /* blocks and threads per block (burnin's kernels are 1-D) */
  unsigned long long a[8];
  unsigned dtype;
  float fa, fb;
  long long corrupt; /* burnin_fma: the element TWIN_FMA_WRONG flips, or -1 */
};

static size_t dtype_size(unsigned d) {
  static const size_t s[] = {4, 8, 2, 2, 4, 1};
  return d < 6 ? s[d] : 0;
}

/* Run one launch: the kernel once for every (block, thread) of its grid, in turn, with
 * the indices set as the GPU's registers would be. */
static void run_grid(struct launch *l, void (*one)(struct launch *)) {
  host_nctaid = l->grid;
  host_ntid = l->block;
  for (u64 b = 0; b < l->grid; b++)
    for (u64 t = 0; t < l->block; t++) {
      host_ctaid = b;
      host_tid = t;
      one(l);
    }
}

/* The launch's buffers, host addresses, for the per-thread calls (the stream worker's own). */
static __thread unsigned char *t_buf, *t_aux, *t_ctr;
static void fma_one(struct launch *l) { burnin_fma((float *)t_buf, l->a[1], l->a[2], l->fa, l->fb); }
static void fill_one(struct launch *l) { burnin_fill(t_buf, l->a[1], l->a[2], t_aux, l->a[4], l->a[5]); }
static void check_one(struct launch *l) {
  burnin_check(t_buf, l->dtype, l->a[2], (const double *)t_aux, l->a[4], l->a[5], l->a[6], (u64 *)t_ctr);
}
static void operands_one(struct launch *l) { burnin_sdc_operands((u16 *)t_buf, (u16 *)t_aux, l->a[2], l->a[3]); }
static void mma_one(struct launch *l) { burnin_mma((const u16 *)t_buf, (const u16 *)t_aux, (float *)t_ctr, l->a[3]); }
static void pattern_one(struct launch *l) { burnin_sdc_pattern((u64 *)t_buf, l->a[1], l->a[2]); }
static void reduce_one(struct launch *l) { burnin_sdc_reduce((const u64 *)t_buf, l->a[1], (double *)t_aux); }
static void memtest_one(struct launch *l) {
  burnin_memtest((u64 *)t_buf, l->a[1], l->a[2], l->a[3], l->a[4], l->a[5], (u64 *)t_ctr);
}

/* TWIN_HBM_STUCK=ADDRESS:BIT:VALUE — the bit BIT of the 8-byte word at device address
 * ADDRESS (hex) is stuck at VALUE (0 or 1): after every memory-test launch that wrote
 * it, it holds VALUE whatever was written (a memory cell that cannot change). */
static void hbm_stuck(const struct launch *l, u64 *buf) {
  const char *e = getenv("TWIN_HBM_STUCK");
  unsigned long long addr = 0, bit = 0, value = 0;
  if (!e || sscanf(e, "%llx:%llu:%llu", &addr, &bit, &value) != 3 || bit > 63) return;
  if (addr < l->a[0] || addr >= l->a[0] + 8 * l->a[1] || (addr - l->a[0]) % 8) return;
  u64 *w = &buf[(addr - l->a[0]) / 8];
  *w = value ? (*w | (1ULL << bit)) : (*w & ~(1ULL << bit));
}

/* The SDC kernels' buffers (device addresses in a[]), as host addresses: NULL when one
 * is not a live allocation of that size (reported). */
static int sdc_buffers(const struct launch *l, unsigned char *p[3]) {
  const char *name = fn_names[l->which];
  unsigned long long n = l->a[2];
  p[0] = p[1] = p[2] = (unsigned char *)1;
  switch (l->which) {
    case FN_OPERANDS: p[0] = host_ptr(l->a[0], n * n * 2, name), p[1] = host_ptr(l->a[1], n * n * 2, name); break;
    case FN_MMA:
      n = l->a[3];
      p[0] = host_ptr(l->a[0], n * n * 2, name), p[1] = host_ptr(l->a[1], n * n * 2, name);
      p[2] = host_ptr(l->a[2], n * n * 4, name);
      break;
    case FN_PATTERN: p[0] = host_ptr(l->a[0], l->a[1] * 8, name); break;
    default: p[0] = host_ptr(l->a[0], l->a[1] * 64 * 8, name), p[1] = host_ptr(l->a[2], l->a[1] * 8, name); break;
  }
  return p[0] && p[1] && p[2];
}

static void run_kernel(void *p) {
  struct launch *l = p;
  if (l->which >= FN_OPERANDS && l->which != FN_MEMTEST) {
    static void (*const one[])(struct launch *) = {operands_one, mma_one, pattern_one, reduce_one};
    unsigned char *b[3];
    if (sdc_buffers(l, b)) {
      t_buf = b[0], t_aux = b[1], t_ctr = b[2];
      run_grid(l, one[l->which - FN_OPERANDS]);
    } else {
      fault();
    }
  } else if (l->which == FN_MEMTEST) {
    unsigned char *buf = host_ptr(l->a[0], l->a[1] * 8, "burnin_memtest");
    unsigned char *ctr = host_ptr(l->a[6], (2 + 2 * MEM_SAMPLE) * 8, "burnin_memtest");
    if (buf && ctr) {
      t_buf = buf;
      t_ctr = ctr;
      run_grid(l, memtest_one);
      if (l->a[5] == 0 || l->a[5] == 2) hbm_stuck(l, (u64 *)buf);
    } else {
      fault();
    }
  } else if (l->which == FN_FMA) {
    float *out = (float *)host_ptr(l->a[0], l->a[1] * 4, "burnin_fma");
    if (out) {
      t_buf = (unsigned char *)out;
      run_grid(l, fma_one);
      if (l->corrupt >= 0) {
        unsigned u;
        memcpy(&u, &out[l->corrupt], 4);
        u ^= 1;
        memcpy(&out[l->corrupt], &u, 4);
      }
    } else {
      fault();
    }
  } else if (l->which == FN_FILL) {
    unsigned long long es = l->a[1], len = l->a[2], period = l->a[4];
    unsigned char *dst = host_ptr(l->a[0], len * es, "burnin_fill");
    unsigned char *table = host_ptr(l->a[3], period * es, "burnin_fill");
    if (dst && table) {
      t_buf = dst;
      t_aux = table;
      run_grid(l, fill_one);
    } else {
      fault();
    }
  } else {
    unsigned long long len = l->a[2], period = l->a[4];
    size_t es = dtype_size(l->dtype);
    unsigned char *buf = host_ptr(l->a[0], len * es, "burnin_check");
    unsigned char *wt = host_ptr(l->a[3], period * 16, "burnin_check");
    unsigned char *ctr = host_ptr(l->a[7], (2 + SAMPLE) * 8, "burnin_check");
    if (buf && wt && ctr) {
      t_buf = buf;
      t_aux = wt;
      t_ctr = ctr;
      run_grid(l, check_one);
    } else {
      fault();
    }
  }
  free(l);
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream h, void **params, void **extra) {
  COUNT(cuLaunchKernel);
  CHECK_INIT();
  if (!f || f->m->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  if (!params || extra || shmem) return CUDA_ERROR_INVALID_VALUE;
  if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (gy != 1 || gz != 1 || by != 1 || bz != 1) {
    complain("%s: burnin's kernels are 1-D; got a y or z dimension of %llu", "cuLaunchKernel",
             (unsigned long long)(gy * gz * by * bz));
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned maxntid = f->m->maxntid[f->which];
  if (maxntid && bx > maxntid) {
    complain("%s: a block of %llu threads is more than the kernel's .maxntid", "cuLaunchKernel", bx);
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  }
  struct twin_stream *s = resolve(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (s->dev >= 0 && s->dev < TWIN_MAX_GPUS) {
    static unsigned long long mma_launches[TWIN_MAX_GPUS];
    static int lost[TWIN_MAX_GPUS];
    const char *lf = getenv("TWIN_LAUNCH_FAIL");
    int gpu = -1;
    unsigned long long nth = 0;
    if (lf && sscanf(lf, "%d:%llu", &gpu, &nth) == 2 && gpu == s->dev) {
      if (f->which == FN_MMA && __atomic_add_fetch(&mma_launches[gpu], 1, __ATOMIC_SEQ_CST) >= nth)
        __atomic_store_n(&lost[gpu], 1, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&lost[gpu], __ATOMIC_SEQ_CST)) return CUDA_ERROR_LAUNCH_FAILED;
    }
  }
  struct launch *l = calloc(1, sizeof *l);
  if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
  l->which = f->which;
  l->grid = gx;
  l->block = bx;
  l->corrupt = -1;
  /* the parameters are copied at launch, as the driver does */
  if (f->which == FN_MEMTEST) {
    for (int i = 0; i < 7; i++) l->a[i] = *(unsigned long long *)params[i];
    if (!l->a[1] || l->a[5] > 3 || !host_ptr(l->a[0], l->a[1] * 8, "burnin_memtest") ||
        !host_ptr(l->a[6], (2 + 2 * MEM_SAMPLE) * 8, "burnin_memtest")) {
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
  } else if (f->which >= FN_OPERANDS) {
    int np = f->which == FN_OPERANDS || f->which == FN_MMA ? 4 : 3;
    for (int i = 0; i < np; i++) l->a[i] = *(unsigned long long *)params[i];
    unsigned char *b[3];
    /* mma: the order must be a multiple of 16 (the tiles are 16 x 8, k steps of 16) */
    if ((f->which == FN_MMA && (!l->a[3] || l->a[3] % 16)) || !sdc_buffers(l, b)) {
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
  } else if (f->which == FN_FMA) {
    for (int i = 0; i < 3; i++) l->a[i] = *(unsigned long long *)params[i];
    l->fa = *(float *)params[3];
    l->fb = *(float *)params[4];
    if (!l->a[1] || !host_ptr(l->a[0], l->a[1] * 4, "burnin_fma")) {
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
    static unsigned long long launches[TWIN_MAX_GPUS];
    unsigned long long k = __atomic_add_fetch(&launches[s->dev], 1, __ATOMIC_RELAXED);
    if (twin_env_long("TWIN_FMA_WRONG", -1) == s->dev) {
      const char *at = getenv("TWIN_FMA_WRONG_AT");
      unsigned long long n = l->a[1];
      l->corrupt = (long long)(at && !strcmp(at, "first")    ? 0
                               : at && !strcmp(at, "middle") ? n / 2
                               : at && !strcmp(at, "last")   ? n - 1
                                                             : (k * 7919ULL) % n);
    }
  } else if (f->which == FN_FILL) {
    for (int i = 0; i < 6; i++) l->a[i] = *(unsigned long long *)params[i];
    unsigned long long es = l->a[1];
    if ((es != 1 && es != 2 && es != 4 && es != 8) || !l->a[4] || !host_ptr(l->a[0], l->a[2] * es, "burnin_fill") ||
        !host_ptr(l->a[3], l->a[4] * es, "burnin_fill")) {
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
  } else {
    for (int i = 0; i < 8; i++) l->a[i] = i == 1 ? 0 : *(unsigned long long *)params[i];
    l->dtype = *(unsigned *)params[1];
    size_t es = dtype_size(l->dtype);
    if (!es || !l->a[4] || !host_ptr(l->a[0], l->a[2] * es, "burnin_check") ||
        !host_ptr(l->a[3], l->a[4] * 16, "burnin_check") || !host_ptr(l->a[7], (2 + SAMPLE) * 8, "burnin_check")) {
      free(l);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  enqueue(s, run_kernel, l);
  return CUDA_SUCCESS;
}

/* Blocks of blockSize threads one SM holds: 2048 threads an SM (Hopper), capped by
 * TWIN_OCCUPANCY for burnin_fma (default 8: a burn that fits 32 registers; 6 models a
 * JIT that needed 40). */
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem) {
  COUNT(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  CHECK_INIT();
  if (!n || block <= 0 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (!f || f->m->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  if (smem > 0) return CUDA_ERROR_INVALID_VALUE; /* burnin's kernels use none */
  unsigned maxntid = f->m->maxntid[f->which];
  if (maxntid && (unsigned)block > maxntid) {
    *n = 0;
    return CUDA_SUCCESS;
  }
  int fit = 2048 / block;
  if (f->which == FN_FMA) {
    long cap = twin_env_long("TWIN_OCCUPANCY", 8);
    if (cap < fit) fit = (int)cap;
  }
  *n = fit;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ errors */
static const char *err_name(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_ECC_UNCORRECTABLE: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
    default: return NULL;
  }
}

API CUresult cuGetErrorName(CUresult e, const char **out) {
  COUNT_NOW(cuGetErrorName);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = err_name(e);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuGetErrorString(CUresult e, const char **out) {
  COUNT_NOW(cuGetErrorString);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  switch (e) {
    case CUDA_SUCCESS: *out = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *out = "invalid argument (burnin-twin)"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *out = "out of memory (burnin-twin)"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *out = "initialization error (burnin-twin)"; break;
    case CUDA_ERROR_STUB_LIBRARY: *out = "CUDA driver is a stub library (burnin-twin)"; break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *out = "too many resources requested for launch (burnin-twin)"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *out = "unspecified launch failure (burnin-twin)"; break;
    case CUDA_ERROR_NO_DEVICE: *out = "no CUDA-capable device is detected (burnin-twin)"; break;
    case CUDA_ERROR_INVALID_DEVICE: *out = "invalid device ordinal (burnin-twin)"; break;
    case CUDA_ERROR_INVALID_IMAGE: *out = "device kernel image is invalid (burnin-twin)"; break;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: *out = "peer access is not supported between these two devices (burnin-twin)"; break;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: *out = "peer access is already enabled (burnin-twin)"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *out = "invalid device context (burnin-twin)"; break;
    case CUDA_ERROR_INVALID_HANDLE: *out = "invalid resource handle (burnin-twin)"; break;
    case CUDA_ERROR_NOT_FOUND: *out = "named symbol not found (burnin-twin)"; break;
    case CUDA_ERROR_NOT_READY: *out = "device not ready (burnin-twin)"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *out = "an illegal memory access was encountered (burnin-twin)"; break;
    case CUDA_ERROR_ECC_UNCORRECTABLE: *out = "uncorrectable ECC error encountered (burnin-twin)"; break;
    case CUDA_ERROR_UNKNOWN: *out = "unknown error (burnin-twin)"; break;
    default: *out = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ for the NCCL twin */
/* Queue fn(arg) on stream h (NULL: the current context's default stream); 0 when h is
 * not a live stream. */
API int burnin_twin_enqueue(CUstream h, void (*fn)(void *), void *arg) {
  struct twin_stream *s = resolve(h);
  if (!s) return 0;
  enqueue(s, fn, arg);
  return 1;
}

/* How much work stream h was given so far (NULL: the current context's default
 * stream); 0 when h is not a live stream. */
API unsigned long long burnin_twin_stream_queued(CUstream h) {
  struct twin_stream *s = resolve(h);
  if (!s) return 0;
  pthread_mutex_lock(&s->mu);
  unsigned long long q = s->queued;
  pthread_mutex_unlock(&s->mu);
  return q;
}

/* Host address of device memory [p, p + len) (NULL, reported, when it is not valid);
 * a NULL from inside queued work breaks the context as a real fault would. */
API void *burnin_twin_host_ptr(CUdeviceptr p, size_t len, const char *who, int in_queued_work) {
  void *h = host_ptr(p, len, who);
  if (!h && in_queued_work) fault();
  return h;
}

/* The device (visible ordinal) whose memory p is, or -1. */
API int burnin_twin_ptr_device(CUdeviceptr p) {
  pthread_mutex_lock(&g_mem_mu);
  alloc_t *a = find(p, 0, "an NCCL buffer's device");
  int d = a ? a->dev : -1;
  pthread_mutex_unlock(&g_mem_mu);
  return d;
}

/* The device (visible ordinal) and physical twin GPU of the current context; -1 when
 * none is current. */
API int burnin_twin_current_device(int *physical) {
  if (!t_current) return -1;
  if (physical) *physical = g_phys[t_current->dev];
  return t_current->dev;
}
