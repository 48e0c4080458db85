// burnin's SDC kernels (`burnin gpu --sdc`, src/health/sdc.rs): a bf16 matrix product
// on the tensor cores and fixed-order f64 sums, with their inputs made on the device
// from the round's seed.
//
// `launch/ptx` makes sdc.ptx from this file with clang for sm_80 (mma.sync with bf16
// needs Ampere or newer): the driver's JIT builds it for any GPU from sm_80 on, and
// on an older GPU burnin leaves these two kinds out. The GPU twin compiles this file
// for the host after kernels.cu (BURNIN_KERNEL_HOST; the index macros are
// kernels.cu's), so CI runs these loops with the GPU's index arithmetic.
//
// Determinism: every output element is computed by one warp in a fixed order (the
// k loop of the product, the word loop of a sum), so a healthy GPU gives the same bits
// in every run, and so do all healthy GPUs of one architecture. A tensor core does not
// round like a chain of FMAs, so the product is compared bit for bit only between GPUs
// (the host checks it within a bound); the sums are IEEE f64 additions in a fixed
// order, equal to the host's bit for bit.

#ifndef BURNIN_KERNEL_HOST
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
#define KERNEL extern "C" __attribute__((global))
#define BOUNDS(threads, min_blocks) __attribute__((launch_bounds(threads, min_blocks)))
#define DEVICE static __attribute__((device)) inline
#define THREAD_INDEX                                                                  \
  ((u64)__nvvm_read_ptx_sreg_ctaid_x() * (u64)__nvvm_read_ptx_sreg_ntid_x() +           \
   (u64)__nvvm_read_ptx_sreg_tid_x())
#define THREAD_COUNT ((u64)__nvvm_read_ptx_sreg_nctaid_x() * (u64)__nvvm_read_ptx_sreg_ntid_x())
#else
#ifndef THREAD_INDEX
#error "the host build of sdc.cu needs kernels.cu's host build first"
#endif
#endif

