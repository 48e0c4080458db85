//! The CUDA side of the NCCL backend: one GPU's context and stream, device memory and
//! timing events, through cudarc's driver layer.
//!
//! Memory is raw `cuMemAlloc` rather than cudarc's `CudaSlice`: NCCL takes raw
//! pointers, in-place calls need offsets into a buffer, and cudarc's slices record
//! synchronisation events behind the caller's back. Copies go on the backend's stream
//! and are waited for by polling (never a blocking `cuStreamSynchronize`, which could
//! wait forever behind a hung collective).
//!
//! After a communicator is aborted the GPU may still be running kernels that will
//! never finish; the device is then *poisoned*: memory, the stream and the context
//! are deliberately leaked rather than freed (freeing could block behind those
//! kernels). The process is about to report the error and exit anyway.
use crate::gpu::{self, GpuInfo};
use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A CUDA error with what burnin was doing.
pub fn cuda_error(doing: &str, e: DriverError) -> anyhow::Error {
    anyhow::anyhow!("CUDA error while {doing}: {}", gpu::driver_error_text(e))
}

/// One GPU, its primary context and the stream all of a backend's work goes on.
pub struct Device {
    ctx: ManuallyDrop<Arc<CudaContext>>,
    stream: ManuallyDrop<Arc<CudaStream>>,
    pub info: GpuInfo,
    poisoned: AtomicBool,
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.is_poisoned() {
            return; // leak: see the module header
        }
        // SAFETY: each field is dropped exactly once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.stream);
            ManuallyDrop::drop(&mut self.ctx);
        }
    }
}

/// Result of polling the stream.
pub enum StreamState {
    Idle,
    Busy,
}

