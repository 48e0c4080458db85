//! Finding the NCCL library file.
//!
//! The usual ways NCCL reaches a GPU node are pip (`nvidia-nccl-cu12/13`, pulled in by
//! PyTorch, which ships only `nvidia/nccl/lib/libnccl.so.2` inside site-packages), a
//! system package (`libnccl2` in `/usr/lib/<triplet>`), or a tarball under
//! `/usr/local/nccl` or the CUDA toolkit. Users should not have to make symlinks or
//! set `LD_LIBRARY_PATH` (which glibc reads once, at process start), so burnin looks
//! in all of these itself, in this order:
//!
//! 1. an explicit file or directory (`--nccl-lib` / `BURNIN_NCCL_LIB`): it must load,
//!    or that is the error — no silent fallback to another NCCL;
//! 2. `libnccl.so.2`, then `libnccl.so`, by name through the dynamic loader
//!    (LD_LIBRARY_PATH, rpath, ld.so.cache, the default directories);
//! 3. pip's `nvidia/nccl/lib/libnccl.so.2` under the site-packages of `$VIRTUAL_ENV`
//!    and `$CONDA_PREFIX`, then of whatever `python3` on PATH reports (`sys.path`,
//!    asked with a short timeout);
//! 4. `/usr/lib/<triplet>`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`,
//!    `/usr/local/nccl/lib`;
//! 5. whatever `ldconfig -p` lists.
//!
//! The roots are a plain struct ([`SearchRoots`]) so that tests can point the search
//! at a known environment instead of depending on the process environment.
use super::library::{self, LoadError, NcclLib};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names tried through the dynamic loader and in library directories.
pub const LIB_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];
/// Where pip's nvidia-nccl puts the library, relative to site-packages.
pub const PIP_LIB: &str = "nvidia/nccl/lib/libnccl.so.2";
/// How long `python3` and `ldconfig` may take to answer (warm, python answers in
/// ~20 ms); a hung helper costs at most this once per lookup.
const HELPER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where to look for NCCL, in the order of the module header.
#[derive(Clone, Debug, Default)]
pub struct SearchRoots {
    /// Try [`LIB_NAMES`] through the dynamic loader.
    pub by_name: bool,
    /// Python prefixes (a venv, a conda env): searched at `lib*/python3*/site-packages`.
    pub prefixes: Vec<PathBuf>,
    /// site-packages directories searched for [`PIP_LIB`].
    pub site_packages: Vec<PathBuf>,
    /// A Python interpreter to ask for its `sys.path`.
    pub python: Option<PathBuf>,
    /// Library directories searched for [`LIB_NAMES`].
    pub lib_dirs: Vec<PathBuf>,
    /// Read `ldconfig -p`.
    pub ldconfig: bool,
}

impl SearchRoots {
    /// The roots for this process: its environment and the usual system places.
    pub fn from_env() -> SearchRoots {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let prefixes = ["VIRTUAL_ENV", "CONDA_PREFIX"]
            .iter()
            .filter_map(|v| var(v).map(PathBuf::from))
            .collect();
        let mut lib_dirs = vec![PathBuf::from(format!(
            "/usr/lib/{}-linux-gnu",
            std::env::consts::ARCH
        ))];
        if let Some(cuda) = var("CUDA_HOME").or_else(|| var("CUDA_PATH")) {
            lib_dirs.push(PathBuf::from(cuda).join("lib64"));
        }
        lib_dirs.extend(
            ["/usr/local/cuda/lib64", "/usr/local/nccl/lib", "/usr/lib64"]
                .iter()
                .map(PathBuf::from),
        );
        SearchRoots {
            by_name: true,
            prefixes,
            site_packages: Vec::new(),
            python: Some(PathBuf::from("python3")),
            lib_dirs,
            ldconfig: true,
        }
    }

