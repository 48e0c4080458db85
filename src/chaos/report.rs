//! The recovery report: one [`Trial`] per injected fault (a line of `trials.jsonl`,
//! appended as each trial ends) and [`ChaosReport`] (`chaos.json`, rewritten after
//! every trial) with min/median/max over trials, overall and per kind. Every trial
//! carries its timeline as unix timestamps so a report can draw it. Plain serde
//! structs; the arithmetic is pure and unit-tested.
use crate::table;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Version of the chaos.json / trials.jsonl schema.
pub const SCHEMA_VERSION: u32 = 1;

/// The phases of one recovery, in seconds. They add up: detect + teardown + relaunch
/// + restore + first step ≈ total (up to the supervisor's own gaps, e.g. a heal).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClockOffset {
    pub rank: usize,
    pub host: String,
    pub offset_s: f64,
    pub rtt_s: f64,
}

/// A straggler found by rank 0.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
    pub teardown: Option<super::launch::Teardown>,
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stat {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// None for no values.
pub fn stat(v: &[f64]) -> Option<Stat> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some(Stat {
        n,
        min: s[0],
        median,
        max: s[n - 1],
    })
}

/// Trials of one kind (or all), summarised.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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

fn kind_summary(trials: &[&Trial]) -> KindSummary {
    let col = |f: fn(&Trial) -> Option<f64>| {
        stat(&trials.iter().filter_map(|t| f(t)).collect::<Vec<_>>())
    };
    KindSummary {
        trials: trials.len(),
        ok: trials.iter().filter(|t| t.outcome != "failed").count(),
        hangs: trials.iter().filter(|t| t.hung).count(),
        detect_s: col(|t| t.times.detect_s),
        teardown_s: col(|t| t.times.teardown_s),
        relaunch_s: col(|t| t.times.relaunch_s),
        restore_s: col(|t| t.times.restore_s),
        first_step_s: col(|t| t.times.first_step_s),
        total_recovery_s: col(|t| t.times.total_recovery_s),
        steps_lost: col(|t| t.steps_lost.map(|s| s as f64)),
        cost_usd: col(|t| t.cost_usd),
        straggler_factor: col(|t| t.straggler.as_ref().map(|s| s.factor)),
    }
}

/// Counts and statistics over all trials.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
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

pub fn summarize(trials: &[Trial]) -> Summary {
    let all: Vec<&Trial> = trials.iter().collect();
    let mut per_kind: BTreeMap<String, Vec<&Trial>> = BTreeMap::new();
    for t in trials {
        per_kind.entry(t.family.clone()).or_default().push(t);
    }
    let lost = |t: &Trial| {
        t.checkpoints_verify == Some(false)
            || (t.expected_restore_step.is_some() && t.restored_step != t.expected_restore_step)
    };
    Summary {
        trials: trials.len(),
        recovered: trials.iter().filter(|t| t.outcome == "recovered").count(),
        completed: trials.iter().filter(|t| t.outcome == "completed").count(),
        failed: trials.iter().filter(|t| t.outcome == "failed").count(),
        hangs: trials.iter().filter(|t| t.hung).count(),
        parity_failures: trials.iter().filter(|t| !t.parity.ok()).count(),
        left_behind: trials
            .iter()
            .filter(|t| {
                t.teardown
                    .as_ref()
                    .is_some_and(|d| !d.left_behind.is_empty())
            })
            .count(),
        not_torn_down: trials
            .iter()
            .filter(|t| t.teardown.as_ref().is_some_and(|d| !d.tree_empty))
            .count(),
        lost_checkpoints: trials.iter().filter(|t| lost(t)).count(),
        all: kind_summary(&all),
        per_kind: per_kind
            .into_iter()
            .map(|(k, v)| (k, kind_summary(&v)))
            .collect(),
    }
}

/// chaos.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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

fn secs(s: &Option<Stat>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s.n == 1 => format!("{:.2}", s.median),
        Some(s) => format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
    }
}

/// The summary table: one row per kind and one for all, medians with (min-max).
pub fn table(s: &Summary, with_cost: bool) -> String {
    let mut header = vec![
        "fault",
        "trials",
        "ok",
        "hangs",
        "detect s",
        "teardown s",
        "relaunch s",
        "restore s",
        "1st step s",
        "recovery s",
        "steps lost",
    ];
    if with_cost {
        header.push("cost $");
    }
    let row = |name: &str, k: &KindSummary| {
        let mut r = vec![
            name.to_string(),
            k.trials.to_string(),
            k.ok.to_string(),
            k.hangs.to_string(),
            secs(&k.detect_s),
            secs(&k.teardown_s),
            secs(&k.relaunch_s),
            secs(&k.restore_s),
            secs(&k.first_step_s),
            secs(&k.total_recovery_s),
            match &k.steps_lost {
                None => "-".into(),
                Some(x) if x.n == 1 => format!("{:.0}", x.median),
                Some(x) => format!("{:.0} ({:.0}-{:.0})", x.median, x.min, x.max),
            },
        ];
        if with_cost {
            r.push(match &k.cost_usd {
                None => "-".into(),
                Some(x) => format!("{:.4}", x.median),
            });
        }
        r
    };
    let mut rows: Vec<Vec<String>> = s.per_kind.iter().map(|(n, k)| row(n, k)).collect();
    if s.per_kind.len() > 1 {
        rows.push(row("all", &s.all));
    }
    table::render(&header, &rows)
}

