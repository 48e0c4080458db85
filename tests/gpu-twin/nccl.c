/* The GPU twin's NCCL: libnccl.so.2 with the entry points burnin calls, computing every
 * collective for real on the CUDA twin's device memory, between processes.
 *
 * - A unique id carries a random key; ranks meet in a shared-memory segment named by
 *   it (/dev/shm, so the namespaces of the simulated cluster meet too). Each rank has
 *   a slot of TWIN_NCCL_SLOT_KIB (default 1024); a collective moves its message through
 *   the slots a chunk at a time between barriers, on the CUDA twin's stream (in order
 *   with burnin's kernels and copies).
 * - Non-blocking communicators (config.blocking = 0): init answers ncclInProgress and
 *   ncclCommGetAsyncError reports it until every rank has joined. ncclGroupEnd answers
 *   ncclInProgress and the group launches on the next ncclCommGetAsyncError: work
 *   queued on its stream in between, or another call on the communicator, is a race
 *   (ncclInvalidUsage; NCCL's rule is to poll until ncclSuccess first). ncclCommFinalize
 *   answers ncclInProgress once when the communicator ran work, ncclSuccess when not.
 * - A send or receive that fails inside a group is the group's error: ncclGroupEnd
 *   answers it and launches nothing of the group (NCCL's group error).
 * - ncclGetUniqueId with NCCL_SOCKET_IFNAME matching no interface that is up with an
 *   address fails as NCCL's bootstrap does ("Bootstrap : no socket interface found").
 * - ncclCommAbort ends every wait of this rank and tells the peers (their waits end
 *   with ncclRemoteError). A peer's abort fails the call waiting for it: the error is
 *   set before that call leaves the stream, so the stream is idle only after it.
 * - TWIN_NCCL_POLL_LAG_MS=N: once a communicator ran work, ncclCommGetAsyncError
 *   sleeps N ms between reading the state and answering it, as a poller descheduled
 *   on a loaded node answers a stale state (an error raised in between is seen only by
 *   the next poll).
 * - Faults by environment, "rank:call" with the world rank and this process's call
 *   number (1 = its first collective or group): TWIN_NCCL_HANG (that call never
 *   completes until aborted), TWIN_NCCL_ASYNC_ERROR (the communicator reports
 *   ncclRemoteError instead of running it), TWIN_NCCL_P2P_ERROR (the first send or
 *   receive of that group answers ncclSystemError), TWIN_NCCL_FINALIZE_HANG (with the
 *   process's Nth finalized communicator as the call: its finalize never completes,
 *   as with a peer gone), TWIN_NCCL_WRONG (from that call on, one
 *   element of this rank's result is wrong; see TWIN_NCCL_WRONG_AT below).
 * - As strict as NCCL where a mistake would hang, race or fail on a GPU: every rank
 *   publishes each call's parameters (collective, count, type, op, root, sequence
 *   number) and its sends' and receives' sizes per peer; a mismatch across ranks never
 *   completes (only an abort ends it, so burnin's watchdog names it) and is recorded
 *   on stderr ("burnin-twin: rank R: mismatch ..."). Two ranks of one host on one GPU
 *   fail init with ncclInvalidUsage ("Duplicate GPU detected"); a buffer of another
 *   device than the communicator's is ncclInvalidArgument; send and receive buffers
 *   that overlap other than in NCCL's exact in-place forms (or a send and a receive
 *   of one group) are reported as a race (ncclInvalidUsage, "burnin-twin: race").
 * - Floating-point reductions round as NCCL's do: avg pre-multiplies every input by
 *   1/n (rounded to the type), f16/bf16 round at every step, and the order of the
 *   ranks' terms rotates along the ring (from rank (i / 256) mod n for element i), so
 *   burnin's tolerances meet realistic rounding.
 * - TWIN_NCCL_VERSION (e.g. 2.23.4) is the version reported; with TWIN_NCCL_LAYOUTS
 *   (burnin's config-layouts.tsv, made from NCCL's real headers) init checks the
 *   ncclConfig_t it is given against that version's layout: size, magic, version, and
 *   every field's value (undefined or in NCCL's range), as NCCL's parser does.
 * - TWIN_NCCL_WRONG flips a high bit of one element of the result, at
 *   TWIN_NCCL_WRONG_AT = first, middle, last or random (default: seeded by the call).
 * - NCCL_DEBUG=INFO (NCCL_DEBUG_FILE with %h/%p): NCCL-format INFO lines, version
 *   "2.28.9+burnin-twin" (or TWIN_NCCL_VERSION's), P2P/CUMEM between ranks of one host and NET/Socket between
 *   hosts, so burnin's transport parser reads the twin as it reads NCCL.
 */
#define _GNU_SOURCE
#include "twin.h"

#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef int ncclResult_t;
enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
typedef struct {
  char internal[128];
} ncclUniqueId;
/* The head of ncclConfig_t, the same in every version that has it. */
typedef struct {
  size_t size;
  unsigned magic;
  unsigned version;
  int blocking;
} config_head;
typedef struct twin_comm *ncclComm_t;

/* The CUDA twin (linked: libcuda.so.1 of the same folder). */
extern int burnin_twin_enqueue(void *stream, void (*fn)(void *), void *arg);
extern void *burnin_twin_host_ptr(unsigned long long p, size_t len, const char *who, int in_queued_work);
extern int burnin_twin_current_device(int *physical);
extern int burnin_twin_ptr_device(unsigned long long p);
extern unsigned long long burnin_twin_stream_queued(void *stream);

#define ID_MAGIC "BNTWIN01"

/* ------------------------------------------------------------------ version, layout */
static int g_version_code = 22809; /* 2.28.9 */
static char g_version[32] = "2.28.9";
static char g_version_text[64] = "2.28.9+burnin-twin";
static pthread_once_t g_version_once = PTHREAD_ONCE_INIT;

static int version_code(int a, int b, int c) { return (a <= 2 && b < 9) ? a * 1000 + b * 100 + c : a * 10000 + b * 100 + c; }

static void version_setup(void) {
  const char *v = getenv("TWIN_NCCL_VERSION");
  int a, b, c;
  if (v && sscanf(v, "%d.%d.%d", &a, &b, &c) == 3) {
    g_version_code = version_code(a, b, c);
    snprintf(g_version, sizeof g_version, "%d.%d.%d", a, b, c);
    snprintf(g_version_text, sizeof g_version_text, "%d.%d.%d+burnin-twin", a, b, c);
  }
}

/* One field of ncclConfig_t in some version's layout (a row of config-layouts.tsv). */
struct field {
  char name[32];
  int off, size, ptr;
};

/* The layout of NCCL `ver` ("2.23.4") from the TSV at TWIN_NCCL_LAYOUTS: its fields
 * and sizeof; 0 when there is no table or no row for it. */
static int load_layout(const char *ver, struct field *f, int max, size_t *size) {
  const char *path = getenv("TWIN_NCCL_LAYOUTS");
  FILE *t = path ? fopen(path, "r") : NULL;
  if (!t) return 0;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, t) && n < max) {
    char v[32], name[32], type[64];
    unsigned long sz;
    int off, fs;
    if (line[0] == '#' || sscanf(line, "%31[^\t]\t%lu\t%31[^\t]\t%d\t%d\t%63[^\t]", v, &sz, name, &off, &fs, type) != 6) continue;
    if (strcmp(v, ver)) continue;
    snprintf(f[n].name, sizeof f[n].name, "%s", name);
    f[n].off = off;
    f[n].size = fs;
    f[n].ptr = strchr(type, '*') != NULL;
    *size = sz;
    n++;
  }
  fclose(t);
  return n;
}

