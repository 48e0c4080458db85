//! Acceptance cards: what "this reservation is accepted" means, written down before
//! the run starts (TOML in `cards/`, documented in `cards/README.md`).
//!
//! A card names the topology file it is judged against, the phases to run with their
//! workload (probe, gpu, sweep, replay, train, chaos, soak — a section present means
//! the phase runs), the
//! criteria of each phase, and the price, so the report can state the cost of the
//! acceptance and of useful work.
//!
//! ```toml
//! name = "dgx-h100-4node"
//! description = "4 nodes x 8 H100, NVLink 4, 8x NDR"
//! topology = "../topologies/dgx-h100.toml"   # relative to this card
//! launch = "mpirun -np 32 --hostfile hosts"  # launcher prefix; --launch overrides
//! backend = "nccl"                           # --backend of every phase (default auto)
//! step_timeout_s = 120                       # -T of every phase: one blocking step's deadline
//!
//! [cost]
//! price_per_gpu_hour = 2.49                  # per accelerator-hour
//! currency = "USD"
//! gpus = 32                                  # billed accelerators (default: ranks of the run)
//! other_per_hour = { storage = 0.40 }        # other billed components, each counted once
//!
//! [probe]
//! timeout_s = 120                            # the phase's bound (default 300)
//! [probe.criteria]
//! nodes = 4                                  # nodes seen (default: the topology's node.count)
//! ranks_per_node = 8                         # default: the topology's ranks per node
//! gpu_model = "H100"                         # default: the topology's gpu_model
//!
//! [sweep]
//! collectives = ["all_reduce", "all_gather"]
//! tiers = ["all"]
//! min_bytes = "1M"
//! max_bytes = "4G"
//! step_factor = 4
//! budget_s = 2.0                             # adaptive sampling budget per size
//! warmup = 5
//! placement = "out"
//! args = []                                  # further `burnin sweep` flags, verbatim
//! timeout_s = 1800
//! [sweep.criteria]
//! collective = "all_reduce"                  # what the busbw criteria judge
//! at_bytes = "1G"                            # busbw at messages >= this (largest measured if none)
//! min_busbw_gbps = { intra = 400, inter = 40 }   # absolute floors per tier, GB/s
//! min_fraction_of_expected = 0.9             # every tier the topology has a number for
//! no_outlier = true                          # no slow node or link named
//! zero_wrong = true                          # every element of every check right
//! judge_tiers = ["world", "inter", "pairs"]  # tiers the two criteria above judge (default all)
//! nccl_transport_required = true             # inter-node NCCL over NET/IB on >= [inter] nics HCAs
//!                                            # per host (default: on for infiniband/roce topologies)
//!
//! [replay]
//! trace = ["traces/job-42"]                  # the job's NCCL COLL logs or Flight Recorder
//!                                            # dumps (files, or folders of them), relative
//!                                            # to this card
//! grow = "auto"                              # the trace is of fewer ranks: how groups scale
//! baseline = "traces/source-replay.json"     # the source cluster's replay.json (its times)
//! steps = 20
//! [replay.criteria]
//! max_slowdown = 1.25                        # a step here <= 1.25 x the source's
//! zero_wrong = true
//!
//! [train]
//! steps = 200
//! ckpt_every = 50
//! ckpt_bytes = "1G"                          # pad each rank's shard to this size
//! ckpt_dir = "/scratch/burnin-ckpt"          # default: inside the results folder
//! keep_checkpoints = false                   # removed after the phase unless true
//! preset = "gpu-small"
//! args = []
//! timeout_s = 1800
//! [train.criteria]
//! min_ckpt_write_gbps = 5.0                  # aggregate checkpoint write
//! resume_parity = true                       # resumed run == uninterrupted run, bit for bit
//! max_step_p50_ms = 250                      # optional
//!
//! [chaos]
//! kinds = ["kill", "hang"]
//! trials = 3
//! args = []                                  # further `burnin chaos` flags, verbatim
//! timeout_s = 1800
//! [chaos.criteria]
//! max_detect_s = 30                          # inject -> detect, every trial
//! max_recovery_s = 300                       # inject -> first step after the restart
//! no_hang = true                             # every trial ended by itself
//! recovered_parity = true                    # each recovered run == the uninterrupted one
//! ```
//!
//! Errors name the file, the line and the field, as topology files do: TOML and schema
//! errors come from the parser with their span; range checks find the line of the key.
use crate::kinds::CollKind;
use crate::kinds::TierKind;
use crate::topology::file::{parse_toml, Topology};
use crate::units::Bytes;
use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The phases, in the order they run.
/// The soak runs last: the quick phases fail a bad reservation in minutes, before
/// hours of soak are spent on it.
/// The replay comes after the sweep: a job's own collectives, judged beside the
/// sweep's numbers, before the training's minutes are spent.
pub const PHASES: [&str; 7] = ["probe", "gpu", "sweep", "replay", "train", "chaos", "soak"];

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Card {
    /// Short name; the results folder is `<UTC time>-<name>`.
    pub name: String,
    /// Free text shown in the report ("4 nodes x 8 H100, NVLink 4, 8x NDR").
    #[serde(default)]
    pub description: String,
    /// Topology file, relative to the card's own folder (or absolute).
    #[serde(default)]
    pub topology: Option<PathBuf>,
    /// Launcher prefix (`mpirun -np 8 …`); `burnin run --launch` overrides it.
    #[serde(default)]
    pub launch: Option<String>,
    /// `--backend` of every phase: auto, mpi or nccl.
    #[serde(default)]
    pub backend: Option<String>,
    /// `-T` of every phase: the deadline of one blocking step, seconds.
    #[serde(default)]
    pub step_timeout_s: Option<f64>,
    /// Prices, for the cost of the acceptance and of useful work (None: no cost).
    #[serde(default)]
    pub cost: Option<CostSpec>,
    /// The probe phase (runs when present).
    #[serde(default)]
    pub probe: Option<ProbeSpec>,
    /// The GPU health phase (runs when present).
    #[serde(default)]
    pub gpu: Option<GpuPhaseSpec>,
    /// The sweep phase (runs when present).
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    /// The replay of a job's own trace (runs when present).
    #[serde(default)]
    pub replay: Option<ReplaySpec>,
    /// The train phase (runs when present).
    #[serde(default)]
    pub train: Option<TrainSpec>,
    /// The chaos phase (runs when present).
    #[serde(default)]
    pub chaos: Option<ChaosSpec>,
    /// The soak phase (runs when present).
    #[serde(default)]
    pub soak: Option<SoakSpec>,
}

/// Prices. Each billed component is counted once (DESIGN.md: cost per completed unit).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    /// Price of one accelerator for one hour.
    pub price_per_gpu_hour: f64,
    /// Currency of every price (default "USD").
    #[serde(default = "default_currency")]
    pub currency: String,
    /// Billed accelerators (default: the run's ranks, one per GPU).
    #[serde(default)]
    pub gpus: Option<usize>,
    /// Other billed components per hour of the reservation (host, storage, network,
    /// support…), by name.
    #[serde(default)]
    pub other_per_hour: BTreeMap<String, f64>,
}

