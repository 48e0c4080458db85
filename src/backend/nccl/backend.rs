//! [`NcclBackend`]: NCCL collectives on one GPU, timed with CUDA events, never hung.
//!
//! - Bootstrap: rank 0 of the group makes the 128-byte unique id and broadcasts it over
//!   the group's MPI communicator (with a status byte, so a failure on rank 0 reaches
//!   every rank as an error instead of a hang).
//! - The communicator is created non-blocking (`ncclConfig_t.blocking = 0`). Every NCCL
//!   call may then answer `ncclInProgress`; burnin polls `ncclCommGetAsyncError` until
//!   it settles before the next call, as NCCL requires.
//! - Timing: a batch of `iters` calls is queued back to back, each between two CUDA
//!   events on the stream; then one wait; then the events' elapsed times are read.
//! - Every wait polls the stream and the communicator's async error against the
//!   deadline; on an error or at the deadline it calls `ncclCommAbort` and returns an
//!   error naming the collective and size, this rank, and how long it waited. The
//!   process's watchdog is armed too, later, as a backstop in case the abort itself
//!   hangs.
//! - Calls: each collective's `launch` (the collective table) on [`NcclCall`], this
//!   backend's implementation of the primitives, at the addresses `Call::place` lays
//!   out (the table's sizes and in-place offsets).
//! - In-place follows NCCL: one buffer; all_gather's input is this rank's chunk of it
//!   (offset rank·chunk), reduce_scatter leaves this rank's chunk at offset rank·chunk.
//!   NCCL has no in-place alltoall or sendrecv (a send and a receive on one buffer
//!   race: the table's `in_place_from_copy`), so their in-place variant first copies
//!   the buffer to a scratch buffer on the stream and sends from that copy; the copy
//!   is inside the timed region.
use super::device::{cuda_error, Device, DeviceBuffer, StreamState};
use super::kernels::{self, Kernels, COUNTERS};
use super::library::{
    dtype as ndt, redop, Config, NcclLib, NcclResult, RawComm, RawStream, UniqueId,
    NCCL_IN_PROGRESS, NCCL_SUCCESS, UNIQUE_ID_BYTES,
};
use crate::backend::BackendConfig;
use crate::backend::{Backend, BackendKind, BufLens, Buffer, Bufs, Call, Memory, WaitCtx};
use crate::collective::{Mismatch, P2p, Pattern, Prims};
use crate::error::Agreed;
use crate::kinds::{Dtype, RedOp};
use crate::units::Bytes;
use crate::watchdog::Watchdog;
use anyhow::{anyhow, bail, Result};
use cudarc::driver::{result, sys, DriverError};
use mpi::collective::{CommunicatorCollectives, Root};
use mpi::topology::{Communicator, SimpleCommunicator};
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much longer than a step's own deadline the watchdog waits before ending the
/// job (only if the NCCL abort itself hangs).
const BACKSTOP: Duration = Duration::from_secs(30);
/// Longest a communicator's orderly teardown may take before it is aborted instead.
const TEARDOWN: Duration = Duration::from_secs(10);
/// What rank 0 broadcasts after ncclGetUniqueId: the id, or why there is none.
const SHARED_BYTES: usize = 512;
const _: () = assert!(SHARED_BYTES >= UNIQUE_ID_BYTES);

/// NCCL's element type for `d`.
pub fn nccl_dtype(d: Dtype) -> c_int {
    match d {
        Dtype::F32 => ndt::FLOAT32,
        Dtype::F64 => ndt::FLOAT64,
        Dtype::F16 => ndt::FLOAT16,
        Dtype::Bf16 => ndt::BFLOAT16,
        Dtype::I32 => ndt::INT32,
        Dtype::U8 => ndt::UINT8,
    }
}

/// NCCL's reduction for `op`.
pub fn nccl_op(op: RedOp) -> c_int {
    match op {
        RedOp::Sum => redop::SUM,
        RedOp::Prod => redop::PROD,
        RedOp::Max => redop::MAX,
        RedOp::Min => redop::MIN,
        RedOp::Avg => redop::AVG,
    }
}

/// Device addresses for one call.
#[derive(Clone, Copy)]
struct Ptrs {
    send: sys::CUdeviceptr,
    recv: sys::CUdeviceptr,
    /// In-place alltoall/sendrecv: copy `bytes` from `recv` to `send` (the scratch
    /// buffer) before each call.
    snapshot: Option<usize>,
}

fn vp(p: sys::CUdeviceptr) -> *mut c_void {
    p as usize as *mut c_void
}

/// Whether `b` is memory the backend borrowed (see `Backend::borrow`).
fn is_borrowed(b: &Buffer) -> bool {
    matches!(b, Buffer::Device(d) if d.is_borrowed())
}

/// How long a wait that has polled for `waited` pauses before its next poll (None:
/// only yields). Events hold the timing, so polling only costs CPU: spin for the first
/// millisecond (short calls), then 50 µs sleeps, and 1 ms sleeps after 100 ms, so a
/// hung peer costs a rank about a thousand polls a second, not a core.
fn pause(waited: Duration) -> Option<Duration> {
    if waited < Duration::from_millis(1) {
        None
    } else if waited < Duration::from_millis(100) {
        Some(Duration::from_micros(50))
    } else {
        Some(Duration::from_millis(1))
    }
}

