//! DCGM's diagnostic verdict as burnin records it: `dcgmi diag -r N -j` parsed
//! (`crate::dcgm`) into one [`DcgmTest`] per test with one [`DcgmResult`] per GPU (or
//! one for the node, for DCGM 3's deployment checks).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A test's outcome, as DCGM prints it. DCGM writes a warning as "Fail" in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DcgmStatus {
    /// "Pass".
    Pass,
    /// "Fail" (DCGM also writes a warning so).
    Fail,
    /// "Skip": the test does not apply (or was not allowed) here.
    Skip,
    /// DCGM 4's "Not Run": the test was planned and did not run.
    NotRun,
    /// A status string this burnin does not know (kept in the test's messages).
    Other,
}

impl DcgmStatus {
    /// DCGM's status string ("Pass", "Fail", "Skip", "Not Run"; any case).
    pub fn parse(s: &str) -> DcgmStatus {
        match s.trim().to_ascii_lowercase().as_str() {
            "pass" => DcgmStatus::Pass,
            "fail" | "warn" | "warning" => DcgmStatus::Fail,
            "skip" => DcgmStatus::Skip,
            "not run" | "notrun" | "not_run" => DcgmStatus::NotRun,
            _ => DcgmStatus::Other,
        }
    }
}

/// One result line of a test: one GPU, or the whole node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DcgmResult {
    /// The GPU's DCGM id (its index on the node); None for a check of the whole node.
    pub gpu: Option<u32>,
    /// DCGM's status of this result.
    pub status: DcgmStatus,
    /// DCGM's warning texts for this result (why it failed).
    pub messages: Vec<String>,
    /// DCGM's informational lines for this result (e.g. measured bandwidths).
    pub info: Vec<String>,
}

/// One DCGM test (plugin) and its results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DcgmTest {
    /// DCGM's category ("Deployment", "Integration", "Hardware", "Stress").
    pub category: String,
    /// The test's name as DCGM prints it ("PCIe", "GPU Memory", "software", "memory").
    pub name: String,
    /// DCGM 4's summary status of the test over all GPUs; None in DCGM 3's output.
    pub summary: Option<DcgmStatus>,
    /// Warnings DCGM 4 gives in the summary only (not tied to one GPU's result).
    pub summary_messages: Vec<String>,
    /// One per GPU the test ran on (one for the node, for DCGM 3's deployment checks).
    pub results: Vec<DcgmResult>,
}

impl DcgmTest {
    /// The test's overall status: failed when any result or its summary failed, skipped
    /// when every result was skipped (or did not run), passed otherwise.
    pub fn status(&self) -> DcgmStatus {
        let seen: Vec<DcgmStatus> = self
            .results
            .iter()
            .map(|r| r.status)
            .chain(self.summary)
            .collect();
        if seen
            .iter()
            .any(|s| matches!(s, DcgmStatus::Fail | DcgmStatus::Other))
        {
            DcgmStatus::Fail
        } else if seen.is_empty()
            || seen
                .iter()
                .all(|s| matches!(s, DcgmStatus::Skip | DcgmStatus::NotRun))
        {
            DcgmStatus::Skip
        } else {
            DcgmStatus::Pass
        }
    }
}

/// A parsed `dcgmi diag -j` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DcgmDiag {
    /// DCGM's version when the output states it (3.1.7 and later).
    pub version: Option<String>,
    /// "Driver Version Detected", when stated.
    pub driver: Option<String>,
    /// The diagnostic ended before it ran any test (`runtime_error`): no verdict.
    pub runtime_error: Option<String>,
    /// Every test in DCGM's order (of every iteration, with `--iterations`).
    pub tests: Vec<DcgmTest>,
}

impl DcgmDiag {
    /// Whether DCGM's verdict is a pass: it ran, at least one test passed, and none
    /// failed (skipped tests are listed by [`DcgmDiag::skipped`], not failures).
    pub fn passed(&self) -> bool {
        self.runtime_error.is_none()
            && self.tests.iter().any(|t| t.status() == DcgmStatus::Pass)
            && self.tests.iter().all(|t| t.status() != DcgmStatus::Fail)
    }

    /// "pcie on GPU 0: <first message>" for every failed result (and a failed
    /// summary without a failed result), for the verdict.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in &self.tests {
            let mut named = false;
            for r in t
                .results
                .iter()
                .filter(|r| matches!(r.status, DcgmStatus::Fail | DcgmStatus::Other))
            {
                named = true;
                let on = r.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default();
                let why = r
                    .messages
                    .first()
                    .or(t.summary_messages.first())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                out.push(format!("{}{on}{why}", t.name));
            }
            if !named && t.status() == DcgmStatus::Fail {
                let why = t
                    .summary_messages
                    .first()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                out.push(format!("{}{why}", t.name));
            }
        }
        out
    }

    /// Names of the tests that were skipped (or did not run) on every GPU.
    pub fn skipped(&self) -> Vec<String> {
        self.tests
            .iter()
            .filter(|t| t.status() == DcgmStatus::Skip)
            .map(|t| t.name.clone())
            .collect()
    }
}
