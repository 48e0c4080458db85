//! The MPI backend: collectives on host memory through the raw MPI C API.
//!
//! The raw API (rsmpi's `ffi`) is used rather than rsmpi's typed wrappers because a
//! sweep handles untyped byte buffers with a run-time element type, and needs
//! `MPI_IN_PLACE`, which rsmpi does not expose. All `unsafe` of this backend is in
//! [`MpiBackend::launch`]; its invariants are written there.
use super::{
    Backend, BackendKind, Buffer, Bufs, Call, CollKind, Dtype, HostBuffer, Memory, RedOp, WaitCtx,
};
use crate::collective::pattern::{self, Mismatch, Pattern};
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

    /// One collective call, blocking until this rank's part is complete.
    fn launch(&self, call: &Call, send: *const u8, recv: *mut u8) -> Result<()> {
        let Some(dt) = Self::datatype(call.dtype) else {
            bail!(
                "the mpi backend has no {} (use --backend nccl, or -d f32,f64,i32,u8)",
                call.dtype
            )
        };
        let n = self.size;
        let count = call.count;
        let chunk = count / n;
        let esize = call.dtype.size();
        let op = Self::mpi_op(call.op);
        let comm = self.comm.as_raw();
        let root = call.root as i32;
        let ip = self.in_place;
        // In-place: the send argument is MPI_IN_PLACE and the data is in `recv`.
        let sendp = |out_of_place: *const u8| -> *const c_void {
            if call.in_place {
                ip
            } else {
                out_of_place.cast()
            }
        };
        let recvp: *mut c_void = recv.cast();
        // SAFETY (every call below): the caller (run_timed) sized `send` and `recv` from
        // the collective table for this exact call: send ≥ send-count × esize bytes and
        // recv ≥ recv-count × esize bytes (for in-place, recv is the one buffer of
        // max(send, recv) bytes and send == recv). The buffers outlive the call, which
        // is blocking, and no other reference to them is used meanwhile. Counts fit an
        // i32 (checked when the sweep is planned). `comm` is a live communicator.
        let rc = unsafe {
            match call.kind {
                CollKind::AllReduce => {
                    ffi::MPI_Allreduce(sendp(send), recvp, count as i32, dt, op, comm)
                }
                CollKind::AllGather => ffi::MPI_Allgather(
                    if call.in_place { ip } else { send.cast() },
                    chunk as i32,
                    dt,
                    recvp,
                    chunk as i32,
                    dt,
                    comm,
                ),
                CollKind::ReduceScatter => {
                    ffi::MPI_Reduce_scatter_block(sendp(send), recvp, chunk as i32, dt, op, comm)
                }
                CollKind::Broadcast => {
                    if !call.in_place && self.rank == call.root {
                        std::ptr::copy_nonoverlapping(send, recv, count * esize);
                    }
                    ffi::MPI_Bcast(recvp, count as i32, dt, root, comm)
                }
                CollKind::Reduce => {
                    // Only the root may pass MPI_IN_PLACE; the others send their data.
                    let s = if call.in_place && self.rank != call.root {
                        recv.cast_const().cast()
                    } else {
                        sendp(send)
                    };
                    ffi::MPI_Reduce(s, recvp, count as i32, dt, op, root, comm)
                }
                CollKind::AllToAll => {
                    ffi::MPI_Alltoall(sendp(send), chunk as i32, dt, recvp, chunk as i32, dt, comm)
                }
                CollKind::SendRecv => {
                    let to = ((self.rank + 1) % n) as i32;
                    let from = ((self.rank + n - 1) % n) as i32;
                    if call.in_place {
                        ffi::MPI_Sendrecv_replace(
                            recvp,
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
                            send.cast(),
                            count as i32,
                            dt,
                            to,
                            7,
                            recvp,
                            count as i32,
                            dt,
                            from,
                            7,
                            comm,
                            ffi::RSMPI_STATUS_IGNORE,
                        )
                    }
                }
            }
        };
        if rc != 0 {
            bail!("MPI error {rc} in {}", call.describe());
        }
        if call.op == RedOp::Avg && call.kind.reduces() {
            let out_elems = match call.kind {
                CollKind::ReduceScatter => chunk,
                _ => count,
            };
            if call.kind != CollKind::Reduce || self.rank == call.root {
                // SAFETY: recv holds out_elems elements of dtype (see above), aligned
                // for the type because HostBuffer is at least 64-byte aligned.
                unsafe { divide_in_place(recv, out_elems, call.dtype, n) };
            }
        }
        Ok(())
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
        let (send, recv): (*const u8, *mut u8) = match bufs {
            Bufs::OutOfPlace { send, recv } => (
                host(send)?.as_bytes().as_ptr(),
                host_mut(recv)?.as_bytes_mut().as_mut_ptr(),
            ),
            Bufs::InPlace(buf) => {
                let p = host_mut(buf)?.as_bytes_mut().as_mut_ptr();
                (p.cast_const(), p)
            }
        };
        let mut times = Vec::with_capacity(iters);
        let _guard = self.watchdog.arm(&ctx.what, ctx.deadline);
        for _ in 0..iters {
            let t0 = Instant::now();
            self.launch(call, send, recv)?;
            times.push(t0.elapsed().as_secs_f64());
        }
        Ok(times)
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
