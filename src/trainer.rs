//! The training binary: `burnin-train`, the only part of burnin that links libtorch.
//!
//! `burnin` itself (probe, sweep, smoke, evidence, chaos, run, report, compare) starts
//! on a node without libtorch; `burnin train` replaces itself with `burnin-train`
//! (same arguments, before MPI starts), after finding the two things that binary
//! needs at load time: the binary, and PyTorch's `torch/lib` to put on the loader
//! path (the binary carries no path of the machine it was built on). smoke's matrix
//! product and probe's libtorch column ask `burnin-train` in a child process.
//!
//! Where each is looked for, in order:
//! - the binary: `BURNIN_TRAIN`, then `burnin-train` next to this executable, then
//!   `PATH`;
//! - libtorch: `BURNIN_LIBTORCH` (torch's `lib` folder, or a libtorch folder holding
//!   `lib/`), then a folder on `LD_LIBRARY_PATH` with `libtorch_cpu.so`, then the
//!   `torch` package of the `python3` on `PATH` (found without importing it).
//!
//! The libtorch must be the one `burnin-train` was built against (tch binds one
//! PyTorch release exactly): its `version.py` is read and another version refused in
//! one line.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyTorch release burnin-train is built against (tch 0.24).
pub const TORCH_VERSION: &str = "2.11.0";

/// How to get the training binary, for messages.
const HOW: &str = "build it with `cargo build --release -p burnin-train` (or take it from the release tarball) and put it next to burnin, or name it with BURNIN_TRAIN";

/// The training binary and the libtorch it will load.
#[derive(Clone, Debug, PartialEq)]
pub struct Trainer {
    pub exe: PathBuf,
    /// torch's `lib` folder (holds libtorch_cpu.so).
    pub libtorch: PathBuf,
    /// PyTorch's version there ("2.11.0+cu130").
    pub torch_version: String,
}

/// Where the training binary is, or why it is not there.
pub fn find_exe() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("BURNIN_TRAIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("BURNIN_TRAIN={} is not a file", p.display()))
        };
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        let p = dir.join("burnin-train");
        if p.is_file() {
            return Ok(p);
        }
    }
    if let Some(p) = on_path("burnin-train") {
        return Ok(p);
    }
    Err(format!(
        "the training binary burnin-train is not next to {} nor on PATH: {HOW}",
        std::env::current_exe()
            .map(|e| e.display().to_string())
            .unwrap_or_else(|_| "burnin".into())
    ))
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// torch's lib folder under `dir`: `dir` itself, or `dir/lib`.
fn lib_dir(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join("lib")]
        .into_iter()
        .find(|d| d.join("libtorch_cpu.so").is_file())
}

/// PyTorch's version from `version.py` beside a torch `lib` folder (the wheel's
/// layout) or in the libtorch root above it.
pub fn torch_version_at(lib: &Path) -> Option<String> {
    let parent = lib.parent()?;
    let clean = |v: &str| v.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
    let found = if let Ok(text) = std::fs::read_to_string(parent.join("version.py")) {
        text.lines()
            .find_map(|l| l.strip_prefix("__version__ = ").map(clean))
    } else {
        // a libtorch zip: `build-version` holds the version alone
        let text = std::fs::read_to_string(parent.join("build-version")).ok()?;
        text.lines().map(clean).find(|l| !l.is_empty())
    };
    found.filter(|v| !v.is_empty())
}

/// Whether PyTorch `version` is the release burnin-train binds ("2.11.0+cu126" is).
pub fn version_fits(version: &str) -> bool {
    version.split('+').next() == Some(TORCH_VERSION)
}

/// The `torch` package folder of the `python3` on PATH, without importing torch.
fn python_torch() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

/// Where libtorch is, or why none was found.
pub fn find_libtorch() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("BURNIN_LIBTORCH") {
        let p = PathBuf::from(p);
        return lib_dir(&p).ok_or_else(|| {
            format!(
                "BURNIN_LIBTORCH={} holds no libtorch_cpu.so (give torch's lib folder)",
                p.display()
            )
        });
    }
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        if let Some(d) = std::env::split_paths(&ld).find(|d| d.join("libtorch_cpu.so").is_file()) {
            return Ok(d);
        }
    }
    if let Some(d) = python_torch().and_then(|t| lib_dir(&t)) {
        return Ok(d);
    }
    Err(format!(
        "no libtorch found (BURNIN_LIBTORCH, LD_LIBRARY_PATH, or the torch package of python3 on PATH): \
         install PyTorch {TORCH_VERSION} (pip install torch=={TORCH_VERSION}, the wheel for the driver's CUDA) \
         or set BURNIN_LIBTORCH to its torch/lib folder"
    ))
}

