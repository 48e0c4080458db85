//! Helpers for integration tests: run the real binary under the real mpirun, always
//! with a time bound, and read its output.
#![allow(dead_code)]
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_burnin")
}

/// What a finished (or killed) command left.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl Run {
    pub fn all(&self) -> String {
        format!("--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// mpirun with the settings this machine needs (root, 2 cores).
pub fn mpirun_cmd(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        &np.to_string(),
    ]);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    // Keep runs quiet and local: shared memory between ranks, no network probing.
    c.env("OMPI_MCA_btl", "self,vader,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo");
    c.env("OMPI_MCA_oob_tcp_if_include", "lo");
    c
}

/// `mpirun -np N burnin ARGS…`, bounded by `limit`.
pub fn mpirun(np: usize, args: &[&str], limit: Duration) -> Run {
    let mut c = mpirun_cmd(np);
    c.arg(bin()).args(args);
    run_bounded(c, limit)
}

/// Every descendant of `pid` (the library's /proc walk).
pub fn descendants(pid: u32) -> Vec<u32> {
    burnin::process::descendant_pids(pid)
}

/// Kill `child` and everything under it: its process group, and each descendant by
/// pid (Open MPI puts every rank in a process group of its own, so killing mpirun's
/// group alone would orphan the ranks).
pub fn kill_group(child: &Child, sig: i32) {
    burnin::process::signal_tree(child.id(), sig);
}

extern "C" {
    #[link_name = "kill"]
    pub fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Spawn `c` in its own process group and wait at most `limit`; on expiry the whole
/// group is SIGKILLed and `timed_out` is set.
pub fn run_bounded(mut c: Command, limit: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    c.process_group(0);
    let mut child = c.spawn().expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            timed_out = true;
            kill_group(&child, 9);
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.and_then(|s| s.code()),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        timed_out,
    }
}

/// Every line of a JSONL file parses; returns them.
pub fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("bad line in {}: {e}: {l}", path.display()))
        })
        .collect()
}

/// No panic and no backtrace in what the program printed.
pub fn assert_no_panic(r: &Run) {
    let all = r.all();
    assert!(!all.contains("panicked"), "panic:\n{all}");
    assert!(!all.contains("RUST_BACKTRACE"), "backtrace hint:\n{all}");
}

/// The simulated cluster (`launch/sim-cluster`) of one test file: its own name prefix
/// and subnet, so test files never share namespaces.
pub struct SimCluster {
    pub prefix: &'static str,
    pub subnet: &'static str,
}

impl SimCluster {
    /// `launch/sim-cluster ARGS…` for this cluster, run from the repository root.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let root = env!("CARGO_MANIFEST_DIR");
        let mut c = Command::new(Path::new(root).join("launch/sim-cluster"));
        c.args(args)
            .env("BURNIN_SIM_PREFIX", self.prefix)
            .current_dir(root);
        c
    }

    /// Bring 4 nodes x 2 ranks up, with `extra` flags (`--rate`, `--shape`); false,
    /// with a message, where root or network namespaces are refused. On a cluster that
    /// is up already this reshapes it.
    pub fn start(&self, extra: &[&str]) -> bool {
        self.start_sized(4, 2, extra)
    }

    /// [`SimCluster::start`] with `nodes` nodes of `ranks` ranks each.
    pub fn start_sized(&self, nodes: usize, ranks: usize, extra: &[&str]) -> bool {
        let (nodes, ranks) = (nodes.to_string(), ranks.to_string());
        let mut args = vec![
            "up",
            "--nodes",
            &nodes,
            "--ranks-per-node",
            &ranks,
            "--subnet",
            self.subnet,
        ];
        args.extend_from_slice(extra);
        let r = run_bounded(self.cmd(&args), Duration::from_secs(60));
        if r.code != Some(0) {
            // In CI (CI=true, as .ci/run sets it) a cluster that cannot come up is a
            // failure, never a skipped test that reads as a pass.
            skipped(&format!(
                "the simulated cluster ({}) did not come up: it needs root and network \
                 namespaces: {}",
                self.prefix,
                r.all().trim()
            ));
        }
        r.code == Some(0)
    }

    /// [`SimCluster::start`], and a guard that takes the cluster down when dropped;
    /// None only after [`skipped`] (a failure under CI): end the test with
    /// `let _down = require!(SIM.up(…));`.
    pub fn up(&self, extra: &[&str]) -> Option<SimDown> {
        self.up_sized(4, 2, extra)
    }

    /// [`SimCluster::up`] with `nodes` nodes of `ranks` ranks each.
    pub fn up_sized(&self, nodes: usize, ranks: usize, extra: &[&str]) -> Option<SimDown> {
        self.start_sized(nodes, ranks, extra).then_some(SimDown {
            prefix: self.prefix,
            subnet: self.subnet,
        })
    }
}

