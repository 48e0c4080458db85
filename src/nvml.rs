//! NVML while GPU work runs (the GPU phase, a soak): error counters before and after,
//! samples of clocks, power, temperature, throttle reasons and PCIe link while the
//! work runs, and the GPU's critical XID events (NVML's event API) meanwhile. NVML is loaded at run time
//! (`nvml-wrapper`), once per process: without it every value is `None` and
//! `nvml_error` says why. Row-remapping counts come from `nvmlDeviceGetRemappedRows`
//! through the loaded library (nvml-wrapper 0.12 has no call for it).
use crate::results::gpu::{
    ErrorCounters, PcieLink, Sample, ThrottleSummary, XidEvent, REASONS, THROTTLE_MASK,
};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// How long one wait for an XID event lasts, ms (the listener checks between waits
/// whether to stop).
const XID_WAIT_MS: u32 = 100;

/// This process's NVML, initialised on first use (nvml-wrapper loads every symbol at
/// init, so once per process, not per call).
pub fn shared() -> Result<&'static Nvml, String> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::init().map_err(|e| format!("NVML: {e}")))
        .as_ref()
        .map_err(Clone::clone)
}

/// This rank's GPU in NVML, found by PCI bus id.
pub struct NvmlGpu {
    nvml: &'static Nvml,
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

/// A value NVML gave, `None` where the GPU does not support it, and any other error
/// kept in `errs` as "what: error".
fn kept<T>(errs: &mut Vec<String>, what: &str, r: Result<T, NvmlError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(e) => {
            errs.push(format!("{what}: {e}"));
            None
        }
    }
}

/// nvml.h: NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, _DOUBLE_BIT_ECC_ERROR.
const RETIRED_SBE: u32 = 0;
const RETIRED_DBE: u32 = 1;

/// Rows remapped (corrected, uncorrected), a remapping pending, a remapping failed.
type RemappedRows = (u64, u64, bool, bool);

impl NvmlGpu {
    /// Open the GPU with this PCI bus id ("0000:18:00.0").
    pub fn open(pci_bus_id: &str) -> Result<NvmlGpu, String> {
        let nvml = shared()?;
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

    fn device(&self) -> Result<nvml_wrapper::Device<'static>, NvmlError> {
        self.nvml.device_by_index(self.index)
    }

    /// The error counters now, and what NVML failed to give (a counter the GPU does
    /// not support is `None` without an error: ECC off, no row remapping before Ampere,
    /// no page retirement after).
    pub fn counters(&self) -> (ErrorCounters, Option<String>) {
        let mut c = ErrorCounters {
            at_unix: crate::watchdog::unix_seconds(SystemTime::now()),
            ..Default::default()
        };
        let d = match self.device() {
            Ok(d) => d,
            Err(e) => return (c, Some(format!("NVML GPU {}: {e}", self.index))),
        };
        let mut errs = Vec::new();
        let e = &mut errs;
        let ecc = |e: &mut Vec<String>, m, k, what| kept(e, what, d.total_ecc_errors(m, k));
        use EccCounter::{Aggregate, Volatile};
        use MemoryError::{Corrected, Uncorrected};
        c.ecc_volatile_corrected = ecc(e, Corrected, Volatile, "ECC volatile corrected");
        c.ecc_volatile_uncorrected = ecc(e, Uncorrected, Volatile, "ECC volatile uncorrected");
        c.ecc_aggregate_corrected = ecc(e, Corrected, Aggregate, "ECC aggregate corrected");
        c.ecc_aggregate_uncorrected = ecc(e, Uncorrected, Aggregate, "ECC aggregate uncorrected");
        let retired = |e: &mut Vec<String>, cause, what| kept(e, what, self.retired(&d, cause));
        c.retired_pages_sbe = retired(e, RETIRED_SBE, "retired pages (SBE)");
        c.retired_pages_dbe = retired(e, RETIRED_DBE, "retired pages (DBE)");
        c.retired_pages_pending = kept(e, "pending retirement", d.are_pages_pending_retired());
        if let Some((corr, unc, pending, failed)) = kept(e, "remapped rows", self.remapped_rows(&d))
        {
            c.remapped_rows_corrected = Some(corr);
            c.remapped_rows_uncorrected = Some(unc);
            c.remapped_rows_pending = Some(pending);
            c.remapped_rows_failure = Some(failed);
        }
        c.pcie_replays = kept(
            e,
            "PCIe replay counter",
            d.pcie_replay_counter().map(u64::from),
        );
        let why = (!errs.is_empty()).then(|| format!("NVML counters: {}", errs.join("; ")));
        (c, why)
    }

