//! The compute burn: fused multiply-adds on every SM for a fixed time, results checked
//! against the host's own `f32::mul_add` chain.
//!
//! burnin_fma (kernels.cu) runs, for each of `len` elements (one full wave: the SM
//! count × the blocks of 256 threads an SM holds, as the driver's occupancy
//! calculator says for the code its JIT built; 4 chains a thread), `iters` steps of x = fma(x, [`A`], [`B`]) from a start value the host
//! knows ([`start_value`]). One FMA is correctly rounded on the GPU and in
//! `f32::mul_add`, so a right element is equal bit for bit to [`host_chain`].
//!
//! - A first launch of 64 steps, then larger ones, calibrate `iters` so that one launch
//!   takes about [`TARGET`] (untimed in the result); then launches run back to back
//!   until `duration` has passed (at least one).
//! - Every launch's results come back (one copy into pinned memory): every element of
//!   the first burn launch is compared with the host's chain for its start value (1024
//!   classes, [`host_refs`]), and every later launch's elements with the first's (a GPU
//!   that starts computing wrong under load differs from its own earlier result).
//! - TFLOP/s is 2 flops per FMA × elements × steps over the launches' GPU time (CUDA
//!   events around each kernel; the copy and the host's checks between launches are
//!   not counted), also per tenth of the burn by when each launch started.
//! - Waits poll the stream ([`super::copy::wait_idle`]), bounded by
//!   [`super::copy::STAGE_LIMIT`] per launch.
use super::copy::{wait_idle, Pinned, STAGE_LIMIT};
use crate::backend::nccl::device::{cuda_error, Device, DeviceBuffer};
use crate::backend::nccl::kernels::{self, Kernels, BLOCK_THREADS, FMA_CHAINS};
use crate::results::gpu::Burn;
use cudarc::driver::{result, sys, DriverError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The multiplier of each step, 1 − 2⁻²⁰: the chain drifts slowly towards B / (1 − A)
/// = 0.5, so it neither overflows nor settles on one value within a launch.
pub const A: f32 = 1.0 - 1.0 / 1_048_576.0;
/// The addend of each step, 2⁻²¹.
pub const B: f32 = 1.0 / 2_097_152.0;
/// Aimed-for time of one launch.
pub const TARGET: Duration = Duration::from_millis(50);
/// Distinct start values (element i starts at class i mod 1024): the host computes
/// each class's chain once, and every element of the first launch is compared with it.
pub const CLASSES: u64 = 1024;
/// Steps per launch, at most.
const MAX_ITERS: u64 = 1 << 24;

/// Element `i`'s start value (kernels.cu's `fma_start`): 0.5 + (i mod 1024) / 1024.
pub fn start_value(i: u64) -> f32 {
    0.5 + (i & 1023) as f32 * (1.0 / 1024.0)
}

/// What element `i` holds after `iters` steps, as the host computes it.
pub fn host_chain(i: u64, iters: u64) -> f32 {
    let mut x = start_value(i);
    for _ in 0..iters {
        x = x.mul_add(A, B);
    }
    x
}

/// Floating-point operations of one launch: 2 per FMA.
pub fn flops(len: u64, iters: u64) -> f64 {
    2.0 * len as f64 * iters as f64
}

/// TFLOP/s (10^12) of `flops` in `seconds`.
pub fn tflops(flops: f64, seconds: f64) -> f64 {
    flops / seconds / 1e12
}

/// TFLOP/s of each tenth of a `total_s` burn: the launches (start second, GPU seconds)
/// grouped by the tenth they started in, each of `per_launch` flops; a tenth in which
/// no launch started is left out.
pub fn by_tenth(launches: &[(f64, f64)], per_launch: f64, total_s: f64) -> Vec<f64> {
    let mut sums = [(0u64, 0.0f64); 10];
    for &(at, s) in launches {
        let j = ((at / total_s * 10.0) as usize).min(9);
        sums[j].0 += 1;
        sums[j].1 += s;
    }
    sums.iter()
        .filter(|(n, s)| *n > 0 && *s > 0.0)
        .map(|&(n, s)| tflops(per_launch * n as f64, s))
        .collect()
}

/// Every class's result after `iters` steps (element i must equal `refs[i % 1024]`),
/// computed 16 chains at a time so the host's FMA units are not waiting on one chain.
pub fn host_refs(iters: u64) -> Vec<u32> {
    let mut out = Vec::with_capacity(CLASSES as usize);
    for base in (0..CLASSES).step_by(16) {
        let mut x: [f32; 16] = std::array::from_fn(|k| start_value(base + k as u64));
        for _ in 0..iters {
            for v in &mut x {
                *v = v.mul_add(A, B);
            }
        }
        out.extend(x.iter().map(|v| v.to_bits()));
    }
    out
}

/// Burn `dev` for `duration` (Some whenever the GPU is open; a failure is the burn's
/// `error`, with what ran before it counted).
pub fn burn(dev: &Arc<Device>, duration: Duration) -> Option<Burn> {
    let mut b = Burn {
        kernel: "fma-ptx".into(),
        ..Burn::default()
    };
    let r = Kernels::load(dev)
        .map_err(|e| format!("{e:#}"))
        .and_then(|k| {
            let r = Burner::new(dev, &k, &mut b).and_then(|mut s| s.run(duration, &mut b));
            if !dev.is_poisoned() {
                k.unload();
            }
            r
        });
    if let Err(e) = r {
        b.error = Some(e);
    }
    Some(b)
}

/// One GPU's burn: the kernel, its output and where it comes back to.
struct Burner<'a> {
    dev: &'a Device,
    k: &'a Kernels,
    out: DeviceBuffer,
    host: Pinned,
    ev: Vec<sys::CUevent>,
    len: u64,
    blocks: u32,
}

