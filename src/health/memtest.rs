//! The device memory test (DCGM's memtest, cuda_memtest): most of the GPU's free
//! memory written and read back on the GPU with patterns that catch the faults memory
//! has — a bit stuck at 0 or 1, bits that disturb their neighbours, address lines that
//! alias two words.
//!
//! - Memory: `share` of what cuMemGetInfo calls free, allocated in regions of up to
//!   1 GiB (smaller ones when a large allocation fails, down to 64 MiB), so a
//!   fragmented heap is still covered.
//! - A pass runs three patterns over every region, each as three launches of
//!   kernels.cu's burnin_memtest: write the pattern; read every word, check it and
//!   write its inverse (a moving inversion: each bit is written both ways); read and
//!   check the inverse. The patterns: each word's own device address (two words that
//!   alias read each other's address), a walking one (bit (i + pass) mod 64: walking
//!   zeros once inverted), and random data (splitmix64, new seed each pass).
//! - Passes repeat while the time asked for lasts (at least one). Every launch of a
//!   pass is queued at once and waited for once (polling, bounded by
//!   [`STAGE_LIMIT`]); CUDA events around the pass give its GPU time, and the rate is
//!   the bytes the kernels read and wrote over that time.
//! - A failing word is counted; the first ones of each stage come back with the value
//!   read, and are named by device address, the bits that differ, the pattern and the
//!   pass. NVML's error counters are read before and after: a fault that ECC
//!   corrects never reaches the test, but shows as new corrected errors there.
use super::copy::{wait_idle, Pinned, STAGE_LIMIT};
use crate::backend::nccl::device::{cuda_error, Device, DeviceBuffer};
use crate::backend::nccl::kernels::{self, Kernels, MemStage, MEM_COUNTERS, MEM_SAMPLE};
use crate::results::gpu::{MemFailure, MemRegion, MemTest};
use cudarc::driver::result;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest region, and the smallest one tried when a larger allocation fails.
const REGION: usize = 1 << 30;
const MIN_REGION: usize = 64 << 20;
/// Regions are multiples of this.
const GRANULE: usize = 2 << 20;
/// Failures kept in the record.
const KEPT: usize = 16;

/// The patterns of a pass, as kernels.cu numbers them.
pub const PATTERNS: [(u64, &str); 3] = [(0, "address"), (1, "walking one"), (2, "random")];

/// What word `i` of a region at device address `addr` holds after the write stage of
/// pattern `kind` with `seed` (kernels.cu's mem_expect).
pub fn expect(kind: u64, seed: u64, addr: u64, i: u64) -> u64 {
    match kind {
        0 => addr.wrapping_add(8u64.wrapping_mul(i)),
        1 => 1u64 << (i.wrapping_add(seed) & 63),
        _ => super::copy::pattern_word(seed, i),
    }
}

/// Pattern `kind`'s seed in pass `pass`: the walking one moves on a bit each pass,
/// the random data is new each pass.
pub fn seed(kind: u64, pass: u64) -> u64 {
    match kind {
        1 => pass,
        _ => 0x6d65_6d74_0000 + pass,
    }
}

/// The launches of one pattern in a pass: write, check and invert, check the inverse.
/// The second and third check (counter blocks 0 and 1 of the pattern).
pub fn stages(kind: u64, pass: u64) -> [MemStage; 3] {
    let s = seed(kind, pass);
    [0, 2, 3].map(|mode| MemStage {
        kind,
        seed: s,
        mode,
    })
}

/// Bytes the kernels move over a region of `bytes` in one pass: per pattern one
/// write, one read and one write, one read.
pub fn pass_bytes(bytes: u64) -> u64 {
    4 * PATTERNS.len() as u64 * bytes
}

/// Sizes of the regions to ask for, largest first, for `target` bytes (rounded up
/// to whole granules).
pub fn plan_regions(target: u64) -> Vec<usize> {
    let target = (target as usize).div_ceil(GRANULE) * GRANULE;
    let mut out = Vec::new();
    let mut left = target;
    while left >= GRANULE {
        let n = left.min(REGION);
        out.push(n);
        left -= n;
    }
    out
}

/// A failure as the record names it, from a counter block's (index, value read).
pub fn failure(region_addr: u64, stage: MemStage, pass: u64, index: u64, read: u64) -> MemFailure {
    let p = expect(stage.kind, stage.seed, region_addr, index);
    let want = if stage.mode == 3 { !p } else { p };
    let diff = want ^ read;
    let name = PATTERNS
        .iter()
        .find(|(k, _)| *k == stage.kind)
        .map_or("?", |(_, n)| n);
    MemFailure {
        address: format!("{:#x}", region_addr + 8 * index),
        pattern: if stage.mode == 3 {
            format!("{name}, inverted")
        } else {
            name.to_string()
        },
        pass,
        expected: format!("{want:#018x}"),
        read: format!("{read:#018x}"),
        bits: (0..64).filter(|b| diff >> b & 1 == 1).collect(),
    }
}

