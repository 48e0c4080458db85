//! `burnin chaos` end to end: the real binary supervising real jobs (mpirun, and the
//! simulated cluster of network namespaces), faults injected for real, recoveries
//! checked against an uninterrupted reference.
//!
//! Long tests are named `long_…` (minutes each, every one bounded); skip them with
//! `cargo test --release --test chaos -- --skip long_`. The simulated cluster needs
//! root and network namespaces; where they are refused the tests say so and use plain
//! `mpirun -np 4` instead, or are skipped (a failure under CI=true). Cluster: prefix `bc-`, subnet 10.79.0 (other
//! tests use other prefixes), always taken down at the end.
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

const SIM: SimCluster = SimCluster {
    prefix: "bc-",
    subnet: "10.79.0",
};

/// The tests of this file share 2 cores and one cluster: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const SIM_LAUNCH: &str = "launch/sim-cluster exec --";

/// Plain mpirun with 4 ranks on this host.
fn mpirun_launch() -> String {
    "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 --mca btl self,vader,tcp \
     --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
        .into()
}

/// `burnin chaos --launch L FLAGS --out OUT -- TRAIN`, bounded.
fn chaos(launch: &str, flags: &[&str], train: &[&str], out: &Path, limit: Duration) -> Run {
    let mut c = Command::new(bin());
    c.args(["chaos", "--launch", launch])
        .args(flags)
        .args(["--out", out.to_str().unwrap(), "--"])
        .args(train)
        .env("BURNIN_SIM_PREFIX", SIM.prefix)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .current_dir(root());
    let r = run_bounded(c, limit);
    eprintln!("{}", r.stdout);
    r
}

fn report(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("chaos.json")).expect("chaos.json"))
        .expect("chaos.json is JSON")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// No process is left inside the cluster's namespaces.
fn assert_namespaces_empty() {
    for ns in ["bc-br", "bc-node0", "bc-node1", "bc-node2", "bc-node3"] {
        let out = Command::new("ip").args(["netns", "pids", ns]).output();
        if let Ok(o) = out {
            let pids = String::from_utf8_lossy(&o.stdout).trim().to_string();
            assert!(pids.is_empty(), "processes left in {ns}: {pids}");
        }
    }
}

/// What every trial must show, whatever its kind.
fn assert_clean(rep: &Value, trials: usize) {
    let s = &rep["summary"];
    let all = serde_json::to_string_pretty(s).unwrap();
    assert_eq!(rep["schema_version"], 1);
    assert_eq!(s["trials"], trials, "{all}");
    assert_eq!(s["failed"], 0, "{all}");
    assert_eq!(s["hangs"], 0, "{all}");
    assert_eq!(s["parity_failures"], 0, "{all}");
    assert_eq!(s["not_torn_down"], 0, "nothing orphaned: {all}");
    assert_eq!(s["lost_checkpoints"], 0, "{all}");
    assert_eq!(rep["outcome"], "pass");
    for t in rep["trials"].as_array().unwrap() {
        assert_eq!(t["parity"]["weights_match"], true, "{t}");
        assert_eq!(t["parity"]["losses_match"], true, "{t}");
        let events: Vec<&str> = t["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["event"].as_str().unwrap())
            .collect();
        let want: &[&str] = if t["family"] == "slow" {
            &["inject", "straggler", "end"]
        } else {
            &[
                "inject",
                "detect",
                "teardown-done",
                "relaunch",
                "ranks-up",
                "restore",
                "first-step",
            ]
        };
        for w in want {
            assert!(events.contains(w), "timeline lacks {w}: {events:?}");
        }
        for m in t["timeline"].as_array().unwrap() {
            assert!(f(&m["unix"]) > 1.6e9, "unix timestamps: {m}");
        }
        if t["family"] != "link-cut" {
            // mpirun cleans up what it can reach (a cut node it cannot).
            let left = t["teardown"]["left_behind"].as_array().map(|a| a.len());
            assert_eq!(left.unwrap_or(0), 0, "the launcher left processes: {t}");
        }
        if t["family"] != "slow" {
            assert_eq!(t["teardown"]["tree_empty"], true, "{t}");
            assert_eq!(t["restored_step"], t["expected_restore_step"], "{t}");
            let lost = t["steps_lost"].as_u64().unwrap();
            let fault = t["fault_step"].as_u64().unwrap();
            assert_eq!(
                lost,
                fault - t["restored_step"].as_u64().unwrap_or(0),
                "{t}"
            );
        }
    }
}

#[test]
fn chaos_flags_are_checked_before_anything_runs() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c");
    let cases: [(&str, &[&str], &[&str], &str); 5] = [
        ("mpirun 'unbalanced", &[], &[], "--launch: cannot split"),
        (
            "mpirun -np 2",
            &[],
            &["--out", "x"],
            "--out is chosen by burnin chaos",
        ),
        (
            "mpirun -np 2",
            &["--fault", "link-cut:node1"],
            &[],
            "needs the simulated cluster",
        ),
        (
            "mpirun -np 2",
            &["--fault", "corrupt-ckpt"],
            &["--steps", "8", "--ckpt-every", "5"],
            "two checkpoints",
        ),
        (
            "mpirun -np 2",
            &["--fault", "kill,explode"],
            &[],
            "--fault: unknown fault 'explode'",
        ),
    ];
    for (launch, flags, train, want) in cases {
        let r = chaos(launch, flags, train, &out, Duration::from_secs(30));
        assert_eq!(r.code, Some(2), "{want}: {}", r.all());
        assert_no_panic(&r);
        let errors: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("Error"))
            .collect();
        assert_eq!(errors.len(), 1, "{}", r.all());
        assert!(errors[0].contains(want), "'{want}' in {}", errors[0]);
    }
    // A rank cannot cut its own link.
    let r = mpirun(
        2,
        &["train", "--fault", "link-cut:node1", "--ckpt-every", "0"],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("burnin chaos --fault link-cut:node1"),
        "{}",
        r.all()
    );
}

