//! `burnin gpu --sdc TIME`: rounds of a deterministic workload on every rank, hashed
//! per kind and block, the hashes exchanged and voted on (`results::sdc`).
//!
//! Each round's inputs are a function of its number ([`round_seed`]), so every rank
//! computes the same thing in a round and something else in the next, and a round can
//! be computed again anywhere (`--sdc-start R --sdc-rounds 1`). Kinds:
//! - `fma` (GPU: burnin_fma, the burn's kernel; CPU: the same chains with
//!   `f32::mul_add`): `iters` fused multiply-adds from each element's start value,
//!   `iters` and the addend drawn from the round's seed. One FMA is correctly rounded
//!   everywhere, so a healthy GPU and a healthy CPU give the same bits.
//! - `memory`: the round's pattern written to the device (or RAM), copied to a second
//!   buffer there, and read back.
//! - `gemm`: a matrix product. CPU ranks: n×n f32 with one FMA per term in a fixed k
//!   order. GPU ranks (Ampere or newer, `sdc.cu`): n×n bf16 operands made on the GPU
//!   from the seed, multiplied on the tensor cores (`mma.sync.m16n8k16`, f32
//!   accumulation, each tile's k loop in a fixed order). A tensor core does not round
//!   like a chain of FMAs, so GPUs of one model agree bit for bit and the host only
//!   checks the product within a bound.
//! - `reduce`: f64 sums of 64 pattern words each, in a fixed order (on a GPU: the
//!   words made on the device, one thread a sum): IEEE additions, so GPU and host
//!   agree bit for bit.
//!
//! A GPU older than Ampere (or one whose driver refuses the SDC PTX) votes with fma
//! and memory only, and its rank's host-check notes say why.
//!
//! The round's hashes go to every rank in one all-gather (with rank 0's "go on"), and
//! rank 0 votes. Every rank makes the same MPI calls in the same order whatever its
//! GPU did; a failing GPU hashes nothing (zeros) and is named by the vote.
use super::copy::{fill_pattern, wait_idle, Pinned, STAGE_LIMIT};
use crate::backend::nccl::device::{cuda_error, Device, DeviceBuffer};
use crate::backend::nccl::kernels::{self, Kernels};
use crate::backend::nccl::sdc_kernels::{self, SdcKernels};
use crate::error::usage;
use crate::results::sdc::{self, Ballot, SdcFinding, SdcRank, SdcReport, BLOCKS};
use crate::world::World;
use anyhow::Result;
use cudarc::driver::result;
use mpi::collective::CommunicatorCollectives;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Kinds a GPU rank computes, in hash order (the first two only on a GPU that cannot
/// run the SDC kernels).
pub const GPU_KINDS: [&str; 4] = ["fma", "memory", "gemm", "reduce"];
/// Kinds a CPU rank computes, in hash order.
pub const CPU_KINDS: [&str; 4] = ["fma", "memory", "gemm", "reduce"];

/// The FMA chains' multiplier: the burn's.
const A: f32 = super::burn::A;

/// Round `round`'s seed (SplitMix64 of the round number).
pub fn round_seed(round: u64) -> u64 {
    crate::fault::SplitMix64(round ^ 0x5DC0_DE5D_C0DE).next_u64()
}

/// The FMA chains' steps and addend in a round: 64..=319 steps, addend k·2⁻³¹ for k in
/// 1..=1024 (the chains stay between the start value and 0.5).
pub fn fma_params(seed: u64) -> (u64, f32) {
    let iters = 64 + seed % 256;
    let k = 1 + (seed >> 20) % 1024;
    (iters, k as f32 * (1.0 / 2_147_483_648.0))
}

/// The host build of burnin_fma: element i after `iters` steps from its start value.
pub fn fma_host(len: usize, iters: u64, b: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(len * 4);
    for base in (0..len).step_by(16) {
        let n = (len - base).min(16);
        let mut x: [f32; 16] = std::array::from_fn(|k| super::burn::start_value((base + k) as u64));
        for _ in 0..iters {
            for v in &mut x {
                *v = v.mul_add(A, b);
            }
        }
        for v in &x[..n] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// The memory kind on the host: the pattern written, copied to a second buffer, read.
pub fn memory_host(bytes: usize, seed: u64) -> Vec<u8> {
    let mut a = vec![0u8; bytes];
    fill_pattern(&mut a, seed);
    let mut b = vec![0u8; bytes];
    b.copy_from_slice(&a);
    b
}

/// The matrix order of the gemm kind for `bytes` of output: n×n f32, n a multiple of
/// 16 from 16 to 256.
pub fn gemm_order(bytes: usize) -> usize {
    let n = ((bytes / 4) as f64).sqrt() as usize;
    (n / 16 * 16).clamp(16, 256)
}

/// The matrix order of a GPU's gemm kind for `bytes` a kind: half the order whose
/// f32 output would fill `bytes`, a multiple of 16 from 16 to 1024 (16 MiB: 1024,
/// 2.1 GFLOP a round).
pub fn gemm_order_gpu(bytes: usize) -> usize {
    let n = ((bytes / 4) as f64).sqrt() as usize / 2;
    (n / 16 * 16).clamp(16, 1024)
}

/// A bf16 operand of the GPU's product from a pattern word (`sdc_bf16` in sdc.cu):
/// ±[0.5, 2) with 8 significant bits, so every product of two is exact in f32.
pub fn bf16_operand(w: u64) -> f32 {
    let bits = ((w >> 63) << 15) | ((126 + ((w >> 62) & 1)) << 7) | ((w >> 40) & 0x7f);
    f32::from_bits((bits as u32) << 16)
}

/// The GPU product's operands for order n: A row-major and B row-major, as f32.
fn mma_operands(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let make = |s: u64| {
        (0..n * n)
            .map(|e| bf16_operand(super::copy::pattern_word(s, e as u64)))
            .collect()
    };
    (make(seed), make(seed ^ 0xB))
}

/// The GPU product as a chain of FMAs in k order (the twin's host build computes
/// exactly this; a tensor core rounds otherwise, within [`mma_check`]'s bound).
pub fn mma_host(n: usize, seed: u64) -> Vec<u8> {
    let (a, b) = mma_operands(n, seed);
    let mut out = Vec::with_capacity(n * n * 4);
    for i in 0..n {
        for j in 0..n {
            let c = (0..n).fold(0f32, |c, k| a[i * n + k].mul_add(b[k * n + j], c));
            out.extend_from_slice(&c.to_le_bytes());
        }
    }
    out
}

/// Compare a GPU's product (`out`, n×n f32) with the host on some rows (about
/// [`sdc::HOST_CHECKED`] elements, spread over the matrix): "equal" when every
/// element is the host's FMA chain bit for bit, "within" when each is within
/// 2⁻¹² × Σ|aₖbₖ| of the exact sum, Err naming the first element that is not.
pub fn mma_check(out: &[u8], n: usize, seed: u64) -> Result<&'static str, String> {
    let (a, b) = mma_operands(n, seed);
    let rows = (sdc::HOST_CHECKED / n).clamp(1, n);
    let mut equal = true;
    for r in 0..rows {
        let i = r * n / rows;
        for j in 0..n {
            let (mut chain, mut exact, mut size) = (0f32, 0f64, 0f64);
            for k in 0..n {
                chain = a[i * n + k].mul_add(b[k * n + j], chain);
                let p = f64::from(a[i * n + k]) * f64::from(b[k * n + j]);
                exact += p;
                size += p.abs();
            }
            let at = (i * n + j) * 4;
            let Some(got) = out.get(at..at + 4) else {
                return Err(format!(
                    "the output is {} bytes, not {}",
                    out.len(),
                    n * n * 4
                ));
            };
            let got = f32::from_le_bytes([got[0], got[1], got[2], got[3]]);
            equal &= got.to_bits() == chain.to_bits();
            if (f64::from(got) - exact).abs() > size / 4096.0 || got.is_nan() {
                return Err(format!(
                    "row {i} column {j}: {got} where the exact sum is {exact} (bound {:.3e})",
                    size / 4096.0
                ));
            }
        }
    }
    Ok(if equal { "equal" } else { "within" })
}

/// A value in [-1, 1) with 24 significant bits from a pattern word.
fn unit(w: u64) -> f32 {
    ((w >> 40) as i32 - (1 << 23)) as f32 * (1.0 / 8_388_608.0)
}

/// C = A·B for n×n f32 matrices drawn from the seed, one FMA per term in k order.
pub fn gemm_host(n: usize, seed: u64) -> Vec<u8> {
    let a: Vec<f32> = (0..n * n)
        .map(|i| unit(super::copy::pattern_word(seed, i as u64)))
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| unit(super::copy::pattern_word(seed ^ 0xB, i as u64)))
        .collect();
    let mut out = Vec::with_capacity(n * n * 4);
    let mut row = vec![0f32; n];
    for i in 0..n {
        row.fill(0.0);
        for k in 0..n {
            let aik = a[i * n + k];
            for (j, c) in row.iter_mut().enumerate() {
                *c = aik.mul_add(b[k * n + j], *c);
            }
        }
        for c in &row {
            out.extend_from_slice(&c.to_le_bytes());
        }
    }
    out
}

/// f64 sums of the memory pattern in a fixed order: one sum per 64 words (at least
/// 1024 words: 16 sums, two 4-byte words in each block), each word taken as a value
/// in [0, 1).
pub fn reduce_host(bytes: usize, seed: u64) -> Vec<u8> {
    let words = (bytes / 8).max(1024) as u64;
    let mut out = Vec::with_capacity((words / 64) as usize * 8);
    for c in 0..words / 64 {
        let mut s = 0f64;
        for i in c * 64..(c + 1) * 64 {
            s +=
                (super::copy::pattern_word(seed, i) >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0);
        }
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// A 64-bit hash of `bytes` (word-wise multiply-rotate, then the length; the same on
/// every little- or big-endian host, since words are read little-endian).
pub fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0x5DC5_DC5D_C5DC_5DC5;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ w).wrapping_mul(K).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(tail))
        .wrapping_mul(K)
        .rotate_left(31);
    let mut z = h ^ bytes.len() as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The byte range of block `b` of an output of `len` bytes (4-byte aligned).
pub fn block_range(len: usize, b: usize) -> std::ops::Range<usize> {
    let words = len / 4;
    (words * b / BLOCKS * 4)..if b + 1 == BLOCKS {
        len
    } else {
        words * (b + 1) / BLOCKS * 4
    }
}

/// [`BLOCKS`] hashes of one output.
pub fn block_hashes(out: &[u8]) -> [u64; BLOCKS] {
    std::array::from_fn(|b| hash(&out[block_range(out.len(), b)]))
}

/// Test only (`--sdc-fault RANK:ROUND:KIND:BLOCK`): flip one bit of that rank's output
/// of that kind in that block, in that round, before it is hashed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub rank: usize,
    pub round: u64,
    pub kind: String,
    pub block: usize,
}

