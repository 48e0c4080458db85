//! What every judge of the verdict shares: a criterion's blank, where its job stands
//! (the gate), and the count of wrong elements. A leaf of `report`: it imports no
//! sibling but the data it reads, so `verdict` and the phase sections (`soak`) both
//! use it and neither imports the other for it.
use super::data::RunData;
use crate::results::acceptance::{Criterion, JobStatus, Status};
use crate::results::sweep::Point;

/// Where a job stands, as far as its criteria are concerned.
pub(super) enum Gate {
    /// It ran (or there is no record of jobs: a bare folder), judge what it measured.
    Judge,
    /// It crashed: its criteria fail.
    Crashed(String),
    /// It did not run: its criteria are not run.
    NotRun(String),
}

pub(super) fn gate(data: &RunData, job: &str) -> Gate {
    let Some(acc) = &data.acceptance else {
        return Gate::Judge;
    };
    match acc.jobs.iter().find(|j| j.name == job) {
        None => Gate::NotRun(
            if acc
                .phases_selected
                .iter()
                .any(|p| job.starts_with(p.as_str()))
            {
                "the run ended before this phase".into()
            } else {
                "not selected (--phases)".into()
            },
        ),
        Some(j) => match j.status {
            JobStatus::Passed | JobStatus::Failed | JobStatus::LauncherCrashed => Gate::Judge,
            JobStatus::NotAvailable | JobStatus::Skipped => Gate::NotRun(j.note.clone()),
            JobStatus::Crashed
            | JobStatus::TimedOut
            | JobStatus::Interrupted
            | JobStatus::Running => Gate::Crashed(format!("{}: {}", j.name, j.describe())),
        },
    }
}

/// Apply the gate of `job` to a criterion judged on what was measured.
pub(super) fn gated(g: &Gate, mut c: Criterion) -> Criterion {
    match g {
        Gate::Judge => c,
        Gate::Crashed(why) => {
            c.status = Status::Fail;
            c.detail = if c.detail.is_empty() {
                why.clone()
            } else {
                format!("{why}; {}", c.detail)
            };
            c
        }
        Gate::NotRun(why) => {
            c.status = Status::NotRun;
            c.measured = "-".into();
            c.detail = why.clone();
            c
        }
    }
}

pub(super) fn crit(id: &str, phase: &str, what: String, threshold: String) -> Criterion {
    Criterion {
        id: id.into(),
        phase: phase.into(),
        what,
        measured: "no data".into(),
        threshold,
        status: Status::Fail,
        detail: String::new(),
    }
}

/// `k` measured on the points' checks ("N wrong in M checked point(s)", PASS at 0);
/// false when no point was checked (then it stays FAIL: "nothing checked").
pub(super) fn count_wrong(k: &mut Criterion, points: &[Point]) -> bool {
    let checked = points.iter().filter(|p| p.wrong.is_some()).count();
    let wrong: u64 = points.iter().filter_map(|p| p.wrong).sum();
    if checked == 0 {
        k.measured = "nothing checked".into();
        return false;
    }
    k.measured = format!("{wrong} wrong in {checked} checked point(s)");
    k.status = if wrong == 0 {
        Status::Pass
    } else {
        Status::Fail
    };
    true
}
