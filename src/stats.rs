//! Statistics over iteration times: an hdrhistogram per measurement for the reported
//! percentiles, and the order-statistic confidence interval of the median that drives
//! adaptive sampling. Pure functions of plain values (no MPI), unit-tested.
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Summary of one rank's (or the combined) iteration times, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct TimeStats {
    /// Fastest iteration, µs (exact).
    pub min_us: f64,
    /// Median iteration, µs (hdrhistogram, 3 significant digits).
    pub p50_us: f64,
    /// Mean iteration, µs (exact).
    pub mean_us: f64,
    /// 99th percentile iteration, µs (hdrhistogram, 3 significant digits).
    pub p99_us: f64,
    /// Slowest iteration, µs (exact).
    pub max_us: f64,
}

impl TimeStats {
    /// "1.20 / 3.40 ms": the median and the 99th percentile, in milliseconds.
    pub fn p50_p99_ms(&self) -> String {
        format!("{:.2} / {:.2} ms", self.p50_us / 1e3, self.p99_us / 1e3)
    }
}

/// Summarise iteration times given in seconds. Percentiles come from an
/// hdrhistogram at nanosecond resolution with 3 significant digits; min, max and
/// mean are exact.
pub fn summarize(times_s: &[f64]) -> TimeStats {
    if times_s.is_empty() {
        return TimeStats::default();
    }
    let mut h = match Histogram::<u64>::new(3) {
        Ok(h) => h,
        Err(_) => return TimeStats::default(),
    };
    let mut min = f64::INFINITY;
    let mut max = 0.0f64;
    let mut sum = 0.0;
    for &t in times_s {
        min = min.min(t);
        max = max.max(t);
        sum += t;
        // hdrhistogram auto-resizes; a value it cannot hold is clamped to 1 ns.
        let _ = h.record(((t * 1e9).round() as u64).max(1));
    }
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
    TimeStats {
        min_us: min * 1e6,
        p50_us: q(0.5),
        mean_us: sum / times_s.len() as f64 * 1e6,
        p99_us: q(0.99),
        max_us: max * 1e6,
    }
}

/// Relative half-width of the ~95% confidence interval of the median, from order
/// statistics (distribution-free): the interval between the sorted samples at ranks
/// n/2 ± 1.96·√n/2. Infinite with fewer than 10 samples.
pub fn median_ci_rel_halfwidth(times: &[f64]) -> f64 {
    let n = times.len();
    if n < 10 {
        return f64::INFINITY;
    }
    let mut s = times.to_vec();
    s.sort_by(f64::total_cmp);
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let mid = n as f64 / 2.0;
    let lo = ((mid - half).floor().max(0.0)) as usize;
    let hi = ((mid + half).ceil() as usize).min(n - 1);
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    if median <= 0.0 {
        return f64::INFINITY;
    }
    (s[hi] - s[lo]) / 2.0 / median
}

/// How ranks' times combine into the collective's time (nccl-tests' `-a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    Rank0,
    Average,
    Min,
    Max,
}

impl Combine {
    pub fn from_flag(a: u8) -> Combine {
        match a {
            0 => Combine::Rank0,
            1 => Combine::Average,
            2 => Combine::Min,
            _ => Combine::Max,
        }
    }
    fn apply(self, v: impl Iterator<Item = f64> + Clone) -> f64 {
        match self {
            Combine::Rank0 => v.clone().next().unwrap_or(0.0),
            Combine::Average => {
                let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
                if n == 0 {
                    0.0
                } else {
                    s / n as f64
                }
            }
            Combine::Min => v.fold(f64::INFINITY, f64::min),
            Combine::Max => v.fold(0.0, f64::max),
        }
    }
}

/// Combine per-rank summaries field by field.
pub fn combine(per_rank: &[TimeStats], how: Combine) -> TimeStats {
    let f = |g: fn(&TimeStats) -> f64| how.apply(per_rank.iter().map(g));
    TimeStats {
        min_us: f(|t| t.min_us),
        p50_us: f(|t| t.p50_us),
        mean_us: f(|t| t.mean_us),
        p99_us: f(|t| t.p99_us),
        max_us: f(|t| t.max_us),
    }
}

/// Median of a list (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let t: Vec<f64> = (1..=100).map(|i| i as f64 * 1e-6).collect();
        let s = summarize(&t);
        assert!((s.min_us - 1.0).abs() < 1e-9);
        assert!((s.max_us - 100.0).abs() < 1e-9);
        assert!((s.mean_us - 50.5).abs() < 1e-9);
        assert!((s.p50_us - 50.0).abs() <= 0.1, "{s:?}");
        assert!((s.p99_us - 99.0).abs() <= 0.1, "{s:?}");
    }

    #[test]
    fn ci_shrinks_with_more_samples_and_is_zero_for_constant_times() {
        assert!(median_ci_rel_halfwidth(&[1.0; 5]).is_infinite());
        assert_eq!(median_ci_rel_halfwidth(&[2.0; 50]), 0.0);
        let noisy = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| 1.0 + ((i * 7919) % 101) as f64 / 1000.0)
                .collect()
        };
        let small = median_ci_rel_halfwidth(&noisy(20));
        let large = median_ci_rel_halfwidth(&noisy(2000));
        assert!(large < small, "{large} < {small}");
        assert!(large < 0.01);
    }

    #[test]
    fn combine_like_nccl_tests_a_flag() {
        let a = TimeStats {
            min_us: 1.0,
            p50_us: 2.0,
            mean_us: 2.0,
            p99_us: 3.0,
            max_us: 4.0,
        };
        let b = TimeStats {
            min_us: 2.0,
            p50_us: 4.0,
            mean_us: 4.0,
            p99_us: 6.0,
            max_us: 8.0,
        };
        assert_eq!(combine(&[a, b], Combine::Max).p50_us, 4.0);
        assert_eq!(combine(&[a, b], Combine::Min).p50_us, 2.0);
        assert_eq!(combine(&[a, b], Combine::Average).p50_us, 3.0);
        assert_eq!(combine(&[a, b], Combine::Rank0).p50_us, 2.0);
        assert_eq!(Combine::from_flag(3), Combine::Max);
    }
}