impl Fault {
    pub fn parse(s: &str) -> Result<Fault> {
        let bad = |why: &str| {
            usage(
                "--sdc-fault",
                format!("{s:?}: {why} (expected RANK:ROUND:KIND:BLOCK, e.g. 2:5:fma:3)"),
            )
        };
        let p: Vec<&str> = s.split(':').collect();
        if p.len() != 4 {
            return Err(bad("four fields"));
        }
        let rank = p[0].parse().map_err(|_| bad("RANK is not a number"))?;
        let round = p[1].parse().map_err(|_| bad("ROUND is not a number"))?;
        if !CPU_KINDS.contains(&p[2]) {
            return Err(bad("KIND is not fma, memory, gemm or reduce"));
        }
        let block: usize = p[3].parse().map_err(|_| bad("BLOCK is not a number"))?;
        if block >= BLOCKS {
            return Err(bad(&format!("BLOCK must be below {BLOCKS}")));
        }
        Ok(Fault {
            rank,
            round,
            kind: p[2].to_string(),
            block,
        })
    }

    /// Whether the fault is this rank's, in this round, of this kind.
    fn hits(&self, rank: usize, round: u64, kind: &str) -> bool {
        self.rank == rank && self.round == round && self.kind == kind
    }

    /// Flip bit 0 of the middle 4-byte element of the block, when it is this one.
    fn apply(&self, rank: usize, round: u64, kind: &str, out: &mut [u8]) {
        let r = block_range(out.len(), self.block);
        if self.hits(rank, round, kind) && !r.is_empty() {
            let i = (r.start + (r.end - r.start) / 2) & !3;
            out[i.min(out.len() - 1)] ^= 1;
            eprintln!(
                "burnin: rank {rank}: round {round} {kind} block {}: one bit flipped (--sdc-fault)",
                self.block
            );
        }
    }
}