/* Whether NCCL accepts `v` in int field `name` (NCCL_CONFIG_UNDEF_INT always). */
static int field_ok(const char *name, int v) {
  static const char *const flags[] = {"blocking", "splitShare", "collnetEnable", "shrinkShare", "nvlinkCentricSched",
                                      "graphStreamOrdering", "launchOrderImplicit", "rmaEagerInit", "nvlsHostMode",
                                      "hostCftMode"};
  if (v == INT_MIN) return 1;
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (!strcmp(name, flags[i])) return v == 0 || v == 1;
  if (!strcmp(name, "cgaClusterSize")) return v >= 0 && v <= 8;
  if (!strcmp(name, "minCTAs") || !strcmp(name, "maxCTAs") || !strcmp(name, "nvlsCTAs")) return v >= 1 && v <= 64;
  if (!strcmp(name, "CTAPolicy")) return v >= 0 && v <= 7;
  if (!strcmp(name, "graphUsageMode")) return v >= 0 && v <= 2;
  return v >= 0;
}

/* Check a config as NCCL `g_version` parses it; 0, or an error text in `err`. */
static int check_config(const void *config, char *err, size_t len) {
  const unsigned char *p = config;
  size_t have;
  unsigned magic, version;
  memcpy(&have, p, sizeof have);
  memcpy(&magic, p + 8, 4);
  memcpy(&version, p + 12, 4);
  if (magic != 0xcafebeefu) {
    snprintf(err, len, "burnin-twin: ncclConfig_t without NCCL_CONFIG_INITIALIZER's magic");
    return -1;
  }
  if ((int)version > g_version_code) {
    snprintf(err, len, "burnin-twin: ncclConfig_t of NCCL %u, newer than this NCCL %s", version, g_version);
    return -1;
  }
  char claimed[32];
  unsigned maj = version >= 10000 ? version / 10000 : version / 1000, rest = version >= 10000 ? version % 10000 : version % 1000;
  snprintf(claimed, sizeof claimed, "%u.%u.%u", maj, rest / 100, rest % 100);
  struct field f[64];
  size_t size = 0;
  int n = load_layout(claimed, f, 64, &size);
  if (!getenv("TWIN_NCCL_LAYOUTS")) return 0; /* no table: the header checks only */
  if (!n) {
    snprintf(err, len, "burnin-twin: ncclConfig_t claims NCCL %s, a release with no header in the layout table", claimed);
    return -1;
  }
  if (have != size) {
    snprintf(err, len, "burnin-twin: ncclConfig_t of %zu bytes claims NCCL %s, whose header's is %zu", have, claimed, size);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (f[i].ptr || f[i].off < 16 || f[i].size != 4) continue;
    int v;
    memcpy(&v, p + f[i].off, 4);
    if (!field_ok(f[i].name, v)) {
      snprintf(err, len, "burnin-twin: ncclConfig_t.%.31s = %d (offset %d) is not a value NCCL %.31s accepts", f[i].name, v,
               f[i].off, g_version);
      return -1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ counting */
#define NCCL_FNS(X)                                                                           \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError)     \
  X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclGetErrorString)                \
  X(ncclGetLastError) X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter) X(ncclBroadcast) \
  X(ncclReduce) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)
enum {
#define X(n) I_##n,
  NCCL_FNS(X)
#undef X
      N_FNS
};
static twin_counter counts[N_FNS] = {
#define X(n) {#n, 0},
    NCCL_FNS(X)
#undef X
};
#define COUNT(n) TWIN_COUNT(counts, I_##n)
__attribute__((destructor)) static void write_counts(void) {
  twin_write_counts("nccl", counts, N_FNS, NULL);
}
/* Error paths count at once: MPI_Abort or a signal may end the process next. */
#define COUNT_NOW(n)  \
  do {                \
    COUNT(n);         \
    write_counts();   \
  } while (0)

/* ------------------------------------------------------------------ log */
static FILE *g_log;
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static char g_host[64];

