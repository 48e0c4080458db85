//! Data parallelism over burnin's own [`Backend`]: the gradients every rank computed
//! on its own batch are averaged with all-reduce, bucket by bucket, so every rank
//! applies the same update to the same weights.
//!
//! The gradients are seen as one flat f32 array (parameters in name order) cut into
//! buckets of `--bucket` bytes; a bucket may hold the tail of one parameter and the
//! head of the next. As PyTorch's DDP does, each bucket is one flat f32 tensor: per
//! step libtorch copies the gradients into it, the backend all-reduces its memory in
//! place with `RedOp::Avg`, and libtorch copies the averages back. The tensor lives
//! where the backend's buffers do ([`GradPath`]):
//!
//! - CUDA model, NCCL: on the GPU. NCCL reduces the tensor's device memory through
//!   its pointer, after the work libtorch queued on the default stream (the backend
//!   orders its stream after it), so the exchange crosses the fabric and nothing else;
//! - CPU model, MPI: in host memory, reduced there;
//! - CUDA model, MPI: in host memory (libtorch copies device → host and back);
//! - CPU model, NCCL: in host memory, uploaded to and downloaded from a device buffer.
//!
//! Buckets run one after another after the whole backward pass (no overlap with
//! compute yet). Each bucket's all-reduce time is recorded per step, and the parts of
//! the exchange ([`CommTimes`]) add up to its wall time.
//!
//! The `unsafe` of `burnin train`'s exchange: [`with_f32_bytes`] (a CPU f32 tensor's
//! memory as bytes) and the backend's borrow of a bucket tensor's storage.
use super::model::Model;
use anyhow::{bail, Context, Result};
use burnin::backend::{Backend, Buffer, Bufs, Call, Memory, WaitCtx};
use burnin::kinds::{CollKind, Dtype, RedOp};
pub use burnin::train::report::GradPath;

use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// A piece of one parameter inside a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Index of the parameter.
    pub param: usize,
    /// First element of the parameter in this piece.
    pub start: usize,
    /// Elements in this piece.
    pub len: usize,
    /// Element offset of the piece in the bucket.
    pub offset: usize,
}

/// Cut parameters of `sizes` elements into buckets of at most `bucket_elems`
/// elements. Pure; every rank computes the same plan.
pub fn plan_buckets(sizes: &[usize], bucket_elems: usize) -> Vec<Vec<Segment>> {
    let cap = bucket_elems.max(1);
    let mut buckets: Vec<Vec<Segment>> = Vec::new();
    let mut current: Vec<Segment> = Vec::new();
    let mut fill = 0usize;
    for (param, &size) in sizes.iter().enumerate() {
        let mut start = 0;
        while start < size {
            let len = (size - start).min(cap - fill);
            current.push(Segment {
                param,
                start,
                len,
                offset: fill,
            });
            start += len;
            fill += len;
            if fill == cap {
                buckets.push(std::mem::take(&mut current));
                fill = 0;
            }
        }
    }
    if !current.is_empty() {
        buckets.push(current);
    }
    buckets
}

/// View the memory of a defined, contiguous CPU f32 tensor as bytes for the length of
/// `f`, after checking exactly that.
pub fn with_f32_bytes<R>(t: &mut Tensor, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
    if !t.defined() {
        bail!("undefined tensor");
    }
    if t.device() != Device::Cpu {
        bail!("tensor is on {:?}, not the CPU", t.device());
    }
    let kind = t.f_kind()?;
    if kind != Kind::Float {
        bail!("tensor is {kind:?}, not f32");
    }
    if !t.is_contiguous() {
        bail!("tensor is not contiguous");
    }
    let bytes = t.numel() * 4;
    if bytes == 0 {
        return Ok(f(&mut []));
    }
    let ptr = t.data_ptr().cast::<u8>();
    if ptr.is_null() {
        bail!("tensor has no storage");
    }
    // SAFETY: checked above: the tensor is defined, on the CPU, of kind f32 and
    // contiguous, so its data_ptr() addresses numel() × 4 initialised bytes of one
    // allocation that lives as long as the tensor, which `t` keeps alive for the whole
    // call. We hold `&mut` of this handle; other handles sharing the storage (the
    // autograd graph's reference to a gradient) are not used meanwhile: libtorch's CPU
    // ops are synchronous and burnin runs no torch op on another thread.
    let slice = unsafe { std::slice::from_raw_parts_mut(ptr, bytes) };
    Ok(f(slice))
}