/// What stopped a wait.
enum Failure {
    Nccl(NcclResult),
    Cuda(DriverError),
    Deadline(Duration),
}

/// What a wait waits for.
#[derive(Clone, Copy, PartialEq)]
enum Until {
    /// The communicator's state leaves ncclInProgress (init, a queued call).
    CommReady,
    /// Everything on the stream has finished.
    StreamIdle,
}

/// NCCL collectives over one group of ranks, one GPU per rank.
pub struct NcclBackend {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    lib: &'static NcclLib,
    device: Arc<Device>,
    /// The NCCL communicator; null before init and after an abort.
    nccl: Cell<RawComm>,
    /// Why the communicator was aborted, when it was.
    aborted: RefCell<Option<String>>,
    /// Timing events, reused across batches (two per iteration).
    events: RefCell<Vec<sys::CUevent>>,
    /// Scratch for in-place alltoall/sendrecv.
    scratch: RefCell<Option<DeviceBuffer>>,
    /// Device copy of a fill's or check's tables and counters.
    tables: RefCell<Option<DeviceBuffer>>,
    /// The fill/check kernels, loaded on first use.
    kernels: RefCell<Option<Kernels>>,
    /// Deadline for steps without their own (init, copies, teardown).
    timeout: Duration,
    watchdog: Arc<Watchdog>,
}

impl NcclBackend {
    /// A backend over `comm` (the world or a tier's group) on GPU `local_rank % GPUs`.
    pub fn new(
        comm: SimpleCommunicator,
        local_rank: usize,
        cfg: &BackendConfig,
        watchdog: Arc<Watchdog>,
    ) -> Result<NcclBackend> {
        // gpu::ready first, always: cudarc panics when libcuda is missing.
        let count = crate::gpu::ready().map_err(|e| anyhow!(e))?;
        let lib = super::library(cfg.nccl_lib.as_deref())?;
        let device = Arc::new(Device::open(super::gpu_for(local_rank, count))?);
        let timeout = cfg.deadline;
        let be = NcclBackend {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            lib,
            device,
            nccl: Cell::new(std::ptr::null_mut()),
            aborted: RefCell::new(None),
            events: RefCell::new(Vec::new()),
            scratch: RefCell::new(None),
            tables: RefCell::new(None),
            kernels: RefCell::new(None),
            timeout,
            watchdog,
        };
        let id = be.share_unique_id()?;
        be.init_comm(id)?;
        Ok(be)
    }

    /// Rank 0 makes the unique id; everyone gets it (or rank 0's error) over MPI.
    fn share_unique_id(&self) -> Result<UniqueId> {
        // [status, 512 bytes]: status 1 = the id follows (128 bytes), 0 = rank 0's
        // error text follows.
        let mut msg = [0u8; 1 + SHARED_BYTES];
        if self.rank == 0 {
            // Whatever happens here, rank 0 must still join the broadcast below, or
            // the others wait for it until the watchdog ends the job.
            match self.make_unique_id() {
                Ok(id) => {
                    msg[0] = 1;
                    for (m, b) in msg[1..].iter_mut().zip(id.internal) {
                        *m = b as u8;
                    }
                }
                Err(text) => {
                    let n = text.len().min(SHARED_BYTES);
                    msg[1..1 + n].copy_from_slice(&text.as_bytes()[..n]);
                }
            }
        }
        {
            let _guard = self
                .watchdog
                .arm("sharing the NCCL unique id from group rank 0", self.timeout);
            self.comm.process_at_rank(0).broadcast_into(&mut msg[..]);
        }
        if msg[0] != 1 {
            let text = String::from_utf8_lossy(&msg[1..]);
            bail!(Agreed(format!(
                "ncclGetUniqueId failed on group rank 0: {}",
                text.trim_end_matches('\0')
            )));
        }
        let mut id = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (i, b) in id.internal.iter_mut().zip(&msg[1..]) {
            *i = *b as _;
        }
        Ok(id)
    }

    /// ncclGetUniqueId, or why not.
    fn make_unique_id(&self) -> std::result::Result<UniqueId, String> {
        self.device.bind().map_err(|e| format!("{e:#}"))?;
        let mut id = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: ncclGetUniqueId writes one ncclUniqueId through a valid pointer.
        let rc = unsafe { (self.lib.get_unique_id)(&mut id) };
        if rc == NCCL_SUCCESS {
            return Ok(id);
        }
        // SAFETY: ncclGetLastError with no communicator reads the library's last error.
        let mut text = match unsafe { self.lib.last_error(std::ptr::null_mut()) } {
            Some(d) => format!("{}: {d}", self.lib.explain(rc)),
            None => self.lib.explain(rc),
        };
        // The bootstrap's usual cause on a new node: an interface name that is not there.
        if let Ok(v) = std::env::var("NCCL_SOCKET_IFNAME") {
            text.push_str(&format!(" (NCCL_SOCKET_IFNAME={v})"));
        }
        Err(text)
    }

