//! burnin's GPU paths on the GPU twin (tests/gpu-twin): the real binary under the real
//! mpirun, with fake libcuda.so.1, libnccl.so.2 and libnvidia-ml.so.1 first on the
//! loader path. The twin implements semantics, not performance: nothing here reads a
//! timing as a measurement.
//!
//! Every twin library counts the calls of each of its entry points; the last test waits
//! for the others and checks that burnin called every entry point the twin exports and
//! that no run met a function the twin lacks.
mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The tests the coverage check waits for.
/// The scenarios the last test waits for: every test of this file that holds a
/// [`Scenario`] (counted in the source, so a new test cannot be forgotten).
fn scenarios() -> usize {
    include_str!("gpu_twin.rs")
        .matches(concat!("let _s = ", "Scenario;"))
        .count()
}
static FINISHED: AtomicUsize = AtomicUsize::new(0);

/// Counts a scenario as finished when dropped (passed or failed).
struct Scenario;
impl Drop for Scenario {
    fn drop(&mut self) {
        FINISHED.fetch_add(1, Ordering::SeqCst);
    }
}

/// This test process's folder for the twin's call counts and the runs' output.
fn counts_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("gpu-twin")
            .join(format!("counts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("outputs")).unwrap();
        d
    })
}

fn save(name: &str, r: &Run) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(counts_dir().join("outputs").join(format!("{name}.log")))
        .unwrap();
    let _ = writeln!(f, "{}", r.all());
}

/// `mpirun -np N burnin ARGS` on the twin with `env`.
fn on_twin(name: &str, np: usize, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let mut c = mpirun_cmd(np);
    twin().env(&mut c, counts_dir());
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg(bin()).args(args);
    let r = run_bounded(c, limit);
    save(name, &r);
    assert_no_panic(&r);
    assert!(!r.timed_out, "{name}: timed out: {}", r.all());
    r
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Processes whose command line mentions `marker` (the run's own temp folder).
fn processes_mentioning(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                out.push(cmd);
            }
        }
    }
    out
}