/// The settings of the rounds.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seconds: f64,
    pub max_rounds: Option<u64>,
    pub first_round: u64,
    pub bytes: usize,
    pub fault: Option<Fault>,
}

/// The gemm and reduce kinds' kernels and buffers on one GPU.
struct SdcOnGpu {
    k: SdcKernels,
    n: usize,
    sums: usize,
    a: DeviceBuffer,
    bt: DeviceBuffer,
    c: DeviceBuffer,
    words: DeviceBuffer,
    out: DeviceBuffer,
}

/// Sums of the reduce kind for `bytes` a kind (at least 16: one a block).
pub fn reduce_sums(bytes: usize) -> usize {
    (bytes / 8).max(1024) / sdc_kernels::REDUCE_WORDS as usize
}

impl SdcOnGpu {
    fn new(dev: &Arc<Device>, bytes: usize) -> anyhow::Result<SdcOnGpu> {
        let k = SdcKernels::load(dev)?;
        let n = gemm_order_gpu(bytes);
        let sums = reduce_sums(bytes);
        let words = sums * sdc_kernels::REDUCE_WORDS as usize * 8;
        let alloc = |len| DeviceBuffer::alloc(dev, len);
        let bufs = (|| {
            Ok::<_, anyhow::Error>((
                alloc(n * n * 2)?,
                alloc(n * n * 2)?,
                alloc(n * n * 4)?,
                alloc(words)?,
                alloc(sums * 8)?,
            ))
        })();
        match bufs {
            Ok((a, bt, c, words, out)) => Ok(SdcOnGpu {
                k,
                n,
                sums,
                a,
                bt,
                c,
                words,
                out,
            }),
            Err(e) => {
                k.unload();
                Err(e)
            }
        }
    }
}

/// One GPU's buffers for the rounds.
struct OnGpu {
    dev: Arc<Device>,
    k: Option<Kernels>,
    /// The gemm and reduce kinds, or why they cannot run on this GPU.
    sdc: Result<SdcOnGpu, String>,
    fma: DeviceBuffer,
    src: DeviceBuffer,
    dst: DeviceBuffer,
    host: Pinned,
}

