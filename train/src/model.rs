//! A small decoder-only transformer in tch, written out op by op.
//!
//! Why not `tch::nn`: its layers panic on errors and draw their initial values from
//! torch's global RNG in creation order. Here every parameter is a plain leaf tensor
//! named like a state dict ("blocks.000.attn.qkv.weight"), its initial values come from
//! burnin's own generator keyed by (seed, name) — identical on every rank, device and
//! run — and every op is a fallible `f_` call, so a bad shape or a CUDA error is an
//! error message, never a panic.
//!
//! Only ops with deterministic CPU and CUDA kernels are used: matmul, layer norm,
//! softmax, GELU, embedding, and a cross entropy written as log-softmax times a one-hot
//! mask built by comparison (no gather/scatter, whose CUDA backward accumulates
//! atomically).
use anyhow::{anyhow, Context, Result};
use burnin::train::args::ModelConfig;
use burnin::train::data;
use tch::{Device, Kind, Tensor};

/// One trainable parameter.
pub struct Param {
    pub name: String,
    pub tensor: Tensor,
}

pub struct Model {
    pub cfg: ModelConfig,
    /// Sorted by name: the order of buckets, optimizer state and hashes.
    pub params: Vec<Param>,
    pub device: Device,
    /// Causal mask [seq, seq]: true above the diagonal (future positions).
    mask: Tensor,
    /// 0..vocab, for the one-hot targets.
    classes: Tensor,
}

/// How a parameter starts.
enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

fn param_specs(cfg: &ModelConfig) -> Vec<(String, Vec<i64>, Init)> {
    let (v, d, t) = (cfg.vocab, cfg.width, cfg.seq);
    let std = 0.02;
    // GPT-2's scaled init of the residual projections.
    let proj_std = 0.02 / (2.0 * cfg.depth as f64).sqrt();
    let mut s = vec![
        ("tok_emb".to_string(), vec![v, d], Init::Normal(std)),
        ("pos_emb".to_string(), vec![t, d], Init::Normal(std)),
        ("ln_f.weight".to_string(), vec![d], Init::Ones),
        ("ln_f.bias".to_string(), vec![d], Init::Zeros),
        ("head.weight".to_string(), vec![v, d], Init::Normal(std)),
        ("head.bias".to_string(), vec![v], Init::Zeros),
    ];
    for l in 0..cfg.depth {
        let p = |n: &str| format!("blocks.{l:03}.{n}");
        s.extend([
            (p("ln1.weight"), vec![d], Init::Ones),
            (p("ln1.bias"), vec![d], Init::Zeros),
            (p("attn.qkv.weight"), vec![3 * d, d], Init::Normal(std)),
            (p("attn.qkv.bias"), vec![3 * d], Init::Zeros),
            (p("attn.proj.weight"), vec![d, d], Init::Normal(proj_std)),
            (p("attn.proj.bias"), vec![d], Init::Zeros),
            (p("ln2.weight"), vec![d], Init::Ones),
            (p("ln2.bias"), vec![d], Init::Zeros),
            (p("mlp.fc.weight"), vec![4 * d, d], Init::Normal(std)),
            (p("mlp.fc.bias"), vec![4 * d], Init::Zeros),
            (p("mlp.proj.weight"), vec![d, 4 * d], Init::Normal(proj_std)),
            (p("mlp.proj.bias"), vec![d], Init::Zeros),
        ]);
    }
    s.sort_by(|a, b| a.0.cmp(&b.0));
    s
}

