//! The real libnccl.so.2, not the twin: the one PyTorch's wheel brings into the
//! project venv (nvidia-nccl-cu13, installed by launch/setup). burnin loads it with
//! its own loader, which resolves every NCCL symbol it calls, and calls what works
//! without a GPU: ncclGetVersion (through the loader) and ncclGetErrorString; the
//! config header burnin would pass is the one that version's nccl.h lays out.
use burnin::backend::nccl::library::{self, config_size, Config};
use std::path::{Path, PathBuf};

/// site-packages/nvidia/nccl/lib/libnccl.so.2 of the project venv.
fn venv_nccl() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/lib");
    let found = std::fs::read_dir(&venv)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/nvidia/nccl/lib/libnccl.so.2"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!(
            "no libnccl.so.2 under {}: launch/setup makes the venv with PyTorch's NCCL",
            venv.display()
        )
    })
}

#[test]
fn the_venvs_libnccl_loads_with_every_symbol_and_answers_without_a_gpu() {
    let path = venv_nccl();
    let lib = library::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // PyTorch 2.11.0's cu130 wheel pins nvidia-nccl-cu13 2.28.9.
    let v = lib.version;
    assert!(
        (v.major, v.minor) >= (2, 27),
        "{}: version {v}",
        path.display()
    );
    assert_eq!(lib.error_string(0), "no error");
    let text = lib.error_string(2);
    assert!(text.contains("system error"), "{text}");
    // The header burnin passes is that release's own size, with its own version.
    let c = Config::non_blocking(v).unwrap();
    assert_eq!(Some(c.size), config_size(v));
    assert_eq!(c.version, v.code());
    assert_eq!(c.blocking, 0);
    // Loading the same file again gives the same table.
    let again = library::load(&path).unwrap();
    assert!(std::ptr::eq(lib, again));
    eprintln!("real NCCL: {}", lib.describe());
}
