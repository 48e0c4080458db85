//! The MPI backend: collectives on host memory through the raw MPI C API.
//!
//! The raw API (rsmpi's `ffi`) is used rather than rsmpi's typed wrappers because a
//! sweep handles untyped byte buffers with a run-time element type, and needs
//! `MPI_IN_PLACE`, which rsmpi does not expose. All `unsafe` of this backend's calls
//! is in `MpiCall`, its implementation of the collectives' primitives; its invariants
//! are written there.
use super::{
    Backend, BackendKind, BufLens, Buffer, Bufs, Call, Dtype, HostBuffer, Memory, RedOp, WaitCtx,
};
use crate::collective::pattern::{self, Mismatch, Pattern};
use crate::collective::{P2p, Prims};
use crate::watchdog::Watchdog;
use anyhow::{bail, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

pub struct MpiBackend {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    in_place: *mut c_void,
    watchdog: Arc<Watchdog>,
}

/// The value of `MPI_IN_PLACE` in the MPI library we run on. It is a macro in
/// `mpi.h`, not a symbol: Open MPI defines it as `(void *) 1`, MPICH and its
/// derivatives (Intel MPI, Cray MPICH, MVAPICH) as `(void *) -1`.
pub fn mpi_in_place_for(library_version: &str) -> Option<*mut c_void> {
    if library_version.contains("Open MPI") {
        Some(1usize as *mut c_void)
    } else if library_version.contains("MPICH") || library_version.contains("Intel(R) MPI") {
        Some(usize::MAX as *mut c_void)
    } else {
        None
    }
}

impl MpiBackend {
    /// A backend over `comm` (the world or a tier's group).
    pub fn new(comm: SimpleCommunicator, watchdog: Arc<Watchdog>) -> Result<MpiBackend> {
        let version = mpi::environment::library_version().unwrap_or_default();
        let Some(in_place) = mpi_in_place_for(&version) else {
            bail!("unknown MPI library ({version}); burnin knows Open MPI and MPICH-based MPIs")
        };
        Ok(MpiBackend {
            rank: comm.rank() as usize,
            size: comm.size() as usize,
            comm,
            in_place,
            watchdog,
        })
    }

    fn datatype(dtype: Dtype) -> Option<ffi::MPI_Datatype> {
        // SAFETY: reading rsmpi's extern constants, initialised by the C library.
        unsafe {
            Some(match dtype {
                Dtype::F32 => ffi::RSMPI_FLOAT,
                Dtype::F64 => ffi::RSMPI_DOUBLE,
                Dtype::I32 => ffi::RSMPI_INT32_T,
                Dtype::U8 => ffi::RSMPI_UINT8_T,
                Dtype::F16 | Dtype::Bf16 => return None,
            })
        }
    }

    fn mpi_op(op: RedOp) -> ffi::MPI_Op {
        // SAFETY: as above. Avg is a sum followed by a division (MPI has no average).
        unsafe {
            match op {
                RedOp::Sum | RedOp::Avg => ffi::RSMPI_SUM,
                RedOp::Prod => ffi::RSMPI_PROD,
                RedOp::Max => ffi::RSMPI_MAX,
                RedOp::Min => ffi::RSMPI_MIN,
            }
        }
    }

    /// One collective call, blocking until this rank's part is complete: the
    /// collective's launch on [`MpiCall`]'s primitives.
    fn launch(&self, call: &Call, at: Addrs) -> Result<()> {
        let Some(dt) = Self::datatype(call.dtype) else {
            bail!(
                "the mpi backend has no {} (use --backend nccl, or -d f32,f64,i32,u8)",
                call.dtype
            )
        };
        let mut x = MpiCall {
            be: self,
            call,
            dt,
            at,
        };
        crate::collective::get(call.kind).launch(&mut x, &call.params(self.size), self.rank)
    }
}

/// Host addresses of one call: its input and output (in place, in one buffer).
#[derive(Clone, Copy)]
struct Addrs {
    send: *mut u8,
    recv: *mut u8,
    in_place: bool,
}

/// The signature `MPI_Allgather` and `MPI_Alltoall` share.
type PerRank = unsafe extern "C" fn(
    *const c_void,
    i32,
    ffi::MPI_Datatype,
    *mut c_void,
    i32,
    ffi::MPI_Datatype,
    ffi::MPI_Comm,
) -> i32;

/// The primitives on one call of an [`MpiBackend`]: the MPI collectives.
///
/// SAFETY (every MPI call of this impl): run_timed laid the call out on its host
/// buffers with `Call::place`, which checked that they hold what the collective table
/// says this call reads and writes on this rank (for in-place, one buffer holds the
/// larger of the two). The buffers outlive the calls, which are blocking, and no other
/// reference to them is used meanwhile. Counts fit an i32 (checked when the sweep is
/// planned); roots and peers are ranks of the group. `comm` is a live communicator.
struct MpiCall<'a> {
    be: &'a MpiBackend,
    call: &'a Call,
    dt: ffi::MPI_Datatype,
    at: Addrs,
}