impl OnGpu {
    fn new(dev: &Arc<Device>, bytes: usize) -> Result<OnGpu, String> {
        let k = Kernels::load(dev).map_err(|e| format!("{e:#}"))?;
        let alloc = |n| DeviceBuffer::alloc(dev, n).map_err(|e| format!("{e:#}"));
        Ok(OnGpu {
            dev: Arc::clone(dev),
            fma: alloc(bytes)?,
            src: alloc(bytes)?,
            dst: alloc(bytes)?,
            host: Pinned::alloc(dev, bytes)?,
            sdc: SdcOnGpu::new(dev, bytes).map_err(|e| format!("{e:#}")),
            k: Some(k),
        })
    }

    /// The gemm or reduce kind's output, back in `host` (its length: both are at
    /// most `bytes` long, n² f32 with n ≤ half the order that fills it, bytes/64 sums).
    fn sdc_kind(&mut self, kind: &str, seed: u64) -> Result<usize, String> {
        let d = &self.dev;
        let x = self.sdc.as_ref().map_err(|e| e.clone())?;
        super::copy::not_hung(d)?;
        d.bind().map_err(|e| format!("{e:#}"))?;
        let stream = d.raw_stream();
        let (from, len) = if kind == "gemm" {
            // SAFETY: a and bt hold n² bf16, c n² f32 on this GPU, alive in `self`.
            unsafe {
                sdc_kernels::product(
                    &x.k,
                    stream,
                    (x.a.ptr(), x.bt.ptr(), x.c.ptr()),
                    x.n as u64,
                    seed,
                )
            }
            .map_err(|e| format!("{e:#}"))?;
            (x.c.ptr(), x.n * x.n * 4)
        } else {
            // SAFETY: words holds sums × 64 u64 and out sums f64 on this GPU.
            unsafe {
                sdc_kernels::sums(
                    &x.k,
                    stream,
                    (x.words.ptr(), x.out.ptr()),
                    x.sums as u64,
                    seed,
                )
            }
            .map_err(|e| format!("{e:#}"))?;
            (x.out.ptr(), x.sums * 8)
        };
        let host = &mut self.host.bytes_mut()[..len];
        // SAFETY: `from` holds len bytes on this GPU and `host` as many pinned bytes;
        // the stream is waited for before `host` is read.
        unsafe { result::memcpy_dtoh_async(host, from, stream) }.map_err(|e| {
            format!(
                "{:#}",
                cuda_error(&format!("copying the {kind} results back"), e)
            )
        })?;
        wait_idle(d, &format!("an SDC {kind} round"), STAGE_LIMIT)?;
        Ok(len)
    }

    /// The fma kind's output, back in `host` (its length).
    fn fma(&mut self, iters: u64, b: f32) -> Result<usize, String> {
        let d = &self.dev;
        let Some(k) = &self.k else {
            return Err("the kernels are unloaded".into());
        };
        super::copy::not_hung(d)?;
        d.bind().map_err(|e| format!("{e:#}"))?;
        let len = (self.fma.len() / 4) as u64;
        let blocks = len.div_ceil(1024).clamp(1, 65_535) as u32;
        // SAFETY: `fma` holds len f32 on this GPU and `host` as many pinned bytes; the
        // stream is waited for before `host` is read.
        unsafe {
            kernels::fma(
                k,
                d.raw_stream(),
                self.fma.ptr(),
                len,
                iters,
                (A, b),
                blocks,
            )
            .map_err(|e| format!("{e:#}"))?;
            result::memcpy_dtoh_async(self.host.bytes_mut(), self.fma.ptr(), d.raw_stream())
                .map_err(|e| format!("{:#}", cuda_error("copying the fma results back", e)))?;
        }
        wait_idle(d, "an SDC fma round", STAGE_LIMIT)?;
        Ok(self.host.bytes().len())
    }

    /// The memory kind: pattern up, copied on the device, back in `host` (its length).
    fn memory(&mut self, seed: u64) -> Result<usize, String> {
        let d = &self.dev;
        super::copy::not_hung(d)?;
        d.bind().map_err(|e| format!("{e:#}"))?;
        fill_pattern(self.host.bytes_mut(), seed);
        let stream = d.raw_stream();
        let n = self.src.len();
        // SAFETY: src, dst and host hold n bytes each; the stream is waited for before
        // host is written again or read.
        unsafe {
            result::memcpy_htod_async(self.src.ptr(), self.host.bytes(), stream)
                .map_err(|e| format!("{:#}", cuda_error("copying the pattern up", e)))?;
            result::memcpy_dtod_async(self.dst.ptr(), self.src.ptr(), n, stream)
                .map_err(|e| format!("{:#}", cuda_error("copying the pattern on the GPU", e)))?;
        }
        wait_idle(d, "an SDC memory round (up)", STAGE_LIMIT)?;
        self.host.bytes_mut().fill(0);
        // SAFETY: as above.
        unsafe {
            result::memcpy_dtoh_async(self.host.bytes_mut(), self.dst.ptr(), stream)
                .map_err(|e| format!("{:#}", cuda_error("copying the pattern back", e)))?;
        }
        wait_idle(d, "an SDC memory round (back)", STAGE_LIMIT)?;
        Ok(self.host.bytes().len())
    }
}