fn default_currency() -> String {
    "USD".into()
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// The phase's bound, seconds (default 300).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the probe must find.
    #[serde(default)]
    pub criteria: ProbeCriteria,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeCriteria {
    /// Nodes the job must span (default: the topology's node.count).
    #[serde(default)]
    pub nodes: Option<usize>,
    /// Ranks on every node (default: the topology's ranks per node).
    #[serde(default)]
    pub ranks_per_node: Option<usize>,
    /// Substring of every rank's GPU name (default: the topology's gpu_model).
    #[serde(default)]
    pub gpu_model: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Collectives to sweep (-c; default all_reduce).
    #[serde(default = "default_collectives")]
    pub collectives: Vec<String>,
    /// Topology tiers to measure (--tiers; default all).
    #[serde(default = "default_tiers")]
    pub tiers: Vec<String>,
    /// Smallest message size (-b), bytes ("1M" and such suffixes allowed).
    pub min_bytes: Bytes,
    /// Largest message size (-e), bytes ("4G" and such suffixes allowed).
    pub max_bytes: Bytes,
    /// Size multiplier between sizes (-f; at least 2).
    #[serde(default)]
    pub step_factor: Option<u64>,
    /// Adaptive sampling's time budget per size and placement, seconds (--budget).
    #[serde(default)]
    pub budget_s: Option<f64>,
    /// Warm-up iterations per size (-w).
    #[serde(default)]
    pub warmup: Option<u32>,
    /// Fixed iterations per size (adaptive sampling when absent).
    #[serde(default)]
    pub iters: Option<u32>,
    /// out, in or both (--placement).
    #[serde(default)]
    pub placement: Option<String>,
    /// Element types (-d), a comma list (default f32).
    #[serde(default)]
    pub dtype: Option<String>,
    /// Further `burnin sweep` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// The switch fabric, a Slurm topology.conf relative to the card's folder
    /// (`--fabric`): node pairs are judged against pairs the fabric lets run alike.
    #[serde(default)]
    pub fabric: Option<PathBuf>,
    /// The fabric's declared oversubscription (4 for 4:1; `--oversubscription`).
    #[serde(default)]
    pub oversubscription: Option<f64>,
    /// Map the fabric as measured (`--fabric-map`): which nodes share a leaf, its
    /// injection and bisection bandwidth, the oversubscription. On by itself when a
    /// criterion needs the map.
    #[serde(default)]
    pub fabric_map: bool,
    /// The phase's bound, seconds (default 1800).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the sweep must reach.
    #[serde(default)]
    pub criteria: SweepCriteria,
}

fn default_collectives() -> Vec<String> {
    vec!["all_reduce".into()]
}
fn default_tiers() -> Vec<String> {
    vec!["all".into()]
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepCriteria {
    /// The collective the busbw criteria judge.
    #[serde(default = "default_collective")]
    pub collective: String,
    /// busbw is judged at messages of at least this size (the largest measured when
    /// none reaches it).
    #[serde(default)]
    pub at_bytes: Option<Bytes>,
    /// Absolute floors per tier (world, intra, inter, rails, pairs), GB/s: the tier's
    /// slowest group must reach it.
    #[serde(default)]
    pub min_busbw_gbps: BTreeMap<String, f64>,
    /// Every tier's slowest group ≥ this fraction of the topology's expectation.
    #[serde(default)]
    pub min_fraction_of_expected: Option<f64>,
    /// A group below this fraction of its tier's median is an outlier (default: the
    /// topology's outlier_fraction, else 0.8).
    #[serde(default)]
    pub outlier_fraction: Option<f64>,
    /// No node or link named as an outlier.
    #[serde(default = "yes")]
    pub no_outlier: bool,
    /// Zero wrong elements in every correctness check.
    #[serde(default = "yes")]
    pub zero_wrong: bool,
    /// Tiers the expectation and outlier criteria judge (default: every tier run).
    /// The others are still measured and shown.
    #[serde(default)]
    pub judge_tiers: Vec<String>,
    /// Inter-node NCCL traffic went over the RDMA fabric: NET/IB (InfiniBand or
    /// RoCE), never NET/Socket, on at least the topology's `[inter] nics` adapters of
    /// every host, as NCCL's own log says. Default: on when the topology's `[inter]
    /// nic_kind` is infiniband or roce. Not applicable without NCCL logs (MPI backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_transport_required: Option<bool>,
    /// The fabric map's bisection bandwidth over its injection bandwidth must reach
    /// this (1: non-blocking; 0.5 allows 2:1). Maps the fabric (`--fabric-map`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bisection_fraction: Option<f64>,
    /// The fabric's oversubscription as measured must be at most this (2 for 2:1).
    /// Maps the fabric (`--fabric-map`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_oversubscription: Option<f64>,
}

fn default_collective() -> String {
    "all_reduce".into()
}
fn yes() -> bool {
    true
}

impl Default for SweepCriteria {
    fn default() -> Self {
        SweepCriteria {
            collective: default_collective(),
            at_bytes: None,
            min_busbw_gbps: BTreeMap::new(),
            min_fraction_of_expected: None,
            outlier_fraction: None,
            no_outlier: true,
            zero_wrong: true,
            judge_tiers: Vec::new(),
            nccl_transport_required: None,
            min_bisection_fraction: None,
            max_oversubscription: None,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuPhaseSpec {
    /// Seconds of compute burn per GPU (--burn; default 60).
    #[serde(default)]
    pub burn_s: Option<f64>,
    /// Bytes of each host/device and device-local copy (--copy-bytes).
    #[serde(default)]
    pub copy_bytes: Option<Bytes>,
    /// Seconds of silent-data-corruption rounds after the burn, voted across the
    /// ranks of one GPU (or CPU) model (--sdc; default: none). Judged as `gpu.sdc`.
    #[serde(default)]
    pub sdc_s: Option<f64>,
    /// Seconds of device memory test after the burn (--memtest; one pass at least;
    /// default: none). Judged as `gpu.memtest`.
    #[serde(default)]
    pub memtest_s: Option<f64>,
    /// Share of each GPU's free memory the test covers (--memtest-share; default 0.9).
    #[serde(default)]
    pub memtest_share: Option<f64>,
    /// Run `dcgmi diag -r 1 -j` on each node after the burn when DCGM is installed
    /// (--dcgm-diag; default: when the criterion `dcgm_diag` is on).
    #[serde(default)]
    pub dcgm_diag: Option<bool>,
    /// Further `burnin gpu` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// The phase's bound, seconds (default 900).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What every GPU must reach.
    #[serde(default)]
    pub criteria: GpuCriteria,
}

/// The GPU health criteria. Fractions are of the topology's `[gpu]` numbers; a
/// criterion whose number the topology lacks (and that has no absolute floor) is NOT
/// RUN with that reason.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuCriteria {
    /// Host→device and device→host (pinned) floor, GB/s.
    #[serde(default)]
    pub min_host_copy_gbps: Option<f64>,
    /// Host copies as a fraction of the topology's `host_copy_gbps`.
    #[serde(default)]
    pub min_host_copy_fraction: Option<f64>,
    /// Device-local memory bandwidth as a fraction of the topology's `memory_gbps`.
    #[serde(default)]
    pub min_memory_fraction: Option<f64>,
    /// Every pair's peer copy as a fraction of the topology's `peer_gbps`.
    #[serde(default)]
    pub min_peer_fraction: Option<f64>,
    /// No pair below `pair_outlier_fraction` × its node's median pair.
    #[serde(default = "yes")]
    pub no_pair_outlier: bool,
    /// What "below the median pair" means (default 0.8).
    #[serde(default)]
    pub pair_outlier_fraction: Option<f64>,
    /// Burn floor per GPU, TFLOP/s.
    #[serde(default)]
    pub min_tflops: Option<f64>,
    /// Burn per GPU as a fraction of the topology's `fp32_tflops`.
    #[serde(default)]
    pub min_tflops_fraction: Option<f64>,
    /// Largest spread of the burn's TFLOP/s across all GPUs: (fastest − slowest) /
    /// fastest (0.1 = the slowest is within 10% of the fastest).
    #[serde(default)]
    pub max_tflops_spread: Option<f64>,
    /// Largest share of the burn a GPU may spend throttled (thermal, HW slowdown,
    /// power brake, sync boost; not idle and not the software power cap), 0..1.
    #[serde(default)]
    pub max_throttled_share: Option<f64>,
    /// Every GPU's PCIe link at its maximum generation and width under load.
    #[serde(default = "yes")]
    pub pcie_at_max: bool,
    /// No new uncorrected ECC error, row-remapping failure or pending retirement, and
    /// no XID event, from the start of the phase to the end of the acceptance.
    #[serde(default = "yes")]
    pub zero_new_errors: bool,
    /// Most SDC disagreements allowed (a rank's output hash differing from its
    /// model's majority, or a vote without a majority), over all rounds (default 0;
    /// judged when the phase ran SDC rounds, `[gpu] sdc_s`).
    #[serde(default)]
    pub max_sdc_disagreements: Option<u64>,
    /// Every copy verified and every burn result right.
    #[serde(default = "yes")]
    pub zero_wrong: bool,
    /// DCGM's diagnostic (`dcgmi diag -r 1`) passed every test on every node (NOT
    /// RUN where DCGM is not installed).
    #[serde(default)]
    pub dcgm_diag: bool,
    /// The share of each GPU's free memory the memory test must cover, 0..1 (default
    /// 0.9; judged when the phase ran the test, `[gpu] memtest_s`): any failing word
    /// FAILs.
    #[serde(default)]
    pub min_memtest_share: Option<f64>,
    /// Every GPU of a model in cards/floors/gpu-floors.toml at its floors: device memory,
    /// FP32 burn and host copies each at least a fraction of NVIDIA's published peak
    /// (NOT RUN when no GPU is of a model the table has).
    #[serde(default)]
    pub model_floors: bool,
}

impl Default for GpuCriteria {
    fn default() -> Self {
        GpuCriteria {
            min_host_copy_gbps: None,
            min_host_copy_fraction: None,
            min_memory_fraction: None,
            min_peer_fraction: None,
            no_pair_outlier: true,
            pair_outlier_fraction: None,
            min_tflops: None,
            min_tflops_fraction: None,
            max_tflops_spread: None,
            max_throttled_share: None,
            pcie_at_max: true,
            zero_new_errors: true,
            max_sdc_disagreements: None,
            zero_wrong: true,
            dcgm_diag: false,
            min_memtest_share: None,
            model_floors: false,
        }
    }
}

/// `burnin replay` of a job's trace (NCCL COLL logs or Flight Recorder dumps).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    /// The trace's files (or folders of them), relative to the card's folder (or
    /// absolute).
    pub trace: Vec<PathBuf>,
    /// auto, nccl or flight-recorder (--format; default auto).
    #[serde(default)]
    pub format: Option<String>,
    /// Steps timed (--steps; default 20).
    #[serde(default)]
    pub steps: Option<u32>,
    /// Steps before timing (--warmup; default 2).
    #[serde(default)]
    pub warmup: Option<u32>,
    /// Calls of one step per rank (--step-calls; default: the repeating block).
    #[serde(default)]
    pub step_calls: Option<usize>,
    /// How the trace's communicators scale to more ranks (--grow): "auto" or ids.
    #[serde(default)]
    pub grow: Option<String>,
    /// Where each trace rank runs (--rank-map): job rank of trace rank 0, 1, …
    /// (default: the same rank, contiguous per node).
    #[serde(default)]
    pub rank_map: Option<Vec<usize>>,
    /// A replay.json of the same trace on the source cluster, relative to the card's
    /// folder: the source's times (--baseline).
    #[serde(default)]
    pub baseline: Option<PathBuf>,
    /// Further `burnin replay` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// The phase's bound, seconds (default 600).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the replay must show.
    #[serde(default)]
    pub criteria: ReplayCriteria,
}

/// What the replay must show.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayCriteria {
    /// A step's communication time here at most this many times the source's
    /// (needs the source's times: a Flight Recorder trace, or `baseline`).
    #[serde(default)]
    pub max_slowdown: Option<f64>,
    /// Every element of the checked step right.
    #[serde(default = "yes")]
    pub zero_wrong: bool,
}

impl Default for ReplayCriteria {
    fn default() -> Self {
        ReplayCriteria {
            max_slowdown: None,
            zero_wrong: true,
        }
    }
}

impl ReplaySpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        if self.trace.is_empty() {
            return Err(anyhow!(
                "{}: name at least one file of the job's trace",
                cx.at("replay", "trace")
            ));
        }
        if let Some(f) = &self.format {
            if !["auto", "nccl", "flight-recorder", "profiler"].contains(&f.as_str()) {
                return Err(anyhow!(
                    "{}: unknown format '{f}' (auto, nccl, flight-recorder, profiler)",
                    cx.at("replay", "format")
                ));
            }
        }
        if self.steps == Some(0) {
            return Err(anyhow!("{}: must be at least 1", cx.at("replay", "steps")));
        }
        if self.step_calls == Some(0) {
            return Err(anyhow!(
                "{}: must be at least 1",
                cx.at("replay", "step_calls")
            ));
        }
        if let Some(g) = &self.grow {
            crate::kinds::Grow::parse(g).map_err(|e| {
                anyhow!(
                    "{}: {}",
                    cx.at("replay", "grow"),
                    e.trim_start_matches("--grow: ")
                )
            })?;
        }
        cx.positive("replay", "timeout_s", self.timeout_s)?;
        cx.positive(
            "replay.criteria",
            "max_slowdown",
            self.criteria.max_slowdown,
        )
    }

    /// The trace's files and the baseline, resolved against the card's folder.
    pub fn paths(&self, card_path: &Path) -> (Vec<PathBuf>, Option<PathBuf>) {
        let base = card_path.parent().unwrap_or(Path::new("."));
        let at = |p: &PathBuf| {
            if p.is_absolute() {
                p.clone()
            } else {
                base.join(p)
            }
        };
        (
            self.trace.iter().map(at).collect(),
            self.baseline.as_ref().map(at),
        )
    }

    /// Every file it names exists (checked when the card is loaded, before any phase).
    fn check_files(&self, cx: &Field, card_path: &Path) -> Result<()> {
        let (trace, baseline) = self.paths(card_path);
        for p in &trace {
            if !p.exists() {
                return Err(anyhow!(
                    "{}: {}: no such file",
                    cx.at("replay", "trace"),
                    p.display()
                ));
            }
        }
        match baseline {
            Some(b) if !b.is_file() => Err(anyhow!(
                "{}: {}: no such file",
                cx.at("replay", "baseline"),
                b.display()
            )),
            _ => Ok(()),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    /// Training steps (--steps).
    pub steps: u64,
    /// A checkpoint every this many steps (--ckpt-every).
    #[serde(default)]
    pub ckpt_every: Option<u64>,
    /// Each rank's shard padded to this size, bytes (--ckpt-bytes).
    #[serde(default)]
    pub ckpt_bytes: Option<Bytes>,
    /// Checkpoint directory (default: inside the results folder). With a resume
    /// check, the resumed pair of jobs uses `<dir>-resume`.
    #[serde(default)]
    pub ckpt_dir: Option<PathBuf>,
    /// Model size preset (--preset): tiny or gpu-small.
    #[serde(default)]
    pub preset: Option<String>,
    /// Keep the checkpoints after the phase (default: removed once judged — the JSON
    /// keeps every number, and real checkpoints are large).
    #[serde(default)]
    pub keep_checkpoints: bool,
    /// Further `burnin train` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// Bound of each training job.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the training must reach.
    #[serde(default)]
    pub criteria: TrainCriteria,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainCriteria {
    /// Aggregate checkpoint write speed, GB/s.
    #[serde(default)]
    pub min_ckpt_write_gbps: Option<f64>,
    /// A run stopped at a checkpoint and resumed ends with the uninterrupted run's
    /// weights (sha256) and losses, bit for bit.
    #[serde(default = "yes")]
    pub resume_parity: bool,
    /// Median step time ceiling, ms.
    #[serde(default)]
    pub max_step_p50_ms: Option<f64>,
    /// The training's gradient all-reduce busbw at its bucket size as a fraction of
    /// the sweep's world-tier all_reduce busbw at the same size (needs both phases;
    /// the sweep's sizes must reach the bucket size).
    #[serde(default)]
    pub min_comm_efficiency: Option<f64>,
}

impl Default for TrainCriteria {
    fn default() -> Self {
        TrainCriteria {
            min_ckpt_write_gbps: None,
            resume_parity: true,
            max_step_p50_ms: None,
            min_comm_efficiency: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChaosSpec {
    /// Faults to inject: kill, hang, exit, slow, corrupt-ckpt, node-loss:nodeI,
    /// link-cut:nodeI (the last two on the simulated cluster).
    #[serde(default = "default_kinds")]
    pub kinds: Vec<String>,
    /// Trials per kind.
    #[serde(default = "one")]
    pub trials: u32,
    /// Further `burnin chaos` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// The whole `burnin chaos` argument list, replacing the default one; `{launch}`,
    /// `{out}`, `{kinds}`, `{trials}` and `{burnin}` are substituted.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Keep the checkpoints the trials wrote (default: removed once the phase ends).
    #[serde(default)]
    pub keep_checkpoints: bool,
    /// The phase's bound, seconds (default 1800).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the recoveries must reach.
    #[serde(default)]
    pub criteria: ChaosCriteria,
}

fn default_kinds() -> Vec<String> {
    vec!["kill".into()]
}
fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChaosCriteria {
    /// Inject to detect, seconds, every trial.
    #[serde(default)]
    pub max_detect_s: Option<f64>,
    /// Inject to the first step after the restart, seconds, every trial.
    #[serde(default)]
    pub max_recovery_s: Option<f64>,
    /// No trial hung (every fault was detected and the job ended or recovered).
    #[serde(default = "yes")]
    pub no_hang: bool,
    /// Every recovered run ends with the uninterrupted run's weights and losses.
    #[serde(default)]
    pub recovered_parity: bool,
}

impl Default for ChaosCriteria {
    fn default() -> Self {
        ChaosCriteria {
            max_detect_s: None,
            max_recovery_s: None,
            no_hang: true,
            recovered_parity: false,
        }
    }
}

/// The soak phase: `burnin sweep --duration`, one message size measured on the same
/// tiers pass after pass until the time is up, judged on drift, variability and
/// corruption over the whole soak.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SoakSpec {
    /// How long to soak, seconds (--duration): passes start while one more fits.
    pub duration_s: f64,
    /// The message size of every pass, bytes (default: [sweep]'s max_bytes; required
    /// without a [sweep] section).
    #[serde(default)]
    pub bytes: Option<Bytes>,
    /// Collectives of every pass (default: [sweep]'s, else all_reduce).
    #[serde(default)]
    pub collectives: Option<Vec<String>>,
    /// Tiers of every pass (default: [sweep]'s, else all).
    #[serde(default)]
    pub tiers: Option<Vec<String>>,
    /// Adaptive sampling's time budget per pass, tier and placement, seconds (--budget).
    #[serde(default)]
    pub budget_s: Option<f64>,
    /// Fixed iterations per pass (adaptive sampling when absent).
    #[serde(default)]
    pub iters: Option<u32>,
    /// Element types (-d), a comma list (default f32).
    #[serde(default)]
    pub dtype: Option<String>,
    /// Further `burnin sweep` flags, passed verbatim.
    #[serde(default)]
    pub args: Vec<String>,
    /// The phase's bound, seconds (default: duration_s plus a tenth, at least 600 s
    /// more).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// What the soak must hold.
    #[serde(default)]
    pub criteria: SoakCriteria,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SoakCriteria {
    /// Every series' mean busbw over its last quarter of passes ≥ this fraction of its
    /// first quarter's (--max-drift; default 0.9).
    #[serde(default = "default_max_drift")]
    pub max_drift: f64,
    /// Every series' coefficient of variation of busbw over the passes ≤ this
    /// (--max-pass-cv; not judged when absent).
    #[serde(default)]
    pub max_pass_cv: Option<f64>,
    /// The drift compares the passes of the last this many seconds with those of the
    /// first (--drift-window, e.g. 3600: the last hour against the first; at most
    /// half of duration_s; default: the last and first quarters of the passes).
    #[serde(default)]
    pub drift_window_s: Option<f64>,
    /// Zero wrong elements over the whole soak.
    #[serde(default = "yes")]
    pub zero_wrong: bool,
}

fn default_max_drift() -> f64 {
    0.9
}

impl Default for SoakCriteria {
    fn default() -> Self {
        SoakCriteria {
            max_drift: default_max_drift(),
            max_pass_cv: None,
            drift_window_s: None,
            zero_wrong: true,
        }
    }
}

impl SoakSpec {
    /// The one size of every pass: `bytes`, else the sweep's largest.
    pub fn size(&self, sweep: Option<&SweepSpec>) -> Option<Bytes> {
        self.bytes.or(sweep.map(|s| s.max_bytes))
    }

    /// The phase's bound, seconds.
    pub fn bound_s(&self) -> f64 {
        self.timeout_s
            .unwrap_or(self.duration_s + (self.duration_s / 10.0).max(600.0))
    }

    fn validate(&self, cx: &Field, sweep: Option<&SweepSpec>) -> Result<()> {
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err(anyhow!(
                "{}: {} must be a positive number of seconds",
                cx.at("soak", "duration_s"),
                self.duration_s
            ));
        }
        match self.size(sweep) {
            None => {
                return Err(anyhow!(
                    "{}: required without a [sweep] section (the message size of every pass)",
                    cx.at("soak", "bytes")
                ))
            }
            Some(b) if b.get() == 0 => {
                return Err(anyhow!(
                    "{}: must be at least 1 byte",
                    cx.at("soak", "bytes")
                ))
            }
            Some(_) => {}
        }
        cx.collectives("soak", self.collectives.as_deref().unwrap_or_default())?;
        cx.tiers("soak", self.tiers.as_deref().unwrap_or_default())?;
        cx.positive("soak", "budget_s", self.budget_s)?;
        cx.positive("soak", "timeout_s", self.timeout_s)?;
        cx.fraction("soak.criteria", "max_drift", Some(self.criteria.max_drift))?;
        cx.positive(
            "soak.criteria",
            "drift_window_s",
            self.criteria.drift_window_s,
        )?;
        if let Some(w) = self
            .criteria
            .drift_window_s
            .filter(|w| *w > self.duration_s / 2.0)
        {
            return Err(anyhow!(
                "{}: {w} is more than half of duration_s {}: the first and last windows would overlap",
                cx.at("soak.criteria", "drift_window_s"),
                self.duration_s
            ));
        }
        cx.positive("soak.criteria", "max_pass_cv", self.criteria.max_pass_cv)
    }
}

/// The 1-based line of `key` inside `[table]` (dotted, "" for the top level; in an
/// array of tables, the first that has the key), for errors found after parsing. The
/// position comes from toml_edit's spans of the parsed document.
pub fn line_of(text: &str, table: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut tables: Vec<&toml_edit::Table> = vec![doc.as_table()];
    for part in table.split('.').filter(|p| !p.is_empty()) {
        tables = tables
            .iter()
            .filter_map(|t| t.get(part))
            .flat_map(|item| match item {
                toml_edit::Item::Table(t) => vec![t],
                toml_edit::Item::ArrayOfTables(a) => a.iter().collect(),
                _ => Vec::new(),
            })
            .collect();
    }
    let at = tables
        .iter()
        .find_map(|t| t.key(key).and_then(|k| k.span()))?
        .start;
    Some(text[..at].matches('\n').count() + 1)
}

impl Card {
    /// Parse and validate card text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Card> {
        let card: Card = parse_toml(text, file)?;
        card.validate(text, file)?;
        Ok(card)
    }

    /// Read a card file.
    pub fn load(path: &Path) -> Result<Card> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("--card: cannot read {}: {e}", path.display()))?;
        let file = path.display().to_string();
        let card = Card::parse(&text, &file)?;
        if let Some(r) = &card.replay {
            r.check_files(
                &Field {
                    text: &text,
                    file: &file,
                },
                path,
            )?;
        }
        Ok(card)
    }

    /// The topology file's path, resolved against the card's folder.
    pub fn topology_path(&self, card_path: &Path) -> Option<PathBuf> {
        let t = self.topology.as_ref()?;
        if t.is_absolute() {
            return Some(t.clone());
        }
        let base = card_path.parent().unwrap_or(Path::new("."));
        Some(base.join(t))
    }

    /// Load the topology the card names (None when it names none).
    pub fn load_topology(&self, card_path: &Path) -> Result<Option<Topology>> {
        match self.topology_path(card_path) {
            None => Ok(None),
            Some(p) => Topology::load(&p)
                .with_context(|| format!("{}: topology", card_path.display()))
                .map(Some),
        }
    }

    /// The phases this card runs, in order.
    pub fn phases(&self) -> Vec<&'static str> {
        PHASES
            .into_iter()
            .filter(|p| match *p {
                "probe" => self.probe.is_some(),
                "gpu" => self.gpu.is_some(),
                "sweep" => self.sweep.is_some(),
                "replay" => self.replay.is_some(),
                "train" => self.train.is_some(),
                "chaos" => self.chaos.is_some(),
                _ => self.soak.is_some(),
            })
            .collect()
    }

    /// Every range check, section by section, in the order the card reads.
    fn validate(&self, text: &str, file: &str) -> Result<()> {
        let cx = Field { text, file };
        self.validate_top(&cx)?;
        if let Some(c) = &self.cost {
            c.validate(&cx)?;
        }
        if let Some(p) = &self.probe {
            p.validate(&cx)?;
        }
        if let Some(g) = &self.gpu {
            g.validate(&cx)?;
        }
        if let Some(s) = &self.sweep {
            s.validate(&cx)?;
        }
        if let Some(r) = &self.replay {
            r.validate(&cx)?;
        }
        if let Some(t) = &self.train {
            t.validate(&cx)?;
        }
        if let Some(c) = &self.chaos {
            c.validate(&cx)?;
            // A hang is named by the ranks' deadline (-T, the step timeout): a
            // detection limit at or below it can only fail, whatever the cluster.
            if let (true, Some(t), Some(d)) = (
                c.kinds.iter().any(|k| k == "hang"),
                self.step_timeout_s,
                c.criteria.max_detect_s,
            ) {
                if d <= t {
                    return Err(anyhow!(
                        "{}: {d} s, but a hang trial is named only when the ranks' deadline step_timeout_s = {t} s runs out: give more than {t} s (the deadline plus teardown), or a shorter step_timeout_s",
                        cx.at("chaos.criteria", "max_detect_s")
                    ));
                }
            }
        }
        if let Some(k) = &self.soak {
            k.validate(&cx, self.sweep.as_ref())?;
        }
        if self.phases().is_empty() {
            return Err(anyhow!(
                "{file}: no phase to run: add at least one of [probe], [gpu], [sweep], [replay], [train], [chaos], [soak]"
            ));
        }
        Ok(())
    }

    /// The top-level keys: name, backend, step_timeout_s, launch.
    fn validate_top(&self, cx: &Field) -> Result<()> {
        if self.name.trim().is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(anyhow!(
                "{}: '{}' must be letters, digits, '-', '_' or '.' (it names the results folder)",
                cx.at("", "name"),
                self.name
            ));
        }
        if let Some(b) = &self.backend {
            if !["auto", "mpi", "nccl"].contains(&b.as_str()) {
                return Err(anyhow!(
                    "{}: unknown backend '{b}' (auto, mpi, nccl)",
                    cx.at("", "backend")
                ));
            }
        }
        cx.positive("", "step_timeout_s", self.step_timeout_s)?;
        if let Some(l) = &self.launch {
            split_launch(l).map_err(|e| anyhow!("{}: {e}", cx.at("", "launch")))?;
        }
        Ok(())
    }
}

