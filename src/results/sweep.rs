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

/// What lies between two timed iterations (`--timing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Back to back, as nccl-tests runs them: a rank starts its next call as soon as
    /// its part of the last one is done (burnin's default).
    #[default]
    Batch,
    /// A barrier after every iteration, outside the timed call: the OSU
    /// micro-benchmarks' method, so each call starts with every rank at the line.
    Osu,
}

impl Timing {
    /// `--timing`'s value.
    pub fn parse(s: &str) -> Option<Timing> {
        match s {
            "batch" | "nccl-tests" => Some(Timing::Batch),
            "osu" | "barrier" => Some(Timing::Osu),
            _ => None,
        }
    }
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
    /// What lies between timed iterations (runs before this field: batch).
    #[serde(default)]
    pub timing: Timing,
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
    /// Soak pass (`--duration`) the point belongs to; 0 is the first (or only) pass.
    #[serde(default)]
    pub pass: u32,
    /// When the point's result was known (Unix seconds, on the rank that made it).
    #[serde(default)]
    pub unix: f64,
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
    /// The switch fabric the tiers were judged on: declared (`--fabric`), or the
    /// leaves `--fabric-map` measured when none was declared (its `source` says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<crate::topology::switches::Fabric>,
    /// Which transports carried each tier's traffic (absent with --no-transport and
    /// in runs of burnin versions before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportReport>,
    /// The fabric as measured (`--fabric-map`; absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_map: Option<FabricMap>,
    /// What `--find-slow`'s bisection search found (absent without the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_slow: Option<FindSlow>,
    /// `--duration`'s soak: each series over the passes, drift, corruption (absent
    /// without the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<Soak>,
    /// nccl-tests' footer: average busbw over the world tier's points (GB/s).
    pub avg_busbw_gbps: f64,
    /// Wrong elements over all points, a count (0 when unchecked).
    pub wrong_total: u64,
    /// When the sweep finished, unix seconds.
    pub finished_unix: f64,
    /// pass: no wrong element and the analysis passed; else fail.
    pub outcome: String,
}

/// One leaf switch of the measured fabric map.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct MapLeaf {
    /// The declared switch's name, or "group N" for a leaf found by measurement.
    pub name: String,
    /// Its hosts, in node order.
    pub hosts: Vec<String>,
    /// Per-node rate of a node link inside it: the fast mode (the median of the
    /// readings within 0.85 of the fastest) of every reading of a pair inside it, in
    /// the pair rounds and the injection round (every leaf's nodes paired off, every
    /// pair at once), GB/s (0: a leaf of one node).
    pub injection_gbps: f64,
    /// Per-node rate of the average bisection pair holding one of its nodes, GB/s (0:
    /// none of its nodes was paired).
    pub cross_gbps: f64,
    /// injection over cross: the leaf's oversubscription as measured (0: not measured).
    pub oversubscription: f64,
}

/// `--fabric-map`: the fabric as measured (`topology::fabric_map`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct FabricMap {
    /// Where the leaves come from: "declared" (--fabric) or "measured".
    pub leaves_from: String,
    /// The leaves, with their measured rates.
    pub leaves: Vec<MapLeaf>,
    /// How the leaves were inferred from the pair rates, and how sure (said also when
    /// a fabric was declared: the measurement is checked against it).
    pub inference: String,
    /// The gap the pair rates split at (slowest fast pair over fastest slow one).
    pub separation: f64,
    /// The pairs of the bisection round (each node of one half with a node of the
    /// other, all at once), host names.
    pub bisection_pairs: Vec<(String, String)>,
    /// Their per-node rates, GB/s, in the same order.
    pub bisection_pair_gbps: Vec<f64>,
    /// What crosses the cut each way, GB/s: the sum of the pairs' rates (every pair
    /// streams through it for the same time).
    pub bisection_gbps: f64,
    /// Injection rate of the fabric: a node link's rate, the fast mode of every
    /// reading of a pair inside a leaf, GB/s.
    pub injection_gbps: f64,
    /// The average bisection pair's rate over the injection rate (1: non-blocking).
    pub bisection_fraction: f64,
    /// Injection over the average bisection pair's rate: the fabric's
    /// oversubscription as measured (1 for 1:1).
    pub oversubscription: f64,
    /// The declared oversubscription (--oversubscription), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_oversubscription: Option<f64>,
    /// Where the measurement and the declaration differ, in words.
    pub differences: Vec<String>,
    /// The measurement's limits, in words.
    pub limits: Vec<String>,
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
    /// Its alltoall bus bandwidth at its fastest iteration (the search asks what a
    /// path can carry; a stall only adds time), the best of its measurements, GB/s.
    pub busbw_gbps: f64,
    /// The same as a per-node link rate, GB/s (sweep::find_slow::node_rate), which
    /// does not depend on the group's size, so groups of any size compare.
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
    /// Node pairs of the job: n·(n−1)/2.
    #[serde(default)]
    pub pairs_total: usize,
    /// Node pairs inside a group measured fast (its alltoall crossed them).
    #[serde(default)]
    pub pairs_cleared: usize,
    /// The largest group a pair was cleared in (for each cleared pair the smallest
    /// fast group holding it, the largest of those): a link slower than its peers by
    /// less than about that factor can hide in an alltoall of so many nodes.
    #[serde(default)]
    pub largest_clearing_group: usize,
    /// Node pairs neither cleared nor explained by a slow node or link named: what
    /// the search did not see.
    #[serde(default)]
    pub pairs_open: usize,
    /// Uplinks found slow (`--fabric`): one name each ("leaf2↔spine"), or several
    /// that the groups measured cannot tell apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_uplinks: Vec<Vec<String>>,
    /// What the search could not judge, said (e.g. cross-leaf groups with nothing to
    /// compare with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Every group measured, in order: the path of decisions.
    pub path: Vec<FindSlowStep>,
}