impl Drop for OnGpu {
    fn drop(&mut self) {
        if let Some(k) = self.k.take().filter(|_| !self.dev.is_poisoned()) {
            k.unload();
        }
        let sdc = std::mem::replace(&mut self.sdc, Err(String::new()));
        if let Some(x) = sdc.ok().filter(|_| !self.dev.is_poisoned()) {
            x.k.unload();
        }
    }
}

/// The CPU's model name ("CPU <model name>" from /proc/cpuinfo).
pub fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let m = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("CPU {m}")
}

/// Every rank's rounds; rank 0 returns the report (others None). `me` describes this
/// rank; `dev` is its GPU when it has one.
pub fn rounds(
    world: &World,
    plan: &Plan,
    me: SdcRank,
    dev: Option<&Arc<Device>>,
    phase_t0: Instant,
) -> Option<SdcReport> {
    let t0 = Instant::now();
    let mut error = None;
    // A rank with a GPU computes on it or not at all: after its GPU fails, its later
    // rounds do not vote (the host's outputs are not the GPU's: an fma chain the host
    // computes the same would vote as a GPU that computed nothing, a product rounded
    // differently as a "gemm SDC").
    let had_gpu = dev.is_some();
    let mut gpu = match dev {
        Some(d) => match OnGpu::new(d, plan.bytes) {
            Ok(g) => Some(g),
            Err(e) => {
                error = Some(format!("rank {}: {e}", world.rank));
                None
            }
        },
        None => None,
    };
    let mut me = me;
    me.kinds = match (dev, &gpu) {
        (None, _) => &CPU_KINDS[..],
        (Some(_), Some(OnGpu { sdc: Err(why), .. })) => {
            me.host_checks
                .push(format!("gemm, reduce: not run ({why})"));
            &GPU_KINDS[..2]
        }
        (Some(_), _) => &GPU_KINDS[..],
    }
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut ranks: Vec<SdcRank> = world.all_gather_json(&me).unwrap_or_default();
    let width = 1 + CPU_KINDS.len() * BLOCKS;
    let mut tally = Tally::default();
    let mut times = Vec::new();
    let mut round = plan.first_round;
    loop {
        let r0 = Instant::now();
        let t_s = phase_t0.elapsed().as_secs_f64();
        let seed = round_seed(round);
        let mut mine = vec![0u64; width];
        let ctx = (world.rank, round, seed);
        if !(had_gpu && gpu.is_none()) {
            hash_round(plan, ctx, &mut me, &mut gpu, &mut error, &mut mine[1..]);
        }
        let lost = had_gpu && gpu.is_none();
        if lost && me.gpu_lost.is_none() {
            me.gpu_lost = Some(
                error
                    .clone()
                    .unwrap_or_else(|| format!("rank {}: its GPU failed", world.rank)),
            );
        }
        let rounds_done = round - plan.first_round + 1;
        // Another round only while it is expected to end in time (this round's length
        // as its estimate; rank 0 decides for all): TIME is when the vote ends, not
        // when its last round starts — a round of the twin's host-built kernels, or
        // of a big --sdc-bytes, can take seconds.
        let go_on = t0.elapsed().as_secs_f64() + r0.elapsed().as_secs_f64() <= plan.seconds
            && !matches!(plan.max_rounds, Some(m) if rounds_done >= m);
        // Bit 0: go on (rank 0's decides); bit 1: this rank's GPU has failed, its
        // hashes are not votes.
        mine[0] = u64::from(go_on) | (u64::from(lost) << 1);
        let mut all = vec![0u64; width * world.size];
        world.comm.all_gather_into(&mine[..], &mut all[..]);
        if world.rank == 0 {
            tally.add(round, t_s, &mut ranks, &all, width);
        }
        times.push(r0.elapsed().as_secs_f64());
        if all[0] & 1 == 0 {
            break;
        }
        round += 1;
    }
    drop(gpu);
    type Checks = (Option<bool>, Vec<String>, Option<String>);
    let checks: Vec<Checks> = world
        .all_gather_json(&(me.host_check, me.host_checks.clone(), me.gpu_lost.clone()))
        .unwrap_or_default();
    if world.rank != 0 {
        return None;
    }
    for (x, (c, notes, lost)) in ranks.iter_mut().zip(checks) {
        x.host_check = c;
        x.host_checks = notes;
        x.gpu_lost = lost;
    }
    times.sort_by(f64::total_cmp);
    Some(SdcReport {
        seconds_asked: plan.seconds,
        seconds: t0.elapsed().as_secs_f64(),
        first_round: plan.first_round,
        rounds: times.len() as u64,
        round_s_median: times.get(times.len() / 2).copied().unwrap_or(0.0),
        bytes_per_kind: plan.bytes as u64,
        ranks: std::mem::take(&mut ranks),
        findings: tally.findings,
        findings_total: tally.total,
        error,
    })
}

/// Rank 0's record of the vote over the rounds.
#[derive(Default)]
struct Tally {
    findings: Vec<SdcFinding>,
    total: u64,
}

