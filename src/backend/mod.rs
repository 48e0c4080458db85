//! The communication backends: one trait, two real implementations.
//!
//! - [`mpi::MpiBackend`]: host buffers, MPI collectives (works everywhere MPI does);
//! - `nccl::NcclBackend`: device buffers through cudarc, NCCL collectives.
//!
//! A backend is built over a group of ranks (the world or a tier's sub-group) and owns
//! that group's MPI communicator too, which carries the *control plane* (stop decisions,
//! gathering timings) whatever the data plane is.
//!
//! Counts follow nccl-tests: a [`Call`]'s `count` is the element count of the message
//! *size* shown in the table; all_gather sends `count / n` and receives `count`;
//! reduce_scatter sends `count` and receives `count / n`; alltoall sends and receives
//! `count` with `count / n` per peer.
pub mod mpi;
pub mod nccl;

use crate::collective::{self, Mismatch, Params, Pattern};
use crate::kinds::{CollKind, Dtype, RedOp};
use crate::units::Bytes;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// `--backend`: which backend the job asks for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Mpi,
    Nccl,
}

/// What building a backend needs, made once from the command line
/// (`GlobalArgs::backend_config` in the `config` module).
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// The backend asked for.
    pub choice: BackendChoice,
    /// The NCCL library to load (None: search for it).
    pub nccl_lib: Option<std::path::PathBuf>,
    /// Deadline of one blocking step without its own (init, copies, teardown).
    pub deadline: Duration,
}

impl BackendConfig {
    /// The same configuration with a shorter deadline (never a longer one).
    pub fn at_most(&self, deadline: Duration) -> BackendConfig {
        BackendConfig {
            deadline: self.deadline.min(deadline),
            ..self.clone()
        }
    }
}

/// One collective call, fully described.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub kind: CollKind,
    pub dtype: Dtype,
    pub op: RedOp,
    pub root: usize,
    /// Elements of the message size (nccl-tests' `count`; see the module header).
    pub count: usize,
    pub in_place: bool,
}

impl Call {
    /// Short text for messages: "all_reduce 1MiB f32 sum (in-place)".
    pub fn describe(&self) -> String {
        let bytes = crate::units::Bytes((self.count * self.dtype.size()) as u64);
        let mut s = format!("{} {} {}", self.kind, bytes, self.dtype);
        if self.kind.reduces() {
            s.push(' ');
            s.push_str(self.op.name());
        }
        if self.kind.rooted() {
            s.push_str(&format!(" root {}", self.root));
        }
        if self.in_place {
            s.push_str(" (in-place)");
        }
        s
    }
}

impl Call {
    /// What the collective table needs to know of this call in a group of `n`.
    pub fn params(&self, n: usize) -> Params {
        Params {
            n,
            count: self.count,
            dtype: self.dtype,
            op: self.op,
            root: self.root,
        }
    }

    /// This call laid out on `rank`'s buffers (`have`: their lengths in bytes), or
    /// which buffer is too short: the one buffer layout both backends address.
    pub fn place(&self, rank: usize, n: usize, have: BufLens) -> Result<Placement> {
        let (send, recv) = needed_bytes(self, rank, n);
        let short = |which: &str, have: usize, need: usize| {
            anyhow!(
                "{}: the {which} buffer has {} but the call needs {} on this rank",
                self.describe(),
                Bytes(have as u64),
                Bytes(need as u64)
            )
        };
        let (send_at, recv_at) = match have {
            BufLens::OutOfPlace { send: s, recv: r } => {
                if s < send {
                    return Err(short("send", s, send));
                }
                if r < recv {
                    return Err(short("receive", r, recv));
                }
                (0, 0)
            }
            BufLens::InPlace(len) => {
                let need = send.max(recv);
                if len < need {
                    return Err(short("in-place", len, need));
                }
                in_place_offsets(self, rank, n)
            }
        };
        Ok(Placement {
            send,
            recv,
            send_at,
            recv_at,
        })
    }
}

/// The lengths in bytes of a call's buffers (see [`Bufs`]).
#[derive(Clone, Copy, Debug)]
pub enum BufLens {
    OutOfPlace { send: usize, recv: usize },
    InPlace(usize),
}

