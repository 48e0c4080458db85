//! Records of `burnin probe`: what one rank found (one element of probe.json).
use crate::fabric::NodeFabric;
use crate::gpu::GpuInventory;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What one rank found.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct RankProbe {
    /// The rank's world rank.
    pub rank: usize,
    /// Its host name.
    pub host: String,
    /// Node index in the job.
    pub node: usize,
    /// Its rank among the ranks of its node.
    pub local_rank: usize,
    /// Ranks on its node.
    pub local_size: usize,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// MPI library version string.
    pub mpi_version: String,
    /// CUDA driver, its GPUs, or why none.
    pub cuda: GpuInventory,
    /// NCCL version when loadable.
    pub nccl_version: Option<String>,
    /// Why NCCL is not usable, when it is not.
    pub nccl_error: Option<String>,
    /// libtorch version, as the training binary reports it (None: no burnin-train or libtorch).
    pub libtorch_version: Option<String>,
    /// Whether libtorch can use CUDA from this process.
    pub torch_cuda: Option<bool>,
    /// The node's CPUs, NICs, InfiniBand ports, GPUs and NVLinks (local rank 0 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NodeFabric>,
}
