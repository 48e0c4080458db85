//! Link fix-ups for libtorch.
//!
//! rustc links with `--as-needed`. Nothing in burnin's own object files references a
//! symbol of `libtorch_cuda.so` (CUDA kernels register themselves from the library's
//! static initialisers), so the linker drops it and tch then reports no CUDA even on a
//! GPU host. When the libtorch that torch-sys found has `libtorch_cuda.so`, we ask for
//! it explicitly between `--no-as-needed`/`--as-needed`, and we add an rpath to
//! libtorch's lib directory so the binary runs without `LD_LIBRARY_PATH`.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    // torch-sys (a direct dependency, `links = "tch"`) exports its lib dir to us.
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        let dir = PathBuf::from(dir);
        // PyTorch's wheel keeps its version next to lib/: report it in `burnin probe`.
        if let Ok(text) = std::fs::read_to_string(dir.join("../version.py")) {
            if let Some(v) = text
                .lines()
                .find_map(|l| l.strip_prefix("__version__ = "))
                .map(|v| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
            {
                println!("cargo:rustc-env=BURNIN_LIBTORCH_VERSION={v}");
            }
        }
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        if dir.join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        } else {
            println!(
                "cargo:warning=libtorch at {} has no libtorch_cuda.so: this build is CPU-only",
                dir.display()
            );
        }
    }
}
