//! The records of one sweep: its plan, every measured point (points.jsonl) and the
//! whole run (run.json). Written by `burnin sweep`, read by `burnin report` and
//! `compare` through these same types.
use crate::kinds::{CollKind, Dtype, RedOp, TierKind};
use crate::results::analysis::Analysis;
use crate::results::provenance::Provenance;
use crate::stats::{Combine, TimeStats};
use crate::topology::file::Topology;
use crate::transport::TransportReport;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the run.json / points.jsonl schema.
pub const SCHEMA_VERSION: u32 = 1;

/// How many timed iterations to run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum Sampling {
    /// Exactly `iters` after `warmup` (nccl-tests' -n/-w).
    Fixed { warmup: u32, iters: u32 },
    /// Warm up, then batches until the median's 95% CI is within ±`ci` (relative) or
    /// `budget_s` is spent or `max_iters` are done.
    Adaptive {
        warmup: u32,
        ci: f64,
        budget_s: f64,
        max_iters: u32,
    },
}

/// A validated sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// Collectives to run, in run order.
    pub collectives: Vec<CollKind>,
    /// Element types to run.
    pub dtypes: Vec<Dtype>,
    /// Reduction ops to run (reducing collectives only).
    pub ops: Vec<RedOp>,
    /// Message sizes in bytes, in run order.
    pub sizes: Vec<u64>,
    /// false = out-of-place, true = in-place, in run order.
    pub placements: Vec<bool>,
    /// Root rank of rooted collectives (-r), within each group (its last rank where the
    /// group is smaller).
    pub root: usize,
    /// Whether every result is checked against the expected values (-c).
    pub check: bool,
    /// How ranks' times combine into a point's time (-a).
    pub combine: Combine,
    /// How many timed iterations each point runs.
    pub sampling: Sampling,
}

/// One measured (collective, type, op, size, placement) on one group of ranks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Point {
    /// Version of the run.json / points.jsonl schema.
    pub schema_version: u32,
    /// Topology tier ("world", later "intra", "inter", "rail", "pair").
    pub tier: TierKind,
    /// Group index within the tier.
    pub group: usize,
    /// Group name: "world", "node3", "inter", "rail 1", "node0+node3".
    pub label: String,
    /// World ranks in the group.
    pub members: Vec<usize>,
    /// Hosts of the group, deduplicated, in member order.
    pub hosts: Vec<String>,
    /// The collective measured.
    pub collective: CollKind,
    /// Its element type.
    pub dtype: Dtype,
    /// Reduction op (None for data-movement collectives).
    pub op: Option<RedOp>,
    /// Root rank within the group (rooted collectives only).
    pub root: Option<usize>,
    /// Whether the output buffer was the input buffer.
    pub in_place: bool,
    /// Message size (nccl-tests' size column).
    pub bytes: u64,
    /// Elements of the message.
    pub count: usize,
    /// Timed iterations run (identical on every rank).
    pub iterations: usize,
    /// Untimed warm-up iterations before the timed ones.
    pub warmup: u32,
    /// Whether adaptive sampling chose the iteration count.
    pub adaptive: bool,
    /// Achieved relative half-width of the median's 95% CI (worst rank).
    pub ci_half_width: f64,
    /// The collective's time, ranks combined as `combine` says.
    pub time: TimeStats,
    /// How the ranks' times were combined into `time`.
    pub combine: Combine,
    /// Each rank's median time (µs), in group-rank order.
    pub rank_p50_us: Vec<f64>,
    /// Group rank with the largest median.
    pub slowest_rank: usize,
    /// (max − min) / min of the ranks' medians.
    pub rank_spread: f64,
    /// Algorithm bandwidth at the median time: bytes / time (GB/s).
    pub algbw_gbps: f64,
    /// Bus bandwidth at the median time: algbw × the collective's bus factor (GB/s).
    pub busbw_gbps: f64,
    /// Algorithm bandwidth at the mean time (GB/s).
    pub algbw_mean_gbps: f64,
    /// Bus bandwidth at the mean time (GB/s).
    pub busbw_mean_gbps: f64,
    /// Wrong elements over all ranks (None: not checked).
    pub wrong: Option<u64>,
    /// Group ranks that saw wrong elements, with the first wrong index.
    pub wrong_ranks: Vec<(usize, usize)>,
    /// Wall time of this point (buffers allocated to result known) on the rank that
    /// spent the largest share of it outside the timed calls, in seconds.
    #[serde(default)]
    pub wall_s: f64,
    /// Of `wall_s`, the seconds inside the backend's timed calls (warm-up, samples
    /// and the checked call); the rest is allocation, fill, check and sampling
    /// decisions.
    #[serde(default)]
    pub in_calls_s: f64,
}

/// The whole sweep's results (run.json).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct SweepReport {
    /// Version of the run.json / points.jsonl schema.
    pub schema_version: u32,
    /// Always "sweep".
    pub kind: String,
    /// Where, when and with what the sweep ran.
    pub provenance: Provenance,
    /// The validated sweep that ran.
    pub plan: Plan,
    /// Every measured point, in run order.
    pub points: Vec<Point>,
    /// Tier verdicts, outliers and the node-pair matrix.
    pub analysis: Analysis,
    /// The topology file the run was judged against.
    pub topology: Option<Topology>,
    /// Which transports carried each tier's traffic (absent with --no-transport and
    /// in runs of burnin versions before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportReport>,
    /// What `--find-slow`'s bisection search found (absent without the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_slow: Option<FindSlow>,
    /// nccl-tests' footer: average busbw over the world tier's points (GB/s).
    pub avg_busbw_gbps: f64,
    /// Wrong elements over all points, a count (0 when unchecked).
    pub wrong_total: u64,
    /// When the sweep finished, unix seconds.
    pub finished_unix: f64,
    /// pass: no wrong element and the analysis passed; else fail.
    pub outcome: String,
}

/// One group of the bisection search, judged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct FindSlowStep {
    /// Round of the search, from 0.
    pub round: usize,
    /// The group's label ("node0..node3", "node2+node5").
    pub label: String,
    /// Host names of its nodes, in node order.
    pub hosts: Vec<String>,
    /// Its all_reduce bus bandwidth at the largest size, GB/s.
    pub busbw_gbps: f64,
    /// The same as a per-node link rate, GB/s: busbw·(ranks−1)/(nodes−1), which does
    /// not depend on the group's size, so groups of any size compare.
    pub node_rate_gbps: f64,
    /// The rate it was judged against (outlier fraction × the best so far), GB/s.
    pub threshold_gbps: f64,
    /// Below the threshold: the search went into it.
    pub slow: bool,
}

/// `--find-slow`: the bisection search's result (topology::bisect).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct FindSlow {
    /// The outlier fraction that judged every group.
    pub outlier_fraction: f64,
    /// Rounds the search ran.
    pub rounds: usize,
    /// Rounds the pairs tier would take on these nodes, for comparison.
    pub pairs_tier_rounds: usize,
    /// Hosts whose every pair was slow.
    pub slow_nodes: Vec<String>,
    /// Slow links: host pairs that are each fast with another partner.
    pub slow_links: Vec<(String, String)>,
    /// Slow groups the search could not separate further, as host lists.
    pub unresolved: Vec<Vec<String>>,
    /// Every group measured, in order: the path of decisions.
    pub path: Vec<FindSlowStep>,
}

impl FindSlow {
    /// Nothing slow found.
    pub fn clean(&self) -> bool {
        self.slow_nodes.is_empty() && self.slow_links.is_empty() && self.unresolved.is_empty()
    }
}
