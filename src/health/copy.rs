//! The copy matrix (nvbandwidth's core): host↔device through pinned host memory and
//! device-local copies on one GPU; every ordered GPU pair's peer copy on a node.
//!
//! Every copy is queued once untimed (warm-up), then `reps` times between two CUDA
//! events on the GPU's stream; the rate is bytes × reps over the events' time, GB/s
//! (10^9 B/s). A device-local copy's `gbps` counts each byte once, as copied (the
//! figure nvbandwidth's device_local_copy prints); the memory itself moves it twice
//! (read and written), which is what [`GpuCopies::memory_gbps`] reports (2 × `gbps`,
//! the figure to hold against a GPU's "HBM bandwidth"). Waits poll the stream and
//! give up after [`STAGE_LIMIT`] (never a blocking synchronize: a hung GPU must not
//! hold the rank); the GPU is then poisoned (its memory deliberately leaked, see
//! `device.rs`).
//!
//! Every copy's data is checked: the source holds a pattern, and the destination is
//! zeroed before the copies and compared with the pattern after them. Host copies are
//! checked as a chain (H2D then D2H back into other pinned memory: a difference marks
//! both unverified); the device-local copy is read back after the D2H chain proved
//! good, and a peer copy's destination is read back on the destination GPU. A copy
//! that differs is recorded `verified: false` (the wrong-results criterion names it);
//! one that could not run has its `error`.
use crate::backend::nccl::device::{cuda_error, Device, DeviceBuffer, StreamState};
use crate::results::gpu::{BidirRate, CopyRate, GpuCopies, PeerCopy, SmallCopies};
use cudarc::driver::{result, sys, DriverError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for one stage's queued work (a warm-up and its timed copies, or one
/// burn launch) before the GPU is declared hung.
pub const STAGE_LIMIT: Duration = Duration::from_secs(120);

/// Seed of the host copies' pattern.
const HOST_SEED: u64 = 0x4057;

/// Seed of the pattern GPU `ordinal` sends to its peers.
fn peer_seed(ordinal: usize) -> u64 {
    0x9ee7_0000 + ordinal as u64
}

fn driver_text(doing: &str, e: DriverError) -> String {
    format!("{:#}", cuda_error(doing, e))
}

/// Poll `dev`'s stream until it is idle, CUDA reports an error, or `limit` passes
/// (then the device is poisoned: work that never finishes may still use its memory).
pub fn wait_idle(dev: &Device, what: &str, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match dev.query() {
            Ok(StreamState::Idle) => return Ok(()),
            Ok(StreamState::Busy) => {}
            Err(e) => return Err(driver_text(what, e)),
        }
        if t.elapsed() >= limit {
            dev.poison();
            return Err(format!(
                "{what}: not complete within {:.0} s (the GPU looks hung)",
                limit.as_secs_f64()
            ));
        }
        std::thread::sleep(if t.elapsed() < Duration::from_millis(10) {
            Duration::from_micros(20)
        } else {
            Duration::from_micros(500)
        });
    }
}

/// Err when an earlier wait on `dev` gave up (nothing more is queued on a hung GPU).
pub fn not_hung(dev: &Device) -> Result<(), String> {
    if dev.is_poisoned() {
        return Err(format!(
            "not run: earlier work on GPU {} did not complete",
            dev.ordinal()
        ));
    }
    Ok(())
}

