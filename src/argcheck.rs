//! `BURNIN_CHECK_ARGS=RANKS burnin …`: check a command line as a job of RANKS ranks
//! would, and stop before anything runs (no MPI, no GPU, no file written).
//!
//! Clap's parse, then each workload's own validation where it needs nothing but the
//! flags and the rank count (the sweep's plan, the training's plan, burnin chaos's
//! launcher, fault kinds and train arguments, burnin gpu's sampling period and copy
//! sizes). `launch/gpu-check --dry-run` prints its command lines and a test runs every
//! one through this, so a wrong flag fails CI instead of a lent GPU machine.
use crate::backend::BackendChoice;
use crate::backend::BackendKind;
use crate::cli::{Cli, Command};
use crate::error::usage;
use crate::kinds::Dtype;
use anyhow::Result;

/// The environment variable that asks for a check only; its value is the rank count.
pub const VAR: &str = "BURNIN_CHECK_ARGS";

/// Check `cli` for a job of `ranks` ranks.
pub fn check(cli: &Cli, ranks: usize) -> Result<()> {
    match &cli.command {
        Command::Sweep(a) => {
            let kind = match cli.global.backend {
                BackendChoice::Mpi => BackendKind::Mpi,
                _ => BackendKind::Nccl,
            };
            let supports =
                |d: Dtype| kind == BackendKind::Nccl || !matches!(d, Dtype::F16 | Dtype::Bf16);
            crate::sweep::plan(a, ranks, kind, supports)?;
        }
        Command::Train(a) => {
            crate::train::args::plan(a, ranks)?;
        }
        Command::Chaos(a) => {
            let (_, _, train) = crate::chaos::supervisor::validate(a)?;
            crate::train::args::plan(&train, ranks)?;
        }
        Command::Gpu(a) => {
            crate::health::validate(a)?;
        }
        _ => {}
    }
    Ok(())
}

/// The rank count of `BURNIN_CHECK_ARGS`, when it is set.
pub fn requested() -> Option<Result<usize>> {
    let v = std::env::var(VAR).ok()?;
    Some(
        v.trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| usage(VAR, format!("'{v}' is not a rank count (1 or more)"))),
    )
}
