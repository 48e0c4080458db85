//! `burnin sweep`'s command line (nccl-tests' flags where users know them).
use crate::units::Bytes;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Debug, Serialize, Clone)]
pub struct SweepArgs {
    /// Collectives to run: a comma list of all_reduce, all_gather, reduce_scatter,
    /// broadcast, reduce, alltoall, sendrecv, or `all`.
    #[arg(
        short = 'c',
        long = "collectives",
        default_value = "all_reduce",
        value_name = "LIST"
    )]
    pub collectives: String,
    /// Smallest message size (bytes; K, M, G suffixes are powers of 1024).
    #[arg(short = 'b', long = "min-bytes", default_value = "32M")]
    pub min_bytes: Bytes,
    /// Largest message size.
    #[arg(short = 'e', long = "max-bytes", default_value = "32M")]
    pub max_bytes: Bytes,
    /// Multiply the size by this factor between steps (> 1).
    #[arg(short = 'f', long = "step-factor", conflicts_with = "step_bytes")]
    pub step_factor: Option<u64>,
    /// Add this many bytes between steps, instead of a factor.
    #[arg(short = 'i', long = "step-bytes")]
    pub step_bytes: Option<Bytes>,
    /// Fixed number of timed iterations per size (turns adaptive sampling off).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u32>,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 5)]
    pub warmup_iters: u32,
    /// Check every result element (1) or not (0).
    #[arg(long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Reduction operations: comma list of sum, prod, max, min, avg, or `all`.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Data types: comma list of f32, f64, f16, bf16, i32, u8 (nccl-tests names like
    /// float, double, half, int32, uint8 work too), or `all`.
    #[arg(short = 'd', long = "dtype", default_value = "f32")]
    pub dtype: String,
    /// Root rank for broadcast and reduce.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// How ranks' times combine into the collective's time: 0 rank 0, 1 average,
    /// 2 min, 3 max (the slowest rank; burnin's default).
    #[arg(short = 'a', long = "average", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub average: u8,
    /// What lies between timed iterations: batch (back to back, nccl-tests' method)
    /// or osu (a barrier after every iteration, outside the timed call: the OSU
    /// micro-benchmarks' method, for comparing with their numbers).
    #[arg(long, default_value = "batch", value_name = "METHOD")]
    pub timing: String,
    /// Which buffer placements to run: out (separate send/recv), in (in-place), or both.
    #[arg(long, default_value = "out,in", value_name = "LIST")]
    pub placement: String,
    /// Adaptive sampling target: stop when the 95% confidence interval of the median
    /// is within ± this fraction (0.01 = ±1%).
    #[arg(long = "ci", default_value_t = 0.01)]
    pub ci: f64,
    /// Adaptive sampling: time budget per size and placement, in seconds.
    #[arg(long = "budget", default_value_t = 2.0, value_name = "SECS")]
    pub budget: f64,
    /// Adaptive sampling: never more than this many timed iterations per size.
    #[arg(long = "max-iters", default_value_t = 10_000)]
    pub max_iters: u32,
    /// Topology tiers: comma list of world, intra, inter, rails, pairs, or `all` (the
    /// ones that apply to the node map; pairs run at the largest size only).
    #[arg(long, default_value = "all", value_name = "LIST")]
    pub tiers: String,
    /// Expected fabric (TOML, see topologies/): tiers below its numbers fail.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// The switch fabric, as Slurm's topology.conf writes it (`SwitchName=leaf1
    /// Nodes=node[0-3]`, `SwitchName=spine Switches=leaf[1-2]`): the pairs tier then
    /// compares a node pair only with pairs the fabric lets run alike, and names a
    /// slow uplink as the uplink.
    #[arg(long, value_name = "FILE")]
    pub fabric: Option<PathBuf>,
    /// The fabric's declared oversubscription (a leaf's node links over its uplink:
    /// 2, 4, 2:1): pairs across switches are judged against what such uplinks allow
    /// (needs --fabric).
    #[arg(long, value_name = "RATIO", value_parser = parse_ratio, requires = "fabric")]
    pub oversubscription: Option<f64>,
    /// A group below this fraction of its tier's median busbw is an outlier
    /// (default: the topology file's, else 0.8).
    #[arg(long)]
    pub outlier_fraction: Option<f64>,
    /// A tier below this fraction of the topology's expected busbw fails (default:
    /// the topology file's, else 0.9).
    #[arg(long)]
    pub min_fraction: Option<f64>,
    /// Write run.json and points.jsonl to this folder (points appended as measured).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Do not record which transports carried the traffic (by default NCCL's INFO log
    /// and Open MPI's BTL choices go to OUT/nccl-logs and OUT/mpi-logs and each tier's
    /// transport is reported).
    #[arg(long)]
    pub no_transport: bool,
    /// After the tiers, find the slow node or link by bisection: all_reduce in halves
    /// of the node set at once, recursing into the slow half, then pairs within the
    /// last suspects — about log2(n) rounds instead of the pairs tier's n−1.
    #[arg(long)]
    pub find_slow: bool,
    /// After the tiers, map the fabric: every node pair (which nodes share a leaf
    /// switch), each leaf alone (injection) and the two halves against each other
    /// (bisection), hence the oversubscription as measured; with --fabric, checked
    /// against the declaration.
    #[arg(long)]
    pub fabric_map: bool,
    /// Soak: repeat the planned tiers and sizes until this much time has passed
    /// (seconds, or 90s, 30m, 2h); every pass's points are kept with their pass and
    /// time, and each series' drift, variability and wrong elements are judged.
    #[arg(long, value_name = "TIME", value_parser = crate::units::parse_seconds)]
    pub duration: Option<f64>,
    /// Soak: a series fails when the mean busbw of its last quarter of passes is
    /// below this fraction of its first quarter's.
    #[arg(long, value_name = "F", default_value_t = 0.9)]
    pub max_drift: f64,
    /// Soak: compare the passes of the last TIME with those of the first TIME
    /// instead of the last and first quarters (e.g. 1h of a 4h soak; at most half
    /// of --duration).
    #[arg(long, value_name = "TIME", value_parser = crate::units::parse_seconds)]
    pub drift_window: Option<f64>,
    /// Soak: a series fails when its busbw's coefficient of variation over the passes
    /// is above this (default: not judged).
    #[arg(long, value_name = "F")]
    pub max_pass_cv: Option<f64>,
    /// Test only: make this rank corrupt its result buffer so the check must fail.
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<usize>,
    /// Test only: where --corrupt-rank's wrong value goes (first, middle, last,
    /// random[:SEED]; default random).
    #[arg(long, hide = true, value_name = "AT")]
    pub corrupt_at: Option<String>,
    /// Test only: RANK:count|dtype|op|root makes that rank's collective calls differ
    /// from the others' (NCCL never completes them).
    #[arg(long, hide = true, value_name = "RANK:WHAT")]
    pub mismatch: Option<String>,
}

impl SweepArgs {
    /// The test hooks (hidden flags) that apply to world rank `rank`.
    pub fn hooks(&self, rank: usize) -> anyhow::Result<super::Hooks> {
        let at = match &self.corrupt_at {
            Some(s) => super::At::parse(s)?,
            None => super::At::Random(0),
        };
        let mismatch = match &self.mismatch {
            Some(s) => {
                let (r, m) = super::hooks::Mismatch::parse(s)?;
                (r == rank).then_some(m)
            }
            None => None,
        };
        Ok(super::Hooks {
            corrupt: (self.corrupt_rank == Some(rank)).then_some(at),
            mismatch,
        })
    }
}

/// "4", "4:1", "1.5": a positive ratio.
pub fn parse_ratio(v: &str) -> Result<f64, String> {
    let n = v.strip_suffix(":1").unwrap_or(v);
    match n.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1000.0 => Ok(r),
        _ => Err(format!("'{v}' is not a ratio such as 2, 4, 4:1 or 1.5")),
    }
}
