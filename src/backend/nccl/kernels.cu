// burnin's GPU kernels: fill a buffer with a periodic table, count the elements that
// differ from one (src/collective/pattern.rs explains the tables), and the health
// burn's chains of fused multiply-adds (src/health/burn.rs).
//
// The binary embeds the PTX that `launch/ptx` makes from this file with clang (no
// CUDA toolkit: no headers, no libdevice), for sm_52 so that every driver's JIT
// compiles it for its GPU. The GPU twin (tests/gpu-twin) compiles this same file
// for the host with BURNIN_KERNEL_HOST defined, so CI runs these exact loops.
//
// Both kernels walk the elements with a grid-stride loop and keep the table index
// incrementally (one modulo per thread, not per element).
//
// Every launch is 256 threads per block (kernels.rs BLOCK): each kernel says so with
// launch_bounds (PTX .maxntid), and the burn also asks for 4 resident blocks per SM
// (.minnctapersm 4, what every SM from sm_75 on can hold: at most 64 registers a
// thread). The burn's grid is sized from the driver's occupancy for the code the JIT
// actually built (cuOccupancyMaxActiveBlocksPerMultiprocessor), so it is one full
// wave whatever the register count.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#ifndef BURNIN_KERNEL_HOST
#define KERNEL extern "C" __attribute__((global))
#define BOUNDS(threads, min_blocks) __attribute__((launch_bounds(threads, min_blocks)))
#define DEVICE static __attribute__((device)) inline
#define THREAD_INDEX                                                                  \
  ((u64)__nvvm_read_ptx_sreg_ctaid_x() * (u64)__nvvm_read_ptx_sreg_ntid_x() +           \
   (u64)__nvvm_read_ptx_sreg_tid_x())
