//! The SDC vote's GPU kernels (`sdc.cu`): a bf16 matrix product on the tensor cores
//! (`mma.sync.m16n8k16`, f32 accumulation, each tile's k loop in a fixed order) and
//! fixed-order f64 sums, their inputs made on the device from the round's seed.
//!
//! The PTX targets sm_80 (launch/ptx): a GPU older than Ampere cannot run it, and
//! [`SdcKernels::load`] says so before asking the driver.
use super::device::{cuda_error, Device};
use anyhow::{anyhow, Result};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};

/// The PTX of `sdc.cu`, NUL-terminated as `cuModuleLoadData` reads it.
pub const PTX: &str = concat!(include_str!("sdc.ptx"), "\0");

/// The oldest GPU the PTX is for (compute capability major, minor).
pub const MIN_CC: (i32, i32) = (8, 0);

/// Threads per block of every launch, and the most blocks of one.
const BLOCK: u32 = 256;
const MAX_BLOCKS: u64 = 65_535;

/// Words summed into each of [`reduce`]'s sums.
pub const REDUCE_WORDS: u64 = 64;

/// The loaded module and its four functions on one GPU's context.
pub struct SdcKernels {
    module: sys::CUmodule,
    operands: sys::CUfunction,
    mma: sys::CUfunction,
    pattern: sys::CUfunction,
    reduce: sys::CUfunction,
}