    /// ncclCommInitRankConfig, non-blocking, waited for within the timeout.
    fn init_comm(&self, id: UniqueId) -> Result<()> {
        let what = format!(
            "creating the NCCL communicator ({} ranks, NCCL {})",
            self.size, self.lib.version
        );
        let Some(mut config) = Config::non_blocking(self.lib.version) else {
            bail!(
                "NCCL {} has no non-blocking communicators (burnin needs 2.14 or newer)",
                self.lib.version
            )
        };
        self.device.bind()?;
        let since = Instant::now();
        let _guard = self.watchdog.arm(&what, self.timeout + BACKSTOP);
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: `raw` and `config` are valid for writes/reads for the whole call and
        // `config` outlives the wait below (NCCL copies it during the call anyway);
        // its header says how many bytes this NCCL may read (Config::for_version).
        // This thread's current context is this rank's GPU (bind above), which NCCL
        // takes as the communicator's device. nranks and rank come from the MPI
        // communicator, so 0 <= rank < nranks and every rank passes the same id.
        let rc = unsafe {
            (self.lib.comm_init_rank_config)(
                &mut raw,
                self.size as c_int,
                id,
                self.rank as c_int,
                &mut config,
            )
        };
        self.nccl.set(raw);
        match rc {
            NCCL_SUCCESS | NCCL_IN_PROGRESS => {}
            e => return Err(self.fail(&what, since, Failure::Nccl(e))),
        }
        self.wait(Until::CommReady, &what, self.timeout, since)
    }

    /// The communicator's state (`ncclCommGetAsyncError`), or the call's own error.
    fn comm_state(&self) -> NcclResult {
        let comm = self.nccl.get();
        if comm.is_null() {
            return NCCL_SUCCESS;
        }
        let mut state: NcclResult = NCCL_SUCCESS;
        // SAFETY: `comm` is this backend's live communicator (non-null: not aborted,
        // not destroyed); the result is written through a valid pointer.
        let rc = unsafe { (self.lib.comm_get_async_error)(comm, &mut state) };
        if rc != NCCL_SUCCESS {
            rc
        } else {
            state
        }
    }

    /// Poll until `until` holds, NCCL or CUDA reports an error, or `deadline` (counted
    /// from `since`) passes; the last two abort the communicator.
    ///
    /// The stream is queried before the communicator's state, never after: an error
    /// NCCL raises while the last work drains (a peer that failed or aborted) is set
    /// before that work completes, so a state read after an idle stream sees it. Read
    /// the other way round, a poll descheduled between the two reads (a loaded node)
    /// took the state from before the error and the idle stream from after it, and a
    /// failed group passed as done (`tests/backend_twin.rs`, TWIN_NCCL_POLL_LAG_MS).
    fn wait(&self, until: Until, what: &str, deadline: Duration, since: Instant) -> Result<()> {
        let start = Instant::now();
        loop {
            let idle = match until {
                Until::CommReady => false,
                Until::StreamIdle => match self.device.query() {
                    Ok(StreamState::Idle) => true,
                    Ok(StreamState::Busy) => false,
                    Err(e) => return Err(self.fail(what, since, Failure::Cuda(e))),
                },
            };
            match self.comm_state() {
                NCCL_SUCCESS if until == Until::CommReady || idle => return Ok(()),
                NCCL_SUCCESS | NCCL_IN_PROGRESS => {}
                e => return Err(self.fail(what, since, Failure::Nccl(e))),
            }
            if since.elapsed() >= deadline {
                return Err(self.fail(what, since, Failure::Deadline(deadline)));
            }
            match pause(start.elapsed()) {
                None => std::thread::yield_now(),
                Some(d) => std::thread::sleep(d),
            }
        }
    }

    /// Abort the communicator and describe why, naming this rank and the wait.
    fn fail(&self, what: &str, since: Instant, why: Failure) -> anyhow::Error {
        let waited = since.elapsed().as_secs_f64();
        let reason = match why {
            Failure::Nccl(rc) => {
                let comm = self.nccl.get();
                // SAFETY: `comm` is null or still live (the abort comes after).
                let detail = unsafe { self.lib.last_error(comm) };
                match detail {
                    Some(d) => format!("NCCL reported {}: {d}", self.lib.explain(rc)),
                    None => format!("NCCL reported {}", self.lib.explain(rc)),
                }
            }
            Failure::Cuda(e) => format!("CUDA reported {}", crate::gpu::driver_error_text(e)),
            Failure::Deadline(d) => format!(
                "not complete within the {:.0} s deadline (-T/--timeout): a peer is missing, \
                 hung or cut off",
                d.as_secs_f64()
            ),
        };
        let had_comm = !self.nccl.get().is_null();
        self.abort(&reason);
        anyhow!(
            "{what}: {reason} (group rank {} of {}, GPU {}, after {waited:.1} s){}",
            self.rank,
            self.size,
            self.device.ordinal(),
            if had_comm {
                "; the NCCL communicator was aborted"
            } else {
                ""
            }
        )
    }

    /// ncclCommAbort, once; the device is poisoned (see `device`'s header).
    fn abort(&self, why: &str) {
        let comm = self.nccl.replace(std::ptr::null_mut());
        self.device.poison();
        self.aborted
            .borrow_mut()
            .get_or_insert_with(|| why.to_string());
        if !comm.is_null() {
            // SAFETY: `comm` was this backend's live communicator; it was taken out
            // of the cell above, so it is aborted once and never used again.
            unsafe { (self.lib.comm_abort)(comm) };
        }
    }