/// Test `share` of `dev`'s free memory for about `seconds` (one pass at least); None
/// only when asked for nothing.
pub fn memtest(
    dev: &Arc<Device>,
    seconds: f64,
    share: f64,
    nvml: Option<&crate::nvml::NvmlGpu>,
) -> Option<MemTest> {
    let mut m = MemTest {
        share_asked: share,
        patterns: PATTERNS.iter().map(|(_, n)| n.to_string()).collect(),
        ..MemTest::default()
    };
    m.counters_before = nvml.map(|n| n.counters().0);
    let t0 = Instant::now();
    let r = Kernels::load(dev)
        .map_err(|e| format!("{e:#}"))
        .and_then(|k| {
            let r = run(dev, &k, seconds, share, &mut m);
            if !dev.is_poisoned() {
                k.unload();
            }
            r
        });
    if let Err(e) = r {
        m.error = Some(e);
    }
    m.seconds = t0.elapsed().as_secs_f64();
    m.counters_after = nvml.map(|n| n.counters().0);
    Some(m)
}

/// The regions `plan` asks for, or as much of them as the GPU gives.
fn allocate(dev: &Arc<Device>, target: u64) -> Vec<DeviceBuffer> {
    let mut out = Vec::new();
    for want in plan_regions(target) {
        let mut n = want;
        let mut got = None;
        while got.is_none() && n >= MIN_REGION.min(want) {
            match DeviceBuffer::alloc(dev, n) {
                Ok(b) => got = Some(b),
                Err(_) => n /= 2,
            }
        }
        match got {
            Some(b) => out.push(b),
            None => break,
        }
    }
    out
}