/// Where one rank's call reads and writes, in bytes ([`Call::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Bytes read from the input and written to the output.
    pub send: usize,
    pub recv: usize,
    /// Offsets of the input in the send buffer and of the output in the receive
    /// buffer (in place, both in the one buffer; out of place, 0).
    pub send_at: usize,
    pub recv_at: usize,
}

/// Bytes a call reads from its send buffer and writes to its receive buffer on
/// `rank` of `n` (the collective's `needs`; the module header for the counts). The
/// in-place buffer must hold the larger of the two.
pub fn needed_bytes(call: &Call, rank: usize, n: usize) -> (usize, usize) {
    let need = collective::get(call.kind).needs(&call.params(n.max(1)), rank);
    let es = call.dtype.size();
    (need.send * es, need.recv * es)
}

/// Byte offsets into the one buffer of an in-place call: (send, recv).
pub fn in_place_offsets(call: &Call, rank: usize, n: usize) -> (usize, usize) {
    let (send, recv) = collective::get(call.kind).in_place_at(&call.params(n.max(1)), rank);
    let es = call.dtype.size();
    (send * es, recv * es)
}

/// Which implementation a backend is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Mpi,
    Nccl,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Mpi => "mpi",
            BackendKind::Nccl => "nccl",
        })
    }
}

/// Memory a backend's collectives read and write: host memory for MPI, device memory
/// for NCCL. Created by [`Backend::alloc`]; filled and read back with
/// [`Backend::upload`] / [`Backend::download`].
pub enum Buffer {
    Host(HostBuffer),
    Device(nccl::DeviceBuffer),
}

impl Buffer {
    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(h) => h.len,
            Buffer::Device(d) => d.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A zeroed host buffer aligned for any element type. Buffers of 16 KiB and more are
/// their own anonymous mapping, 2 MiB-aligned, whole 2 MiB pages around them, and
/// advised to use transparent huge pages (where the kernel has them in `madvise`
/// mode), as numpy and PyTorch's pinned pools do for big arrays: otherwise a message's
/// copies between processes (Open MPI's CMA single copy pins the peer's pages one by
/// one) walk 4 KiB pages and the harness, not the fabric, sets the number — measured
/// in benches/osu-parity, where that cost put broadcast and reduce at 1–2 MiB 20–40%
/// behind OSU's, all_reduce at 64 KiB 10% and a 2-rank all_gather of 64 KiB (32 KiB
/// a rank) 7% (benches/results/osu-allreduce-shim.md). A buffer smaller than its huge
/// pages holds memory it does not use (a 16 KiB buffer, a 2 MiB page); the process
/// holds at most [`HUGE_SLACK`] bytes that way, and buffers beyond it are advised
/// only over their own bytes (4 KiB pages), so a replay that keeps hundreds of small
/// buffers does not hold hundreds of huge pages. A fresh mapping reads as zeros
/// without being written, so a buffer costs nothing until its first use touches it
/// (a sweep fills every buffer before timing; zeroing it first was a second pass).
pub struct HostBuffer {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    memory: HostMemory,
}

/// Where a [`HostBuffer`]'s bytes come from.
enum HostMemory {
    /// The global allocator (small buffers).
    Heap(std::alloc::Layout),
    /// `mmap` of `len` bytes at `base` (large buffers; `ptr` is 2 MiB-aligned in it);
    /// `slack`: the bytes of its huge pages beyond the buffer's, counted in
    /// [`SLACK_HELD`] while it lives.
    Mapped {
        base: *mut libc::c_void,
        len: usize,
        slack: usize,
    },
    /// Memory someone else owns (a tensor's storage): never freed here.
    Borrowed,
}

// SAFETY: HostBuffer uniquely owns its memory (like a Vec<u8>); shared access only
// reads through `as_bytes`, mutation needs `&mut`.
unsafe impl Send for HostBuffer {}
unsafe impl Sync for HostBuffer {}

const HUGE_PAGE: usize = 2 << 20;
/// Buffers from this size on get their own huge-page mapping.
const MAPPED_FROM: usize = 16 << 10;
/// The most bytes of huge pages beyond their buffers' own that the process's live
/// buffers may hold.
const HUGE_SLACK: usize = 256 << 20;
/// The bytes of huge pages beyond their buffers' own that live buffers hold now.
static SLACK_HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Takes `slack` bytes of the process's [`HUGE_SLACK`] when they are left.
fn take_slack(slack: usize) -> bool {
    use std::sync::atomic::Ordering;
    SLACK_HELD
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
            held.checked_add(slack).filter(|&t| t <= HUGE_SLACK)
        })
        .is_ok()
}