    /// Settle one NCCL call's return code (ncclInProgress: poll until queued).
    fn queued(&self, rc: NcclResult, what: &str, ctx: &WaitCtx, since: Instant) -> Result<()> {
        match rc {
            NCCL_SUCCESS => Ok(()),
            NCCL_IN_PROGRESS => self.wait(Until::CommReady, what, ctx.deadline, since),
            e => Err(self.fail(what, since, Failure::Nccl(e))),
        }
    }

    /// Refuse work once the communicator has been aborted (the GPU may be stuck).
    fn alive(&self, what: &str) -> Result<()> {
        match self.aborted.borrow().as_ref() {
            Some(why) => {
                bail!("{what}: the NCCL communicator of this group was aborted earlier ({why})")
            }
            None => Ok(()),
        }
    }

    fn device_buffer<'a>(&self, buf: &'a Buffer) -> Result<&'a DeviceBuffer> {
        match buf {
            Buffer::Device(d) if d.on(&self.device) => Ok(d),
            Buffer::Device(_) => bail!("the nccl backend was given another GPU's buffer"),
            Buffer::Host(_) => bail!("the nccl backend was given a host buffer"),
        }
    }

    /// Wait for the stream after a copy (no NCCL involved, but never unbounded).
    fn wait_copy(&self, what: &str) -> Result<()> {
        self.wait(Until::StreamIdle, what, self.timeout, Instant::now())
    }

    /// Make sure there are `n` timing events.
    fn ensure_events(&self, n: usize) -> Result<()> {
        let mut events = self.events.borrow_mut();
        if events.len() < n {
            let more = self
                .device
                .new_events(n - events.len())
                .map_err(|e| cuda_error("creating timing events", e))?;
            events.extend(more);
        }
        Ok(())
    }

    /// A scratch buffer of at least `bytes`; its address.
    fn scratch(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        self.grown(&self.scratch, bytes)
    }

    /// The buffer in `slot`, reallocated when smaller than `bytes`; its address.
    fn grown(
        &self,
        slot: &RefCell<Option<DeviceBuffer>>,
        bytes: usize,
    ) -> Result<sys::CUdeviceptr> {
        let mut s = slot.borrow_mut();
        if s.as_ref().map(|b| b.len() < bytes).unwrap_or(true) {
            *s = None; // free the old one first
            *s = Some(DeviceBuffer::alloc(&self.device, bytes)?);
        }
        Ok(s.as_ref().map(|b| b.ptr()).unwrap_or(0))
    }

    /// The fill/check kernels, JIT-loaded on first use.
    fn kernels(&self) -> Result<std::cell::Ref<'_, Kernels>> {
        if self.kernels.borrow().is_none() {
            let k = Kernels::load(&self.device)?;
            *self.kernels.borrow_mut() = Some(k);
        }
        std::cell::Ref::filter_map(self.kernels.borrow(), Option::as_ref)
            .map_err(|_| anyhow!("burnin's kernels are not loaded"))
    }

    /// Copy `bytes` to the tables buffer on the stream; its device address.
    fn stage_tables(&self, bytes: &[u8]) -> Result<sys::CUdeviceptr> {
        let dev = self.grown(&self.tables, bytes.len().max(8))?;
        // SAFETY: the tables buffer holds at least bytes.len() bytes (grown above) and
        // is used only by work queued after this copy on the same stream; from
        // pageable memory the driver has read `bytes` before it returns.
        unsafe { result::memcpy_htod_async(dev, bytes, self.device.raw_stream()) }
            .map_err(|e| cuda_error("copying fill/check tables to the GPU", e))?;
        Ok(dev)
    }

    /// Queue one call on the stream: the collective's launch on [`NcclCall`]'s
    /// primitives.
    fn launch(&self, call: &Call, p: Ptrs, ctx: &WaitCtx, since: Instant) -> Result<()> {
        if let Some(bytes) = p.snapshot {
            let stream = self.device.raw_stream() as RawStream;
            // SAFETY: `send` is the scratch buffer and `recv` the call's buffer, both at
            // least `bytes` long (plan_ptrs) and distinct allocations on this GPU; the
            // copy is ordered on the stream before the sends that read the scratch.
            unsafe { result::memcpy_dtod_async(p.send, p.recv, bytes, stream as sys::CUstream) }
                .map_err(|e| cuda_error("copying the in-place buffer aside", e))?;
        }
        let mut x = NcclCall {
            be: self,
            p,
            dt: nccl_dtype(call.dtype),
            op: nccl_op(call.op),
            es: call.dtype.size(),
            ctx,
            since,
        };
        crate::collective::get(call.kind).launch(&mut x, &call.params(self.size), self.rank)
    }

    /// Check the buffers against the call and work out the addresses.
    fn plan_ptrs(&self, call: &Call, bufs: &Bufs<'_>) -> Result<Ptrs> {
        let (send, recv, have) = match bufs {
            Bufs::OutOfPlace { send, recv } => {
                let (s, r) = (self.device_buffer(send)?, self.device_buffer(recv)?);
                let have = BufLens::OutOfPlace {
                    send: s.len(),
                    recv: r.len(),
                };
                (s.ptr(), r.ptr(), have)
            }
            Bufs::InPlace(buf) => {
                let b = self.device_buffer(buf)?;
                (b.ptr(), b.ptr(), BufLens::InPlace(b.len()))
            }
        };
        let place = call.place(self.rank, self.size, have)?;
        if matches!(bufs, Bufs::InPlace(_))
            && crate::collective::get(call.kind).in_place_from_copy()
        {
            let scratch = self.scratch(place.send.max(1))?;
            return Ok(Ptrs {
                send: scratch,
                recv,
                snapshot: (place.send > 0).then_some(place.send),
            });
        }
        Ok(Ptrs {
            send: send + place.send_at as u64,
            recv: recv + place.recv_at as u64,
            snapshot: None,
        })
    }

    /// Orderly teardown: ncclCommFinalize, wait (bounded), ncclCommDestroy; abort
    /// instead when that fails or takes too long.
    fn teardown(&mut self) {
        let comm = self.nccl.get();
        if comm.is_null() {
            return;
        }
        let _ = self.device.bind();
        let limit = TEARDOWN.min(self.timeout);
        let _guard = self
            .watchdog
            .arm("tearing down the NCCL communicator", limit + BACKSTOP);
        // SAFETY: `comm` is live (non-null in the cell); finalize only flushes it.
        let rc = unsafe { (self.lib.comm_finalize)(comm) };
        let mut ok = rc == NCCL_SUCCESS || rc == NCCL_IN_PROGRESS;
        let since = Instant::now();
        while ok {
            match self.comm_state() {
                NCCL_SUCCESS => break,
                NCCL_IN_PROGRESS if since.elapsed() < limit => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                _ => ok = false,
            }
        }
        self.nccl.set(std::ptr::null_mut());
        if ok {
            // SAFETY: finalized and quiescent; destroyed once (the cell is cleared).
            unsafe { (self.lib.comm_destroy)(comm) };
        } else {
            self.device.poison();
            // SAFETY: live communicator, aborted once (the cell is cleared).
            unsafe { (self.lib.comm_abort)(comm) };
        }
    }
}