/// GB/s (10^9 B/s) of `bytes` moved in `seconds`.
pub fn gbps(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

/// Word `i` of the test pattern `seed` (splitmix64: every word differs, no period).
pub fn pattern_word(seed: u64, i: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0xD1B5_4A32_D192_ED03)
        .wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Write pattern `seed` into `buf` (little-endian words; a short last word cut).
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    for (i, c) in buf.chunks_mut(8).enumerate() {
        let w = pattern_word(seed, i as u64).to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
}

/// Where `buf` differs from pattern `seed`: a text naming the first differing byte
/// and how many 8-byte words differ, or None when it holds exactly the pattern.
pub fn mismatch(buf: &[u8], seed: u64) -> Option<String> {
    let mut first = None;
    let mut words = 0u64;
    for (i, c) in buf.chunks(8).enumerate() {
        let w = pattern_word(seed, i as u64).to_le_bytes();
        if c != &w[..c.len()] {
            words += 1;
            if first.is_none() {
                let k = c.iter().zip(w.iter()).position(|(a, b)| a != b);
                first = Some(i * 8 + k.unwrap_or(0));
            }
        }
    }
    first.map(|f| {
        format!(
            "byte {f} of {} differs from the source ({words} 8-byte word(s) differ)",
            buf.len()
        )
    })
}

/// Pinned (page-locked) host memory from `cuMemHostAlloc`, freed on drop unless its
/// device was poisoned (a copy may still be writing it).
pub struct Pinned {
    ptr: *mut u8,
    len: usize,
    dev: Arc<Device>,
}

impl Pinned {
    /// `len` bytes (at least 1), zeroed.
    pub fn alloc(dev: &Arc<Device>, len: usize) -> Result<Pinned, String> {
        dev.bind().map_err(|e| format!("{e:#}"))?;
        let size = crate::units::Bytes(len as u64);
        // SAFETY: a fresh allocation of len.max(1) bytes that this value owns.
        let p = unsafe { result::malloc_host(len.max(1), 0) }
            .map_err(|e| driver_text(&format!("allocating {size} of pinned host memory"), e))?;
        let mut h = Pinned {
            ptr: p.cast(),
            len,
            dev: Arc::clone(dev),
        };
        h.bytes_mut().fill(0);
        Ok(h)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr holds len bytes owned by self; callers read it only after the
        // stream that wrote it was waited for.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as bytes(); &mut self makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.dev.is_poisoned() || self.dev.bind().is_err() {
            return;
        }
        // SAFETY: ptr came from cuMemHostAlloc and is freed once, here; every copy
        // that used it was waited for (else the device is poisoned, above).
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Queue `copy` once (warm-up), then `reps` times between two events on `dev`'s
/// stream; wait (bounded) and return GB/s of `bytes` per copy.
fn timed(
    dev: &Device,
    what: &str,
    bytes: usize,
    reps: u32,
    mut copy: impl FnMut() -> Result<(), DriverError>,
) -> Result<f64, String> {
    not_hung(dev)?;
    dev.bind().map_err(|e| format!("{e:#}"))?;
    let ev = dev
        .new_events(2)
        .map_err(|e| driver_text("creating timing events", e))?;
    let r = (|| {
        copy().map_err(|e| driver_text(&format!("queuing the {what} warm-up"), e))?;
        // SAFETY: both events come from new_events above and live until the end.
        unsafe { dev.record(ev[0]) }.map_err(|e| driver_text("recording an event", e))?;
        for _ in 0..reps {
            copy().map_err(|e| driver_text(&format!("queuing the {what}"), e))?;
        }
        // SAFETY: as above.
        unsafe { dev.record(ev[1]) }.map_err(|e| driver_text("recording an event", e))?;
        wait_idle(dev, &format!("the {what}"), STAGE_LIMIT)?;
        // SAFETY: both recorded on this stream, which is idle: both completed.
        let ms = unsafe { dev.elapsed_ms(ev[0], ev[1]) }
            .map_err(|e| driver_text("reading the events' time", e))?;
        if ms <= 0.0 {
            return Err(format!("the {what}'s events timed {ms} ms"));
        }
        Ok(gbps(bytes as u64 * u64::from(reps), f64::from(ms) / 1e3))
    })();
    if !dev.is_poisoned() {
        dev.destroy_events(&ev);
    }
    r
}

/// A copy's record from its timing and check.
fn rate(bytes: usize, reps: u32, timed: Result<f64, String>, verified: bool) -> CopyRate {
    let mut c = CopyRate {
        bytes: bytes as u64,
        reps,
        ..CopyRate::default()
    };
    match timed {
        Ok(g) => {
            c.gbps = g;
            c.verified = verified;
        }
        Err(e) => c.error = Some(e),
    }
    c
}

/// Read `src` (`host.len()` bytes on `dev`) back into `host` (zeroed first) and
/// compare it with pattern `seed`: Ok(None) when it matches, Ok(Some(why)) when not.
fn read_back(
    dev: &Device,
    host: &mut Pinned,
    src: sys::CUdeviceptr,
    seed: u64,
) -> Result<Option<String>, String> {
    not_hung(dev)?;
    dev.bind().map_err(|e| format!("{e:#}"))?;
    host.bytes_mut().fill(0);
    // SAFETY: src holds host.len() bytes on dev (callers' buffers), host is pinned
    // memory of that size, and the copy is waited for before host is read.
    unsafe { result::memcpy_dtoh_async(host.bytes_mut(), src, dev.raw_stream()) }
        .map_err(|e| driver_text("reading a copy back", e))?;
    wait_idle(dev, "reading a copy back", STAGE_LIMIT)?;
    Ok(mismatch(host.bytes(), seed))
}

/// The buffers of the host and device-local copies.
struct Local {
    src: Pinned,
    back: Pinned,
    d1: DeviceBuffer,
    d2: DeviceBuffer,
}

impl Local {
    fn new(dev: &Arc<Device>, bytes: usize) -> Result<Local, String> {
        let d = |e: anyhow::Error| format!("{e:#}");
        let mut src = Pinned::alloc(dev, bytes)?;
        fill_pattern(src.bytes_mut(), HOST_SEED);
        Ok(Local {
            src,
            back: Pinned::alloc(dev, bytes)?,
            d1: DeviceBuffer::alloc(dev, bytes).map_err(d)?,
            d2: DeviceBuffer::alloc(dev, bytes).map_err(d)?,
        })
    }
}

/// H2D and D2H (pinned host memory) and D2D on `dev`: `bytes` per copy, `reps` timed.
pub fn host_and_local(dev: &Arc<Device>, bytes: usize, reps: u32) -> GpuCopies {
    let mut l = match Local::new(dev, bytes) {
        Ok(l) => l,
        Err(e) => {
            let failed = Some(rate(bytes, reps, Err(e), false));
            return GpuCopies {
                h2d: failed.clone(),
                d2h: failed.clone(),
                d2d: failed,
                ..GpuCopies::default()
            };
        }
    };
    let stream = dev.raw_stream();
    let (d1, d2) = (l.d1.ptr(), l.d2.ptr());
    let src = l.src.bytes();
    // SAFETY (the three copies): d1, d2 hold `bytes` bytes on dev, the pinned host
    // buffers as many; each stage is waited for before the next touches them.
    let h2d = timed(dev, "H2D copy", bytes, reps, || unsafe {
        result::memcpy_htod_async(d1, src, stream)
    });
    let back = l.back.bytes_mut();
    let d2h = timed(dev, "D2H copy", bytes, reps, || unsafe {
        result::memcpy_dtoh_async(&mut *back, d1, stream)
    });
    // Some(true): read back and right; Some(false): wrong; None: no read-back.
    let chain = d2h
        .as_ref()
        .ok()
        .map(|_| mismatch(l.back.bytes(), HOST_SEED).is_none());
    let d2d = timed(dev, "D2D copy", bytes, reps, || unsafe {
        result::memcpy_dtod_async(d2, d1, bytes, stream)
    });
    let local = match &d2d {
        Ok(_) => read_back(dev, &mut l.back, d2, HOST_SEED),
        Err(e) => Err(e.clone()),
    };
    let d2d = match local {
        Ok(m) => rate(bytes, reps, d2d, m.is_none()),
        Err(e) => rate(bytes, reps, Err(e), false),
    };
    let mut h2d = rate(bytes, reps, h2d, chain == Some(true));
    if chain.is_none() && h2d.error.is_none() {
        h2d.error = Some("not verified: the D2H copy that reads it back failed".into());
    }
    let bidir = bidir(dev, &mut l, bytes, reps);
    let small = small_copies(dev, &mut l);
    GpuCopies {
        h2d: Some(h2d),
        d2h: Some(rate(bytes, reps, d2h, chain == Some(true))),
        d2d: Some(d2d),
        bidir: Some(bidir),
        small: Some(small),
    }
}

/// Copies of [`SMALL_BYTES`] timed per direction.
pub const SMALL_REPS: u32 = 200;
/// Bytes of each small copy.
pub const SMALL_BYTES: usize = 8;

/// [`SMALL_REPS`] copies of [`SMALL_BYTES`] each way, back to back on the stream.
fn small_copies(dev: &Device, l: &mut Local) -> SmallCopies {
    let mut out = SmallCopies {
        bytes: SMALL_BYTES as u64,
        reps: SMALL_REPS,
        ..SmallCopies::default()
    };
    let stream = dev.raw_stream();
    let d1 = l.d1.ptr();
    let src = &l.src.bytes()[..SMALL_BYTES];
    let per_copy = |gbps: f64| SMALL_BYTES as f64 / (gbps * 1e9) * 1e6;
    // SAFETY: d1 holds at least SMALL_BYTES on dev, the pinned buffers as many; the
    // stage is waited for before the next touches them.
    let h2d = timed(
        dev,
        "small H2D copies",
        SMALL_BYTES,
        SMALL_REPS,
        || unsafe { result::memcpy_htod_async(d1, src, stream) },
    );
    let back = &mut l.back.bytes_mut()[..SMALL_BYTES];
    // SAFETY: as above.
    let d2h = timed(
        dev,
        "small D2H copies",
        SMALL_BYTES,
        SMALL_REPS,
        || unsafe { result::memcpy_dtoh_async(&mut *back, d1, stream) },
    );
    match (h2d, d2h) {
        (Ok(a), Ok(b)) => {
            out.h2d_us = per_copy(a);
            out.d2h_us = per_copy(b);
        }
        (Err(e), _) | (_, Err(e)) => out.error = Some(e),
    }
    out
}

/// H2D into `d1` and D2H out of `d2` at once, each on its own stream, both started by
/// one event on the device's stream; `d1` and the host's `back` zeroed first and
/// compared with the pattern after.
fn bidir(dev: &Device, l: &mut Local, bytes: usize, reps: u32) -> BidirRate {
    let mut out = BidirRate {
        bytes: bytes as u64,
        reps,
        ..BidirRate::default()
    };
    let r = (|| {
        not_hung(dev)?;
        dev.bind().map_err(|e| format!("{e:#}"))?;
        let other = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_text("creating a second stream", e))?;
        let ev = match dev.new_events(3) {
            Ok(ev) => ev,
            Err(e) => {
                // SAFETY: created above, nothing queued on it.
                let _ = unsafe { result::stream::destroy(other) };
                return Err(driver_text("creating timing events", e));
            }
        };
        let r = bidir_timed(dev, l, (bytes, reps), other, &ev);
        if !dev.is_poisoned() {
            dev.destroy_events(&ev);
            // SAFETY: the device's stream waited for everything queued on it.
            let _ = unsafe { result::stream::destroy(other) };
        }
        r
    })();
    match r {
        Ok(((h, d, total), ok)) => {
            out.h2d_gbps = h;
            out.d2h_gbps = d;
            out.total_gbps = total;
            out.verified = ok;
            if !ok {
                out.error = Some("a destination differs from its source".into());
            }
        }
        Err(e) => out.error = Some(e),
    }
    out
}

/// The timed part of [`bidir`]: (H2D, D2H, total) GB/s and whether both verified.
fn bidir_timed(
    dev: &Device,
    l: &mut Local,
    (bytes, reps): (usize, u32),
    other: sys::CUstream,
    ev: &[sys::CUevent],
) -> Result<((f64, f64, f64), bool), String> {
    let stream = dev.raw_stream();
    let (d1, d2) = (l.d1.ptr(), l.d2.ptr());
    l.back.bytes_mut().fill(0);
    let back = l.back.bytes_mut();
    let src = l.src.bytes();
    let queue = |what: &str, e| driver_text(&format!("queuing the {what}"), e);
    // SAFETY: d1 and d2 hold `bytes` on dev, src and back as many pinned bytes; every
    // event comes from new_events; the second stream's work is joined into the
    // device's stream (its end event waited on) before the stream is waited for and
    // before any buffer is read or reused.
    unsafe {
        result::memset_d8_async(d1, 0, bytes, stream).map_err(|e| queue("zeroing", e))?;
        dev.record(ev[0]).map_err(|e| queue("start event", e))?;
        result::stream::wait_event(other, ev[0], sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .map_err(|e| queue("second stream's wait", e))?;
        for _ in 0..reps {
            result::memcpy_htod_async(d1, src, stream).map_err(|e| queue("H2D copy", e))?;
            result::memcpy_dtoh_async(&mut *back, d2, other).map_err(|e| queue("D2H copy", e))?;
        }
        dev.record(ev[1]).map_err(|e| queue("end event", e))?;
        result::event::record(ev[2], other).map_err(|e| queue("end event", e))?;
        result::stream::wait_event(
            stream,
            ev[2],
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
        .map_err(|e| queue("join of the two streams", e))?;
    }
    wait_idle(dev, "the bidirectional copies", STAGE_LIMIT)?;
    let ms = |b| {
        // SAFETY: ev[0] and `b` were recorded in this context and have completed
        // (the device's stream, idle now, waited for both).
        unsafe { dev.elapsed_ms(ev[0], b) }.map_err(|e| driver_text("reading the events' time", e))
    };
    let (h_ms, d_ms) = (ms(ev[1])?, ms(ev[2])?);
    if h_ms <= 0.0 || d_ms <= 0.0 {
        return Err(format!(
            "the bidirectional copies' events timed {h_ms} and {d_ms} ms"
        ));
    }
    let one = bytes as u64 * u64::from(reps);
    let rates = (
        gbps(one, f64::from(h_ms) / 1e3),
        gbps(one, f64::from(d_ms) / 1e3),
        gbps(2 * one, f64::from(h_ms.max(d_ms)) / 1e3),
    );
    let back_ok = mismatch(l.back.bytes(), HOST_SEED).is_none();
    let d1_ok = read_back(dev, &mut l.back, d1, HOST_SEED)?.is_none();
    Ok((rates, back_ok && d1_ok))
}

/// One GPU's buffers of the peer matrix: its pattern to send, a destination for its
/// peers' copies, and pinned memory to read that back.
struct PeerBufs {
    src: DeviceBuffer,
    dst: DeviceBuffer,
    host: Pinned,
}

impl PeerBufs {
    fn new(dev: &Arc<Device>, bytes: usize) -> Result<PeerBufs, String> {
        let d = |e: anyhow::Error| format!("GPU {}: {e:#}", dev.ordinal());
        let mut host = Pinned::alloc(dev, bytes)?;
        fill_pattern(host.bytes_mut(), peer_seed(dev.ordinal()));
        let b = PeerBufs {
            src: DeviceBuffer::alloc(dev, bytes).map_err(d)?,
            dst: DeviceBuffer::alloc(dev, bytes).map_err(d)?,
            host,
        };
        // SAFETY: src holds `bytes` bytes on dev, host as many pinned bytes; the
        // upload is waited for before anything else uses either.
        unsafe { result::memcpy_htod_async(b.src.ptr(), b.host.bytes(), dev.raw_stream()) }
            .map_err(|e| driver_text("uploading the peer pattern", e))?;
        wait_idle(dev, "uploading the peer pattern", STAGE_LIMIT)?;
        Ok(b)
    }
}

/// Whether `src` may write `dst`'s memory directly: the driver's answer, then peer
/// access enabled from `src`'s context (already enabled is fine); Err: why not.
fn enable_peer(src: &Device, dst: &Device) -> Result<(), String> {
    let mut can = 0;
    // SAFETY: both are live device handles; `can` is a valid out pointer.
    let rc = unsafe { sys::cuDeviceCanAccessPeer(&mut can, src.raw_device(), dst.raw_device()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(driver_text(
            "asking whether peer access works",
            DriverError(rc),
        ));
    }
    if can == 0 {
        return Err("the driver reports no peer access".into());
    }
    src.bind().map_err(|e| format!("{e:#}"))?;
    // SAFETY: dst's context is live (dst holds it); src's is current.
    match unsafe { sys::cuCtxEnablePeerAccess(dst.raw_ctx(), 0) } {
        sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(())
        }
        rc => Err(driver_text("enabling peer access", DriverError(rc))),
    }
}

/// One ordered pair: `bytes` from `src`'s pattern (at `from`) into `to`'s destination.
fn pair(
    (src, from): (&Device, sys::CUdeviceptr),
    (dst, to): (&Device, &mut PeerBufs),
    bytes: usize,
    reps: u32,
) -> PeerCopy {
    let mut p = PeerCopy {
        src: src.ordinal(),
        dst: dst.ordinal(),
        peer_access: false,
        copy: None,
        error: None,
    };
    if src.is_poisoned() || dst.is_poisoned() {
        p.error = Some("not run: an earlier copy on one of the two GPUs did not complete".into());
        return p;
    }
    let denied = enable_peer(src, dst).err();
    p.peer_access = denied.is_none();
    let what = format!("GPU{}→GPU{} peer copy", p.src, p.dst);
    let into = to.dst.ptr();
    let measured = (|| {
        dst.bind().map_err(|e| format!("{e:#}"))?;
        // SAFETY: `into` holds `bytes` bytes on dst; waited for just below.
        unsafe { result::memset_d8_async(into, 0, bytes, dst.raw_stream()) }
            .map_err(|e| driver_text("zeroing a peer copy's destination", e))?;
        wait_idle(dst, "zeroing a peer copy's destination", STAGE_LIMIT)?;
        let (sc, dc, stream) = (src.raw_ctx(), dst.raw_ctx(), src.raw_stream());
        // SAFETY: `from` holds `bytes` bytes on src, `into` on dst; both contexts are
        // live and the copies are waited for inside timed.
        let g = timed(src, &what, bytes, reps, || unsafe {
            result::memcpy_peer_async(dc, into, sc, from, bytes, stream)
        })?;
        let wrong = read_back(dst, &mut to.host, into, peer_seed(p.src))?;
        Ok::<_, String>((g, wrong.is_none()))
    })();
    match measured {
        Ok((g, ok)) => p.copy = Some(rate(bytes, reps, Ok(g), ok)),
        Err(e) => {
            p.error = Some(match denied {
                Some(d) => format!("{e} (peer access: {d})"),
                None => e,
            })
        }
    }
    p
}

fn unmeasured(src: &Device, dst: &Device, why: String) -> PeerCopy {
    PeerCopy {
        src: src.ordinal(),
        dst: dst.ordinal(),
        peer_access: false,
        copy: None,
        error: Some(why),
    }
}

/// Every ordered pair (src ≠ dst) of `devs` (the node's GPUs, opened by one rank). A
/// pair without peer access is still copied (the driver stages it through the host)
/// and recorded `peer_access: false`.
pub fn peer_matrix(devs: &[Arc<Device>], bytes: usize, reps: u32) -> Vec<PeerCopy> {
    let mut bufs: Vec<Result<PeerBufs, String>> =
        devs.iter().map(|d| PeerBufs::new(d, bytes)).collect();
    let mut out = Vec::new();
    for (s, src) in devs.iter().enumerate() {
        for (t, dst) in devs.iter().enumerate() {
            if s == t {
                continue;
            }
            let from = bufs[s].as_ref().map(|b| b.src.ptr()).map_err(Clone::clone);
            let p = match (from, &mut bufs[t]) {
                (Ok(from), Ok(to)) => pair((src, from), (dst, to), bytes, reps),
                (Err(e), _) => unmeasured(src, dst, e),
                (_, Err(e)) => unmeasured(src, dst, e.clone()),
            };
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gbps_is_decimal_gigabytes_per_second() {
        assert!((gbps(256 << 20, 0.01) - 26.843_545_6).abs() < 1e-9);
        assert_eq!(gbps(5_000_000_000, 2.0), 2.5);
    }

    #[test]
    fn a_pattern_is_found_intact_and_a_changed_byte_is_named() {
        let mut b = vec![0u8; 4099];
        fill_pattern(&mut b, 7);
        assert_eq!(mismatch(&b, 7), None);
        assert!(mismatch(&b, 8).is_some(), "another seed is another pattern");
        assert_ne!(pattern_word(7, 0), pattern_word(7, 1));
        b[4098] ^= 1;
        b[1000] ^= 0x80;
        assert_eq!(
            mismatch(&b, 7).as_deref(),
            Some("byte 1000 of 4099 differs from the source (2 8-byte word(s) differ)")
        );
        assert!(
            mismatch(&[0u8; 64], 7).is_some(),
            "a zeroed buffer is wrong"
        );
    }
}
