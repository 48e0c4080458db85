//! CUDA driver and GPU discovery through cudarc (dynamically loaded: a machine with
//! no driver gets an explanation, never a panic).
//!
//! cudarc's `dynamic-loading` resolves `libcuda` on the first driver call and panics
//! when it is absent, so every entry point here asks
//! `cudarc::driver::sys::is_culib_present()` first — each time, since it is cheap and
//! nothing else guards the cudarc calls that follow. cudarc resolves each entry point
//! by name on first use and panics when the driver lacks it, so [`ready`] refuses a
//! driver older than [`NEEDED_CUDA`] with a message instead. burnin is built against
//! cudarc's CUDA 12.0 bindings (`cuda-12000`), whose names (`cuEventElapsedTime`,
//! `cuDeviceGetUuid`, `cuMemAlloc_v2`, ...) every driver since CUDA 12.0 exports:
//! drivers keep the entry points of older APIs, so the same binary runs on CUDA 12.x
//! drivers (535, 550, 570: most rented fleets) and 13.x ones (580+).
use cudarc::driver::{result, sys, DriverError};
use serde::{Deserialize, Serialize};

/// One GPU as the CUDA driver reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GpuInfo {
    /// CUDA device ordinal (as this process sees it, after CUDA_VISIBLE_DEVICES).
    pub index: usize,
    /// Device name from the driver ("NVIDIA H200").
    pub name: String,
    /// Total device memory, bytes.
    pub memory_bytes: u64,
    /// PCI bus id ("0000:18:00.0").
    pub pci_bus_id: String,
    /// Device UUID as nvidia-smi prints it ("GPU-xxxxxxxx-…").
    pub uuid: String,
}

/// The driver and its GPUs, or why there are none.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct GpuInventory {
    /// CUDA version the driver supports ("12.4").
    pub driver_version: Option<String>,
    /// Every device the driver lists, by ordinal.
    pub gpus: Vec<GpuInfo>,
    /// Why no GPU is usable (no driver library, init failed, zero devices, a driver
    /// older than the CUDA version burnin was built for).
    pub error: Option<String>,
}

/// The CUDA version cudarc's bindings were generated for (`cuda-12000` → 12000).
pub const BUILT_FOR_CUDA: i32 = sys::CUDA_VERSION as i32;

/// The oldest driver API that has every entry point burnin calls: the bindings' own
/// version (none of them is newer than CUDA 12.0; see the module header).
pub const NEEDED_CUDA: i32 = BUILT_FOR_CUDA;

/// Oldest driver whose entry points [`inventory`] uses (`cuDeviceGetUuid`: 9.2; the
/// listing stays useful on a driver too old for the rest).
const OLDEST_DRIVER_TO_LIST: i32 = 11040;

/// "13.0" from the driver's 13000, "12.4" from 12040.
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// A UUID the way nvidia-smi prints it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| -> String {
        bytes[r].iter().map(|b| format!("{b:02x}")).collect()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// Whether a driver that reports CUDA version `driver` (cuDriverGetVersion: 12040 for
/// 12.4) has every entry point burnin calls; the error names both versions and what
/// to do. Pure: unit-tested at the versions rented fleets run.
pub fn compatible(driver: i32) -> Result<(), String> {
    if driver >= NEEDED_CUDA {
        return Ok(());
    }
    Err(format!(
        "the CUDA driver supports CUDA {} but burnin needs CUDA {} or newer (NVIDIA driver \
         525 or later): some driver functions burnin calls are missing; update the NVIDIA driver",
        cuda_version_text(driver),
        cuda_version_text(NEEDED_CUDA),
    ))
}

/// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)".
pub fn driver_error_text(e: DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUDA error {}", e.0 as i32));
    match e.error_string() {
        Ok(s) => format!("{name} ({})", s.to_string_lossy()),
        Err(_) => name,
    }
}

/// Whether libcuda can be loaded at all. Must be true before any other cudarc driver
/// call in this process, or cudarc panics.
fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries dlopen on libcuda's usual names and closes
    // what it opened; it touches no CUDA state.
    unsafe { sys::is_culib_present() }
}

