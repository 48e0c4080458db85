//! Deterministic synthetic token data.
//!
//! A batch is a pure function of (seed, step, rank): after a restart any step's batch
//! is regenerated exactly, so the "data cursor" of a checkpoint is just the next step.
//! Each sample is an arithmetic progression modulo the vocabulary with a per-sample
//! start and stride, and ~1 token in 16 replaced by noise: a model must infer the
//! stride in context to predict the next token, so the loss falls steadily from
//! ln(vocab) but never reaches zero — a real learning signal, cheap to make.
//!
//! Pure Rust (no libtorch), unit-tested.

pub use crate::fault::SplitMix64;

/// A well-mixed 64-bit key from several words (stream separation).
pub fn mix(words: &[u64]) -> u64 {
    let mut r = SplitMix64(0x6275_726E_696E_0001); // "burnin"
    let mut acc = 0u64;
    for &w in words {
        r.0 ^= w.wrapping_add(acc);
        acc = r.next_u64();
    }
    acc
}

/// Tokens of one step on one rank: `batch` rows of `seq + 1` tokens (inputs are the
/// first `seq`, targets the last `seq`), row-major.
pub fn batch_tokens(
    seed: u64,
    step: u64,
    rank: u64,
    batch: usize,
    seq: usize,
    vocab: u64,
) -> Vec<i64> {
    let mut out = Vec::with_capacity(batch * (seq + 1));
    for row in 0..batch as u64 {
        let mut r = SplitMix64(mix(&[seed, step, rank, row]));
        let start = r.below(vocab);
        let stride = 1 + r.below(7.min(vocab.saturating_sub(1)).max(1));
        for t in 0..=seq as u64 {
            let tok = if r.below(16) == 0 {
                r.below(vocab)
            } else {
                (start + stride * t) % vocab
            };
            out.push(tok as i64);
        }
    }
    out
}

/// Standard normal samples (Box–Muller) from a stream keyed by `key`: the initial
/// weights, identical on every rank, device and run for the same seed.
pub fn normal(key: u64, n: usize, std: f64) -> Vec<f32> {
    let mut r = SplitMix64(key);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let u1 = r.unit().max(f64::MIN_POSITIVE);
        let u2 = r.unit();
        let rad = (-2.0 * u1.ln()).sqrt();
        let th = std::f64::consts::TAU * u2;
        out.push((rad * th.cos() * std) as f32);
        if out.len() < n {
            out.push((rad * th.sin() * std) as f32);
        }
    }
    out
}

/// A key for a named stream (e.g. a parameter's initial values).
pub fn name_key(seed: u64, name: &str) -> u64 {
    let mut words = vec![seed];
    words.extend(name.bytes().map(u64::from));
    mix(&words)
}

/// Fill `buf` with pseudo-random bytes (checkpoint padding that does not compress).
pub fn fill_random(key: u64, buf: &mut [u8]) {
    let mut r = SplitMix64(key);
    for chunk in buf.chunks_mut(8) {
        let w = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_regenerate_exactly_and_differ_by_step_and_rank() {
        let a = batch_tokens(1, 40, 2, 4, 16, 256);
        assert_eq!(a, batch_tokens(1, 40, 2, 4, 16, 256));
        assert_ne!(a, batch_tokens(1, 41, 2, 4, 16, 256));
        assert_ne!(a, batch_tokens(1, 40, 3, 4, 16, 256));
        assert_ne!(a, batch_tokens(2, 40, 2, 4, 16, 256));
        assert_eq!(a.len(), 4 * 17);
        assert!(a.iter().all(|&t| (0..256).contains(&t)));
    }

    #[test]
    fn samples_are_mostly_progressions() {
        let a = batch_tokens(7, 1, 0, 64, 32, 256);
        let mut regular = 0;
        let mut total = 0;
        for row in a.chunks(33) {
            for w in row.windows(3) {
                total += 1;
                if (w[2] - w[1]).rem_euclid(256) == (w[1] - w[0]).rem_euclid(256) {
                    regular += 1;
                }
            }
        }
        let frac = regular as f64 / total as f64;
        assert!(frac > 0.7 && frac < 0.99, "{frac}");
    }

    #[test]
    fn tiny_vocabularies_work() {
        let a = batch_tokens(1, 1, 0, 2, 8, 2);
        assert!(a.iter().all(|&t| t == 0 || t == 1));
    }

    #[test]
    fn normal_has_the_asked_spread() {
        let v = normal(name_key(1, "w"), 10_000, 0.02);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.002, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 0.002, "{}", var.sqrt());
        assert_eq!(v, normal(name_key(1, "w"), 10_000, 0.02));
        assert_ne!(v[..10], normal(name_key(1, "b"), 10, 0.02)[..]);
    }
}