    /// One line for "not found" messages.
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.by_name {
            parts.push("libnccl.so.2 through the dynamic loader".to_string());
        }
        for p in &self.prefixes {
            parts.push(format!("pip's nvidia-nccl under {}", p.display()));
        }
        for p in &self.site_packages {
            parts.push(format!("pip's nvidia-nccl in {}", p.display()));
        }
        if let Some(py) = &self.python {
            parts.push(format!("{}'s site-packages", py.display()));
        }
        if !self.lib_dirs.is_empty() {
            let dirs: Vec<String> = self
                .lib_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            parts.push(dirs.join(", "));
        }
        if self.ldconfig {
            parts.push("ldconfig -p".to_string());
        }
        parts.join("; ")
    }
}

/// The site-packages directories of a Python prefix: `lib*/python3*/site-packages`.
pub fn site_packages_of(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// Run a helper program; its stdout, or None when it fails or takes longer than
/// `timeout` (then it is killed). Output is read on a thread so a chatty program
/// cannot block on a full pipe.
fn output_with_timeout(cmd: &mut Command, timeout: Duration) -> Option<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return reader.join().ok(),
            Ok(Some(_)) => return None,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                // Our own child: kill it by its handle and reap it. The reader thread
                // is left to finish on its own: a grandchild may still hold the pipe.
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// The directories on `python`'s `sys.path` (site-packages, user site, PYTHONPATH).
fn python_sys_path(python: &Path) -> Vec<PathBuf> {
    let out = output_with_timeout(
        Command::new(python)
            .arg("-c")
            .arg("import sys; print('\\n'.join(p for p in sys.path if p))"),
        HELPER_TIMEOUT,
    );
    out.map(|s| s.lines().map(PathBuf::from).collect())
        .unwrap_or_default()
}

/// The NCCL files in `ldconfig -p`'s output, `libnccl.so.2` first.
pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    let mut found: Vec<(usize, PathBuf)> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((name, path)) = line.split_once(" => ") else {
            continue;
        };
        let name = name.split_whitespace().next().unwrap_or("");
        if let Some(rank) = LIB_NAMES.iter().position(|n| *n == name) {
            found.push((rank, PathBuf::from(path.trim())));
        }
    }
    found.sort_by_key(|(rank, _)| *rank);
    found.into_iter().map(|(_, p)| p).collect()
}

fn ldconfig_paths() -> Vec<PathBuf> {
    for prog in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        if let Some(out) = output_with_timeout(Command::new(prog).arg("-p"), HELPER_TIMEOUT) {
            return parse_ldconfig(&out);
        }
    }
    Vec::new()
}

/// Search `roots` in order; the first NCCL that loads wins.
pub fn search(roots: &SearchRoots) -> Result<&'static NcclLib, String> {
    let mut unusable: Vec<String> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    // Try one existing file; Some(lib) when it loads.
    let mut try_file = |path: PathBuf, unusable: &mut Vec<String>| -> Option<&'static NcclLib> {
        if !path.is_file() || seen.contains(&path) {
            return None;
        }
        seen.push(path.clone());
        match library::load(&path) {
            Ok(lib) => Some(lib),
            Err(e) => {
                unusable.push(e.to_string());
                None
            }
        }
    };
    if roots.by_name {
        for name in LIB_NAMES {
            match library::load(Path::new(name)) {
                Ok(lib) => return Ok(lib),
                Err(LoadError::NotFound(_)) => {}
                Err(e) => unusable.push(e.to_string()),
            }
        }
    }
    let mut site_packages: Vec<PathBuf> = roots
        .prefixes
        .iter()
        .flat_map(|p| site_packages_of(p))
        .collect();
    site_packages.extend(roots.site_packages.iter().cloned());
    for sp in &site_packages {
        if let Some(lib) = try_file(sp.join(PIP_LIB), &mut unusable) {
            return Ok(lib);
        }
    }
    if let Some(py) = &roots.python {
        for sp in python_sys_path(py) {
            if let Some(lib) = try_file(sp.join(PIP_LIB), &mut unusable) {
                return Ok(lib);
            }
        }
    }
    for dir in &roots.lib_dirs {
        for name in LIB_NAMES {
            if let Some(lib) = try_file(dir.join(name), &mut unusable) {
                return Ok(lib);
            }
        }
    }
    if roots.ldconfig {
        for path in ldconfig_paths() {
            if let Some(lib) = try_file(path, &mut unusable) {
                return Ok(lib);
            }
        }
    }
    if unusable.is_empty() {
        Err(format!("NCCL not found (looked for {})", roots.summary()))
    } else {
        Err(format!("no usable NCCL: {}", unusable.join("; ")))
    }
}

