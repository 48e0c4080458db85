//! burnin's fill and check kernels (`kernels.cu`) on one GPU: buffers are initialised
//! and verified on the device, and only a check's counters come back to the host.
//!
//! The PTX text is embedded in the binary (made by `launch/ptx` with clang; no CUDA
//! toolkit at build or run time) and JIT-compiled by the driver when a backend first
//! needs it (`cuModuleLoadData`). A pattern's tables and a check's counters travel in
//! one small upload, its runs are one launch each, and one download of
//! [`COUNTERS`] × 8 bytes returns the result: nothing per element on the host.
use super::device::{cuda_error, Device};
use crate::collective::pattern::{self, Mismatch, Pattern, SAMPLE};
use crate::kinds::Dtype;
use anyhow::{anyhow, Result};
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};

/// The PTX of `kernels.cu`, NUL-terminated as `cuModuleLoadData` reads it.
pub const PTX: &str = concat!(include_str!("kernels.ptx"), "\0");

/// A check's counters: wrong count, lowest wrong position, SAMPLE positions.
pub const COUNTERS: usize = 2 + SAMPLE;

/// Threads per block, and most blocks per launch (grid-stride loops do the rest).
const BLOCK: u32 = 256;
const MAX_BLOCKS: u64 = 4096;

/// The element type numbers `kernels.cu` uses (`DT_*`).
pub fn dtype_code(d: Dtype) -> u32 {
    match d {
        Dtype::F32 => 0,
        Dtype::F64 => 1,
        Dtype::F16 => 2,
        Dtype::Bf16 => 3,
        Dtype::I32 => 4,
        Dtype::U8 => 5,
    }
}

/// Blocks for `len` elements.
fn grid(len: u64) -> u32 {
    len.div_ceil(u64::from(BLOCK)).clamp(1, MAX_BLOCKS) as u32
}

/// The loaded module and its functions on one GPU's context.
pub struct Kernels {
    module: sys::CUmodule,
    fill: sys::CUfunction,
    check: sys::CUfunction,
    fma: sys::CUfunction,
    memtest: sys::CUfunction,
}

