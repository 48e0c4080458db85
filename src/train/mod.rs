//! `burnin train`: does a real training loop work on this reservation — a small
//! decoder-only transformer (tch) trained data-parallel over burnin's own
//! [`Backend`](crate::backend::Backend), writing checkpoints with a protocol that
//! never leaves a torn one looking valid, restoring them bit-exactly, and measuring
//! step time, the gradient exchange, and checkpoint write/read speed against the raw
//! speed of the same directory.
//!
//! - `args`: flags and their validation (builds without libtorch);
//! - `data`: deterministic synthetic tokens, a function of (seed, step, rank);
//! - `model`: the transformer, op by op, with its own deterministic init;
//! - `optim`: AdamW with its state as plain tensors;
//! - `ddp`: bucketed gradient all-reduce through the backend;
//! - `checkpoint`: the write/manifest/restore/retention protocol;
//! - `storage`: fsync, page-cache dropping, the raw file baseline;
//! - `report`: steps.jsonl and run.json records, the summary table;
//! - `det`: PyTorch's deterministic-algorithms switch (C++).
//!
//! Determinism: with a fixed seed, world size and device type, a run resumed from
//! step k reproduces the uninterrupted run bit for bit — same batches (regenerated
//! from the step), same weights and optimizer state (restored exactly), same
//! reduction order (same buckets, same MPI algorithm), one libtorch thread per rank on
//! the CPU and PyTorch's deterministic mode on CUDA.
pub mod args;
pub use args::TrainArgs;

#[cfg(feature = "train")]
pub mod checkpoint;
#[cfg(feature = "train")]
pub mod data;
#[cfg(feature = "train")]
pub mod ddp;
#[cfg(feature = "train")]
pub mod det;
#[cfg(feature = "train")]
pub mod model;
#[cfg(feature = "train")]
pub mod optim;
#[cfg(feature = "train")]
pub mod report;
#[cfg(feature = "train")]
mod run;
#[cfg(feature = "train")]
pub mod storage;

use crate::cli::GlobalArgs;
use crate::error::Outcome;
use crate::watchdog::Watchdog;
use crate::world::World;
use anyhow::Result;
use std::sync::Arc;

/// `burnin train`.
#[cfg(feature = "train")]
pub fn run(
    world: &World,
    global: &GlobalArgs,
    args: &TrainArgs,
    dog: Arc<Watchdog>,
) -> Result<Outcome> {
    run::run(world, global, args, dog)
}

/// `burnin train` in a build without libtorch: an error every rank agrees on.
#[cfg(not(feature = "train"))]
pub fn run(
    _world: &World,
    _global: &GlobalArgs,
    _args: &TrainArgs,
    _dog: Arc<Watchdog>,
) -> Result<Outcome> {
    Err(crate::error::Agreed(
        "this burnin was built without libtorch (feature `train`); rebuild with default features to run `burnin train`"
            .into(),
    )
    .into())
}