/// A test that cannot run its scenario here. In CI (CI=true or 1, as .ci/run sets it)
/// it fails naming why, so a skip never reads as a pass there. Elsewhere it prints
/// `skipped: TEST: why` straight to the terminal (cargo's capture hides what a
/// passing test prints through `eprintln!`) and appends the line to
/// `target/tmp/skipped.txt`, which `launch/test` lists when the suite ends.
///
/// Tests end through [`skip!`] or [`require!`], never a bare `return`
/// (`launch/check-tests.py`, run by `launch/lint`, refuses one).
pub fn skipped(why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    assert!(!ci, "{test}: cannot run its scenario in CI: {why}");
    let line = format!(
        "skipped: {} {test}: {why}\n",
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default()
    );
    use std::io::Write;
    let _ = std::io::stderr().write_all(line.as_bytes());
    let list = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(list)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// End the test here as skipped ([`skipped`]: a failure under CI=true):
/// `skip!("chromium is not installed")`, with `format!`'s arguments.
#[macro_export]
macro_rules! skip {
    ($($why:tt)*) => {{
        $crate::common::skipped(&format!($($why)*));
        return;
    }};
}

/// The value of an `Option` a helper returned, or the end of the test: helpers such as
/// [`SimCluster::up`] answer None only after [`skipped`] said why (or failed in CI).
#[macro_export]
macro_rules! require {
    ($opt:expr) => {
        match $opt {
            Some(v) => v,
            None => return,
        }
    };
}

/// Takes its cluster down when dropped.
pub struct SimDown {
    prefix: &'static str,
    subnet: &'static str,
}

impl Drop for SimDown {
    fn drop(&mut self) {
        let c = SimCluster {
            prefix: self.prefix,
            subnet: self.subnet,
        };
        let _ = run_bounded(c.cmd(&["down"]), Duration::from_secs(60));
    }
}

/// Two busy loops at the default priority (what `launch/test --hog` runs beside the
/// suite), ended when dropped, each bounded by `timeout` should the test process die
/// without unwinding.
pub struct CpuHog(Vec<Child>);

impl CpuHog {
    pub fn start() -> CpuHog {
        CpuHog(
            (0..2)
                .map(|_| {
                    use std::os::unix::process::CommandExt;
                    Command::new("timeout")
                        .args(["900", "sh", "-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .process_group(0)
                        .spawn()
                        .expect("spawn a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // the loop and its timeout, by the group the loop was started in
            kill_group(c, 9);
            let _ = c.wait();
        }
    }
}

/// The GPU twin (tests/gpu-twin): fake libcuda/libnccl/libnvidia-ml, built once per
/// test process into the target's temporary folder. burnin finds them only through
/// the loader path and BURNIN_NCCL_LIB ([`Twin::env`]).
pub struct Twin {
    /// The folder holding libcuda.so.1, libnccl.so.2 and libnvidia-ml.so.1.
    pub lib: std::path::PathBuf,
}

impl Twin {
    /// Put the twin on `c`'s loader path, name its NCCL, and count calls into `counts`.
    pub fn env(&self, c: &mut Command, counts: &Path) {
        c.env("LD_LIBRARY_PATH", &self.lib)
            .env("BURNIN_NCCL_LIB", self.lib.join("libnccl.so.2"))
            .env("TWIN_COUNTS_DIR", counts)
            // the twin's NCCL checks each ncclConfig_t against NCCL's real headers
            .env(
                "TWIN_NCCL_LAYOUTS",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("src/backend/nccl/config-layouts.tsv"),
            )
            .env_remove("CUDA_VISIBLE_DEVICES");
    }
}

/// Build the twin (serialised across test processes by a lock file).
pub fn twin() -> &'static Twin {
    static TWIN: std::sync::OnceLock<Twin> = std::sync::OnceLock::new();
    TWIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gpu-twin");
        std::fs::create_dir_all(&dir).expect("twin folder");
        let lock = std::fs::File::create(dir.join(".lock")).expect("twin lock");
        use std::os::fd::AsRawFd;
        extern "C" {
            fn flock(fd: i32, op: i32) -> i32;
        }
        // SAFETY: flock on a file descriptor this function owns; LOCK_EX = 2.
        assert_eq!(
            unsafe { flock(lock.as_raw_fd(), 2) },
            0,
            "lock the twin folder"
        );
        let lib = dir.join("lib");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu-twin/build");
        let r = run_bounded(
            {
                let mut c = Command::new("bash");
                c.arg(script).arg(&lib);
                c
            },
            Duration::from_secs(120),
        );
        assert_eq!(r.code, Some(0), "building the GPU twin: {}", r.all());
        drop(lock);
        Twin { lib }
    })
}

// ------------------------------------------------------------ Prometheus text format

/// Parse each text with prometheus_client's parser; per text, its families as
/// `{"name", "type", "samples": [{"name", "labels", "value"}]}`. A text it refuses
/// fails the test with the parser's error.
const PROM_PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for path in sys.argv[1:]:
    text = open(path).read()
    fams = []
    for f in text_string_to_metric_families(text):
        fams.append({"name": f.name, "type": f.type, "samples": [
            {"name": s.name, "labels": s.labels,
             "value": s.value if math.isfinite(s.value) else str(s.value)}
            for s in f.samples]})
    out.append(fams)
print(json.dumps(out))
"#;

pub fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(venv.exists(), "no {} (run launch/setup)", venv.display());
    venv
}

/// The parsed families of each file (Prometheus text format), in order.
pub fn prom_parse(files: &[PathBuf]) -> Vec<Vec<serde_json::Value>> {
    let mut c = Command::new(python());
    c.arg("-c").arg(PROM_PARSE).args(files);
    let r = run_bounded(c, Duration::from_secs(60));
    assert_eq!(
        r.code,
        Some(0),
        "prometheus_client refused a file: {}",
        r.all()
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_array().unwrap().clone())
        .collect()
}

/// The samples named `name` (a sample's name: counters end in `_total`).
pub fn prom_samples<'a>(fams: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    fams.iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .filter(|s| s["name"] == name)
        .collect()
}

pub fn prom_value(fams: &[serde_json::Value], name: &str) -> f64 {
    let v = prom_samples(fams, name);
    assert_eq!(v.len(), 1, "one {name}: {fams:?}");
    v[0]["value"].as_f64().unwrap()
}
