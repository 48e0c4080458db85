//! Provenance: what a second engineer needs to re-run and trust a result.
use crate::kinds::Node;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Environment variable prefixes that change how the fabric behaves.
pub const ENV_PREFIXES: [&str; 8] = [
    "NCCL_", "OMPI_", "UCX_", "CUDA_", "BURNIN_", "PMIX_", "SLURM_", "TORCH_",
];

/// Where and how a run happened.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Provenance {
    /// burnin's version.
    pub burnin_version: String,
    /// The command line, as given.
    pub argv: Vec<String>,
    /// NCCL_*, OMPI_*, UCX_*, CUDA_*, BURNIN_* ... variables of rank 0, sorted.
    pub env: Vec<(String, String)>,
    /// MPI library version string.
    pub mpi_version: String,
    /// Backend used and why it was chosen.
    pub backend: String,
    /// Ranks in the job.
    pub world_size: usize,
    /// Nodes and their ranks.
    pub nodes: Vec<Node>,
    /// Each rank's data plane as its backend describes it, in rank order: the MPI
    /// library, or the NCCL version and file with the rank's GPU (name, PCI bus id), as
    /// the libraries report them.
    #[serde(default)]
    pub rank_stacks: Vec<String>,
    /// Unix time (seconds) the run started.
    pub started_unix: f64,
}

/// Relevant environment variables, sorted (OMPI's internal plumbing left out).
pub fn relevant_env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .filter(|(k, _)| {
            !(k.starts_with("OMPI_COMM_")
                || k.starts_with("OMPI_FILE_LOCATION")
                || k.starts_with("PMIX_SERVER")
                || k.starts_with("PMIX_SECURITY"))
        })
        // What burnin set for its transport logs is not the user's setting.
        .filter(|(k, v)| !crate::transport::set_by_burnin(k, v))
        .collect();
    v.sort();
    v
}

impl Provenance {
    /// This process's provenance, from what the caller gathered over the job: the
    /// backend used and why, the MPI library's version, the job's size and nodes, and
    /// every rank's data plane in rank order (`rank_stacks`).
    pub fn new(
        backend: &str,
        mpi_version: String,
        world_size: usize,
        nodes: Vec<Node>,
        rank_stacks: Vec<String>,
    ) -> Provenance {
        Provenance {
            burnin_version: env!("CARGO_PKG_VERSION").to_string(),
            argv: std::env::args().collect(),
            env: relevant_env(),
            mpi_version,
            backend: backend.to_string(),
            world_size,
            nodes,
            rank_stacks,
            started_unix: crate::watchdog::unix_seconds(std::time::SystemTime::now()),
        }
    }
}