/// The card's text and file name, to name a field in an error: `file:line: table.key`
/// (the line when the key is found in its table).
struct Field<'a> {
    text: &'a str,
    file: &'a str,
}

impl Field<'_> {
    /// `card.toml:12: sweep.min_bytes`.
    fn at(&self, table: &str, key: &str) -> String {
        let pos = line_of(self.text, table, key)
            .map(|l| format!("{l}:"))
            .unwrap_or_default();
        let field = if table.is_empty() {
            key.to_string()
        } else {
            format!("{table}.{key}")
        };
        format!("{}:{pos} {field}", self.file)
    }

    /// An optional number that, when given, must be positive and finite.
    fn positive(&self, table: &str, key: &str, v: Option<f64>) -> Result<()> {
        match v {
            Some(v) if !(v > 0.0 && v.is_finite()) => Err(anyhow!(
                "{}: {v} must be a positive number",
                self.at(table, key)
            )),
            _ => Ok(()),
        }
    }

    /// An optional number that, when given, must be in (0, 1].
    fn fraction(&self, table: &str, key: &str, v: Option<f64>) -> Result<()> {
        match v {
            Some(v) if !(v > 0.0 && v <= 1.0) => Err(anyhow!(
                "{}: {v} must be a fraction in (0, 1] (0.9 = 90%)",
                self.at(table, key)
            )),
            _ => Ok(()),
        }
    }

    /// `<table>.collectives`: known names or "all".
    fn collectives(&self, table: &str, list: &[String]) -> Result<()> {
        match list
            .iter()
            .find(|c| *c != "all" && CollKind::parse(c).is_none())
        {
            Some(c) => Err(anyhow!(
                "{}: unknown collective '{c}' ({}, all)",
                self.at(table, "collectives"),
                CollKind::ALL.map(|k| k.name()).join(", ")
            )),
            None => Ok(()),
        }
    }

    /// `<table>.tiers`: known names or "all".
    fn tiers(&self, table: &str, list: &[String]) -> Result<()> {
        match list
            .iter()
            .find(|t| *t != "all" && TierKind::parse(t).is_none())
        {
            Some(t) => Err(anyhow!(
                "{}: unknown tier '{t}' (world, intra, inter, rails, pairs, all)",
                self.at(table, "tiers")
            )),
            None => Ok(()),
        }
    }

    /// A tier name of `sweep.criteria.<key>` (no "all").
    fn criteria_tier(&self, key: &str, tier: &str) -> Result<()> {
        if TierKind::parse(tier).is_none() {
            return Err(anyhow!(
                "{}: unknown tier '{tier}' (world, intra, inter, rails, pairs)",
                self.at("sweep.criteria", key)
            ));
        }
        Ok(())
    }
}