/// The burn's grid: `blocks_per_sm` blocks on each of `sms` SMs, and the elements
/// its threads carry ([`FMA_CHAINS`] each).
pub fn grid(sms: u32, blocks_per_sm: u32) -> (u32, u64) {
    let blocks = sms.max(1) * blocks_per_sm.max(1);
    (
        blocks,
        u64::from(blocks) * u64::from(BLOCK_THREADS) * FMA_CHAINS,
    )
}

impl Drop for Burner<'_> {
    fn drop(&mut self) {
        if !self.dev.is_poisoned() {
            self.dev.destroy_events(&self.ev);
        }
    }
}

fn text(doing: &str, e: DriverError) -> String {
    format!("{:#}", cuda_error(doing, e))
}

impl<'a> Burner<'a> {
    fn new(dev: &'a Arc<Device>, k: &'a Kernels, b: &mut Burn) -> Result<Burner<'a>, String> {
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        // SAFETY: a live device handle and an attribute every driver knows.
        let sms = unsafe { result::device::get_attribute(dev.raw_device(), attr) }
            .map_err(|e| text("reading the SM count", e))?;
        let per_sm = kernels::fma_blocks_per_sm(k).map_err(|e| format!("{e:#}"))?;
        let (blocks, len) = grid(sms.max(1) as u32, per_sm);
        b.sms = sms.max(1) as u32;
        b.blocks_per_sm = per_sm;
        b.elements = len;
        let bytes = (len * 4) as usize;
        Ok(Burner {
            dev,
            k,
            out: DeviceBuffer::alloc(dev, bytes).map_err(|e| format!("{e:#}"))?,
            host: Pinned::alloc(dev, bytes)?,
            ev: dev
                .new_events(2)
                .map_err(|e| text("creating timing events", e))?,
            len,
            blocks,
        })
    }

    /// One launch of `iters` steps and its results back: the kernel's GPU seconds.
    fn launch(&mut self, iters: u64) -> Result<f64, String> {
        let (d, stream) = (self.dev, self.dev.raw_stream());
        super::copy::not_hung(d)?;
        d.bind().map_err(|e| format!("{e:#}"))?;
        // SAFETY: both events come from new_events and live while self does; `out`
        // holds len f32 on this GPU, `host` as many pinned bytes; the stream is
        // waited for before either is reused or read.
        unsafe {
            d.record(self.ev[0])
                .map_err(|e| text("recording an event", e))?;
            kernels::fma(
                self.k,
                stream,
                self.out.ptr(),
                self.len,
                iters,
                (A, B),
                self.blocks,
            )
            .map_err(|e| format!("{e:#}"))?;
            d.record(self.ev[1])
                .map_err(|e| text("recording an event", e))?;
            result::memcpy_dtoh_async(self.host.bytes_mut(), self.out.ptr(), stream)
                .map_err(|e| text("copying the burn's results back", e))?;
        }
        wait_idle(d, "a burn launch", STAGE_LIMIT)?;
        // SAFETY: both recorded on this stream, which is idle.
        let ms = unsafe { d.elapsed_ms(self.ev[0], self.ev[1]) }
            .map_err(|e| text("reading the events' time", e))?;
        Ok(f64::from(ms) / 1e3)
    }

    /// Steps per launch for about [`TARGET`] each.
    fn calibrate(&mut self) -> Result<u64, String> {
        let mut iters = 64;
        loop {
            let s = self.launch(iters)?;
            let target = TARGET.as_secs_f64();
            if s >= target / 4.0 || iters >= MAX_ITERS {
                let scaled = (iters as f64 * target / s) as u64;
                return Ok(scaled.clamp(64, MAX_ITERS) / 64 * 64);
            }
            iters = (iters * 8).min(MAX_ITERS);
        }
    }

    fn results(&self) -> Vec<u32> {
        self.host
            .bytes()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Launch until `duration` has passed, checking every launch; fills `b`.
    fn run(&mut self, duration: Duration, b: &mut Burn) -> Result<(), String> {
        let iters = self.calibrate()?;
        b.iters = iters;
        // The host's reference chains (1024 × iters FMAs on the CPU, where a launch
        // is calibrated to 50 ms on the GPU), before the timed burn: not a gap
        // between its launches in which the GPU idles.
        let refs = host_refs(iters);
        let t0 = Instant::now();
        let mut timed = Vec::new();
        let mut reference: Vec<u32> = Vec::new();
        let per_launch = flops(self.len, iters);
        let mut r = Ok(());
        while b.launches == 0 || t0.elapsed() < duration {
            let at = t0.elapsed().as_secs_f64();
            match self.launch(iters) {
                Ok(s) => timed.push((at, s)),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
            b.launches += 1;
            let got = self.results();
            if reference.is_empty() {
                // The first launch: every element against its class's host chain.
                b.checked += self.len;
                b.wrong += got
                    .iter()
                    .enumerate()
                    .filter(|(i, x)| **x != refs[i % CLASSES as usize])
                    .count() as u64;
                reference = got;
            } else {
                b.checked += self.len;
                b.wrong += got.iter().zip(&reference).filter(|(x, y)| x != y).count() as u64;
            }
        }
        b.seconds = t0.elapsed().as_secs_f64();
        let gpu_s: f64 = timed.iter().map(|t| t.1).sum();
        b.gpu_seconds = gpu_s;
        if gpu_s > 0.0 {
            b.tflops = tflops(per_launch * timed.len() as f64, gpu_s);
            b.tflops_by_tenth = by_tenth(&timed, per_launch, b.seconds);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_chain_is_exact_fma_steps_from_the_start_value() {
        assert_eq!(start_value(0), 0.5);
        assert_eq!(start_value(1023), 0.5 + 1023.0 / 1024.0);
        assert_eq!(start_value(1024), 0.5);
        assert_eq!(host_chain(5, 0), start_value(5));
        let one = start_value(512).mul_add(A, B);
        assert_eq!(host_chain(512, 1), one);
        // 1.0 × (1 − 2⁻²⁰) + 2⁻²¹ = 1 − 2⁻²¹, exact in f32.
        assert_eq!(one, 1.0 - 1.0 / 2_097_152.0);
        // The chain drifts down towards 0.5 and stays finite and distinct per start.
        let x = host_chain(1023, 100_000);
        assert!(x < start_value(1023) && x > 0.5, "{x}");
        assert_ne!(host_chain(1, 1000), host_chain(2, 1000));
    }

    #[test]
    fn the_grid_is_one_wave_of_what_an_sm_holds() {
        // H100 SXM: 132 SMs; 8 blocks of 256 when the burn fits 32 registers, 6 at 40.
        assert_eq!(grid(132, 8), (1056, 1056 * 256 * 4));
        assert_eq!(grid(132, 6), (792, 792 * 1024));
        assert_eq!(grid(0, 0), (1, 1024));
    }

    #[test]
    fn tflops_count_two_flops_per_fma() {
        assert_eq!(flops(1000, 500), 1e6);
        assert_eq!(tflops(flops(1_000_000, 1_000_000), 0.5), 4.0);
    }

    #[test]
    fn tenths_group_launches_by_their_start() {
        // 10 s burn: two launches in the first tenth, one in the sixth.
        let t = by_tenth(&[(0.0, 0.5), (0.5, 0.5), (5.5, 2.0)], 1e12, 10.0);
        assert_eq!(t, vec![2.0, 0.5]);
        assert_eq!(by_tenth(&[(10.0, 1.0)], 2e12, 10.0), vec![2.0]);
    }

    #[test]
    fn every_class_reference_is_its_host_chain() {
        let refs = host_refs(300);
        assert_eq!(refs.len(), CLASSES as usize);
        for i in [0u64, 1, 15, 16, 511, 1023] {
            assert_eq!(refs[i as usize], host_chain(i, 300).to_bits(), "{i}");
        }
        // element 1024 + 7 is class 7
        assert_eq!(host_chain(1031, 300).to_bits(), refs[7]);
    }
}
