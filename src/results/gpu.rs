//! Records of `burnin gpu`: per GPU its copy rates, compute burn, NVML samples during
//! the burn, PCIe link and error counters before and after; per node the peer-copy
//! matrix. `gpu.json` holds one [`GpuReport`]; `samples.jsonl` streams the NVML
//! samples as they are taken (one [`SampleRecord`] per line).
//!
//! Units are in the names: `_gbps` is GB/s (10^9 bytes per second, as nvbandwidth
//! prints), `_mhz`, `_w`, `_c`, `_s`, `_bytes`. A value NVML or the driver does not
//! give is `null`, never a made-up zero.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// gpu.json's schema version.
pub const SCHEMA_VERSION: u32 = 1;

/// One copy, timed and checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CopyRate {
    /// Bytes of one copy.
    pub bytes: u64,
    /// Timed copies (after one untimed warm-up copy).
    pub reps: u32,
    /// Bytes copied per second over the timed copies, GB/s (10^9 B/s).
    pub gbps: f64,
    /// Whether the destination held exactly the source's bytes after the copies.
    pub verified: bool,
    /// Why the copy was not measured or not verified.
    pub error: Option<String>,
}

/// The copies of one GPU with itself and the host (pinned host memory).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuCopies {
    /// Host (pinned) to device.
    pub h2d: Option<CopyRate>,
    /// Device to host (pinned).
    pub d2h: Option<CopyRate>,
    /// Device to device within the GPU. Each byte is read once and written once, so
    /// the memory moves 2 × `gbps` (see [`GpuCopies::memory_gbps`]).
    pub d2d: Option<CopyRate>,
    /// Host to device and device to host at once, on two streams.
    #[serde(default)]
    pub bidir: Option<BidirRate>,
    /// Small copies one after another on one stream.
    #[serde(default)]
    pub small: Option<SmallCopies>,
}

/// Host↔device in both directions at once (as a data loader and a checkpoint can
/// use the bus together): each direction's copies on its own stream, started by one
/// event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BidirRate {
    /// Bytes of one copy (each direction).
    pub bytes: u64,
    /// Timed copies per direction.
    pub reps: u32,
    /// Host to device while device to host ran, GB/s (from the shared start to its
    /// own last copy's end).
    pub h2d_gbps: f64,
    /// Device to host while host to device ran, GB/s.
    pub d2h_gbps: f64,
    /// Both directions' bytes over the time until the later one ended, GB/s.
    pub total_gbps: f64,
    /// Whether both destinations held exactly their source's bytes afterwards.
    pub verified: bool,
    /// Why it was not measured or not verified.
    pub error: Option<String>,
}

/// Copies of a few bytes, back to back on one stream, between two events: the GPU's
/// time per copy — a small copy's latency, or the host's rate of queuing them where
/// that is slower (both bound what a small transfer costs a job).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SmallCopies {
    /// Bytes of each copy.
    pub bytes: u64,
    /// Copies timed per direction.
    pub reps: u32,
    /// Microseconds per host-to-device copy.
    pub h2d_us: f64,
    /// Microseconds per device-to-host copy.
    pub d2h_us: f64,
    /// Why they were not measured.
    pub error: Option<String>,
}

impl GpuCopies {
    /// Memory bandwidth seen by the device-local copy: bytes read plus bytes written
    /// per second, GB/s (what a GPU's "HBM bandwidth" figure counts).
    pub fn memory_gbps(&self) -> Option<f64> {
        self.d2d
            .as_ref()
            .filter(|c| c.error.is_none() && c.gbps > 0.0)
            .map(|c| 2.0 * c.gbps)
    }
}

/// One GPU pair's peer copy in one direction, on one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeerCopy {
    /// Source GPU (CUDA ordinal on its node).
    pub src: usize,
    /// Destination GPU (CUDA ordinal on its node).
    pub dst: usize,
    /// Whether the driver granted peer access (false: the copy was staged by the
    /// driver through the host, and is slow by design).
    pub peer_access: bool,
    /// The copy, timed and checked (None: not attempted, see `error`).
    pub copy: Option<CopyRate>,
    /// Why the pair was not measured.
    pub error: Option<String>,
}