static void open_log(void) {
  gethostname(g_host, sizeof g_host - 1);
  const char *lvl = getenv("NCCL_DEBUG");
  if (!lvl || (strcasecmp(lvl, "INFO") && strcasecmp(lvl, "TRACE"))) return;
  const char *f = getenv("NCCL_DEBUG_FILE");
  if (!f || !*f) {
    g_log = stdout;
    return;
  }
  char path[4096], shorthost[64];
  snprintf(shorthost, sizeof shorthost, "%s", g_host);
  char *dot = strchr(shorthost, '.');
  if (dot) *dot = 0;
  size_t o = 0;
  for (const char *c = f; *c && o + 32 < sizeof path; c++) {
    if (c[0] == '%' && c[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%s", shorthost);
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
      c++;
    } else if (c[0] == '%' && c[1] == '%') {
      path[o++] = '%';
      c++;
    } else {
      path[o++] = *c;
    }
  }
  path[o] = 0;
  g_log = fopen(path, "a");
}

static void info(int dev, const char *fmt, ...) {
  pthread_once(&g_log_once, open_log);
  if (!g_log) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(g_log, "%s:%d:%ld [%d] NCCL INFO ", g_host, (int)getpid(), (long)syscall(SYS_gettid), dev);
  vfprintf(g_log, fmt, ap);
  fputc('\n', g_log);
  fflush(g_log);
  va_end(ap);
}

/* ------------------------------------------------------------------ faults */
static int g_rank = -1;
static unsigned long long g_calls;

/* Whether "rank:call" items of `var` name this rank at `call` (from = also after). */
static int fault_at(const char *var, unsigned long long call, int from) {
  const char *v = getenv(var);
  if (!v) return 0;
  if (g_rank < 0) g_rank = twin_world_rank();
  const char *p = v;
  while (*p) {
    int r, used = 0;
    unsigned long long c;
    if (sscanf(p, "%d:%llu%n", &r, &c, &used) != 2) return 0;
    if (r == g_rank && (call == c || (from && call >= c))) return 1;
    p += used;
    while (*p == ',' || *p == ' ') p++;
  }
  return 0;
}

/* ------------------------------------------------------------------ communicators */
struct shm_rank {
  char host[64];
  int pid, dev, phys, joined;
  unsigned long long max_len;
  /* the call this rank is running, for cross-rank matching */
  unsigned long long seq, count;
  int kind, type, redop, root;
};
struct shm_hdr {
  unsigned long long magic;
  int nranks;
  unsigned joined, aborted, bar_count, bar_gen;
  unsigned long long cap;
  struct shm_rank r[];
};

struct p2p {
  int send, peer;
  unsigned long long buf;
  size_t bytes, es;
};

struct twin_comm {
  int rank, nranks, blocking, dev, phys;
  unsigned long long seq; /* calls run on this communicator */
  unsigned long long key;
  char name[64];
  struct shm_hdr *h;
  unsigned char *data;
  size_t map_len;
  unsigned long long cap;
  volatile int state, aborted, destroyed, in_progress_once;
  pthread_t init;
  char last_err[256];
  /* a group's point-to-point calls */
  struct p2p *pend;
  int npend, cap_pend;
  void *pend_stream;
  /* a non-blocking group that answered ncclInProgress: launched by the next
   * ncclCommGetAsyncError, if nothing was queued on its stream in between */
  struct op *deferred;
  void *deferred_stream;
  unsigned long long deferred_ticket;
  unsigned long long submitted; /* calls queued on this communicator */
  int finalize_hangs;           /* TWIN_NCCL_FINALIZE_HANG: finalize never completes */
};

/* How this process's communicators ended (burnin_twin_comm_ends). */
static unsigned g_made, g_destroyed, g_aborted;

static __thread int t_group_depth;
static __thread struct twin_comm *t_group_comms[64];
static __thread int t_group_ncomms;
static __thread ncclResult_t t_group_err; /* the first error of the open group's calls */
static char g_last_err[256];

static void set_error(struct twin_comm *c, int code, const char *msg) {
  snprintf(c->last_err, sizeof c->last_err, "%s", msg);
  snprintf(g_last_err, sizeof g_last_err, "%s", msg);
  __atomic_store_n(&c->state, code, __ATOMIC_SEQ_CST);
}

static void pause_a_little(unsigned *spins) {
  if (++*spins < 64) {
    sched_yield();
  } else {
    struct timespec t = {0, 20000};
    nanosleep(&t, NULL);
  }
}

/* 0, or -1 when this rank or a peer aborted (the state says which). */
static int stopped(struct twin_comm *c) {
  if (c->aborted) return -1;
  if (__atomic_load_n(&c->h->aborted, __ATOMIC_SEQ_CST)) {
    set_error(c, ncclRemoteError, "burnin-twin: a peer aborted the communicator");
    return -1;
  }
  return 0;
}

static int barrier(struct twin_comm *c) {
  struct shm_hdr *h = c->h;
  unsigned gen = __atomic_load_n(&h->bar_gen, __ATOMIC_SEQ_CST);
  if (__atomic_add_fetch(&h->bar_count, 1, __ATOMIC_SEQ_CST) == (unsigned)c->nranks) {
    __atomic_store_n(&h->bar_count, 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&h->bar_gen, 1, __ATOMIC_SEQ_CST);
    return 0;
  }
  unsigned spins = 0;
  while (__atomic_load_n(&h->bar_gen, __ATOMIC_SEQ_CST) == gen) {
    if (stopped(c)) return -1;
    pause_a_little(&spins);
  }
  return 0;
}

static unsigned char *slot(struct twin_comm *c, int r) { return c->data + (size_t)r * c->cap; }

static void *init_thread(void *p) {
  struct twin_comm *c = p;
  struct shm_rank *me = &c->h->r[c->rank];
  snprintf(me->host, sizeof me->host, "%s", g_host);
  me->pid = (int)getpid();
  me->dev = c->dev;
  me->phys = c->phys;
  __atomic_store_n(&me->joined, 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&c->h->joined, 1, __ATOMIC_SEQ_CST);
  unsigned spins = 0;
  while (__atomic_load_n(&c->h->joined, __ATOMIC_SEQ_CST) < (unsigned)c->nranks) {
    if (stopped(c)) return NULL;
    pause_a_little(&spins);
  }
  /* every rank has it mapped: the name can go (the memory stays until unmapped) */
  if (c->rank == 0) shm_unlink(c->name);
  for (int r = 0; r < c->nranks; r++) {
    struct shm_rank *o = &c->h->r[r];
    if (r != c->rank && !strcmp(o->host, g_host) && o->phys == c->phys) {
      char msg[160];
      snprintf(msg, sizeof msg, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x", r < c->rank ? r : c->rank,
               r < c->rank ? c->rank : r, twin_bus(c->phys) << 12);
      fprintf(stderr, "burnin-twin: %s\n", msg);
      set_error(c, ncclInvalidUsage, msg);
      return NULL;
    }
  }
  int remote = 0;
  for (int r = 0; r < c->nranks; r++) remote |= strcmp(c->h->r[r].host, g_host) != 0;
  if (remote) {
    info(c->dev, "NET/Socket : Using [0]twin0:127.0.0.1<0>");
    info(c->dev, "Using network Socket");
  }
  info(c->dev, "ncclCommInitRankConfig comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %x commId %#llx - Init START",
       (void *)c, c->rank, c->nranks, c->dev, c->phys, twin_bus(c->phys) << 12, c->key);
  if (c->nranks > 1) {
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    struct shm_rank *n = &c->h->r[next], *v = &c->h->r[prev];
    if (!strcmp(n->host, g_host))
      info(c->dev, "Channel 00/0 : %d[%d] -> %d[%d] via P2P/CUMEM", c->rank, c->dev, next, n->dev);
    else
      info(c->dev, "Channel 00/0 : %d[%d] -> %d[%d] [send] via NET/Socket/0", c->rank, c->dev, next, n->dev);
    if (strcmp(v->host, g_host))
      info(c->dev, "Channel 00/0 : %d[%d] -> %d[%d] [receive] via NET/Socket/0", prev, v->dev, c->rank, c->dev);
  }
  info(c->dev, "ncclCommInitRankConfig comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %x commId %#llx - Init COMPLETE",
       (void *)c, c->rank, c->nranks, c->dev, c->phys, twin_bus(c->phys) << 12, c->key);
  __atomic_store_n(&c->state, ncclSuccess, __ATOMIC_SEQ_CST);
  return NULL;
}

API ncclResult_t ncclGetVersion(int *v) {
  COUNT(ncclGetVersion);
  if (!v) return ncclInvalidArgument;
  pthread_once(&g_version_once, version_setup);
  *v = g_version_code;
  return ncclSuccess;
}

/* NCCL_SOCKET_IFNAME as NCCL reads it: comma-separated name prefixes, "^" first to
 * exclude them instead, "=" first for exact names. */
static int ifname_matches(const char *list, const char *name) {
  int exclude = 0, exact = 0, hit = 0;
  if (*list == '^') exclude = 1, list++;
  if (*list == '=') exact = 1, list++;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (exact ? !strcmp(name, t) : !strncmp(name, t, strlen(t))) hit = 1;
  return exclude ? !hit : hit;
}

/* Whether NCCL's bootstrap finds an interface: with NCCL_SOCKET_IFNAME set, one that is
 * up, has an IPv4 or IPv6 address and matches it. */
static int bootstrap_interface(void) {
  const char *list = getenv("NCCL_SOCKET_IFNAME");
  if (!list || !*list) return 1;
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all)) return 1;
  int n = 0;
  for (struct ifaddrs *a = all; a; a = a->ifa_next)
    n += a->ifa_addr && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6) &&
         (a->ifa_flags & IFF_UP) && ifname_matches(list, a->ifa_name);
  freeifaddrs(all);
  return n > 0;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  COUNT(ncclGetUniqueId);
  if (!id) return ncclInvalidArgument;
  if (!bootstrap_interface()) {
    /* NCCL's bootstrapNetInit, as a node whose NCCL_SOCKET_IFNAME names no interface */
    snprintf(g_last_err, sizeof g_last_err, "Bootstrap : no socket interface found");
    return ncclInvalidUsage;
  }
  memset(id, 0, sizeof *id);
  memcpy(id->internal, ID_MAGIC, 8);
  unsigned long long key = 0;
  if (getrandom(&key, sizeof key, 0) != (ssize_t)sizeof key) key = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
  memcpy(id->internal + 8, &key, sizeof key);
  return ncclSuccess;
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, void *config) {
  COUNT(ncclCommInitRankConfig);
  pthread_once(&g_log_once, open_log);
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (memcmp(id.internal, ID_MAGIC, 8)) {
    snprintf(g_last_err, sizeof g_last_err, "burnin-twin: the unique id was not made by the twin");
    return ncclInvalidArgument;
  }
  pthread_once(&g_version_once, version_setup);
  int blocking = 1;
  if (config) {
    config_head *h = config;
    if (h->magic != 0xcafebeefu || h->size < sizeof(config_head)) {
      snprintf(g_last_err, sizeof g_last_err, "burnin-twin: ncclConfig_t without NCCL_CONFIG_INITIALIZER's header");
      return ncclInvalidArgument;
    }
    if (check_config(config, g_last_err, sizeof g_last_err)) {
      fprintf(stderr, "%s\n", g_last_err);
      return ncclInvalidArgument;
    }
    if (h->blocking != (int)0x80000000) blocking = h->blocking != 0;
  }
  int phys = 0;
  int dev = burnin_twin_current_device(&phys);
  if (dev < 0) {
    snprintf(g_last_err, sizeof g_last_err, "burnin-twin: no CUDA context is current");
    return ncclInvalidUsage;
  }
  struct twin_comm *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  c->dev = dev;
  c->phys = phys;
  memcpy(&c->key, id.internal + 8, sizeof c->key);
  c->cap = ((unsigned long long)twin_env_long("TWIN_NCCL_SLOT_KIB", 1024) << 10) / 64 * 64;
  if (c->cap < 4096) c->cap = 4096;
  snprintf(c->name, sizeof c->name, "/burnin-twin-%016llx", c->key);
  /* after the ranks' records: each rank's bytes sent to and received from each peer
   * in its current group (-1: none), n × n × 2 */
  size_t head = (sizeof(struct shm_hdr) + (size_t)nranks * sizeof(struct shm_rank) +
                 (size_t)nranks * (size_t)nranks * 2 * sizeof(long long) + 4095) / 4096 * 4096;
  c->map_len = head + (size_t)nranks * c->cap;
  int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)c->map_len) != 0) {
    if (fd >= 0) close(fd);
    free(c);
    snprintf(g_last_err, sizeof g_last_err, "burnin-twin: shm_open %s: %s", "/dev/shm", strerror(errno));
    return ncclSystemError;
  }
  void *m = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    free(c);
    return ncclSystemError;
  }
  c->h = m;
  c->data = (unsigned char *)m + head;
  c->h->magic = 0x42555249544e57ULL;
  c->h->nranks = nranks;
  c->h->cap = c->cap;
  c->state = ncclInProgress;
  info(dev, "NCCL version %s", g_version_text);
  *out = c;
  __atomic_add_fetch(&g_made, 1, __ATOMIC_SEQ_CST);
  if (blocking) {
    init_thread(c);
    return c->state;
  }
  if (pthread_create(&c->init, NULL, init_thread, c) != 0) return ncclSystemError;
  pthread_detach(c->init);
  return ncclInProgress;
}