impl Model {
    /// A fresh model with initial values from `seed`, on `device`.
    pub fn new(cfg: ModelConfig, seed: u64, device: Device) -> Result<Model> {
        let mut params = Vec::new();
        for (name, shape, init) in param_specs(&cfg) {
            let n: i64 = shape.iter().product();
            let values: Vec<f32> = match init {
                Init::Normal(std) => data::normal(data::name_key(seed, &name), n as usize, std),
                Init::Zeros => vec![0.0; n as usize],
                Init::Ones => vec![1.0; n as usize],
            };
            let tensor = Tensor::f_from_slice(&values)
                .and_then(|t| t.f_view(shape.as_slice()))
                .and_then(|t| t.f_to_device(device))
                .and_then(|t| t.f_set_requires_grad(true))
                .with_context(|| format!("creating parameter {name} {shape:?} on {device:?}"))?;
            params.push(Param { name, tensor });
        }
        let t = cfg.seq;
        let mask = Tensor::f_ones([t, t], (Kind::Bool, device))
            .and_then(|m| m.f_triu(1))
            .context("creating the causal mask")?;
        let classes = Tensor::f_arange(cfg.vocab, (Kind::Int64, device))?;
        let model = Model {
            cfg,
            params,
            device,
            mask,
            classes,
        };
        model.define_grads()?;
        Ok(model)
    }

    /// Give every parameter a defined, zero gradient, so every step accumulates into
    /// zeros (a fresh run and a resumed one then do bit-identical arithmetic: adding a
    /// gradient to +0 and storing it into an undefined grad differ for -0.0).
    fn define_grads(&self) -> Result<()> {
        let mut total: Option<Tensor> = None;
        for p in &self.params {
            let s = p.tensor.f_sum(Kind::Float)?.f_mul_scalar(0.0)?;
            total = Some(match total {
                None => s,
                Some(t) => t.f_add(&s)?,
            });
        }
        if let Some(t) = total {
            t.f_backward().context("defining the gradients")?;
        }
        self.zero_grads()
    }

    pub fn zero_grads(&self) -> Result<()> {
        for p in &self.params {
            let mut g = p.tensor.f_grad()?;
            if g.defined() {
                let _ = g.f_zero_()?;
            }
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Result<&Tensor> {
        // params is sorted by name.
        self.params
            .binary_search_by(|p| p.name.as_str().cmp(name))
            .map(|i| &self.params[i].tensor)
            .map_err(|_| anyhow!("model has no parameter {name}"))
    }

    /// Mean next-token cross entropy of `tokens` ([batch, seq + 1], int64, on the
    /// model's device).
    pub fn loss(&self, tokens: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        let (d, t, h) = (c.width, c.seq, c.heads);
        let hd = d / h;
        let size = tokens.size();
        let b = *size
            .first()
            .ok_or_else(|| anyhow!("tokens have no batch dimension"))?;
        let inp = tokens.f_narrow(1, 0, t)?;
        let tgt = tokens.f_narrow(1, 1, t)?;
        let mut x = Tensor::f_embedding(self.get("tok_emb")?, &inp, -1, false, false)?
            .f_add(self.get("pos_emb")?)?;
        let ln = |x: &Tensor, p: &str| -> Result<Tensor> {
            Ok(x.f_layer_norm(
                [d],
                Some(self.get(&format!("{p}.weight"))?),
                Some(self.get(&format!("{p}.bias"))?),
                1e-5,
                false,
            )?)
        };
        let lin = |x: &Tensor, p: &str| -> Result<Tensor> {
            Ok(x.f_linear(
                self.get(&format!("{p}.weight"))?,
                Some(self.get(&format!("{p}.bias"))?),
            )?)
        };
        let scale = 1.0 / (hd as f64).sqrt();
        for l in 0..c.depth {
            let p = |n: &str| format!("blocks.{l:03}.{n}");
            let a = ln(&x, &p("ln1"))?;
            let qkv = lin(&a, &p("attn.qkv"))?.f_split(d, 2)?;
            let heads =
                |z: &Tensor| -> Result<Tensor> { Ok(z.f_view([b, t, h, hd])?.f_transpose(1, 2)?) };
            let (q, k, v) = match qkv.as_slice() {
                [q, k, v] => (heads(q)?, heads(k)?, heads(v)?),
                _ => return Err(anyhow!("qkv split into {} parts, not 3", qkv.len())),
            };
            let att = q
                .f_matmul(&k.f_transpose(-2, -1)?)?
                .f_mul_scalar(scale)?
                .f_masked_fill(&self.mask, f64::NEG_INFINITY)?
                .f_softmax(-1, Kind::Float)?;
            let y = att
                .f_matmul(&v)?
                .f_transpose(1, 2)?
                .f_contiguous()?
                .f_view([b, t, d])?;
            x = x.f_add(&lin(&y, &p("attn.proj"))?)?;
            let m = ln(&x, &p("ln2"))?;
            let m = lin(&lin(&m, &p("mlp.fc"))?.f_gelu("none")?, &p("mlp.proj"))?;
            x = x.f_add(&m)?;
        }
        let x = ln(&x, "ln_f")?;
        let logp = lin(&x, "head")?.f_log_softmax(-1, Kind::Float)?;
        let onehot = tgt
            .f_unsqueeze(-1)?
            .f_eq_tensor(&self.classes)?
            .f_to_kind(Kind::Float)?;
        Ok(logp
            .f_mul(&onehot)?
            .f_sum(Kind::Float)?
            .f_div_scalar(-((b * t) as f64))?)
    }

    /// Total elements over all parameters.
    pub fn numel(&self) -> usize {
        self.params.iter().map(|p| p.tensor.numel()).sum()
    }
}

/// The bytes of a tensor as it sits in memory (copied to the CPU if needed).
pub fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let cpu = t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?;
    let kind = cpu.f_kind()?;
    let numel = cpu.numel();
    let mut out = vec![0u8; numel * kind.elt_size_in_bytes()];
    cpu.f_copy_data_u8(&mut out, numel)?;
    Ok(out)
}

/// sha256 over (name, shape, bytes) of every tensor, in the given order: equal hashes
/// mean bit-identical weights.
pub fn hash_tensors<'a>(tensors: impl Iterator<Item = (&'a str, &'a Tensor)>) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, t) in tensors {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        for s in t.size() {
            h.update(s.to_le_bytes());
        }
        h.update(tensor_bytes(t)?);
    }
    Ok(hex(&h.finalize()))
}

