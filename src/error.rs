//! Errors and exit codes.
//!
//! Exit codes mean something (as in ripgrep): 0 everything passed, 1 a check or an
//! acceptance criterion failed (a negative *result*), 2 a usage or environment error
//! (burnin could not measure). Failed checks are not errors: workloads return an
//! [`Outcome`]; errors travel as `anyhow::Error` with context added at the boundaries.
//!
//! Under MPI an error may be known to every rank (a bad flag, disagreeing configs) or
//! to one rank only (its GPU is missing). The first kind is wrapped in [`Agreed`]: every
//! rank exits 2 cleanly and only rank 0 prints it, so the user reads one line, not N.
//! The second kind makes the rank print it with its name and abort the job, so peers
//! blocked in a collective do not hang.

/// The result of a workload that ran to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check passed.
    Pass,
    /// At least one check or criterion failed; the report says which.
    Fail,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Pass => 0,
            Outcome::Fail => 1,
        }
    }
    /// Fail when either fails.
    pub fn and(self, other: Outcome) -> Outcome {
        if self == Outcome::Pass && other == Outcome::Pass {
            Outcome::Pass
        } else {
            Outcome::Fail
        }
    }
    pub fn from_ok(ok: bool) -> Outcome {
        if ok {
            Outcome::Pass
        } else {
            Outcome::Fail
        }
    }
}

/// An error every rank of the job has reached together (same decision on the same
/// all-gathered data). Only rank 0 prints it; nobody aborts.
#[derive(Debug)]
pub struct Agreed(pub String);

impl std::fmt::Display for Agreed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Agreed {}

/// Exit code for usage and environment errors.
pub const EXIT_ERROR: i32 = 2;

/// Shorthand for a usage error that names the flag: `usage("--min-bytes", "...")`.
pub fn usage(flag: &str, msg: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{flag}: {msg}")
}