/// The libcuda files this process has mapped (from /proc/self/maps), in order.
fn loaded_libcuda() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut seen: Vec<String> = Vec::new();
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.starts_with("libcuda.so") && !seen.iter().any(|p| p == path) {
            seen.push(path.to_string());
        }
    }
    seen
}

/// What to say when the loaded libcuda is CUDA's link-time stub (cudarc opens the
/// unversioned `libcuda.so` before `libcuda.so.1`, and build images often put the
/// toolkit's `stubs` folder on LD_LIBRARY_PATH).
fn stub_text() -> String {
    let files = loaded_libcuda();
    let at = if files.is_empty() {
        String::new()
    } else {
        format!(" ({})", files.join(", "))
    };
    format!(
        "the libcuda.so loaded{at} is the CUDA toolkit's stub library, not the driver \
         (CUDA_ERROR_STUB_LIBRARY): take the toolkit's stubs folder out of \
         LD_LIBRARY_PATH{}, so that the driver's libcuda.so.1 is found",
        std::env::var("LD_LIBRARY_PATH")
            .map(|v| format!(" (now {v})"))
            .unwrap_or_default()
    )
}

/// Load and initialise the driver; its version (13000 for CUDA 13.0).
fn open_driver() -> Result<i32, String> {
    if !driver_present() {
        return Err("no CUDA driver found (libcuda.so.1 could not be loaded)".into());
    }
    let mut version: std::ffi::c_int = 0;
    // SAFETY: libcuda is loadable (checked just above), so cudarc's lazy symbol
    // lookup succeeds; cuDriverGetVersion exists in every driver and writes one int
    // to a valid pointer. It may be called before cuInit.
    let rc = unsafe { sys::cuDriverGetVersion(&mut version) };
    let stub = |e: DriverError| e.0 == sys::cudaError_enum::CUDA_ERROR_STUB_LIBRARY;
    if let Err(e) = rc.result() {
        if stub(e) {
            return Err(stub_text());
        }
        return Err(format!(
            "the CUDA driver could not report its version ({})",
            driver_error_text(e)
        ));
    }
    if let Err(e) = result::init() {
        if stub(e) {
            return Err(stub_text());
        }
        let mut msg = format!(
            "the CUDA driver {} did not initialise: {}",
            cuda_version_text(version),
            driver_error_text(e)
        );
        if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
            msg.push_str(&format!(" (CUDA_VISIBLE_DEVICES={v})"));
        }
        return Err(msg);
    }
    Ok(version)
}

/// The driver is present, initialised, compatible with this build and sees at least
/// one GPU: the number of GPUs. Every NCCL path calls this before touching cudarc.
pub fn ready() -> Result<usize, String> {
    let version = open_driver()?;
    compatible(version)?;
    let count = result::device::get_count()
        .map_err(|e| format!("cuDeviceGetCount failed: {}", driver_error_text(e)))?;
    if count <= 0 {
        return Err(no_gpu_text(version));
    }
    Ok(count as usize)
}

fn no_gpu_text(version: i32) -> String {
    let mut msg = format!("the CUDA driver {} sees no GPU", cuda_version_text(version));
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        msg.push_str(&format!(" (CUDA_VISIBLE_DEVICES={v})"));
    }
    msg
}

/// One device's description. The driver must be initialised.
pub fn describe_device(index: usize) -> Result<GpuInfo, String> {
    let what = |call: &str, e: DriverError| {
        format!("GPU {index}: {call} failed: {}", driver_error_text(e))
    };
    let dev = result::device::get(index as std::ffi::c_int).map_err(|e| what("cuDeviceGet", e))?;
    let name = result::device::get_name(dev).map_err(|e| what("cuDeviceGetName", e))?;
    // SAFETY: `dev` came from cuDeviceGet on an initialised driver.
    let memory =
        unsafe { result::device::total_mem(dev) }.map_err(|e| what("cuDeviceTotalMem", e))?;
    let mut bus = [0 as std::ffi::c_char; 64];
    // SAFETY: the buffer is 64 bytes and we pass its length; the driver writes a
    // NUL-terminated string of at most that many bytes ("0000:18:00.0" is 13).
    unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as std::ffi::c_int, dev) }
        .result()
        .map_err(|e| what("cuDeviceGetPCIBusId", e))?;
    // SAFETY: the buffer is zero-initialised and longer than anything the driver
    // writes, so it holds a NUL terminator.
    let pci = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let uuid = result::device::get_uuid(dev).map_err(|e| what("cuDeviceGetUuid", e))?;
    let raw: [u8; 16] = uuid.bytes.map(|b| b as u8);
    Ok(GpuInfo {
        index,
        name,
        memory_bytes: memory as u64,
        pci_bus_id: pci,
        uuid: format_uuid(&raw),
    })
}

