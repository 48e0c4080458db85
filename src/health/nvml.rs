//! NVML during the GPU phase: error counters before and after, samples of clocks,
//! power, temperature, throttle reasons and PCIe link while the work runs. NVML is
//! loaded at run time (`nvml-wrapper`): without it every value is `None` and
//! `nvml_error` says why. Not yet here: XID events (NVML's event API) and row-remapping
//! counts (nvml-wrapper 0.12 has no call for them); their fields stay `None`/empty
//! and `xid_listening` false, so the report says they were not watched.
use crate::results::gpu::{
    ErrorCounters, PcieLink, Sample, ThrottleSummary, XidEvent, REASONS, THROTTLE_MASK,
};
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// This rank's GPU in NVML, found by PCI bus id.
pub struct NvmlGpu {
    nvml: Nvml,
    index: u32,
}

/// "00000000:18:00.0" (NVML) and "0000:18:00.0" (CUDA) as one form.
pub fn normal_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    }
}

impl NvmlGpu {
    /// Open the GPU with this PCI bus id ("0000:18:00.0").
    pub fn open(pci_bus_id: &str) -> Result<NvmlGpu, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML: {e}"))?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        let want = normal_bus_id(pci_bus_id);
        for index in 0..count {
            let Ok(d) = nvml.device_by_index(index) else {
                continue;
            };
            if d.pci_info().is_ok_and(|p| normal_bus_id(&p.bus_id) == want) {
                return Ok(NvmlGpu { nvml, index });
            }
        }
        Err(format!("NVML lists no GPU with PCI bus id {pci_bus_id}"))
    }

    fn device(&self) -> Option<nvml_wrapper::Device<'_>> {
        self.nvml.device_by_index(self.index).ok()
    }

    /// The error counters now.
    pub fn counters(&self) -> ErrorCounters {
        let at_unix = crate::watchdog::unix_seconds(SystemTime::now());
        let Some(d) = self.device() else {
            return ErrorCounters {
                at_unix,
                ..Default::default()
            };
        };
        let ecc = |e, c| d.total_ecc_errors(e, c).ok();
        let retired = |c| d.retired_pages(c).ok().map(|v| v.len() as u64);
        ErrorCounters {
            at_unix,
            ecc_volatile_corrected: ecc(MemoryError::Corrected, EccCounter::Volatile),
            ecc_volatile_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
            ecc_aggregate_corrected: ecc(MemoryError::Corrected, EccCounter::Aggregate),
            ecc_aggregate_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
            retired_pages_sbe: retired(RetirementCause::MultipleSingleBitEccErrors),
            retired_pages_dbe: retired(RetirementCause::DoubleBitEccError),
            retired_pages_pending: d.are_pages_pending_retired().ok(),
            ..Default::default()
        }
    }

    /// Highest PCIe generation and width the GPU supports.
    pub fn pcie_max(&self) -> (Option<u32>, Option<u32>) {
        match self.device() {
            Some(d) => (d.max_pcie_link_gen().ok(), d.max_pcie_link_width().ok()),
            None => (None, None),
        }
    }

    /// One sample now.
    pub fn sample(&self, t_s: f64, during: &str) -> Sample {
        let mut s = Sample {
            t_s,
            during: during.into(),
            ..Default::default()
        };
        if let Some(d) = self.device() {
            s.sm_mhz = d.clock_info(Clock::SM).ok();
            s.mem_mhz = d.clock_info(Clock::Memory).ok();
            s.power_w = d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0);
            s.temp_c = d.temperature(TemperatureSensor::Gpu).ok();
            s.reasons = d.current_throttle_reasons().ok().map(|r| r.bits());
            s.pcie_gen = d.current_pcie_link_gen().ok();
            s.pcie_width = d.current_pcie_link_width().ok();
        }
        s
    }
}

/// What the work is doing, for the samples' `during`.
pub struct Stage(Mutex<&'static str>);

impl Stage {
    pub fn new(s: &'static str) -> Stage {
        Stage(Mutex::new(s))
    }
    pub fn set(&self, s: &'static str) {
        if let Ok(mut g) = self.0.lock() {
            *g = s;
        }
    }
    fn get(&self) -> &'static str {
        self.0.lock().map(|g| *g).unwrap_or("idle")
    }
}

/// The work's value and what NVML saw meanwhile.
pub struct Watched<T> {
    pub value: T,
    pub samples: Vec<Sample>,
    pub xids: Vec<XidEvent>,
    pub xid_listening: bool,
    pub error: Option<String>,
}