/// The bytes of the whole huge pages that hold `size` bytes from a huge-page boundary
/// (at least one page; None past the address space).
fn huge_pages_over(size: usize) -> Option<usize> {
    size.max(1).checked_next_multiple_of(HUGE_PAGE)
}

impl HostBuffer {
    /// A zeroed buffer of `len` bytes; an error naming the size when the memory
    /// cannot be had (a message size too big for this host is the user's to fix).
    pub fn new(len: usize) -> Result<HostBuffer> {
        let size = len.max(1).next_multiple_of(8);
        let no_memory = || anyhow::anyhow!("cannot allocate a host buffer of {len} bytes");
        if len >= MAPPED_FROM {
            // Whole huge pages cover [aligned, aligned + whole): one more for the
            // alignment.
            let whole = huge_pages_over(size).ok_or_else(no_memory)?;
            let map_len = whole.checked_add(HUGE_PAGE).ok_or_else(no_memory)?;
            // SAFETY: an anonymous private mapping of a non-zero length at an address of
            // the kernel's choosing; the result is checked before use.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(no_memory());
            }
            let aligned = (base as usize).next_multiple_of(HUGE_PAGE);
            // Only advice, before the first touch: a kernel without THP ignores it. The
            // advice covers the whole huge pages the buffer lies in: the kernel backs an
            // address with a huge page only where the advised range holds its whole
            // 2 MiB, so advising just `size` bytes leaves a buffer under 2 MiB (and the
            // tail of a larger one) on 4 KiB pages — as it did for every such buffer
            // before 2026-12-05. Past the process's slack budget, that is what it gets.
            let slack = if take_slack(whole - size) {
                whole - size
            } else {
                0
            };
            let advised = if slack > 0 || whole == size {
                whole
            } else {
                size
            };
            // SAFETY: [aligned, aligned + whole) lies inside the mapping (it has
            // HUGE_PAGE bytes of slack for the alignment), and advised <= whole.
            unsafe {
                libc::madvise(aligned as *mut libc::c_void, advised, libc::MADV_HUGEPAGE);
            }
            let Some(ptr) = std::ptr::NonNull::new(aligned as *mut u8) else {
                SLACK_HELD.fetch_sub(slack, std::sync::atomic::Ordering::SeqCst);
                return Err(no_memory());
            };
            return Ok(HostBuffer {
                ptr,
                len,
                memory: HostMemory::Mapped {
                    base,
                    len: map_len,
                    slack,
                },
            });
        }
        let layout = std::alloc::Layout::from_size_align(size, 64).map_err(|_| no_memory())?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).ok_or_else(no_memory)?;
        Ok(HostBuffer {
            ptr,
            len,
            memory: HostMemory::Heap(layout),
        })
    }
    /// A buffer over `len` bytes at `ptr` that the caller owns (the storage of a
    /// tensor a collective works on in place).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be initialised memory, aligned for every element type,
    /// that stays allocated and is not accessed otherwise while the buffer lives.
    pub unsafe fn borrowed(ptr: std::ptr::NonNull<u8>, len: usize) -> HostBuffer {
        HostBuffer {
            ptr,
            len,
            memory: HostMemory::Borrowed,
        }
    }
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: the memory holds at least `len` initialised bytes (zeroed by the
        // allocator, a fresh anonymous mapping, which reads as zeros, or the
        // initialised memory `borrowed` was promised).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        match self.memory {
            // SAFETY: allocated in `new` with this layout, freed once.
            HostMemory::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            HostMemory::Mapped { base, len, slack } => {
                // SAFETY: the mapping made in `new`, unmapped once.
                unsafe { libc::munmap(base, len) };
                SLACK_HELD.fetch_sub(slack, std::sync::atomic::Ordering::SeqCst);
            }
            HostMemory::Borrowed => {}
        }
    }
}

