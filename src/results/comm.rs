//! The training's gradient all-reduce as the fabric saw it, and how it compares with
//! the sweep's all_reduce at the same message size (`burnin run`).
//!
//! Here, not under `train`, so the report (built without libtorch too) reads the same
//! types the training writes.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The gradient all-reduces of one bucket size, over the steps of a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct BucketComm {
    /// Bucket size (the all-reduce's message), bytes.
    pub bytes: u64,
    /// Buckets of this size per step.
    pub buckets: usize,
    /// All-reduce calls measured (buckets × steps).
    pub samples: usize,
    /// Median over those calls of the slowest rank's time inside the call, s.
    pub time_p50_s: f64,
    /// Median over those calls of the fastest rank's time inside the call (the last
    /// rank to arrive, which waits for nobody: the call's own cost without the ranks'
    /// skew), s; 0 in runs written before it was recorded.
    #[serde(default)]
    pub own_p50_s: f64,
    /// nccl-tests' algbw of that median, GB/s.
    pub algbw_gbps: f64,
    /// nccl-tests' busbw of that median (all_reduce: algbw × 2(n−1)/n), GB/s.
    pub busbw_gbps: f64,
}

/// Per bucket size, the median call time and bandwidths. `bucket_bytes[b]` is bucket
/// b's size; `steps[s][b]` the slowest rank's time of bucket b in step s, `own[s][b]`
/// the fastest rank's (may be empty); `n` ranks.
pub fn bucket_comm(
    bucket_bytes: &[u64],
    steps: &[Vec<f64>],
    own: &[Vec<f64>],
    n: usize,
) -> Vec<BucketComm> {
    let mut sizes: Vec<u64> = bucket_bytes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let factor = if n > 1 {
        2.0 * (n - 1) as f64 / n as f64
    } else {
        0.0
    };
    let mut out = Vec::new();
    for &bytes in sizes.iter().rev() {
        let idx: Vec<usize> = (0..bucket_bytes.len())
            .filter(|&b| bucket_bytes[b] == bytes)
            .collect();
        let pick = |steps: &[Vec<f64>]| -> Vec<f64> {
            steps
                .iter()
                .flat_map(|s| idx.iter().filter_map(|&b| s.get(b).copied()))
                .filter(|t| *t > 0.0 && t.is_finite())
                .collect()
        };
        let times = pick(steps);
        if times.is_empty() {
            continue;
        }
        let p50 = crate::stats::median(&times);
        // 0 when the fastest ranks' times were not recorded.
        let own_p50 = crate::stats::median(&pick(own));
        let alg = bytes as f64 / p50 / 1e9;
        out.push(BucketComm {
            bytes,
            buckets: idx.len(),
            samples: times.len(),
            time_p50_s: p50,
            own_p50_s: own_p50,
            algbw_gbps: alg,
            busbw_gbps: alg * factor,
        });
    }
    out
}

/// The training's all-reduce against the sweep's at the same size.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct CommEfficiency {
    /// The bucket size compared (the most common full bucket), bytes.
    pub bytes: u64,
    /// The training's busbw at that size, GB/s.
    pub train_busbw_gbps: f64,
    /// The sweep's world-tier all_reduce busbw at that size, GB/s: measured there,
    /// or interpolated (linear in log2 of the size) between the two sizes around it.
    pub sweep_busbw_gbps: f64,
    /// The sweep sizes it came from (one when measured at exactly that size).
    pub sweep_bytes: Vec<u64>,
    /// train / sweep.
    pub ratio: f64,
}

