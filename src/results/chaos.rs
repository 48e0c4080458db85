//! Records of `burnin chaos`: one [`Trial`] per injected fault (a line of
//! `trials.jsonl`, appended as each trial ends) and [`ChaosReport`] (`chaos.json`,
//! rewritten after every trial) with min/median/max over trials, overall and per kind.
//! Every trial carries its timeline as unix timestamps so a report can draw it.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Version of the chaos.json / trials.jsonl schema.
pub const SCHEMA_VERSION: u32 = 1;

/// The phases of one recovery, in seconds. They add up: detect + teardown + relaunch
/// + restore + first step ≈ total (up to the supervisor's own gaps, e.g. a heal).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Times {
    /// Injection → first visible sign of failure (a rank process gone, a failure line
    /// from the launcher, a deadline line in a rank's events, the launcher's exit);
    /// for `slow`, injection → the straggler named.
    pub detect_s: Option<f64>,
    /// That sign → every process of the job gone (checked in /proc).
    pub teardown_s: Option<f64>,
    /// Job gone → every rank of the relaunched job up (rank 0's `start` event, after
    /// MPI start-up and the clock ping-pong with every rank). Includes the heal of a
    /// cut link and any relaunch attempt that failed before its ranks were up.
    pub relaunch_s: Option<f64>,
    /// Ranks up → checkpoint restored (model built, checkpoint chosen, read, verified
    /// and loaded).
    pub restore_s: Option<f64>,
    /// Restored → first new step completed.
    pub first_step_s: Option<f64>,
    /// Injection → first new step completed.
    pub total_recovery_s: Option<f64>,
}

/// The recovered run against the uninterrupted reference.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Parity {
    /// Final weights' sha256 equal to the reference's.
    pub weights_match: Option<bool>,
    /// Every loss of the recovered steps bit-identical to the reference's.
    pub losses_match: Option<bool>,
    /// How many losses were compared.
    pub steps_compared: usize,
    /// The faulted run's losses before the fault equal the reference's.
    pub before_fault_match: Option<bool>,
    /// The first difference, if any.
    pub detail: Option<String>,
}

impl Parity {
    pub fn ok(&self) -> bool {
        self.weights_match == Some(true)
            && self.losses_match == Some(true)
            && self.before_fault_match != Some(false)
    }
}

/// One instant of a trial's timeline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Mark {
    /// inject, detect, teardown-begin, teardown-done, heal, relaunch, ranks-up,
    /// restore, first-step, straggler, end.
    pub event: String,
    /// Unix seconds (rank events corrected to rank 0's clock; supervisor events on the
    /// supervisor's clock).
    pub unix: f64,
    /// Who saw it.
    pub source: String,
}

/// A rank's clock against rank 0's, measured at the start of the faulted run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct ClockOffset {
    pub rank: usize,
    pub host: String,
    pub offset_s: f64,
    pub rtt_s: f64,
}

/// A straggler found by rank 0.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct StragglerSeen {
    pub rank: usize,
    pub host: String,
    pub factor: f64,
    pub step: u64,
    /// Injection → the straggler line.
    pub detect_s: Option<f64>,
    pub line: String,
}

/// One trial: one fault injected, detected, torn down, recovered and checked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Trial {
    pub schema_version: u32,
    pub trial: usize,
    /// Seed of this trial's random draws.
    pub seed: u64,
    /// "kill", "node-loss:node2", ...
    pub fault: String,
    /// "kill", "node-loss", ...
    pub family: String,
    /// The fault as the job resolved it ("kill on rank 3 at the end of step 17 ...").
    pub description: Option<String>,
    pub victim_ranks: Vec<usize>,
    pub victim_hosts: Vec<String>,
    /// The step at whose end the fault fired.
    pub fault_step: Option<u64>,
    /// recovered | completed (slow: ran to its end) | failed
    pub outcome: String,
    /// Why it failed (empty when it did not).
    pub problems: Vec<String>,
    /// Observations that are not failures (e.g. another rank also reported slow).
    pub notes: Vec<String>,
    /// Launches it took to get the job running again (1: the first worked).
    pub relaunches: usize,
    /// What made the failure visible first.
    pub detected_by: Option<String>,
    /// Nothing noticed the failure within --hang-limit: the supervisor had to.
    pub hung: bool,
    /// Where a rank waited in vain: the deadline line that ended the job.
    pub stall: Option<String>,
    /// Ranks that line names as missing.
    pub stall_missing: Vec<usize>,
    pub straggler: Option<StragglerSeen>,
    pub teardown: Option<Teardown>,
    /// Newest checkpoint that verified when the job was gone (the supervisor's check).
    pub expected_restore_step: Option<u64>,
    /// Checkpoint the relaunched job restored (None: started over, no checkpoint yet).
    pub restored_step: Option<u64>,
    /// Checkpoints the relaunched job skipped, with why.
    pub skipped_checkpoints: Vec<String>,
    /// Every checkpoint left after the recovery verifies.
    pub checkpoints_verify: Option<bool>,
    /// fault step − restored step.
    pub steps_lost: Option<u64>,
    pub times: Times,
    pub parity: Parity,
    /// (total recovery + steps lost × reference step time) × ranks × $/GPU-hour.
    pub cost_usd: Option<f64>,
    pub timeline: Vec<Mark>,
    pub clock_offsets: Vec<ClockOffset>,
    /// The trial's folder (launcher output, runs, checkpoints).
    pub dir: PathBuf,
}

