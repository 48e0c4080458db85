//! Records of a training run: the plan it ran (`TrainPlan`, inside run.json), each
//! step (steps.jsonl lines, and what each rank sends rank 0 every step), and the
//! run's run.json (`TrainReport`) with its checkpoint writes and restores. Written by
//! `burnin train` and `burnin-train`; read back by `report`.
use crate::results::provenance::Provenance;
use crate::stats::TimeStats;
use clap::ValueEnum;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Model size presets.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// ~0.15 M parameters: 4 CPU ranks on 2 cores run ~60 steps in seconds.
    Tiny,
    /// ~34 M parameters: a real load for one GPU per rank.
    GpuSmall,
}

/// Where the model runs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// CUDA (GPU = local rank) when every rank's libtorch sees one, else CPU.
    Auto,
    Cpu,
    Cuda,
}

/// The model's shape: what a checkpoint must match to be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelConfig {
    /// Vocabulary size (tokens).
    pub vocab: i64,
    /// Embedding width; a multiple of `heads`.
    pub width: i64,
    /// Number of transformer blocks.
    pub depth: i64,
    /// Attention heads per block.
    pub heads: i64,
    /// Sequence length, tokens per sample.
    pub seq: i64,
}

impl ModelConfig {
    /// Parameter count (embeddings, blocks, final norm and head, with biases).
    pub fn parameters(&self) -> u64 {
        let (v, d, l, t) = (
            self.vocab as u64,
            self.width as u64,
            self.depth as u64,
            self.seq as u64,
        );
        let block = 2 * 2 * d // two layer norms
            + 3 * d * d + 3 * d // qkv
            + d * d + d // attention projection
            + 4 * d * d + 4 * d // mlp up
            + 4 * d * d + d; // mlp down
        v * d + t * d + l * block + 2 * d + d * v + v
    }

    /// "width 64, depth 2, heads 4, seq 64, vocab 256" for messages.
    pub fn describe(&self) -> String {
        format!(
            "width {}, depth {}, heads {}, seq {}, vocab {}",
            self.width, self.depth, self.heads, self.seq, self.vocab
        )
    }

    /// The fields where `other` differs, as "width 64 (here 128)".
    pub fn differences(&self, here: &ModelConfig) -> Vec<String> {
        let pairs = [
            ("width", self.width, here.width),
            ("depth", self.depth, here.depth),
            ("heads", self.heads, here.heads),
            ("seq", self.seq, here.seq),
            ("vocab", self.vocab, here.vocab),
        ];
        pairs
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(n, a, b)| format!("--{n} {a} (this run: {b})"))
            .collect()
    }
}

/// Which rank dies where (test hook).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiePoint {
    /// The checkpoint (after this step) during which the rank dies.
    pub step: u64,
    /// The point of that checkpoint's write where it SIGKILLs itself.
    pub phase: DiePhase,
    /// The rank that dies.
    pub rank: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DiePhase {
    ShardTmp,
    ShardDone,
    BeforeManifest,
}

/// Validated training configuration, identical on every rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrainPlan {
    /// Model size preset the shape and defaults came from.
    pub preset: Preset,
    /// The model's shape (preset, overridden by flags).
    pub model: ModelConfig,
    /// Samples per rank per step.
    pub batch: i64,
    /// AdamW learning rate.
    pub lr: f64,
    /// Total steps to reach (a resumed run continues up to this step).
    pub steps: u64,
    /// Seed of the initial weights and of the synthetic data.
    pub seed: u64,
    /// Where the model was asked to run (--device).
    pub device: DeviceChoice,
    /// Gradient bucket size for the all-reduce, bytes.
    pub bucket_bytes: u64,
    /// Checkpoint directory: every rank's shards and rank 0's manifests.
    pub ckpt_dir: PathBuf,
    /// A checkpoint every this many steps and at the last step (0: never).
    pub ckpt_every: u64,
    /// Complete checkpoints kept (older ones pruned).
    pub keep: usize,
    /// Every shard padded to at least this many bytes (--ckpt-bytes).
    pub ckpt_bytes: Option<u64>,
    /// Continue from the newest checkpoint whose manifest verifies.
    pub resume: bool,
    /// Folder of run.json and steps.jsonl (None: not written).
    pub out: Option<PathBuf>,
    /// A progress line every this many steps (0: only the summary).
    pub log_every: u64,
    /// Test hook: the rank that SIGKILLs itself, and where (--test-die).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub die: Option<DiePoint>,
    /// The fault this run injects (chaos).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fault: Option<crate::fault::FaultPlan>,
    /// Replicas' weights compared every this many steps (0: at the end only).
    #[serde(default)]
    pub replica_check_every: u64,
    /// Test hook: (rank, step) that changes one weight after the step (--test-diverge).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub diverge: Option<(usize, u64)>,
}

