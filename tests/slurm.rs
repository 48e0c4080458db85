//! launch/slurm.sbatch under a real Slurm: Debian's slurmctld, slurmd and munge started
//! by launch/sim-slurm on the simulated cluster (4 nodes x 2 ranks, 2 Gbit/s links),
//! the script submitted with `sbatch --wait`, every phase a job step under srun with
//! PMIx. A healthy cluster passes the whole sim card; with node2's link shaped to a
//! quarter, a sweep card fails naming node2. Everything is torn down by guards, even
//! when an assertion fails.
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SIM: SimCluster = SimCluster {
    prefix: "bu-",
    subnet: "10.86.0",
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `launch/sim-slurm ARGS…` for `prefix`, from the repository root.
fn sim_slurm(prefix: &str, args: &[&str]) -> Command {
    let mut c = Command::new(root().join("launch/sim-slurm"));
    c.args(args)
        .env("BURNIN_SIM_PREFIX", prefix)
        .current_dir(root());
    c
}

/// Stops the cluster's Slurm when dropped (before the cluster itself goes: declare
/// it after the cluster's guard).
struct SlurmDown;

impl Drop for SlurmDown {
    fn drop(&mut self) {
        let _ = run_bounded(sim_slurm(SIM.prefix, &["down"]), Duration::from_secs(60));
    }
}

/// Processes whose command line names this cluster's Slurm state (the daemons are
/// started with its config and key there).
fn slurm_processes() -> Vec<String> {
    let want = format!("/run/burnin-sim/{}slurm", SIM.prefix);
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(&want) {
            found.push(format!("{name}: {cmd}"));
        }
    }
    found
}