/// Where a backend's buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    Host,
    /// The CUDA device of this ordinal.
    Gpu(usize),
}

/// Where a collective's input and output live.
pub enum Bufs<'a> {
    /// Separate send and receive buffers.
    OutOfPlace {
        send: &'a Buffer,
        recv: &'a mut Buffer,
    },
    /// One buffer (NCCL's in-place layout: all_gather's input is this rank's chunk of
    /// it; reduce_scatter's output is at [`Backend::reduce_scatter_in_place_offset`]).
    InPlace(&'a mut Buffer),
}

/// What a blocking wait is for, so a deadline expiry can say so.
#[derive(Clone, Debug)]
pub struct WaitCtx {
    /// "all_reduce 1MiB f32 sum, tier intra group 0"
    pub what: String,
    /// Longest a single batch may take before the job is ended.
    pub deadline: Duration,
    /// A barrier of the group after every timed iteration, outside its time
    /// (`--timing osu`).
    pub barrier: bool,
}

/// A communication backend over one group of ranks.
pub trait Backend {
    fn kind(&self) -> BackendKind;
    /// This rank's position in the group.
    fn rank(&self) -> usize;
    /// Number of ranks in the group.
    fn size(&self) -> usize;
    /// The group's MPI communicator: the control plane, whatever the data plane is.
    fn control(&self) -> &::mpi::topology::SimpleCommunicator;
    /// Whether this backend can run `dtype` with `op` (None: no reduction).
    fn supports(&self, dtype: Dtype, op: Option<RedOp>) -> bool;
    fn alloc(&self, bytes: usize) -> Result<Buffer>;
    fn upload(&self, buf: &mut Buffer, src: &[u8]) -> Result<()>;
    fn download(&self, buf: &Buffer, dst: &mut [u8]) -> Result<()>;
    /// Write `pattern`'s runs into `buf`: on the host at memory speed (MPI), by a
    /// kernel on the GPU (NCCL) — never element by element on the host.
    fn fill(&self, buf: &mut Buffer, pattern: &Pattern) -> Result<()>;
    /// Compare `buf` with `expected`'s runs where the buffer lives; only the counts of
    /// wrong elements come back.
    fn check(&self, buf: &Buffer, expected: &Pattern) -> Result<Mismatch>;
    /// Where this backend's buffers live: host memory (MPI) or one GPU (NCCL).
    fn memory(&self) -> Memory;
    /// A buffer over memory the caller owns, where [`Backend::memory`] says (the
    /// storage of a tensor that a collective reduces in place: no copy). On a GPU,
    /// calls on it first wait for the work queued on the device's default stream
    /// (where libtorch queued whatever wrote it).
    ///
    /// # Safety
    /// `addr` must address `bytes` bytes of such memory, aligned for every element
    /// type, that stay allocated while the buffer lives and are touched by nothing
    /// else while a call on it runs.
    unsafe fn borrow(&self, addr: usize, bytes: usize) -> Result<Buffer>;
    /// Offset in bytes of this rank's output in an in-place reduce_scatter
    /// (NCCL: rank × chunk; MPI's `MPI_IN_PLACE`: 0).
    fn reduce_scatter_in_place_offset(&self, chunk_bytes: usize) -> usize;
    /// Run `iters` calls back to back and return each one's duration in seconds
    /// (GPU: CUDA events on the stream; CPU: monotonic clock around each call). Waits
    /// for completion within `ctx.deadline`, or fails saying what it waited for.
    fn run_timed(
        &self,
        call: &Call,
        bufs: Bufs<'_>,
        iters: usize,
        ctx: &WaitCtx,
    ) -> Result<Vec<f64>>;
    /// The point-to-point transfers of `ops` as one group (one NCCL group; MPI
    /// requests waited for together), in bytes: sends read `send` and receives write
    /// `recv` at their offsets; its duration in seconds, waited for within
    /// `ctx.deadline`. A replayed job's send/recv.
    fn run_group(
        &self,
        ops: &[crate::collective::P2p],
        send: &Buffer,
        recv: &mut Buffer,
        ctx: &WaitCtx,
    ) -> Result<f64>;
    /// Collectives a job launched as one NCCL group, out of place, each on its own
    /// buffers: their time together in seconds, waited for within `ctx.deadline`. The
    /// default runs them one after another (the MPI backend: the sum of their times);
    /// NCCL runs them in one `ncclGroupStart`/`ncclGroupEnd`.
    fn run_colls(&self, calls: &mut [(&Call, &Buffer, &mut Buffer)], ctx: &WaitCtx) -> Result<f64> {
        let mut total = 0.0;
        for (call, send, recv) in calls.iter_mut() {
            let bufs = Bufs::OutOfPlace { send, recv };
            total += self.run_timed(call, bufs, 1, ctx)?.iter().sum::<f64>();
        }
        Ok(total)
    }
    /// Versions and devices, for provenance ("Open MPI v4.1.4", "NCCL 2.28.9").
    fn describe(&self) -> String;
    /// The PCI bus id of this rank's GPU, when the backend runs on one (NVML finds
    /// the GPU by it).
    fn pci_bus_id(&self) -> Option<String> {
        None
    }
}