#[test]
fn probe_lists_twin_gpus_with_driver_and_nccl_versions_per_rank() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("probe.json");
    let r = on_twin(
        "probe",
        2,
        &["probe", "--json", s(&j)],
        &[("TWIN_GPUS", "2")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let rows = json(&j);
    for (rank, row) in rows.as_array().unwrap().iter().enumerate() {
        let gpus = row["cuda"]["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 2, "{row}");
        assert_eq!(
            gpus[rank]["name"],
            format!("burnin-twin GPU {rank}"),
            "{row}"
        );
        assert_eq!(row["cuda"]["driver_version"], "13.0");
        let nccl = row["nccl_version"].as_str().unwrap();
        assert!(
            nccl.starts_with("2.28.9 (") && nccl.contains("gpu-twin"),
            "{nccl}"
        );
    }
    // The rank table and NVML's view say what they are: the twin.
    assert!(
        r.stdout.contains("burnin-twin GPU 1 (0000:2a:00.0)"),
        "{}",
        r.all()
    );
    assert!(
        r.stdout.contains("driver 580.00-burnin-twin"),
        "{}",
        r.all()
    );
}

#[test]
fn probe_against_dgx_h100_names_the_gpu_whose_nvlink_is_down() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/dgx-h100.toml");
    let board = dir.path().join("hgx.topo");
    let run = |extra: &str, name: &str| {
        std::fs::write(&board, format!("nvswitch 18\n{extra}")).unwrap();
        on_twin(
            name,
            2,
            &["probe", "--topology", s(&topo)],
            &[("TWIN_GPUS", "8"), ("TWIN_TOPOLOGY", s(&board))],
            Duration::from_secs(60),
        )
    };
    let healthy = run("", "probe-topology-healthy");
    assert!(healthy.stdout.contains("NV18"), "{}", healthy.all());
    assert!(!healthy.stdout.contains("NVLink down"), "{}", healthy.all());
    let down = run("down 3 5\n", "probe-topology-down");
    assert_eq!(down.code, Some(1), "{}", down.all());
    assert!(
        down.stdout
            .contains("GPU 3 (00000000:5D:00.0) has 17 of 18 NVLinks active — NVLink down"),
        "{}",
        down.all()
    );
    assert_eq!(
        down.stdout.matches("NVLink down").count(),
        1,
        "only GPU 3: {}",
        down.all()
    );
}

#[test]
fn cuda_12_drivers_run_and_an_older_one_is_refused_in_one_line() {
    let _s = Scenario;
    let args = [
        "sweep",
        "--backend",
        "nccl",
        "--tiers",
        "world",
        "-b",
        "1K",
        "-e",
        "4K",
        "-n",
        "1",
        "-w",
        "0",
        "--no-transport",
    ];
    for v in ["12000", "12040", "12080"] {
        let r = on_twin(
            "driver-12",
            2,
            &args,
            &[("TWIN_CUDA_VERSION", v)],
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(0), "driver {v}: {}", r.all());
    }
    let r = on_twin(
        "driver-11",
        2,
        &args,
        &[("TWIN_CUDA_VERSION", "11080")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("supports CUDA 11.8 but burnin needs CUDA 12.0 or newer"),
        "{}",
        r.all()
    );
    // A CUDA toolkit's stubs folder first on the loader path (as build images have
    // it): cudarc opens its unversioned libcuda.so, the stub; burnin names the file
    // and the fix instead of a bare CUDA_ERROR_STUB_LIBRARY.
    let dir = tempfile::tempdir().unwrap();
    let stubs = dir.path().join("cuda/lib64/stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    std::fs::copy(twin().lib.join("libcuda.so.1"), stubs.join("libcuda.so")).unwrap();
    let path = format!("{}:{}", stubs.display(), twin().lib.display());
    let r = on_twin(
        "driver-stub",
        1,
        &args,
        &[("LD_LIBRARY_PATH", &path)],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    let want = format!(
        "the libcuda.so loaded ({}) is the CUDA toolkit's stub library, not the driver",
        stubs.join("libcuda.so").display()
    );
    assert!(r.stderr.contains(&want), "{want}\n{}", r.all());
    assert!(r
        .stderr
        .contains("take the toolkit's stubs folder out of LD_LIBRARY_PATH"));
}

#[test]
fn osu_timing_runs_every_collective_on_twin_gpus_with_a_barrier_per_iteration() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let r = on_twin(
        "sweep-osu-timing",
        2,
        &[
            "sweep",
            "--backend",
            "nccl",
            "--tiers",
            "world",
            "-c",
            "all",
            "-b",
            "4K",
            "-e",
            "64K",
            "-f",
            "16",
            "-n",
            "3",
            "-w",
            "1",
            "--timing",
            "osu",
            "--out",
            s(&out),
        ],
        &[("TWIN_GPUS", "2")],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = json(&out.join("run.json"));
    assert_eq!(run["plan"]["timing"], "osu");
    let points = run["points"].as_array().unwrap();
    // 7 collectives x 2 sizes x 2 placements.
    assert_eq!(points.len(), 28, "{}", r.all());
    for p in points {
        assert_eq!(p["iterations"], 3, "{p}");
        assert_eq!(p["wrong"], 0, "{p}");
    }
}

#[test]
fn every_collective_type_and_op_is_right_on_three_twin_gpus() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let r = on_twin(
        "sweep-all",
        3,
        &[
            "sweep",
            "--backend",
            "nccl",
            "--tiers",
            "world",
            "-c",
            "all",
            "-d",
            "all",
            "-o",
            "all",
            "-b",
            "3K",
            "-e",
            "96K",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "--out",
            s(&out),
        ],
        &[("TWIN_GPUS", "4")],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = json(&out.join("run.json"));
    let points = run["points"].as_array().unwrap();
    // 3 reducing collectives x 5 ops + 4 others, x 6 types x 2 sizes x 2 placements
    assert_eq!(points.len(), (3 * 5 + 4) * 6 * 2 * 2, "{}", r.all());
    assert!(points.iter().all(|p| p["wrong"] == 0), "{}", r.all());
    assert_eq!(run["wrong_total"], 0);
    let stacks = run["provenance"]["rank_stacks"].as_array().unwrap();
    assert_eq!(stacks.len(), 3);
    assert!(
        stacks[2].as_str().unwrap().contains("burnin-twin GPU 2"),
        "{stacks:?}"
    );
}

#[test]
fn a_wrong_element_a_hang_and_an_async_error_are_caught() {
    let _s = Scenario;
    let base = [
        "sweep",
        "--backend",
        "nccl",
        "--tiers",
        "world",
        "-b",
        "1K",
        "-e",
        "4K",
        "-f",
        "2",
        "-n",
        "2",
        "-w",
        "1",
        "--no-transport",
    ];
    // From its 5th call rank 1's results hold one wrong element: wherever the twin
    // put it (a seeded draw by default; the last or the middle one on request), the
    // check finds it and names where.
    let r = on_twin(
        "wrong",
        2,
        &base,
        &[("TWIN_NCCL_WRONG", "1:5")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stdout.contains("Out of bounds values : 5 FAILED"),
        "{}",
        r.all()
    );
    let flipped: Vec<&str> = r
        .stderr
        .lines()
        .filter_map(|l| l.split("flipped element ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let named: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("# WRONG: all_reduce"))
        .filter_map(|l| l.split("first at element ").nth(1))
        .collect();
    assert_eq!(named.len(), 5, "{}", r.all());
    assert!(
        named.iter().all(|e| flipped.contains(e)) && named.iter().any(|e| *e != "0"),
        "named {named:?}, flipped {flipped:?}"
    );
    for (at, elem_2k) in [("last", 511), ("middle", 256)] {
        let r = on_twin(
            "wrong-at",
            2,
            &base,
            &[("TWIN_NCCL_WRONG", "1:5"), ("TWIN_NCCL_WRONG_AT", at)],
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(1), "{}", r.all());
        let want = format!("WRONG: all_reduce 2KiB f32: rank 1 first at element {elem_2k}");
        assert!(r.stdout.contains(&want), "{want}\n{}", r.all());
        assert!(
            r.stdout.contains("Out of bounds values : 5 FAILED"),
            "{}",
            r.all()
        );
    }

    // Rank 1's third call never completes: both ranks end at their 4 s deadline.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hang");
    let mut args: Vec<&str> = vec!["-T", "4"];
    args.extend_from_slice(&base);
    args.extend_from_slice(&["--out", s(&out)]);
    let t = Instant::now();
    let r = on_twin(
        "hang",
        2,
        &args,
        &[("TWIN_NCCL_HANG", "1:3")],
        Duration::from_secs(60),
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("all_reduce 1KiB f32 sum on tier world group 0 (ranks [0, 1]): not complete within the 4 s deadline"),
        "{}",
        r.all()
    );
    assert!(
        r.stderr.contains("the NCCL communicator was aborted"),
        "{}",
        r.all()
    );
    std::thread::sleep(Duration::from_millis(500));
    let left = processes_mentioning(s(dir.path()));
    assert!(left.is_empty(), "left behind: {left:?}");

    // A message larger than the GPU's memory: a CUDA error naming the size.
    let r = on_twin(
        "out-of-memory",
        2,
        &[
            "sweep",
            "--backend",
            "nccl",
            "--tiers",
            "world",
            "-b",
            "64M",
            "-e",
            "64M",
            "-n",
            "1",
            "-w",
            "0",
            "--no-transport",
        ],
        &[("TWIN_GPU_MEMORY_MIB", "96")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("allocating 64MiB on GPU")
            && r.stderr
                .contains("CUDA_ERROR_OUT_OF_MEMORY (out of memory (burnin-twin))"),
        "{}",
        r.all()
    );

    // Rank 0's second call reports an asynchronous error instead of running.
    let r = on_twin(
        "async-error",
        2,
        &base,
        &[("TWIN_NCCL_ASYNC_ERROR", "0:2")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("NCCL reported") && r.stderr.contains("injected async error at call 2"),
        "{}",
        r.all()
    );
}

/// Bytes the CUDA twin copied between host and device for one run's counts files.
fn copied(dir: &Path) -> (u64, u64) {
    let (mut htod, mut dtoh) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("cuda.") {
            continue;
        }
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["#", "bytes_htod", n] => htod += n.parse::<u64>().unwrap(),
                ["#", "bytes_dtoh", n] => dtoh += n.parse::<u64>().unwrap(),
                _ => {}
            }
        }
    }
    (htod, dtoh)
}

#[test]
fn buffers_are_filled_and_checked_on_the_gpu_not_through_the_host() {
    let _s = Scenario;
    // 64 MiB of f32, out of place and in place: uploading the data (what burnin did
    // before) would copy 64 MiB per buffer and point.
    for (check, want_dtoh) in [("0", 0u64), ("1", 2 * 2 * 80)] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = mpirun_cmd(2);
        twin().env(&mut c, dir.path());
        c.arg(bin()).args([
            "sweep",
            "--backend",
            "nccl",
            "--tiers",
            "world",
            "-b",
            "64M",
            "-e",
            "64M",
            "-n",
            "1",
            "-w",
            "0",
            "--no-transport",
            "--check",
            check,
        ]);
        let r = run_bounded(c, Duration::from_secs(120));
        save("host-traffic", &r);
        assert_eq!(r.code, Some(0), "{}", r.all());
        let (htod, dtoh) = copied(dir.path());
        // tables (a few bytes per fill or check) and the check counters only
        assert!(
            htod < 64 << 10,
            "--check {check}: {htod} bytes host -> device"
        );
        assert_eq!(
            dtoh, want_dtoh,
            "--check {check}: 80 counter bytes per checked point and rank"
        );
        // merge into the coverage counts
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::fs::copy(e.path(), counts_dir().join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn smoke_passes_on_twin_gpus_and_names_the_rank_without_one() {
    let _s = Scenario;
    let r = on_twin(
        "smoke",
        2,
        &["smoke", "--backend", "nccl"],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    for check in [
        "gpu",
        "context",
        "memory",
        "comm-init",
        "all_reduce",
        "ckpt-dir",
    ] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("PASS") && l.split_whitespace().nth(1) == Some(check)),
            "{check}: {}",
            r.all()
        );
    }
    assert!(
        r.stdout.lines().any(|l| l.starts_with("SKIP  matmul")
            && l.contains("libtorch")
            && l.contains("sees no CUDA device")),
        "{}",
        r.all()
    );
    let r = on_twin(
        "smoke-missing",
        2,
        &["smoke", "--backend", "nccl"],
        &[("TWIN_RANK_GPUS", "1:0")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stdout.lines().any(|l| l.starts_with("FAIL  gpu")
            && l.contains("rank 1 (")
            && l.contains("sees no GPU")),
        "{}",
        r.all()
    );
}

#[test]
fn gpu_check_runs_end_to_end_on_a_two_gpu_twin() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A kit as launch/gpu-kit lays it out, with this build's binary and the machine's
    // own Open MPI (env.sh adds nothing), and no nccl-tests source.
    let kit = dir.path().join("kit");
    std::fs::create_dir_all(kit.join("bin")).unwrap();
    std::os::unix::fs::symlink(bin(), kit.join("bin/burnin")).unwrap();
    let train = Path::new(bin()).with_file_name("burnin-train");
    std::os::unix::fs::symlink(train, kit.join("bin/burnin-train")).unwrap();
    std::fs::copy(root.join("launch/gpu-check"), kit.join("gpu-check")).unwrap();
    std::fs::write(
        kit.join("env.sh"),
        "# the test's kit: the machine's Open MPI\n",
    )
    .unwrap();
    std::fs::write(
        kit.join("MANIFEST.txt"),
        "# burnin GPU kit (test)\nminimum glibc: 2.17\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let mut c = Command::new("bash");
    c.arg(kit.join("gpu-check"))
        // 1M a kind: the twin's host-built tensor-core product is n³ work per lane's
        // tile (n = 512 at 4M took 3-10 s a round on this 2-core VM), 1M is n = 256.
        // The twin computes on this machine's 2 cores, slower than a GPU and slower
        // again when other work shares them: every limit 3 times the plan's, and the
        // budget with it.
        .args([
            "--out",
            s(&out),
            "--budget",
            "720",
            "--limits-x",
            "3",
            "--burn",
            "2",
            "--sdc-bytes",
            "1M",
        ]);
    twin().env(&mut c, counts_dir());
    // The project venv's python: it has torch (CPU-only here: libtorch sees no CUDA).
    let venv = root.join(".venv/bin");
    c.env(
        "PATH",
        format!(
            "{}:{}",
            venv.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .env("TWIN_GPUS", "2")
    // one model, as a real machine's GPUs: the SDC step's four ranks vote together
    .env("TWIN_GPU_NAME", "NVIDIA H200")
    .env("TWIN_GPU_MEMORY_MIB", "256")
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .env("OMPI_MCA_btl", "self,vader,tcp")
    .env("OMPI_MCA_btl_tcp_if_include", "lo")
    .env("OMPI_MCA_oob_tcp_if_include", "lo");
    let r = run_bounded(c, Duration::from_secs(600));
    save("gpu-check", &r);
    let summary = json(&out.join("summary.json"));
    assert!(
        out.join("summary.md").is_file() && out.join("results.tar.gz").is_file(),
        "{}",
        r.all()
    );
    assert_eq!(summary["gpus"], 2, "{summary}");
    let status = |step: &str| -> (String, String) {
        let x = summary["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["step"] == step)
            .unwrap_or_else(|| panic!("no step {step}: {summary}"));
        (
            x["status"].as_str().unwrap().into(),
            x["note"].as_str().unwrap_or("").into(),
        )
    };
    for step in [
        "preflight",
        "evidence",
        "probe",
        "smoke",
        "sdc",
        "nccl-correctness",
        "nccl-perf",
    ] {
        assert_eq!(
            status(step).0,
            "pass",
            "{step}: {:?}\n{}",
            status(step),
            r.all()
        );
    }
    // SDC: four ranks on the two GPUs agree, every first fma round equals the host's,
    // and the flipped bit is named exactly.
    let sdc = &summary["sdc"];
    assert_eq!(sdc["healthy"]["findings_total"], 0, "{sdc}");
    assert!(sdc["healthy"]["rounds"].as_u64().unwrap() >= 3, "{sdc}");
    assert_eq!(
        sdc["healthy"]["ranks"].as_array().unwrap().len(),
        4,
        "{sdc}"
    );
    assert!(
        sdc["healthy"]["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["host_check"] == true),
        "{sdc}"
    );
    let f = &sdc["fault"]["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(3), Some("gemm"), Some(5)),
        "{sdc}"
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains(
            "kinds fma, gemm, memory, reduce; first round agrees with the host on 4 of 4 ranks"
        ) && md.contains("flipped bit (rank 1, round 3, gemm, block 5) named exactly"),
        "{md}"
    );
    assert!(
        status("preflight")
            .1
            .contains("libtorch sees no CUDA device"),
        "{:?}",
        status("preflight")
    );
    for step in ["copy-bandwidth", "train-resume-parity", "chaos"] {
        let (st, note) = status(step);
        assert_eq!(st, "fail", "{step}");
        assert!(
            note.contains("libtorch sees no CUDA device"),
            "{step}: {note}"
        );
    }
    for step in ["nccl-tests-build", "nccl-tests"] {
        let (st, note) = status(step);
        assert_eq!(st, "skip", "{step}");
        assert!(
            note.contains("no all_reduce_perf on PATH and no nccl-tests source"),
            "{step}: {note}"
        );
    }
    assert_eq!(summary["nccl_correctness"]["wrong"], 0, "{summary}");
    assert!(
        summary["nccl_correctness"]["points"].as_u64().unwrap() > 600,
        "{summary}"
    );
    assert_eq!(summary["nccl_perf"]["checked_wrong"], 0, "{summary}");
    // up to a quarter of the twin GPU's 256 MiB
    assert_eq!(
        summary["nccl_perf"]["largest"]["all_reduce"]["bytes"],
        64 << 20,
        "{summary}"
    );
    assert_eq!(summary["probe"]["gpu"][0], "NVIDIA H200", "{summary}");
    assert_eq!(
        summary["outcome"], "fail",
        "the libtorch steps cannot pass on the twin"
    );
}

#[test]
fn tiers_on_two_simulated_nodes_run_over_nccl_with_p2p_inside_and_sockets_between() {
    let _s = Scenario;
    const SIM: SimCluster = SimCluster {
        prefix: "bg-",
        subnet: "10.81.0",
    };
    let _down = require!(SIM.up(&[]));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiers");
    // 4 ranks fill node0 and node1: 2 twin GPUs each.
    let mut c = SIM.cmd(&[
        "exec",
        "--np",
        "4",
        "--",
        bin(),
        "sweep",
        "--backend",
        "nccl",
        "--tiers",
        "all",
        "-b",
        "64K",
        "-e",
        "256K",
        "-n",
        "2",
        "-w",
        "1",
        "--placement",
        "out",
        "--out",
        s(&out),
        // the twin's times are no measurement: judge no group against its peers
        "--outlier-fraction",
        "0.000001",
    ]);
    twin().env(&mut c, counts_dir());
    c.env("TWIN_GPUS", "2");
    let r = run_bounded(c, Duration::from_secs(180));
    save("sim-tiers", &r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = json(&out.join("run.json"));
    let tiers: Vec<&str> = run["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tier"].as_str().unwrap())
        .collect();
    for t in ["intra", "inter", "rails", "world"] {
        assert!(tiers.contains(&t), "tier {t}: {tiers:?}");
    }
    assert_eq!(run["wrong_total"], 0);
    // Every tier's own line, from its own communicators: NCCL numbers the ranks of a
    // sub-communicator from 0, and only burnin's map from them to world ranks puts
    // each on its node (rail 1 is world ranks 1 and 3: its rank 1 is on node1).
    let tiers = run["transport"]["tiers"].as_array().unwrap();
    let line = |name: &str, key: &str| -> Option<String> {
        let t = tiers
            .iter()
            .find(|t| t["tier"] == name)
            .unwrap_or_else(|| panic!("tier {name}: {}", run["transport"]));
        t[key].as_str().map(str::to_string)
    };
    let (p2p, net) = ("P2P/CUMEM", "NET/Socket");
    for (name, intra_node, inter_node) in [
        ("intra", Some(p2p), None),
        ("inter", None, Some(net)),
        ("rails", None, Some(net)),
        ("world", Some(p2p), Some(net)),
    ] {
        let (i, x) = (line(name, "intra_node"), line(name, "inter_node"));
        for (got, want, other) in [(&i, intra_node, net), (&x, inter_node, p2p)] {
            match want {
                Some(w) => assert!(
                    got.as_deref()
                        .is_some_and(|g| g.starts_with(w) && !g.contains(other)),
                    "{name}: {got:?}, want {w}: {}",
                    run["transport"]
                ),
                None => assert_eq!(got, &None, "{name}: {}", run["transport"]),
            }
        }
    }
    // (two nodes make one node pair: the pairs tier would be the world's group)
    assert_eq!(tiers.len(), 4, "{}", run["transport"]);
    assert!(r.stdout.contains("intra-node: P2P/CUMEM"), "{}", r.all());
}

/// `burnin gpu` on a four-GPU twin (one node, four ranks) with a short burn and small
/// copies, its gpu.json in `dir`.
fn gpu_health(name: &str, dir: &Path, env: &[(&str, &str)]) -> (Run, Value) {
    let mut all_env = vec![("TWIN_GPUS", "4")];
    all_env.extend_from_slice(env);
    let r = on_twin(
        name,
        4,
        &[
            "gpu",
            "--burn",
            "2s",
            "--copy-bytes",
            "1M",
            "--peer-bytes",
            "1M",
            "--reps",
            "3",
            "--out",
            s(dir),
        ],
        &all_env,
        Duration::from_secs(120),
    );
    let j = json(&dir.join("gpu.json"));
    (r, j)
}

/// The verdict line of the criterion whose text starts with `what`.
fn verdict_of<'a>(r: &'a Run, what: &str) -> &'a str {
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("gpu ") && l.contains(what))
        .unwrap_or_else(|| panic!("no criterion '{what}': {}", r.all()));
    ["PASS", "FAIL", "NOT RUN"]
        .into_iter()
        .find(|v| line.trim_end().ends_with(v))
        .unwrap_or_else(|| panic!("no verdict in '{line}'"))
}

const WRONG: &str = "every copy verified and every burn result right";
const OUTLIER: &str = "no GPU pair's peer copy far below its node's median pair";

/// The detail line `burnin gpu` prints for criterion `id` ("# gpu.wrong FAIL: ...").
fn detail<'a>(r: &'a Run, id: &str) -> &'a str {
    let head = format!("# {id} FAIL: ");
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .unwrap_or_else(|| panic!("no '{head}' line: {}", r.all()))
}

#[test]
fn gpu_health_measures_copies_and_burn_and_names_a_slow_pair_and_a_wrong_gpu() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let healthy = dir.path().join("healthy");
    let (r, j) = gpu_health("gpu-healthy", &healthy, &[]);
    assert!(r.stdout.contains("H2D GB/s") && r.stdout.contains("memory GB/s"));
    // The twin's times are not measurements, but its peer copies take a modelled
    // 40 ms each: a healthy matrix has no outlier, and every criterion passes.
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(verdict_of(&r, WRONG), "PASS", "{}", r.all());
    assert_eq!(verdict_of(&r, OUTLIER), "PASS", "{}", r.all());
    assert!(!r.stdout.contains("FAIL"), "{}", r.all());
    let gpus = j["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4, "{j}");
    for g in gpus {
        for dir in ["h2d", "d2h", "d2d"] {
            let c = &g["copies"][dir];
            assert_eq!(c["bytes"], 1 << 20, "{dir}: {g}");
            assert_eq!(c["reps"], 3, "{dir}: {g}");
            assert_eq!(c["verified"], true, "{dir}: {g}");
            assert!(
                c["error"].is_null() && c["gbps"].as_f64().unwrap() > 0.0,
                "{g}"
            );
        }
        // Both directions at once, each verified; small copies timed both ways.
        let bi = &g["copies"]["bidir"];
        assert_eq!(
            (bi["reps"].clone(), bi["verified"].clone()),
            (3.into(), true.into()),
            "{g}"
        );
        let rate = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        assert!(
            bi["error"].is_null() && rate(bi, "h2d_gbps") > 0.0 && rate(bi, "d2h_gbps") > 0.0,
            "{g}"
        );
        let want = 2.0 / (1.0 / rate(bi, "h2d_gbps")).max(1.0 / rate(bi, "d2h_gbps"));
        assert!((rate(bi, "total_gbps") - want).abs() <= 1e-9 * want, "{g}");
        let sm = &g["copies"]["small"];
        assert_eq!(
            (sm["bytes"].clone(), sm["reps"].clone()),
            (8.into(), 200.into()),
            "{g}"
        );
        assert!(
            sm["error"].is_null() && rate(sm, "h2d_us") > 0.0 && rate(sm, "d2h_us") > 0.0,
            "{g}"
        );
        let b = &g["burn"];
        assert_eq!(b["kernel"], "fma-ptx", "{g}");
        assert!(b["error"].is_null(), "{g}");
        assert!(b["launches"].as_u64().unwrap() >= 2, "{g}");
        assert!(b["checked"].as_u64().unwrap() > 32, "{g}");
        assert_eq!(b["wrong"], 0, "{g}");
        // One wave: the twin's 132 SMs × the 8 blocks its occupancy query answers.
        assert_eq!(
            (b["sms"].clone(), b["blocks_per_sm"].clone()),
            (132.into(), 8.into()),
            "{g}"
        );
        assert_eq!(b["elements"], 132 * 8 * 256 * 4, "{g}");
        let f = |k: &str| b[k].as_f64().unwrap();
        let want = 2.0 * f("elements") * f("iters") * f("launches") / f("gpu_seconds") / 1e12;
        assert!((f("tflops") - want).abs() <= 1e-9 * want, "{want}: {g}");
        assert!(
            f("gpu_seconds") <= f("seconds") && f("seconds") >= 2.0,
            "{g}"
        );
    }
    let pairs = j["nodes"][0]["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 12, "{j}");
    for p in pairs {
        assert_eq!(p["peer_access"], true, "{p}");
        assert_eq!(p["copy"]["verified"], true, "{p}");
        // 1 MiB in the twin's modelled 40 ms: 0.0262 GB/s at most (bytes over the
        // events' time), less only by the host's lateness.
        let gbps = p["copy"]["gbps"].as_f64().unwrap();
        assert!(gbps <= 0.02622 && gbps > 0.015, "{p}");
    }
    let host = gpus[0]["host"].as_str().unwrap().to_string();

    // GPU1→GPU2 slow (three times the modelled 40 ms), GPU2→GPU0 without peer access.
    let slow = dir.path().join("slow");
    let env = [("TWIN_PEER_SLOW", "1>2"), ("TWIN_PEER_DENY", "2>0")];
    let (r, j) = gpu_health("gpu-slow-pair", &slow, &env);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(verdict_of(&r, OUTLIER), "FAIL", "{}", r.all());
    let d = detail(&r, "gpu.pair_outlier");
    // Named with its host.
    assert!(d.contains(&format!("{host} GPU1→GPU2 at 0.")), "{d}");
    let pairs = j["nodes"][0]["pairs"].as_array().unwrap();
    let rate = |p: &Value| p["copy"]["gbps"].as_f64().unwrap();
    let mut rates: Vec<f64> = pairs.iter().map(rate).collect();
    rates.sort_by(f64::total_cmp);
    let slowed = pairs
        .iter()
        .find(|p| p["src"] == 1 && p["dst"] == 2)
        .unwrap();
    // 120 ms against the others' modelled 40 ms
    assert!(rate(slowed) < 0.5 * rates[6], "{slowed} against {rates:?}");
    let denied = pairs
        .iter()
        .find(|p| p["src"] == 2 && p["dst"] == 0)
        .unwrap();
    assert_eq!(denied["peer_access"], false, "{denied}");
    assert_eq!(
        denied["copy"]["verified"], true,
        "measured without peer access"
    );
    assert_eq!(verdict_of(&r, WRONG), "PASS", "{}", r.all());

    // GPU 1's FMA kernel flips one bit of one element per launch.
    let wrong = dir.path().join("wrong");
    // (A JIT that fits 6 blocks an SM: the grid follows, still one wave.)
    let env = [("TWIN_FMA_WRONG", "1"), ("TWIN_OCCUPANCY", "6")];
    let (r, j) = gpu_health("gpu-fma-wrong", &wrong, &env);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(verdict_of(&r, WRONG), "FAIL", "{}", r.all());
    let d = detail(&r, "gpu.wrong");
    assert!(d.starts_with(&format!("{host} GPU 1 computed ")), "{d}");
    assert!(!d.contains(';'), "only GPU 1: {d}");
    let gpus = j["gpus"].as_array().unwrap();
    assert!(gpus[1]["burn"]["wrong"].as_u64().unwrap() >= 1, "{j}");
    assert!(gpus
        .iter()
        .filter(|g| g["gpu"] != 1)
        .all(|g| g["burn"]["wrong"] == 0));
    for g in gpus {
        assert_eq!(g["burn"]["blocks_per_sm"], 6, "{g}");
        assert_eq!(g["burn"]["elements"], 132 * 6 * 256 * 4, "{g}");
    }
    // The same element wrong in every launch (the last, then the middle one): the
    // first launch is checked element by element against the host, so a fault that
    // repeats itself is caught too (no later launch differs from the first).
    for at in ["last", "middle"] {
        let d = dir.path().join(format!("wrong-{at}"));
        let env = [("TWIN_FMA_WRONG", "2"), ("TWIN_FMA_WRONG_AT", at)];
        let (r, j) = gpu_health("gpu-fma-wrong-at", &d, &env);
        assert_eq!(r.code, Some(1), "{at}: {}", r.all());
        assert_eq!(verdict_of(&r, WRONG), "FAIL", "{at}: {}", r.all());
        assert_eq!(j["gpus"][2]["burn"]["wrong"], 1, "{at}: {j}");
    }
}

fn sweep_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "sweep",
        "--backend",
        "nccl",
        "--tiers",
        "world",
        "-n",
        "1",
        "-w",
        "0",
        "--no-transport",
    ];
    a.extend_from_slice(extra);
    a
}

/// The twin is as strict as NCCL: a call whose count, type, op or root differs
/// across ranks never completes, and burnin's watchdog names it while the twin's
/// record says what differed; two ranks on one GPU are refused at init; every
/// ncclConfig_t layout from 2.18 to the newest is accepted by a twin of that version
/// (which checks it against the real header's table) and a too-old NCCL is refused.
#[test]
fn mismatched_calls_hang_and_are_named_duplicate_gpus_and_old_nccl_are_refused() {
    let _s = Scenario;
    let cases = [
        (
            "1:count",
            "all_reduce",
            "rank 1 AllReduce count 1023 float32 sum root 0",
        ),
        (
            "0:dtype",
            "all_reduce",
            "rank 0 AllReduce count 1024 int32 sum root 0",
        ),
        (
            "1:op",
            "all_reduce",
            "rank 1 AllReduce count 1024 float32 max root 0",
        ),
        (
            "1:root",
            "broadcast",
            "rank 1 Broadcast count 1024 float32 sum root 1",
        ),
    ];
    for (what, coll, differs) in cases {
        let args = sweep_args(&[
            "-c",
            coll,
            "-b",
            "4K",
            "-e",
            "4K",
            "-T",
            "4",
            "--mismatch",
            what,
        ]);
        let r = on_twin("mismatch", 2, &args, &[], Duration::from_secs(60));
        assert_eq!(r.code, Some(2), "{what}: {}", r.all());
        assert!(
            r.stderr.contains("not complete within the 4 s deadline"),
            "{what}: {}",
            r.all()
        );
        assert!(
            r.stderr.contains("does not match across ranks:"),
            "{what}: {}",
            r.all()
        );
        assert!(r.stderr.contains(differs), "{what}: {differs}\n{}", r.all());
    }
    // Both ranks on GPU 0.
    let args = sweep_args(&["-b", "4K", "-e", "4K", "-T", "8"]);
    let r = on_twin(
        "duplicate-gpu",
        2,
        &args,
        &[("CUDA_VISIBLE_DEVICES", "0")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("ncclInvalidUsage")
            && r.stderr
                .contains("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device"),
        "{}",
        r.all()
    );
    // One release per ncclConfig_t layout (config-layouts.tsv), and one newer than
    // burnin knows (it claims the newest known layout).
    for v in [
        "2.18.1", "2.27.3", "2.28.3", "2.29.2", "2.30.3", "2.30.7", "2.31.2", "2.32.6", "2.40.1",
    ] {
        let r = on_twin(
            "nccl-version",
            2,
            &args,
            &[("TWIN_NCCL_VERSION", v)],
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(0), "NCCL {v}: {}", r.all());
        assert!(
            r.stdout.contains("Out of bounds values : 0 OK"),
            "NCCL {v}: {}",
            r.all()
        );
    }
    let r = on_twin(
        "nccl-too-old",
        2,
        &args,
        &[("TWIN_NCCL_VERSION", "2.13.4")],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("NCCL 2.13.4 at ")
            && r.stderr
                .contains("is too old: burnin needs NCCL 2.14.0 or newer"),
        "{}",
        r.all()
    );
}

/// Realistic rounding and faults anywhere: avg in f16/bf16 at 3, 5 and 7 ranks
/// passes burnin's check under the twin's NCCL-like rounding; broadcast and reduce
/// from a non-zero root are right; the sweep's corrupt hook at the last and the
/// middle element is found there.
#[test]
fn odd_rank_averages_non_zero_roots_and_faults_anywhere_are_checked() {
    let _s = Scenario;
    for n in [3, 5, 7] {
        let args = sweep_args(&[
            "-c",
            "all_reduce,reduce_scatter,reduce",
            "-d",
            "f16,bf16,f32",
            "-o",
            "avg,sum",
            "-b",
            "6720",
            "-e",
            "26880",
            "-f",
            "4",
        ]);
        let r = on_twin(
            "avg-odd",
            n,
            &args,
            &[("TWIN_GPUS", "8")],
            Duration::from_secs(240),
        );
        assert_eq!(r.code, Some(0), "{n} ranks: {}", r.all());
        assert!(
            r.stdout.contains("Out of bounds values : 0 OK"),
            "{n}: {}",
            r.all()
        );
    }
    let args = sweep_args(&[
        "-c",
        "broadcast,reduce",
        "-r",
        "2",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "8",
    ]);
    let r = on_twin(
        "root-2",
        3,
        &args,
        &[("TWIN_GPUS", "4")],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        r.stdout.contains("Out of bounds values : 0 OK"),
        "{}",
        r.all()
    );
    let rows: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 5)
        .collect();
    assert_eq!(rows.len(), 6, "two collectives x 3 sizes: {}", r.stdout);
    assert!(
        rows.iter().all(|f| f[4] == "2"),
        "root 2 in every row: {}",
        r.stdout
    );
    // 4 KiB of f32 = 1024 elements: the last is 1023, the middle 512.
    for (at, elem) in [("last", 1023), ("middle", 512)] {
        let args = sweep_args(&[
            "-b",
            "4K",
            "-e",
            "4K",
            "--corrupt-rank",
            "1",
            "--corrupt-at",
            at,
        ]);
        let r = on_twin("corrupt-at", 2, &args, &[], Duration::from_secs(60));
        assert_eq!(r.code, Some(1), "{at}: {}", r.all());
        let want = format!("WRONG: all_reduce 4KiB f32: rank 1 first at element {elem}");
        assert!(r.stdout.contains(&want), "{want}\n{}", r.all());
    }
}

/// Training over the twin's NCCL (a CPU model: gradients uploaded to the GPU per
/// bucket, all-reduced by NCCL, downloaded): the step's parts — compute, gradient
/// exchange (pack, all-reduce, host waits, unpack), optimizer — add up to the step
/// time, so no wait is lost between them.
#[test]
fn training_over_twin_nccl_accounts_for_the_whole_step() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t");
    let args = [
        "train",
        "--backend",
        "nccl",
        "--steps",
        "12",
        "--out",
        s(&out),
    ];
    let r = on_twin("train-exchange", 1, &args, &[], Duration::from_secs(180));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        r.stdout
            .contains("(CPU gradients uploaded to the GPU for NCCL)"),
        "{}",
        r.all()
    );
    let steps = std::fs::read_to_string(out.join("steps.jsonl")).unwrap();
    let mut gaps: Vec<f64> = Vec::new();
    for line in steps.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let f = |k: &str| v[k].as_f64().unwrap();
        assert!(f("comm_s") > f("allreduce_s"), "{v}");
        gaps.push(f("step_s") - (f("compute_s") + f("comm_s") + f("optimizer_s")));
    }
    assert_eq!(gaps.len(), 12, "{steps}");
    gaps.sort_by(f64::total_cmp);
    // What is left between the parts is a few clock reads (5 µs here).
    assert!(gaps[0] >= 0.0 && gaps[6] < 2e-4, "{gaps:?}");
}

/// Sum the call counts of every run of this test process, per library and entry point.
fn total_counts() -> std::collections::BTreeMap<(String, String), u64> {
    let mut total = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(counts_dir()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(lib) = name.split('.').next().filter(|_| name.ends_with(".counts")) else {
            continue;
        };
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if let [f, n] = w.as_slice() {
                *total.entry((lib.to_string(), f.to_string())).or_insert(0) +=
                    n.parse::<u64>().unwrap();
            }
        }
    }
    total
}

#[test]
fn zz_every_twin_entry_point_was_called_and_burnin_met_none_missing() {
    // The other tests of this file run alongside: wait for them (bounded).
    let t = Instant::now();
    let want = scenarios();
    assert!(want >= 18, "{want} scenarios counted");
    while FINISHED.load(Ordering::SeqCst) < want {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the twin scenarios did not finish"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let total = total_counts();
    let libs: Vec<&str> = ["cuda", "nccl", "nvml"].into();
    for lib in &libs {
        assert!(
            total.keys().any(|(l, _)| l == lib),
            "no counts from the {lib} twin: {total:?}"
        );
    }
    let never: Vec<String> = total
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|((l, f), _)| format!("{l}:{f}"))
        .collect();
    assert!(
        never.is_empty(),
        "twin entry points burnin never called: {never:?}"
    );
    // What burnin looked up and the twin lacks would show as one of these.
    let mut missing = Vec::new();
    for e in std::fs::read_dir(counts_dir().join("outputs"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap();
        for l in text.lines() {
            if l.contains("Missing symbol")
                || l.contains("FailedToLoadSymbol")
                || (l.contains("NCCL") && l.contains(" lacks "))
            {
                missing.push(format!("{}: {l}", e.file_name().to_string_lossy()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "functions burnin looked up that the twin lacks: {missing:?}"
    );
    eprintln!(
        "twin coverage: {} entry points, all called ({} calls)",
        total.len(),
        total.values().sum::<u64>()
    );
}

/// The twin reports what would race or fail on a GPU (tests/gpu-twin/races.c, one
/// rank): overlapping buffers other than in place, a receive over a send of the same
/// group, a buffer of another GPU; the exact in-place forms pass.
#[test]
fn overlapping_buffers_are_a_race_and_another_gpus_buffer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("races");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu-twin/races.c");
    let lib = &twin().lib;
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .args(["-l:libnccl.so.2", "-l:libcuda.so.1"])
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut c = Command::new(&exe);
    c.env("LD_LIBRARY_PATH", lib).env("TWIN_GPUS", "2");
    let r = run_bounded(c, Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let said = |name: &str| -> (i32, String) {
        let line = r
            .stdout
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name}: {}", r.all()));
        let mut f = line.splitn(3, ' ').skip(1);
        (
            f.next().unwrap().parse().unwrap(),
            f.next().unwrap().to_string(),
        )
    };
    // ncclInvalidUsage = 5, ncclInvalidArgument = 4
    let (rc, e) = said("allreduce-shifted");
    assert_eq!(rc, 5, "{e}");
    assert!(
        e.contains("burnin-twin: race: AllReduce send buffer")
            && e.contains("overlaps its receive buffer"),
        "{e}"
    );
    assert_eq!(said("allreduce-in-place").0, 0);
    assert_eq!(said("allgather-in-place").0, 0);
    let (rc, e) = said("allreduce-other-gpu");
    assert_eq!(rc, 4, "{e}");
    assert!(
        e.contains("AllReduce sendbuff allocated on device 1 mismatches with NCCL device 0"),
        "{e}"
    );
    assert_eq!(said("send").0, 0);
    let (rc, e) = said("recv-overlapping");
    assert_eq!(rc, 5, "{e}");
    assert!(
        e.contains("race: a receive buffer") && e.contains("overlaps a send buffer"),
        "{e}"
    );
    assert_eq!(said("recv-apart").0, 0);
    // As NCCL's group error: a call of the group failed, so ncclGroupEnd answers that
    // error and launches none of it; the next group is clean.
    let (rc, e) = said("group-end");
    assert_eq!(rc, 5, "{e}");
    assert_eq!(said("send-again").0, 0);
    assert_eq!(said("recv-again").0, 0);
    assert_eq!(said("clean-group-end").0, 0);
}

/// `burnin gpu --model-floors` on twin GPUs: named an H200, a twin GPU is far below an
/// H200's published peaks (a GPU slowed on purpose, as the floors see it): FAIL, each
/// miss naming the floor, the peak and its source; named a model the floors table
/// lacks: NOT RUN, saying which models it has.
#[test]
fn model_floors_fail_a_slow_h200_naming_the_floor_and_its_source() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, model: &str| {
        let out = dir.path().join(name);
        let args = [
            "gpu",
            "--burn",
            "1s",
            "--copy-bytes",
            "64K",
            "--peer-bytes",
            "64K",
            "--reps",
            "2",
            "--model-floors",
            "--out",
            s(&out),
        ];
        on_twin(
            name,
            2,
            &args,
            &[("TWIN_GPUS", "2"), ("TWIN_GPU_NAME", model)],
            Duration::from_secs(180),
        )
    };
    const FLOORS: &str = "every GPU of a known model at its floors";
    let r = run("floors-h200", "NVIDIA H200");
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(verdict_of(&r, FLOORS), "FAIL", "{}", r.all());
    let d = detail(&r, "gpu.model_floors");
    assert!(
        d.contains("device memory ")
            && d.contains(" below its floor 3120.0 GB/s (0.65 × the peak 4800 GB/s: H200 SXM, ")
            && d.contains("https://www.nvidia.com/en-us/data-center/h200/"),
        "{d}"
    );
    let r = run("floors-unknown", "NVIDIA Twin 9000");
    assert_eq!(verdict_of(&r, FLOORS), "NOT RUN", "{}", r.all());
    assert!(
        r.stdout.contains(
            "no floors for NVIDIA Twin 9000 (cards/floors/gpu-floors.toml has H100 NVL, "
        ),
        "{}",
        r.all()
    );
}

/// `burnin gpu --memtest` on a twin GPU of 96 MiB: a healthy GPU passes with at least
/// 90% of its free memory tested; with one bit of one word stuck at 1 (the twin's
/// fault, at an address inside the tested region) the criterion fails naming that
/// address and bit, and gpu.json holds the failure.
#[test]
fn memtest_covers_the_free_memory_and_names_a_stuck_bit_by_address() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, env: &[(&str, &str)]| {
        let out = dir.path().join(name);
        let args = [
            "gpu",
            "--burn",
            "0.2s",
            "--copy-bytes",
            "64K",
            "--peer-bytes",
            "64K",
            "--reps",
            "1",
            "--memtest",
            "0.1s",
            "--out",
            s(&out),
        ];
        let mut all = vec![("TWIN_GPUS", "1"), ("TWIN_GPU_MEMORY_MIB", "96")];
        all.extend_from_slice(env);
        let r = on_twin(name, 1, &args, &all, Duration::from_secs(180));
        (r, json(&out.join("gpu.json")))
    };
    const MEMTEST: &str = "device memory test";
    let (r, j) = run("memtest-healthy", &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(verdict_of(&r, MEMTEST), "PASS", "{}", r.all());
    let m = &j["gpus"][0]["memtest"];
    let free = m["free_bytes"].as_u64().unwrap();
    let tested = m["tested_bytes"].as_u64().unwrap();
    assert!(free > 90 << 20 && tested * 10 >= free * 9, "{m}");
    assert!(
        m["passes"].as_u64().unwrap() >= 1 && m["gbps"].as_f64().unwrap() > 0.0,
        "{m}"
    );
    assert_eq!(m["failing_words"], 0, "{m}");
    assert_eq!(
        m["patterns"],
        serde_json::json!(["address", "walking one", "random"])
    );
    // The same run again lays its buffers out the same way: plant the stuck bit in
    // the middle of the tested region.
    let region = m["regions"][0]["address"].as_str().unwrap();
    let base = u64::from_str_radix(region.trim_start_matches("0x"), 16).unwrap();
    let bad = base + (tested / 2) / 8 * 8;
    let fault = format!("{bad:x}:13:1");
    let (r, j) = run("memtest-stuck", &[("TWIN_HBM_STUCK", fault.as_str())]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(verdict_of(&r, MEMTEST), "FAIL", "{}", r.all());
    let d = detail(&r, "gpu.memtest");
    assert!(
        d.contains("failing 8-byte word(s); first at ")
            && d.contains(&format!("{bad:#x} bit(s) [13]")),
        "{d}"
    );
    let m = &j["gpus"][0]["memtest"];
    // Bit 13 stuck at 1 fails wherever a stage expects a 0 there: the walking one
    // (bit 13 is not its bit in that word), the inverse of an address with bit 13
    // set, and random data half the time.
    assert!(m["failing_words"].as_u64().unwrap() >= 2, "{m}");
    let f = &m["failures"][0];
    assert_eq!(f["address"], format!("{bad:#x}").as_str(), "{m}");
    assert_eq!(f["bits"], serde_json::json!([13]), "{m}");
    let (want, read) = (f["expected"].as_str().unwrap(), f["read"].as_str().unwrap());
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(hex(want) ^ hex(read), 1 << 13, "{f}");
    assert_eq!(hex(read) >> 13 & 1, 1, "{f}");
}

/// `burnin gpu --sdc` on twin GPUs: healthy ranks agree over 1,000 rounds; a GPU whose
/// FMA unit is wrong (the twin's fault, in the "hardware") is named with its kind and
/// block from the first round; a bit flipped in one rank's output at a given round,
/// kind and block is named exactly that, on 8 ranks; with two of three GPUs wrong in
/// different ways there is no majority, and every GPU is named.
#[test]
fn sdc_vote_names_the_gpu_kind_round_and_block_that_disagree() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let sdc = |name: &str, np: usize, rounds: &str, extra: &[&str], env: &[(&str, &str)]| {
        let out = dir.path().join(name);
        let n = np.to_string();
        let mut all_env = vec![("TWIN_GPUS", n.as_str()), ("TWIN_GPU_NAME", "NVIDIA H200")];
        all_env.extend_from_slice(env);
        let mut args = vec![
            "gpu",
            "--burn",
            "1s",
            "--copy-bytes",
            "64K",
            // Peer copies large enough, and repeated, to time steadily on a busy
            // host: the healthy run's exit code includes the pair-outlier criterion.
            "--peer-bytes",
            "1M",
            "--reps",
            "3",
            "--sdc",
            "300s",
            "--sdc-rounds",
            rounds,
            "--sdc-bytes",
            "4K",
            "--out",
            s(&out),
        ];
        args.extend_from_slice(extra);
        let r = on_twin(name, np, &args, &all_env, Duration::from_secs(240));
        let j = json(&out.join("gpu.json"));
        (r, j["sdc"].clone())
    };
    // Healthy, 4 GPUs, 1,000 rounds: not one disagreement, and the phase passes.
    let (r, j) = sdc("sdc-healthy", 4, "1000", &[], &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(
        (j["rounds"].as_u64(), j["findings_total"].as_u64()),
        (Some(1000), Some(0)),
        "{j}"
    );
    assert_eq!(
        j["ranks"][3]["kinds"],
        serde_json::json!(["fma", "memory", "gemm", "reduce"]),
        "{j}"
    );
    assert_eq!(j["ranks"][2]["model"], "NVIDIA H200", "{j}");
    // Each GPU's first round equals the host's bit for bit: the fma chains, the f64
    // sums, and the product (the twin runs the host build of the mma kernel, whose
    // warp stand-in is a chain of FMAs in k order: the host's plain reference).
    for rank in j["ranks"].as_array().unwrap() {
        assert_eq!(rank["host_check"], true, "{j}");
        assert_eq!(
            rank["host_checks"],
            serde_json::json!([
                "fma: equal to the host bit for bit",
                "gemm: equal to the host bit for bit",
                "reduce: equal to the host bit for bit"
            ]),
            "{j}"
        );
    }
    assert_eq!(
        verdict_of(&r, "no rank's output disagrees"),
        "PASS",
        "{}",
        r.all()
    );

    // The twin's GPU 1 flips the lowest bit of its middle FMA element in every launch:
    // named in round 0, fma, block 8 (the middle of 16), majority of 4.
    let env = [("TWIN_FMA_WRONG", "1"), ("TWIN_FMA_WRONG_AT", "middle")];
    let (r, j) = sdc("sdc-fma-wrong", 4, "20", &[], &env);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let f = &j["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(0), Some("fma"), Some(8)),
        "{j}"
    );
    assert_eq!(
        (f["ranks"].clone(), f["majority"].clone()),
        (serde_json::json!([1]), serde_json::json!(true)),
        "{j}"
    );
    assert_eq!(j["findings_total"], 20, "every round: {j}");
    assert_eq!(j["ranks"][1]["disagreements"], 20, "{j}");
    assert!(
        r.stdout.contains("round 0 fma block 8: ") && r.stdout.contains(" GPU 1 (rank 1, PCI "),
        "{}",
        r.all()
    );
    assert_eq!(
        verdict_of(&r, "no rank's output disagrees"),
        "FAIL",
        "{}",
        r.all()
    );
    assert_eq!(j["ranks"][1]["host_check"], false, "{j}");
    assert_eq!(j["ranks"][0]["host_check"], true, "{j}");
    let d = detail(&r, "gpu.sdc");
    assert!(
        d.contains("GPU 1 (rank 1, PCI ") && d.contains("differs from the host's chains"),
        "{d}"
    );

    // GPU 1 lost at its third tensor-core product (round 2): its later rounds do not
    // vote (no host stand-in votes for it: no made-up "gemm SDC", no PASS); the
    // criterion fails naming the GPU, how it failed and the rounds it missed.
    let (r, j) = sdc("sdc-gpu-lost", 4, "8", &[], &[("TWIN_LAUNCH_FAIL", "1:3")]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(j["findings_total"], 0, "{j}");
    assert_eq!(j["ranks"][1]["rounds_lost"], 6, "{j}");
    let lost = j["ranks"][1]["gpu_lost"].as_str().unwrap_or_default();
    assert!(lost.contains("rank 1 round 2 gemm"), "{j}");
    assert_eq!(j["ranks"][0]["rounds_lost"], 0, "{j}");
    assert_eq!(
        verdict_of(&r, "no rank's output disagrees"),
        "FAIL",
        "{}",
        r.all()
    );
    let d = detail(&r, "gpu.sdc");
    assert!(
        d.contains("GPU 1 (rank 1, PCI ")
            && d.contains("its GPU failed")
            && d.contains("did not vote in 6 round(s)"),
        "{d}"
    );

    // A bit of rank 2's tensor-core product at round 4, block 3: named exactly.
    let (r, j) = sdc("sdc-gemm", 4, "8", &["--sdc-fault", "2:4:gemm:3"], &[]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let f = &j["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(4), Some("gemm"), Some(3)),
        "{j}"
    );
    assert_eq!(
        (f["ranks"].clone(), j["findings_total"].as_u64()),
        (serde_json::json!([2]), Some(1)),
        "{j}"
    );

    // GPUs older than Ampere (the twin as compute capability 7.5) cannot run the
    // tensor-core product: they vote with fma and memory, and say why.
    let (r, j) = sdc("sdc-turing", 2, "5", &[], &[("TWIN_CC", "75")]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(
        j["ranks"][1]["kinds"],
        serde_json::json!(["fma", "memory"]),
        "{j}"
    );
    let notes = j["ranks"][1]["host_checks"].to_string();
    assert!(
        notes.contains("gemm, reduce: not run (GPU 1 is compute capability 7.5: the tensor-core product needs 8.0 or newer)"),
        "{notes}"
    );

    // 8 GPUs, one bit of rank 5's memory output at round 700, block 11: only that.
    let (r, j) = sdc("sdc-8", 8, "1000", &["--sdc-fault", "5:700:memory:11"], &[]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(
        (j["rounds"].as_u64(), j["findings_total"].as_u64()),
        (Some(1000), Some(1)),
        "{j}"
    );
    let f = &j["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(700), Some("memory"), Some(11)),
        "{j}"
    );
    assert_eq!(
        (f["ranks"].clone(), f["voters"].as_u64()),
        (serde_json::json!([5]), Some(8)),
        "{j}"
    );

    // Three GPUs, two wrong differently in round 0 (burnin's flip on rank 0, the
    // twin's on GPU 1): no majority, all three named; later rounds name GPU 1 alone.
    let (r, j) = sdc(
        "sdc-no-majority",
        3,
        "3",
        &["--sdc-fault", "0:0:fma:8"],
        &env,
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    let f = &j["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["majority"].as_bool()),
        (Some(0), Some(false)),
        "{j}"
    );
    assert_eq!(f["ranks"], serde_json::json!([0, 1, 2]), "{j}");
    assert!(
        r.stdout.contains("disagree, no majority among 3 "),
        "{}",
        r.all()
    );
    let later: Vec<&Value> = j["findings"].as_array().unwrap()[1..].iter().collect();
    assert_eq!(later.len(), 2, "{j}");
    assert!(
        later
            .iter()
            .all(|f| f["ranks"] == serde_json::json!([1]) && f["majority"] == true),
        "{j}"
    );
}

/// `burnin replay` through the NCCL backend on twin GPUs (and a send/recv exchange as
/// one NCCL group, each message checked): an NCCL COLL trace of a
/// 2-GPU tensor-parallel step (bf16 all_gather and reduce_scatter, a scalar f32
/// all_reduce launched in one group with a 16 KiB one, as NCCL 2.21 writes the lines)
/// replays with the twin's collectives, every result checked, bf16 kept as bf16 (NCCL
/// has it), the group as one ncclGroupStart/ncclGroupEnd.
#[test]
fn replay_of_an_nccl_trace_runs_through_the_nccl_backend() {
    let _s = Scenario;
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    for g in 0..2usize {
        let pre = format!("hopper01:{}:{} [{g}]", 191_369 + g, 191_420 + g);
        log += &format!("{pre} NCCL INFO comm 0x55e29{g} rank {g} nranks 2 cudaDev {g} nvmlDev {g} busId {g}b000 commId 0x5eed - Init COMPLETE\n");
        for step in 0..4u64 {
            for (i, name, count, dt) in [
                (0, "AllGather", 2_097_152, 9),
                (1, "ReduceScatter", 2_097_152, 9),
                (2, "AllReduce", 1, 7),
                (2, "AllReduce", 4096, 7),
            ] {
                log += &format!("{pre} NCCL INFO {name}: opCount {:x} sendbuff 0x7fdf57c00000 recvbuff 0x7fdf61a00000 count {count} datatype {dt} op 0 root 0 comm 0x55e29{g} [nranks=2] stream 0x55e29067e430\n", step * 3 + i);
            }
            // A pipeline's exchange: each rank sends the other 128 KiB of bf16 and
            // receives as much (one group on each side).
            let order = if g == 0 {
                ["Send", "Recv"]
            } else {
                ["Recv", "Send"]
            };
            for name in order {
                log += &format!("{pre} NCCL INFO {name}: opCount {step:x} sendbuff 0x7fdf57c00000 recvbuff 0x7fdf61a00000 count 65536 datatype 9 op 0 root {} comm 0x55e29{g} [nranks=2] stream 0x55e29067e430\n", 1 - g);
            }
        }
    }
    let trace = dir.path().join("tp.log");
    std::fs::write(&trace, log).unwrap();
    let out = dir.path().join("out");
    let r = on_twin(
        "replay-nccl",
        2,
        &[
            "--backend",
            "nccl",
            "replay",
            "--trace",
            s(&trace),
            "--steps",
            "3",
            "--out",
            s(&out),
        ],
        &[("TWIN_GPUS", "2")],
        Duration::from_secs(240),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = json(&out.join("replay.json"));
    assert!(j["backend"].as_str().unwrap().starts_with("nccl"), "{j}");
    assert_eq!(j["calls_per_step"], serde_json::json!([6, 6]), "{j}");
    let grouped = j["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["group_of"] == 2)
        .unwrap_or_else(|| panic!("the group of two all_reduces: {j}"));
    assert_eq!(
        (grouped["collective"].as_str(), grouped["bytes"].as_u64()),
        (Some("all_reduce"), Some(4 + 4096 * 4)),
        "{grouped}"
    );
    assert!(
        j["notes"]
            .to_string()
            .contains("one ncclGroupStart/ncclGroupEnd each"),
        "{j}"
    );
    let group = j["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["collective"] == "sendrecv")
        .unwrap_or_else(|| panic!("the send/recv group: {j}"));
    assert_eq!(group["bytes"], 128 << 10, "{group}");
    assert_eq!(j["wrong"], 0, "{j}");
    let ag = j["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["collective"] == "all_gather")
        .unwrap();
    assert_eq!(
        (ag["bytes"].as_u64(), ag["dtype"].as_str()),
        (Some(8 << 20), Some("bf16")),
        "{ag}"
    );
    assert!(!j["notes"].to_string().contains("as u8"), "{j}");
}