/// The uninterrupted run every trial is compared with.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Reference {
    pub dir: PathBuf,
    pub wall_s: f64,
    pub steps: u64,
    pub world_size: usize,
    /// Median step time (slowest rank), seconds.
    pub step_p50_s: f64,
    pub final_weights_sha256: String,
}

/// min / median / max of one metric over trials.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Stat {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// Trials of one kind (or all), summarised.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct KindSummary {
    pub trials: usize,
    /// recovered or completed, with parity.
    pub ok: usize,
    pub hangs: usize,
    pub detect_s: Option<Stat>,
    pub teardown_s: Option<Stat>,
    pub relaunch_s: Option<Stat>,
    pub restore_s: Option<Stat>,
    pub first_step_s: Option<Stat>,
    pub total_recovery_s: Option<Stat>,
    pub steps_lost: Option<Stat>,
    pub cost_usd: Option<Stat>,
    /// Straggler factor as measured (slow).
    pub straggler_factor: Option<Stat>,
}

/// Counts and statistics over all trials.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Summary {
    pub trials: usize,
    pub recovered: usize,
    pub completed: usize,
    pub failed: usize,
    pub hangs: usize,
    pub parity_failures: usize,
    /// Trials where the launcher exited leaving processes behind (the supervisor ended
    /// them; reported, not a failure).
    pub left_behind: usize,
    /// Trials where a process of the job survived the teardown.
    pub not_torn_down: usize,
    /// Trials that did not restore the newest good checkpoint, or left one that does
    /// not verify.
    pub lost_checkpoints: usize,
    pub all: KindSummary,
    pub per_kind: BTreeMap<String, KindSummary>,
}

/// chaos.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct ChaosReport {
    pub schema_version: u32,
    pub kind: String,
    pub burnin_version: String,
    pub argv: Vec<String>,
    /// The launcher prefix, split.
    pub launch: Vec<String>,
    pub train_args: Vec<String>,
    /// Fault kinds trials draw from.
    pub faults: Vec<String>,
    pub trials_planned: usize,
    pub seed: u64,
    pub gpu_hour_usd: Option<f64>,
    pub started_unix: f64,
    pub finished_unix: Option<f64>,
    /// How timestamps from different hosts were put on one clock.
    pub clock_note: String,
    pub reference: Option<Reference>,
    pub trials: Vec<Trial>,
    pub summary: Summary,
    /// pass: every trial recovered (or completed) with parity, no hang, no process of
    /// any job alive after its teardown, no checkpoint lost.
    pub outcome: String,
}

/// How a teardown went.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Teardown {
    /// "launcher ended the job itself", "SIGTERM", "SIGKILL".
    pub how: String,
    /// The launcher's exit ("exit 137", "signal 15").
    pub launcher_exit: String,
    /// Processes still alive a grace period after the launcher itself had exited
    /// (orphans it left — after a link cut, the cut node's, which it cannot reach;
    /// the supervisor then killed them): "pid comm".
    pub left_behind: Vec<String>,
    /// After the teardown, no process of the job exists (checked in /proc).
    pub tree_empty: bool,
    /// When the teardown began and ended (supervisor's clock).
    pub began_unix: f64,
    pub done_unix: f64,
}
