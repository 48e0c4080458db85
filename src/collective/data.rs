//! Test data with exact, closed-form results.
//!
//! - sum/avg: rank r puts `(r + i + 1) % 3` at element i (not `(r + i) % 3`: rank 0's
//!   first two elements `[0, 1]` were then the 2-rank integer average, and a reduce
//!   to rank 0 that wrote its input back passed); the sum over n ranks is at most
//!   2n, exact in f32/f64/i32, in f16 up to n = 1024 and bf16 up to n = 128 ranks
//!   (beyond, a relative tolerance of the type's precision applies). u8 wraps mod 256
//!   exactly like the hardware does.
//! - prod: every rank puts 1 except rank `(i + 1) % n`, which puts 2: the product is 2.
//!   Not rank `i % n`: then each rank's 2 would sit at its own element of a one-element
//!   chunk, and an in-place reduce_scatter that wrote nothing would pass its check.
//! - max/min: rank r puts `m·((i / m) % (100 / m)) + (r + i) % m`, with `m = min(n, 64)`:
//!   in each block of m elements the ranks hold a rotation of `0..m` above a base that
//!   changes from block to block (period `m·(100 / m)` ≤ 100), so the max is the base
//!   plus m − 1 and the min the base. The extreme moves to another rank at every
//!   element: no rank holds it along a whole message of two or more elements, so a
//!   rank whose call wrote nothing (or wrote its input back) fails its check. With
//!   `(r + i) % 64`, the rank holding the largest value of a short message passed.
//! - data-movement collectives: `(13 r + i) % 101`, different on every rank so a block
//!   delivered to the wrong place is caught.
//!
//! Unwritten output elements are pre-filled with [`POISON`].
use crate::kinds::{Dtype, RedOp};
use half::{bf16, f16};

/// Pre-fill for output elements: representable in every type and never a valid
/// input (inputs are below 101) and not a result below 126 ranks.
pub const POISON: f64 = 251.0;

/// Input of `rank` at element `i` for a reduction with `op`.
pub fn reduce_input(op: RedOp, n: usize, rank: usize, i: usize) -> f64 {
    match op {
        RedOp::Sum | RedOp::Avg => ((rank + i + 1) % 3) as f64,
        RedOp::Prod => {
            if rank == (i + 1) % n {
                2.0
            } else {
                1.0
            }
        }
        RedOp::Max | RedOp::Min => {
            let m = extreme_rotation(n);
            (extreme_base(n, i) + (rank + i) % m) as f64
        }
    }
}

/// max/min data: how many ranks the extreme rotates over, `min(n, 64)` (at least 1).
pub fn extreme_rotation(n: usize) -> usize {
    n.clamp(1, 64)
}

/// max/min data: the period of the values in the element index, `m·(100 / m)`.
pub fn extreme_period(n: usize) -> usize {
    let m = extreme_rotation(n);
    m * (100 / m)
}

/// max/min data: the base every rank adds its rotation to at element `i`.
fn extreme_base(n: usize, i: usize) -> usize {
    let m = extreme_rotation(n);
    m * ((i / m) % (100 / m))
}

/// Input of `rank` at element `i` for data-movement collectives.
pub fn plain_input(rank: usize, i: usize) -> f64 {
    ((13 * rank + i) % 101) as f64
}

/// The exact reduction over ranks 0..n of [`reduce_input`] at element `i`, in `dtype`.
pub fn reduce_expected(op: RedOp, dtype: Dtype, n: usize, i: usize) -> f64 {
    match op {
        RedOp::Sum | RedOp::Avg => {
            // Σ_{r<n} (r+i+1) % 3 = full cycles (0+1+2 each) + the remainder's terms.
            let q = n / 3;
            let rem: usize = (0..n % 3).map(|j| (i + 1 + j) % 3).sum();
            let sum = (3 * q + rem) as u64;
            let s = wrap(dtype, sum);
            if op == RedOp::Avg {
                average(dtype, s, n)
            } else {
                s
            }
        }
        RedOp::Prod => {
            if n == 0 {
                1.0
            } else {
                2.0
            }
        }
        // n ≥ m ranks hold every value of the rotation 0..m above the base
        RedOp::Max => (extreme_base(n, i) + extreme_rotation(n) - 1) as f64,
        RedOp::Min => extreme_base(n, i) as f64,
    }
}