impl Tally {
    /// Vote on one round's all-gathered hashes (`width` u64 a rank: the go-on flag,
    /// then kinds × BLOCKS), name the disagreeing ranks, keep the first findings.
    fn add(&mut self, round: u64, t_s: f64, ranks: &mut [SdcRank], all: &[u64], width: usize) {
        for (r, x) in ranks.iter_mut().enumerate() {
            if all[r * width] & 2 != 0 {
                x.rounds_lost += 1;
            }
        }
        let ballots: Vec<Ballot> = ranks
            .iter()
            .enumerate()
            .filter(|(r, _)| all[r * width] & 2 == 0)
            .map(|(r, x)| Ballot {
                rank: r,
                model: &x.model,
                kinds: &x.kinds,
                hashes: &all[r * width + 1..r * width + 1 + x.kinds.len() * BLOCKS],
            })
            .collect();
        let found = sdc::vote(round, t_s, &ballots);
        let named: Vec<usize> = found.iter().flat_map(|f| f.ranks.iter().copied()).collect();
        crate::metrics::sdc_round(ranks, &named);
        for f in &found {
            for r in &f.ranks {
                if let Some(x) = ranks.get_mut(*r) {
                    x.disagreements += 1;
                }
            }
        }
        self.total += found.len() as u64;
        let room = sdc::MAX_FINDINGS.saturating_sub(self.findings.len());
        for f in found.into_iter().take(room) {
            println!("# sdc: {}", sdc::describe(&f, ranks));
            self.findings.push(f);
        }
    }
}

/// This rank's outputs of one round, hashed into `hashes` (kinds × BLOCKS); a GPU
/// that fails is dropped (its kinds are not computed from then on, and the rank's
/// ballots leave the vote), the first failure kept in `error`. `ctx`: (world rank,
/// round, round seed).
fn hash_round(
    plan: &Plan,
    (rank, round, seed): (usize, u64, u64),
    me: &mut SdcRank,
    gpu: &mut Option<OnGpu>,
    error: &mut Option<String>,
    hashes: &mut [u64],
) {
    let (iters, b) = fma_params(seed);
    let on_gpu = gpu.is_some();
    for (k, kind) in me.kinds.clone().iter().enumerate() {
        if on_gpu && gpu.is_none() {
            // Its GPU failed earlier in this round: nothing more to compute on it.
            break;
        }
        // A GPU's output is hashed where it landed (pinned memory), not copied.
        fn on(g: &OnGpu, len: Result<usize, String>) -> Result<Cow<'_, [u8]>, String> {
            len.map(|n| Cow::Borrowed(&g.host.bytes()[..n]))
        }
        let out: Result<Cow<[u8]>, String> = match (kind.as_str(), gpu.as_mut()) {
            ("fma", Some(g)) => {
                let n = g.fma(iters, b);
                on(g, n)
            }
            ("memory", Some(g)) => {
                let n = g.memory(seed);
                on(g, n)
            }
            (_, Some(g)) => {
                let n = g.sdc_kind(kind, seed);
                on(g, n)
            }
            ("fma", None) => Ok(Cow::Owned(fma_host(plan.bytes / 4, iters, b))),
            ("memory", None) => Ok(Cow::Owned(memory_host(plan.bytes, seed))),
            ("gemm", _) => Ok(Cow::Owned(gemm_host(gemm_order(plan.bytes), seed))),
            _ => Ok(Cow::Owned(reduce_host(plan.bytes, seed))),
        };
        if let (true, true, Ok(o)) = (on_gpu, round == plan.first_round, &out) {
            check_with_host(me, kind, o, plan.bytes, seed);
        }
        match out {
            Ok(mut out) => {
                if let Some(f) = plan.fault.as_ref().filter(|f| f.hits(rank, round, kind)) {
                    f.apply(rank, round, kind, out.to_mut());
                }
                hashes[k * BLOCKS..(k + 1) * BLOCKS].copy_from_slice(&block_hashes(&out));
            }
            Err(e) => {
                error.get_or_insert_with(|| format!("rank {rank} round {round} {kind}: {e}"));
                *gpu = None;
            }
        }
    }
}

/// A GPU's first round against the host: fma (its first [`sdc::HOST_CHECKED`]
/// elements) and reduce bit for bit, gemm within [`mma_check`]'s bound. Each kind adds
/// a note; `host_check` is whether all of them held.
fn check_with_host(me: &mut SdcRank, kind: &str, out: &[u8], bytes: usize, seed: u64) {
    let (iters, b) = fma_params(seed);
    let verdict = match kind {
        "fma" => {
            let n = (out.len() / 4).min(sdc::HOST_CHECKED);
            if out[..n * 4] == fma_host(n, iters, b)[..] {
                Ok("equal")
            } else {
                Err("differs from the host's chains (f32::mul_add)".to_string())
            }
        }
        "reduce" => {
            if out == reduce_host(bytes, seed) {
                Ok("equal")
            } else {
                Err("differs from the host's f64 sums".to_string())
            }
        }
        "gemm" => mma_check(out, gemm_order_gpu(bytes), seed),
        _ => return,
    };
    let ok = verdict.is_ok();
    me.host_checks.push(match verdict {
        Ok("equal") => format!("{kind}: equal to the host bit for bit"),
        Ok(_) => format!("{kind}: within 2^-12 of the exact sums (tensor-core rounding)"),
        Err(e) => format!("{kind}: {e}"),
    });
    me.host_check = Some(me.host_check.unwrap_or(true) && ok);
}

