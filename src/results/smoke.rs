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
    /// The check's name: context, gpu, memory, matmul, comm-init, all_reduce.
    pub check: String,
    /// Its result.
    pub status: Status,
    /// What was seen (PASS), why not (FAIL), or why it did not apply (SKIP).
    pub detail: String,
    /// Its wall time, seconds (0 when skipped).
    pub seconds: f64,
}

/// Every check of one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankSmoke {
    /// The rank's world rank.
    pub rank: usize,
    /// Its host name.
    pub host: String,
    /// Its rank among the ranks of its node.
    pub local_rank: usize,
    /// Its checks, in run order.
    pub checks: Vec<Check>,
}

/// One printed line: a check over all ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    /// The check's name.
    pub check: String,
    /// FAIL when any rank failed, SKIP when none passed, else PASS.
    pub status: Status,
    /// Ranks whose check passed.
    pub passed: usize,
    /// Ranks that ran it.
    pub ranks: usize,
    /// The first failures (up to 4 ranks), the skip reason, or a passing rank's detail
    /// with the slowest rank.
    pub detail: String,
}

/// The job's smoke result (what `--json` writes).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SmokeReport {
    /// "GPU (NCCL)", or "CPU (MPI): " and why not GPU.
    pub mode: String,
    /// One line per check, over all ranks.
    pub lines: Vec<Line>,
    /// Every rank's checks, in rank order.
    pub ranks: Vec<RankSmoke>,
    /// pass: no check failed on any rank; else fail.
    pub outcome: String,
}
