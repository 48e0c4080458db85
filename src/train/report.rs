//! Records of a training run (steps.jsonl lines and run.json) and the summary rank 0
//! prints. Plain serde structs; the arithmetic over them is pure and unit-tested.
use super::args::TrainPlan;
use crate::results::provenance::Provenance;
use crate::stats::{self, TimeStats};
use crate::table;
use crate::units::Bytes;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Version of the train run.json / steps.jsonl schema.
pub const SCHEMA_VERSION: u32 = 1;

/// What one rank measured in one step (gathered to rank 0 every step).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RankStep {
    pub loss: f64,
    pub step_s: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    pub allreduce_s: f64,
    pub optimizer_s: f64,
    /// Each gradient bucket's all-reduce call, in exchange order, s.
    #[serde(default)]
    pub bucket_s: Vec<f64>,
}

/// One line of steps.jsonl.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    pub schema_version: u32,
    pub step: u64,
    /// Mean of the ranks' losses (each on its own batch), summed in rank order.
    pub loss: f64,
    /// Slowest rank's step time (forward, backward, gradient exchange, update).
    pub step_s: f64,
    /// Slowest rank's forward + backward.
    pub compute_s: f64,
    /// Slowest rank's gradient exchange (pack, all-reduce, unpack).
    pub comm_s: f64,
    /// Slowest rank's time inside the all-reduce calls.
    pub allreduce_s: f64,
    /// Slowest rank's optimizer update.
    pub optimizer_s: f64,
    /// Per gradient bucket (exchange order), the slowest rank's time inside its
    /// all-reduce call, s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_allreduce_s: Vec<f64>,
    /// Tokens of all ranks in this step / step_s.
    pub tokens_per_s: f64,
    /// The checkpoint written after this step, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub checkpoint: Option<CkptWrite>,
    pub unix: f64,
}

impl StepRecord {
    /// Combine every rank's numbers: the mean loss, the slowest rank's times.
    pub fn from_ranks(step: u64, ranks: &[RankStep], tokens_per_step: u64) -> StepRecord {
        let max = |f: fn(&RankStep) -> f64| ranks.iter().map(f).fold(0.0, f64::max);
        let loss = if ranks.is_empty() {
            f64::NAN
        } else {
            ranks.iter().map(|r| r.loss).sum::<f64>() / ranks.len() as f64
        };
        let step_s = max(|r| r.step_s);
        let buckets = ranks.iter().map(|r| r.bucket_s.len()).max().unwrap_or(0);
        let bucket_allreduce_s = (0..buckets)
            .map(|b| {
                ranks
                    .iter()
                    .filter_map(|r| r.bucket_s.get(b).copied())
                    .fold(0.0, f64::max)
            })
            .collect();
        StepRecord {
            schema_version: SCHEMA_VERSION,
            step,
            loss,
            step_s,
            compute_s: max(|r| r.compute_s),
            comm_s: max(|r| r.comm_s),
            allreduce_s: max(|r| r.allreduce_s),
            optimizer_s: max(|r| r.optimizer_s),
            bucket_allreduce_s,
            tokens_per_s: if step_s > 0.0 {
                tokens_per_step as f64 / step_s
            } else {
                0.0
            },
            checkpoint: None,
            unix: crate::watchdog::unix_seconds(std::time::SystemTime::now()),
        }
    }
}

/// Aggregate read or write speed of all ranks at once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct IoRate {
    /// Bytes over all ranks.
    pub bytes: u64,
    /// Slowest rank's time.
    pub seconds: f64,
    /// bytes / seconds, GB/s (1e9).
    pub gbps: f64,
}

impl IoRate {
    pub fn from_ranks(per_rank: &[(u64, f64)]) -> IoRate {
        let bytes = per_rank.iter().map(|p| p.0).sum();
        let seconds = per_rank.iter().map(|p| p.1).fold(0.0, f64::max);
        IoRate {
            bytes,
            seconds,
            gbps: crate::units::GBps::from_bytes_secs(bytes, seconds).0,
        }
    }
}

/// The checkpoint directory's speed: checkpoints against a plain file of the shard
/// size, written and read the same way.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StorageReport {
    pub dir: PathBuf,
    /// Bytes of one rank's shard.
    pub shard_bytes: u64,
    /// Median aggregate write speed over this run's checkpoints.
    pub ckpt_write_gbps: Option<f64>,
    /// Reading back the last checkpoint (pages dropped after the write).
    pub ckpt_read: Option<IoRate>,
    /// A plain sequential file per rank: write + fsync.
    pub raw_write: Option<IoRate>,
    /// The same file read back after dropping its pages.
    pub raw_read: Option<IoRate>,
    /// ckpt_write_gbps / raw write GB/s.
    pub write_ratio: Option<f64>,
    /// ckpt read GB/s / raw read GB/s.
    pub read_ratio: Option<f64>,
    /// How reads avoid the page cache.
    pub cache_note: String,
}

