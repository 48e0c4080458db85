//! Chaos: what happens when a rank dies, hangs or slows down, measured.
//!
//! Two halves. In the victim job (`burnin train --fault …`), [`victim::Hooks`] injects
//! the fault at the chosen step ([`fault`]), keeps every blocking step under a
//! deadline derived from the observed step times ([`deadline`]), names a missing rank
//! at each step's [`checkin`], tells hung from dead or cut off with [`heartbeat`]s,
//! spots stragglers ([`straggler`]) and leaves a per-rank timeline ([`events`]) with
//! clock offsets to rank 0 ([`clock`]).
//!
//! On the launch host, `burnin chaos` ([`supervisor`], [`args`]) runs the job through
//! the user's launcher as a child ([`launch`]), injects what a rank cannot do to itself
//! (`link-cut` on the simulated cluster), watches output, process tree ([`crate::process::tree`])
//! and events to time detection and teardown, kills what is left (SIGTERM, grace,
//! SIGKILL, every process of the tree), checks the checkpoints on its own
//! ([`ckptcheck`]), relaunches with `--resume`, and compares the recovered run with an
//! uninterrupted reference; the records and the summary are in [`report`].
//!
//! The supervisor's modules depend one way: [`supervisor`] (the campaign: the
//! reference run, the trials in turn, `chaos.json`) → `trial` (one trial, phase by
//! phase) → [`launch`] (one run of the job: launching, watching, tearing down), with
//! `setup` (the validated flags and each run's command line), `parity` (a finished
//! run against the reference) and `sim` (the simulated cluster's link cut) below.
pub mod args;
pub mod checkin;
pub mod ckptcheck;
pub mod clock;
pub mod deadline;
pub mod events;
pub mod heartbeat;
pub mod launch;
mod parity;
pub mod report;
mod setup;
mod sim;
pub mod straggler;
pub mod supervisor;
mod trial;
pub mod victim;
