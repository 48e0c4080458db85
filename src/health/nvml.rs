//! NVML during the GPU phase: error counters before and after, samples of clocks,
//! power, temperature, throttle reasons and PCIe link while the copies and the burn
//! run, and XID events. NVML is loaded at run time (`nvml-wrapper`): without it every
//! value is `None` and `nvml_error` says why.
use crate::results::gpu::{ErrorCounters, PcieLink, Sample, ThrottleSummary, XidEvent};

/// This rank's GPU in NVML, found by PCI bus id.
pub struct NvmlGpu {
    _private: (),
}

impl NvmlGpu {
    /// Open the GPU with this PCI bus id ("0000:18:00.0").
    pub fn open(pci_bus_id: &str) -> Result<NvmlGpu, String> {
        let _ = pci_bus_id;
        Err("NVML not built yet".into())
    }

    /// The error counters now.
    pub fn counters(&self) -> ErrorCounters {
        ErrorCounters::default()
    }

    /// Highest PCIe generation and width the GPU supports.
    pub fn pcie_max(&self) -> (Option<u32>, Option<u32>) {
        (None, None)
    }
}

/// Throttling over the samples taken during the burn.
pub fn summarize_throttle(samples: &[Sample]) -> ThrottleSummary {
    let _ = samples;
    ThrottleSummary::default()
}

/// The best link seen under load (samples not idle) against the GPU's maximum.
pub fn pcie_link(samples: &[Sample], max_gen: Option<u32>, max_width: Option<u32>) -> PcieLink {
    let _ = samples;
    PcieLink {
        max_gen,
        max_width,
        ..PcieLink::default()
    }
}

/// Placeholder for the XID listener's result.
pub fn no_xids() -> Vec<XidEvent> {
    Vec::new()
}
