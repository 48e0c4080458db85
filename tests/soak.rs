//! `burnin sweep --duration` on the simulated cluster (network namespaces, tc-shaped
//! veths, real mpirun): a healthy 40-second soak passes; in a second one, the
//! `[soak]` phase of a card under `burnin run`, the test lowers node2's link rate
//! half-way (`sim-cluster shape`), and the drift criterion fails naming node2 and
//! when it began. Needs root and network namespaces; where they
//! are refused the test is skipped, saying why (a failure under CI=true).
mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SIM: SimCluster = SimCluster {
    prefix: "bk-",
    subnet: "10.83.0",
};

/// Long enough for a dozen passes, a quarter of them at each end (the drift compares
/// those), with the link slowed half-way.
const SOAK_S: u64 = 40;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn soak_cmd(out: &Path) -> std::process::Command {
    let b = bin();
    let d = format!("{SOAK_S}s");
    SIM.cmd(&[
        "exec",
        "--",
        b,
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "4M",
        "-e",
        "4M",
        "-n",
        "5",
        "-w",
        "1",
        "--placement",
        "out",
        "--tiers",
        "world,pairs",
        "--duration",
        &d,
        "--max-drift",
        "0.7",
        // The pair rounds differ by up to ~1.5x on this simulated star (the first
        // pass alone shows it): the soak's drift, not the pairs' outlier rule, is
        // what this test is about.
        "--outlier-fraction",
        "0.5",
        "--no-transport",
        "--out",
        out.to_str().unwrap(),
    ])
}

/// A card of one phase, the soak, on this test's cluster: one size, the same tiers.
const SOAK_CARD: &str = r#"name = "soak"
launch = "launch/sim-cluster exec --"
backend = "mpi"
step_timeout_s = 60
[soak]
duration_s = 40
bytes = "4M"
tiers = ["world", "pairs"]
iters = 5
args = ["-w", "1", "--placement", "out", "--outlier-fraction", "0.5", "--no-transport"]
[soak.criteria]
max_drift = 0.7
max_pass_cv = 5.0
"#;