impl CostSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        if !(self.price_per_gpu_hour >= 0.0 && self.price_per_gpu_hour.is_finite()) {
            return Err(anyhow!(
                "{}: {} must be a price ≥ 0",
                cx.at("cost", "price_per_gpu_hour"),
                self.price_per_gpu_hour
            ));
        }
        if self.gpus == Some(0) {
            return Err(anyhow!("{}: must be at least 1", cx.at("cost", "gpus")));
        }
        for (k, v) in &self.other_per_hour {
            if !(*v >= 0.0 && v.is_finite()) {
                return Err(anyhow!(
                    "{}: {k} = {v} must be a price ≥ 0",
                    cx.at("cost", "other_per_hour")
                ));
            }
        }
        Ok(())
    }
}

impl ProbeSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        cx.positive("probe", "timeout_s", self.timeout_s)?;
        if self.criteria.nodes == Some(0) {
            return Err(anyhow!(
                "{}: must be at least 1",
                cx.at("probe.criteria", "nodes")
            ));
        }
        Ok(())
    }
}

impl SweepSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        cx.collectives("sweep", &self.collectives)?;
        cx.tiers("sweep", &self.tiers)?;
        if self.min_bytes.get() == 0 || self.min_bytes > self.max_bytes {
            return Err(anyhow!(
                "{}: {} must be at least 1 byte and at most max_bytes {}",
                cx.at("sweep", "min_bytes"),
                self.min_bytes,
                self.max_bytes
            ));
        }
        if self.step_factor.is_some_and(|f| f < 2) {
            return Err(anyhow!(
                "{}: must be at least 2",
                cx.at("sweep", "step_factor")
            ));
        }
        cx.positive("sweep", "budget_s", self.budget_s)?;
        cx.positive("sweep", "timeout_s", self.timeout_s)?;
        self.criteria.validate(cx)
    }
}