struct Bucket {
    segments: Vec<Segment>,
    elems: usize,
    /// The bucket's gradients as one flat f32 tensor (see the module header).
    flat: Tensor,
    /// The backend's view of `flat`'s memory, or (Uploaded) its own device buffer.
    buf: Buffer,
}

/// Per-step timings of the gradient exchange (this rank, seconds). Every part is
/// host time up to the work's completion, so the parts add up to the exchange's wall
/// time: on a CUDA model the device is synchronised after each bucket's pack copies
/// and after its unpack copies (libtorch queues them asynchronously; without the
/// wait their GPU time would land in the all-reduce's host wait and the optimizer).
#[derive(Clone, Debug, Default)]
pub struct CommTimes {
    /// Copying gradients into the buckets (and to the buckets' memory), done.
    pub pack_s: f64,
    /// The all-reduce calls themselves (sum over buckets; GPU: CUDA events around
    /// each on the backend's stream).
    pub allreduce_s: f64,
    /// Host time in the all-reduce calls beyond [`Self::allreduce_s`]: launching,
    /// ordering after libtorch's stream, waiting for completion.
    pub wait_s: f64,
    /// Copying the averages back into the gradients, done.
    pub unpack_s: f64,
    /// Each bucket's all-reduce call, as in [`Self::allreduce_s`].
    pub bucket_s: Vec<f64>,
}

impl CommTimes {
    pub fn total(&self) -> f64 {
        self.pack_s + self.allreduce_s + self.wait_s + self.unpack_s
    }
}

/// The gradient all-reducer of one model over one backend.
pub struct Ddp {
    buckets: Vec<Bucket>,
    path: GradPath,
    /// The model's CUDA device, whose queued copies each part waits for.
    cuda: Option<i64>,
    deadline: Duration,
    be: Box<dyn Backend>,
}

/// The flat tensors' device and the path, for a model on `model` and a backend whose
/// buffers live in `memory`.
pub fn placement(model: Device, memory: Memory) -> Result<(Device, GradPath)> {
    Ok(match (model, memory) {
        (Device::Cpu, Memory::Host) => (Device::Cpu, GradPath::Direct),
        (Device::Cuda(_), Memory::Host) => (Device::Cpu, GradPath::HostStaged),
        (Device::Cuda(i), Memory::Gpu(g)) if i == g => (model, GradPath::Direct),
        (Device::Cuda(i), Memory::Gpu(g)) => {
            bail!("the model is on GPU {i} but the NCCL backend uses GPU {g}")
        }
        (Device::Cpu, Memory::Gpu(_)) => (Device::Cpu, GradPath::Uploaded),
        (d, _) => bail!("burnin train runs on the CPU or CUDA, not {d:?}"),
    })
}

/// A contiguous f32 tensor's storage as (address, bytes), checked.
fn storage(t: &Tensor) -> Result<(usize, usize)> {
    if t.f_kind()? != Kind::Float || !t.is_contiguous() {
        bail!("a gradient bucket must be a contiguous f32 tensor");
    }
    Ok((t.data_ptr() as usize, t.numel() * 4))
}

impl Ddp {
    pub fn new(
        be: Box<dyn Backend>,
        model: &Model,
        bucket_bytes: u64,
        deadline: Duration,
    ) -> Result<Ddp> {
        if !be.supports(Dtype::F32, Some(RedOp::Avg)) {
            bail!("the {} backend cannot all-reduce f32 with avg", be.kind());
        }
        let (device, path) = placement(model.device, be.memory())?;
        let sizes: Vec<usize> = model.params.iter().map(|p| p.tensor.numel()).collect();
        let plan = plan_buckets(&sizes, (bucket_bytes / 4) as usize);
        let mut buckets = Vec::with_capacity(plan.len());
        for segments in plan {
            let elems: usize = segments.iter().map(|s| s.len).sum();
            let what = || format!("allocating a {}-byte gradient bucket", elems * 4);
            let flat = Tensor::f_zeros([elems as i64], (Kind::Float, device)).with_context(what)?;
            let buf = if path == GradPath::Uploaded {
                be.alloc(elems * 4).with_context(what)?
            } else {
                let (addr, bytes) = storage(&flat)?;
                // SAFETY: `flat` is a contiguous f32 tensor of `bytes` bytes on the
                // backend's memory (placement), allocated by libtorch (aligned), kept
                // in the same Bucket as the buffer and never resized; between calls
                // only libtorch's copies on the default stream touch it, which the
                // backend orders its calls after (Backend::borrow).
                unsafe { be.borrow(addr, bytes) }?
            };
            buckets.push(Bucket {
                segments,
                elems,
                flat,
                buf,
            });
        }
        let cuda = match model.device {
            Device::Cuda(i) => Some(i as i64),
            _ => None,
        };
        Ok(Ddp {
            buckets,
            path,
            cuda,
            deadline,
            be,
        })
    }