/// The peer-copy matrix of one node, measured by its local rank 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeMatrix {
    /// The node's host name.
    pub host: String,
    /// The world rank that measured it.
    pub rank: usize,
    /// GPUs of the node (CUDA ordinals) the matrix covers.
    pub gpus: Vec<usize>,
    /// Every ordered pair (src ≠ dst).
    pub pairs: Vec<PeerCopy>,
    /// Why the matrix is missing or partial.
    pub error: Option<String>,
}

/// The compute burn of one GPU: a fixed time of fused multiply-adds whose results are
/// checked against the host's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Burn {
    /// What computed: "fma-ptx" (burnin's PTX kernel), "matmul-libtorch".
    pub kernel: String,
    /// Seconds the burn ran (from the first launch to the last completion).
    pub seconds: f64,
    /// Kernel launches completed.
    pub launches: u64,
    /// SMs of the GPU.
    #[serde(default)]
    pub sms: u32,
    /// Blocks of 256 threads one SM holds at once for the burn kernel, as the driver's
    /// occupancy calculator says for the code its JIT built; the grid is sms × this
    /// (one full wave).
    #[serde(default)]
    pub blocks_per_sm: u32,
    /// Elements the grid carries (4 chains a thread).
    #[serde(default)]
    pub elements: u64,
    /// FMA steps per element per launch (calibrated to about 50 ms a launch).
    #[serde(default)]
    pub iters: u64,
    /// GPU time of the timed launches (CUDA events around each kernel), seconds:
    /// tflops = 2 × elements × iters × launches / gpu_seconds / 10^12.
    #[serde(default)]
    pub gpu_seconds: f64,
    /// Floating-point operations per second over the burn, TFLOP/s (10^12; an FMA is
    /// 2 operations).
    pub tflops: f64,
    /// TFLOP/s of each tenth of the burn, in order (a GPU that slows when hot shows it
    /// here).
    pub tflops_by_tenth: Vec<f64>,
    /// Result values compared with the host's.
    pub checked: u64,
    /// Of those, how many differed (any is a FAIL: a GPU that computes wrong numbers
    /// under load).
    pub wrong: u64,
    /// Why the burn did not run or stopped.
    pub error: Option<String>,
}

/// The device memory test of one GPU: most of its free memory written and read back
/// with several patterns, on the GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemTest {
    /// Device memory free when the test began, bytes (cuMemGetInfo).
    pub free_bytes: u64,
    /// The GPU's memory, bytes.
    pub total_bytes: u64,
    /// Bytes tested: every region below, each through every pattern of every pass.
    pub tested_bytes: u64,
    /// tested_bytes / free_bytes.
    pub share_of_free: f64,
    /// The share of free memory asked for (`--memtest-share`).
    pub share_asked: f64,
    /// The allocations tested.
    pub regions: Vec<MemRegion>,
    /// The patterns of each pass, in order.
    pub patterns: Vec<String>,
    /// Passes completed over every region (at least one; more while the time lasts).
    pub passes: u64,
    /// Seconds from the first allocation to the last check read back.
    pub seconds: f64,
    /// GPU time of the passes (CUDA events), seconds.
    pub gpu_seconds: f64,
    /// Bytes written and read by the kernels over gpu_seconds, GB/s (10^9): each
    /// pattern writes a region once, reads and rewrites it once and reads it once
    /// (4 × its bytes), comparable with a device-local copy's memory bandwidth.
    pub gbps: f64,
    /// 8-byte words read back different from what was written, over all passes.
    pub failing_words: u64,
    /// The first failure at each failing address, lowest first in each pass (at
    /// most 16).
    pub failures: Vec<MemFailure>,
    /// Error counters read just before the test (new corrected ECC errors during it
    /// are faults the ECC hid from the test).
    pub counters_before: Option<ErrorCounters>,
    /// Error counters read just after it.
    pub counters_after: Option<ErrorCounters>,
    /// Why the test did not run or stopped (what ran before is counted).
    pub error: Option<String>,
}

/// One allocation the memory test covered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemRegion {
    /// Device address, hex.
    pub address: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// One 8-byte word the memory test read back wrong.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemFailure {
    /// Device address of the word, hex.
    pub address: String,
    /// The pattern and stage that found it ("random, inverted").
    pub pattern: String,
    /// The pass (0 is the first).
    pub pass: u64,
    /// What the word should hold (what was written), hex.
    pub expected: String,
    /// What was read back, hex.
    pub read: String,
    /// The bits that differ (0 is the least significant of the little-endian word).
    pub bits: Vec<u32>,
}

