//! The arithmetic over a training run's records (`crate::results::train`, re-exported
//! here) and the summary rank 0 prints. Pure and unit-tested.
pub use crate::results::train::*;
use crate::stats::{self, TimeStats};
use crate::table;
use crate::units::Bytes;

/// Human size for messages.
pub fn size(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else {
        Bytes(b).to_string()
    }
}

/// Step-time statistics over records (the slowest rank per step).
pub fn step_stats(steps: &[StepRecord]) -> TimeStats {
    stats::summarize(&steps.iter().map(|s| s.step_s).collect::<Vec<_>>())
}

/// Time summed over every rank and step, for the shares of the step time. (Shares of
/// the slowest rank's numbers would not add up: the rank slowest to compute is not the
/// one that waits longest in the all-reduce.)
#[derive(Clone, Copy, Debug, Default)]
pub struct ShareSums {
    step: f64,
    compute: f64,
    comm: f64,
    allreduce: f64,
    optimizer: f64,
}

impl ShareSums {
    pub fn add(&mut self, ranks: &[RankStep]) {
        for r in ranks {
            self.step += r.step_s;
            self.compute += r.compute_s;
            self.comm += r.comm_s;
            self.allreduce += r.allreduce_s;
            self.optimizer += r.optimizer_s;
        }
    }
    /// Shares of compute, gradient exchange, all-reduce calls, optimizer.
    pub fn fractions(&self) -> [f64; 4] {
        let f = |x: f64| if self.step > 0.0 { x / self.step } else { 0.0 };
        [
            f(self.compute),
            f(self.comm),
            f(self.allreduce),
            f(self.optimizer),
        ]
    }
}

fn gbps(v: Option<f64>) -> String {
    v.map(|g| format!("{g:.3}")).unwrap_or_else(|| "-".into())
}

fn ratio(v: Option<f64>) -> String {
    v.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into())
}

/// The summary rank 0 prints at the end.
pub fn summary(r: &TrainReport) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |k: &str, v: String| rows.push(vec![k.to_string(), v]);
    progress_rows(r, &mut row);
    if r.steps_run > 0 {
        timing_rows(r, &mut row);
    }
    if !r.checkpoints.is_empty() {
        row("checkpoints", checkpoints_line(&r.checkpoints));
    }
    row("determinism", determinism_line(&r.determinism));
    row("final weights sha256", r.final_weights_sha256.clone());
    row(
        "replicas agree",
        if r.replicas_agree { "yes" } else { "NO" }.into(),
    );
    if let Some(d) = &r.replica_divergence {
        let who: Vec<String> = d
            .ranks
            .iter()
            .zip(&d.hosts)
            .map(|(r, h)| format!("rank {r} ({h})"))
            .collect();
        row(
            "replicas first differ",
            format!(
                "after step {}: {}{}",
                d.step,
                who.join(", "),
                if d.majority { "" } else { " (no majority)" }
            ),
        );
    }
    let mut out = table::render(&["metric", "value"], &rows);
    if let Some(s) = &r.storage {
        out.push_str(&storage_section(s));
    }
    for p in &r.problems {
        out.push_str(&format!("# PROBLEM: {p}\n"));
    }
    out
}

/// The summary's rows on where the run started and what it trained.
fn progress_rows(r: &TrainReport, row: &mut impl FnMut(&str, String)) {
    if let Some(res) = &r.resumed {
        row(
            "resumed from",
            format!(
                "step {} ({}), restore {:.3} s, read {:.3} GB/s",
                res.step,
                res.dir.display(),
                res.restore_s,
                res.read_gbps
            ),
        );
    }
    row(
        "steps",
        if r.steps_run == 0 {
            format!("none to run (already at step {})", r.last_step)
        } else {
            format!("{}..{} ({} run)", r.first_step, r.last_step, r.steps_run)
        },
    );
    if let (Some(a), Some(b)) = (r.losses.first(), r.losses.last()) {
        row("loss first -> last", format!("{a:.4} -> {b:.4}"));
    }
}

/// The summary's rows on step time, throughput and the gradient exchange.
fn timing_rows(r: &TrainReport, row: &mut impl FnMut(&str, String)) {
    row("step time p50 / p99", r.step_time.p50_p99_ms());
    row("tokens/s (all ranks)", format!("{:.0}", r.tokens_per_s));
    for b in &r.allreduce {
        row(
            "gradient all-reduce",
            format!(
                "{} x {} per step: p50 {:.3} ms, busbw {:.3} GB/s ({})",
                b.buckets,
                size(b.bytes),
                b.time_p50_s * 1e3,
                b.busbw_gbps,
                r.grad_path.map_or("path not recorded", |p| p.describe())
            ),
        );
    }
    row(
        "compute / grad exchange / optimizer",
        format!(
            "{:.0}% / {:.0}% / {:.0}% of step time (all-reduce calls {:.0}%)",
            r.compute_fraction * 100.0,
            r.comm_fraction * 100.0,
            r.optimizer_fraction * 100.0,
            r.allreduce_fraction * 100.0
        ),
    );
}

