//! Command-line definitions (clap derive).
//!
//! Sweep flags follow nccl-tests where users already know them (`-b -e -f -i -n -w -o
//! -d -r -a -T`). One deliberate difference: nccl-tests' `-c` is "check correctness";
//! burnin runs several collectives in one sweep, so `-c` selects them
//! (`-c all_reduce,all_gather` or `-c all`) and checking is `--check` (on by default).
//!
//! Each command's argument struct lives with its workload (`sweep::SweepArgs`, …) and
//! the options every command shares in `config`; this module only assembles them.
//! Every argument struct is `Serialize`: the parsed command line *is* the run's
//! configuration, and every rank hashes it to prove all ranks were given the same.
pub use crate::acceptance::RunArgs;
pub use crate::config::GlobalArgs;
pub use crate::evidence::EvidenceArgs;
pub use crate::health::GpuArgs;
pub use crate::probe::ProbeArgs;
pub use crate::replay::ReplayArgs;
pub use crate::report::{CompareArgs, ReportArgs};
pub use crate::smoke::SmokeArgs;
pub use crate::sweep::SweepArgs;
pub use crate::train::TrainArgs;
use clap::{Parser, Subcommand};
use serde::Serialize;

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
    /// GPU health, one rank per GPU: host<->device and device-local copies, every GPU
    /// pair's peer copy, a compute burn with clocks, power, temperature and throttling
    /// sampled, the PCIe link, ECC/row-remap/XID counters before and after, and
    /// optionally DCGM's diagnostic; each judged, the slow or failing GPU named.
    Gpu(GpuArgs),
    /// Capture the evidence of each host (nvidia-smi, dcgmi, ibstat, lscpu, …, and the
    /// NCCL/UCX/OMPI environment) into OUT/evidence/<host>/, tools that are missing noted.
    Evidence(EvidenceArgs),
    /// Replay a job's own collectives (its NCCL COLL log or Flight Recorder dumps) on
    /// this reservation, step by step with checking: the step's communication time
    /// here, per collective, and against the source cluster's where the trace has times.
    Replay(ReplayArgs),
    /// The whole acceptance of a card: every phase as a job under --launch, a verdict
    /// per criterion, report.md and report.html. Runs on the launch host, NOT under
    /// mpirun.
    Run(RunArgs),
    /// Render report.md and report.html of a results folder from its JSON alone.
    Report(ReportArgs),
    /// Two results folders side by side: busbw ratios, recovery, flipped criteria.
    Compare(CompareArgs),
}