/// The GPU's compute capability.
pub fn compute_capability(device: &Device) -> Result<(i32, i32)> {
    let get = |a| {
        // SAFETY: a plain attribute query of a device handle the driver gave out.
        unsafe { result::device::get_attribute(device.raw_device(), a) }
            .map_err(|e| cuda_error("asking the GPU's compute capability", e))
    };
    Ok((
        get(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        get(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

impl SdcKernels {
    /// JIT-load the embedded PTX on `device` (its context current on this thread).
    /// Err with the reason when the GPU is older than [`MIN_CC`] or the driver
    /// refuses the PTX.
    pub fn load(device: &Device) -> Result<SdcKernels> {
        device.bind()?;
        let cc = compute_capability(device)?;
        if cc < MIN_CC {
            anyhow::bail!(
                "GPU {} is compute capability {}.{}: the tensor-core product needs {}.{} or newer",
                device.ordinal(),
                cc.0,
                cc.1,
                MIN_CC.0,
                MIN_CC.1
            );
        }
        let what = |doing: &str, e| {
            cuda_error(
                &format!("{doing} burnin's SDC kernels on GPU {}", device.ordinal()),
                e,
            )
        };
        // SAFETY: PTX is a NUL-terminated text image that lives for the program.
        let module = unsafe { result::module::load_data(PTX.as_ptr().cast()) }
            .map_err(|e| what("loading", e))?;
        let get = |name: &str| {
            let c = CString::new(name).map_err(|e| anyhow!(e))?;
            // SAFETY: `module` was loaded just above and is not unloaded.
            unsafe { result::module::get_function(module, c) }
                .map_err(|e| what(&format!("finding {name} in"), e))
        };
        let fns = (|| {
            Ok::<_, anyhow::Error>((
                get("burnin_sdc_operands")?,
                get("burnin_mma")?,
                get("burnin_sdc_pattern")?,
                get("burnin_sdc_reduce")?,
            ))
        })();
        match fns {
            Ok((operands, mma, pattern, reduce)) => Ok(SdcKernels {
                module,
                operands,
                mma,
                pattern,
                reduce,
            }),
            Err(e) => {
                // SAFETY: loaded above, unloaded once, never used again.
                let _ = unsafe { result::module::unload(module) };
                Err(e)
            }
        }
    }

    /// Unload the module (teardown; not while kernels of it may still run).
    pub fn unload(self) {
        // SAFETY: the module is ours and is unloaded once (self is consumed).
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Launch `f` on `stream` over `items` work items (grid-stride loops do the rest),
/// with `params` pointing at its parameters.
///
/// # Safety
/// `params` must match `f`'s parameter list one for one, and the memory they address
/// must stay alive until the stream has run the launch.
unsafe fn launch(
    f: sys::CUfunction,
    stream: sys::CUstream,
    items: u64,
    params: &mut [*mut c_void],
    name: &str,
) -> Result<()> {
    let blocks = items.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32;
    // SAFETY: the caller's promise above.
    unsafe { result::launch_kernel(f, (blocks, 1, 1), (BLOCK, 1, 1), 0, stream, params) }
        .map_err(|e| cuda_error(&format!("launching {name}"), e))
}

/// Queue the product of the round: the operands of an n×n problem from `seed` into
/// `a` and `bt` (n² bf16 each), then `c` = A·B (n² f32). `n` must be a multiple of 16.
///
/// # Safety
/// `a` and `bt` must hold n² u16 and `c` n² f32 on this context's GPU, alive until
/// the stream has run the launches.
pub unsafe fn product(
    k: &SdcKernels,
    stream: sys::CUstream,
    (a, bt, c): (sys::CUdeviceptr, sys::CUdeviceptr, sys::CUdeviceptr),
    n: u64,
    seed: u64,
) -> Result<()> {
    if n == 0 || n % 16 != 0 {
        anyhow::bail!("the tensor-core product's order must be a multiple of 16, not {n}");
    }
    let (mut pa, mut pb, mut pn, mut ps) = (a, bt, n, seed);
    let mut p: [*mut c_void; 4] = [
        (&mut pa as *mut u64).cast(),
        (&mut pb as *mut u64).cast(),
        (&mut pn as *mut u64).cast(),
        (&mut ps as *mut u64).cast(),
    ];
    // SAFETY: burnin_sdc_operands is (ptr, ptr, u64, u64), matched by live u64s; the
    // buffers are the caller's promise.
    unsafe { launch(k.operands, stream, n * n, &mut p, "burnin_sdc_operands") }?;
    let (mut qa, mut qb, mut qc, mut qn) = (a, bt, c, n);
    let mut q: [*mut c_void; 4] = [
        (&mut qa as *mut u64).cast(),
        (&mut qb as *mut u64).cast(),
        (&mut qc as *mut u64).cast(),
        (&mut qn as *mut u64).cast(),
    ];
    // One warp a 16×8 tile: n²/128 tiles, 32 threads each.
    // SAFETY: burnin_mma is (ptr, ptr, ptr, u64), matched by live u64s.
    unsafe { launch(k.mma, stream, n * n / 128 * 32, &mut q, "burnin_mma") }
}

/// Queue the sums of the round: `sums` × [`REDUCE_WORDS`] pattern words of `seed`
/// into `words`, then `out[c]` = the f64 sum of words 64c..64c+64 in order.
///
/// # Safety
/// `words` must hold sums × 64 u64 and `out` sums f64 on this context's GPU, alive
/// until the stream has run the launches.
pub unsafe fn sums(
    k: &SdcKernels,
    stream: sys::CUstream,
    (words, out): (sys::CUdeviceptr, sys::CUdeviceptr),
    sums: u64,
    seed: u64,
) -> Result<()> {
    let (mut pw, mut pl, mut ps) = (words, sums * REDUCE_WORDS, seed);
    let mut p: [*mut c_void; 3] = [
        (&mut pw as *mut u64).cast(),
        (&mut pl as *mut u64).cast(),
        (&mut ps as *mut u64).cast(),
    ];
    // SAFETY: burnin_sdc_pattern is (ptr, u64, u64), matched by live u64s.
    unsafe { launch(k.pattern, stream, pl, &mut p, "burnin_sdc_pattern") }?;
    let (mut qw, mut qs, mut qo) = (words, sums, out);
    let mut q: [*mut c_void; 3] = [
        (&mut qw as *mut u64).cast(),
        (&mut qs as *mut u64).cast(),
        (&mut qo as *mut u64).cast(),
    ];
    // SAFETY: burnin_sdc_reduce is (ptr, u64, ptr), matched by live u64s.
    unsafe { launch(k.reduce, stream, sums, &mut q, "burnin_sdc_reduce") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// The PTX must have been made from the sdc.cu in the tree (launch/ptx), for
    /// sm_80, with the entries and parameter lists this file launches.
    #[test]
    fn embedded_ptx_is_made_from_the_current_source_for_ampere() {
        let hash: String = Sha256::digest(include_bytes!("sdc.cu"))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let first = PTX.lines().next().unwrap_or("");
        assert!(
            first.contains(&format!("sha256 {hash}")),
            "sdc.ptx is stale (its first line: {first}); run launch/ptx"
        );
        assert!(PTX.contains("\n.target sm_80\n"), "{}", &PTX[..400]);
        for (entry, params) in [
            ("burnin_sdc_operands", 4),
            ("burnin_mma", 4),
            ("burnin_sdc_pattern", 3),
            ("burnin_sdc_reduce", 3),
        ] {
            let at = PTX
                .find(&format!(".visible .entry {entry}("))
                .unwrap_or_else(|| panic!("{entry}"));
            let head = &PTX[at..at + PTX[at..].find(')').unwrap()];
            let list: Vec<&str> = head.lines().filter(|l| l.contains(".param")).collect();
            assert_eq!(list.len(), params, "{entry}: {list:?}");
            assert!(list.iter().all(|p| p.contains(".u64")), "{entry}: {list:?}");
            let body = &PTX[at..at + PTX[at..].find('{').unwrap()];
            assert!(body.contains(&format!(".maxntid {BLOCK}, 1, 1")), "{entry}");
        }
        let mma = &PTX[PTX.find(".entry burnin_mma(").unwrap()..];
        assert!(
            mma.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
            "the product must run on the tensor cores"
        );
    }
}