/// One line per finished trial.
pub fn trial_line(t: &Trial, of: usize) -> String {
    let f = |x: Option<f64>| x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
    let what = t.description.clone().unwrap_or_else(|| t.fault.clone());
    let mut l = format!("trial {}/{of}: {what}: {}", t.trial + 1, t.outcome);
    if let (Some(s), "slow") = (&t.straggler, t.family.as_str()) {
        l.push_str(&format!(
            "; straggler rank {} ({}) x{:.2} found after {} s",
            s.rank,
            s.host,
            s.factor,
            f(s.detect_s)
        ));
    }
    if t.family != "slow" {
        l.push_str(&format!(
            "; detect {} s, teardown {} s, relaunch {} s, restore {} s, first step {} s; recovery {} s; restored step {}, {} step(s) lost",
            f(t.times.detect_s),
            f(t.times.teardown_s),
            f(t.times.relaunch_s),
            f(t.times.restore_s),
            f(t.times.first_step_s),
            f(t.times.total_recovery_s),
            t.restored_step.map(|s| s.to_string()).unwrap_or_else(|| "none".into()),
            t.steps_lost.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
        ));
    }
    l.push_str(if t.parity.ok() {
        "; parity ok"
    } else {
        "; PARITY FAILED"
    });
    if t.hung {
        l.push_str("; HUNG");
    }
    for p in &t.problems {
        l.push_str(&format!("\n  problem: {p}"));
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(family: &str, detect: f64, ok: bool) -> Trial {
        Trial {
            schema_version: SCHEMA_VERSION,
            trial: 0,
            seed: 1,
            fault: family.into(),
            family: family.into(),
            description: None,
            victim_ranks: vec![1],
            victim_hosts: vec!["h".into()],
            fault_step: Some(7),
            outcome: if ok { "recovered" } else { "failed" }.into(),
            problems: vec![],
            notes: vec![],
            relaunches: 1,
            detected_by: None,
            hung: false,
            stall: None,
            stall_missing: vec![],
            straggler: None,
            teardown: None,
            expected_restore_step: Some(5),
            restored_step: Some(5),
            skipped_checkpoints: vec![],
            checkpoints_verify: Some(true),
            steps_lost: Some(2),
            times: Times {
                detect_s: Some(detect),
                total_recovery_s: Some(detect * 10.0),
                ..Times::default()
            },
            parity: Parity {
                weights_match: Some(ok),
                losses_match: Some(true),
                steps_compared: 3,
                before_fault_match: Some(true),
                detail: None,
            },
            cost_usd: None,
            timeline: vec![],
            clock_offsets: vec![],
            dir: PathBuf::from("t"),
        }
    }

    #[test]
    fn stats_are_min_median_max() {
        let s = stat(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.max), (4, 1.0, 2.5, 10.0));
        assert_eq!(stat(&[5.0]).unwrap().median, 5.0);
        assert!(stat(&[]).is_none());
        assert!(stat(&[f64::NAN]).is_none());
    }

    #[test]
    fn summary_counts_and_groups_by_kind() {
        let t = vec![
            trial("kill", 0.1, true),
            trial("kill", 0.3, true),
            trial("hang", 1.2, false),
        ];
        let s = summarize(&t);
        assert_eq!(
            (s.trials, s.recovered, s.failed, s.parity_failures),
            (3, 2, 1, 1)
        );
        assert_eq!(s.per_kind["kill"].detect_s.as_ref().unwrap().median, 0.2);
        assert_eq!(s.all.total_recovery_s.as_ref().unwrap().max, 12.0);
        let text = table(&s, false);
        assert!(
            text.contains("kill") && text.contains("hang") && text.contains("all"),
            "{text}"
        );
        assert!(text.contains("0.20 (0.10-0.30)"), "{text}");
        let line = trial_line(&t[0], 3);
        assert!(
            line.starts_with("trial 1/3: kill: recovered; detect 0.10 s"),
            "{line}"
        );
    }

    #[test]
    fn a_wrong_restore_is_a_lost_checkpoint() {
        let mut t = trial("kill", 0.1, true);
        t.restored_step = Some(0);
        assert_eq!(summarize(&[t]).lost_checkpoints, 1);
    }
}