// The host's pattern word i of `seed` (src/health/copy.rs pattern_word): SplitMix64's
// finaliser of seed·K1 + (i + 1)·K2.
DEVICE u64 sdc_word(u64 seed, u64 i) {
  u64 z = seed * 0xD1B54A32D192ED03ULL + (i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A bf16 in ±[0.5, 2) from a word: sign from bit 63, exponent 126 or 127 from bit 62,
// 7 mantissa bits from bits 40..46 (so every product of two is exact in f32).
DEVICE u16 sdc_bf16(u64 w) {
  return (u16)(((w >> 63) << 15) | ((126 + ((w >> 62) & 1)) << 7) | ((w >> 40) & 0x7f));
}

// The product's operands for an n×n problem: a[i·n + k] = A[i][k] from `seed`, and
// B[k][j] from seed ^ 0xB stored by column, bt[j·n + k] (mma's .col layout).
KERNEL BOUNDS(256, 1) void burnin_sdc_operands(u16 *a, u16 *bt, u64 n, u64 seed) {
  u64 len = n * n;
  for (u64 e = THREAD_INDEX; e < len; e += THREAD_COUNT) {
    a[e] = sdc_bf16(sdc_word(seed, e));
    u64 k = e / n, j = e % n;
    bt[j * n + k] = sdc_bf16(sdc_word(seed ^ 0xB, e));
  }
}

// The words a sum reads: words[i] = pattern word i of `seed`.
KERNEL BOUNDS(256, 1) void burnin_sdc_pattern(u64 *words, u64 len, u64 seed) {
  for (u64 i = THREAD_INDEX; i < len; i += THREAD_COUNT) words[i] = sdc_word(seed, i);
}

// sums[c] = Σ_{i < 64} (words[64c + i] >> 11)·2⁻⁵³ in f64, in i order, one thread a sum
// (src/health/sdc.rs reduce_host is the same loop).
KERNEL BOUNDS(256, 1) void burnin_sdc_reduce(const u64 *words, u64 sums, double *out) {
  for (u64 c = THREAD_INDEX; c < sums; c += THREAD_COUNT) {
    double s = 0.0;
    for (u64 i = c * 64; i < c * 64 + 64; i++) s += (double)(words[i] >> 11) * (1.0 / 9007199254740992.0);
    out[c] = s;
  }
}

// mma.m16n8k16 with bf16 operands: which element of a 16×16 A tile, 16×8 B tile and
// 16×8 C tile each register of a lane holds (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"). Element e of a lane's fragment: A e < 8,
// B e < 4, C e < 4; two bf16 to a 32-bit register, the lower element in the low half.
DEVICE u32 frag_a_row(u32 lane, u32 e) { return (lane >> 2) + (((e >> 1) & 1) ? 8 : 0); }
DEVICE u32 frag_a_col(u32 lane, u32 e) { return (lane & 3) * 2 + (e & 1) + (e >= 4 ? 8 : 0); }
DEVICE u32 frag_b_row(u32 lane, u32 e) { return (lane & 3) * 2 + (e & 1) + (e >= 2 ? 8 : 0); }
DEVICE u32 frag_b_col(u32 lane, u32 e) { return (void)e, lane >> 2; }
DEVICE u32 frag_c_row(u32 lane, u32 e) { return (lane >> 2) + (e >= 2 ? 8 : 0); }
DEVICE u32 frag_c_col(u32 lane, u32 e) { return (lane & 3) * 2 + (e & 1); }

// This lane's A and B registers for the tile at rows tm·16, columns tn·8, k from k0.
DEVICE void load_frags(const u16 *a, const u16 *bt, u64 n, u64 tm, u64 tn, u64 k0, u32 lane, u32 ra[4],
                       u32 rb[2]) {
  for (u32 r = 0; r < 4; r++) {
    u32 lo = 2 * r, hi = 2 * r + 1;
    u16 x = a[(tm * 16 + frag_a_row(lane, lo)) * n + k0 + frag_a_col(lane, lo)];
    u16 y = a[(tm * 16 + frag_a_row(lane, hi)) * n + k0 + frag_a_col(lane, hi)];
    ra[r] = (u32)x | ((u32)y << 16);
  }
  for (u32 r = 0; r < 2; r++) {
    u32 lo = 2 * r, hi = 2 * r + 1;
    u16 x = bt[(tn * 8 + frag_b_col(lane, lo)) * n + k0 + frag_b_row(lane, lo)];
    u16 y = bt[(tn * 8 + frag_b_col(lane, hi)) * n + k0 + frag_b_row(lane, hi)];
    rb[r] = (u32)x | ((u32)y << 16);
  }
}

#ifndef BURNIN_KERNEL_HOST
DEVICE u32 lane_id(void) { return __nvvm_read_ptx_sreg_tid_x() & 31; }
// d += A·B on the tensor cores, the whole warp at once.
DEVICE void mma_step(float d[4], const u32 ra[4], const u32 rb[2], const u16 *a, const u16 *bt, u64 n, u64 tm,
                     u64 tn, u64 k0, u32 lane) {
  (void)a, (void)bt, (void)n, (void)tm, (void)tn, (void)k0, (void)lane;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
}
#else
DEVICE u32 lane_id(void) { return (u32)(host_tid & 31); }
DEVICE float bf16_value(u16 h) {
  union {
    u32 u;
    float f;
  } c;
  c.u = (u32)h << 16;
  return c.f;
}
// The host's stand-in for one warp's mma: the tiles are put together from the
// registers every lane of the warp loads (load_frags for each lane, placed by the
// fragment layout), and this lane's four results are chains of FMAs in k order.
DEVICE void mma_step(float d[4], const u32 ra[4], const u32 rb[2], const u16 *a, const u16 *bt, u64 n, u64 tm,
                     u64 tn, u64 k0, u32 lane) {
  (void)ra, (void)rb;
  float ta[16][16], tb[16][8];
  for (u32 l = 0; l < 32; l++) {
    u32 xa[4], xb[2];
    load_frags(a, bt, n, tm, tn, k0, l, xa, xb);
    for (u32 e = 0; e < 8; e++)
      ta[frag_a_row(l, e)][frag_a_col(l, e)] = bf16_value((u16)(xa[e / 2] >> (16 * (e & 1))));
    for (u32 e = 0; e < 4; e++)
      tb[frag_b_row(l, e)][frag_b_col(l, e)] = bf16_value((u16)(xb[e / 2] >> (16 * (e & 1))));
  }
  for (u32 e = 0; e < 4; e++) {
    u32 i = frag_c_row(lane, e), j = frag_c_col(lane, e);
    for (u32 k = 0; k < 16; k++) d[e] = __builtin_fmaf(ta[i][k], tb[k][j], d[e]);
  }
}
#endif

// c (n×n f32, row-major) = A·B for n a multiple of 16: each warp takes 16×8 tiles of C
// in turn (warp w: tiles w, w + warps, ...), each tile's k loop in order from 0.
KERNEL BOUNDS(256, 1) void burnin_mma(const u16 *a, const u16 *bt, float *c, u64 n) {
  u32 lane = lane_id();
  u64 warp = THREAD_INDEX / 32, warps = THREAD_COUNT / 32;
  u64 cols = n / 8, tiles = (n / 16) * cols;
  for (u64 t = warp; t < tiles; t += warps) {
    u64 tm = t / cols, tn = t % cols;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (u64 k0 = 0; k0 < n; k0 += 16) {
      u32 ra[4], rb[2];
      load_frags(a, bt, n, tm, tn, k0, lane, ra, rb);
      mma_step(d, ra, rb, a, bt, n, tm, tn, k0, lane);
    }
    for (u32 e = 0; e < 4; e++) c[(tm * 16 + frag_c_row(lane, e)) * n + tn * 8 + frag_c_col(lane, e)] = d[e];
  }
}