    pub fn backend(&self) -> &dyn Backend {
        self.be.as_ref()
    }

    /// Where the buckets are reduced.
    pub fn path(&self) -> GradPath {
        self.path
    }

    /// Deadline of each bucket's all-reduce from now on.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Each bucket's size in bytes, in exchange order.
    pub fn bucket_bytes(&self) -> Vec<u64> {
        self.buckets.iter().map(|b| b.elems as u64 * 4).collect()
    }

    /// Replace every parameter's gradient by its average over the ranks.
    pub fn average_gradients(&mut self, model: &Model, step: u64) -> Result<CommTimes> {
        let _guard = tch::no_grad_guard();
        let mut times = CommTimes::default();
        let t0 = Instant::now();
        // Flat views of the gradients (they share the gradients' storage).
        let mut grads = Vec::with_capacity(model.params.len());
        for p in &model.params {
            let g = p.tensor.f_grad()?;
            if !g.defined() {
                bail!("parameter {} has no gradient", p.name);
            }
            if !g.is_contiguous() {
                bail!("the gradient of parameter {} is not contiguous", p.name);
            }
            grads.push(g.f_view([-1])?);
        }
        times.pack_s += t0.elapsed().as_secs_f64();
        let n_buckets = self.buckets.len();
        for (i, b) in self.buckets.iter_mut().enumerate() {
            let t = Instant::now();
            for s in &b.segments {
                b.flat
                    .f_narrow(0, s.offset as i64, s.len as i64)?
                    .f_copy_(&grads[s.param].f_narrow(0, s.start as i64, s.len as i64)?)?;
            }
            if self.path == GradPath::Uploaded {
                let be = self.be.as_ref();
                let buf = &mut b.buf;
                with_f32_bytes(&mut b.flat, |mem| be.upload(buf, mem))??;
            }
            if let Some(d) = self.cuda {
                tch::Cuda::synchronize(d);
            }
            times.pack_s += t.elapsed().as_secs_f64();
            let call = Call {
                kind: CollKind::AllReduce,
                dtype: Dtype::F32,
                op: RedOp::Avg,
                root: 0,
                count: b.elems,
                in_place: true,
            };
            let ctx = WaitCtx {
                what: format!(
                    "gradient all-reduce of step {step}, bucket {}/{n_buckets} ({})",
                    i + 1,
                    call.describe()
                ),
                deadline: self.deadline,
                barrier: false,
            };
            let t = Instant::now();
            let took = self
                .be
                .run_timed(&call, Bufs::InPlace(&mut b.buf), 1, &ctx)?;
            let took: f64 = took.iter().sum();
            times.wait_s += (t.elapsed().as_secs_f64() - took).max(0.0);
            times.allreduce_s += took;
            times.bucket_s.push(took);
            let t = Instant::now();
            if self.path == GradPath::Uploaded {
                let be = self.be.as_ref();
                let buf = &b.buf;
                with_f32_bytes(&mut b.flat, |mem| be.download(buf, mem))??;
            }
            for s in &b.segments {
                grads[s.param]
                    .f_narrow(0, s.start as i64, s.len as i64)?
                    .f_copy_(&b.flat.f_narrow(0, s.offset as i64, s.len as i64)?)?;
            }
            if let Some(d) = self.cuda {
                tch::Cuda::synchronize(d);
            }
            times.unpack_s += t.elapsed().as_secs_f64();
        }
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burnin::backend::{BackendKind, HostBuffer};
    use burnin::collective::{Mismatch, Pattern};
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn buckets_live_where_the_backend_reduces() {
        let cuda1 = Device::Cuda(1);
        assert_eq!(
            placement(cuda1, Memory::Gpu(1)).unwrap(),
            (cuda1, GradPath::Direct)
        );
        assert_eq!(
            placement(Device::Cpu, Memory::Host).unwrap(),
            (Device::Cpu, GradPath::Direct)
        );
        assert_eq!(
            placement(cuda1, Memory::Host).unwrap(),
            (Device::Cpu, GradPath::HostStaged)
        );
        assert_eq!(
            placement(Device::Cpu, Memory::Gpu(0)).unwrap(),
            (Device::Cpu, GradPath::Uploaded)
        );
        let e = placement(cuda1, Memory::Gpu(0)).unwrap_err();
        assert!(
            e.to_string()
                .contains("GPU 1 but the NCCL backend uses GPU 0"),
            "{e}"
        );
    }

    /// What the backend saw of the exchange.
    #[derive(Default)]
    struct Seen {
        uploads: usize,
        downloads: usize,
        /// (address, bytes) of each in-place all-reduce buffer.
        calls: Vec<(usize, usize)>,
    }

    /// A one-rank backend that records what it is given (an all-reduce over one rank
    /// leaves the data as it is). `memory` says where it claims its buffers live.
    struct Recorder {
        memory: Memory,
        seen: Rc<RefCell<Seen>>,
        /// Host time each all-reduce call takes; its "GPU" time is 1 ms.
        host: Duration,
    }

    impl Backend for Recorder {
        fn kind(&self) -> BackendKind {
            BackendKind::Mpi
        }
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            1
        }
        fn control(&self) -> &::mpi::topology::SimpleCommunicator {
            unreachable!("the exchange takes no control-plane decisions")
        }
        fn supports(&self, _: Dtype, _: Option<RedOp>) -> bool {
            true
        }
        fn alloc(&self, bytes: usize) -> Result<Buffer> {
            Ok(Buffer::Host(HostBuffer::new(bytes)?))
        }
        fn upload(&self, _: &mut Buffer, _: &[u8]) -> Result<()> {
            self.seen.borrow_mut().uploads += 1;
            Ok(())
        }
        fn download(&self, _: &Buffer, _: &mut [u8]) -> Result<()> {
            self.seen.borrow_mut().downloads += 1;
            Ok(())
        }
        fn fill(&self, _: &mut Buffer, _: &Pattern) -> Result<()> {
            unreachable!()
        }
        fn check(&self, _: &Buffer, _: &Pattern) -> Result<Mismatch> {
            unreachable!()
        }
        fn memory(&self) -> Memory {
            self.memory
        }
        unsafe fn borrow(&self, addr: usize, bytes: usize) -> Result<Buffer> {
            let ptr = std::ptr::NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: the caller's promise, as for the real backends.
            Ok(Buffer::Host(unsafe { HostBuffer::borrowed(ptr, bytes) }))
        }
        fn reduce_scatter_in_place_offset(&self, _: usize) -> usize {
            0
        }
        fn run_group(
            &self,
            _: &[burnin::collective::P2p],
            _: &Buffer,
            _: &mut Buffer,
            _: &WaitCtx,
        ) -> Result<f64> {
            bail!("the training exchanges gradients by all_reduce only")
        }
        fn run_timed(
            &self,
            call: &Call,
            bufs: Bufs<'_>,
            iters: usize,
            _: &WaitCtx,
        ) -> Result<Vec<f64>> {
            let Bufs::InPlace(Buffer::Host(h)) = bufs else {
                bail!("expected one in-place host buffer")
            };
            assert_eq!(
                (call.kind, call.op, call.in_place),
                (CollKind::AllReduce, RedOp::Avg, true)
            );
            assert_eq!(call.count * 4, h.as_bytes().len());
            self.seen
                .borrow_mut()
                .calls
                .push((h.as_bytes().as_ptr() as usize, h.as_bytes().len()));
            std::thread::sleep(self.host);
            Ok(vec![1e-3; iters])
        }
        fn describe(&self) -> String {
            "recorder".into()
        }
    }

