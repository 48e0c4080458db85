//! Command-line definitions (clap derive).
//!
//! Sweep flags follow nccl-tests where users already know them (`-b -e -f -i -n -w -o
//! -d -r -a -T`). One deliberate difference: nccl-tests' `-c` is "check correctness";
//! burnin runs several collectives in one sweep, so `-c` selects them
//! (`-c all_reduce,all_gather` or `-c all`) and checking is `--check` (on by default).
//!
//! Every argument struct is `Serialize`: the parsed command line *is* the run's
//! configuration, and every rank hashes it to prove all ranks were given the same.
pub use crate::train::TrainArgs;
use crate::units::Bytes;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Parser, Debug, Serialize)]
#[command(
    name = "burnin",
    version,
    about = "Acceptance tests for rented multi-node GPU reservations",
    long_about = "Launch one burnin per GPU with mpirun/srun. probe: what is there; \
                  sweep: NCCL/MPI collectives over sizes and topology tiers; train: \
                  training with checkpoints. run (on the launch host, not under mpirun): \
                  a whole acceptance card; report, compare: from results folders."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Serialize, Clone)]
pub struct GlobalArgs {
    /// Communication backend: nccl (GPU buffers), mpi (host buffers), or auto (nccl
    /// when every rank has a usable GPU and NCCL, else mpi).
    #[arg(long, global = true, value_enum, default_value_t = BackendChoice::Auto, env = "BURNIN_BACKEND")]
    pub backend: BackendChoice,
    /// Path of the NCCL library to load (default: search pip's nvidia-nccl, the
    /// loader path and the usual system directories).
    #[arg(long, global = true, env = "BURNIN_NCCL_LIB", value_name = "PATH")]
    pub nccl_lib: Option<PathBuf>,
    /// Deadline in seconds for any single blocking step (a collective, a wait); on
    /// expiry the rank says what it was waiting for and ends the job. Default: 120 s;
    /// `train` derives its deadlines from the step times it observes instead
    /// (max(3 s, 10 x p99), 60 s at start-up).
    #[arg(short = 'T', long = "timeout", global = true, value_name = "SECS")]
    pub timeout: Option<f64>,
}

/// The deadline when `-T` is not given (probe, sweep).
pub const DEFAULT_TIMEOUT_SECS: f64 = 120.0;

impl GlobalArgs {
    /// `-T`, or the default deadline.
    pub fn timeout_secs(&self) -> f64 {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS)
    }
}

#[derive(Subcommand, Debug, Serialize)]
#[allow(clippy::large_enum_variant)] // parsed once per run; boxing buys nothing
pub enum Command {
    /// What is there: hosts, ranks, GPUs, drivers and library versions.
    Probe(ProbeArgs),
    /// Collective bandwidth and latency over message sizes (nccl-tests style).
    Sweep(SweepArgs),
    /// A data-parallel training loop with checkpoints: step time, gradient all-reduce,
    /// checkpoint write/read speed against the raw storage, bit-exact resume.
    Train(TrainArgs),
    /// Kill, hang or slow a rank on purpose and measure detection, teardown and
    /// recovery from the last checkpoint against an uninterrupted run. Run it once on
    /// the launch host (not under mpirun): it runs the launcher itself.
    Chaos(crate::chaos::args::ChaosArgs),
    /// Stage-1 acceptance in under a minute: every rank sees its GPU, makes a context,
    /// allocates memory, checks a matrix product, joins one verified all_reduce, and
    /// writes and reads a file in the checkpoint directory. One PASS/FAIL line per check.
    Smoke(SmokeArgs),
    /// Capture the evidence of each host (nvidia-smi, dcgmi, ibstat, lscpu, …, and the
    /// NCCL/UCX/OMPI environment) into OUT/evidence/<host>/, tools that are missing noted.
    Evidence(EvidenceArgs),
    /// The whole acceptance of a card: every phase as a job under --launch, a verdict
    /// per criterion, report.md and report.html. Runs on the launch host, NOT under
    /// mpirun.
    Run(RunArgs),
    /// Render report.md and report.html of a results folder from its JSON alone.
    Report(ReportArgs),
    /// Two results folders side by side: busbw ratios, recovery, flipped criteria.
    Compare(CompareArgs),
}

#[derive(Args, Debug, Serialize)]
pub struct RunArgs {
    /// Acceptance card (TOML, see cards/).
    #[arg(long, value_name = "FILE")]
    pub card: PathBuf,
    /// Launcher prefix each phase runs under, split like a shell would (nothing in it
    /// is expanded), e.g. 'mpirun -np 16 --hostfile hosts' or 'launch/sim-cluster exec
    /// --'. Default: the card's `launch`.
    #[arg(long, value_name = "PREFIX")]
    pub launch: Option<String>,
    /// Results folder (default: results/<UTC time>-<card name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only these of the card's phases (comma list of probe, sweep, train, chaos);
    /// the others' criteria are NOT RUN.
    #[arg(long, value_name = "LIST")]
    pub phases: Option<String>,
    /// Do not echo the jobs' output (it is still in each job's stdout.log/stderr.log).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args, Debug, Serialize)]
pub struct ReportArgs {
    /// A results folder: of `burnin run`, or the --out folder of one sweep or train.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Write report.md and report.html here instead of into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug, Serialize)]
pub struct CompareArgs {
    /// The baseline results folder (A).
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The results folder compared with it (B); ratios are B / A.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Write compare.md and compare.html here (default: Markdown on stdout).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Mpi,
    Nccl,
}

#[derive(Args, Debug, Serialize)]
pub struct ProbeArgs {
    /// Also write the per-rank table as JSON to FILE (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Compare the nodes with this topology file (GPUs, NVLinks, NICs, node and rank
    /// counts); any difference makes the probe exit 1.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
}

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
    /// Test only: make this rank corrupt its result buffer so the check must fail.
    #[arg(long, hide = true)]
    pub corrupt_rank: Option<usize>,
}

#[derive(Args, Debug, Serialize)]
pub struct SmokeArgs {
    /// Directory every rank writes and reads a test file in (the checkpoint storage the
    /// job will use; default: a `burnin-smoke` directory in the system's temp dir).
    #[arg(long, value_name = "DIR")]
    pub ckpt_dir: Option<PathBuf>,
    /// Also write every rank's results as JSON to FILE (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Serialize)]
pub struct EvidenceArgs {
    /// Folder to write into: OUT/evidence/<host>/ gets one file per tool and index.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also run the invasive diagnostics (`dcgmi diag --run 3` instead of `--run 1`):
    /// they load the GPUs for minutes; coordinate with whoever schedules them and raise
    /// -T/--timeout accordingly.
    #[arg(long)]
    pub invasive: bool,
}
