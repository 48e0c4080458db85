/* What the GPU twin's NCCL says to calls NCCL cannot run safely, in one process with
 * one rank (tests/gpu_twin.rs compiles and runs it against the twin): overlapping
 * send and receive buffers that are not NCCL's in-place form, a send and a receive of
 * one group over the same memory, and a buffer of another GPU than the
 * communicator's. Prints "name rc last-error" per call. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void *ncclComm_t;
int cuInit(unsigned);
int cuDeviceGet(int *, int);
int cuDevicePrimaryCtxRetain(void **, int);
int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int ncclGetUniqueId(ncclUniqueId *);
int ncclCommInitRankConfig(ncclComm_t *, int, ncclUniqueId, int, void *);
int ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, void *);
int ncclAllGather(const void *, void *, size_t, int, ncclComm_t, void *);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclSend(const void *, size_t, int, int, ncclComm_t, void *);
int ncclRecv(void *, size_t, int, int, ncclComm_t, void *);
const char *ncclGetLastError(ncclComm_t);

enum { F32 = 7, SUM = 0 };

static void say(const char *name, int rc, ncclComm_t c) { printf("%s %d %s\n", name, rc, rc ? ncclGetLastError(c) : "-"); }

int main(void) {
  void *ctx0, *ctx1;
  int d0, d1;
  CUdeviceptr p, q;
  if (cuInit(0) || cuDeviceGet(&d0, 0) || cuDeviceGet(&d1, 1) || cuDevicePrimaryCtxRetain(&ctx1, d1) ||
      cuCtxSetCurrent(ctx1) || cuMemAlloc_v2(&q, 4096) || cuDevicePrimaryCtxRetain(&ctx0, d0) || cuCtxSetCurrent(ctx0) ||
      cuMemAlloc_v2(&p, 4096)) {
    puts("setup failed");
    return 1;
  }
  ncclUniqueId id;
  ncclComm_t c;
  if (ncclGetUniqueId(&id) || ncclCommInitRankConfig(&c, 1, id, 0, NULL)) {
    puts("init failed");
    return 1;
  }
  char *b = (char *)(size_t)p;
  say("allreduce-shifted", ncclAllReduce(b, b + 4, 256, F32, SUM, c, NULL), c);
  say("allreduce-in-place", ncclAllReduce(b, b, 256, F32, SUM, c, NULL), c);
  say("allgather-in-place", ncclAllGather(b, b, 256, F32, c, NULL), c);
  say("allreduce-other-gpu", ncclAllReduce((void *)(size_t)q, b, 256, F32, SUM, c, NULL), c);
  ncclGroupStart();
  say("send", ncclSend(b, 256, F32, 0, c, NULL), c);
  say("recv-overlapping", ncclRecv(b + 512, 256, F32, 0, c, NULL), c);
  say("recv-apart", ncclRecv(b + 1024, 256, F32, 0, c, NULL), c);
  say("group-end", ncclGroupEnd(), c); /* the group's error: nothing of it launched */
  ncclGroupStart();
  say("send-again", ncclSend(b, 256, F32, 0, c, NULL), c);
  say("recv-again", ncclRecv(b + 1024, 256, F32, 0, c, NULL), c);
  say("clean-group-end", ncclGroupEnd(), c);
  return 0;
}