    fn grads(model: &Model) -> Vec<Vec<f32>> {
        model
            .params
            .iter()
            .map(|p| Vec::<f32>::try_from(p.tensor.grad().flatten(0, -1)).unwrap())
            .collect()
    }

    fn model_with_grads() -> Model {
        let cfg = burnin::train::args::ModelConfig {
            vocab: 32,
            width: 16,
            depth: 2,
            heads: 2,
            seq: 8,
        };
        let model = Model::new(cfg, 5, Device::Cpu).unwrap();
        let toks = burnin::train::data::batch_tokens(1, 1, 0, 2, 8, 32);
        let toks = Tensor::from_slice(&toks).view([2, 9]);
        model.loss(&toks).unwrap().backward();
        model
    }

    /// The direct path, which CUDA + NCCL takes on a GPU: the backend reduces the
    /// bucket tensors' own memory in place; nothing is uploaded, downloaded or
    /// staged, and every gradient comes back through the bucket unchanged.
    #[test]
    fn the_direct_path_reduces_the_bucket_tensors_in_place_without_staging() {
        let model = model_with_grads();
        let before = grads(&model);
        let seen = Rc::new(RefCell::new(Seen::default()));
        let be = Recorder {
            memory: Memory::Host,
            seen: seen.clone(),
            host: Duration::ZERO,
        };
        let mut ddp = Ddp::new(Box::new(be), &model, 1024, Duration::from_secs(5)).unwrap();
        assert_eq!(ddp.path(), GradPath::Direct);
        assert!(ddp.bucket_count() > 2, "several 1 KiB buckets");
        let t = ddp.average_gradients(&model, 1).unwrap();
        let seen = seen.borrow();
        assert_eq!((seen.uploads, seen.downloads), (0, 0));
        let flats: Vec<(usize, usize)> = ddp
            .buckets
            .iter()
            .map(|b| (b.flat.data_ptr() as usize, b.elems * 4))
            .collect();
        assert_eq!(
            seen.calls, flats,
            "each call got its bucket tensor's memory"
        );
        assert_eq!(t.bucket_s.len(), ddp.bucket_count());
        assert_eq!(
            ddp.bucket_bytes().iter().sum::<u64>(),
            4 * before.iter().map(|g| g.len() as u64).sum::<u64>()
        );
        assert_eq!(grads(&model), before);
    }