impl Kernels {
    /// JIT-load the embedded PTX on `device` (its context current on this thread).
    pub fn load(device: &Device) -> Result<Kernels> {
        device.bind()?;
        let what = |doing: &str, e| {
            cuda_error(
                &format!("{doing} burnin's PTX kernels on GPU {}", device.ordinal()),
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
        let fns = get("burnin_fill")
            .and_then(|f| Ok((f, get("burnin_check")?)))
            .and_then(|(f, c)| Ok((f, c, get("burnin_fma")?)))
            .and_then(|(f, c, m)| Ok((f, c, m, get("burnin_memtest")?)));
        match fns {
            Ok((fill, check, fma, memtest)) => Ok(Kernels {
                module,
                fill,
                check,
                fma,
                memtest,
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

/// One upload of everything a pattern's launches read: the counters' initial values
/// (checks), then each distinct table, 8-byte aligned.
pub struct Staged {
    pub bytes: Vec<u8>,
    /// Byte offset of each table in `bytes`.
    pub table_at: Vec<usize>,
    /// Entries of each table.
    pub period: Vec<usize>,
    /// Per run: (table, phase).
    pub uses: Vec<(usize, usize)>,
}

/// Lay out `pat`'s tables for a fill (encoded values) or a check (want/tolerance
/// pairs, after the counters).
pub fn stage(pat: &Pattern, for_check: bool) -> Staged {
    let (tables, uses) = pat.tables();
    let mut bytes = Vec::new();
    if for_check {
        let mut counters = [0u64; COUNTERS];
        counters[1] = u64::MAX;
        for c in counters {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
    }
    let mut table_at = Vec::with_capacity(tables.len());
    let period = tables.iter().map(|t| t.period).collect();
    for t in &tables {
        bytes.resize(bytes.len().next_multiple_of(8), 0);
        table_at.push(bytes.len());
        if for_check {
            for v in &t.want_tol {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        } else {
            bytes.extend_from_slice(&t.encoded);
        }
    }
    Staged {
        bytes,
        table_at,
        period,
        uses,
    }
}

/// Decode a check's downloaded counters.
pub fn mismatch(counters: &[u64; COUNTERS]) -> Mismatch {
    let wrong = counters[0];
    let shown = (wrong as usize).min(SAMPLE);
    let mut sample: Vec<usize> = counters[2..2 + shown].iter().map(|&p| p as usize).collect();
    sample.sort_unstable();
    Mismatch {
        wrong,
        first: (wrong > 0).then_some(counters[1] as usize),
        sample,
    }
}

/// Queue `pat`'s fill of the buffer at `dst` on `stream`, reading its tables at
/// `tables` (the device copy of [`stage`]'s bytes for a fill).
///
/// # Safety
/// `dst` must hold `pat.end()` elements of the pattern's type on this context's GPU
/// and `tables` the staged bytes, both alive until the stream has run the launches.
pub unsafe fn fill(
    k: &Kernels,
    stream: sys::CUstream,
    pat: &Pattern,
    staged: &Staged,
    dst: sys::CUdeviceptr,
    tables: sys::CUdeviceptr,
) -> Result<()> {
    let es = pat.params.dtype.size() as u64;
    for (run, &(t, phase)) in pat.runs.iter().zip(&staged.uses) {
        if run.len == 0 {
            continue;
        }
        let mut a_dst = dst + run.start as u64 * es;
        let mut a_es = es;
        let mut a_len = run.len as u64;
        let mut a_table = tables + staged.table_at[t] as u64;
        let mut a_period = staged.period[t] as u64;
        let mut a_phase = phase as u64;
        let mut params: [*mut c_void; 6] = [
            (&mut a_dst as *mut u64).cast(),
            (&mut a_es as *mut u64).cast(),
            (&mut a_len as *mut u64).cast(),
            (&mut a_table as *mut u64).cast(),
            (&mut a_period as *mut u64).cast(),
            (&mut a_phase as *mut u64).cast(),
        ];
        // SAFETY: burnin_fill's six parameters are u64-sized (pointers and u64s) and
        // `params` points at six live u64s for the duration of the call (the driver
        // copies them at launch); the memory they address is the caller's promise.
        unsafe {
            result::launch_kernel(
                k.fill,
                (grid(a_len), 1, 1),
                (BLOCK, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| cuda_error("launching burnin_fill", e))?;
    }
    Ok(())
}

/// Queue `pat`'s check of the buffer at `src` on `stream`, counting into the counters
/// at the start of `staged_dev` (the device copy of [`stage`]'s bytes for a check).
///
/// # Safety
/// As [`fill`]: `src` holds `pat.end()` elements, `staged_dev` the staged bytes.
pub unsafe fn check(
    k: &Kernels,
    stream: sys::CUstream,
    pat: &Pattern,
    staged: &Staged,
    src: sys::CUdeviceptr,
    staged_dev: sys::CUdeviceptr,
) -> Result<()> {
    let es = pat.params.dtype.size() as u64;
    for (run, &(t, phase)) in pat.runs.iter().zip(&staged.uses) {
        if run.len == 0 {
            continue;
        }
        let mut a_buf = src + run.start as u64 * es;
        let mut a_dtype = dtype_code(pat.params.dtype);
        let mut a_len = run.len as u64;
        let mut a_table = staged_dev + staged.table_at[t] as u64;
        let mut a_period = staged.period[t] as u64;
        let mut a_phase = phase as u64;
        let mut a_base = run.start as u64;
        let mut a_counters = staged_dev;
        let mut params: [*mut c_void; 8] = [
            (&mut a_buf as *mut u64).cast(),
            (&mut a_dtype as *mut u32).cast(),
            (&mut a_len as *mut u64).cast(),
            (&mut a_table as *mut u64).cast(),
            (&mut a_period as *mut u64).cast(),
            (&mut a_phase as *mut u64).cast(),
            (&mut a_base as *mut u64).cast(),
            (&mut a_counters as *mut u64).cast(),
        ];
        // SAFETY: burnin_check's parameters are (ptr, u32, u64, ptr, u64, u64, u64,
        // ptr), matched one for one by live locals above; the driver copies them.
        unsafe {
            result::launch_kernel(
                k.check,
                (grid(a_len), 1, 1),
                (BLOCK, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| cuda_error("launching burnin_check", e))?;
    }
    Ok(())
}

/// Elements of `out` [`fma`] writes per thread (`FMA_CHAINS` in kernels.cu).
pub const FMA_CHAINS: u64 = 4;

/// Queue one burnin_fma launch on `stream`: `len` f32 results at `out`, each
/// `iters` steps of x = fma(x, a, b) from its start value, on `blocks` × [`BLOCK`]
/// threads.
///
/// # Safety
/// `out` must hold `len` f32 on this context's GPU, alive until the stream has run it.
pub unsafe fn fma(
    k: &Kernels,
    stream: sys::CUstream,
    out: sys::CUdeviceptr,
    len: u64,
    iters: u64,
    (a, b): (f32, f32),
    blocks: u32,
) -> Result<()> {
    let (mut a_out, mut a_len, mut a_iters, mut a_a, mut a_b) = (out, len, iters, a, b);
    let mut params: [*mut c_void; 5] = [
        (&mut a_out as *mut u64).cast(),
        (&mut a_len as *mut u64).cast(),
        (&mut a_iters as *mut u64).cast(),
        (&mut a_a as *mut f32).cast(),
        (&mut a_b as *mut f32).cast(),
    ];
    // SAFETY: burnin_fma's parameters are (ptr, u64, u64, f32, f32), matched one for
    // one by live locals above; the driver copies them at launch.
    unsafe {
        result::launch_kernel(
            k.fma,
            (blocks.max(1), 1, 1),
            (BLOCK, 1, 1),
            0,
            stream,
            &mut params,
        )
    }
    .map_err(|e| cuda_error("launching burnin_fma", e))
}

/// A memory-test launch's counters: failing words, lowest failing index, then
/// (index, value read) for up to [`MEM_SAMPLE`] failures (`MEM_SAMPLE` in kernels.cu).
pub const MEM_SAMPLE: usize = 16;
pub const MEM_COUNTERS: usize = 2 + 2 * MEM_SAMPLE;

/// One memory-test stage (kernels.cu's burnin_memtest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemStage {
    /// 0 address, 1 walking one, 2 random.
    pub kind: u64,
    pub seed: u64,
    /// 0 write, 1 check, 2 check and write the inverse, 3 check the inverse.
    pub mode: u64,
}

/// Queue one burnin_memtest launch on `stream` over `words` 8-byte words at `buf`.
///
/// # Safety
/// `buf` must hold `words` u64 and `counters` [`MEM_COUNTERS`] u64 on this context's
/// GPU, both alive until the stream has run it.
pub unsafe fn memtest(
    k: &Kernels,
    stream: sys::CUstream,
    buf: sys::CUdeviceptr,
    words: u64,
    stage: MemStage,
    counters: sys::CUdeviceptr,
) -> Result<()> {
    let (mut a_buf, mut a_len, mut a_addr) = (buf, words, buf);
    let (mut a_kind, mut a_seed, mut a_mode, mut a_ctr) =
        (stage.kind, stage.seed, stage.mode, counters);
    let mut params: [*mut c_void; 7] = [
        (&mut a_buf as *mut u64).cast(),
        (&mut a_len as *mut u64).cast(),
        (&mut a_addr as *mut u64).cast(),
        (&mut a_kind as *mut u64).cast(),
        (&mut a_seed as *mut u64).cast(),
        (&mut a_mode as *mut u64).cast(),
        (&mut a_ctr as *mut u64).cast(),
    ];
    // SAFETY: burnin_memtest's parameters are (ptr, u64, u64, u64, u64, u64, ptr),
    // matched one for one by live locals above; the driver copies them at launch.
    unsafe {
        result::launch_kernel(
            k.memtest,
            (grid(words), 1, 1),
            (BLOCK, 1, 1),
            0,
            stream,
            &mut params,
        )
    }
    .map_err(|e| cuda_error("launching burnin_memtest", e))
}

/// Threads per block of every launch.
pub const BLOCK_THREADS: u32 = BLOCK;

/// Blocks of [`BLOCK_THREADS`] burnin_fma that one SM holds at once, as the driver
/// computes it for the code its JIT built (registers, shared memory, the launch
/// bounds): the burn's grid is this × the SM count, one full wave.
pub fn fma_blocks_per_sm(k: &Kernels) -> Result<u32> {
    // SAFETY: k.fma is a function of a module that is loaded while `k` lives.
    let n =
        unsafe { result::occupancy::max_active_block_per_multiprocessor(k.fma, BLOCK as i32, 0) }
            .map_err(|e| cuda_error("asking the driver how many burn blocks an SM holds", e))?;
    if !(1..=64).contains(&n) {
        anyhow::bail!(
            "the driver says an SM holds {n} blocks of {BLOCK}-thread burnin_fma (expected 1 to 64)"
        );
    }
    Ok(n as u32)
}

/// Bounds of a pattern against a buffer of `bytes` bytes (the kernels do not check).
pub fn check_bounds(pat: &Pattern, bytes: usize) -> Result<()> {
    pattern::check_bounds(pat, bytes / pat.params.dtype.size())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Params, Run, Source};
    use crate::kinds::RedOp;
    use sha2::{Digest, Sha256};

    /// The PTX must have been made from the kernels.cu in the tree (launch/ptx).
    #[test]
    fn embedded_ptx_is_made_from_the_current_source() {
        let src = include_bytes!("kernels.cu");
        let hash: String = Sha256::digest(src)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let first = PTX.lines().next().unwrap_or("");
        assert!(
            first.contains(&format!("sha256 {hash}")),
            "kernels.ptx is stale (its first line: {first}); run launch/ptx"
        );
        for entry in ["burnin_fill", "burnin_check", "burnin_fma"] {
            assert!(
                PTX.contains(&format!(".visible .entry {entry}(")),
                "{entry}"
            );
        }
        // burnin_check's parameter list is what `check` passes: 8, the second a u32.
        let check = &PTX[PTX.find(".entry burnin_check(").unwrap()..];
        let params: Vec<&str> = check[..check.find(')').unwrap()]
            .lines()
            .filter(|l| l.contains(".param"))
            .collect();
        assert_eq!(params.len(), 8, "{params:?}");
        assert!(params[1].contains(".u32"), "{params:?}");
        assert!(params
            .iter()
            .enumerate()
            .all(|(i, p)| i == 1 || p.contains(".u64")));
        // burnin_fma's is what `fma` passes: (u64, u64, u64, f32, f32).
        let f = &PTX[PTX.find(".entry burnin_fma(").unwrap()..];
        let params: Vec<&str> = f[..f.find(')').unwrap()]
            .lines()
            .filter(|l| l.contains(".param"))
            .collect();
        assert_eq!(params.len(), 5, "{params:?}");
        assert!(params[..3].iter().all(|p| p.contains(".u64")), "{params:?}");
        assert!(params[3..].iter().all(|p| p.contains(".f32")), "{params:?}");
        assert!(
            f.contains("fma.rn.f32"),
            "burnin_fma must use fused multiply-adds"
        );
    }

    /// The ptxas binaries the project venv has (launch/setup: CUDA 12.0's from pip's
    /// nvidia-cuda-nvcc-cu12, CUDA 13.0's under .venv/ptxas-cu13), or $PTXAS alone.
    fn ptxas_binaries() -> Vec<std::path::PathBuf> {
        if let Some(p) = std::env::var_os("PTXAS") {
            return vec![p.into()];
        }
        let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv");
        let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(venv.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas"))
            .filter(|p| p.is_file())
            .collect();
        let cu13 = venv.join("ptxas-cu13/nvidia/cu13/bin/ptxas");
        if cu13.is_file() {
            found.push(cu13);
        }
        found
    }

    /// The GPU names a ptxas's --gpu-name allows, from its --help.
    fn ptxas_archs(ptxas: &std::path::Path) -> Vec<String> {
        let out = std::process::Command::new(ptxas)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        let start = help
            .find("--gpu-name")
            .expect("ptxas --help has --gpu-name");
        let end = start + help[start..].find("Default value").unwrap();
        help[start..end]
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| {
                w.strip_prefix("sm_")
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(str::to_string)
            .collect()
    }

    /// NVIDIA's assemblers of CUDA 12.0 (the oldest driver burnin supports) and 13.0
    /// accept the embedded PTX for every GPU burnin targets that each knows (CUDA 13
    /// dropped Volta), without a warning, and the burn fits the registers its
    /// launch bounds promise; the same for the SDC kernels (sdc.ptx) on every GPU from
    /// sm_80 on: a syntax, ISA or bounds error shows here, not on a lent GPU.
    #[test]
    fn embedded_ptx_assembles_with_each_ptxas_for_every_gpu_it_knows() {
        const WANTED: [&str; 8] = [
            "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
        ];
        let all = ptxas_binaries();
        assert!(
            !all.is_empty(),
            "no ptxas: run launch/setup (pip nvidia-cuda-nvcc-cu12 and nvidia-cuda-nvcc 13) or set PTXAS"
        );
        if std::env::var_os("PTXAS").is_none() {
            assert_eq!(all.len(), 2, "CUDA 12's and 13's ptxas: {all:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("kernels.ptx");
        std::fs::write(&src, PTX.trim_end_matches('\0')).unwrap();
        for ptxas in &all {
            let known = ptxas_archs(ptxas);
            let targets: Vec<&str> = WANTED
                .into_iter()
                .filter(|a| known.iter().any(|k| k == a))
                .collect();
            assert!(
                targets.contains(&"sm_80") && targets.contains(&"sm_90"),
                "{}: {known:?}",
                ptxas.display()
            );
            for arch in targets {
                let cubin = dir.path().join(format!("{arch}.cubin"));
                let out = std::process::Command::new(ptxas)
                    .args([&format!("-arch={arch}"), "-v"])
                    .arg(&src)
                    .arg("-o")
                    .arg(&cubin)
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success(),
                    "{} -arch={arch}: {err}",
                    ptxas.display()
                );
                assert!(
                    !err.contains("warning"),
                    "{} -arch={arch}: {err}",
                    ptxas.display()
                );
                assert!(cubin.metadata().unwrap().len() > 1000);
                // ptxas -v: "Compiling entry function 'burnin_fma' ... Used N registers"
                let fma = &err[err.find("'burnin_fma'").unwrap()..];
                let regs: u32 = fma
                    .split("Used ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no register count: {err}"));
                assert!(regs <= 64, "{arch}: burnin_fma uses {regs} registers");
            }
            // The SDC kernels (sdc.cu, for sm_80: mma.sync with bf16) on every GPU
            // from Ampere on that this ptxas knows.
            let sdc = dir.path().join("sdc.ptx");
            std::fs::write(&sdc, super::super::sdc_kernels::PTX.trim_end_matches('\0')).unwrap();
            let newer: Vec<&str> = WANTED
                .into_iter()
                .filter(|a| a[3..].parse::<u32>().unwrap() >= 80 && known.iter().any(|k| k == a))
                .collect();
            assert!(newer.contains(&"sm_90"), "{}: {known:?}", ptxas.display());
            for arch in newer {
                let out = std::process::Command::new(ptxas)
                    .arg(format!("-arch={arch}"))
                    .arg(&sdc)
                    .arg("-o")
                    .arg(dir.path().join(format!("sdc-{arch}.cubin")))
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success() && !err.contains("warning"),
                    "{} -arch={arch} sdc.ptx: {err}",
                    ptxas.display()
                );
            }
        }
    }

    /// Every kernel promises 256-thread blocks (the block every launch uses), and the
    /// burn 4 resident blocks per SM, in the PTX the driver's JIT reads.
    #[test]
    fn every_kernel_carries_its_launch_bounds() {
        let ptx = PTX.trim_end_matches('\0');
        for (name, min) in [("burnin_fill", 1), ("burnin_check", 1), ("burnin_fma", 4)] {
            let at = ptx.find(&format!(".entry {name}(")).unwrap();
            let body = &ptx[at..at + ptx[at..].find('{').unwrap()];
            assert!(
                body.contains(&format!(".maxntid {BLOCK}, 1, 1")),
                "{name}: {body}"
            );
            assert!(
                body.contains(&format!(".minnctapersm {min}")),
                "{name}: {body}"
            );
        }
    }

    #[test]
    fn staging_puts_counters_first_and_aligns_tables() {
        let p = Params {
            n: 4,
            count: 0,
            dtype: Dtype::U8,
            op: RedOp::Sum,
            root: 0,
        };
        let pat = Pattern::new(
            p,
            vec![
                Run::new(0, 10, Source::Plain { rank: 1 }, 0),
                Run::new(10, 10, Source::ReduceExpected, 0),
            ],
        );
        let fill = stage(&pat, false);
        assert_eq!(fill.table_at, vec![0, 104]); // 101 u8 values, then aligned to 8
        assert_eq!(fill.uses, vec![(0, 13), (1, 0)]);
        let check = stage(&pat, true);
        assert_eq!(check.table_at[0], COUNTERS * 8);
        assert_eq!(&check.bytes[8..16], &u64::MAX.to_le_bytes());
        let mut c = [0u64; COUNTERS];
        assert_eq!(mismatch(&c), Mismatch::default());
        c[0] = 11;
        c[1] = 5;
        for (i, v) in c[2..].iter_mut().enumerate() {
            *v = 100 - i as u64;
        }
        let m = mismatch(&c);
        assert_eq!((m.wrong, m.first, m.sample.len()), (11, Some(5), SAMPLE));
        assert_eq!(m.sample[0], 93);
    }
}