/// The training binary and its libtorch, checked.
pub fn locate() -> Result<Trainer, String> {
    let exe = find_exe()?;
    let libtorch = find_libtorch()?;
    let torch_version = torch_version_at(&libtorch).unwrap_or_else(|| "unknown".into());
    if torch_version != "unknown" && !version_fits(&torch_version) {
        return Err(format!(
            "libtorch at {} is PyTorch {torch_version}, but burnin-train is built against {TORCH_VERSION}: \
             install torch=={TORCH_VERSION} or point BURNIN_LIBTORCH at one",
            libtorch.display()
        ));
    }
    Ok(Trainer {
        exe,
        libtorch,
        torch_version,
    })
}

impl Trainer {
    /// LD_LIBRARY_PATH with libtorch's folder first.
    pub fn ld_library_path(&self) -> OsString {
        let mut dirs = vec![self.libtorch.clone()];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            dirs.extend(std::env::split_paths(&old).filter(|d| *d != self.libtorch));
        }
        std::env::join_paths(dirs).unwrap_or_default()
    }

    /// `burnin-train ARGS` with libtorch on the loader path (for a child process).
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.exe);
        c.env("LD_LIBRARY_PATH", self.ld_library_path());
        c
    }

    /// Become `burnin-train` with this process's arguments (never returns on success).
    /// Before MPI starts: the launcher's environment passes on unchanged.
    pub fn exec(&self) -> std::io::Error {
        use std::os::unix::process::CommandExt;
        let mut c = self.command();
        c.args(std::env::args_os().skip(1));
        c.exec()
    }
}

/// What burnin-train reports of its libtorch (`burnin-train --torch-info`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TorchInfo {
    /// PyTorch's version, as libtorch was built ("2.11.0+cu130").
    pub version: String,
    /// CUDA devices libtorch can use from this process.
    pub cuda_devices: i64,
}

/// What `burnin-train --matmul-check DEVICE` prints: smoke's `matmul` check.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MatmulResult {
    /// "pass", "fail" or "skip".
    pub status: String,
    pub detail: String,
}

/// Run `c` to its end, at most `limit` (then it is killed and that is the error).
pub fn output_within(
    mut c: Command,
    limit: std::time::Duration,
) -> Result<std::process::Output, String> {
    let what = format!("{:?}", c.get_program());
    let mut child = c.spawn().map_err(|e| format!("cannot run {what}: {e}"))?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not finish within {} s",
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    }
    child
        .wait_with_output()
        .map_err(|e| format!("reading {what}'s output: {e}"))
}

impl Trainer {
    /// Run `burnin-train ARGS` (one of its helpers), at most `limit`, and read the JSON
    /// line it prints last; the error says what it printed instead.
    pub fn ask<T: serde::de::DeserializeOwned>(
        &self,
        args: &[&str],
        limit: std::time::Duration,
    ) -> Result<T, String> {
        let mut c = self.command();
        c.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let out = output_within(c, limit)?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or("");
        serde_json::from_str(line).map_err(|_| {
            let err = String::from_utf8_lossy(&out.stderr);
            format!(
                "{} {} gave no answer ({})",
                self.exe.display(),
                args.join(" "),
                err.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no output")
                    .trim()
            )
        })
    }
}

/// Ask burnin-train about its libtorch (the reason when it cannot say).
pub fn torch_info() -> Result<TorchInfo, String> {
    locate()?.ask(&["--torch-info"], std::time::Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pytorch_release_must_match_whatever_its_cuda() {
        for v in ["2.11.0", "2.11.0+cu130", "2.11.0+cu126", "2.11.0+cpu"] {
            assert!(version_fits(v), "{v}");
        }
        for v in ["2.10.0+cu128", "2.11.1", "2.1.0", ""] {
            assert!(!version_fits(v), "{v}");
        }
    }

    #[test]
    fn the_version_is_read_beside_torch_lib() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("torch/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(
            dir.path().join("torch/version.py"),
            "from typing import Optional\n__version__ = '2.11.0+cu130'\ngit_version = 'abc'\n",
        )
        .unwrap();
        assert_eq!(torch_version_at(&lib).as_deref(), Some("2.11.0+cu130"));
        // a libtorch zip: build-version holds the version alone
        let lt = dir.path().join("libtorch/lib");
        std::fs::create_dir_all(&lt).unwrap();
        std::fs::write(dir.path().join("libtorch/build-version"), "2.11.0+cu126\n").unwrap();
        assert_eq!(torch_version_at(&lt).as_deref(), Some("2.11.0+cu126"));
        assert_eq!(
            lib_dir(&dir.path().join("torch")),
            None,
            "no libtorch_cpu.so"
        );
        std::fs::write(lib.join("libtorch_cpu.so"), "").unwrap();
        assert_eq!(lib_dir(&dir.path().join("torch")), Some(lib));
    }
}
