//! `burnin sweep --find-slow` on the simulated cluster (network namespaces, tc-shaped
//! veths, real mpirun): 8 nodes at 1 Gbit/s. The search's alltoall rounds cross every
//! pair of nodes they clear, so a link slowed between two healthy nodes
//! (`launch/sim-cluster shape-pair`, an htb class on each node's egress) is named
//! wherever the two sit: a seeded sample of pairs, among them pairs that a ring or
//! recursive-doubling all_reduce never joins directly (node1+node6 and the like), each
//! named in at most 2·log2(8)+2 rounds; a node slowed is named as a node; the healthy
//! cluster is cleared with every one of its 28 pairs exercised. On 4 nodes (every pair
//! at once) the same. Needs root and network namespaces; where they are refused the
//! test is skipped, saying why (a failure under CI=true).
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
        // On 2 cores the simulated links' rates follow the CPU: under a CPU hog (two
        // busy loops, the flake hunt) healthy pairs spread from 0.40x to 1.0x of the
        // best pair (0.044 to 0.111 GB/s in one run, where the best was measured in a
        // quieter moment), so no fraction near the default 0.8 (for fabrics whose rates
        // do not follow the host's CPU) can tell them from a fault. The faults here
        // are shaped to read about 0.05x (a link at 50 Mbit/s of 1 Gbit/s) and 0.1x (a
        // node at 100 Mbit/s), and judged at 0.25x: a factor of 2.5 on each side.
        "--outlier-fraction",
        "0.25",
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

fn sim(args: &[&str]) {
    let r = run_bounded(SIM.cmd(args), Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "sim-cluster {args:?}: {}", r.all());
}

/// The sample of pairs: node1+node6 (never ring neighbours, never recursive-doubling
/// partners: 1 xor 6 = 7), then pairs drawn from all 28 with a fixed seed.
fn sample(n: usize, want: usize) -> Vec<(usize, usize)> {
    let mut out = vec![(1, 6)];
    let mut x: u64 = 0x5eed_b0a7;
    while out.len() < want {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let a = (x >> 33) as usize % n;
        let b = (x >> 13) as usize % n;
        let p = (a.min(b), a.max(b));
        if a != b && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// One run: exit 1 naming `line`, the finding in run.json, within `max_rounds`.
fn expect_named(out: &Path, line: &str, nodes: &[&str], links: &[[String; 2]], max_rounds: u64) {
    let r = find_slow(out);
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(1), "{line}: {}", r.all());
    assert!(r.stdout.contains(line), "{line}: {}", r.stdout);
    let run = run_json(out);
    let f = &run["find_slow"];
    assert_eq!(f["slow_nodes"], serde_json::json!(nodes), "{f}");
    assert_eq!(f["slow_links"], serde_json::json!(links), "{f}");
    assert_eq!(f["unresolved"], serde_json::json!([]), "{f}");
    let rounds = f["rounds"].as_u64().unwrap();
    assert!(rounds <= max_rounds, "{line}: {rounds} rounds: {f}");
    let path = f["path"].as_array().unwrap();
    assert!(path.iter().all(|s| s["busbw_gbps"].as_f64().unwrap() > 0.0));
    // Every round's groups were alltoalls, and every group's points are recorded: one,
    // and up to two more for a group first measured below its threshold (measured
    // again before the search heard of it).
    let bisect: Vec<&serde_json::Value> = run["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["tier"] == "bisect")
        .collect();
    let mut per_group = std::collections::BTreeMap::new();
    for p in &bisect {
        *per_group.entry(p["group"].as_u64().unwrap()).or_insert(0) += 1;
    }
    assert_eq!(
        per_group.len(),
        path.len(),
        "every group's point is recorded"
    );
    for (g, n) in &per_group {
        assert!((1..=3).contains(n), "group {g} measured {n} times: {f}");
    }
    assert!(
        per_group.values().any(|&n| n == 3),
        "what is named was measured three times: {per_group:?}"
    );
    assert!(
        bisect.iter().all(|p| p["collective"] == "alltoall"),
        "{bisect:?}"
    );
    assert_eq!(run["outcome"], "fail");
    // The verdict counts the pairs: cleared, explained by the finding, or not seen.
    assert!(
        r.stdout.contains("of 28 node pairs cleared"),
        "{}",
        r.stdout
    );
}

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn alltoall_rounds_name_a_slow_link_between_any_two_of_8_nodes_a_slow_node_and_clear_all_28_pairs_when_healthy(
) {
    let dir = tempfile::tempdir().unwrap();
    let _down = require!(SIM.up_sized(8, 1, &["--rate", "1gbit"]));
    // Healthy first: every pair exercised and cleared, PASS.
    let healthy = dir.path().join("healthy");
    let r = find_slow(&healthy);
    assert_eq!(r.code, Some(0), "{}", r.all());
    // 4 rounds, or 5 when a group fast in its own round read slow against a later
    // round's bar and ran once more (topology::bisect `recheck`)
    let clean = |k: usize| {
        format!("# find-slow: no slow node or link in {k} rounds (the pairs tier: 7); 28 of 28 pairs exercised and cleared (node pairs), in alltoall groups of up to 4 nodes")
    };
    assert!(
        r.stdout.contains(&clean(4)) || r.stdout.contains(&clean(5)),
        "{}",
        r.stdout
    );
    let run = run_json(&healthy);
    assert_eq!(run["outcome"], "pass");
    assert_eq!(run["find_slow"]["pairs_cleared"], 28);
    assert_eq!(run["find_slow"]["pairs_open"], 0);

    // 2·log2(8)+2 rounds at most for a link.
    let bound = 8;
    for (a, b) in sample(8, 7) {
        let spec = format!("node{a}+node{b}=50mbit");
        sim(&["shape-pair", &spec]);
        let out = dir.path().join(format!("link{a}{b}"));
        let (x, y) = (format!("node{a}"), format!("node{b}"));
        expect_named(
            &out,
            &format!("# find-slow: slow link {x}<->{y}: slow together, fast with other partners"),
            &[],
            &[[x.clone(), y.clone()]],
            bound,
        );
        sim(&["shape-pair", &format!("node{a}+node{b}=none")]);
    }

    // A node: named as a node (log2(8)+2 rounds).
    sim(&["shape", "node5=100mbit"]);
    expect_named(
        &dir.path().join("node5"),
        "# find-slow: slow node node5: every pair that includes it is slow",
        &["node5"],
        &[],
        5,
    );
    sim(&["shape", "node5=1gbit"]);
}

#[test]
fn the_sample_holds_pairs_no_ring_or_recursive_doubling_joins() {
    let s = sample(8, 7);
    assert_eq!(s.len(), 7);
    let never = |&(a, b): &(usize, usize)| b - a != 1 && b - a != 7 && (a ^ b).count_ones() > 1;
    assert!(s.iter().filter(|p| never(p)).count() >= 2, "{s:?}");
}