/// How determinism was asked for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Determinism {
    /// libtorch intra-op threads per rank (1: CPU kernels run in a fixed order).
    pub torch_threads: i32,
    /// CUDA runs: PyTorch's deterministic-algorithms mode was requested.
    pub cuda_deterministic_requested: bool,
    /// ...and libtorch reports it on.
    pub cuda_deterministic_enabled: Option<bool>,
    /// CUBLAS_WORKSPACE_CONFIG in effect (cuBLAS needs it for deterministic results).
    pub cublas_workspace_config: Option<String>,
}

/// run.json of `burnin train`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrainReport {
    pub schema_version: u32,
    pub kind: String,
    pub provenance: Provenance,
    pub plan: TrainPlan,
    /// "cpu" or "cuda".
    pub device: String,
    pub determinism: Determinism,
    pub parameters: u64,
    pub buckets: usize,
    /// Each gradient bucket's size in bytes, in exchange order.
    #[serde(default)]
    pub bucket_bytes: Vec<u64>,
    /// Where the buckets were reduced: in the gradients' own memory ("direct"), or
    /// through host memory ("host-staged", "uploaded"); absent in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_path: Option<GradPath>,
    /// The gradient all-reduce per bucket size: median call time (slowest rank) and
    /// nccl-tests' busbw, over the steps of this run.
    #[serde(default)]
    pub allreduce: Vec<crate::results::comm::BucketComm>,
    /// Tokens of all ranks per step.
    pub tokens_per_step: u64,
    /// The checkpoint this run continued from.
    pub resumed: Option<RestoreRecord>,
    /// First step this run executed (resumed step + 1, or 1).
    pub first_step: u64,
    /// Last step executed (= plan.steps when it ran to the end).
    pub last_step: u64,
    pub steps_run: u64,
    /// Over the steps of this run, slowest rank per step.
    pub step_time: TimeStats,
    /// tokens_per_step / median step time.
    pub tokens_per_s: f64,
    /// Shares of the step time, summed over ranks and steps. The all-reduce share
    /// includes waiting for the slowest rank to arrive.
    pub compute_fraction: f64,
    pub comm_fraction: f64,
    pub allreduce_fraction: f64,
    pub optimizer_fraction: f64,
    /// Loss of each executed step, from first_step on.
    pub losses: Vec<f64>,
    pub checkpoints: Vec<CkptWrite>,
    pub storage: Option<StorageReport>,
    /// sha256 of the final weights (compare runs with it).
    pub final_weights_sha256: String,
    /// Whether every rank ended with the same weights.
    pub replicas_agree: bool,
    /// Problems that make the outcome "fail".
    pub problems: Vec<String>,
    pub outcome: String,
    pub finished_unix: f64,
}

/// A checkpoint write as the records show it (complete on rank 0).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CkptWrite {
    pub step: u64,
    pub dir: PathBuf,
    /// Bytes over all shards.
    pub bytes: u64,
    /// Slowest rank's shard write (write + fsync + rename + dir fsync).
    pub write_s: f64,
    /// All shards' bytes / slowest rank's write time.
    pub write_gbps: f64,
    /// Slowest rank's write of its shard into the page cache (header, then each
    /// tensor's memory as it is): CPU and memory, not storage.
    pub serialize_s: f64,
    /// Slowest rank's fsync of its shard: what the storage costs.
    pub fsync_s: f64,
    /// Slowest rank's read-back for the checksum (page cache).
    pub hash_s: f64,
    /// Training stopped this long for the checkpoint (rank 0: start to manifest and
    /// pruning done).
    pub stall_s: f64,
    /// Older checkpoints deleted (--keep).
    pub pruned: Vec<u64>,
}

/// What a resume did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RestoreRecord {
    pub step: u64,
    pub dir: PathBuf,
    /// Bytes over all shards.
    pub bytes: u64,
    /// From the start of the scan to the state loaded, slowest rank.
    pub restore_s: f64,
    /// Reading the shard files, slowest rank.
    pub read_s: f64,
    /// All shards' bytes / slowest rank's read time.
    pub read_gbps: f64,
    /// Checksumming the shards, slowest rank.
    pub verify_s: f64,
    /// Checkpoints skipped, with why.
    pub skipped: Vec<String>,
    /// The data stream's seed, from the checkpoint.
    pub seed: u64,
}

/// Where the gradient buckets are reduced, relative to where the gradients live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradPath {
    /// In the gradients' own memory kind (GPU memory with NCCL, host memory with
    /// MPI): no copy through another memory.
    Direct,
    /// CUDA gradients through host memory (the MPI backend on a GPU model).
    HostStaged,
    /// CPU gradients uploaded to a GPU for NCCL and downloaded back.
    Uploaded,
}

impl GradPath {
    pub fn describe(self) -> &'static str {
        match self {
            GradPath::Direct => "buckets reduced in place where the gradients live",
            GradPath::HostStaged => "CUDA gradients staged through host memory (MPI backend)",
            GradPath::Uploaded => "CPU gradients uploaded to the GPU for NCCL",
        }
    }
}

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
    row(
        "step time p50 / p99",
        format!(
            "{:.2} / {:.2} ms",
            r.step_time.p50_us / 1e3,
            r.step_time.p99_us / 1e3
        ),
    );
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