impl TrainPlan {
    /// Whether a checkpoint is written after `step`.
    pub fn checkpoint_due(&self, step: u64) -> bool {
        self.ckpt_every > 0 && (step % self.ckpt_every == 0 || step == self.steps)
    }
}

/// Version of the train run.json / steps.jsonl schema.
pub const SCHEMA_VERSION: u32 = 1;

/// What one rank measured in one step (gathered to rank 0 every step).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct StepRecord {
    /// Version of the train run.json / steps.jsonl schema.
    pub schema_version: u32,
    /// The step, from 1.
    pub step: u64,
    /// Mean of the ranks' losses (each on its own batch), summed in rank order.
    pub loss: f64,
    /// Slowest rank's step time (forward, backward, gradient exchange, update).
    pub step_s: f64,
    /// Slowest rank's forward + backward.
    pub compute_s: f64,
    /// Slowest rank's gradient exchange: pack, all-reduce, the host's waits in it, unpack
    /// (each up to its completion, so they add up to the exchange's wall time).
    pub comm_s: f64,
    /// Slowest rank's time inside the all-reduce calls.
    pub allreduce_s: f64,
    /// Slowest rank's optimizer update.
    pub optimizer_s: f64,
    /// Per gradient bucket (exchange order), the slowest rank's time inside its
    /// all-reduce call, s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_allreduce_s: Vec<f64>,
    /// Per gradient bucket, the fastest rank's time inside its all-reduce call: the
    /// last rank to arrive waits for nobody, so this is the call's own cost without the
    /// ranks' arrival skew, s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_own_s: Vec<f64>,
    /// Tokens of all ranks in this step / step_s.
    pub tokens_per_s: f64,
    /// The checkpoint written after this step, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub checkpoint: Option<CkptWrite>,
    /// When rank 0 combined the step's numbers, unix seconds.
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
        let bucket_own_s = (0..buckets)
            .map(|b| {
                ranks
                    .iter()
                    .filter_map(|r| r.bucket_s.get(b).copied())
                    .reduce(f64::min)
                    .unwrap_or(0.0)
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
            bucket_own_s,
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, JsonSchema)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct StorageReport {
    /// The checkpoint directory measured.
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct TrainReport {
    /// Version of the train run.json / steps.jsonl schema.
    pub schema_version: u32,
    /// Always "train".
    pub kind: String,
    /// Where, when and with what the run ran.
    pub provenance: Provenance,
    /// The validated training configuration.
    pub plan: TrainPlan,
    /// "cpu" or "cuda".
    pub device: String,
    /// How determinism was asked for, and what libtorch reports.
    pub determinism: Determinism,
    /// Model parameters, a count.
    pub parameters: u64,
    /// Gradient buckets each step's all-reduce exchanges, a count.
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
    /// Steps this run executed, a count.
    pub steps_run: u64,
    /// Over the steps of this run, slowest rank per step.
    pub step_time: TimeStats,
    /// tokens_per_step / median step time.
    pub tokens_per_s: f64,
    /// Shares of the step time, summed over ranks and steps. The all-reduce share
    /// includes waiting for the slowest rank to arrive.
    pub compute_fraction: f64,
    /// Gradient exchange's share of the step time, 0..1.
    pub comm_fraction: f64,
    /// The all-reduce calls' share of the step time, 0..1.
    pub allreduce_fraction: f64,
    /// The optimizer update's share of the step time, 0..1.
    pub optimizer_fraction: f64,
    /// Loss of each executed step, from first_step on.
    pub losses: Vec<f64>,
    /// The checkpoints this run wrote, in step order.
    pub checkpoints: Vec<CkptWrite>,
    /// The checkpoint directory's speed (None: no checkpoint written or measured).
    pub storage: Option<StorageReport>,
    /// sha256 of the final weights (compare runs with it).
    pub final_weights_sha256: String,
    /// Whether every rank ended with the same weights.
    pub replicas_agree: bool,
    /// The first step at which a replica's weights differed from the others'
    /// (checked every `plan.replica_check_every` steps and at the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_divergence: Option<ReplicaDivergence>,
    /// Problems that make the outcome "fail".
    pub problems: Vec<String>,
    /// pass, or fail when `problems` is not empty.
    pub outcome: String,
    /// When the report was made, unix seconds.
    pub finished_unix: f64,
}

/// A checkpoint write as the records show it (complete on rank 0).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct CkptWrite {
    /// The step after which it was written.
    pub step: u64,
    /// The checkpoint's folder (CKPT_DIR/step-NNNNNNNNN).
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct RestoreRecord {
    /// The step of the checkpoint restored.
    pub step: u64,
    /// The checkpoint's folder (CKPT_DIR/step-NNNNNNNNN).
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// The name run.json gives it ("direct", "host-staged", "uploaded").
    pub fn name(self) -> &'static str {
        match self {
            GradPath::Direct => "direct",
            GradPath::HostStaged => "host-staged",
            GradPath::Uploaded => "uploaded",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            GradPath::Direct => "buckets reduced in place where the gradients live",
            GradPath::HostStaged => "CUDA gradients staged through host memory (MPI backend)",
            GradPath::Uploaded => "CPU gradients uploaded to the GPU for NCCL",
        }
    }
}

/// The first replica check at which the ranks' weights differed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplicaDivergence {
    /// The step after which the weights were compared.
    pub step: u64,
    /// The ranks named: those differing from the majority, or, with no majority,
    /// every rank.
    pub ranks: Vec<usize>,
    /// Their hosts, in the same order.
    pub hosts: Vec<String>,
    /// Whether a strict majority of the ranks held the same weights.
    pub majority: bool,
}