/// Load the NCCL the user named (`--nccl-lib` / `BURNIN_NCCL_LIB`): a file, a
/// directory holding `libnccl.so.2` or `libnccl.so`, or a bare library name for the
/// dynamic loader. The error names the path.
pub fn explicit(path: &Path) -> Result<&'static NcclLib, String> {
    const FLAG: &str = "--nccl-lib / BURNIN_NCCL_LIB";
    let bare_name = path.components().count() == 1 && !path.is_absolute() && !path.exists();
    if bare_name {
        return library::load(path)
            .map_err(|e| format!("{FLAG}: NCCL library {} not usable: {e}", path.display()));
    }
    if path.is_dir() {
        for name in LIB_NAMES {
            let f = path.join(name);
            if f.is_file() {
                return library::load(&f).map_err(|e| format!("{FLAG}: {e}"));
            }
        }
        return Err(format!(
            "{FLAG}: {} holds no libnccl.so.2 or libnccl.so",
            path.display()
        ));
    }
    if !path.exists() {
        return Err(format!("{FLAG}: {} does not exist", path.display()));
    }
    // A relative path with a directory part loads as given; make "libnccl.so.2" in the
    // current directory a path too, so the loader does not search for the name.
    let file = if path.is_absolute() || path.components().count() > 1 {
        path.to_path_buf()
    } else {
        Path::new(".").join(path)
    };
    library::load(&file).map_err(|e| format!("{FLAG}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldconfig_output_is_parsed_so2_first() {
        let text = "\
1234 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibnccl-net.so (libc6,x86-64) => /opt/x/libnccl-net.so
\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
";
        assert_eq!(
            parse_ldconfig(text),
            vec![
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so")
            ]
        );
    }

    #[test]
    fn site_packages_of_a_prefix_are_globbed() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("lib/python3.12/site-packages");
        std::fs::create_dir_all(&sp).unwrap();
        std::fs::create_dir_all(dir.path().join("lib/perl5")).unwrap();
        assert_eq!(site_packages_of(dir.path()), vec![sp]);
        assert!(site_packages_of(&dir.path().join("nope")).is_empty());
    }

    #[test]
    fn nothing_found_says_where_it_looked() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let roots = SearchRoots {
            prefixes: vec![dir.path().to_path_buf()],
            lib_dirs: vec![dir.path().join("lib")],
            ..SearchRoots::default()
        };
        let e = search(&roots).unwrap_err();
        assert!(e.starts_with("NCCL not found"), "{e}");
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
    }

    #[test]
    fn a_file_that_is_not_nccl_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libnccl.so.2");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let roots = SearchRoots {
            lib_dirs: vec![dir.path().to_path_buf()],
            ..SearchRoots::default()
        };
        let e = search(&roots).unwrap_err();
        assert!(
            e.starts_with("no usable NCCL") && e.contains(&fake.display().to_string()),
            "{e}"
        );
        let e = explicit(&fake).unwrap_err();
        assert!(
            e.contains("--nccl-lib") && e.contains(&fake.display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn helper_programs_are_cut_off() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let t = Instant::now();
        let out = output_with_timeout(
            Command::new("sh").arg("-c").arg("sleep 5"),
            Duration::from_millis(200),
        );
        assert!(out.is_none());
        assert!(t.elapsed() < Duration::from_secs(3));
        let out = output_with_timeout(
            Command::new("sh").arg("-c").arg("echo hi"),
            Duration::from_secs(5),
        );
        assert_eq!(out.as_deref(), Some("hi\n"));
    }
}