/// Ask the CUDA driver what is there.
pub fn inventory() -> GpuInventory {
    let mut inv = GpuInventory {
        driver_version: None,
        gpus: Vec::new(),
        error: None,
    };
    let version = match open_driver() {
        Ok(v) => v,
        Err(e) => {
            inv.error = Some(e);
            return inv;
        }
    };
    inv.driver_version = Some(cuda_version_text(version));
    if version < OLDEST_DRIVER_TO_LIST {
        inv.error = Some(format!(
            "the CUDA driver {} is too old to list GPUs (burnin needs 11.4 or newer)",
            cuda_version_text(version)
        ));
        return inv;
    }
    let count = match result::device::get_count() {
        Ok(n) => n.max(0) as usize,
        Err(e) => {
            inv.error = Some(format!("cuDeviceGetCount failed: {}", driver_error_text(e)));
            return inv;
        }
    };
    for index in 0..count {
        match describe_device(index) {
            Ok(g) => inv.gpus.push(g),
            Err(e) => {
                inv.error.get_or_insert(e);
            }
        }
    }
    if count == 0 {
        inv.error = Some(no_gpu_text(version));
    } else if let Err(e) = compatible(version) {
        inv.error.get_or_insert(e);
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_prints_like_nvidia_smi() {
        let b = [
            0x2f, 0x0e, 0x3a, 0x51, 0x8c, 0x1d, 0x4b, 0x7e, 0x9a, 0x00, 0x12, 0x34, 0x56, 0x78,
            0x9a, 0xbc,
        ];
        assert_eq!(format_uuid(&b), "GPU-2f0e3a51-8c1d-4b7e-9a00-123456789abc");
    }

    #[test]
    fn driver_versions_print_as_major_minor() {
        assert_eq!(cuda_version_text(13000), "13.0");
        assert_eq!(cuda_version_text(12040), "12.4");
        assert_eq!(cuda_version_text(12090), "12.9");
    }

    #[test]
    fn cuda_12_and_13_drivers_are_accepted_and_older_ones_explained() {
        assert_eq!(
            NEEDED_CUDA, 12000,
            "built against cudarc's cuda-12000 bindings"
        );
        for v in [12000, 12040, 12080, 12090, 13000, 13010] {
            assert_eq!(compatible(v), Ok(()), "{v}");
        }
        for v in [11080, 11040] {
            let e = compatible(v).unwrap_err();
            assert!(
                e.contains(&format!("supports CUDA {}", cuda_version_text(v)))
                    && e.contains("needs CUDA 12.0 or newer")
                    && !e.contains('\n'),
                "{e}"
            );
        }
    }

    /// This machine (CI, the dev box) has no NVIDIA driver: the inventory must say so
    /// in one line instead of letting cudarc panic. On a GPU machine it lists GPUs.
    #[test]
    fn inventory_without_a_driver_explains_and_does_not_panic() {
        let inv = inventory();
        if driver_present() {
            eprintln!("a CUDA driver is present here: {inv:?}");
            return;
        }
        assert!(inv.gpus.is_empty());
        assert_eq!(inv.driver_version, None);
        let e = inv.error.expect("an explanation");
        assert!(e.contains("no CUDA driver found"), "{e}");
        assert!(!e.contains('\n'));
        let e = ready().unwrap_err();
        assert!(e.contains("no CUDA driver found"), "{e}");
    }
}