/// The ranks whose hash differs from the one a strict majority holds (`true`), or
/// every rank when none has a majority (`false`); None when all agree.
pub fn odd_replicas(hashes: &[String]) -> Option<(Vec<usize>, bool)> {
    let first = hashes.first()?;
    if hashes.iter().all(|h| h == first) {
        return None;
    }
    let n = hashes.len();
    match hashes
        .iter()
        .find(|h| 2 * hashes.iter().filter(|x| x == h).count() > n)
    {
        Some(m) => Some(((0..n).filter(|&r| hashes[r] != *m).collect(), true)),
        None => Some(((0..n).collect(), false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_odd_replica_is_the_one_off_the_majority() {
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(odd_replicas(&h(&["a", "a", "a"])), None);
        assert_eq!(odd_replicas(&h(&[])), None);
        assert_eq!(
            odd_replicas(&h(&["a", "a", "b", "a"])),
            Some((vec![2], true))
        );
        assert_eq!(odd_replicas(&h(&["a", "b"])), Some((vec![0, 1], false)));
        assert_eq!(
            odd_replicas(&h(&["a", "a", "b", "b"])),
            Some((vec![0, 1, 2, 3], false))
        );
        assert_eq!(odd_replicas(&h(&["b", "a", "a"])), Some((vec![0], true)));
    }
}