#[test]
fn kill_and_hang_under_plain_mpirun_recover_with_parity_and_name_the_hung_rank() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c");
    let prom = dir.path().join("chaos.prom");
    let r = chaos(
        &mpirun_launch(),
        &[
            "--metrics-file",
            prom.to_str().unwrap(),
            "--fault",
            "kill,hang",
            "--kind-order",
            "cycle",
            "--trials",
            "2",
            "--seed",
            "5",
            "--gpu-hour-usd",
            "3",
        ],
        &["--steps", "24", "--ckpt-every", "4", "--log-every", "0"],
        &out,
        Duration::from_secs(240),
    );
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    let rep = report(&out);
    assert_clean(&rep, 2);
    let lines = std::fs::read_to_string(out.join("trials.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2);
    let hang = &rep["trials"][1];
    assert_eq!(hang["family"], "hang");
    assert!(f(&hang["times"]["detect_s"]) <= 10.0, "{hang}");
    let victim = hang["victim_ranks"][0].as_u64().unwrap();
    let stall = hang["stall"].as_str().unwrap();
    assert!(
        stall.contains(&format!("rank {victim} (")) && stall.contains("hung"),
        "the hung rank and its host are named: {stall}"
    );
    assert!(f(&hang["cost_usd"]) > 0.0, "{hang}");
    assert!(
        r.stdout.contains("recovery s"),
        "summary table:\n{}",
        r.stdout
    );
    // The supervisor's metrics file: one trial of each fault, both recovered, no
    // hang, and the latest recovery time of each fault as chaos.json has it.
    let fams = &prom_parse(&[prom])[0];
    let mut trials: Vec<(String, String, f64)> = prom_samples(fams, "burnin_chaos_trials_total")
        .iter()
        .map(|x| {
            let l = &x["labels"];
            let label = |k: &str| l[k].as_str().unwrap().to_string();
            (
                label("fault"),
                label("outcome"),
                x["value"].as_f64().unwrap(),
            )
        })
        .collect();
    trials.sort_by(|a, b| a.0.cmp(&b.0));
    let fault = |t: &Value| t["fault"].as_str().unwrap().to_string();
    let mut want: Vec<(String, String, f64)> = rep["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (fault(t), t["outcome"].as_str().unwrap().to_string(), 1.0))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(trials, want, "{fams:?}");
    assert_eq!(prom_value(fams, "burnin_chaos_recoveries_total"), 2.0);
    assert_eq!(prom_value(fams, "burnin_chaos_hangs_total"), 0.0);
    for t in rep["trials"].as_array().unwrap() {
        let g: Vec<f64> = prom_samples(fams, "burnin_chaos_recovery_seconds")
            .iter()
            .filter(|x| x["labels"]["fault"] == t["fault"])
            .map(|x| x["value"].as_f64().unwrap())
            .collect();
        assert_eq!(g, vec![f(&t["times"]["total_recovery_s"])], "{t}");
    }
}

#[test]
fn long_sim_cluster_kill_four_trials_recover_fast_with_parity() {
    let _s = serial();
    let cluster = SIM.up(&[]);
    let launch = match &cluster {
        Some(_) => SIM_LAUNCH.to_string(),
        None => {
            eprintln!("falling back to plain mpirun -np 4");
            mpirun_launch()
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c");
    let r = chaos(
        &launch,
        &[
            "--fault",
            "kill",
            "--fault-rank",
            "random",
            "--fault-step",
            "random",
            "--trials",
            "4",
            "--seed",
            "2024",
        ],
        &["--steps", "30", "--ckpt-every", "5", "--log-every", "0"],
        &out,
        Duration::from_secs(600),
    );
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    let rep = report(&out);
    assert_clean(&rep, 4);
    let s = &rep["summary"];
    assert_eq!(s["recovered"], 4);
    let detect = f(&s["all"]["detect_s"]["median"]);
    let total = f(&s["all"]["total_recovery_s"]["median"]);
    eprintln!("kill x4: detection median {detect:.3} s, recovery median {total:.2} s");
    assert!(detect <= 1.0, "detection median {detect} s");
    assert!(total <= 15.0, "recovery median {total} s");
    let ranks = if cluster.is_some() { 8 } else { 4 };
    for t in rep["trials"].as_array().unwrap() {
        assert_eq!(t["clock_offsets"].as_array().unwrap().len(), ranks, "{t}");
    }
    if cluster.is_some() {
        assert_namespaces_empty();
    }
}

#[test]
fn long_sim_cluster_seven_trials_one_of_every_kind() {
    let _s = serial();
    let _cluster = require!(SIM.up(&[]));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c");
    let r = chaos(
        SIM_LAUNCH,
        &[
            "--fault",
            "kill,exit,hang,slow,corrupt-ckpt,node-loss:node1,link-cut:node2",
            "--kind-order",
            "cycle",
            "--trials",
            "7",
            "--seed",
            "11",
        ],
        &["--steps", "24", "--ckpt-every", "4", "--log-every", "0"],
        &out,
        Duration::from_secs(600),
    );
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    let rep = report(&out);
    assert_clean(&rep, 7);
    // one of every kind, each recovered (or, slow, completed) with parity (the
    // 21-trial soak, three of each, is `launch/chaos-soak`: minutes, not a test)
    for family in [
        "kill",
        "exit",
        "hang",
        "slow",
        "corrupt-ckpt",
        "node-loss",
        "link-cut",
    ] {
        let n = rep["trials"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["family"] == family)
            .count();
        assert_eq!(n, 1, "{family}");
    }
    let trial = |family: &str| -> Value {
        rep["trials"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["family"] == family)
            .unwrap_or_else(|| panic!("a {family} trial"))
            .clone()
    };
    // hang: named, with its host, within the default deadline.
    let t = trial("hang");
    let victim = t["victim_ranks"][0].as_u64().unwrap();
    let host = t["victim_hosts"][0].as_str().unwrap();
    let stall = t["stall"].as_str().unwrap();
    assert!(f(&t["times"]["detect_s"]) <= 10.0, "{t}");
    assert!(
        stall.contains(&format!("rank {victim} ({host})"))
            && stall.contains("alive but not progressing"),
        "{stall}"
    );
    // link-cut: ends within its deadline, naming the cut node's ranks.
    let t = trial("link-cut");
    assert!(f(&t["times"]["detect_s"]) <= 10.0, "{t}");
    let stall = t["stall"].as_str().unwrap();
    assert!(
        stall.contains("ranks 4, 5 (every rank of node2)"),
        "{stall}"
    );
    // slow: a straggler, with its factor, and the run completes.
    let t = trial("slow");
    assert_eq!(t["outcome"], "completed");
    assert_eq!(t["straggler"]["rank"], t["victim_ranks"][0], "{t}");
    // The fault makes the victim's steps 3x as long; what names it is its compute
    // against the others', the sleep included: (c + 2 x step) / c, above 3 whenever
    // a step has communication (5.6x-11.6x here), never below the detector's 2.
    let factor = f(&t["straggler"]["factor"]);
    assert!((2.0..50.0).contains(&factor), "factor {factor}: {t}");
    // corrupt-ckpt: recovers from the previous good checkpoint, and says so.
    let t = trial("corrupt-ckpt");
    let skipped = t["skipped_checkpoints"][0].as_str().unwrap_or("");
    assert!(skipped.contains("does not match its sha256"), "{t}");
    assert!(
        t["restored_step"].as_u64().unwrap() + 4 <= t["fault_step"].as_u64().unwrap(),
        "{t}"
    );
    // node-loss: both ranks of node1 die at once.
    let t = trial("node-loss");
    assert_eq!(t["victim_ranks"], serde_json::json!([2, 3]), "{t}");
    assert_namespaces_empty();
}
