//! Data parallelism over burnin's own [`Backend`]: the gradients every rank computed
//! on its own batch are averaged with all-reduce, bucket by bucket, so every rank
//! applies the same update to the same weights.
//!
//! The gradients are seen as one flat f32 array (parameters in name order) cut into
//! buckets of `--bucket` bytes; a bucket may hold the tail of one parameter and the
//! head of the next. Each bucket has one backend [`Buffer`] allocated once; per step
//! its gradient bytes are packed into a host staging area, uploaded, all-reduced in
//! place with `RedOp::Avg`, downloaded and unpacked into the gradients. Buckets run
//! one after another after the whole backward pass (no overlap with compute yet).
//!
//! CUDA gradients are copied through the CPU for now (device → host → backend buffer
//! and back): correct everywhere but slower than needed. Handing the backend a
//! device pointer of the gradient (zero copy into NCCL) is future work.
//!
//! The only `unsafe` of `burnin train` is [`with_f32_bytes`], which views a CPU f32
//! tensor's memory as bytes.
use super::model::Model;
use crate::backend::{Backend, Buffer, Bufs, Call, CollKind, Dtype, RedOp, WaitCtx};
use anyhow::{bail, Context, Result};
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
    buf: Buffer,
}

/// Per-step timings of the gradient exchange (this rank, seconds).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommTimes {
    /// Copying gradients into the staging area (and device → host on CUDA).
    pub pack_s: f64,
    /// The all-reduce calls themselves (sum over buckets).
    pub allreduce_s: f64,
    /// Copying the averages back into the gradients.
    pub unpack_s: f64,
}

impl CommTimes {
    pub fn total(&self) -> f64 {
        self.pack_s + self.allreduce_s + self.unpack_s
    }
}

/// The gradient all-reducer of one model over one backend.
pub struct Ddp {
    be: Box<dyn Backend>,
    buckets: Vec<Bucket>,
    staging: Vec<u8>,
    deadline: Duration,
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
        let sizes: Vec<usize> = model.params.iter().map(|p| p.tensor.numel()).collect();
        let plan = plan_buckets(&sizes, (bucket_bytes / 4) as usize);
        let mut buckets = Vec::with_capacity(plan.len());
        let mut largest = 0;
        for segments in plan {
            let elems: usize = segments.iter().map(|s| s.len).sum();
            largest = largest.max(elems);
            let buf = be
                .alloc(elems * 4)
                .with_context(|| format!("allocating a {}-byte gradient bucket", elems * 4))?;
            buckets.push(Bucket {
                segments,
                elems,
                buf,
            });
        }
        Ok(Ddp {
            be,
            buckets,
            staging: vec![0u8; largest * 4],
            deadline,
        })
    }

    pub fn backend(&self) -> &dyn Backend {
        self.be.as_ref()
    }

    /// Deadline of each bucket's all-reduce from now on.
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Replace every parameter's gradient by its average over the ranks.
    pub fn average_gradients(&mut self, model: &Model, step: u64) -> Result<CommTimes> {
        let mut times = CommTimes::default();
        let t0 = Instant::now();
        // Host views of the gradients: the gradient itself on the CPU (shared
        // storage), else a CPU copy that is written back after the exchange.
        let mut host: Vec<Tensor> = Vec::with_capacity(model.params.len());
        let mut copied = Vec::with_capacity(model.params.len());
        for p in &model.params {
            let g = p.tensor.f_grad()?;
            if !g.defined() {
                bail!("parameter {} has no gradient", p.name);
            }
            let direct = g.device() == Device::Cpu && g.is_contiguous();
            host.push(if direct {
                g
            } else {
                g.f_to_device(Device::Cpu)?.f_contiguous()?
            });
            copied.push(!direct);
        }
        times.pack_s += t0.elapsed().as_secs_f64();
        let n_buckets = self.buckets.len();
        for (i, b) in self.buckets.iter_mut().enumerate() {
            let bytes = b.elems * 4;
            let stage = &mut self.staging[..bytes];
            let t = Instant::now();
            for s in &b.segments {
                let src = &mut host[s.param];
                with_f32_bytes(src, |mem| {
                    stage[s.offset * 4..(s.offset + s.len) * 4]
                        .copy_from_slice(&mem[s.start * 4..(s.start + s.len) * 4]);
                })?;
            }
            self.be.upload(&mut b.buf, stage)?;
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
            };
            let took = self
                .be
                .run_timed(&call, Bufs::InPlace(&mut b.buf), 1, &ctx)?;
            times.allreduce_s += took.iter().sum::<f64>();
            let t = Instant::now();
            self.be.download(&b.buf, stage)?;
            for s in &b.segments {
                let dst = &mut host[s.param];
                with_f32_bytes(dst, |mem| {
                    mem[s.start * 4..(s.start + s.len) * 4]
                        .copy_from_slice(&stage[s.offset * 4..(s.offset + s.len) * 4]);
                })?;
            }
            times.unpack_s += t.elapsed().as_secs_f64();
        }
        let t = Instant::now();
        for ((p, h), c) in model.params.iter().zip(&host).zip(&copied) {
            if *c {
                let _guard = tch::no_grad_guard();
                let mut g = p.tensor.f_grad()?;
                g.f_copy_(h)?;
            }
        }
        times.unpack_s += t.elapsed().as_secs_f64();
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
