//! AdamW with its state as plain tensors, so a checkpoint can hold it exactly.
//!
//! tch's `nn::Optimizer` keeps its moments inside libtorch where they cannot be saved;
//! this one keeps the first and second moments (`m`, `v`, one pair per parameter, in
//! the model's parameter order) and the step count `t` in the open. The update runs in
//! no-grad mode with in-place ops in a fixed order, so it is deterministic on the CPU
//! and, with PyTorch's deterministic mode, on CUDA.
use super::model::Model;
use anyhow::{bail, Result};
use tch::Tensor;

pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled weight decay, applied to matrices only (not to biases and norms).
    pub weight_decay: f64,
    /// Updates applied so far.
    pub t: u64,
    pub m: Vec<Tensor>,
    pub v: Vec<Tensor>,
}

impl AdamW {
    pub fn new(model: &Model, lr: f64) -> Result<AdamW> {
        let zeros = || -> Result<Vec<Tensor>> {
            model
                .params
                .iter()
                .map(|p| Ok(p.tensor.f_detach()?.f_zeros_like()?))
                .collect()
        };
        Ok(AdamW {
            lr,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.01,
            t: 0,
            m: zeros()?,
            v: zeros()?,
        })
    }

    /// One update from the parameters' (already averaged) gradients.
    pub fn step(&mut self, model: &Model) -> Result<()> {
        if self.m.len() != model.params.len() || self.v.len() != model.params.len() {
            bail!("optimizer state does not match the model's parameters");
        }
        let _guard = tch::no_grad_guard();
        self.t += 1;
        let t = self.t as i32;
        let bc1 = 1.0 - self.beta1.powi(t);
        let bc2 = 1.0 - self.beta2.powi(t);
        let step_size = self.lr / bc1;
        let bc2_sqrt = bc2.sqrt();
        for ((p, m), v) in model.params.iter().zip(&mut self.m).zip(&mut self.v) {
            let g = p.tensor.f_grad()?;
            if !g.defined() {
                bail!("parameter {} has no gradient", p.name);
            }
            let mut w = p.tensor.shallow_clone();
            if self.weight_decay > 0.0 && w.dim() >= 2 {
                let _ = w.f_mul_scalar_(1.0 - self.lr * self.weight_decay)?;
            }
            let _ = m.f_mul_scalar_(self.beta1)?;
            let _ = m.f_add_(&g.f_mul_scalar(1.0 - self.beta1)?)?;
            let _ = v.f_mul_scalar_(self.beta2)?;
            let _ = v.f_addcmul_(&g.f_mul_scalar(1.0 - self.beta2)?, &g)?;
            let denom = v.f_sqrt()?.f_div_scalar(bc2_sqrt)?.f_add_scalar(self.eps)?;
            let _ = w.f_addcdiv_(&m.f_mul_scalar(-step_size)?, &denom)?;
        }
        Ok(())
    }
}