impl FindSlow {
    /// Nothing slow found and every node pair cleared: the all-clear.
    pub fn clean(&self) -> bool {
        self.found_nothing() && self.pairs_cleared >= self.pairs_total && self.pairs_open == 0
    }

    /// No slow node, link or unresolved group (the pairs may still not all be cleared).
    pub fn found_nothing(&self) -> bool {
        self.slow_nodes.is_empty()
            && self.slow_links.is_empty()
            && self.unresolved.is_empty()
            && self.slow_uplinks.is_empty()
    }
}

/// `--duration`: the soak over every pass of the planned tiers and sizes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Soak {
    /// The duration asked for, seconds.
    pub duration_s: f64,
    /// From the first pass's start to the last one's end, seconds.
    pub elapsed_s: f64,
    /// Passes run (every planned tier and size, each).
    pub passes: u32,
    /// `--max-drift`: a series fails when its last passes' busbw fall below this
    /// fraction of its first passes'.
    pub max_drift: f64,
    /// `--max-pass-cv`: a series fails when the coefficient of variation of its busbw
    /// over the passes is above this (None: not judged).
    pub max_pass_cv: Option<f64>,
    /// Passes averaged at each end for the drift (a quarter of them, at least 1); 0
    /// when `drift_window_s` sets the windows.
    pub window_passes: u32,
    /// `--drift-window`: the drift compares the passes of the last this many seconds
    /// of each series with those of its first (absent: the quarters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_window_s: Option<f64>,
    /// Per tier, group, collective, type, op and placement, at the largest size.
    pub series: Vec<SoakSeries>,
    /// Every point with a wrong element, in time order.
    pub wrong: Vec<WrongSeen>,
    /// Hosts in every drifting group (none when the drifting groups share no proper
    /// subset of the job's hosts).
    pub suspects: Vec<String>,
    /// No series drifted or varied past its bound and no element was wrong.
    pub pass: bool,
    /// Each rank's GPU over the soak, from NVML (NCCL backend; empty without GPUs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<SoakGpu>,
    /// Why GPUs were not sampled, or what NVML failed to give ("MPI backend: no GPU").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
}

/// One rank's GPU over a soak: NVML samples on the busbw timeline, so a drop can be
/// read against a throttle or a hot GPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct SoakGpu {
    /// World rank that sampled it.
    pub rank: usize,
    /// Its host.
    pub host: String,
    /// The GPU's PCI bus id.
    pub pci_bus_id: String,
    /// When each sample was taken (Unix seconds).
    pub unix: Vec<f64>,
    /// Temperature per sample, °C (null where NVML gave none).
    pub temp_c: Vec<Option<u32>>,
    /// SM clock per sample, MHz.
    pub sm_mhz: Vec<Option<u32>>,
    /// Whether a throttle reason (thermal, HW slowdown, power brake, sync boost) was
    /// set, per sample.
    pub throttled: Vec<Option<bool>>,
    /// Highest temperature seen, °C.
    pub temp_c_max: Option<u32>,
    /// Lowest SM clock seen, MHz.
    pub sm_mhz_min: Option<u32>,
    /// Share of the samples with a throttle reason (0..1).
    pub throttled_share: f64,
    /// The first throttled sample (Unix seconds).
    pub first_throttled_unix: Option<f64>,
    /// Critical XID events heard during the soak.
    pub xids: Vec<crate::results::gpu::XidEvent>,
    /// What NVML failed to give on this rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One series of a soak: the same measurement, pass after pass.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct SoakSeries {
    /// Its tier.
    pub tier: TierKind,
    /// Its group's name ("world", "node0+node2", ...).
    pub label: String,
    /// The group's hosts.
    pub hosts: Vec<String>,
    /// The collective.
    pub collective: CollKind,
    /// Its element type.
    pub dtype: Dtype,
    /// Its reduction op, if it reduces.
    pub op: Option<RedOp>,
    /// Output buffer = input buffer.
    pub in_place: bool,
    /// The size (the plan's largest).
    pub bytes: u64,
    /// busbw of each pass (GB/s), in pass order.
    pub busbw_gbps: Vec<f64>,
    /// When each pass's point was measured (Unix seconds).
    pub unix: Vec<f64>,
    /// Mean busbw of the first window of passes (GB/s).
    pub first_gbps: f64,
    /// Mean busbw of the last window of passes (GB/s).
    pub last_gbps: f64,
    /// last_gbps / first_gbps.
    pub drift: f64,
    /// Least-squares slope of busbw over time, GB/s per hour.
    pub slope_gbps_per_hour: f64,
    /// Standard deviation over mean of the passes' busbw.
    pub pass_cv: f64,
    /// p99 / p50 of the passes' median times.
    pub pass_time_p99_over_p50: f64,
    /// When busbw first fell below max_drift × first_gbps and stayed below on
    /// average (Unix seconds; None: it did not).
    pub began_unix: Option<f64>,
    /// drift < max_drift.
    pub drifted: bool,
    /// pass_cv > max_pass_cv.
    pub too_variable: bool,
}

/// A point of a soak with wrong elements: when, where, what.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct WrongSeen {
    /// When it was measured (Unix seconds).
    pub unix: f64,
    /// Its pass.
    pub pass: u32,
    /// Its tier.
    pub tier: TierKind,
    /// Its group's name.
    pub label: String,
    /// The collective.
    pub collective: CollKind,
    /// The size.
    pub bytes: u64,
    /// Wrong elements, all ranks.
    pub wrong: u64,
    /// World rank, its host, and the first wrong index, per rank that saw one.
    pub ranks: Vec<(usize, String, usize)>,
}