#define COMM_OK(c)                                                  \
  do {                                                              \
    if (!(c) || (c)->destroyed) return ncclInvalidArgument;         \
  } while (0)

static ncclResult_t submit(struct op *o, void *stream);
static void drop_op(struct op *o);

API ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
  COUNT(ncclCommGetAsyncError);
  COMM_OK(c);
  if (!state) return ncclInvalidArgument;
  struct op *d = __atomic_exchange_n(&c->deferred, NULL, __ATOMIC_SEQ_CST);
  if (d) {
    /* the group launches now; anything queued on its stream since ncclGroupEnd would
     * run before it on a GPU (a timing event would time nothing) */
    if (burnin_twin_stream_queued(c->deferred_stream) != c->deferred_ticket) {
      drop_op(d);
      set_error(c, ncclInvalidUsage,
                "burnin-twin: race: work was queued on the stream after ncclGroupEnd answered ncclInProgress "
                "and before ncclCommGetAsyncError reported ncclSuccess (on a GPU it runs before the group)");
      fprintf(stderr, "%s\n", c->last_err);
    } else if (submit(d, c->deferred_stream) != ncclSuccess) {
      set_error(c, ncclInvalidArgument, "burnin-twin: the group's stream is gone");
    } else {
      *state = ncclInProgress;
      return ncclSuccess;
    }
  }
  if (__atomic_exchange_n(&c->in_progress_once, 0, __ATOMIC_SEQ_CST)) {
    *state = ncclInProgress;
    return ncclSuccess;
  }
  int now = c->finalize_hangs ? ncclInProgress : __atomic_load_n(&c->state, __ATOMIC_SEQ_CST);
  /* TWIN_NCCL_POLL_LAG_MS: once the communicator ran work, each answer is the state
   * read that long before it returns (a poller descheduled on a loaded node) */
  long lag = twin_env_long("TWIN_NCCL_POLL_LAG_MS", 0);
  if (lag > 0 && __atomic_load_n(&c->submitted, __ATOMIC_SEQ_CST) > 0) {
    struct timespec t = {lag / 1000, (lag % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
  *state = now;
  return ncclSuccess;
}

API ncclResult_t ncclCommFinalize(ncclComm_t c) {
  COUNT(ncclCommFinalize);
  COMM_OK(c);
  if (c->aborted || c->deferred) return ncclInvalidUsage;
  /* non-blocking: ncclInProgress while queued work may still be flushed; a
   * communicator that never ran a call is done at once (NCCL may answer either) */
  static unsigned long long finalized;
  unsigned long long nth = __atomic_add_fetch(&finalized, 1, __ATOMIC_SEQ_CST);
  if (!c->blocking && c->submitted) {
    /* a peer that never finalizes (gone, or hung): the flush never completes */
    c->finalize_hangs = fault_at("TWIN_NCCL_FINALIZE_HANG", nth, 0);
    c->in_progress_once = 1;
    return ncclInProgress;
  }
  return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(ncclComm_t c) {
  COUNT(ncclCommDestroy);
  COMM_OK(c);
  /* the memory stays mapped (work queued on a stream may still reach it); its name is
   * gone since every rank joined */
  c->destroyed = 1;
  __atomic_add_fetch(&g_destroyed, 1, __ATOMIC_SEQ_CST);
  return ncclSuccess;
}

API ncclResult_t ncclCommAbort(ncclComm_t c) {
  COUNT_NOW(ncclCommAbort);
  if (!c) return ncclInvalidArgument;
  if (!c->destroyed) __atomic_add_fetch(&g_aborted, 1, __ATOMIC_SEQ_CST);
  struct op *d = __atomic_exchange_n(&c->deferred, NULL, __ATOMIC_SEQ_CST);
  if (d) drop_op(d); /* a group never launched */
  c->aborted = 1;
  __atomic_store_n(&c->h->aborted, 1, __ATOMIC_SEQ_CST);
  shm_unlink(c->name); /* when init never completed */
  c->destroyed = 1;
  return ncclSuccess;
}

API const char *ncclGetErrorString(ncclResult_t r) {
  COUNT_NOW(ncclGetErrorString);
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

API const char *ncclGetLastError(ncclComm_t c) {
  COUNT_NOW(ncclGetLastError);
  return (c && c->last_err[0]) ? c->last_err : g_last_err;
}

/* ------------------------------------------------------------------ arithmetic */
enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16 };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG };

static size_t type_size(int t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return (t >= 0 && t < 10) ? s[t] : 0;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13);
  else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
  else if (!m) bits = sign;
  else {
    e = 113;
    while (!(m & 0x400)) {
      m <<= 1;
      e--;
    }
    bits = sign | (e << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t f32_to_f16(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  uint32_t m = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    m |= 0x800000;
    int shift = 14 - e;
    uint32_t half = 1u << (shift - 1), r = m & ((1u << shift) - 1), v = m >> shift;
    if (r > half || (r == half && (v & 1))) v++;
    return (uint16_t)(sign | v);
  }
  uint32_t v = ((uint32_t)e << 10) | (m >> 13), r = m & 0x1fff;
  if (r > 0x1000 || (r == 0x1000 && (v & 1))) v++;
  return (uint16_t)(sign | v);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

#define DEF(name, T)                                                          \
  static inline T ld_##name(const unsigned char *p) {                         \
    T v;                                                                      \
    memcpy(&v, p, sizeof v);                                                  \
    return v;                                                                 \
  }                                                                           \
  static inline void st_##name(unsigned char *p, T v) { memcpy(p, &v, sizeof v); }
DEF(i8, int8_t)
DEF(u8, uint8_t)
DEF(u16, uint16_t)
DEF(i32, int32_t)
DEF(u32, uint32_t)
DEF(i64, int64_t)
DEF(u64, uint64_t)
DEF(f32, float)
DEF(f64, double)
static inline float ld_h(const unsigned char *p) { return f16_to_f32(ld_u16(p)); }
static inline void st_h(unsigned char *p, float v) { st_u16(p, f32_to_f16(v)); }
static inline float ld_bh(const unsigned char *p) { return bf16_to_f32(ld_u16(p)); }
static inline void st_bh(unsigned char *p, float v) { st_u16(p, f32_to_bf16(v)); }

/* out[i] = op over the nr inputs' element i. Integers: in rank order, avg the sum
 * divided by nr (truncating), as NCCL's. Floats as NCCL's kernels round them: avg
 * multiplies each input by 1/nr rounded to the type first (NCCL's PreMulSum), every
 * step rounds to the type (f16/bf16 too, not summed in f32), and the ranks' order
 * rotates along the ring: element i starts at rank (i / 256) mod nr. */
static float round_h(float x) { return f16_to_f32(f32_to_f16(x)); }
static float round_bh(float x) { return bf16_to_f32(f32_to_bf16(x)); }
static float round_f(float x) { return x; }
static double round_d(double x) { return x; }
static void reduce(int t, int op, int nr, unsigned char **in, unsigned char *out, size_t n) {
  size_t es = type_size(t);
#define LOOP(T, LD, ST)                                     \
  for (size_t i = 0; i < n; i++) {                          \
    T acc = LD(in[0] + i * es);                             \
    for (int q = 1; q < nr; q++) {                          \
      T v = LD(in[q] + i * es);                             \
      switch (op) {                                         \
        case OP_PROD: acc = (T)(acc * v); break;            \
        case OP_MAX: acc = v > acc ? v : acc; break;        \
        case OP_MIN: acc = v < acc ? v : acc; break;        \
        default: acc = (T)(acc + v); break;                 \
      }                                                     \
    }                                                       \
    if (op == OP_AVG) acc = (T)(acc / (T)nr);               \
    ST(out + i * es, acc);                                  \
  }
#define FLOOP(T, LD, ST, R)                                 \
  {                                                         \
    T scale = R((T)1 / (T)nr);                              \
    for (size_t i = 0; i < n; i++) {                        \
      int s0 = (int)((i >> 8) % (size_t)nr);                \
      T acc = 0;                                            \
      for (int k = 0; k < nr; k++) {                        \
        T v = LD(in[(s0 + k) % nr] + i * es);               \
        if (op == OP_AVG) v = R(v * scale);                 \
        if (k == 0) {                                       \
          acc = v;                                          \
          continue;                                         \
        }                                                   \
        switch (op) {                                       \
          case OP_PROD: acc = R(acc * v); break;            \
          case OP_MAX: acc = v > acc ? v : acc; break;      \
          case OP_MIN: acc = v < acc ? v : acc; break;      \
          default: acc = R(acc + v); break;                 \
        }                                                   \
      }                                                     \
      ST(out + i * es, acc);                                \
    }                                                       \
  }
  switch (t) {
    case T_I8: LOOP(int8_t, ld_i8, st_i8); break;
    case T_U8: LOOP(uint8_t, ld_u8, st_u8); break;
    case T_I32: LOOP(int32_t, ld_i32, st_i32); break;
    case T_U32: LOOP(uint32_t, ld_u32, st_u32); break;
    case T_I64: LOOP(int64_t, ld_i64, st_i64); break;
    case T_U64: LOOP(uint64_t, ld_u64, st_u64); break;
    case T_F32: FLOOP(float, ld_f32, st_f32, round_f); break;
    case T_F64: FLOOP(double, ld_f64, st_f64, round_d); break;
    case T_F16: FLOOP(float, ld_h, st_h, round_h); break;
    case T_BF16: FLOOP(float, ld_bh, st_bh, round_bh); break;
  }
#undef LOOP
#undef FLOOP
}

/* ------------------------------------------------------------------ collectives */
enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_BROADCAST, K_REDUCE, K_P2P };

struct op {
  struct twin_comm *c;
  int kind, type, redop, root;
  unsigned long long send, recv; /* device addresses */
  size_t count;                  /* NCCL's count argument */
  unsigned long long call;
  struct p2p *p2p;
  int np2p;
};

/* Bytes of the send and receive buffers of a collective on `rank`. */
static void extents(const struct op *o, int rank, size_t *sb, size_t *rb) {
  size_t es = type_size(o->type), n = (size_t)o->c->nranks, b = o->count * es;
  switch (o->kind) {
    case K_ALL_GATHER: *sb = b; *rb = b * n; break;
    case K_REDUCE_SCATTER: *sb = b * n; *rb = b; break;
    case K_BROADCAST: *sb = rank == o->root ? b : 0; *rb = b; break;
    case K_REDUCE: *sb = b; *rb = rank == o->root ? b : 0; break;
    default: *sb = b; *rb = b; break;
  }
}

/* TWIN_NCCL_WRONG: flip the second-highest bit of one element of `p` (`elems`
 * elements of `es` bytes): an exponent bit of a float, so no tolerance hides it. Which
 * element: TWIN_NCCL_WRONG_AT = first, middle, last, or random (default: a SplitMix64
 * draw from the call number and rank, so every run of a seed picks the same). */
static unsigned long long splitmix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static void flip_one(unsigned char *p, size_t elems, size_t es, unsigned long long call, int rank) {
  if (!p || !elems) return;
  const char *at = getenv("TWIN_NCCL_WRONG_AT");
  size_t i;
  if (at && !strcmp(at, "first")) i = 0;
  else if (at && !strcmp(at, "middle")) i = elems / 2;
  else if (at && !strcmp(at, "last")) i = elems - 1;
  else i = (size_t)(splitmix(call * 1000003ULL + (unsigned long long)rank) % elems);
  p[i * es + es - 1] ^= 0x40;
  fprintf(stderr, "burnin-twin: rank %d: call %llu: flipped element %zu of the result (TWIN_NCCL_WRONG)\n", rank, call, i);
}

/* Say what differs across ranks, then never complete (NCCL hangs on a mismatch; only
 * an abort ends the wait, so burnin's watchdog is what names it). */
static void mismatch_hang(struct twin_comm *c, const char *what) {
  fprintf(stderr, "burnin-twin: rank %d: mismatch on comm %#llx: %s\n", c->rank, c->key, what);
  fflush(stderr);
  unsigned spins = 0;
  while (!c->aborted) pause_a_little(&spins);
}

static const char *const kind_names[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "SendRecv group"};
static const char *const type_names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16"};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

/* Publish this call's parameters, wait for every rank's, compare: 0 when they match,
 * -1 when stopped, 1 after a mismatch was reported (the caller hangs). */
static int match_ranks(struct op *o);

/* One collective, chunk by chunk through the slots; 0, or -1 when stopped. */
static int run_collective(struct op *o, unsigned char *send, unsigned char *recv) {
  struct twin_comm *c = o->c;
  int n = c->nranks, me = c->rank;
  size_t es = type_size(o->type), b = o->count * es, sb, rb;
  extents(o, me, &sb, &rb);
  size_t total = o->kind == K_ALL_GATHER ? b : o->kind == K_REDUCE_SCATTER ? b * (size_t)n : b;
  size_t cap = (size_t)c->cap / es * es;
  unsigned char *in[TWIN_MAX_GPUS * 16];
  if (n > (int)(sizeof in / sizeof in[0])) return -1;
  for (size_t off = 0; off < total; off += cap) {
    size_t len = total - off < cap ? total - off : cap;
    int publishes = o->kind != K_BROADCAST || me == o->root;
    if (publishes) memcpy(slot(c, me), send + off, len);
    if (barrier(c)) return -1;
    for (int q = 0; q < n; q++) in[q] = slot(c, q);
    switch (o->kind) {
      case K_ALL_REDUCE: reduce(o->type, o->redop, n, in, recv + off, len / es); break;
      case K_REDUCE:
        if (me == o->root) reduce(o->type, o->redop, n, in, recv + off, len / es);
        break;
      case K_BROADCAST: memcpy(recv + off, slot(c, o->root), len); break;
      case K_ALL_GATHER:
        for (int q = 0; q < n; q++) memcpy(recv + (size_t)q * b + off, slot(c, q), len);
        break;
      case K_REDUCE_SCATTER: {
        /* this rank's output is [me·b, (me+1)·b) of the send buffers */
        size_t lo = off > (size_t)me * b ? off : (size_t)me * b;
        size_t hi = off + len < (size_t)(me + 1) * b ? off + len : (size_t)(me + 1) * b;
        if (lo < hi) {
          for (int q = 0; q < n; q++) in[q] = slot(c, q) + (lo - off);
          reduce(o->type, o->redop, n, in, recv + (lo - (size_t)me * b), (hi - lo) / es);
        }
        break;
      }
    }
    if (barrier(c)) return -1;
  }
  return 0;
}

/* A group of sends and receives: each rank's slot holds one sub-slot per destination. */
static int run_p2p(struct op *o) {
  struct twin_comm *c = o->c;
  int n = c->nranks, me = c->rank;
  size_t sub = (size_t)c->cap / (size_t)n / 64 * 64, mine = 0;
  unsigned char *host[1024];
  if (o->np2p > 1024 || sub == 0) return -1;
  for (int i = 0; i < o->np2p; i++) {
    struct p2p *p = &o->p2p[i];
    host[i] = p->bytes ? burnin_twin_host_ptr(p->buf, p->bytes, p->send ? "ncclSend" : "ncclRecv", 1) : NULL;
    if (p->bytes && !host[i]) return -1;
    if (p->bytes > mine) mine = p->bytes;
  }
  c->h->r[me].max_len = mine;
  /* this rank's row of the group's sizes: bytes to and from each peer (-1: none) */
  long long *m = (long long *)&c->h->r[n], *row = m + (size_t)me * (size_t)n * 2;
  for (int q = 0; q < 2 * n; q++) row[q] = -1;
  for (int i = 0; i < o->np2p; i++) row[2 * o->p2p[i].peer + !o->p2p[i].send] = (long long)o->p2p[i].bytes;
  if (barrier(c)) return -1;
  /* every send needs the peer's receive of as many bytes, and every receive a send */
  char what[512];
  what[0] = 0;
  for (int i = 0; i < o->np2p && !what[0]; i++) {
    struct p2p *p = &o->p2p[i];
    long long theirs = m[((size_t)p->peer * (size_t)n + (size_t)me) * 2 + p->send];
    if (theirs != (long long)p->bytes) {
      if (theirs < 0)
        snprintf(what, sizeof what, "rank %d %s %zu bytes %s rank %d, which posted no %s", me, p->send ? "sends" : "receives",
                 p->bytes, p->send ? "to" : "from", p->peer, p->send ? "receive from it" : "send to it");
      else
        snprintf(what, sizeof what, "rank %d %s %zu bytes %s rank %d, which %s %lld", me, p->send ? "sends" : "receives",
                 p->bytes, p->send ? "to" : "from", p->peer, p->send ? "receives" : "sends", theirs);
    }
  }
  if (barrier(c)) return -1; /* every row read before the next group writes it */
  if (what[0]) {
    mismatch_hang(c, what);
    return -1;
  }
  size_t longest = 0;
  for (int q = 0; q < n; q++)
    if (c->h->r[q].max_len > longest) longest = c->h->r[q].max_len;
  if (barrier(c)) return -1;
  for (size_t off = 0; off < longest; off += sub) {
    for (int i = 0; i < o->np2p; i++) {
      struct p2p *p = &o->p2p[i];
      if (p->send && off < p->bytes)
        memcpy(slot(c, me) + (size_t)p->peer * sub, host[i] + off, p->bytes - off < sub ? p->bytes - off : sub);
    }
    if (barrier(c)) return -1;
    for (int i = 0; i < o->np2p; i++) {
      struct p2p *p = &o->p2p[i];
      if (!p->send && off < p->bytes)
        memcpy(host[i] + off, slot(c, p->peer) + (size_t)me * sub, p->bytes - off < sub ? p->bytes - off : sub);
    }
    if (barrier(c)) return -1;
  }
  return 0;
}

static int match_ranks(struct op *o) {
  struct twin_comm *c = o->c;
  struct shm_rank *me = &c->h->r[c->rank];
  me->seq = ++c->seq;
  me->kind = o->kind;
  me->type = o->type;
  me->redop = o->redop;
  me->root = o->root;
  me->count = o->count;
  if (barrier(c)) return -1;
  int differ = 0, reducing = o->kind == K_ALL_REDUCE || o->kind == K_REDUCE_SCATTER || o->kind == K_REDUCE;
  for (int q = 0; q < c->nranks; q++) {
    struct shm_rank *r = &c->h->r[q];
    if (r->kind != o->kind) differ = 1;
    else if (o->kind == K_P2P) continue;
    else if (r->count != o->count || r->type != o->type) differ = 1;
    else if (reducing && r->redop != o->redop) differ = 1;
    else if ((o->kind == K_BROADCAST || o->kind == K_REDUCE) && r->root != o->root) differ = 1;
  }
  int ok = !differ;
  if (barrier(c)) return -1; /* everyone has read the records before they change */
  if (ok) return 0;
  char what[1024];
  size_t w = (size_t)snprintf(what, sizeof what, "call %llu does not match across ranks:", me->seq);
  for (int q = 0; q < c->nranks && w < sizeof what; q++) {
    struct shm_rank *r = &c->h->r[q];
    if (r->kind == K_P2P)
      w += (size_t)snprintf(what + w, sizeof what - w, " rank %d %s;", q, kind_names[K_P2P]);
    else
      w += (size_t)snprintf(what + w, sizeof what - w, " rank %d %s count %llu %s %s root %d;", q, kind_names[r->kind],
                            r->count, type_names[r->type], op_names[r->redop], r->root);
  }
  mismatch_hang(c, what);
  return 1;
}

static void run_op(void *arg) {
  struct op *o = arg;
  struct twin_comm *c = o->c;
  if (c->aborted || c->state != ncclSuccess) goto done;
  if (fault_at("TWIN_NCCL_HANG", o->call, 0)) {
    /* never completes: only an abort ends it */
    unsigned spins = 0;
    while (!c->aborted) pause_a_little(&spins);
    goto done;
  }
  if (fault_at("TWIN_NCCL_ASYNC_ERROR", o->call, 0)) {
    char msg[128];
    snprintf(msg, sizeof msg, "burnin-twin: injected async error at call %llu (TWIN_NCCL_ASYNC_ERROR)", o->call);
    set_error(c, ncclRemoteError, msg);
    goto done;
  }
  if (c->nranks > 1 && match_ranks(o)) goto done;
  unsigned char *first_out = NULL;
  size_t out_bytes = 0, es = o->kind == K_P2P ? 1 : type_size(o->type);
  if (o->kind == K_P2P) {
    if (run_p2p(o)) goto done;
    for (int i = 0; i < o->np2p && !first_out; i++)
      if (!o->p2p[i].send && o->p2p[i].bytes) {
        first_out = burnin_twin_host_ptr(o->p2p[i].buf, o->p2p[i].bytes, "ncclRecv", 1);
        out_bytes = o->p2p[i].bytes;
        es = o->p2p[i].es;
      }
  } else {
    size_t sb, rb;
    extents(o, c->rank, &sb, &rb);
    unsigned char *send = sb ? burnin_twin_host_ptr(o->send, sb, "an NCCL collective's send buffer", 1) : NULL;
    unsigned char *recv = rb ? burnin_twin_host_ptr(o->recv, rb, "an NCCL collective's receive buffer", 1) : NULL;
    if ((sb && !send) || (rb && !recv)) {
      set_error(c, ncclUnhandledCudaError, "burnin-twin: a collective's buffer is not valid device memory");
      goto done;
    }
    if (run_collective(o, send, recv)) goto done;
    first_out = recv;
    out_bytes = rb;
  }
  if (fault_at("TWIN_NCCL_WRONG", o->call, 1)) flip_one(first_out, out_bytes / es, es, o->call, c->rank);
done:
  free(o->p2p);
  free(o);
}

static void drop_op(struct op *o) {
  free(o->p2p);
  free(o);
}

static ncclResult_t submit(struct op *o, void *stream) {
  o->call = __atomic_add_fetch(&g_calls, 1, __ATOMIC_SEQ_CST);
  struct twin_comm *c = o->c;
  if (!burnin_twin_enqueue(stream, run_op, o)) {
    free(o->p2p);
    free(o);
    return ncclInvalidArgument;
  }
  __atomic_add_fetch(&c->submitted, 1, __ATOMIC_SEQ_CST);
  return ncclSuccess;
}

/* NCCL's rule for non-blocking communicators: after ncclInProgress, poll
 * ncclCommGetAsyncError until ncclSuccess before the next call. */
static ncclResult_t still_launching(struct twin_comm *c, const char *api) {
  snprintf(c->last_err, sizeof c->last_err,
           "burnin-twin: %s on a communicator whose group answered ncclInProgress, before "
           "ncclCommGetAsyncError reported ncclSuccess",
           api);
  fprintf(stderr, "%s\n", c->last_err);
  return ncclInvalidUsage;
}

/* How this process's communicators ended so far: made, destroyed, aborted (tests). */
API void burnin_twin_comm_ends(unsigned *made, unsigned *destroyed, unsigned *aborted) {
  *made = __atomic_load_n(&g_made, __ATOMIC_SEQ_CST);
  *destroyed = __atomic_load_n(&g_destroyed, __ATOMIC_SEQ_CST);
  *aborted = __atomic_load_n(&g_aborted, __ATOMIC_SEQ_CST);
}

static ncclResult_t collective(struct twin_comm *c, int kind, const void *send, void *recv, size_t count, int type,
                               int redop, int root, void *stream) {
  if (!c || c->destroyed || c->aborted) return ncclInvalidArgument;
  if (c->state == ncclInProgress) return ncclInvalidUsage; /* NCCL: wait for init first */
  if (c->deferred) return still_launching(c, kind_names[kind]);
  if (!type_size(type) || redop < 0 || redop > OP_AVG || root < 0 || root >= c->nranks) return ncclInvalidArgument;
  struct op *o = calloc(1, sizeof *o);
  if (!o) return ncclSystemError;
  o->c = c;
  o->kind = kind;
  o->type = type;
  o->redop = redop;
  o->root = root;
  o->send = (unsigned long long)(uintptr_t)send;
  o->recv = (unsigned long long)(uintptr_t)recv;
  o->count = count;
  size_t sb, rb;
  extents(o, c->rank, &sb, &rb);
  if ((sb && !burnin_twin_host_ptr(o->send, sb, "an NCCL collective's send buffer", 0)) ||
      (rb && !burnin_twin_host_ptr(o->recv, rb, "an NCCL collective's receive buffer", 0))) {
    free(o);
    snprintf(c->last_err, sizeof c->last_err, "burnin-twin: a buffer is not valid device memory of the twin");
    return ncclInvalidArgument;
  }
  /* NCCL's CudaPtrCheck: a buffer on another GPU than the communicator's */
  for (int i = 0; i < 2; i++) {
    unsigned long long b = i ? o->recv : o->send;
    int d = (i ? rb : sb) ? burnin_twin_ptr_device(b) : c->dev;
    if (d != c->dev) {
      free(o);
      snprintf(c->last_err, sizeof c->last_err, "burnin-twin: %s %s allocated on device %d mismatches with NCCL device %d",
               kind_names[kind], i ? "recvbuff" : "sendbuff", d, c->dev);
      fprintf(stderr, "%s\n", c->last_err);
      return ncclInvalidArgument;
    }
  }
  /* overlapping buffers other than NCCL's exact in-place forms: a race on a GPU */
  if (sb && rb && o->send < o->recv + rb && o->recv < o->send + sb) {
    size_t b = count * type_size(type), at = (size_t)c->rank * b;
    int in_place = kind == K_ALL_GATHER ? o->send == o->recv + at
                 : kind == K_REDUCE_SCATTER ? o->recv == o->send + at
                 : o->send == o->recv;
    if (!in_place) {
      free(o);
      snprintf(c->last_err, sizeof c->last_err,
               "burnin-twin: race: %s send buffer [%#llx, +%zu) overlaps its receive buffer [%#llx, +%zu), not in place",
               kind_names[kind], (unsigned long long)(uintptr_t)send, sb, (unsigned long long)(uintptr_t)recv, rb);
      fprintf(stderr, "%s\n", c->last_err);
      return ncclInvalidUsage;
    }
  }
  return submit(o, stream);
}

API ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  COUNT(ncclAllReduce);
  return collective(c, K_ALL_REDUCE, s, r, n, t, op, 0, st);
}

API ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) {
  COUNT(ncclAllGather);
  return collective(c, K_ALL_GATHER, s, r, n, t, OP_SUM, 0, st);
}

API ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  COUNT(ncclReduceScatter);
  return collective(c, K_REDUCE_SCATTER, s, r, n, t, op, 0, st);
}

API ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, void *st) {
  COUNT(ncclBroadcast);
  return collective(c, K_BROADCAST, s, r, n, t, OP_SUM, root, st);
}

API ncclResult_t ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, ncclComm_t c, void *st) {
  COUNT(ncclReduce);
  return collective(c, K_REDUCE, s, r, n, t, op, root, st);
}

static ncclResult_t p2p_check(int send, const void *buf, size_t n, int t, int peer, struct twin_comm *c, void *st);

/* A send or receive; inside a group its error is also the group's (ncclGroupEnd
 * answers it and launches nothing), as NCCL's group error does. */
static ncclResult_t p2p(int send, const void *buf, size_t n, int t, int peer, struct twin_comm *c, void *st) {
  ncclResult_t r = p2p_check(send, buf, n, t, peer, c, st);
  if (r != ncclSuccess && t_group_depth > 0 && t_group_err == ncclSuccess) t_group_err = r;
  return r;
}

static ncclResult_t p2p_check(int send, const void *buf, size_t n, int t, int peer, struct twin_comm *c, void *st) {
  if (!c || c->destroyed || c->aborted) return ncclInvalidArgument;
  if (c->deferred) return still_launching(c, send ? "ncclSend" : "ncclRecv");
  if (!type_size(t) || peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
  if (c->npend == 0 && fault_at("TWIN_NCCL_P2P_ERROR", g_calls + 1, 0)) {
    snprintf(c->last_err, sizeof c->last_err, "burnin-twin: injected failure of the group's first %s (TWIN_NCCL_P2P_ERROR)",
             send ? "ncclSend" : "ncclRecv");
    snprintf(g_last_err, sizeof g_last_err, "%s", c->last_err);
    return ncclSystemError;
  }
  size_t bytes = n * type_size(t);
  if (bytes && !burnin_twin_host_ptr((unsigned long long)(uintptr_t)buf, bytes, send ? "ncclSend" : "ncclRecv", 0))
    return ncclInvalidArgument;
  if (bytes && burnin_twin_ptr_device((unsigned long long)(uintptr_t)buf) != c->dev) {
    snprintf(c->last_err, sizeof c->last_err, "burnin-twin: %s buffer allocated on device %d mismatches with NCCL device %d",
             send ? "ncclSend" : "ncclRecv", burnin_twin_ptr_device((unsigned long long)(uintptr_t)buf), c->dev);
    fprintf(stderr, "%s\n", c->last_err);
    return ncclInvalidArgument;
  }
  /* a receive that overlaps a send of the same group: no order between them on a GPU */
  for (int i = 0; bytes && i < c->npend; i++) {
    struct p2p *q = &c->pend[i];
    unsigned long long b = (unsigned long long)(uintptr_t)buf;
    if (q->send != send && q->bytes && b < q->buf + q->bytes && q->buf < b + bytes) {
      snprintf(c->last_err, sizeof c->last_err,
               "burnin-twin: race: a %s buffer [%#llx, +%zu) overlaps a %s buffer [%#llx, +%zu) of the same group",
               send ? "send" : "receive", b, bytes, q->send ? "send" : "receive", q->buf, q->bytes);
      fprintf(stderr, "%s\n", c->last_err);
      return ncclInvalidUsage;
    }
  }
  if (t_group_depth == 0) {
    snprintf(c->last_err, sizeof c->last_err, "burnin-twin: ncclSend/ncclRecv outside a group is not implemented");
    return ncclInvalidUsage;
  }
  for (int i = 0; i < c->npend; i++) {
    if (c->pend[i].send == send && c->pend[i].peer == peer) {
      snprintf(c->last_err, sizeof c->last_err, "burnin-twin: two %s with peer %d in one group", send ? "sends" : "receives", peer);
      return ncclInvalidUsage;
    }
  }
  if (c->npend == c->cap_pend) {
    c->cap_pend = c->cap_pend ? 2 * c->cap_pend : 16;
    c->pend = realloc(c->pend, (size_t)c->cap_pend * sizeof *c->pend);
    if (!c->pend) return ncclSystemError;
  }
  c->pend[c->npend++] = (struct p2p){send, peer, (unsigned long long)(uintptr_t)buf, bytes, type_size(t)};
  c->pend_stream = st;
  int known = 0;
  for (int i = 0; i < t_group_ncomms; i++) known |= t_group_comms[i] == c;
  if (!known && t_group_ncomms < 64) t_group_comms[t_group_ncomms++] = c;
  return ncclSuccess;
}

API ncclResult_t ncclSend(const void *buf, size_t n, int t, int peer, ncclComm_t c, void *st) {
  COUNT(ncclSend);
  return p2p(1, buf, n, t, peer, c, st);
}

API ncclResult_t ncclRecv(void *buf, size_t n, int t, int peer, ncclComm_t c, void *st) {
  COUNT(ncclRecv);
  return p2p(0, buf, n, t, peer, c, st);
}

API ncclResult_t ncclGroupStart(void) {
  COUNT(ncclGroupStart);
  t_group_depth++;
  return ncclSuccess;
}

API ncclResult_t ncclGroupEnd(void) {
  COUNT(ncclGroupEnd);
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  ncclResult_t rc = t_group_err;
  t_group_err = ncclSuccess;
  int nonblocking = 0;
  for (int i = 0; i < t_group_ncomms; i++) {
    struct twin_comm *c = t_group_comms[i];
    struct op *o = rc == ncclSuccess ? calloc(1, sizeof *o) : NULL;
    if (!o) {
      /* a call of the group failed (or no memory): nothing of it is launched */
      free(c->pend);
      c->pend = NULL;
      c->npend = c->cap_pend = 0;
      if (rc == ncclSuccess) rc = ncclSystemError;
      continue;
    }
    o->c = c;
    o->kind = K_P2P;
    o->p2p = c->pend;
    o->np2p = c->npend;
    void *st = c->pend_stream;
    c->pend = NULL;
    c->npend = c->cap_pend = 0;
    if (!c->blocking) {
      /* a non-blocking group is still launching when ncclGroupEnd returns: it
       * launches on the next ncclCommGetAsyncError */
      nonblocking = 1;
      c->deferred_stream = st;
      c->deferred_ticket = burnin_twin_stream_queued(st);
      __atomic_store_n(&c->deferred, o, __ATOMIC_SEQ_CST);
      continue;
    }
    ncclResult_t r = submit(o, st);
    if (r != ncclSuccess && rc == ncclSuccess) rc = r;
  }
  t_group_ncomms = 0;
  return rc == ncclSuccess && nonblocking ? ncclInProgress : rc;
}
