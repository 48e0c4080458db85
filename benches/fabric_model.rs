//! `--find-slow` on a leaf/spine fabric, on paper (`cargo bench --bench fabric_model`):
//! 32 leaves × 32 nodes at 4:1 (each leaf's uplink carries a quarter of its node
//! links), nodes in rack order, against the pairs tier. The search runs inside every
//! leaf at once, then the leaves two by two (`topology::fabric_search`); a round lasts
//! as long as its slowest group (every block at once, 256 KiB to each peer — 256 MiB
//! over the job's 1,024 nodes, as `sweep` sends — 20 iterations). The pairs tier runs
//! every node pair, n−1 rounds of n/2 pairs, each pair sending 256 MiB, its crossing
//! pairs sharing their uplinks. Rates from `LeafSpineModel::rates`.
//!
//! It checks what it reports: healthy → nothing named; a slow node and a slow uplink
//! at 0.4×, and a link between two nodes of a leaf at 0.05× of a node link (slower
//! links hide in an alltoall of many nodes), each named as what it is; and
//! it scans the slowdown (0.95× down to 0.02×) for the mildest that each is still named
//! at, with and without the oversubscription declared. The pairs tier's rows are its
//! rounds and modelled time; the mildest slowdown it sees is its rule's, 0.8× of its
//! class (not modelled here).
use burnin::topology::fabric_search::{run_on_leaf_spine, LeafSpineModel};
use std::fmt::Write as _;

const LEAVES: usize = 32;
const K: usize = 32;
const RATIO: f64 = 4.0;
const FRACTION: f64 = 0.8;
const ITERS: f64 = 20.0;
const JOB_BYTES: f64 = 256.0 * 1024.0 * 1024.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Healthy,
    Node,
    Link,
    Uplink,
}

fn model(fault: Fault, slowdown: f64) -> LeafSpineModel {
    let mut m = LeafSpineModel::racked(LEAVES, K, RATIO);
    match fault {
        Fault::Healthy => {}
        Fault::Node => m.node[7 * K + 5] *= slowdown,
        // a link between two nodes of leaf 12, as slow as `slowdown` of a node link
        Fault::Link => m
            .slow_pairs
            .push((12 * K + 3, 12 * K + 20, 10.0 * slowdown)),
        Fault::Uplink => m.uplink[21] *= slowdown,
    }
    m
}

/// Named exactly as what it is (and nothing else)?
fn named_right(fault: Fault, s: &burnin::topology::fabric_search::FabricSearch) -> bool {
    let f = s.finding();
    let up = s.slow_uplinks();
    match fault {
        Fault::Healthy => {
            f.slow_nodes.is_empty()
                && f.slow_links.is_empty()
                && f.unresolved.is_empty()
                && up.is_empty()
        }
        Fault::Node => f.slow_nodes == vec![7 * K + 5] && up.is_empty() && f.slow_links.is_empty(),
        Fault::Link => {
            f.slow_links == vec![(12 * K + 3, 12 * K + 20)]
                && f.slow_nodes.is_empty()
                && up.is_empty()
        }
        Fault::Uplink => up == [vec![21]] && f.slow_nodes.is_empty() && f.slow_links.is_empty(),
    }
}

/// The pairs tier: its rounds and modelled seconds (each pair alone in its round but
/// beside the round's other pairs on the uplinks).
fn pairs_tier(m: &LeafSpineModel) -> (usize, f64) {
    let rounds = burnin::topology::pair_rounds(m.node.len());
    let mut seconds = 0.0;
    for r in &rounds {
        let groups: Vec<Vec<usize>> = r.iter().map(|&(a, b)| vec![a, b]).collect();
        let rates = m.rates(&groups);
        let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
        seconds += JOB_BYTES / (slowest * 1e9) * ITERS;
    }
    (rounds.len(), seconds)
}

fn main() {
    let n = LEAVES * K;
    let block = (JOB_BYTES / n as f64).max(64.0 * 1024.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# --find-slow on a leaf/spine fabric, modelled\n\n`cargo bench --bench fabric_model`: {LEAVES} leaves × {K} nodes ({n}) at {RATIO}:1, nodes in rack order, 10 GB/s node links, outlier fraction {FRACTION}; every alltoall block at once, {} KiB per peer, {ITERS} iterations; the pairs tier sends 256 MiB per pair. Time is modelled transfer time only.\n",
        block as u64 / 1024
    );
    let (pr, ps) = pairs_tier(&model(Fault::Healthy, 1.0));
    let _ = writeln!(
        out,
        "| case | declared | named as | rounds | modelled s | pairs tier rounds | pairs tier s |\n|---|---|---|---|---|---|---|"
    );
    for fault in [Fault::Healthy, Fault::Node, Fault::Link, Fault::Uplink] {
        for declared in [Some(RATIO), None] {
            // a link between two nodes hides in an alltoall of k nodes unless it is
            // slower than about 0.8/(k−1) of a node link (AllToAll::hides_above)
            let slow = match fault {
                Fault::Healthy => 1.0,
                Fault::Link => 0.05,
                _ => 0.4,
            };
            let m = model(fault, slow);
            let (s, secs) = run_on_leaf_spine(&m, FRACTION, declared, block);
            let ok = named_right(fault, &s);
            let f = s.finding();
            let what = format!(
                "nodes {:?} links {:?} uplinks {:?} unresolved {}",
                f.slow_nodes,
                f.slow_links,
                s.slow_uplinks(),
                f.unresolved.len()
            );
            assert!(
                ok,
                "{fault:?} at {slow}× declared {declared:?}: named {what}"
            );
            let _ = writeln!(
                out,
                "| {fault:?} ({slow}×) | {} | {} | {} | {:.2} | {pr} | {:.1} |",
                declared.map_or("no".into(), |r| format!("{r}:1")),
                if fault == Fault::Healthy {
                    "nothing".into()
                } else {
                    what
                },
                f.rounds,
                secs * ITERS,
                ps
            );
        }
    }
    let _ = writeln!(
        out,
        "\n## The mildest slowdown each is named at\n\nScanned 0.95× down to 0.02× of the healthy rate (a node's link; a link between two nodes as a fraction of a node link; an uplink of its 4:1 capacity). The pairs tier's is its rule's: below 0.8 of its class's reference.\n\n| fault | declared | mildest named | pairs tier |\n|---|---|---|---|"
    );
    let scan = [
        0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05, 0.02,
    ];
    for fault in [Fault::Node, Fault::Link, Fault::Uplink] {
        for declared in [Some(RATIO), None] {
            let mildest = scan.iter().copied().find(|&x| {
                let (s, _) = run_on_leaf_spine(&model(fault, x), FRACTION, declared, block);
                named_right(fault, &s)
            });
            let _ = writeln!(
                out,
                "| {fault:?} | {} | {} | < 0.8× |",
                declared.map_or("no".into(), |r| format!("{r}:1")),
                mildest.map_or("not at 0.02×".into(), |x| format!("{x}×"))
            );
        }
    }
    print!("{out}");
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/results/fabric-model.md");
    std::fs::write(&path, &out).expect("write benches/results/fabric-model.md");
    eprintln!("wrote {}", path.display());
}
