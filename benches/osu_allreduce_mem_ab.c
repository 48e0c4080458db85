// benches/results/osu-allreduce-mem-ab.md: A/B of buffer memory for MPI_Allreduce at 64-256 KiB, timed like OSU.
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
static void *get(size_t n, const char *mode) {
  void *p = NULL;
  if (!strcmp(mode, "huge")) {
    size_t len = 4 << 20;
    char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *a = (char *)(((unsigned long)b + (2 << 20) - 1) & ~((2UL << 20) - 1));
    madvise(a, 2 << 20, MADV_HUGEPAGE);
    p = a;
  } else if (!strcmp(mode, "page")) {
    posix_memalign(&p, 4096, 1 << 20);
  } else {
    p = malloc(n + 16);
  }
  memset(p, 1, n);
  return p;
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *mode = getenv("MEM") ? getenv("MEM") : "page";
  printf("%s", rank == 0 ? mode : "");
  for (size_t bytes = 65536; bytes <= 262144; bytes *= 2) {
    int n = bytes / 4;
    float *s = get(bytes, mode), *r = get(bytes, mode);
    double t = 0;
    for (int i = 0; i < 110; i++) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t1 = MPI_Wtime();
      if (i >= 10) t += t1 - t0;
      MPI_Barrier(MPI_COMM_WORLD);
    }
    double avg = t / 100 * 1e6, sum;
    MPI_Reduce(&avg, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf(" %zuK=%.1f", bytes / 1024, sum / size);
  }
  if (rank == 0) printf("\n");
  MPI_Finalize();
  return 0;
}