impl Device {
    /// Open GPU `ordinal`: its primary context and a new non-blocking stream. The
    /// driver must have passed [`gpu::ready`] in this process (cudarc panics without
    /// libcuda, and may on a driver older than its bindings).
    pub fn open(ordinal: usize) -> anyhow::Result<Device> {
        let info = gpu::describe_device(ordinal).map_err(|e| anyhow::anyhow!(e))?;
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| cuda_error(&format!("creating a context on GPU {ordinal}"), e))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| cuda_error(&format!("creating a stream on GPU {ordinal}"), e))?;
        Ok(Device {
            ctx: ManuallyDrop::new(ctx),
            stream: ManuallyDrop::new(stream),
            info,
            poisoned: AtomicBool::new(false),
        })
    }

    pub fn ordinal(&self) -> usize {
        self.info.index
    }

    /// Make this GPU's context current on the calling thread (before any driver call).
    pub fn bind(&self) -> anyhow::Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_error("binding the CUDA context", e))
    }

    /// The context, as the raw handle the driver takes (peer access and copies).
    pub fn raw_ctx(&self) -> sys::CUcontext {
        self.ctx.cu_ctx()
    }

    /// The driver's device handle.
    pub fn raw_device(&self) -> sys::CUdevice {
        self.ctx.cu_device()
    }

    /// The stream, as the raw handle NCCL and the driver take.
    pub fn raw_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    pub fn poison(&self) {
        self.poisoned.store(true, Ordering::SeqCst);
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Whether everything queued on the stream has finished.
    pub fn query(&self) -> Result<StreamState, DriverError> {
        // SAFETY: the stream handle is owned by `self.stream`, alive while `self` is.
        let rc = unsafe { sys::cuStreamQuery(self.raw_stream()) };
        match rc {
            sys::CUresult::CUDA_SUCCESS => Ok(StreamState::Idle),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(StreamState::Busy),
            e => Err(DriverError(e)),
        }
    }

    /// Create `n` timing events (default flags: timing enabled).
    pub fn new_events(&self, n: usize) -> Result<Vec<sys::CUevent>, DriverError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT) {
                Ok(e) => out.push(e),
                Err(e) => {
                    self.destroy_events(&out);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Destroy events made by [`Device::new_events`] (errors ignored: teardown).
    pub fn destroy_events(&self, events: &[sys::CUevent]) {
        for &e in events {
            // SAFETY: each event was created by new_events on this context and is
            // destroyed once (callers drop their list after this). Destroying an
            // event whose work is pending does not block.
            let _ = unsafe { result::event::destroy(e) };
        }
    }

    /// Record `event` on the stream.
    ///
    /// # Safety
    /// `event` must come from [`Device::new_events`] and not be destroyed.
    pub unsafe fn record(&self, event: sys::CUevent) -> Result<(), DriverError> {
        result::event::record(event, self.raw_stream())
    }

    /// Make the backend's stream wait (on the GPU, not the host) for everything queued
    /// so far on the context's legacy default stream, where libtorch queues its work
    /// (PyTorch's default stream is the legacy NULL stream). The backend's stream is
    /// non-blocking, so without this a collective on a tensor's storage could start
    /// before libtorch has written it.
    ///
    /// # Safety
    /// `event` must come from [`Device::new_events`] and not be destroyed.
    pub unsafe fn wait_for_default_stream(&self, event: sys::CUevent) -> Result<(), DriverError> {
        // SAFETY: recording on the NULL stream is always valid; the caller vouches for
        // the event, which belongs to this context.
        unsafe {
            result::event::record(event, std::ptr::null_mut())?;
            result::stream::wait_event(
                self.raw_stream(),
                event,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
    }

    /// Milliseconds between two completed events.
    ///
    /// # Safety
    /// Both events must come from [`Device::new_events`], be recorded on this stream
    /// and have completed.
    pub unsafe fn elapsed_ms(
        &self,
        start: sys::CUevent,
        end: sys::CUevent,
    ) -> Result<f32, DriverError> {
        result::event::elapsed(start, end)
    }
}

/// Device memory of the NCCL backend: a raw `CUdeviceptr` of `len` bytes on one GPU,
/// freed on drop (unless its device was poisoned) when the backend allocated it, or
/// borrowed (a libtorch tensor's storage: see [`DeviceBuffer::borrowed`]).
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    device: Arc<Device>,
    /// Someone else's memory: not freed, and written by work on other streams.
    borrowed: bool,
}

impl DeviceBuffer {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device address (0 for an empty buffer).
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
    /// Whether this buffer lives on `device`.
    pub fn on(&self, device: &Arc<Device>) -> bool {
        Arc::ptr_eq(&self.device, device)
    }

    /// Allocate `len` bytes on `device`, zeroed (queued on the stream: wait for the
    /// stream before the first use from another stream).
    pub fn alloc(device: &Arc<Device>, len: usize) -> anyhow::Result<DeviceBuffer> {
        let mut buf = DeviceBuffer {
            ptr: 0,
            len: 0,
            device: Arc::clone(device),
            borrowed: false,
        };
        if len == 0 {
            return Ok(buf);
        }
        device.bind()?;
        // SAFETY: the device's context is current (bind above); cuMemAlloc returns a
        // fresh allocation of `len` bytes that this buffer owns from now on.
        buf.ptr = unsafe { result::malloc_sync(len) }.map_err(|e| {
            cuda_error(
                &format!(
                    "allocating {} on GPU {}",
                    crate::units::Bytes(len as u64),
                    device.ordinal()
                ),
                e,
            )
        })?;
        buf.len = len;
        // SAFETY: [ptr, ptr + len) is this buffer's allocation; the memset is ordered
        // on the device's stream before anything later queued there.
        unsafe { result::memset_d8_async(buf.ptr, 0, len, device.raw_stream()) }
            .map_err(|e| cuda_error("zeroing a new buffer", e))?;
        Ok(buf)
    }
}

impl DeviceBuffer {
    /// `len` bytes at `ptr` on `device`, owned by someone else (libtorch).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be device memory of `device`'s context that stays
    /// allocated while the buffer lives.
    pub unsafe fn borrowed(device: &Arc<Device>, ptr: sys::CUdeviceptr, len: usize) -> Self {
        DeviceBuffer {
            ptr,
            len,
            device: Arc::clone(device),
            borrowed: true,
        }
    }

    /// Whether the memory is someone else's (see [`DeviceBuffer::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.borrowed
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.len == 0 || self.borrowed || self.device.is_poisoned() {
            return;
        }
        if self.device.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in `alloc` and is freed once, here.
            // Every use of it was on the device's stream, which the backend waits for
            // before returning from any call; cuMemFree also synchronises the device.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}