/// NVML's clocks-event (throttle) reasons, by name, as the bits of
/// `nvmlDeviceGetCurrentClocksEventReasons`.
pub const REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The reasons that mean the GPU is held below the clock it would run at because
/// something is wrong or marginal (heat, the board's power brake, a slowdown signal,
/// a slower GPU in its sync-boost group). Not counted: idle, an applications-clocks
/// setting, the display clock, and the software power cap — a full-power burn that
/// reaches the board's power limit is doing what it should (its share is still
/// recorded).
pub const THROTTLE_MASK: u64 = 0x8 | 0x10 | 0x20 | 0x40 | 0x80;

/// Names of the reasons set in `bits`.
pub fn reason_names(bits: u64) -> Vec<&'static str> {
    REASONS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// One NVML sample of one GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sample {
    /// Seconds since the GPU phase started on this rank.
    pub t_s: f64,
    /// What the GPU was doing: "copy", "burn", "idle".
    pub during: String,
    /// SM clock, MHz.
    pub sm_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub mem_mhz: Option<u32>,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// GPU temperature, °C.
    pub temp_c: Option<u32>,
    /// Clocks-event (throttle) reasons, NVML's bit mask ([`REASONS`]).
    pub reasons: Option<u64>,
    /// PCIe link generation in use.
    pub pcie_gen: Option<u32>,
    /// PCIe link width in use (lanes).
    pub pcie_width: Option<u32>,
    /// Reads of this sample that NVML answered with an error other than "not
    /// supported", as "what: error" (the value is then absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A sample as `samples.jsonl` streams it: the GPU it belongs to, then the sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SampleRecord {
    /// World rank that took it.
    pub rank: usize,
    /// Its host.
    pub host: String,
    /// The GPU's CUDA ordinal on that host.
    pub gpu: usize,
    /// The sample.
    #[serde(flatten)]
    pub sample: Sample,
}

/// What the samples of the burn say about throttling.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThrottleSummary {
    /// Samples taken during the burn with a known reason mask.
    pub samples: u32,
    /// Share of those samples with any reason of [`THROTTLE_MASK`] set (0..1).
    pub throttled_share: f64,
    /// Share of the samples with each reason set, by reason name (only reasons seen).
    pub by_reason: std::collections::BTreeMap<String, f64>,
    /// Median SM clock during the burn, MHz.
    pub sm_mhz_p50: Option<f64>,
    /// Highest temperature seen, °C.
    pub temp_c_max: Option<u32>,
    /// Median power draw, W.
    pub power_w_p50: Option<f64>,
}

/// The PCIe link of a GPU: the best seen under load against what it can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PcieLink {
    /// Highest link generation seen in use during the copies and the burn (an idle
    /// GPU may train its link down to save power, so idle readings do not count).
    pub gen: Option<u32>,
    /// Highest generation the GPU and its slot support (NVML's max link generation).
    pub max_gen: Option<u32>,
    /// Widest link width seen in use, lanes.
    pub width: Option<u32>,
    /// Widest the GPU supports, lanes.
    pub max_width: Option<u32>,
}

/// A GPU's error counters at one moment (None: the GPU or driver does not report it,
/// e.g. ECC off, no row remapping before Ampere).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorCounters {
    /// Seconds since the Unix epoch when read.
    pub at_unix: f64,
    /// ECC errors corrected since the driver loaded.
    pub ecc_volatile_corrected: Option<u64>,
    /// ECC errors not corrected since the driver loaded.
    pub ecc_volatile_uncorrected: Option<u64>,
    /// ECC errors corrected over the GPU's life.
    pub ecc_aggregate_corrected: Option<u64>,
    /// ECC errors not corrected over the GPU's life.
    pub ecc_aggregate_uncorrected: Option<u64>,
    /// Pages retired for single-bit errors (before Ampere).
    pub retired_pages_sbe: Option<u64>,
    /// Pages retired for double-bit errors (before Ampere).
    pub retired_pages_dbe: Option<u64>,
    /// A page retirement waits for the next driver reload.
    pub retired_pages_pending: Option<bool>,
    /// Rows remapped for corrected errors (Ampere and later).
    pub remapped_rows_corrected: Option<u64>,
    /// Rows remapped for uncorrected errors.
    pub remapped_rows_uncorrected: Option<u64>,
    /// A row remapping waits for the next GPU reset.
    pub remapped_rows_pending: Option<bool>,
    /// A row remapping failed (the GPU should be replaced).
    pub remapped_rows_failure: Option<bool>,
    /// PCIe replays (link-level retransmissions NVML counts since the driver loaded).
    #[serde(default)]
    pub pcie_replays: Option<u64>,
}