/// Lower-case hex of bytes.
pub use burnin::train::storage::hex;

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        ModelConfig {
            vocab: 32,
            width: 16,
            depth: 2,
            heads: 2,
            seq: 8,
        }
    }

    #[test]
    fn parameter_count_matches_the_formula() {
        let m = Model::new(tiny(), 1, Device::Cpu).unwrap();
        assert_eq!(m.numel() as u64, tiny().parameters());
        let names: Vec<&str> = m.params.iter().map(|p| p.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn same_seed_same_weights_and_loss() {
        let a = Model::new(tiny(), 3, Device::Cpu).unwrap();
        let b = Model::new(tiny(), 3, Device::Cpu).unwrap();
        let c = Model::new(tiny(), 4, Device::Cpu).unwrap();
        let h = |m: &Model| {
            hash_tensors(m.params.iter().map(|p| (p.name.as_str(), &p.tensor))).unwrap()
        };
        assert_eq!(h(&a), h(&b));
        assert_ne!(h(&a), h(&c));
        let toks = data::batch_tokens(1, 1, 0, 2, 8, 32);
        let toks = Tensor::from_slice(&toks).view([2, 9]);
        let la = a.loss(&toks).unwrap().double_value(&[]);
        let lb = b.loss(&toks).unwrap().double_value(&[]);
        assert_eq!(la.to_bits(), lb.to_bits());
        // An untrained model is near ln(vocab).
        assert!((la - (32f64).ln()).abs() < 0.5, "{la}");
    }

    #[test]
    fn wrong_token_shape_is_an_error_not_a_panic() {
        let m = Model::new(tiny(), 1, Device::Cpu).unwrap();
        let toks = Tensor::from_slice(&[1i64, 2, 3]).view([1, 3]);
        assert!(m.loss(&toks).is_err());
    }
}