impl SweepCriteria {
    fn validate(&self, cx: &Field) -> Result<()> {
        if CollKind::parse(&self.collective).is_none() {
            return Err(anyhow!(
                "{}: unknown collective '{}'",
                cx.at("sweep.criteria", "collective"),
                self.collective
            ));
        }
        for (tier, v) in &self.min_busbw_gbps {
            cx.criteria_tier("min_busbw_gbps", tier)?;
            cx.positive("sweep.criteria", "min_busbw_gbps", Some(*v))?;
        }
        for tier in &self.judge_tiers {
            cx.criteria_tier("judge_tiers", tier)?;
        }
        cx.fraction(
            "sweep.criteria",
            "min_fraction_of_expected",
            self.min_fraction_of_expected,
        )?;
        cx.fraction(
            "sweep.criteria",
            "min_bisection_fraction",
            self.min_bisection_fraction,
        )?;
        if self
            .max_oversubscription
            .is_some_and(|r| !(r >= 1.0 && r.is_finite()))
        {
            return Err(anyhow!(
                "{}: must be at least 1 (1 for 1:1, 2 for 2:1)",
                cx.at("sweep.criteria", "max_oversubscription")
            ));
        }
        cx.fraction("sweep.criteria", "outlier_fraction", self.outlier_fraction)
    }
}