/// The primitives on one call of an [`NcclBackend`]: NCCL's collectives, queued on
/// its stream; a group of transfers is one `ncclGroupStart`/`ncclGroupEnd`.
///
/// SAFETY (every NCCL call of this impl): `comm` is the backend's live communicator
/// (run_timed checked it is not aborted) and `stream` its stream on the same GPU.
/// plan_ptrs checked with `Call::place` that the buffers hold what the collective table
/// says this call reads and writes on this rank, at the offsets used here (offsets of a
/// group stay inside the input or output: the collective's layout); they are device
/// memory on this GPU and stay allocated until the stream is idle (run_timed waits
/// before it returns, and poisons the device — so nothing is freed — when it cannot).
/// Counts are element counts of `dt`; root < n was checked by the sweep plan (and
/// run_timed); peers are in 0..n.
struct NcclCall<'a> {
    be: &'a NcclBackend,
    p: Ptrs,
    dt: c_int,
    op: c_int,
    /// Bytes per element.
    es: usize,
    ctx: &'a WaitCtx,
    since: Instant,
}

impl NcclCall<'_> {
    fn comm(&self) -> RawComm {
        self.be.nccl.get()
    }
    fn stream(&self) -> RawStream {
        self.be.device.raw_stream() as RawStream
    }
    /// Settle one NCCL call's return code.
    fn queued(&self, rc: NcclResult) -> Result<()> {
        self.be.queued(rc, &self.ctx.what, self.ctx, self.since)
    }
}