/// An integer sum as the type holds it (u8 wraps).
fn wrap(dtype: Dtype, sum: u64) -> f64 {
    match dtype {
        Dtype::U8 => (sum % 256) as f64,
        _ => sum as f64,
    }
}

/// sum / n as the type computes it (integers truncate).
fn average(dtype: Dtype, sum: f64, n: usize) -> f64 {
    match dtype {
        Dtype::I32 | Dtype::U8 => (sum as u64 / n as u64) as f64,
        _ => sum / n as f64,
    }
}

/// Reduce a list of values like a correct implementation would (for tests).
pub fn reduce_values(op: RedOp, dtype: Dtype, vals: &[f64], n: usize) -> f64 {
    match op {
        RedOp::Sum => wrap(dtype, vals.iter().sum::<f64>() as u64),
        RedOp::Avg => average(dtype, wrap(dtype, vals.iter().sum::<f64>() as u64), n),
        RedOp::Prod => vals.iter().product(),
        RedOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
        RedOp::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
    }
}

/// Write `v` as one element of `dtype` (little-endian).
pub fn encode(dtype: Dtype, v: f64, out: &mut [u8]) {
    match dtype {
        Dtype::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        Dtype::F64 => out.copy_from_slice(&v.to_le_bytes()),
        Dtype::F16 => out.copy_from_slice(&f16::from_f64(v).to_le_bytes()),
        Dtype::Bf16 => out.copy_from_slice(&bf16::from_f64(v).to_le_bytes()),
        Dtype::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        Dtype::U8 => out[0] = v as u8,
    }
}

/// Read one element of `dtype`.
pub fn decode(dtype: Dtype, b: &[u8]) -> f64 {
    match dtype {
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        Dtype::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        Dtype::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        Dtype::Bf16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        Dtype::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        Dtype::U8 => b[0] as f64,
    }
}

/// `v` after a round trip through `dtype`.
pub fn roundtrip(dtype: Dtype, v: f64) -> f64 {
    let mut b = [0u8; 8];
    encode(dtype, v, &mut b[..dtype.size()]);
    decode(dtype, &b[..dtype.size()])
}

/// Whether the exact result `want` cannot be held by the type, and the relative
/// precision that applies then: an average of floats, or sums past the type's
/// exact-integer range (bf16 above 256, f16 above 2048).
fn inexact(dtype: Dtype, op: RedOp, want: f64) -> Option<f64> {
    let exact_limit = match dtype {
        Dtype::Bf16 => 256.0,
        Dtype::F16 => 2048.0,
        _ => f64::MAX,
    };
    let rel = match dtype {
        Dtype::F16 => 1e-3,
        Dtype::Bf16 => 8e-3,
        Dtype::F32 => 1e-6,
        Dtype::F64 => 1e-12,
        Dtype::I32 | Dtype::U8 => 0.0,
    };
    ((op == RedOp::Avg && dtype.is_float()) || want.abs() > exact_limit).then_some(rel)
}

/// Whether `have` is the right result `want`. Exact, except where the exact value
/// is not representable in the type ([`inexact`]), which gets the type's relative
/// precision.
pub fn matches(dtype: Dtype, op: RedOp, have: f64, want: f64) -> bool {
    let (value, tol) = tolerance(dtype, op, want);
    if tol > 0.0 {
        (have - value).abs() <= tol
    } else {
        have == value
    }
}

