//! Link fix-ups for libtorch, and PyTorch's deterministic switch.
//!
//! rustc links with `--as-needed`. Nothing in burnin-train's own object files
//! references a symbol of `libtorch_cuda.so` (CUDA kernels register themselves from the
//! library's static initialisers), so the linker drops it and tch then reports no CUDA
//! even on a GPU host. When the libtorch that torch-sys found has `libtorch_cuda.so`,
//! we ask for it explicitly between `--no-as-needed`/`--as-needed`.
//!
//! No rpath: the binary must not carry a path of the build machine. `burnin train`
//! finds the machine's own libtorch and puts it on the loader path before it starts
//! burnin-train (`burnin::trainer`).
//!
//! It also compiles `src/deterministic.cpp` (PyTorch's deterministic-algorithms
//! switch, which tch does not expose) against the headers of that same libtorch.
use std::path::{Path, PathBuf};

/// Compile the C++ shim next to libtorch's headers (`DIR/../include`).
fn compile_shim(lib_dir: &Path) {
    let src = "src/deterministic.cpp";
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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    // torch-sys (a direct dependency, `links = "tch"`) exports its lib dir to us.
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    let dir = PathBuf::from(dir);
    compile_shim(&dir);
    // PyTorch's wheel keeps its version next to lib/: reported by --torch-info.
    if let Ok(text) = std::fs::read_to_string(dir.join("../version.py")) {
        if let Some(v) = text
            .lines()
            .find_map(|l| l.strip_prefix("__version__ = "))
            .map(|v| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
        {
            println!("cargo:rustc-env=BURNIN_LIBTORCH_VERSION={v}");
        }
    }
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
