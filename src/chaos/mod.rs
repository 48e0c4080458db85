//! Chaos: what happens when a rank dies, hangs or slows down, measured.
//!
//! Two halves. In the victim job (`burnin train --fault …`), [`victim::Hooks`] injects
//! the fault at the chosen step, keeps every blocking step under a derived deadline
//! ([`deadline`]), names a missing rank at each step's [`checkin`], spots stragglers
//! ([`straggler`]) and leaves a per-rank timeline ([`events`]) with clock offsets to
//! rank 0 ([`clock`]). On the launch host, `burnin chaos` ([`supervisor`]) runs the
//! job through the user's launcher as a child, injects the faults a rank cannot do to
//! itself (`link-cut` on the simulated cluster), watches output, process tree and
//! events to time detection and teardown, kills what is left (SIGTERM, grace,
//! SIGKILL, every process of the tree), relaunches with `--resume`, and checks the
//! recovered run against an uninterrupted reference ([`report`]).
pub mod args;
pub mod checkin;
pub mod ckptcheck;
pub mod clock;
pub mod deadline;
pub mod events;
pub mod fault;
pub mod heartbeat;
pub mod launch;
pub mod proctree;
pub mod report;
pub mod straggler;
pub mod supervisor;
mod trial;
pub mod victim;