impl Prims for NcclCall<'_> {
    fn ranks(&self) -> usize {
        self.be.size
    }
    fn all_reduce(&mut self, count: usize) -> Result<()> {
        let (s, r, lib) = (vp(self.p.send), vp(self.p.recv), self.be.lib);
        // SAFETY: see NcclCall.
        let rc =
            unsafe { (lib.all_reduce)(s, r, count, self.dt, self.op, self.comm(), self.stream()) };
        self.queued(rc)
    }
    fn all_gather(&mut self, chunk: usize) -> Result<()> {
        let (s, r, lib) = (vp(self.p.send), vp(self.p.recv), self.be.lib);
        // SAFETY: see NcclCall.
        let rc = unsafe { (lib.all_gather)(s, r, chunk, self.dt, self.comm(), self.stream()) };
        self.queued(rc)
    }
    fn reduce_scatter(&mut self, chunk: usize) -> Result<()> {
        let (s, r, lib) = (vp(self.p.send), vp(self.p.recv), self.be.lib);
        // SAFETY: see NcclCall.
        let rc = unsafe {
            (lib.reduce_scatter)(s, r, chunk, self.dt, self.op, self.comm(), self.stream())
        };
        self.queued(rc)
    }
    fn broadcast(&mut self, count: usize, root: usize) -> Result<()> {
        let (s, r, lib) = (vp(self.p.send), vp(self.p.recv), self.be.lib);
        let root = root as c_int;
        // SAFETY: see NcclCall.
        let rc = unsafe { (lib.broadcast)(s, r, count, self.dt, root, self.comm(), self.stream()) };
        self.queued(rc)
    }
    fn reduce(&mut self, count: usize, root: usize) -> Result<()> {
        let (s, r, lib) = (vp(self.p.send), vp(self.p.recv), self.be.lib);
        let root = root as c_int;
        // SAFETY: see NcclCall.
        let rc = unsafe {
            (lib.reduce)(
                s,
                r,
                count,
                self.dt,
                self.op,
                root,
                self.comm(),
                self.stream(),
            )
        };
        self.queued(rc)
    }
    fn group(&mut self, ops: &[P2p]) -> Result<()> {
        let lib = self.be.lib;
        let (comm, stream, dt, es) = (self.comm(), self.stream(), self.dt, self.es);
        // SAFETY: see NcclCall.
        let rc = unsafe { (lib.group_start)() };
        if rc != NCCL_SUCCESS {
            let what = self.ctx.what.as_str();
            return Err(self.be.fail(what, self.since, Failure::Nccl(rc)));
        }
        let mut first_err = NCCL_SUCCESS;
        for op in ops {
            // SAFETY: see NcclCall.
            let rc = unsafe {
                match *op {
                    P2p::Send { peer, at, count } => {
                        let buf = vp(self.p.send + (at * es) as u64);
                        (lib.send)(buf, count, dt, peer as c_int, comm, stream)
                    }
                    P2p::Recv { peer, at, count } => {
                        let buf = vp(self.p.recv + (at * es) as u64);
                        (lib.recv)(buf, count, dt, peer as c_int, comm, stream)
                    }
                }
            };
            if first_err == NCCL_SUCCESS && rc != NCCL_SUCCESS {
                first_err = rc;
            }
        }
        // SAFETY: closes the group opened above.
        let end = unsafe { (lib.group_end)() };
        self.queued(if first_err != NCCL_SUCCESS {
            first_err
        } else {
            end
        })
    }
}

impl Drop for NcclBackend {
    fn drop(&mut self) {
        self.teardown();
        if self.device.bind().is_ok() {
            let events = std::mem::take(self.events.get_mut());
            self.device.destroy_events(&events);
            if let Some(k) = self.kernels.get_mut().take() {
                if !self.device.is_poisoned() {
                    k.unload(); // a poisoned GPU may still run them: leak instead
                }
            }
        }
        // The scratch buffer and the device drop after this (freed unless poisoned).
    }
}