#define THREAD_COUNT ((u64)__nvvm_read_ptx_sreg_nctaid_x() * (u64)__nvvm_read_ptx_sreg_ntid_x())
#define ATOMIC_ADD(p, v) ((u64)__nvvm_atom_add_gen_ll((long long *)(p), (long long)(v)))
#define ATOMIC_MIN(p, v) __nvvm_atom_min_gen_ull((p), (v))
#define FMAF(x, a, b) __builtin_fmaf((x), (a), (b))
DEVICE float half_to_float(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
#else
// Host build for the twin (C): the twin runs a launch by calling the kernel once for
// every (block, thread) of its grid, setting these four first, so the index, stride
// and atomic arithmetic is the GPU's.
static __thread u64 host_ctaid, host_nctaid, host_tid, host_ntid;
#define KERNEL static
#define BOUNDS(threads, min_blocks)
#define DEVICE static inline
#define THREAD_INDEX (host_ctaid * host_ntid + host_tid)
#define THREAD_COUNT (host_nctaid * host_ntid)
DEVICE u64 atomic_add_host(u64 *p, u64 v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
DEVICE void atomic_min_host(u64 *p, u64 v) {
  u64 old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
#define ATOMIC_ADD(p, v) atomic_add_host((p), (v))
#define ATOMIC_MIN(p, v) atomic_min_host((p), (v))
#define FMAF(x, a, b) __builtin_fmaf((x), (a), (b))
DEVICE float half_to_float(u16 h) {
  u32 sign = (u32)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(man & 0x400)) {
      man <<= 1;
      exp--;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  union {
    u32 u;
    float f;
  } c;
  c.u = bits;
  return c.f;
}
#endif

// Element types, as burnin's Dtype::kernel_code numbers them.
#define DT_F32 0
#define DT_F64 1
#define DT_F16 2
#define DT_BF16 3
#define DT_I32 4
#define DT_U8 5

// Counters of a check: [0] wrong elements, [1] lowest wrong position (starts at
// ~0), [2 .. 2 + SAMPLE] positions of some wrong elements.
#define SAMPLE 8

// dst[i] = table[(phase + i) % period] for i < len; elements of `es` bytes (1, 2, 4
// or 8; the table and dst aligned to it).
KERNEL BOUNDS(256, 1) void burnin_fill(u8 *dst, u64 es, u64 len, const u8 *table, u64 period, u64 phase) {
  u64 i = THREAD_INDEX, stride = THREAD_COUNT;
  if (i >= len) return;
  u64 k = (phase + i) % period, step = stride % period;
  for (; i < len; i += stride) {
    switch (es) {
      case 1: dst[i] = table[k]; break;
      case 2: ((u16 *)dst)[i] = ((const u16 *)table)[k]; break;
      case 4: ((u32 *)dst)[i] = ((const u32 *)table)[k]; break;
      default: ((u64 *)dst)[i] = ((const u64 *)table)[k]; break;
    }
    k += step;
    if (k >= period) k -= period;
  }
}

DEVICE double load(const u8 *buf, u32 dtype, u64 i) {
  switch (dtype) {
    case DT_F32: return (double)((const float *)buf)[i];
    case DT_F64: return ((const double *)buf)[i];
    case DT_F16: return (double)half_to_float(((const u16 *)buf)[i]);
    case DT_BF16: {
      union {
        u32 u;
        float f;
      } c;
      c.u = (u32)((const u16 *)buf)[i] << 16;
      return (double)c.f;
    }
    case DT_I32: return (double)((const int *)buf)[i];
    default: return (double)buf[i];
  }
}

// Count elements i < len of `buf` whose value v has |v - want| > tol, with (want,
// tol) = want_tol[2k], want_tol[2k + 1] for k = (phase + i) % period (tol 0: v must
// equal want). Wrong positions are reported as base + i.
KERNEL BOUNDS(256, 1) void burnin_check(const u8 *buf, u32 dtype, u64 len, const double *want_tol, u64 period,
                         u64 phase, u64 base, u64 *counters) {
  u64 i = THREAD_INDEX, stride = THREAD_COUNT;
  if (i >= len) return;
  u64 k = (phase + i) % period, step = stride % period;
  for (; i < len; i += stride) {
    double have = load(buf, dtype, i), want = want_tol[2 * k], tol = want_tol[2 * k + 1];
    double d = have - want;
    if (d < 0) d = -d;
    // NaN fails both comparisons: wrong.
    int ok = tol > 0 ? (d <= tol) : (have == want);
    if (!ok) {
      u64 slot = ATOMIC_ADD(&counters[0], 1);
      ATOMIC_MIN(&counters[1], base + i);
      if (slot < SAMPLE) counters[2 + slot] = base + i;
    }
    k += step;
    if (k >= period) k -= period;
  }
}

// The burn: element i starts at 0.5 + (i % 1024) / 1024 and goes through `iters`
// steps x = fma(x, a, b) (one rounding each, as the host's f32::mul_add), so any
// element's result can be recomputed on the host bit for bit. A thread carries
// FMA_CHAINS independent chains (elements i, i + stride, ...) so the FMA units are
// not left waiting on one chain's latency.
#define FMA_CHAINS 4
DEVICE float fma_start(u64 i) { return 0.5f + (float)(i & 1023) * (1.0f / 1024.0f); }

KERNEL BOUNDS(256, 4) void burnin_fma(float *out, u64 len, u64 iters, float a, float b) {
  u64 t = THREAD_INDEX, stride = THREAD_COUNT;
  for (u64 base = t; base < len; base += stride * FMA_CHAINS) {
    float x[FMA_CHAINS];
    for (int c = 0; c < FMA_CHAINS; c++) x[c] = fma_start(base + (u64)c * stride);
    for (u64 k = 0; k < iters; k++)
      for (int c = 0; c < FMA_CHAINS; c++) x[c] = FMAF(x[c], a, b);
    for (int c = 0; c < FMA_CHAINS; c++) {
      u64 i = base + (u64)c * stride;
      if (i < len) out[i] = x[c];
    }
  }
}

// The memory test (src/health/memtest.rs). One launch is one stage over `len` 8-byte
// words at `buf`, whose device address is `addr`:
//   mode 0 writes pattern p; mode 1 reads and checks p; mode 2 checks p and writes
//   its inverse ~p (a moving inversion: every bit is written both ways); mode 3
//   checks ~p.
// Patterns (`kind`): 0 the word's own device address (address decoding); 1 a walking
// one, bit (i + seed) % 64 (mode 2 turns it into a walking zero); 2 random data,
// splitmix64 of (seed, i) as src/health/copy.rs's pattern_word.
// Counters: [0] failing words, [1] lowest failing index (starts at ~0), then for up
// to MEM_SAMPLE failures the pair (index, value read).
#define MEM_SAMPLE 16
DEVICE u64 mem_expect(u64 kind, u64 seed, u64 addr, u64 i) {
  if (kind == 0) return addr + 8 * i;
  if (kind == 1) return 1ULL << ((i + seed) & 63);
  u64 z = seed * 0xD1B54A32D192ED03ULL + (i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

KERNEL BOUNDS(256, 1) void burnin_memtest(u64 *buf, u64 len, u64 addr, u64 kind, u64 seed, u64 mode,
                                          u64 *counters) {
  u64 i = THREAD_INDEX, stride = THREAD_COUNT;
  for (; i < len; i += stride) {
    u64 p = mem_expect(kind, seed, addr, i);
    if (mode == 0) {
      buf[i] = p;
      continue;
    }
    u64 want = mode == 3 ? ~p : p;
    u64 have = buf[i];
    if (have != want) {
      u64 slot = ATOMIC_ADD(&counters[0], 1);
      ATOMIC_MIN(&counters[1], i);
      if (slot < MEM_SAMPLE) {
        counters[2 + 2 * slot] = i;
        counters[3 + 2 * slot] = have;
      }
    }
    if (mode == 2) buf[i] = ~p;
  }
}