fn run(
    dev: &Arc<Device>,
    k: &Kernels,
    seconds: f64,
    share: f64,
    m: &mut MemTest,
) -> Result<(), String> {
    dev.bind().map_err(|e| format!("{e:#}"))?;
    let (free, total) = result::mem_get_info()
        .map_err(|e| format!("{:#}", cuda_error("reading the free device memory", e)))?;
    m.free_bytes = free as u64;
    m.total_bytes = total as u64;
    // The counters and their pinned copy first: they must fit beside the regions.
    let blocks_per_region = 2 * PATTERNS.len();
    let max_regions = plan_regions((free as f64 * share) as u64).len().max(1);
    let ctr_bytes = max_regions * blocks_per_region * MEM_COUNTERS * 8;
    let ctr = DeviceBuffer::alloc(dev, ctr_bytes).map_err(|e| format!("{e:#}"))?;
    let mut host = Pinned::alloc(dev, ctr_bytes)?;
    // Rounded up to whole granules, but never into the counters' share.
    let room = free.saturating_sub(2 * ctr_bytes) / GRANULE * GRANULE;
    let target = ((free as f64 * share) as u64).min(room as u64);
    let regions = allocate(dev, target);
    if regions.is_empty() {
        return Err(format!(
            "no device memory to test: {} free, not even one region of {} could be allocated",
            crate::units::Bytes(free as u64),
            crate::units::Bytes(MIN_REGION as u64)
        ));
    }
    m.regions = regions
        .iter()
        .map(|r| MemRegion {
            address: format!("{:#x}", r.ptr()),
            bytes: r.len() as u64,
        })
        .collect();
    let tested: u64 = regions.iter().map(|r| r.len() as u64).sum();
    let mut p = Pass {
        dev,
        k,
        regions: &regions,
        ctr: &ctr,
        host: &mut host,
        ev: dev
            .new_events(2)
            .map_err(|e| format!("{:#}", cuda_error("creating timing events", e)))?,
    };
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(seconds.max(0.0));
    let mut r = Ok(());
    while m.passes == 0 || t0.elapsed() < budget {
        match p.run(m.passes) {
            Ok((gpu_s, fails, words)) => {
                m.gpu_seconds += gpu_s;
                m.failing_words += words;
                for f in fails {
                    if m.failures.len() < KEPT && m.failures.iter().all(|x| x.address != f.address)
                    {
                        m.failures.push(f);
                    }
                }
                m.passes += 1;
            }
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    if !dev.is_poisoned() {
        dev.destroy_events(&p.ev);
    }
    if m.passes > 0 {
        m.tested_bytes = tested;
        m.share_of_free = tested as f64 / free.max(1) as f64;
    }
    if m.gpu_seconds > 0.0 {
        m.gbps = super::copy::gbps(pass_bytes(tested) * m.passes, m.gpu_seconds);
    }
    r
}

/// One pass over every region.
struct Pass<'a> {
    dev: &'a Arc<Device>,
    k: &'a Kernels,
    regions: &'a [DeviceBuffer],
    ctr: &'a DeviceBuffer,
    host: &'a mut Pinned,
    ev: Vec<cudarc::driver::sys::CUevent>,
}

impl Pass<'_> {
    /// Pass `pass`: its GPU seconds, the failures it names (by address) and the
    /// failing words it counted.
    fn run(&mut self, pass: u64) -> Result<(f64, Vec<MemFailure>, u64), String> {
        let (d, stream) = (self.dev, self.dev.raw_stream());
        super::copy::not_hung(d)?;
        let text = |doing: &str, e| format!("{:#}", cuda_error(doing, e));
        let per_region = 2 * PATTERNS.len();
        let blocks = self.regions.len() * per_region;
        for (i, w) in self.host.bytes_mut()[..blocks * MEM_COUNTERS * 8]
            .chunks_exact_mut(8)
            .enumerate()
        {
            let v: u64 = if i % MEM_COUNTERS == 1 { u64::MAX } else { 0 };
            w.copy_from_slice(&v.to_le_bytes());
        }
        let used = blocks * MEM_COUNTERS * 8;
        // SAFETY: `ctr` holds at least `used` bytes, `host` as many pinned bytes; the
        // regions are live allocations of this GPU; both events come from new_events;
        // the stream is waited for before any of them is reused or read.
        unsafe {
            result::memcpy_htod_async(self.ctr.ptr(), &self.host.bytes()[..used], stream)
                .map_err(|e| text("uploading the memory test's counters", e))?;
            d.record(self.ev[0])
                .map_err(|e| text("recording an event", e))?;
            for (ri, reg) in self.regions.iter().enumerate() {
                for (pi, (kind, _)) in PATTERNS.iter().enumerate() {
                    for (si, st) in stages(*kind, pass).into_iter().enumerate() {
                        let block = ri * per_region + pi * 2 + si.saturating_sub(1);
                        let at = self.ctr.ptr() + (block * MEM_COUNTERS * 8) as u64;
                        kernels::memtest(self.k, stream, reg.ptr(), reg.len() as u64 / 8, st, at)
                            .map_err(|e| format!("{e:#}"))?;
                    }
                }
            }
            d.record(self.ev[1])
                .map_err(|e| text("recording an event", e))?;
            result::memcpy_dtoh_async(&mut self.host.bytes_mut()[..used], self.ctr.ptr(), stream)
                .map_err(|e| text("copying the memory test's counters back", e))?;
        }
        wait_idle(d, "a memory test pass", STAGE_LIMIT)?;
        // SAFETY: both recorded on this stream, which is idle.
        let ms = unsafe { d.elapsed_ms(self.ev[0], self.ev[1]) }
            .map_err(|e| text("reading the events' time", e))?;
        let words: Vec<u64> = self.host.bytes()[..used]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let mut fails = Vec::new();
        let mut count = 0;
        for (ri, reg) in self.regions.iter().enumerate() {
            for (pi, (kind, _)) in PATTERNS.iter().enumerate() {
                let st = stages(*kind, pass);
                for si in 0..2 {
                    let b =
                        &words[(ri * per_region + pi * 2 + si) * MEM_COUNTERS..][..MEM_COUNTERS];
                    count += b[0];
                    for s in 0..(b[0] as usize).min(MEM_SAMPLE) {
                        let (index, read) = (b[2 + 2 * s], b[3 + 2 * s]);
                        fails.push((
                            reg.ptr() + 8 * index,
                            failure(reg.ptr(), st[si + 1], pass, index, read),
                        ));
                    }
                }
            }
        }
        fails.sort_by_key(|f| f.0);
        fails.dedup_by_key(|f| f.0);
        Ok((
            f64::from(ms) / 1e3,
            fails.into_iter().map(|f| f.1).collect(),
            count,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_cover_the_target_in_gib_pieces_of_whole_granules() {
        assert_eq!(plan_regions(0), Vec::<usize>::new());
        assert_eq!(plan_regions(3 << 20), vec![4 << 20]);
        assert_eq!(plan_regions(4 << 20), vec![4 << 20]);
        let r = plan_regions((5u64 << 30) / 2 + (1 << 20));
        assert_eq!(r, vec![1 << 30, 1 << 30, 514 << 20]);
    }

    #[test]
    fn the_patterns_are_the_kernels() {
        // address: the word's own device address
        assert_eq!(expect(0, 0, 0x7a00_0000_0000, 3), 0x7a00_0000_0018);
        // walking one: bit (i + pass) mod 64
        assert_eq!(expect(1, 0, 0, 0), 1);
        assert_eq!(expect(1, 1, 0, 63), 1);
        assert_eq!(expect(1, 5, 0, 10), 1 << 15);
        // random: copy.rs's splitmix64 words, a new seed each pass
        assert_eq!(expect(2, 7, 0, 9), crate::health::copy::pattern_word(7, 9));
        assert_ne!(seed(2, 0), seed(2, 1));
        assert_eq!(pass_bytes(1 << 20), 12 << 20);
    }

    #[test]
    fn a_failure_is_named_by_address_bits_and_pattern() {
        let st = stages(0, 0)[2];
        assert_eq!(st.mode, 3);
        let addr = 0x7a00_0010_0000u64;
        let want = !(addr + 8 * 4);
        let f = failure(addr, st, 0, 4, want ^ (1 << 13) ^ (1 << 40));
        assert_eq!(f.address, "0x7a0000100020");
        assert_eq!(f.bits, vec![13, 40]);
        assert_eq!(f.pattern, "address, inverted");
        assert_eq!(f.expected, format!("{want:#018x}"));
        let f = failure(addr, stages(2, 3)[1], 3, 0, 0);
        assert_eq!(f.pattern, "random");
        assert_eq!(f.pass, 3);
    }
}
