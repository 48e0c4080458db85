//! Tiers on the simulated cluster (network namespaces, shaped veths, real mpirun):
//! a node shaped down is named, an unshaped cluster passes, a cut link ends the run.
//! Needs root and network namespaces; where they are refused the tests say so and
//! return (CI runs as root).
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIM: SimCluster = SimCluster {
    prefix: "bt-",
    subnet: "10.78.0",
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn sweep(out: &Path, limit: Duration) -> Run {
    let b = bin();
    let o = out.to_str().unwrap();
    let topo = root().join("topologies/sim-4node.toml");
    let args = [
        "exec",
        "--",
        b,
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce,all_gather",
        // three sizes: the judgement is at the largest, the tiers' curves need a few
        "-b",
        "1M",
        "-e",
        "16M",
        "-f",
        "4",
        "--tiers",
        "all",
        "--topology",
        topo.to_str().unwrap(),
        "--budget",
        "0.3",
        "-w",
        "1",
        "--placement",
        "out",
        "--out",
        o,
    ];
    run_bounded(SIM.cmd(&args), limit)
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).expect("run.json")).expect("json")
}

/// Tier median busbw for a collective.
fn tier_median(run: &serde_json::Value, tier: &str, coll: &str) -> f64 {
    run["analysis"]["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tier"] == tier && t["collective"] == coll)
        .unwrap_or_else(|| panic!("tier {tier} {coll}"))["median_gbps"]
        .as_f64()
        .unwrap()
}

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn simulated_cluster_names_the_slow_node_passes_when_healthy_and_survives_a_cut() {
    let _down = require!(SIM.up(&["--rate", "2gbit", "--shape", "node3=500mbit"]));
    let dir = tempfile::tempdir().unwrap();

    // 1. node3 shaped to a quarter of the others: named, and the run fails.
    let shaped = dir.path().join("shaped");
    let r = sweep(&shaped, Duration::from_secs(420));
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stdout
            .contains("node3: every pair that includes it runs at"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("suspect node3's link"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("# nodes: node0 ranks [0, 1]; node1 ranks [2, 3]"),
        "{}",
        r.stdout
    );
    let run = run_json(&shaped);
    assert_eq!(
        run["analysis"]["outlier_nodes"],
        serde_json::json!(["node3"])
    );
    assert_eq!(run["outcome"], "fail");
    let fails: Vec<&serde_json::Value> = run["analysis"]["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["meets_expectation"] == false)
        .collect();
    assert!(!fails.is_empty(), "a tier missed its expectation");
    let intra = tier_median(&run, "intra", "all_reduce");
    let inter = tier_median(&run, "inter", "all_reduce");
    assert!(
        intra > 3.0 * inter,
        "shared memory ({intra}) far faster than the network ({inter})"
    );
    assert_eq!(
        run["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["wrong"].as_u64())
            .sum::<u64>(),
        0
    );

    // 2. The same cluster without the shaping: no outlier, every tier meets it: PASS.
    assert!(SIM.start(&["--rate", "2gbit"]));
    let healthy = dir.path().join("healthy");
    let r = sweep(&healthy, Duration::from_secs(420));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("no outlier node or link"), "{}", r.stdout);
    let run = run_json(&healthy);
    assert_eq!(run["analysis"]["outlier_nodes"], serde_json::json!([]));
    assert_eq!(run["outcome"], "pass");
    //    Which MPI transport carried each tier: shared memory inside a node, tcp on the
    //    simulated interface between nodes.
    let tier = |name: &str| -> serde_json::Value {
        run["transport"]["tiers"]
            .as_array()
            .unwrap_or_else(|| panic!("transport tiers: {}", run["transport"]))
            .iter()
            .find(|t| t["tier"] == name)
            .unwrap_or_else(|| panic!("tier {name}: {}", run["transport"]))
            .clone()
    };
    //    Every tier's own line, from its own groups (world ranks placed on their
    //    nodes): intra has no inter-node pair; inter (first ranks), each rail (local
    //    rank k of every node) and each node pair (one rank a node) no intra-node
    //    pair; world both.
    let (shm, tcp) = ("shared memory (vader)", "tcp over eth0");
    for (name, intra_node, inter_node) in [
        ("intra", Some(shm), None),
        ("inter", None, Some(tcp)),
        ("rails", None, Some(tcp)),
        ("pairs", None, Some(tcp)),
        ("world", Some(shm), Some(tcp)),
    ] {
        let t = tier(name);
        assert_eq!(t["intra_node"].as_str(), intra_node, "{name}: {t}");
        assert_eq!(t["inter_node"].as_str(), inter_node, "{name}: {t}");
    }
    assert_eq!(
        run["transport"]["tiers"].as_array().unwrap().len(),
        5,
        "{}",
        run["transport"]
    );
    assert!(
        r.stdout
            .contains("intra-node: shared memory (vader); inter-node: tcp over eth0"),
        "{}",
        r.stdout
    );

    //    Probe on the same cluster: four nodes, each with its veth "NIC" up, as the
    //    topology file declares.
    let topo = root().join("topologies/sim-4node.toml");
    let r = run_bounded(
        SIM.cmd(&[
            "exec",
            "--",
            bin(),
            "probe",
            "--topology",
            topo.to_str().unwrap(),
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        r.stdout
            .contains("# topology sim-4node: the nodes match it"),
        "{}",
        r.stdout
    );
    for n in 0..4 {
        assert!(r.stdout.contains(&format!("# node{n}: ")), "{}", r.stdout);
    }
    assert_eq!(
        r.stdout.matches("#   eth0 veth up").count(),
        4,
        "{}",
        r.stdout
    );

    // 3. Cut node2's link in the middle of a sweep: the job ends within its deadline,
    //    and the output names node2 (mpirun's lost daemon) next to burnin's node map.
    let cut = dir.path().join("cut");
    let b = bin();
    let o = cut.to_str().unwrap();
    let mut c = SIM.cmd(&[
        "exec",
        "--",
        b,
        "-T",
        "10",
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "100000",
        "--tiers",
        "world",
        "--out",
        o,
    ]);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let start = Instant::now();
    let child = std::thread::spawn(move || run_bounded(c, Duration::from_secs(90)));
    std::thread::sleep(Duration::from_secs(4));
    let cut_at = Instant::now();
    let r = run_bounded(SIM.cmd(&["cut", "node2"]), Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let r = child.join().unwrap();
    let ended = cut_at.elapsed();
    let _ = run_bounded(SIM.cmd(&["heal", "node2"]), Duration::from_secs(30));
    assert!(!r.timed_out, "the cut run hung:\n{}", r.all());
    assert_ne!(r.code, Some(0), "{}", r.all());
    assert!(
        ended < Duration::from_secs(30),
        "ended {ended:?} after the cut ({:?} in all)",
        start.elapsed()
    );
    assert!(r.all().contains("node2"), "names node2:\n{}", r.all());
    assert!(r.stdout.contains("node2 ranks [4, 5]"), "{}", r.stdout);
}