fn soak_run(card: &Path, out: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(bin());
    c.args(["run", "--card", card.to_str().unwrap()])
        .args(["--out", out.to_str().unwrap()])
        .env("BURNIN_SIM_PREFIX", SIM.prefix)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).expect("run.json")).expect("json")
}

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn a_healthy_soak_passes_and_a_link_slowed_half_way_fails_on_drift_naming_its_node() {
    let _down = require!(SIM.up_sized(4, 1, &["--rate", "2gbit"]));
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(SOAK_S + 120);

    let healthy = dir.path().join("healthy");
    let t = Instant::now();
    let r = run_bounded(soak_cmd(&healthy), limit);
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        t.elapsed() < Duration::from_secs(SOAK_S + 60),
        "{:?}",
        t.elapsed()
    );
    let run = run_json(&healthy);
    let s = &run["soak"];
    assert_eq!(s["pass"], true, "{s}");
    let passes = s["passes"].as_u64().unwrap();
    assert!(passes >= 4, "{s}");
    assert!(
        s["elapsed_s"].as_f64().unwrap() <= (SOAK_S + 30) as f64,
        "{s}"
    );
    // world + the 6 pairs, each one series at the largest size.
    assert_eq!(s["series"].as_array().unwrap().len(), 7, "{s}");
    for x in s["series"].as_array().unwrap() {
        assert_eq!(x["busbw_gbps"].as_array().unwrap().len() as u64, passes);
    }
    let pts = jsonl(&healthy.join("points.jsonl"));
    assert_eq!(
        pts.iter().map(|p| p["pass"].as_u64().unwrap()).max(),
        Some(passes - 1),
        "every pass streamed with its number"
    );
    assert!(pts.iter().all(|p| p["unix"].as_f64().unwrap() > 1.0e9));
    assert!(r.stdout.contains("# soak: PASS"), "{}", r.stdout);

    // The card's soak; half-way, node2's link drops from 2 to 0.4 Gbit/s.
    let card = dir.path().join("soak.toml");
    std::fs::write(&card, SOAK_CARD).unwrap();
    let slowed = dir.path().join("slowed");
    let cmd = soak_run(&card, &slowed);
    let soak = std::thread::spawn(move || run_bounded(cmd, limit));
    std::thread::sleep(Duration::from_secs(SOAK_S / 2));
    let shaped_at = unix_now();
    let sh = run_bounded(
        SIM.cmd(&["shape", "node2=400mbit"]),
        Duration::from_secs(30),
    );
    assert_eq!(sh.code, Some(0), "{}", sh.all());
    let r = soak.join().unwrap();
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("# verdict: FAIL"), "{}", r.stdout);
    let slowed = dir.path().join("slowed");
    let acc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(slowed.join("acceptance.json")).unwrap()).unwrap();
    let verdict = |id: &str| {
        acc["criteria"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id}: {acc}"))
            .clone()
    };
    assert_eq!(verdict("soak.complete")["status"], "pass", "{acc}");
    assert_eq!(verdict("soak.zero_wrong")["status"], "pass", "{acc}");
    assert_eq!(verdict("soak.pass_cv")["status"], "pass", "{acc}");
    let drift = verdict("soak.drift");
    assert_eq!(drift["status"], "fail", "{drift}");
    let why = drift["detail"].as_str().unwrap();
    assert!(why.ends_with("; suspect: node2"), "{why}");
    let run = run_json(&slowed.join("soak"));
    let s = &run["soak"];
    // "... the drop began N s into the soak": N counts from the soak's first point,
    // and is when the test lowered the rate, give or take the pass then running
    // (the soak starts a few seconds after `burnin run`, which the test cannot see).
    let began: f64 = why
        .split("the drop began ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{why}"));
    let t0 = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["unix"][0].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert!(t0.is_finite(), "{s}");
    let shaped_into = shaped_at - t0;
    assert!(
        began > 0.0 && began > shaped_into - 16.0 && began < shaped_into + 31.0,
        "{why}; the rate lowered {shaped_into:.1} s into the soak"
    );
    assert_eq!(s["pass"], false);
    assert_eq!(s["suspects"], serde_json::json!(["node2"]), "{s}");
    let drifted: Vec<&serde_json::Value> = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["drifted"] == true)
        .collect();
    assert!(drifted.len() >= 3, "the pairs with node2 at least: {s}");
    for x in &drifted {
        let hosts = x["hosts"].as_array().unwrap();
        assert!(hosts.iter().any(|h| h == "node2"), "{x}");
        let began = x["began_unix"].as_f64().unwrap();
        // A pass running when the rate changed may already read slow.
        assert!(
            began > shaped_at - 15.0 && began < shaped_at + 30.0,
            "{began} vs {shaped_at}: {x}"
        );
    }
    // burnin report renders the soak: the table, the suspect, a timeline per tier.
    let rep = run_bounded(
        {
            let mut c = std::process::Command::new(bin());
            c.args(["report", slowed.to_str().unwrap()]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(rep.code, Some(0), "{}", rep.all());
    let md = std::fs::read_to_string(slowed.join("report.md")).unwrap();
    assert!(md.contains("## Soak"), "{md}");
    assert!(
        md.contains("Suspect: node2 (in every drifting group)."),
        "{md}"
    );
    let html = std::fs::read_to_string(slowed.join("report.html")).unwrap();
    for tier in ["world", "pairs"] {
        let title = format!("busbw over the soak: tier {tier}");
        assert!(html.contains(&title), "no chart '{title}'");
    }
    // The pairs without node2 kept their rate.
    for x in s["series"].as_array().unwrap() {
        let hosts = x["hosts"].as_array().unwrap();
        if !hosts.iter().any(|h| h == "node2") {
            assert_eq!(x["drifted"], false, "{x}");
        }
    }
}