impl MpiCall<'_> {
    /// The send argument: `MPI_IN_PLACE` in place (the data is in the output).
    fn sendp(&self) -> *const c_void {
        if self.at.in_place {
            self.be.in_place
        } else {
            self.at.send.cast_const().cast()
        }
    }
    fn recvp(&self) -> *mut c_void {
        self.at.recv.cast()
    }
    fn op(&self) -> ffi::MPI_Op {
        MpiBackend::mpi_op(self.call.op)
    }
    fn comm(&self) -> ffi::MPI_Comm {
        self.be.comm.as_raw()
    }
    /// An MPI return code as a result.
    fn done(&self, rc: i32) -> Result<()> {
        if rc != 0 {
            bail!("MPI error {rc} in {}", self.call.describe());
        }
        Ok(())
    }
    /// `MPI_Allgather` or `MPI_Alltoall` (the same arguments), `chunk` elements per
    /// rank.
    fn per_rank(&self, mpi: PerRank, chunk: usize) -> Result<()> {
        // SAFETY: see MpiCall.
        let rc = unsafe {
            mpi(
                self.sendp(),
                chunk as i32,
                self.dt,
                self.recvp(),
                chunk as i32,
                self.dt,
                self.comm(),
            )
        };
        self.done(rc)
    }
    /// Avg is a sum followed by a division (MPI has no average): divide the `elems`
    /// result elements at `out`.
    fn average(&self, out: *mut u8, elems: usize) {
        if self.call.op == RedOp::Avg {
            // SAFETY: `out` holds the call's `elems` result elements of its dtype
            // (Call::place), aligned for the type because HostBuffer is at least
            // 64-byte aligned and offsets are whole elements.
            unsafe { divide_in_place(out, elems, self.call.dtype, self.be.size) };
        }
    }
}