/// The summary's line on the checkpoints written (at least one).
fn checkpoints_line(checkpoints: &[CkptWrite]) -> String {
    let stall: f64 = checkpoints.iter().map(|c| c.stall_s).sum();
    let med =
        |f: fn(&CkptWrite) -> f64| stats::median(&checkpoints.iter().map(f).collect::<Vec<_>>());
    format!(
        "{} written, median write {:.3} s (serialize {:.3}, fsync {:.3}) + checksum {:.3} s, training stalled {:.3} s in all",
        checkpoints.len(),
        med(|c| c.write_s),
        med(|c| c.serialize_s),
        med(|c| c.fsync_s),
        med(|c| c.hash_s),
        stall
    )
}

/// The summary's line on determinism.
fn determinism_line(d: &Determinism) -> String {
    match d.cuda_deterministic_enabled {
        None => format!("CPU, {} libtorch thread(s) per rank", d.torch_threads),
        Some(on) => format!(
            "CUDA deterministic algorithms requested, libtorch reports {}",
            if on { "on" } else { "OFF" }
        ),
    }
}

/// The summary's storage section: checkpoint against raw-file rates.
fn storage_section(s: &StorageReport) -> String {
    let mut out = format!(
        "\n# storage: {} (shard {} per rank; {})\n",
        s.dir.display(),
        size(s.shard_bytes),
        s.cache_note
    );
    let raw_w = s.raw_write.as_ref().map(|x| x.gbps);
    let raw_r = s.raw_read.as_ref().map(|x| x.gbps);
    let ck_r = s.ckpt_read.as_ref().map(|x| x.gbps);
    let rows = vec![
        vec!["checkpoint".into(), gbps(s.ckpt_write_gbps), gbps(ck_r)],
        vec!["raw file".into(), gbps(raw_w), gbps(raw_r)],
        vec![
            "ratio ckpt/raw".into(),
            ratio(s.write_ratio),
            ratio(s.read_ratio),
        ],
    ];
    out.push_str(&table::render(&["aggregate GB/s", "write", "read"], &rows));
    out
}

/// a / b when both are known and b > 0.
pub fn ratio_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_record_takes_mean_loss_and_slowest_times() {
        let ranks = [
            RankStep {
                loss: 2.0,
                step_s: 0.1,
                compute_s: 0.06,
                comm_s: 0.03,
                allreduce_s: 0.02,
                optimizer_s: 0.01,
                bucket_s: vec![0.015, 0.005],
            },
            RankStep {
                loss: 4.0,
                step_s: 0.2,
                compute_s: 0.05,
                comm_s: 0.04,
                allreduce_s: 0.01,
                optimizer_s: 0.02,
                bucket_s: vec![0.004, 0.006],
            },
        ];
        let r = StepRecord::from_ranks(7, &ranks, 1000);
        assert_eq!(r.loss, 3.0);
        assert_eq!(r.step_s, 0.2);
        assert_eq!(r.compute_s, 0.06);
        assert_eq!(r.tokens_per_s, 5000.0);
        assert_eq!(r.bucket_allreduce_s, vec![0.015, 0.006]);
        assert_eq!(r.bucket_own_s, vec![0.004, 0.005]);
    }

    #[test]
    fn shares_are_of_the_summed_step_time() {
        let mut s = ShareSums::default();
        s.add(&[
            RankStep {
                step_s: 1.0,
                compute_s: 0.5,
                comm_s: 0.4,
                allreduce_s: 0.3,
                optimizer_s: 0.1,
                loss: 0.0,
                bucket_s: vec![],
            },
            RankStep {
                step_s: 1.0,
                compute_s: 0.7,
                comm_s: 0.2,
                allreduce_s: 0.1,
                optimizer_s: 0.1,
                loss: 0.0,
                bucket_s: vec![],
            },
        ]);
        let f = s.fractions();
        assert!(
            (f[0] - 0.6).abs() < 1e-12 && (f[1] - 0.3).abs() < 1e-12,
            "{f:?}"
        );
        assert_eq!(ShareSums::default().fractions(), [0.0; 4]);
    }

    #[test]
    fn io_rate_is_all_bytes_over_the_slowest_rank() {
        let r = IoRate::from_ranks(&[(1_000_000_000, 1.0), (1_000_000_000, 2.0)]);
        assert_eq!(r.gbps, 1.0);
        assert_eq!(ratio_of(Some(1.0), Some(2.0)), Some(0.5));
        assert_eq!(ratio_of(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio_of(None, Some(1.0)), None);
    }
}
