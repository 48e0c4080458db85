//! Link fix-ups for libtorch.
//!
//! rustc links with `--as-needed`. Nothing in burnin's own object files references a
//! symbol of `libtorch_cuda.so` (CUDA kernels register themselves from the library's
//! static initialisers), so the linker drops it and tch then reports no CUDA even on a
//! GPU host. When the libtorch that torch-sys found has `libtorch_cuda.so`, we ask for
//! it explicitly between `--no-as-needed`/`--as-needed`, and we add an rpath to
//! libtorch's lib directory so the binary runs without `LD_LIBRARY_PATH`.
//!
//! With the `train` feature it also compiles `src/train/deterministic.cpp` (PyTorch's
//! deterministic-algorithms switch, which tch does not expose) against the headers of
//! that same libtorch.
use std::path::{Path, PathBuf};

/// Compile the C++ shim next to libtorch's headers (`DIR/../include`).
#[cfg(feature = "train")]
fn compile_shim(lib_dir: &Path) {
    let src = "src/train/deterministic.cpp";
    println!("cargo:rerun-if-changed={src}");
    let include = lib_dir.join("../include");
    cc::Build::new()
        .cpp(true)
        .file(src)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .warnings(false)
        .compile("burnin_deterministic");
}

#[cfg(not(feature = "train"))]
fn compile_shim(_lib_dir: &Path) {}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    // torch-sys (a direct dependency, `links = "tch"`) exports its lib dir to us.
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        let dir = PathBuf::from(dir);
        compile_shim(&dir);
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