impl Prims for MpiCall<'_> {
    fn ranks(&self) -> usize {
        self.be.size
    }
    fn all_reduce(&mut self, count: usize) -> Result<()> {
        // SAFETY: see MpiCall.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                self.sendp(),
                self.recvp(),
                count as i32,
                self.dt,
                self.op(),
                self.comm(),
            )
        };
        self.done(rc)?;
        self.average(self.at.recv, count);
        Ok(())
    }
    fn all_gather(&mut self, chunk: usize) -> Result<()> {
        // In place the output starts the buffer, where MPI_IN_PLACE finds this rank's
        // chunk at its place.
        self.per_rank(ffi::MPI_Allgather, chunk)
    }
    fn reduce_scatter(&mut self, chunk: usize) -> Result<()> {
        // In place, MPI reads the whole input and leaves this rank's chunk at its
        // start (reduce_scatter_in_place_offset), not at the collective's output.
        let out = if self.at.in_place {
            self.at.send
        } else {
            self.at.recv
        };
        // SAFETY: see MpiCall.
        let rc = unsafe {
            ffi::MPI_Reduce_scatter_block(
                self.sendp(),
                out.cast(),
                chunk as i32,
                self.dt,
                self.op(),
                self.comm(),
            )
        };
        self.done(rc)?;
        self.average(out, chunk);
        Ok(())
    }
    fn broadcast(&mut self, count: usize, root: usize) -> Result<()> {
        let is_root = self.be.rank == root;
        // SAFETY: see MpiCall; out of place the root's two buffers are distinct.
        let rc = unsafe {
            if !self.at.in_place && is_root {
                let bytes = count * self.call.dtype.size();
                std::ptr::copy_nonoverlapping(self.at.send, self.at.recv, bytes);
            }
            ffi::MPI_Bcast(
                self.recvp(),
                count as i32,
                self.dt,
                root as i32,
                self.comm(),
            )
        };
        self.done(rc)
    }
    fn reduce(&mut self, count: usize, root: usize) -> Result<()> {
        let is_root = self.be.rank == root;
        // Only the root may pass MPI_IN_PLACE; the others send their data.
        let s = if self.at.in_place && !is_root {
            self.at.recv.cast_const().cast()
        } else {
            self.sendp()
        };
        // SAFETY: see MpiCall.
        let rc = unsafe {
            ffi::MPI_Reduce(
                s,
                self.recvp(),
                count as i32,
                self.dt,
                self.op(),
                root as i32,
                self.comm(),
            )
        };
        self.done(rc)?;
        if is_root {
            self.average(self.at.recv, count);
        }
        Ok(())
    }
    fn all_to_all(&mut self, chunk: usize) -> Result<()> {
        self.per_rank(ffi::MPI_Alltoall, chunk)
    }
    fn send_recv(&mut self, count: usize, to: usize, from: usize) -> Result<()> {
        let (dt, comm) = (self.dt, self.comm());
        let (to, from) = (to as i32, from as i32);
        // SAFETY: see MpiCall.
        let rc = unsafe {
            if self.at.in_place {
                ffi::MPI_Sendrecv_replace(
                    self.recvp(),
                    count as i32,
                    dt,
                    to,
                    7,
                    from,
                    7,
                    comm,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            } else {
                ffi::MPI_Sendrecv(
                    self.at.send.cast_const().cast(),
                    count as i32,
                    dt,
                    to,
                    7,
                    self.recvp(),
                    count as i32,
                    dt,
                    from,
                    7,
                    comm,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            }
        };
        self.done(rc)
    }
    fn group(&mut self, ops: &[P2p]) -> Result<()> {
        let es = self.call.dtype.size();
        let (dt, comm) = (self.dt, self.comm());
        // SAFETY: reading rsmpi's extern constant, initialised by the C library.
        let mut reqs = vec![unsafe { ffi::RSMPI_REQUEST_NULL }; ops.len()];
        let mut rc = 0;
        for (op, req) in ops.iter().zip(reqs.iter_mut()) {
            // SAFETY: see MpiCall; `at + count` lies inside the input or output (the
            // collective's layout), and every request is waited for below.
            rc = unsafe {
                match *op {
                    P2p::Send { peer, at, count } => ffi::MPI_Isend(
                        self.at.send.add(at * es).cast_const().cast(),
                        count as i32,
                        dt,
                        peer as i32,
                        7,
                        comm,
                        req,
                    ),
                    P2p::Recv { peer, at, count } => ffi::MPI_Irecv(
                        self.at.recv.add(at * es).cast(),
                        count as i32,
                        dt,
                        peer as i32,
                        7,
                        comm,
                        req,
                    ),
                }
            };
            if rc != 0 {
                break;
            }
        }
        // SAFETY: the requests started above (the rest are MPI_REQUEST_NULL).
        let waited = unsafe {
            ffi::MPI_Waitall(
                reqs.len() as i32,
                reqs.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        self.done(if rc != 0 { rc } else { waited })
    }
}

/// Divide `elems` elements of `dtype` at `ptr` by `n` (integer types truncate, like
/// NCCL's ncclAvg on integers).
///
/// # Safety
/// `ptr` must point to `elems` initialised, aligned elements of `dtype`.
unsafe fn divide_in_place(ptr: *mut u8, elems: usize, dtype: Dtype, n: usize) {
    match dtype {
        Dtype::F32 => std::slice::from_raw_parts_mut(ptr.cast::<f32>(), elems)
            .iter_mut()
            .for_each(|v| *v /= n as f32),
        Dtype::F64 => std::slice::from_raw_parts_mut(ptr.cast::<f64>(), elems)
            .iter_mut()
            .for_each(|v| *v /= n as f64),
        Dtype::I32 => std::slice::from_raw_parts_mut(ptr.cast::<i32>(), elems)
            .iter_mut()
            .for_each(|v| *v /= n as i32),
        Dtype::U8 => std::slice::from_raw_parts_mut(ptr, elems)
            .iter_mut()
            .for_each(|v| *v /= n as u8),
        Dtype::F16 | Dtype::Bf16 => {}
    }
}

fn host(buf: &Buffer) -> Result<&HostBuffer> {
    match buf {
        Buffer::Host(h) => Ok(h),
        Buffer::Device(_) => bail!("the mpi backend was given a device buffer"),
    }
}

fn host_mut(buf: &mut Buffer) -> Result<&mut HostBuffer> {
    match buf {
        Buffer::Host(h) => Ok(h),
        Buffer::Device(_) => bail!("the mpi backend was given a device buffer"),
    }
}

impl Backend for MpiBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Mpi
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
    fn supports(&self, dtype: Dtype, _op: Option<RedOp>) -> bool {
        Self::datatype(dtype).is_some()
    }
    fn alloc(&self, bytes: usize) -> Result<Buffer> {
        Ok(Buffer::Host(HostBuffer::new(bytes)?))
    }
    fn upload(&self, buf: &mut Buffer, src: &[u8]) -> Result<()> {
        let h = host_mut(buf)?;
        if src.len() > h.len {
            bail!("upload of {} bytes into a {}-byte buffer", src.len(), h.len);
        }
        h.as_bytes_mut()[..src.len()].copy_from_slice(src);
        Ok(())
    }
    fn download(&self, buf: &Buffer, dst: &mut [u8]) -> Result<()> {
        let h = host(buf)?;
        if dst.len() > h.len {
            bail!(
                "download of {} bytes from a {}-byte buffer",
                dst.len(),
                h.len
            );
        }
        dst.copy_from_slice(&h.as_bytes()[..dst.len()]);
        Ok(())
    }
    fn fill(&self, buf: &mut Buffer, pat: &Pattern) -> Result<()> {
        pattern::fill_host(pat, host_mut(buf)?.as_bytes_mut())
    }
    fn check(&self, buf: &Buffer, pat: &Pattern) -> Result<Mismatch> {
        pattern::check_host(pat, host(buf)?.as_bytes())
    }
    fn memory(&self) -> Memory {
        Memory::Host
    }
    unsafe fn borrow(&self, addr: usize, bytes: usize) -> Result<Buffer> {
        let ptr = std::ptr::NonNull::new(addr as *mut u8)
            .ok_or_else(|| anyhow::anyhow!("cannot borrow a buffer at address 0"))?;
        if addr % 8 != 0 {
            bail!("cannot borrow a buffer at {addr:#x}: not 8-byte aligned");
        }
        // SAFETY: the caller's promise (Backend::borrow) is HostBuffer::borrowed's.
        Ok(Buffer::Host(unsafe { HostBuffer::borrowed(ptr, bytes) }))
    }
    fn reduce_scatter_in_place_offset(&self, _chunk_bytes: usize) -> usize {
        0
    }
    fn run_timed(
        &self,
        call: &Call,
        bufs: Bufs<'_>,
        iters: usize,
        ctx: &WaitCtx,
    ) -> Result<Vec<f64>> {
        let (send, recv, have) = match bufs {
            Bufs::OutOfPlace { send, recv } => {
                let (s, r) = (host(send)?, host_mut(recv)?);
                let have = BufLens::OutOfPlace {
                    send: s.len,
                    recv: r.len,
                };
                let s = s.as_bytes().as_ptr().cast_mut();
                (s, r.as_bytes_mut().as_mut_ptr(), have)
            }
            Bufs::InPlace(buf) => {
                let b = host_mut(buf)?;
                let have = BufLens::InPlace(b.len);
                let p = b.as_bytes_mut().as_mut_ptr();
                (p, p, have)
            }
        };
        let place = call.place(self.rank, self.size, have)?;
        // SAFETY: Call::place checked the offsets lie inside the buffers.
        let at = unsafe {
            Addrs {
                send: send.add(place.send_at),
                recv: recv.add(place.recv_at),
                in_place: call.in_place,
            }
        };
        let mut times = Vec::with_capacity(iters);
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline);
        for _ in 0..iters {
            let t0 = Instant::now();
            self.launch(call, at)?;
            times.push(t0.elapsed().as_secs_f64());
            if ctx.barrier {
                // SAFETY: `comm` is a live communicator of this group.
                let rc = unsafe { ffi::MPI_Barrier(self.comm.as_raw()) };
                if rc != 0 {
                    bail!("MPI error {rc} in the barrier after {}", call.describe());
                }
            }
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
        let (s, r) = (host(send)?, host_mut(recv)?);
        let call = super::group_call(ops, s.len, r.len)?;
        if let Some(big) = ops.iter().find_map(|op| match *op {
            P2p::Send { count, .. } | P2p::Recv { count, .. } => {
                (i32::try_from(count).is_err()).then_some(count)
            }
        }) {
            bail!(
                "{}: a transfer of {big} bytes is more than MPI's int count (use --backend nccl)",
                ctx.what
            );
        }
        let Some(dt) = Self::datatype(Dtype::U8) else {
            bail!("the mpi backend has no u8")
        };
        let mut x = MpiCall {
            be: self,
            call: &call,
            dt,
            // group_call checked every transfer lies inside its buffer.
            at: Addrs {
                send: s.as_bytes().as_ptr().cast_mut(),
                recv: r.as_bytes_mut().as_mut_ptr(),
                in_place: false,
            },
        };
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline);
        let t0 = Instant::now();
        x.group(ops)?;
        Ok(t0.elapsed().as_secs_f64())
    }
    fn describe(&self) -> String {
        crate::world::mpi_version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_constant_per_library() {
        assert_eq!(
            mpi_in_place_for("Open MPI v4.1.4, package: Debian"),
            Some(1usize as *mut c_void)
        );
        assert_eq!(
            mpi_in_place_for("MPICH Version: 4.0.2"),
            Some(usize::MAX as *mut c_void)
        );
        assert_eq!(mpi_in_place_for("Something MPI 1.0"), None);
    }

    #[test]
    fn average_divides_each_type() {
        let mut f = [4.0f32, 8.0];
        unsafe { divide_in_place(f.as_mut_ptr().cast(), 2, Dtype::F32, 4) };
        assert_eq!(f, [1.0, 2.0]);
        let mut i = [9i32, -9];
        unsafe { divide_in_place(i.as_mut_ptr().cast(), 2, Dtype::I32, 4) };
        assert_eq!(i, [2, -2]);
    }
}