    #[test]
    fn cpu_gradients_for_a_gpu_backend_are_uploaded_per_bucket() {
        let model = model_with_grads();
        let seen = Rc::new(RefCell::new(Seen::default()));
        let be = Recorder {
            memory: Memory::Gpu(0),
            seen: seen.clone(),
            host: Duration::ZERO,
        };
        let mut ddp = Ddp::new(Box::new(be), &model, 4096, Duration::from_secs(5)).unwrap();
        assert_eq!(ddp.path(), GradPath::Uploaded);
        ddp.average_gradients(&model, 1).unwrap();
        let n = ddp.bucket_count();
        let seen = seen.borrow();
        assert_eq!((seen.uploads, seen.downloads, seen.calls.len()), (n, n, n));
    }

    /// The parts of the exchange add up to its wall time: an all-reduce whose host
    /// call takes 6 ms around 1 ms of GPU time shows 1 ms of all-reduce and 5 ms of
    /// wait, not 1 ms of exchange.
    #[test]
    fn the_exchange_counts_the_host_waits_around_each_all_reduce() {
        let model = model_with_grads();
        let seen = Rc::new(RefCell::new(Seen::default()));
        let be = Recorder {
            memory: Memory::Gpu(0),
            seen,
            host: Duration::from_millis(6),
        };
        let mut ddp = Ddp::new(Box::new(be), &model, 4096, Duration::from_secs(5)).unwrap();
        let n = ddp.bucket_count() as f64;
        let t0 = Instant::now();
        let t = ddp.average_gradients(&model, 1).unwrap();
        let wall = t0.elapsed().as_secs_f64();
        assert!((t.allreduce_s - n * 1e-3).abs() < 1e-12, "{t:?}");
        assert!(t.wait_s >= n * 5e-3 && t.wait_s < wall, "{t:?}");
        assert!(
            t.total() <= wall && wall - t.total() < 1e-3,
            "{wall}: {t:?}"
        );
    }

    #[test]
    fn buckets_cover_every_element_once_in_order() {
        let sizes = [10, 3, 25, 0, 7];
        for cap in [1, 4, 8, 13, 100] {
            let plan = plan_buckets(&sizes, cap);
            let mut seen: Vec<(usize, usize)> = Vec::new();
            for b in &plan {
                let total: usize = b.iter().map(|s| s.len).sum();
                assert!(total <= cap && total > 0);
                let mut off = 0;
                for s in b {
                    assert_eq!(s.offset, off);
                    off += s.len;
                    for e in s.start..s.start + s.len {
                        seen.push((s.param, e));
                    }
                }
            }
            let want: Vec<(usize, usize)> = sizes
                .iter()
                .enumerate()
                .flat_map(|(p, &n)| (0..n).map(move |e| (p, e)))
                .collect();
            assert_eq!(seen, want, "cap {cap}");
        }
        assert_eq!(plan_buckets(&[8, 8], 4).len(), 4);
        assert_eq!(plan_buckets(&[3, 3], 100).len(), 1);
    }

    #[test]
    fn f32_bytes_are_checked_and_shared_with_the_tensor() {
        let mut t = Tensor::from_slice(&[1.0f32, 2.0]);
        with_f32_bytes(&mut t, |m| m[..4].copy_from_slice(&5.0f32.to_le_bytes())).unwrap();
        assert_eq!(t.double_value(&[0]), 5.0);
        let mut i = Tensor::from_slice(&[1i64]);
        assert!(with_f32_bytes(&mut i, |_| ()).is_err());
        let mut nc = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0])
            .view([2, 2])
            .tr();
        assert!(with_f32_bytes(&mut nc, |_| ()).is_err());
    }
}