impl GpuPhaseSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        cx.positive("gpu", "burn_s", self.burn_s)?;
        cx.positive("gpu", "sdc_s", self.sdc_s)?;
        cx.positive("gpu", "memtest_s", self.memtest_s)?;
        if self
            .memtest_share
            .is_some_and(|v| !(0.05..=0.98).contains(&v))
        {
            return Err(anyhow!(
                "{}: must be 0.05 to 0.98",
                cx.at("gpu", "memtest_share")
            ));
        }
        cx.positive("gpu", "timeout_s", self.timeout_s)?;
        if self.copy_bytes.is_some_and(|b| b.get() == 0) {
            return Err(anyhow!(
                "{}: must be at least 1 byte",
                cx.at("gpu", "copy_bytes")
            ));
        }
        let c = &self.criteria;
        let t = "gpu.criteria";
        cx.positive(t, "min_host_copy_gbps", c.min_host_copy_gbps)?;
        cx.positive(t, "min_tflops", c.min_tflops)?;
        for (key, v) in [
            ("min_host_copy_fraction", c.min_host_copy_fraction),
            ("min_memory_fraction", c.min_memory_fraction),
            ("min_peer_fraction", c.min_peer_fraction),
            ("pair_outlier_fraction", c.pair_outlier_fraction),
            ("min_tflops_fraction", c.min_tflops_fraction),
            ("max_tflops_spread", c.max_tflops_spread),
            ("max_throttled_share", c.max_throttled_share),
            ("min_memtest_share", c.min_memtest_share),
        ] {
            cx.fraction(t, key, v)?;
        }
        Ok(())
    }
}

