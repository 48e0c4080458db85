//! `burnin sweep --find-slow` on the simulated cluster (network namespaces, tc-shaped
//! veths, real mpirun): the bisection search names the node shaped down, on 4 nodes
//! (pairs at once) and on 6 (halves, then pairs in the slow half); it names the link
//! when only the traffic between two healthy nodes is shaped (`--shape-pair`, an htb
//! class on each node's egress), on 4 nodes (pairs at once) and on 6 (a link on the
//! cut between the halves, found through the cut hops); and it finds nothing on a
//! healthy cluster. Needs root and network namespaces; where they are refused the
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

/// Nodes, the sim-cluster flag and its value, then the slow nodes and links expected.
type Case = (
    usize,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [[&'static str; 2]],
);

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn bisection_names_the_shaped_node_or_link_on_4_and_6_nodes_and_nothing_when_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [Case; 4] = [
        (4, "--shape", "node2=400mbit", &["node2"], &[]),
        (6, "--shape", "node4=400mbit", &["node4"], &[]),
        (
            4,
            "--shape-pair",
            "node1+node2=400mbit",
            &[],
            &[["node1", "node2"]],
        ),
        // On the cut between the halves: both halves are fast, the job is slow, so
        // the cut hops are the suspects. (A link inside a half is not always on the
        // half's path: OpenMPI's 3-rank all_reduce left both halves at 0.088 GB/s with
        // node4<->node5 shaped. The pairs tier is the tool for such a link.)
        (
            6,
            "--shape-pair",
            "node2+node3=400mbit",
            &[],
            &[["node2", "node3"]],
        ),
    ];
    for (nodes, flag, shape, slow_nodes, slow_links) in cases {
        let Some(_down) = SIM.up_sized(nodes, 1, &["--rate", "2gbit", flag, shape]) else {
            return;
        };
        let out = dir.path().join(format!("slow{nodes}-{}", &flag[2..]));
        let r = find_slow(&out);
        assert!(!r.timed_out, "{}", r.all());
        assert_eq!(r.code, Some(1), "{shape}: {}", r.all());
        let line = match (slow_nodes, slow_links) {
            ([n], []) => format!("# find-slow: slow node {n}: every pair that includes it is slow"),
            ([], [[a, b]]) => {
                format!("# find-slow: slow link {a}<->{b}: slow together, fast with other partners")
            }
            _ => unreachable!(),
        };
        assert!(r.stdout.contains(&line), "{shape}: {}", r.stdout);
        let run = run_json(&out);
        let f = &run["find_slow"];
        assert_eq!(f["slow_nodes"], serde_json::json!(slow_nodes), "{f}");
        assert_eq!(f["slow_links"], serde_json::json!(slow_links), "{f}");
        assert_eq!(f["unresolved"], serde_json::json!([]), "{f}");
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
            // Round 1, the halves: the one with the slow node is slow, and the search
            // goes into it; a link on the cut leaves both fast.
            let r1: Vec<&serde_json::Value> = path.iter().filter(|s| s["round"] == 1).collect();
            assert_eq!(r1.len(), 2);
            assert_eq!(r1[0]["slow"], false, "{f}");
            assert_eq!(r1[1]["slow"], slow_links.is_empty(), "{f}");
        }
    }
    // Healthy: nothing named, PASS.
    let Some(_down) = SIM.up_sized(6, 1, &["--rate", "2gbit"]) else {
        return;
    };
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