    /// How many pages are retired for `cause`: `nvmlDeviceGetRetiredPages` asked for the
    /// count alone (nvml-wrapper's call also wants `_v2` and every address).
    fn retired(&self, d: &nvml_wrapper::Device, cause: u32) -> Result<u64, NvmlError> {
        /// nvml.h: NVML_ERROR_INSUFFICIENT_SIZE (the count is set, no addresses asked).
        const INSUFFICIENT_SIZE: u32 = 7;
        let f = self
            .nvml
            .lib()
            .nvmlDeviceGetRetiredPages
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        let mut count = 0u32;
        let mut none = 0u64;
        // SAFETY: `f` is NVML's nvmlDeviceGetRetiredPages(device, cause, *pageCount,
        // *addresses), resolved from the library `self.nvml` keeps loaded; the handle
        // is live while `d` is; with *pageCount 0 NVML writes only the count, and the
        // address pointer (one valid c_ulonglong) is not null as NVML asks.
        let rc = unsafe { f(d.handle(), cause, &mut count, &mut none) };
        if rc != INSUFFICIENT_SIZE {
            nvml_wrapper::error::nvml_try(rc)?;
        }
        Ok(count.into())
    }

    /// `nvmlDeviceGetRemappedRows`, asked of the loaded library directly.
    fn remapped_rows(&self, d: &nvml_wrapper::Device) -> Result<RemappedRows, NvmlError> {
        let f = self
            .nvml
            .lib()
            .nvmlDeviceGetRemappedRows
            .as_ref()
            .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: `f` is NVML's nvmlDeviceGetRemappedRows(device, *corrRows, *uncRows,
        // *isPending, *failureOccurred), resolved from the library `self.nvml` keeps
        // loaded for the process; the handle comes from that library and is live while
        // `d` is; NVML writes one c_uint through each pointer, valid for the call.
        let rc = unsafe { f(d.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
        nvml_wrapper::error::nvml_try(rc)?;
        Ok((corr.into(), unc.into(), pending != 0, failed != 0))
    }

    /// Highest PCIe generation and width the GPU supports.
    pub fn pcie_max(&self) -> (Option<u32>, Option<u32>) {
        match self.device() {
            Ok(d) => (d.max_pcie_link_gen().ok(), d.max_pcie_link_width().ok()),
            Err(_) => (None, None),
        }
    }

    /// One sample now.
    pub fn sample(&self, t_s: f64, during: &str) -> Sample {
        let mut s = Sample {
            t_s,
            during: during.into(),
            ..Default::default()
        };
        match self.device() {
            Ok(d) => {
                let mut errors = Vec::new();
                s.sm_mhz = kept(&mut errors, "SM clock", d.clock_info(Clock::SM));
                s.mem_mhz = kept(&mut errors, "memory clock", d.clock_info(Clock::Memory));
                s.power_w =
                    kept(&mut errors, "power", d.power_usage()).map(|mw| f64::from(mw) / 1000.0);
                s.temp_c = kept(
                    &mut errors,
                    "temperature",
                    d.temperature(TemperatureSensor::Gpu),
                );
                s.reasons = kept(
                    &mut errors,
                    "clocks-event reasons",
                    d.current_throttle_reasons(),
                )
                .map(|r| r.bits());
                s.pcie_gen = kept(&mut errors, "PCIe generation", d.current_pcie_link_gen());
                s.pcie_width = kept(&mut errors, "PCIe width", d.current_pcie_link_width());
                s.errors = errors;
            }
            Err(e) => s.errors.push(format!("device: {e}")),
        }
        s
    }
}

/// What the XID listener heard: the events, whether it listened for the whole work,
/// and why not.
#[derive(Debug, Default, PartialEq)]
pub struct Heard {
    pub xids: Vec<XidEvent>,
    pub listening: bool,
    pub error: Option<String>,
}

/// Listen for `gpu`'s critical XID events until `stop` (each wait at most
/// [`XID_WAIT_MS`]).
fn listen_xids(gpu: &NvmlGpu, stop: &AtomicBool) -> Heard {
    let not = |why: String| Heard {
        error: Some(format!("XID events not watched: {why}")),
        ..Default::default()
    };
    let set = match gpu.nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => return not(format!("NVML event set: {e}")),
    };
    let d = match gpu.device() {
        Ok(d) => d,
        Err(e) => return not(format!("NVML GPU {}: {e}", gpu.index)),
    };
    let set = match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
        Ok(s) => s,
        Err(e) => return not(format!("the driver did not register them ({})", e.error)),
    };
    let mut heard = Heard {
        listening: true,
        ..Default::default()
    };
    while !stop.load(Ordering::SeqCst) {
        match set.wait(XID_WAIT_MS) {
            Ok(ev) => heard.xids.extend(ev.event_data.map(|x| XidEvent {
                at_unix: crate::watchdog::unix_seconds(SystemTime::now()),
                xid: match x {
                    XidError::Value(v) => v,
                    XidError::Unknown => 999,
                },
            })),
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                heard.listening = false;
                heard.error = Some(format!("XID events not watched to the end: {e}"));
                break;
            }
        }
    }
    let _ = set.release_events();
    heard
}