impl TrainSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        if self.steps == 0 {
            return Err(anyhow!("{}: must be at least 1", cx.at("train", "steps")));
        }
        if self.criteria.resume_parity && self.steps < 2 {
            return Err(anyhow!(
                "{}: a resume check needs at least 2 steps",
                cx.at("train", "steps")
            ));
        }
        if let Some(p) = &self.preset {
            if !["tiny", "gpu-small"].contains(&p.as_str()) {
                return Err(anyhow!(
                    "{}: unknown preset '{p}' (tiny, gpu-small)",
                    cx.at("train", "preset")
                ));
            }
        }
        cx.positive("train", "timeout_s", self.timeout_s)?;
        let c = &self.criteria;
        cx.positive(
            "train.criteria",
            "min_ckpt_write_gbps",
            c.min_ckpt_write_gbps,
        )?;
        cx.positive("train.criteria", "max_step_p50_ms", c.max_step_p50_ms)?;
        if c.min_ckpt_write_gbps.is_some() && self.ckpt_every == Some(0) {
            return Err(anyhow!(
                "{}: 0 writes no checkpoint, but train.criteria.min_ckpt_write_gbps judges one",
                cx.at("train", "ckpt_every")
            ));
        }
        Ok(())
    }
}

impl ChaosSpec {
    fn validate(&self, cx: &Field) -> Result<()> {
        for k in &self.kinds {
            let plain = ["kill", "hang", "exit", "slow", "corrupt-ckpt"].contains(&k.as_str());
            let on_node = ["node-loss:", "link-cut:"]
                .iter()
                .any(|p| k.strip_prefix(p).is_some_and(|n| n.starts_with("node")));
            if !(plain || on_node) {
                return Err(anyhow!(
                    "{}: unknown fault '{k}' (kill, hang, exit, slow, corrupt-ckpt, node-loss:nodeI, link-cut:nodeI)",
                    cx.at("chaos", "kinds")
                ));
            }
        }
        if self.trials == 0 {
            return Err(anyhow!("{}: must be at least 1", cx.at("chaos", "trials")));
        }
        cx.positive("chaos", "timeout_s", self.timeout_s)?;
        let c = &self.criteria;
        cx.positive("chaos.criteria", "max_detect_s", c.max_detect_s)?;
        cx.positive("chaos.criteria", "max_recovery_s", c.max_recovery_s)
    }
}

