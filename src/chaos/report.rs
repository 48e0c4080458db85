//! The recovery report's arithmetic over the chaos records
//! (`crate::results::chaos`, re-exported here: [`Trial`], [`ChaosReport`]):
//! min/median/max over trials, overall and per kind, and the lines and table rank 0
//! prints. Pure and unit-tested.
pub use crate::results::chaos::*;
use crate::table;
use std::collections::BTreeMap;

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
    use std::path::PathBuf;

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