/// Compare the training's largest bucket size (the full buckets) with the sweep's
/// `(bytes, busbw)` points; None when the sweep's sizes do not reach that size.
pub fn efficiency(train: &[BucketComm], sweep: &[(u64, f64)]) -> Option<CommEfficiency> {
    let t = train
        .iter()
        .filter(|b| b.busbw_gbps > 0.0)
        .max_by_key(|b| (b.buckets, b.bytes))?;
    let mut pts: Vec<(u64, f64)> = sweep.iter().copied().filter(|p| p.1 > 0.0).collect();
    pts.sort_by_key(|p| p.0);
    pts.dedup_by_key(|p| p.0);
    let (sweep_busbw, sweep_bytes) = if let Some(p) = pts.iter().find(|p| p.0 == t.bytes) {
        (p.1, vec![p.0])
    } else {
        let hi = pts.iter().position(|p| p.0 > t.bytes)?;
        if hi == 0 {
            return None;
        }
        let (a, b) = (pts[hi - 1], pts[hi]);
        let x = |v: u64| (v as f64).log2();
        let w = (x(t.bytes) - x(a.0)) / (x(b.0) - x(a.0));
        (a.1 + w * (b.1 - a.1), vec![a.0, b.0])
    };
    (sweep_busbw > 0.0).then(|| CommEfficiency {
        bytes: t.bytes,
        train_busbw_gbps: t.busbw_gbps,
        sweep_busbw_gbps: sweep_busbw,
        sweep_bytes,
        ratio: t.busbw_gbps / sweep_busbw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_of_one_size_pool_their_calls_and_use_the_all_reduce_factor() {
        // Two full 4 MB buckets and a 1 MB tail, three steps, 4 ranks.
        let bytes = [4_000_000, 4_000_000, 1_000_000];
        let steps = vec![
            vec![0.004, 0.002, 0.001],
            vec![0.002, 0.002, 0.001],
            vec![0.002, 0.003, 0.002],
        ];
        let own = vec![
            vec![0.001, 0.002, 0.001],
            vec![0.002, 0.001, 0.0005],
            vec![0.001, 0.003, 0.0005],
        ];
        let c = bucket_comm(&bytes, &steps, &own, 4);
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].bytes, c[0].buckets, c[0].samples), (4_000_000, 2, 6));
        assert_eq!(c[0].time_p50_s, 0.002);
        // The own cost pools the same calls: 0.001, 0.002, 0.002, 0.001, 0.001, 0.003.
        assert_eq!(c[0].own_p50_s, 0.0015);
        assert_eq!(c[1].own_p50_s, 0.0005);
        // Without the fastest ranks' times: 0, not a guess.
        assert_eq!(bucket_comm(&bytes, &steps, &[], 4)[0].own_p50_s, 0.0);
        assert!((c[0].algbw_gbps - 2.0).abs() < 1e-12);
        assert!((c[0].busbw_gbps - 3.0).abs() < 1e-12);
        assert_eq!(c[1].time_p50_s, 0.001);
        assert_eq!(bucket_comm(&bytes, &steps, &own, 1)[0].busbw_gbps, 0.0);
    }

    #[test]
    fn efficiency_is_measured_or_interpolated_in_log_size() {
        let train = bucket_comm(&[4 << 20], &[vec![0.01]], &[], 2);
        let busbw = train[0].busbw_gbps;
        let exact = efficiency(&train, &[(1 << 20, 1.0), (4 << 20, busbw * 2.0)]).unwrap();
        assert_eq!(exact.sweep_bytes, vec![4 << 20]);
        assert!((exact.ratio - 0.5).abs() < 1e-12);
        // 4 MiB between 2 MiB (1 GB/s) and 8 MiB (3 GB/s): halfway in log2.
        let mid = efficiency(&train, &[(2 << 20, 1.0), (8 << 20, 3.0)]).unwrap();
        assert_eq!(mid.sweep_bytes, vec![2 << 20, 8 << 20]);
        assert!((mid.sweep_busbw_gbps - 2.0).abs() < 1e-12);
        // Outside the sweep's sizes: no comparison.
        assert_eq!(efficiency(&train, &[(8 << 20, 3.0), (16 << 20, 3.0)]), None);
        assert_eq!(efficiency(&train, &[(1 << 20, 3.0)]), None);
        assert_eq!(efficiency(&[], &[(4 << 20, 3.0)]), None);
    }
}
