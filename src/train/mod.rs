//! `burnin train`: does a real training loop work on this reservation — a small
//! decoder-only transformer (tch) trained data-parallel over burnin's own
//! [`Backend`](crate::backend::Backend), writing checkpoints with a protocol that
//! never leaves a torn one looking valid, restoring them bit-exactly, and measuring
//! step time, the gradient exchange, and checkpoint write/read speed against the raw
//! speed of the same directory.
//!
//! The workload itself links libtorch, so it lives in the training binary
//! (`train/`, `burnin-train`; `burnin train` execs it: `crate::trainer`). Here is
//! what needs no libtorch, shared by both binaries and the report:
//! - `args`: flags and their validation;
//! - `data`: deterministic synthetic tokens, a function of (seed, step, rank);
//! - `storage`: fsync, page-cache dropping, the raw file baseline;
//! - `report`: steps.jsonl and run.json records, the summary table.
//!
//! In `burnin-train`: `model` (the transformer, op by op, with its own deterministic
//! init), `optim` (AdamW with its state as plain tensors), `ddp` (bucketed gradient
//! all-reduce through the backend), `checkpoint` (the write/manifest/restore/retention
//! protocol), `det` (PyTorch's deterministic-algorithms switch, C++) and `run`.
//!
//! Determinism: with a fixed seed, world size and device type, a run resumed from
//! step k reproduces the uninterrupted run bit for bit — same batches (regenerated
//! from the step), same weights and optimizer state (restored exactly), same
//! reduction order (same buckets, same MPI algorithm), one libtorch thread per rank on
//! the CPU and PyTorch's deterministic mode on CUDA.
pub mod args;
pub mod data;
pub mod report;
pub mod storage;

pub use args::TrainArgs;