/// [`matches`] as a value and an absolute tolerance, the form the GPU check takes:
/// `have` matches when `|have - value| <= tol` (for `tol == 0`: `have == value`).
pub fn tolerance(dtype: Dtype, op: RedOp, want: f64) -> (f64, f64) {
    match inexact(dtype, op, want) {
        Some(rel) => (want, rel * want.abs().max(1.0)),
        None => (roundtrip(dtype, want), 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms_equal_brute_force() {
        for n in [1usize, 2, 3, 5, 8, 64, 65, 130, 300] {
            for op in RedOp::ALL {
                for dtype in [Dtype::F64, Dtype::I32, Dtype::U8] {
                    for i in 0..130 {
                        let vals: Vec<f64> = (0..n).map(|r| reduce_input(op, n, r, i)).collect();
                        let brute = reduce_values(op, dtype, &vals, n);
                        assert_eq!(
                            reduce_expected(op, dtype, n, i),
                            brute,
                            "{op:?} {dtype} n={n} i={i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn inexact_results_get_the_types_precision_relative_to_their_size() {
        // An f16 average of 200: 1e-3 of it either way.
        assert_eq!(tolerance(Dtype::F16, RedOp::Avg, 200.0), (200.0, 0.2));
        assert!(matches(Dtype::F16, RedOp::Avg, 200.15, 200.0));
        assert!(!matches(Dtype::F16, RedOp::Avg, 200.3, 200.0));
        // Below 1 the precision is absolute: 1e-3 of 1.
        assert_eq!(tolerance(Dtype::F16, RedOp::Avg, 0.5), (0.5, 1e-3));
        assert!(!matches(Dtype::F16, RedOp::Avg, 0.502, 0.5));
        // A bf16 sum past 256 is not exact: 8e-3 of it.
        assert_eq!(tolerance(Dtype::Bf16, RedOp::Sum, 1000.0), (1000.0, 8.0));
        // Up to 2048 (f16) and 256 (bf16) every integer is exact: no tolerance; past
        // them, the type's precision.
        assert_eq!(tolerance(Dtype::F16, RedOp::Sum, 2048.0), (2048.0, 0.0));
        assert_eq!(tolerance(Dtype::F16, RedOp::Sum, 3000.0), (3000.0, 3.0));
        assert_eq!(tolerance(Dtype::Bf16, RedOp::Sum, 256.0), (256.0, 0.0));
        assert_eq!(tolerance(Dtype::F32, RedOp::Sum, 3000.0), (3000.0, 0.0));
        assert_eq!(tolerance(Dtype::F32, RedOp::Avg, 0.25), (0.25, 1e-6));
        assert_eq!(tolerance(Dtype::F64, RedOp::Avg, 0.25), (0.25, 1e-12));
        assert_eq!(tolerance(Dtype::I32, RedOp::Avg, 7.0), (7.0, 0.0));
        // Exact sums get no tolerance at all.
        assert_eq!(tolerance(Dtype::F16, RedOp::Sum, 1000.0), (1000.0, 0.0));
        assert!(!matches(Dtype::F16, RedOp::Sum, 1000.5, 1000.0));
    }

    #[test]
    fn a_u8_sum_wraps_at_256_and_other_types_hold_it() {
        // Σ_{r<n} (r+i) % 3 written out, independent of the closed form.
        for n in [1usize, 2, 5, 130, 171, 172, 300] {
            for i in [0usize, 1, 2, 7] {
                let sum: usize = (0..n).map(|r| (r + i + 1) % 3).sum();
                assert_eq!(
                    reduce_expected(RedOp::Sum, Dtype::U8, n, i),
                    (sum % 256) as f64,
                    "n={n} i={i}"
                );
                for dtype in [Dtype::I32, Dtype::F32, Dtype::F64] {
                    assert_eq!(
                        reduce_expected(RedOp::Sum, dtype, n, i),
                        sum as f64,
                        "{dtype}"
                    );
                }
                // avg of integers divides the (wrapped) sum, truncating; of floats,
                // exactly.
                assert_eq!(
                    reduce_expected(RedOp::Avg, Dtype::U8, n, i),
                    ((sum % 256) / n) as f64,
                    "avg n={n} i={i}"
                );
                assert_eq!(
                    reduce_expected(RedOp::Avg, Dtype::I32, n, i),
                    (sum / n) as f64
                );
                assert_eq!(
                    reduce_expected(RedOp::Avg, Dtype::F64, n, i),
                    sum as f64 / n as f64
                );
            }
        }
        assert_eq!(
            reduce_values(RedOp::Sum, Dtype::U8, &[200.0, 100.0], 2),
            44.0
        );
    }

    #[test]
    fn every_type_round_trips_the_data() {
        for dtype in Dtype::ALL {
            for v in 0..=255 {
                assert_eq!(roundtrip(dtype, v as f64), v as f64, "{dtype} {v}");
            }
            assert_ne!(roundtrip(dtype, POISON), 0.0);
        }
    }
}
