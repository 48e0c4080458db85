//! Records of `burnin smoke`: each rank's checks and the job's lines (`--json`).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

impl Status {
    pub fn text(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One check on one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Check {
    pub check: String,
    pub status: Status,
    /// What was seen (PASS), why not (FAIL), or why it did not apply (SKIP).
    pub detail: String,
    pub seconds: f64,
}

/// Every check of one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankSmoke {
    pub rank: usize,
    pub host: String,
    pub local_rank: usize,
    pub checks: Vec<Check>,
}

/// One printed line: a check over all ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    pub check: String,
    pub status: Status,
    /// Ranks whose check passed.
    pub passed: usize,
    pub ranks: usize,
    pub detail: String,
}

/// The job's smoke result (what `--json` writes).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SmokeReport {
    pub mode: String,
    pub lines: Vec<Line>,
    pub ranks: Vec<RankSmoke>,
    pub outcome: String,
}