/// `sbatch --wait launch/slurm.sbatch` on the head, 4 nodes x 2 tasks, with CARD,
/// OUT and this build's burnin; the job's output file is returned with the run.
fn submit(card: &Path, out: &Path, limit: Duration) -> (Run, String) {
    let log = out.with_extension("out");
    let mut c = sim_slurm(
        SIM.prefix,
        &[
            "exec",
            "--",
            "sbatch",
            "--wait",
            "--nodes=4",
            "--ntasks-per-node=2",
            "--cpus-per-task=1",
            "--output",
            log.to_str().unwrap(),
            "launch/slurm.sbatch",
        ],
    );
    c.env("CARD", card).env("OUT", out).env("BURNIN", bin());
    let r = run_bounded(c, limit);
    let job = std::fs::read_to_string(&log).unwrap_or_default();
    (r, job)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

// One test, in sequence: the cluster and its Slurm are one resource of this machine.
#[test]
fn an_acceptance_through_slurm_passes_when_healthy_and_fails_naming_a_slow_node() {
    let t0 = Instant::now();
    let _down = require!(SIM.up(&["--rate", "2gbit"]));
    let r = run_bounded(sim_slurm(SIM.prefix, &["up"]), Duration::from_secs(120));
    let _slurm = SlurmDown;
    assert_eq!(r.code, Some(0), "sim-slurm up: {}", r.all());
    eprintln!(
        "cluster and Slurm up in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let r = run_bounded(
        sim_slurm(
            SIM.prefix,
            &["exec", "--", "sinfo", "-h", "-N", "-o", "%N %t %c"],
        ),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let nodes: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        nodes,
        [
            "node0 idle 2",
            "node1 idle 2",
            "node2 idle 2",
            "node3 idle 2"
        ],
        "{}",
        r.all()
    );
    // `up` again changes nothing
    let r = run_bounded(sim_slurm(SIM.prefix, &["up"]), Duration::from_secs(60));
    assert!(r.stdout.contains("already up"), "{}", r.all());

    // Results where every node sees them: not /tmp, which each node has of its own.
    let dir = tempfile::Builder::new()
        .prefix("slurm-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();

    // 1. Healthy, the whole sim card: PASS, exit 0.
    let t = Instant::now();
    let healthy = dir.path().join("healthy");
    let (r, job) = submit(
        &root().join("cards/sim-4node.toml"),
        &healthy,
        Duration::from_secs(900),
    );
    eprintln!(
        "healthy acceptance through Slurm: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(!r.timed_out, "{}\n--- job\n{job}", r.all());
    assert_eq!(r.code, Some(0), "{}\n--- job\n{job}", r.all());
    assert_no_panic(&r);
    // no GPU on the simulated nodes: said in one line, ranks = tasks per node
    assert_eq!(
        job.lines().filter(|l| l.contains("no GPU count")).count(),
        1,
        "{job}"
    );
    assert!(job.contains("4 node(s) x 2 rank(s)"), "{job}");
    assert!(job.contains("# verdict: PASS"), "{job}");
    assert!(job.contains("verdict: exit 0"), "{job}");
    for node in ["node0", "node1", "node2", "node3"] {
        assert!(
            healthy.join("evidence").join(node).is_dir(),
            "evidence of {node}"
        );
    }
    assert!(healthy.join("report.md").is_file() && healthy.join("report.html").is_file());
    let acc = read_json(&healthy.join("acceptance.json"));
    assert_eq!(acc["outcome"], "pass", "{acc}");
    let launch: Vec<&str> = acc["launch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(launch[0], "srun", "{launch:?}");
    for want in ["--mpi=pmix", "--ntasks=8", "--ntasks-per-node=2"] {
        assert!(launch.contains(&want), "{want} in {launch:?}");
    }
    for job_name in [
        "probe",
        "gpu",
        "sweep",
        "replay",
        "train",
        "train-part",
        "train-resume",
        "chaos",
    ] {
        let j = acc["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == job_name)
            .unwrap_or_else(|| panic!("job {job_name}: {acc}"));
        assert_eq!(j["status"], "passed", "{job_name}: {j}");
    }
    let criteria = acc["criteria"].as_array().unwrap();
    let passed = criteria.iter().filter(|c| c["status"] == "pass").count();
    assert!(passed >= 15, "{passed} criteria passed: {acc}");
    for c in criteria {
        let ok = c["status"] == "pass" || (c["status"] == "not_run" && c["phase"] == "gpu");
        assert!(ok, "{c}");
    }
    for id in [
        "probe.nodes",
        "probe.ranks_per_node",
        "sweep.no_outlier",
        "train.resume_parity",
        "chaos.no_hang",
        "gpu.sdc",
        "replay.zero_wrong",
    ] {
        let c = criteria
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("criterion {id}: {acc}"));
        assert_eq!(c["status"], "pass", "{c}");
    }
    // The SDC vote ran on the 8 CPU ranks (the card's [gpu] sdc_s); the criteria
    // only a GPU can answer are NOT RUN, each with its reason.
    let sdc = criteria.iter().find(|c| c["id"] == "gpu.sdc").unwrap();
    let m = sdc["measured"].as_str().unwrap_or_default();
    assert!(
        m.starts_with("0 disagreement(s) in ")
            && m.contains(" of 8 voting rank(s); CPU ranks only"),
        "{sdc}"
    );
    let gpu_only: Vec<&Value> = criteria
        .iter()
        .filter(|c| c["phase"] == "gpu" && c["id"] != "gpu.sdc")
        .collect();
    assert!(!gpu_only.is_empty(), "{acc}");
    for c in gpu_only {
        assert_eq!(c["status"], "not_run", "{c}");
        assert!(
            c["detail"].as_str().is_some_and(|d| d.contains("GPU")),
            "{c}"
        );
    }

    // 2. node2's link at a quarter of the others': the sweep names it, exit 1.
    let r = run_bounded(
        SIM.cmd(&["shape", "node2=500mbit"]),
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let t = Instant::now();
    let shaped = dir.path().join("shaped");
    let (r, job) = submit(
        &root().join("tests/fixtures/cards/sim-sweep.toml"),
        &shaped,
        Duration::from_secs(400),
    );
    eprintln!(
        "shaped sweep through Slurm: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(!r.timed_out, "{}\n--- job\n{job}", r.all());
    assert_eq!(r.code, Some(1), "{}\n--- job\n{job}", r.all());
    let row = job
        .lines()
        .find(|l| l.contains("no slow node or link"))
        .unwrap_or_else(|| panic!("{job}"));
    let md = std::fs::read_to_string(shaped.join("report.md")).unwrap_or_default();
    assert!(
        row.contains("outlier: node2") && row.trim_end().ends_with("FAIL"),
        "{row}\n--- report.md\n{md}"
    );
    assert!(job.contains("# verdict: FAIL"), "{job}");
    assert!(job.contains("verdict: exit 1"), "{job}");
    assert!(md.contains("suspect node2's link"), "{md}");
    let acc = read_json(&shaped.join("acceptance.json"));
    assert_eq!(acc["outcome"], "fail");

    // 3. down stops every daemon it started, and is idempotent.
    let t = Instant::now();
    let r = run_bounded(sim_slurm(SIM.prefix, &["down"]), Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("stopped"), "{}", r.all());
    assert_eq!(slurm_processes(), Vec::<String>::new());
    let r = run_bounded(sim_slurm(SIM.prefix, &["down"]), Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("nothing to do"), "{}", r.all());
    eprintln!(
        "Slurm down in {:.1} s; whole test {:.1} s",
        t.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn sim_slurm_refuses_bad_input_in_one_line() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip!("launch/sim-slurm needs root");
    }
    // a prefix with no cluster: nothing is started
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["up", "--cpus", "x"],
            2,
            "--cpus must be a whole number >= 1",
        ),
        (&["up"], 2, "no simulated cluster 'bv-' is up"),
        (
            &["exec", "--", "true"],
            2,
            "no simulated cluster 'bv-' is up",
        ),
        (&["frob"], 2, "unknown command 'frob'"),
        (&["status"], 1, "Slurm is not up on 'bv-'"),
    ];
    for (args, code, want) in cases {
        let r = run_bounded(sim_slurm("bv-", args), Duration::from_secs(30));
        assert_eq!(r.code, Some(code), "{args:?}: {}", r.all());
        let all = r.all();
        let lines: Vec<&str> = all.lines().filter(|l| l.contains("sim-slurm")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {all}");
        assert!(lines[0].contains(want), "{args:?}: {}", lines[0]);
    }
    let r = run_bounded(sim_slurm("bv-", &["down"]), Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("nothing to do"), "{}", r.all());
}