/// Each finding's temperature and SM clock: the first named rank's NVML sample
/// nearest the round's start (samples are per rank, in seconds since its phase began).
pub fn annotate(report: &mut SdcReport, samples: &[Vec<crate::results::gpu::Sample>]) {
    for f in &mut report.findings {
        let Some(s) = f.ranks.first().and_then(|r| samples.get(*r)) else {
            continue;
        };
        if let Some(x) = s
            .iter()
            .min_by(|a, b| (a.t_s - f.t_s).abs().total_cmp(&(b.t_s - f.t_s).abs()))
        {
            f.temp_c = x.temp_c;
            f.sm_mhz = x.sm_mhz;
        }
    }
}

/// A one-line summary for the table printed by `burnin gpu`.
pub fn summary(r: &SdcReport) -> String {
    let kinds: Vec<String> = {
        let mut k: Vec<String> = r.ranks.iter().flat_map(|x| x.kinds.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    format!(
        "# sdc: {} round(s) from round {} in {:.1} s ({:.1} ms a round; {} per kind; kinds {}), {} disagreement(s)",
        r.rounds,
        r.first_round,
        r.seconds,
        r.round_s_median * 1e3,
        crate::units::Bytes(r.bytes_per_kind),
        kinds.join(", "),
        r.findings_total
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_reproducible_and_differ_from_each_other() {
        // The hash of a round is a constant: a change here changes every record.
        let s = round_seed(0);
        assert_eq!(s, round_seed(0));
        assert_ne!(round_seed(1), s);
        let (iters, b) = fma_params(s);
        assert!((64..320).contains(&iters) && b > 0.0 && b <= 1.0 / 2_097_152.0);
        let a = block_hashes(&fma_host(4096, iters, b));
        assert_eq!(a, block_hashes(&fma_host(4096, iters, b)));
        let (i2, b2) = fma_params(round_seed(1));
        assert_ne!(a, block_hashes(&fma_host(4096, i2, b2)));
        assert_ne!(
            block_hashes(&memory_host(4096, 1)),
            block_hashes(&memory_host(4096, 2))
        );
    }

    #[test]
    fn the_host_fma_is_the_burn_chain() {
        let out = fma_host(2048, 100, super::super::burn::B);
        for i in [0usize, 1, 1023, 1024, 2047] {
            let got = f32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
            assert_eq!(
                got.to_bits(),
                super::super::burn::host_chain(i as u64, 100).to_bits(),
                "{i}"
            );
        }
    }

    #[test]
    fn gemm_and_reduce_match_a_plain_reference() {
        let n = gemm_order(64 * 64 * 4);
        assert_eq!(n, 64);
        let out = gemm_host(n, 9);
        let a = |i: usize| unit(super::super::copy::pattern_word(9, i as u64));
        let b = |i: usize| unit(super::super::copy::pattern_word(9 ^ 0xB, i as u64));
        for (i, j) in [(0, 0), (5, 63), (63, 1)] {
            let mut c = 0f32;
            for k in 0..n {
                c = a(i * n + k).mul_add(b(k * n + j), c);
            }
            let got = f32::from_le_bytes(out[(i * n + j) * 4..][..4].try_into().unwrap());
            assert_eq!(got, c);
            // and near the f64 product (rounding only)
            let exact: f64 = (0..n)
                .map(|k| f64::from(a(i * n + k)) * f64::from(b(k * n + j)))
                .sum();
            assert!((f64::from(got) - exact).abs() < 1e-4, "{got} {exact}");
        }
        assert_eq!(gemm_order(1), 16);
        assert_eq!(gemm_order(1 << 30), 256);
        let r = reduce_host(8 * 2048, 3);
        assert_eq!(r.len(), 2048 / 64 * 8);
        assert_eq!(reduce_host(4096, 3).len(), BLOCKS * 8, "at least 16 sums");
        let s0 = f64::from_le_bytes(r[..8].try_into().unwrap());
        assert!((16.0..48.0).contains(&s0), "{s0}"); // 64 values in [0, 1)
        let direct: f64 = (0..64)
            .map(|i| {
                (super::super::copy::pattern_word(3, i) >> 11) as f64 / 9_007_199_254_740_992.0
            })
            .sum();
        assert_eq!(s0, direct);
    }

    #[test]
    fn the_gpu_product_reference_and_its_bound() {
        assert_eq!(
            (
                gemm_order_gpu(4096),
                gemm_order_gpu(4 << 20),
                gemm_order_gpu(16 << 20)
            ),
            (16, 512, 1024)
        );
        assert_eq!(gemm_order_gpu(1 << 30), 1024);
        assert_eq!((reduce_sums(4096), reduce_sums(16 << 20)), (16, 32_768));
        // Operands: bf16 values (low 16 bits zero) in ±[0.5, 2), both signs.
        let v: Vec<f32> = (0..1000)
            .map(|i| bf16_operand(super::super::copy::pattern_word(7, i)))
            .collect();
        assert!(v
            .iter()
            .all(|x| x.to_bits() & 0xffff == 0 && (0.5..2.0).contains(&x.abs())));
        assert!(v.iter().any(|x| *x < 0.0) && v.iter().any(|x| *x >= 1.0));
        // The reference is a plain triple loop of FMAs in k order.
        let n = 32;
        let out = mma_host(n, 5);
        let a = |e: usize| bf16_operand(super::super::copy::pattern_word(5, e as u64));
        let b = |e: usize| bf16_operand(super::super::copy::pattern_word(5 ^ 0xB, e as u64));
        for (i, j) in [(0, 0), (3, 31), (31, 7)] {
            let mut c = 0f32;
            for k in 0..n {
                c = a(i * n + k).mul_add(b(k * n + j), c);
            }
            let got = f32::from_le_bytes(out[(i * n + j) * 4..][..4].try_into().unwrap());
            assert_eq!(got.to_bits(), c.to_bits(), "{i} {j}");
        }
        assert_eq!(mma_check(&out, n, 5), Ok("equal"));
        // Another rounding (one ulp off) is within the bound; a tile in the wrong
        // place (what a fragment-layout error gives) is not, and is located.
        let mut ulp = out.clone();
        let x = f32::from_le_bytes(ulp[40..44].try_into().unwrap());
        ulp[40..44].copy_from_slice(&f32::from_bits(x.to_bits() + 1).to_le_bytes());
        assert_eq!(mma_check(&ulp, n, 5), Ok("within"));
        let mut swapped = out.clone();
        swapped[..4].copy_from_slice(&out[4..8]);
        swapped[4..8].copy_from_slice(&out[..4]);
        let e = mma_check(&swapped, n, 5).unwrap_err();
        assert!(e.starts_with("row 0 column 0: "), "{e}");
        assert!(mma_check(&out[..100], n, 5)
            .unwrap_err()
            .contains("100 bytes"));
    }

    #[test]
    fn blocks_cover_the_output_and_a_flipped_bit_changes_one_block() {
        let len = 4 * 1000 + 2;
        let mut end = 0;
        for b in 0..BLOCKS {
            let r = block_range(len, b);
            assert_eq!(r.start, end);
            assert_eq!(r.start % 4, 0);
            end = r.end;
        }
        assert_eq!(end, len);
        let mut out = memory_host(len, 5);
        let before = block_hashes(&out);
        let f = Fault::parse("3:7:memory:9").unwrap();
        f.apply(3, 6, "memory", &mut out); // another round: nothing
        f.apply(2, 7, "memory", &mut out); // another rank: nothing
        assert_eq!(block_hashes(&out), before);
        f.apply(3, 7, "memory", &mut out);
        let after = block_hashes(&out);
        let changed: Vec<usize> = (0..BLOCKS).filter(|b| before[*b] != after[*b]).collect();
        assert_eq!(changed, vec![9]);
    }

    #[test]
    fn the_fault_flag_names_what_is_wrong() {
        for (s, why) in [
            ("1:2:fma", "four fields"),
            ("x:2:fma:1", "RANK"),
            ("1:y:fma:1", "ROUND"),
            ("1:2:tensor:1", "KIND"),
            ("1:2:fma:16", "below 16"),
        ] {
            let e = format!("{:#}", Fault::parse(s).unwrap_err());
            assert!(e.contains("--sdc-fault") && e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn the_hash_sees_every_byte_and_the_length() {
        let a = vec![0u8; 64];
        let mut b = a.clone();
        b[63] = 1;
        assert_ne!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&a[..63]));
        assert_ne!(hash(&[]), hash(&[0]));
        // a fixed value: the record's hashes must not change between builds
        assert_eq!(hash(b"burnin"), hash(b"burnin"));
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// Round 3's host outputs at the smallest size, per kind.
    fn round3() -> [Vec<u8>; 4] {
        let seed = round_seed(3);
        let (iters, b) = fma_params(seed);
        [
            fma_host(1024, iters, b),
            memory_host(4096, seed),
            gemm_host(gemm_order(4096), seed),
            reduce_host(4096, seed),
        ]
    }

    #[test]
    fn every_block_of_every_kind_holds_data_at_the_smallest_size() {
        for out in round3() {
            for b in 0..BLOCKS {
                assert!(
                    block_range(out.len(), b).len() >= 8,
                    "{} bytes, block {b}",
                    out.len()
                );
            }
        }
    }

    /// The hashes of a round are constants: the same on every healthy machine, in
    /// every run and every build (a change here changes what a record's round means).
    #[test]
    fn round_hashes_are_pinned() {
        let got: Vec<u64> = round3().iter().map(|o| block_hashes(o)[0]).collect();
        assert_eq!(
            got,
            vec![
                0x0996_cbfc_4514_4aac,
                0xde52_8580_813d_d774,
                0xc2ee_bc47_6973_791e,
                0x5615_646f_860a_86d5,
            ]
        );
    }
}
