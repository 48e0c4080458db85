//! `burnin sweep --find-slow` on the simulated cluster (network namespaces, tc-shaped
//! veths, real mpirun): the bisection search names the node shaped down, on 4 nodes
//! (pairs at once) and on 6 (halves, then pairs in the slow half), and finds nothing
//! on a healthy cluster. Needs root and network namespaces; where they are refused the
//! test says so and returns (CI runs as root).
mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

const SIM: SimCluster = SimCluster {
    prefix: "bf-",
    subnet: "10.82.0",
};

fn find_slow(out: &Path) -> Run {
    let b = bin();
    let args = [
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
        "--tiers",
        "world",
        "--find-slow",
        "--budget",
        "0.3",
        "-w",
        "1",
        "--placement",
        "out",
        "--no-transport",
        "--out",
        out.to_str().unwrap(),
    ];
    run_bounded(SIM.cmd(&args), Duration::from_secs(300))
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).expect("run.json")).expect("json")
}

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn bisection_names_the_shaped_node_on_4_and_6_nodes_and_nothing_when_healthy() {
    let dir = tempfile::tempdir().unwrap();
    for (nodes, slow) in [(4usize, "node2"), (6, "node4")] {
        let shape = format!("{slow}=400mbit");
        let Some(_down) = SIM.up_sized(nodes, 1, &["--rate", "2gbit", "--shape", &shape]) else {
            return;
        };
        let out = dir.path().join(format!("slow{nodes}"));
        let r = find_slow(&out);
        assert!(!r.timed_out, "{}", r.all());
        assert_eq!(r.code, Some(1), "{}", r.all());
        let line = format!("# find-slow: slow node {slow}: every pair that includes it is slow");
        assert!(r.stdout.contains(&line), "{}", r.stdout);
        let run = run_json(&out);
        let f = &run["find_slow"];
        assert_eq!(f["slow_nodes"], serde_json::json!([slow]), "{f}");
        assert_eq!(f["slow_links"], serde_json::json!([]), "{f}");
        assert_eq!(f["pairs_tier_rounds"], nodes - 1 + nodes % 2);
        // 4 nodes: the 3 pair rounds; 6: the job, its halves, then 3 pair rounds.
        let rounds = if nodes == 4 { 3 } else { 5 };
        assert_eq!(f["rounds"], rounds, "{f}");
        let path = f["path"].as_array().unwrap();
        assert!(path.iter().all(|s| s["busbw_gbps"].as_f64().unwrap() > 0.0));
        let bisect_points = run["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["tier"] == "bisect")
            .count();
        assert_eq!(bisect_points, path.len(), "every group's point is recorded");
        assert_eq!(run["outcome"], "fail");
        if nodes == 6 {
            // The half without node4 was cleared in round 1; the search went into the other.
            let r1: Vec<&serde_json::Value> = path.iter().filter(|s| s["round"] == 1).collect();
            assert_eq!(r1.len(), 2);
            assert_eq!(r1[0]["slow"], false, "{f}");
            assert_eq!(r1[1]["slow"], true, "{f}");
            // Healthy: nothing named, PASS.
            assert!(SIM.start_sized(nodes, 1, &["--rate", "2gbit"]));
            let healthy = dir.path().join("healthy");
            let r = find_slow(&healthy);
            assert_eq!(r.code, Some(0), "{}", r.all());
            assert!(
                r.stdout.contains("# find-slow: no slow node or link"),
                "{}",
                r.stdout
            );
            assert_eq!(run_json(&healthy)["outcome"], "pass");
        }
    }
}
