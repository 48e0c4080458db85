//! The records of `burnin run` (acceptance.json): the card, every child job with its
//! command line, exit and times, and the verdict, one [`Criterion`] per line.
use crate::card::Card;
use crate::results::comm::CommEfficiency;
use crate::topology::file::Topology;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Version of the acceptance.json schema.
pub const SCHEMA_VERSION: u32 = 1;

/// How a job ended.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Started, never recorded as ended (the run itself was killed).
    Running,
    /// Exit 0.
    Passed,
    /// Exit 1: it ran to the end and its own checks failed.
    Failed,
    /// Any other exit, or a signal.
    Crashed,
    /// The job wrote its complete results (the record a phase writes last), then the
    /// launcher ended by a signal: mpirun's own teardown can crash after every rank
    /// has finished (open-mpi/ompi#13650). Its criteria are judged from the results;
    /// the report names the signal.
    LauncherCrashed,
    /// Ran past its bound and was killed.
    TimedOut,
    /// `burnin run` was interrupted (SIGINT/SIGTERM) while it ran.
    Interrupted,
    /// This build or site cannot run it (e.g. no `burnin chaos`).
    NotAvailable,
    /// Not run, because an earlier job it needs did not succeed.
    Skipped,
}

/// One child job of the run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct JobRecord {
    /// probe, gpu, sweep, replay, train, chaos or soak.
    pub phase: String,
    /// The job's name and folder: probe, gpu, gpu-after, sweep, replay, train, train-part, train-resume, chaos, soak.
    pub name: String,
    /// The command line, as run.
    pub argv: Vec<String>,
    /// Its folder, relative to the results folder.
    pub dir: String,
    /// When the job started, unix seconds.
    pub started_unix: f64,
    /// When it ended, unix seconds (None: never recorded as ended).
    pub finished_unix: Option<f64>,
    /// Its exit code (None: killed by a signal, or not run).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The bound it ran under, seconds (0 for a job not run).
    pub timeout_s: f64,
    /// How it ended.
    pub status: JobStatus,
    /// Why, for anything but a plain exit.
    #[serde(default)]
    pub note: String,
}

impl JobRecord {
    /// "exit 1", "killed by signal 9", "timed out after 600 s", ...
    pub fn describe(&self) -> String {
        let how = match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => String::new(),
        };
        let what = match self.status {
            JobStatus::Running => "never finished (the run was killed)".to_string(),
            JobStatus::TimedOut => format!("timed out after {} s", self.timeout_s),
            JobStatus::Interrupted => "interrupted".into(),
            JobStatus::NotAvailable => "not available".into(),
            JobStatus::Skipped => "skipped".into(),
            JobStatus::Passed => "passed".into(),
            JobStatus::Failed => "its own checks failed".into(),
            JobStatus::Crashed => "crashed".into(),
            JobStatus::LauncherCrashed => "finished its results, then the launcher crashed".into(),
        };
        let mut s = what;
        if !how.is_empty() && !matches!(self.status, JobStatus::Passed | JobStatus::Failed) {
            s = format!("{s} ({how})");
        }
        if !self.note.is_empty() {
            s = format!("{s}: {}", self.note);
        }
        s
    }

    pub fn seconds(&self) -> Option<f64> {
        Some(self.finished_unix? - self.started_unix)
    }
}

/// acceptance.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct AcceptanceRecord {
    /// Version of the acceptance.json schema.
    pub schema_version: u32,
    /// Always "acceptance".
    pub kind: String,
    /// The acceptance card the run followed.
    pub card: Card,
    /// The card file as given on the command line.
    pub card_path: String,
    /// The topology file the card names, as read (None: the card names none).
    pub topology: Option<Topology>,
    /// The launcher prefix, split into words.
    pub launch: Vec<String>,
    /// The burnin binary every job ran.
    pub burnin: String,
    /// Version of the burnin that wrote it.
    pub burnin_version: String,
    /// `burnin run`'s own command line.
    pub argv: Vec<String>,
    /// Where `burnin run` ran.
    pub launch_host: String,
    /// Phases this run was asked to run (the card's, or --phases).
    pub phases_selected: Vec<String>,
    /// When `burnin run` started, unix seconds.
    pub started_unix: f64,
    /// When it finished, unix seconds (None while running or if killed).
    pub finished_unix: Option<f64>,
    /// Every child job, in start order.
    pub jobs: Vec<JobRecord>,
    /// The verdict as judged at the end of the run (`burnin report` judges again).
    pub criteria: Vec<Criterion>,
    /// The training's gradient all-reduce against the sweep's at the bucket size,
    /// when both phases ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_efficiency: Option<CommEfficiency>,
    /// pass or fail, once finished.
    pub outcome: Option<String>,
}

/// A criterion's verdict.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    NotRun,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotRun => "NOT RUN",
        }
    }
}

/// One line of the verdict table.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Criterion {
    /// Stable identifier (`sweep.busbw.inter`), for comparing runs.
    pub id: String,
    /// The phase it judges: probe, gpu, sweep, replay, train, chaos or soak.
    pub phase: String,
    /// What is judged, in words.
    pub what: String,
    /// What was measured, in words ("0.041 GB/s (inter at 16MiB)").
    pub measured: String,
    /// The bar ("≥ 0.05 GB/s").
    pub threshold: String,
    /// Its verdict.
    pub status: Status,
    /// Why, when the status needs explaining (a crash, no data).
    #[serde(default)]
    pub detail: String,
}

/// The run's outcome: FAIL when any criterion failed.
pub fn passed(criteria: &[Criterion]) -> bool {
    !criteria.iter().any(|c| c.status == Status::Fail)
}