/// Every transfer of a group inside its buffer (`send_len`, `recv_len` bytes), and the
/// group's call as its errors describe it (u8 elements, the bytes sent).
pub fn group_call(
    ops: &[crate::collective::P2p],
    send_len: usize,
    recv_len: usize,
) -> Result<Call> {
    use crate::collective::P2p;
    let mut sent = 0;
    for op in ops {
        let (at, count, len, what) = match *op {
            P2p::Send { at, count, .. } => (at, count, send_len, "send"),
            P2p::Recv { at, count, .. } => (at, count, recv_len, "receive"),
        };
        if at.checked_add(count).map_or(true, |end| end > len) {
            anyhow::bail!("a {what} of {count} bytes at {at} overruns its {len}-byte buffer");
        }
        if matches!(op, P2p::Send { .. }) {
            sent += count;
        }
    }
    Ok(Call {
        kind: CollKind::SendRecv,
        dtype: Dtype::U8,
        op: RedOp::Sum,
        root: 0,
        count: sent,
        in_place: false,
    })
}

/// Decide the backend for the job: every rank checks its own GPU and NCCL, the
/// verdicts are all-gathered, and every rank reaches the same choice. `--backend nccl`
/// with a rank that cannot use NCCL is an error naming those ranks and the reason.
pub fn resolve(world: &crate::world::World, cfg: &BackendConfig) -> Result<(BackendKind, String)> {
    if cfg.choice == BackendChoice::Mpi {
        return Ok((BackendKind::Mpi, "mpi (asked for)".into()));
    }
    let problem: Option<String> = nccl::usable(world.local_rank, cfg.nccl_lib.as_deref())
        .err()
        .map(|e| format!("{e:#}"));
    let all: Vec<Option<String>> = world.all_gather_json(&problem)?;
    let bad: Vec<(usize, &String)> = all
        .iter()
        .enumerate()
        .filter_map(|(r, p)| p.as_ref().map(|p| (r, p)))
        .collect();
    if bad.is_empty() {
        return Ok((BackendKind::Nccl, "nccl".into()));
    }
    let ranks: Vec<String> = bad
        .iter()
        .take(8)
        .map(|(r, _)| world.describe_rank(*r))
        .collect();
    let more = if bad.len() > 8 {
        format!(" and {} more", bad.len() - 8)
    } else {
        String::new()
    };
    let why = bad[0].1;
    if cfg.choice == BackendChoice::Nccl {
        Err(crate::error::Agreed(format!(
            "--backend nccl: {why} on {}{more}; install the NVIDIA driver and NCCL there (or name NCCL with --nccl-lib / BURNIN_NCCL_LIB), or run with --backend mpi",
            ranks.join(", ")
        ))
        .into())
    } else {
        Ok((
            BackendKind::Mpi,
            format!("mpi (auto: {why} on {}{more})", ranks.join(", ")),
        ))
    }
}