/// What the work is doing, for the samples' `during`. Each stage the work sets begins
/// with a sample of its own, taken on the work's thread as it sets it, so a stage
/// shorter than the sampling period is still seen.
pub struct Stage<'g> {
    now: Mutex<&'static str>,
    gpu: Option<&'g NvmlGpu>,
    t0: Instant,
    starts: Mutex<Vec<Sample>>,
}

impl<'g> Stage<'g> {
    /// Stage `s` of the work on `gpu` (None: nothing is sampled); the samples' clock
    /// starts now.
    pub fn new(s: &'static str, gpu: Option<&'g NvmlGpu>) -> Stage<'g> {
        Stage {
            now: Mutex::new(s),
            gpu,
            t0: Instant::now(),
            starts: Mutex::new(Vec::new()),
        }
    }
    pub fn set(&self, s: &'static str) {
        if let Ok(mut g) = self.now.lock() {
            *g = s;
        }
        if let Some(gpu) = self.gpu {
            let x = gpu.sample(self.t0.elapsed().as_secs_f64(), s);
            if let Ok(mut v) = self.starts.lock() {
                v.push(x);
            }
        }
    }
    fn get(&self) -> &'static str {
        self.now.lock().map(|g| *g).unwrap_or("idle")
    }
    fn take_starts(&self) -> Vec<Sample> {
        self.starts
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// The work's value and what NVML saw meanwhile.
pub struct Watched<T> {
    pub value: T,
    /// Every sample, in time order.
    pub samples: Vec<Sample>,
    pub xids: Vec<XidEvent>,
    pub xid_listening: bool,
    pub error: Option<String>,
}

/// Run `work` on this thread while one thread samples the stage's GPU every `period`
/// (checking every 25 ms whether the work returned) and another listens for its XID
/// events (each wait bounded); both stop when the work returns.
pub fn watch<T>(period: Duration, stage: &Stage, work: impl FnOnce() -> T) -> Watched<T> {
    let Some(gpu) = stage.gpu else {
        return Watched {
            value: work(),
            samples: Vec::new(),
            xids: Vec::new(),
            xid_listening: false,
            error: None,
        };
    };
    let stop = AtomicBool::new(false);
    let (value, mut samples, heard) = std::thread::scope(|s| {
        let listener = s.spawn(|| listen_xids(gpu, &stop));
        let sampler = s.spawn(|| {
            let mut out = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let x = gpu.sample(stage.t0.elapsed().as_secs_f64(), stage.get());
                let held = x.reasons.map(|r| r & THROTTLE_MASK != 0);
                crate::metrics::gpu_sample(gpu.index, &x, held);
                out.push(x);
                let next = Instant::now() + period;
                while Instant::now() < next && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(25));
                }
            }
            out
        });
        let value = work();
        stop.store(true, Ordering::SeqCst);
        let heard = listener.join().unwrap_or_else(|_| Heard {
            error: Some("XID events: the listener thread failed".into()),
            ..Default::default()
        });
        (value, sampler.join().unwrap_or_default(), heard)
    });
    samples.extend(stage.take_starts());
    samples.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    Watched {
        value,
        samples,
        xids: heard.xids,
        xid_listening: heard.listening,
        error: heard.error,
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
    fn without_nvml_the_work_runs_and_nothing_is_sampled_or_listened_to() {
        let stage = Stage::new("idle", None);
        let w = watch(Duration::from_millis(100), &stage, || {
            stage.set("burn");
            stage.set("idle");
            7
        });
        assert_eq!(w.value, 7);
        assert!(w.samples.is_empty());
        assert!(w.xids.is_empty() && !w.xid_listening && w.error.is_none());
        assert_eq!(stage.get(), "idle");
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
