//! burnin's training workload (`burnin train`, through the `burnin-train` binary): a
//! small decoder-only transformer (tch) trained data-parallel over burnin's own
//! [`Backend`](burnin::backend::Backend), writing checkpoints with a protocol that
//! never leaves a torn one looking valid, restoring them bit-exactly, and measuring
//! step time, the gradient exchange, and checkpoint write/read speed against the raw
//! speed of the same directory. The part that needs no libtorch (flags, data, records,
//! storage) is `burnin::train`; this crate is the part that does, so the `burnin`
//! binary starts on nodes without libtorch.
pub mod checkpoint;
pub mod ddp;
pub mod det;
pub mod matmul;
pub mod model;
pub mod optim;
mod run;

pub use run::run;

/// What `burnin-train --torch-info` prints: this libtorch, and the CUDA devices it can
/// use from this process.
pub fn torch_info() -> burnin::trainer::TorchInfo {
    burnin::trainer::TorchInfo {
        version: option_env!("BURNIN_LIBTORCH_VERSION")
            .unwrap_or("unknown")
            .to_string(),
        cuda_devices: tch::Cuda::device_count(),
    }
}
