/* An LD_PRELOAD shim that times every MPI_Allreduce inside the call, the same way in
 * any program (issue 31: is burnin's 64-256 KiB gap to OSU in its timing or in the
 * call itself?).
 *
 * Each call's time is clock_gettime(CLOCK_MONOTONIC) around PMPI_Allreduce, kept per
 * (count, datatype size); at MPI_Finalize every rank prints one line per size with the
 * number of calls, the mean, the mean of the last SHIM_TAIL calls (default 100: the
 * timed calls of a tool that runs its warm-up first), the median of its last SHIM_KEEP
 * calls (default 4096), and the process's voluntary and involuntary context switches:
 *
 *   shim rank=0 bytes=65536 calls=110 mean_us=18.41 tail_us=18.02 median_us=17.90 vcsw=12 ivcsw=40
 *
 * Build: mpicc -O2 -shared -fPIC -o /tmp/shim.so benches/mpi_allreduce_shim.c
 * Use:   mpirun ... -x LD_PRELOAD=/tmp/shim.so PROGRAM ...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define SLOTS 64

struct slot {
    long long bytes;
    long long calls;
    double total;
    double *kept;
    long long nkept;
};

static struct slot slots[SLOTS];
static long long keep = 0;
static long long tail = 0;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct slot *slot_of(long long bytes) {
    for (int i = 0; i < SLOTS; i++) {
        if (slots[i].bytes == bytes) return &slots[i];
        if (slots[i].bytes == 0) {
            if (keep == 0) {
                const char *k = getenv("SHIM_KEEP");
                keep = k ? atoll(k) : 4096;
                if (keep < 1) keep = 1;
                const char *t = getenv("SHIM_TAIL");
                tail = t ? atoll(t) : 100;
                if (tail < 1 || tail > keep) tail = keep;
            }
            slots[i].bytes = bytes;
            slots[i].kept = calloc((size_t)keep, sizeof(double));
            return slots[i].kept ? &slots[i] : NULL;
        }
    }
    return NULL;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm) {
    double t0 = now();
    int rc = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    double dt = now() - t0;
    int size = 0;
    PMPI_Type_size(datatype, &size);
    struct slot *s = slot_of((long long)count * size);
    if (s) {
        s->calls++;
        s->total += dt;
        s->kept[s->nkept % keep] = dt;
        s->nkept++;
    }
    return rc;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int MPI_Finalize(void) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    for (int i = 0; i < SLOTS && slots[i].bytes; i++) {
        struct slot *s = &slots[i];
        long long n = s->nkept < keep ? s->nkept : keep;
        long long m = n < tail ? n : tail;
        double last = 0;
        for (long long j = s->nkept - m; j < s->nkept; j++) last += s->kept[j % keep];
        qsort(s->kept, (size_t)n, sizeof(double), cmp);
        double med = n ? (n % 2 ? s->kept[n / 2] : 0.5 * (s->kept[n / 2 - 1] + s->kept[n / 2])) : 0;
        fprintf(stderr, "shim rank=%d bytes=%lld calls=%lld mean_us=%.2f tail_us=%.2f median_us=%.2f vcsw=%ld ivcsw=%ld\n",
                rank, s->bytes, s->calls, 1e6 * s->total / (double)s->calls, m ? 1e6 * last / (double)m : 0, 1e6 * med,
                ru.ru_nvcsw, ru.ru_nivcsw);
    }
    return PMPI_Finalize();
}