/// Split a launcher prefix the way a shell splits words (quotes and backslashes),
/// without expanding anything: no variables, globs or command substitution.
pub fn split_launch(text: &str) -> Result<Vec<String>> {
    let words = shlex::split(text)
        .ok_or_else(|| anyhow!("cannot split '{text}' into words (an unclosed quote?)"))?;
    if words.is_empty() {
        return Err(anyhow!("the launcher prefix is empty"));
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name = \"c\"\n[probe]\n";

    #[test]
    fn a_hang_trial_whose_detection_limit_the_deadline_outlasts_is_refused() {
        let card = |t: u32, d: u32, kinds: &str| {
            format!("name = \"c\"\nstep_timeout_s = {t}\n[chaos]\nkinds = [{kinds}]\n[chaos.criteria]\nmax_detect_s = {d}\n")
        };
        let e = Card::parse(&card(300, 60, "\"kill\", \"hang\""), "c.toml").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("chaos.criteria.max_detect_s"), "{e}");
        assert!(
            e.contains("60 s") && e.contains("step_timeout_s = 300 s"),
            "{e}"
        );
        // Without a hang trial, or with room for the deadline, it stands.
        Card::parse(&card(300, 60, "\"kill\""), "c.toml").unwrap();
        Card::parse(&card(20, 45, "\"kill\", \"hang\""), "c.toml").unwrap();
    }

    #[test]
    fn shipped_cards_parse_and_find_their_topology() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("cards");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let c = Card::load(&p).unwrap_or_else(|e| panic!("{e:#}"));
                let t = c.load_topology(&p).unwrap_or_else(|e| panic!("{e:#}"));
                assert!(t.is_some(), "{} names a topology", p.display());
                assert!(c.cost.is_some(), "{} has a price", p.display());
                n += 1;
            }
        }
        assert!(n >= 5, "a card per shipped topology");
    }

    #[test]
    fn minimal_card_and_defaults() {
        let c = Card::parse(MINIMAL, "c.toml").unwrap();
        assert_eq!(c.phases(), vec!["probe"]);
        let c = Card::parse(
            "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes=\"1G\"\n",
            "c.toml",
        )
        .unwrap();
        let s = c.sweep.unwrap();
        assert_eq!(s.max_bytes, Bytes(1 << 30));
        assert!(s.criteria.no_outlier && s.criteria.zero_wrong);
        assert_eq!(s.criteria.collective, "all_reduce");
    }

    #[test]
    fn fabric_floors_are_checked_and_named() {
        let c = Card::parse(
            "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='4M'\n[sweep.criteria]\nmin_bisection_fraction=0.5\nmax_oversubscription=2\n",
            "c.toml",
        )
        .unwrap();
        let k = &c.sweep.unwrap().criteria;
        assert_eq!(k.min_bisection_fraction, Some(0.5));
        assert_eq!(k.max_oversubscription, Some(2.0));
        let e = |text: &str| Card::parse(text, "c.toml").unwrap_err().to_string();
        let head = "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='4M'\n[sweep.criteria]\n";
        assert_eq!(
            e(&format!("{head}max_oversubscription=0.5\n")),
            "c.toml:6: sweep.criteria.max_oversubscription: must be at least 1 (1 for 1:1, 2 for 2:1)"
        );
        assert_eq!(
            e(&format!("{head}min_bisection_fraction=2\n")),
            "c.toml:6: sweep.criteria.min_bisection_fraction: 2 must be a fraction in (0, 1] (0.9 = 90%)"
        );
    }

    #[test]
    fn soak_takes_its_size_from_the_sweep_and_runs_last() {
        let c = Card::parse(
            "name='c'\n[soak]\nduration_s=90\n[sweep]\nmin_bytes='1M'\nmax_bytes='4M'\n[probe]\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(c.phases(), vec!["probe", "sweep", "soak"]);
        let k = c.soak.as_ref().unwrap();
        assert_eq!(k.size(c.sweep.as_ref()), Some(Bytes(4 << 20)));
        assert_eq!(k.criteria, SoakCriteria::default());
        assert_eq!(k.bound_s(), 690.0);
        let e = |text: &str| Card::parse(text, "c.toml").unwrap_err().to_string();
        assert_eq!(
            e("name='c'\n[soak]\nduration_s=90\n"),
            "c.toml: soak.bytes: required without a [sweep] section (the message size of every pass)"
        );
        assert_eq!(
            e("name='c'\n[soak]\nduration_s=0\nbytes='1M'\n"),
            "c.toml:3: soak.duration_s: 0 must be a positive number of seconds"
        );
        assert_eq!(
            e("name='c'\n[soak]\nduration_s=9\nbytes='1M'\n[soak.criteria]\nmax_drift=1.5\n"),
            "c.toml:6: soak.criteria.max_drift: 1.5 must be a fraction in (0, 1] (0.9 = 90%)"
        );
        assert_eq!(
            e("name='c'\n[soak]\nduration_s=60\nbytes='1M'\n[soak.criteria]\ndrift_window_s=40\n"),
            "c.toml:6: soak.criteria.drift_window_s: 40 is more than half of duration_s 60: the first and last windows would overlap"
        );
        assert!(
            e("name='c'\n[soak]\nduration_s=9\nbytes='1M'\ntiers=['nvlink']\n")
                .starts_with("c.toml:5: soak.tiers: unknown tier 'nvlink'")
        );
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let cases: [(&str, &str); 14] = [
            ("name='c'\n[replay]\ntrace = []\n", "c.toml:3: replay.trace: name at least one file"),
            (
                "name='c'\n[replay]\ntrace = ['t']\nformat = 'json'\n",
                "c.toml:4: replay.format: unknown format 'json'",
            ),
            (
                "name='c'\n[replay]\ntrace = ['t']\ngrow = ' , '\n",
                "c.toml:4: replay.grow: ',': give auto or communicator ids",
            ),
            (
                "name='c'\n[replay]\ntrace = ['t']\nsteps = 0\n",
                "c.toml:4: replay.steps: must be at least 1",
            ),
            (
                "name='c'\n[replay]\ntrace = ['t']\n[replay.criteria]\nmax_slowdown = -1\n",
                "c.toml:5: replay.criteria.max_slowdown: -1 must be a positive number",
            ),
            ("name='c'\n[probe]\ntimeout = 3\n", "c.toml:3:"),
            ("name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='2Q'\n", "c.toml:4:"),
            (
                "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='1G'\n[sweep.criteria]\nmin_fraction_of_expected = 1.5\n",
                "c.toml:6: sweep.criteria.min_fraction_of_expected: 1.5",
            ),
            (
                "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='1G'\n[sweep.criteria]\nmin_busbw_gbps = { nvlink = 3 }\n",
                "c.toml:6: sweep.criteria.min_busbw_gbps: unknown tier 'nvlink'",
            ),
            (
                "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='1G'\ncollectives=['allreduce','bcast']\n",
                "c.toml:5: sweep.collectives: unknown collective 'bcast'",
            ),
            (
                "name='c'\n[train]\nsteps = 0\n",
                "c.toml:3: train.steps: must be at least 1",
            ),
            (
                "name='c'\n[chaos]\nkinds = ['kill', 'melt']\n",
                "c.toml:3: chaos.kinds: unknown fault 'melt'",
            ),
            ("name='a b'\n[probe]\n", "c.toml:1: name:"),
            ("name='c'\n", "no phase to run"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", Card::parse(text, "c.toml").unwrap_err());
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let e = format!(
            "{:#}",
            Card::parse("name='c'\n[probe]\n[probe.criteria]\nnodez = 3\n", "c.toml").unwrap_err()
        );
        assert!(e.starts_with("c.toml:4:") && e.contains("nodez"), "{e}");
    }

    #[test]
    fn launch_prefix_splits_like_a_shell_without_expanding() {
        assert_eq!(
            split_launch("mpirun -np 4 --mca btl 'self,tcp' \"a b\" $HOME").unwrap(),
            vec!["mpirun", "-np", "4", "--mca", "btl", "self,tcp", "a b", "$HOME"]
        );
        assert!(split_launch("mpirun 'unclosed").is_err());
        assert!(split_launch("  ").is_err());
    }

    #[test]
    fn a_replay_section_runs_after_the_sweep_and_its_files_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("job")).unwrap();
        std::fs::write(dir.path().join("base.json"), "{}").unwrap();
        let card = dir.path().join("c.toml");
        let text = "name='c'\n[train]\nsteps = 4\n[replay]\ntrace = ['job']\nbaseline = 'base.json'\n[sweep]\nmin_bytes='1K'\nmax_bytes='1M'\n";
        std::fs::write(&card, text).unwrap();
        let c = Card::load(&card).unwrap();
        assert_eq!(c.phases(), vec!["sweep", "replay", "train"]);
        let r = c.replay.as_ref().unwrap();
        assert!(r.criteria.zero_wrong && r.criteria.max_slowdown.is_none());
        let (trace, base) = r.paths(&card);
        assert_eq!(trace, vec![dir.path().join("job")]);
        assert_eq!(base, Some(dir.path().join("base.json")));
        std::fs::write(&card, text.replace("'job'", "'job', 'gone.log'")).unwrap();
        let e = format!("{:#}", Card::load(&card).unwrap_err());
        assert!(
            e.contains("c.toml:5: replay.trace:") && e.contains("gone.log: no such file"),
            "{e}"
        );
        std::fs::write(&card, text.replace("base.json'", "nobase.json'")).unwrap();
        let e = format!("{:#}", Card::load(&card).unwrap_err());
        assert!(
            e.contains("c.toml:6: replay.baseline:") && e.contains("no such file"),
            "{e}"
        );
    }

    #[test]
    fn line_of_finds_keys_in_tables() {
        let t = "name='x'\n[a]\nk = 1\n[a.b]\nk = 2\n[[c]]\nk=3\n";
        assert_eq!(line_of(t, "", "name"), Some(1));
        assert_eq!(line_of(t, "a", "k"), Some(3));
        assert_eq!(line_of(t, "a.b", "k"), Some(5));
        assert_eq!(line_of(t, "c", "k"), Some(7));
        assert_eq!(line_of(t, "a", "missing"), None);
    }
}
