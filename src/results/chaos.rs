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
    /// The rank measured.
    pub rank: usize,
    /// Its host name.
    pub host: String,
    /// Its clock minus rank 0's, seconds (subtracted from its event times).
    pub offset_s: f64,
    /// Round trip of the ping-pong sample the offset came from, seconds.
    pub rtt_s: f64,
}

/// A straggler found by rank 0.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct StragglerSeen {
    /// The slow rank.
    pub rank: usize,
    /// Its host name.
    pub host: String,
    /// Its median compute time over the others' median (2.0: twice as slow).
    pub factor: f64,
    /// The step at which rank 0 named it.
    pub step: u64,
    /// Injection → the straggler line.
    pub detect_s: Option<f64>,
    /// The straggler line rank 0 printed.
    pub line: String,
}

/// One trial: one fault injected, detected, torn down, recovered and checked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Trial {
    /// Version of the chaos.json / trials.jsonl schema.
    pub schema_version: u32,
    /// Index of the trial, from 0.
    pub trial: usize,
    /// Seed of this trial's random draws.
    pub seed: u64,
    /// "kill", "node-loss:node2", ...
    pub fault: String,
    /// "kill", "node-loss", ...
    pub family: String,
    /// The fault as the job resolved it ("kill on rank 3 at the end of step 17 ...").
    pub description: Option<String>,
    /// Ranks that injected the fault (for a link cut: the cut node's ranks).
    pub victim_ranks: Vec<usize>,
    /// Hosts of those ranks.
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
    /// The straggler rank 0 found (slow), if any.
    pub straggler: Option<StragglerSeen>,
    /// How the faulted job was torn down (None: it was not).
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
    /// The recovery's phases, in seconds.
    pub times: Times,
    /// The recovered run against the reference.
    pub parity: Parity,
    /// (total recovery + steps lost × reference step time) × ranks × $/GPU-hour.
    pub cost_usd: Option<f64>,
    /// The trial's instants in order, for drawing it.
    pub timeline: Vec<Mark>,
    /// Each rank's clock against rank 0's, measured at the start of the faulted run.
    pub clock_offsets: Vec<ClockOffset>,
    /// The trial's folder (launcher output, runs, checkpoints).
    pub dir: PathBuf,
}

/// The uninterrupted run every trial is compared with.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Reference {
    /// The reference's folder (launcher output, run/, ckpt/).
    pub dir: PathBuf,
    /// Launch → launcher exit, seconds.
    pub wall_s: f64,
    /// Steps it ran (its plan).
    pub steps: u64,
    /// Ranks it ran on.
    pub world_size: usize,
    /// Median step time (slowest rank), seconds.
    pub step_p50_s: f64,
    /// sha256 of its final weights (hex).
    pub final_weights_sha256: String,
}

/// min / median / max of one metric over trials.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Stat {
    /// How many values (non-finite ones left out).
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Largest value.
    pub max: f64,
}

/// Trials of one kind (or all), summarised.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct KindSummary {
    /// Trials counted.
    pub trials: usize,
    /// recovered or completed, with parity.
    pub ok: usize,
    /// Trials where nothing noticed the failure within --hang-limit.
    pub hangs: usize,
    /// Injection → failure visible, seconds.
    pub detect_s: Option<Stat>,
    /// Failure visible → job gone, seconds.
    pub teardown_s: Option<Stat>,
    /// Job gone → relaunched ranks up, seconds.
    pub relaunch_s: Option<Stat>,
    /// Ranks up → checkpoint restored, seconds.
    pub restore_s: Option<Stat>,
    /// Restored → first new step done, seconds.
    pub first_step_s: Option<Stat>,
    /// Injection → first new step done, seconds.
    pub total_recovery_s: Option<Stat>,
    /// Steps lost (fault step − restored step), a count.
    pub steps_lost: Option<Stat>,
    /// Cost of one failure, US dollars.
    pub cost_usd: Option<Stat>,
    /// Straggler factor as measured (slow).
    pub straggler_factor: Option<Stat>,
}

/// Counts and statistics over all trials.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Summary {
    /// Trials run.
    pub trials: usize,
    /// Trials with outcome recovered.
    pub recovered: usize,
    /// Trials with outcome completed (slow: ran to its end).
    pub completed: usize,
    /// Trials with outcome failed.
    pub failed: usize,
    /// Trials where nothing noticed the failure within --hang-limit.
    pub hangs: usize,
    /// Trials whose recovered run did not match the reference.
    pub parity_failures: usize,
    /// Trials where the launcher exited leaving processes behind (the supervisor ended
    /// them; reported, not a failure).
    pub left_behind: usize,
    /// Trials where a process of the job survived the teardown.
    pub not_torn_down: usize,
    /// Trials that did not restore the newest good checkpoint, or left one that does
    /// not verify.
    pub lost_checkpoints: usize,
    /// Statistics over all trials.
    pub all: KindSummary,
    /// Statistics per fault family ("kill", "node-loss", ...).
    pub per_kind: BTreeMap<String, KindSummary>,
}

/// chaos.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct ChaosReport {
    /// Version of the chaos.json / trials.jsonl schema.
    pub schema_version: u32,
    /// Always "chaos".
    pub kind: String,
    /// Version of the burnin that wrote it.
    pub burnin_version: String,
    /// The supervisor's command line.
    pub argv: Vec<String>,
    /// The launcher prefix, split.
    pub launch: Vec<String>,
    /// The `burnin train` arguments given after --.
    pub train_args: Vec<String>,
    /// Fault kinds trials draw from.
    pub faults: Vec<String>,
    /// Trials asked for (--trials).
    pub trials_planned: usize,
    /// Seed of the per-trial random draws (--seed).
    pub seed: u64,
    /// Price of one GPU-hour, US dollars (--gpu-hour-usd).
    pub gpu_hour_usd: Option<f64>,
    /// When the supervisor started, unix seconds.
    pub started_unix: f64,
    /// When it finished, unix seconds (None while running).
    pub finished_unix: Option<f64>,
    /// How timestamps from different hosts were put on one clock.
    pub clock_note: String,
    /// The uninterrupted reference run (None until it has run).
    pub reference: Option<Reference>,
    /// Every trial so far, in order.
    pub trials: Vec<Trial>,
    /// Counts and statistics over the trials.
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
    /// When the teardown ended, unix seconds (supervisor's clock).
    pub done_unix: f64,
}