/// Build a backend of `kind` over `comm` (the world or a sub-group).
pub fn build(
    kind: BackendKind,
    comm: ::mpi::topology::SimpleCommunicator,
    world: &crate::world::World,
    cfg: &BackendConfig,
    watchdog: std::sync::Arc<crate::watchdog::Watchdog>,
) -> Result<Box<dyn Backend>> {
    Ok(match kind {
        BackendKind::Mpi => Box::new(mpi::MpiBackend::new(comm, watchdog)?),
        BackendKind::Nccl => Box::new(nccl::NcclBackend::new(
            comm,
            world.local_rank,
            cfg,
            watchdog,
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(kind: CollKind, count: usize, dtype: Dtype, root: usize) -> Call {
        Call {
            kind,
            dtype,
            op: RedOp::Sum,
            root,
            count,
            in_place: false,
        }
    }

    #[test]
    fn buffer_needs_follow_nccl_tests_counts() {
        let n = 4;
        let c = |k| call(k, 1024, Dtype::F32, 1);
        assert_eq!(needed_bytes(&c(CollKind::AllReduce), 0, n), (4096, 4096));
        assert_eq!(needed_bytes(&c(CollKind::AllGather), 0, n), (1024, 4096));
        assert_eq!(
            needed_bytes(&c(CollKind::ReduceScatter), 0, n),
            (4096, 1024)
        );
        assert_eq!(needed_bytes(&c(CollKind::AllToAll), 0, n), (4096, 4096));
        assert_eq!(needed_bytes(&c(CollKind::SendRecv), 0, n), (4096, 4096));
        // Rooted: only the root reads (broadcast) or gets (reduce) the message.
        assert_eq!(needed_bytes(&c(CollKind::Broadcast), 0, n), (0, 4096));
        assert_eq!(needed_bytes(&c(CollKind::Broadcast), 1, n), (4096, 4096));
        assert_eq!(needed_bytes(&c(CollKind::Reduce), 0, n), (4096, 0));
        assert_eq!(needed_bytes(&c(CollKind::Reduce), 1, n), (4096, 4096));
    }

    #[test]
    fn host_buffers_are_zeroed_aligned_and_huge_page_mapped_from_16_kib() {
        let _one = SLACK_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        for len in [
            1,
            100,
            (16 << 10) - 8,
            16 << 10,
            64 << 10,
            1 << 20,
            (5 << 20) + 24,
        ] {
            let mut b = HostBuffer::new(len).unwrap();
            assert_eq!(b.len, len);
            let addr = b.ptr.as_ptr() as usize;
            let mapped = matches!(b.memory, HostMemory::Mapped { .. });
            assert_eq!(mapped, len >= 16 << 10, "{len}");
            assert_eq!(addr % if mapped { HUGE_PAGE } else { 64 }, 0, "{len}");
            if let HostMemory::Mapped {
                base, len: map_len, ..
            } = b.memory
            {
                // Every huge page the buffer touches lies inside the mapping.
                let end = (addr + len).next_multiple_of(HUGE_PAGE);
                assert!(
                    base as usize <= addr && end <= base as usize + map_len,
                    "{len}"
                );
            }
            assert!(b.as_bytes().iter().all(|&x| x == 0), "{len}");
            b.as_bytes_mut()[len - 1] = 7;
            assert_eq!(b.as_bytes()[len - 1], 7);
            if mapped {
                // The kernel's record of the advice: one mapping with the huge-page
                // flag from the buffer's start over whole 2 MiB pages.
                let (start, end, flags) = smaps_area_of(addr).unwrap();
                assert_eq!(start, addr, "{len}");
                assert_eq!(Some(end - start), huge_pages_over(len), "{len}");
                assert!(
                    flags.split_whitespace().any(|f| f == "hg"),
                    "{len}: {flags}"
                );
            }
        }
    }

    /// The area of /proc/self/smaps that holds `addr`: start, end, VmFlags.
    fn smaps_area_of(addr: usize) -> Option<(usize, usize, String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut area = None;
        for line in smaps.lines() {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if let Some((a, b)) = area {
                    if (a..b).contains(&addr) {
                        return Some((a, b, flags.trim().to_string()));
                    }
                }
                continue;
            }
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    area = Some((a, b));
                }
            }
        }
        None
    }

    /// The tests that read or spend the process's huge-page slack, one at a time.
    static SLACK_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn small_buffers_stop_taking_huge_pages_when_the_slack_is_spent() {
        let _one = SLACK_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        use std::sync::atomic::Ordering;
        let before = SLACK_HELD.load(Ordering::SeqCst);
        let len = 16 << 10;
        let each = HUGE_PAGE - len;
        let fit = (HUGE_SLACK - before) / each;
        // Untouched mappings: address space, no memory.
        let held: Vec<HostBuffer> = (0..fit).map(|_| HostBuffer::new(len).unwrap()).collect();
        for b in &held {
            assert!(matches!(b.memory, HostMemory::Mapped { slack, .. } if slack == each));
        }
        assert_eq!(SLACK_HELD.load(Ordering::SeqCst), before + fit * each);
        // One more: mapped and aligned, but advised over its own 16 KiB only.
        let over = HostBuffer::new(len).unwrap();
        assert!(matches!(over.memory, HostMemory::Mapped { slack: 0, .. }));
        let addr = over.ptr.as_ptr() as usize;
        let (start, end, flags) = smaps_area_of(addr).unwrap();
        assert_eq!((start, end - start), (addr, len));
        assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
        // A 2 MiB buffer has no slack: whole pages whatever is held.
        let exact = HostBuffer::new(HUGE_PAGE).unwrap();
        let a = exact.ptr.as_ptr() as usize;
        assert_eq!(
            smaps_area_of(a).map(|(s, e, _)| (s, e - s)),
            Some((a, HUGE_PAGE))
        );
        drop((over, exact));
        drop(held);
        assert_eq!(SLACK_HELD.load(Ordering::SeqCst), before);
        // Freed slack is there again.
        let again = HostBuffer::new(len).unwrap();
        assert!(matches!(again.memory, HostMemory::Mapped { slack, .. } if slack == each));
    }

    #[test]
    fn huge_page_advice_covers_whole_pages() {
        assert_eq!(huge_pages_over(1), Some(HUGE_PAGE));
        assert_eq!(huge_pages_over(64 << 10), Some(HUGE_PAGE));
        assert_eq!(huge_pages_over(HUGE_PAGE), Some(HUGE_PAGE));
        assert_eq!(huge_pages_over(HUGE_PAGE + 1), Some(2 * HUGE_PAGE));
        assert_eq!(huge_pages_over((5 << 20) + 24), Some(3 * HUGE_PAGE));
        assert_eq!(huge_pages_over(usize::MAX - 8), None);
        assert!(HostBuffer::new(usize::MAX - 8).is_err());
    }

    #[test]
    fn in_place_offsets_are_nccls() {
        let n = 4;
        let ag = call(CollKind::AllGather, 1024, Dtype::F16, 0);
        // chunk = 256 elements × 2 bytes; rank 3's input sits at 3 chunks.
        assert_eq!(in_place_offsets(&ag, 3, n), (3 * 512, 0));
        let rs = call(CollKind::ReduceScatter, 1024, Dtype::F16, 0);
        assert_eq!(in_place_offsets(&rs, 2, n), (0, 2 * 512));
        let ar = call(CollKind::AllReduce, 1024, Dtype::F16, 0);
        assert_eq!(in_place_offsets(&ar, 2, n), (0, 0));
    }

    #[test]
    fn json_names_are_the_table_names() {
        for k in CollKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name(), "{k:?}");
            assert_eq!(CollKind::parse(k.name()), Some(k));
        }
        assert_eq!(
            CollKind::parse("all_reduce_perf"),
            Some(CollKind::AllReduce)
        );
        assert_eq!(CollKind::parse("allgather"), Some(CollKind::AllGather));
        for d in Dtype::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), d.name());
            assert_eq!(Dtype::parse(d.nccl_name()), Some(d));
        }
    }
}