impl Backend for NcclBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Nccl
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn control(&self) -> &SimpleCommunicator {
        &self.comm
    }
    fn supports(&self, _dtype: Dtype, _op: Option<RedOp>) -> bool {
        // Every type and op burnin knows exists since NCCL 2.10; burnin needs 2.14.
        true
    }
    fn alloc(&self, bytes: usize) -> Result<Buffer> {
        Ok(Buffer::Device(DeviceBuffer::alloc(&self.device, bytes)?))
    }
    fn upload(&self, buf: &mut Buffer, src: &[u8]) -> Result<()> {
        let d = self.device_buffer(buf)?;
        if src.len() > d.len() {
            bail!(
                "upload of {} bytes into a {}-byte buffer",
                src.len(),
                d.len()
            );
        }
        if src.is_empty() {
            return Ok(());
        }
        self.alive("copying to the GPU")?;
        self.device.bind()?;
        // SAFETY: the destination holds >= src.len() bytes (checked); the copy is
        // queued on the stream, after any earlier work on the buffer. From pageable
        // memory the driver stages `src` before returning, and we wait for the stream
        // before returning anyway.
        unsafe { result::memcpy_htod_async(d.ptr(), src, self.device.raw_stream()) }
            .map_err(|e| cuda_error("copying to the GPU", e))?;
        self.wait_copy(&format!(
            "copying {} to GPU {}",
            Bytes(src.len() as u64),
            self.device.ordinal()
        ))
    }
    fn download(&self, buf: &Buffer, dst: &mut [u8]) -> Result<()> {
        let d = self.device_buffer(buf)?;
        if dst.len() > d.len() {
            bail!(
                "download of {} bytes from a {}-byte buffer",
                dst.len(),
                d.len()
            );
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.alive("copying from the GPU")?;
        self.device.bind()?;
        // SAFETY: the source holds >= dst.len() bytes (checked) and `dst` is a valid,
        // exclusively borrowed host slice of that length. Into pageable memory the
        // driver returns only once the copy is done; the wait below covers the rest.
        unsafe { result::memcpy_dtoh_async(dst, d.ptr(), self.device.raw_stream()) }
            .map_err(|e| cuda_error("copying from the GPU", e))?;
        self.wait_copy(&format!(
            "copying {} from GPU {}",
            Bytes(dst.len() as u64),
            self.device.ordinal()
        ))
    }
    fn fill(&self, buf: &mut Buffer, pat: &Pattern) -> Result<()> {
        let d = self.device_buffer(buf)?;
        kernels::check_bounds(pat, d.len())?;
        if pat.elements() == 0 {
            return Ok(());
        }
        self.alive("filling a buffer on the GPU")?;
        self.device.bind()?;
        let k = self.kernels()?;
        let staged = kernels::stage(pat, false);
        let tables = self.stage_tables(&staged.bytes)?;
        // SAFETY: `d` holds pat.end() elements (checked above) and `tables` the
        // staged bytes; both live until the stream is idle (waited for below, or the
        // device is poisoned and nothing is freed).
        unsafe {
            kernels::fill(&k, self.device.raw_stream(), pat, &staged, d.ptr(), tables)?;
        }
        self.wait_copy(&format!(
            "filling {} elements on GPU {}",
            pat.elements(),
            self.device.ordinal()
        ))
    }
    fn check(&self, buf: &Buffer, pat: &Pattern) -> Result<Mismatch> {
        let d = self.device_buffer(buf)?;
        kernels::check_bounds(pat, d.len())?;
        if pat.elements() == 0 {
            return Ok(Mismatch::default());
        }
        self.alive("checking a buffer on the GPU")?;
        self.device.bind()?;
        let k = self.kernels()?;
        let staged = kernels::stage(pat, true);
        let dev = self.stage_tables(&staged.bytes)?;
        // SAFETY: as in `fill`; the counters are the first COUNTERS u64s of `dev`.
        unsafe {
            kernels::check(&k, self.device.raw_stream(), pat, &staged, d.ptr(), dev)?;
        }
        let mut counters = [0u64; COUNTERS];
        let mut raw = [0u8; COUNTERS * 8];
        // SAFETY: `dev` starts with COUNTERS u64s (stage); the copy is ordered after
        // the check kernels on the stream and lands in a live host array.
        unsafe { result::memcpy_dtoh_async(&mut raw[..], dev, self.device.raw_stream()) }
            .map_err(|e| cuda_error("copying check counters from the GPU", e))?;
        self.wait_copy(&format!(
            "checking {} elements on GPU {}",
            pat.elements(),
            self.device.ordinal()
        ))?;
        for (c, b) in counters.iter_mut().zip(raw.chunks_exact(8)) {
            *c = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        }
        Ok(kernels::mismatch(&counters))
    }
    fn memory(&self) -> Memory {
        Memory::Gpu(self.device.ordinal())
    }
    unsafe fn borrow(&self, addr: usize, bytes: usize) -> Result<Buffer> {
        if addr == 0 || addr % 8 != 0 {
            bail!("cannot borrow GPU memory at {addr:#x}: null or not 8-byte aligned");
        }
        // SAFETY: the caller's promise (Backend::borrow): device memory of this
        // backend's GPU, which shares the primary context with libtorch.
        Ok(Buffer::Device(unsafe {
            DeviceBuffer::borrowed(&self.device, addr as sys::CUdeviceptr, bytes)
        }))
    }
    fn reduce_scatter_in_place_offset(&self, chunk_bytes: usize) -> usize {
        self.rank * chunk_bytes
    }
    fn run_timed(
        &self,
        call: &Call,
        bufs: Bufs<'_>,
        iters: usize,
        ctx: &WaitCtx,
    ) -> Result<Vec<f64>> {
        self.alive(&ctx.what)?;
        if call.root >= self.size {
            bail!(
                "{}: root {} is not a rank of this {}-rank group",
                ctx.what,
                call.root,
                self.size
            );
        }
        if iters == 0 {
            return Ok(Vec::new());
        }
        self.device.bind()?;
        let ptrs = self.plan_ptrs(call, &bufs)?;
        let borrowed = match &bufs {
            Bufs::OutOfPlace { send, recv } => is_borrowed(send) || is_borrowed(recv),
            Bufs::InPlace(b) => is_borrowed(b),
        };
        // Two timing events per iteration, and one more to order after libtorch.
        self.ensure_events(2 * iters + 1)?;
        let events = self.events.borrow();
        if borrowed {
            // SAFETY: events[2·iters] exists (ensure_events) and lives until Drop.
            unsafe { self.device.wait_for_default_stream(events[2 * iters]) }
                .map_err(|e| cuda_error("ordering the collective after libtorch's work", e))?;
        }
        let since = Instant::now();
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline + BACKSTOP);
        for i in 0..iters {
            // SAFETY: events[0..2·iters] exist (ensure_events) and live until Drop.
            unsafe { self.device.record(events[2 * i]) }
                .map_err(|e| cuda_error("recording a timing event", e))?;
            self.launch(call, ptrs, ctx, since)?;
            // SAFETY: as above.
            unsafe { self.device.record(events[2 * i + 1]) }
                .map_err(|e| cuda_error("recording a timing event", e))?;
            if ctx.barrier {
                // --timing osu: every rank's call is done before any starts the next.
                self.wait(Until::StreamIdle, &ctx.what, ctx.deadline, since)?;
                self.control().barrier();
            }
        }
        self.wait(Until::StreamIdle, &ctx.what, ctx.deadline, since)?;
        let mut times = Vec::with_capacity(iters);
        for i in 0..iters {
            // SAFETY: both events were recorded on this stream in this batch and the
            // stream is idle, so they have completed.
            let ms = unsafe { self.device.elapsed_ms(events[2 * i], events[2 * i + 1]) }
                .map_err(|e| cuda_error("reading a timing event", e))?;
            times.push(f64::from(ms) / 1e3);
        }
        Ok(times)
    }
    fn run_group(
        &self,
        ops: &[P2p],
        send: &Buffer,
        recv: &mut Buffer,
        ctx: &WaitCtx,
    ) -> Result<f64> {
        self.alive(&ctx.what)?;
        let (s, r) = (self.device_buffer(send)?, self.device_buffer(recv)?);
        crate::backend::group_call(ops, s.len(), r.len())?;
        if let Some(bad) = ops.iter().find_map(|op| match *op {
            P2p::Send { peer, .. } | P2p::Recv { peer, .. } => (peer >= self.size).then_some(peer),
        }) {
            bail!(
                "{}: peer {bad} is not a rank of this {}-rank group",
                ctx.what,
                self.size
            );
        }
        self.device.bind()?;
        self.ensure_events(2)?;
        let events = self.events.borrow();
        let since = Instant::now();
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline + BACKSTOP);
        let mut x = NcclCall {
            be: self,
            p: Ptrs {
                send: s.ptr(),
                recv: r.ptr(),
                snapshot: None,
            },
            dt: nccl_dtype(Dtype::U8),
            op: nccl_op(RedOp::Sum),
            es: 1,
            ctx,
            since,
        };
        // SAFETY: events[0..2] exist (ensure_events) and live until Drop.
        unsafe { self.device.record(events[0]) }
            .map_err(|e| cuda_error("recording a timing event", e))?;
        // group_call checked every transfer lies inside its device buffer on this GPU.
        x.group(ops)?;
        // SAFETY: as above.
        unsafe { self.device.record(events[1]) }
            .map_err(|e| cuda_error("recording a timing event", e))?;
        self.wait(Until::StreamIdle, &ctx.what, ctx.deadline, since)?;
        // SAFETY: both events were recorded on this stream and the stream is idle.
        let ms = unsafe { self.device.elapsed_ms(events[0], events[1]) }
            .map_err(|e| cuda_error("reading a timing event", e))?;
        Ok(f64::from(ms) / 1e3)
    }
    fn run_colls(&self, calls: &mut [(&Call, &Buffer, &mut Buffer)], ctx: &WaitCtx) -> Result<f64> {
        self.alive(&ctx.what)?;
        self.device.bind()?;
        let mut ptrs = Vec::with_capacity(calls.len());
        for (call, send, recv) in calls.iter_mut() {
            if call.root >= self.size {
                bail!(
                    "{}: root {} is not a rank of this {}-rank group",
                    ctx.what,
                    call.root,
                    self.size
                );
            }
            let bufs = Bufs::OutOfPlace { send, recv };
            ptrs.push(self.plan_ptrs(call, &bufs)?);
        }
        self.ensure_events(2)?;
        let events = self.events.borrow();
        let since = Instant::now();
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline + BACKSTOP);
        // SAFETY: events[0..2] exist (ensure_events) and live until Drop.
        unsafe { self.device.record(events[0]) }
            .map_err(|e| cuda_error("recording a timing event", e))?;
        // SAFETY: opens a group, closed below on every path.
        let rc = unsafe { (self.lib.group_start)() };
        if rc != NCCL_SUCCESS {
            return Err(self.fail(&ctx.what, since, Failure::Nccl(rc)));
        }
        // plan_ptrs checked each call's buffers, as run_timed does; a call that fails
        // stops the rest, and the group is closed either way.
        let launched: Result<()> = calls
            .iter()
            .zip(&ptrs)
            .try_for_each(|((call, _, _), p)| self.launch(call, *p, ctx, since));
        // SAFETY: closes the group opened above.
        let end = unsafe { (self.lib.group_end)() };
        launched?;
        self.queued(end, &ctx.what, ctx, since)?;
        // SAFETY: as above.
        unsafe { self.device.record(events[1]) }
            .map_err(|e| cuda_error("recording a timing event", e))?;
        self.wait(Until::StreamIdle, &ctx.what, ctx.deadline, since)?;
        // SAFETY: both events were recorded on this stream and the stream is idle.
        let ms = unsafe { self.device.elapsed_ms(events[0], events[1]) }
            .map_err(|e| cuda_error("reading a timing event", e))?;
        Ok(f64::from(ms) / 1e3)
    }
    fn describe(&self) -> String {
        let g = &self.device.info;
        format!(
            "NCCL {} on GPU {} {} (PCI {})",
            self.lib.version, g.index, g.name, g.pci_bus_id
        )
    }
    fn pci_bus_id(&self) -> Option<String> {
        Some(self.device.info.pci_bus_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_spin_for_a_millisecond_then_back_off() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        assert_eq!(pause(Duration::ZERO), None);
        assert_eq!(pause(us(999)), None);
        assert_eq!(pause(ms(1)), Some(us(50)));
        assert_eq!(pause(ms(99)), Some(us(50)));
        assert_eq!(pause(ms(100)), Some(ms(1)));
        assert_eq!(pause(Duration::from_secs(3600)), Some(ms(1)));
    }

    #[test]
    fn every_dtype_and_op_has_an_nccl_value() {
        let d: Vec<c_int> = Dtype::ALL.iter().map(|d| nccl_dtype(*d)).collect();
        assert_eq!(d, vec![7, 8, 6, 9, 2, 1]);
        let o: Vec<c_int> = RedOp::ALL.iter().map(|o| nccl_op(*o)).collect();
        assert_eq!(o, vec![0, 1, 2, 3, 4]);
    }
}