/// Run `work` on this thread while another samples `gpu` every `period` (until the
/// work returns; the sampler checks every 25 ms whether to stop).
pub fn watch<T>(
    gpu: Option<&NvmlGpu>,
    period: Duration,
    stage: &Stage,
    work: impl FnOnce() -> T,
) -> Watched<T> {
    let Some(gpu) = gpu else {
        return Watched {
            value: work(),
            samples: Vec::new(),
            xids: Vec::new(),
            xid_listening: false,
            error: None,
        };
    };
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (value, samples) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut out = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                out.push(gpu.sample(t0.elapsed().as_secs_f64(), stage.get()));
                let next = Instant::now() + period;
                while Instant::now() < next && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(25));
                }
            }
            out
        });
        let value = work();
        stop.store(true, Ordering::SeqCst);
        (value, sampler.join().unwrap_or_default())
    });
    Watched {
        value,
        samples,
        xids: Vec::new(),
        xid_listening: false,
        error: None,
    }
}

/// Throttling over the samples taken during the burn.
pub fn summarize_throttle(samples: &[Sample]) -> ThrottleSummary {
    let burn: Vec<&Sample> = samples.iter().filter(|s| s.during == "burn").collect();
    let masks: Vec<u64> = burn.iter().filter_map(|s| s.reasons).collect();
    let n = masks.len();
    let share = |bit: u64| {
        if n == 0 {
            0.0
        } else {
            masks.iter().filter(|m| *m & bit != 0).count() as f64 / n as f64
        }
    };
    let by_reason = REASONS
        .iter()
        .filter(|(b, _)| masks.iter().any(|m| m & b != 0))
        .map(|(b, name)| (name.to_string(), share(*b)))
        .collect();
    let sm: Vec<f64> = burn
        .iter()
        .filter_map(|s| s.sm_mhz.map(f64::from))
        .collect();
    let power: Vec<f64> = burn.iter().filter_map(|s| s.power_w).collect();
    ThrottleSummary {
        samples: n as u32,
        throttled_share: share(THROTTLE_MASK),
        by_reason,
        sm_mhz_p50: (!sm.is_empty()).then(|| crate::stats::median(&sm)),
        temp_c_max: burn.iter().filter_map(|s| s.temp_c).max(),
        power_w_p50: (!power.is_empty()).then(|| crate::stats::median(&power)),
    }
}

/// The best link seen under load (samples not idle) against the GPU's maximum.
pub fn pcie_link(samples: &[Sample], max_gen: Option<u32>, max_width: Option<u32>) -> PcieLink {
    let busy = || samples.iter().filter(|s| s.during != "idle");
    PcieLink {
        gen: busy().filter_map(|s| s.pcie_gen).max(),
        max_gen,
        width: busy().filter_map(|s| s.pcie_width).max(),
        max_width,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(during: &str, reasons: u64, sm: u32, gen: u32) -> Sample {
        Sample {
            during: during.into(),
            reasons: Some(reasons),
            sm_mhz: Some(sm),
            temp_c: Some(60 + sm / 1000),
            power_w: Some(500.0),
            pcie_gen: Some(gen),
            pcie_width: Some(16),
            ..Default::default()
        }
    }

    #[test]
    fn bus_ids_of_nvml_and_cuda_compare_equal() {
        assert_eq!(normal_bus_id("00000000:18:00.0"), "0000:18:00.0");
        assert_eq!(normal_bus_id("0000:18:00.0"), "0000:18:00.0");
        assert_eq!(normal_bus_id("00000000:AB:00.0"), "0000:ab:00.0");
    }

    #[test]
    fn throttle_share_counts_heat_and_slowdown_not_the_power_cap_or_idle() {
        let samples = vec![
            s("copy", 0x40, 1980, 5),
            s("burn", 0x4, 1900, 5),
            s("burn", 0x4 | 0x40, 1500, 5),
            s("burn", 0x0, 1980, 5),
            s("burn", 0x8, 1200, 5),
            s("idle", 0x1, 345, 1),
        ];
        let t = summarize_throttle(&samples);
        assert_eq!(t.samples, 4);
        assert_eq!(t.throttled_share, 0.5);
        assert_eq!(t.by_reason["sw_power_cap"], 0.5);
        assert_eq!(t.by_reason["hw_thermal_slowdown"], 0.25);
        assert_eq!(t.by_reason["hw_slowdown"], 0.25);
        assert!(!t.by_reason.contains_key("gpu_idle"));
        assert_eq!(t.sm_mhz_p50, Some(1700.0));
        assert_eq!(t.power_w_p50, Some(500.0));
    }

    #[test]
    fn the_pcie_link_is_the_best_seen_under_load_not_idle() {
        let samples = vec![
            s("idle", 0, 300, 1),
            s("copy", 0, 1980, 4),
            s("burn", 0, 1980, 4),
        ];
        let p = pcie_link(&samples, Some(5), Some(16));
        assert_eq!((p.gen, p.width, p.max_gen), (Some(4), Some(16), Some(5)));
    }
}
