//! Records of `burnin evidence`: each host's `index.json`, one [`Entry`] per tool run.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Version of index.json's layout.
pub const SCHEMA_VERSION: u32 = 1;

/// What became of one tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// It ran to its end (whatever its exit code).
    Ran,
    /// No such program on PATH (or in /usr/sbin, /sbin).
    NotInstalled,
    /// It passed its deadline and was killed; the file holds what it wrote until then.
    TimedOut,
    /// It exists but could not be started (permissions, a bad interpreter).
    FailedToStart,
}

impl ToolStatus {
    pub fn text(self) -> &'static str {
        match self {
            ToolStatus::Ran => "ran",
            ToolStatus::NotInstalled => "not installed",
            ToolStatus::TimedOut => "timed out",
            ToolStatus::FailedToStart => "failed to start",
        }
    }
}

/// One line of index.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Entry {
    /// The command as run: "nvidia-smi topo -m".
    pub tool: String,
    /// What became of it.
    pub status: ToolStatus,
    /// Exit code when it ran (None: killed by a signal, or it did not run).
    pub exit_code: Option<i32>,
    /// Output file, relative to the host's folder (None when nothing was written).
    pub file: Option<String>,
    /// Wall time it took.
    pub seconds: f64,
    /// Full path of the program that ran.
    pub program: Option<String>,
    /// Why it did not run, or the signal that ended it.
    pub note: Option<String>,
}

/// A host's index.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostIndex {
    /// Version of index.json's layout.
    pub schema_version: u32,
    /// The host's name.
    pub host: String,
    /// The host's folder.
    pub dir: PathBuf,
    /// Version of the burnin that wrote it.
    pub burnin_version: String,
    /// When the host's collection started, unix seconds.
    pub started_unix: f64,
    /// Whether the invasive diagnostics ran (--invasive: `dcgmi diag --run 3`).
    pub invasive: bool,
    /// One entry per tool, in run order.
    pub entries: Vec<Entry>,
    /// DCGM's diagnostic (`dcgmi diag -r N -j`) parsed into per-test, per-GPU results
    /// (None: dcgmi is not installed).
    #[serde(default)]
    pub dcgm_diag: Option<super::gpu::HostDcgm>,
}