/// An XID event NVML delivered while burnin listened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XidEvent {
    /// Seconds since the Unix epoch when burnin received it.
    pub at_unix: f64,
    /// The XID number (NVIDIA's table: 13 graphics exception, 31 memory page fault, 48
    /// double-bit ECC error, 79 fallen off the bus, 94/95 contained/uncontained ECC,
    /// ...).
    pub xid: u64,
}

/// Everything measured on one GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuHealth {
    /// World rank that drove this GPU.
    pub rank: usize,
    /// Its host name.
    pub host: String,
    /// Its rank among the ranks of its host.
    pub local_rank: usize,
    /// CUDA ordinal of the GPU on that host.
    pub gpu: usize,
    /// Device name ("NVIDIA H200").
    pub name: String,
    /// UUID as nvidia-smi prints it.
    pub uuid: String,
    /// PCI bus id.
    pub pci_bus_id: String,
    /// Copies with the host and within the GPU.
    pub copies: GpuCopies,
    /// The compute burn.
    pub burn: Option<Burn>,
    /// The device memory test (`--memtest`).
    #[serde(default)]
    pub memtest: Option<MemTest>,
    /// Throttling during the burn, from the NVML samples.
    pub throttle: Option<ThrottleSummary>,
    /// The PCIe link.
    pub pcie: Option<PcieLink>,
    /// Error counters when the phase began.
    pub counters_before: Option<ErrorCounters>,
    /// Error counters when it ended.
    pub counters_after: Option<ErrorCounters>,
    /// XID events delivered while the phase ran.
    pub xids: Vec<XidEvent>,
    /// Whether NVML's XID events were listened to (false: the counters still are
    /// compared, but an XID would not be seen).
    pub xid_listening: bool,
    /// Why NVML gave nothing or less for this GPU.
    pub nvml_error: Option<String>,
    /// NVML samples with a failed read (errors other than "not supported").
    #[serde(default)]
    pub sample_errors: u32,
    /// The first such sample's failed reads, as "what: error; ...".
    #[serde(default)]
    pub sample_error: Option<String>,
    /// Why this GPU was not measured (no GPU for the rank, a failed context).
    pub error: Option<String>,
}

/// `dcgmi diag -r 1 -j` on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostDcgm {
    /// The node's host name.
    pub host: String,
    /// The parsed diagnostic (None: not run, see `error`).
    pub diag: Option<super::dcgm::DcgmDiag>,
    /// Why there is no diagnostic ("dcgmi is not installed", its error output).
    pub error: Option<String>,
}

/// Settings of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuSettings {
    /// Bytes of each host/device and device-local copy.
    pub copy_bytes: u64,
    /// Bytes of each peer copy.
    pub peer_bytes: u64,
    /// Timed repetitions of each copy.
    pub reps: u32,
    /// Seconds of compute burn asked for.
    pub burn_s: f64,
    /// NVML sampling period, ms.
    pub sample_ms: u64,
}

/// `gpu.json`: the GPU phase of every rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuReport {
    /// Schema version of this file ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// "gpu".
    pub kind: String,
    /// UTC time the phase began (RFC 3339).
    pub started: String,
    /// Seconds the phase took.
    pub seconds: f64,
    /// Settings.
    pub settings: GpuSettings,
    /// Every GPU, in rank order.
    pub gpus: Vec<GpuHealth>,
    /// Every node's peer-copy matrix.
    pub nodes: Vec<NodeMatrix>,
    /// DCGM's diagnostic per node, when asked for (`--dcgm-diag`).
    #[serde(default)]
    pub dcgm: Vec<HostDcgm>,
    /// Why the phase measured nothing (no GPU on any rank).
    pub error: Option<String>,
    /// The silent-data-corruption rounds (`--sdc`), when asked for: on CPU ranks too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdc: Option<super::sdc::SdcReport>,
}
