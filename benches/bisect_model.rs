//! `--find-slow` on paper: the bisection planner against the pairs tier on modelled
//! fabrics of 16 to 1,024 nodes (`cargo bench --bench bisect_model`). Each node has a
//! link rate; a slow node paces every group it is in, a slow link every alltoall that
//! crosses it by its share. Two alltoall algorithms: every block at once (NCCL,
//! Open MPI's linear algorithm) and pairwise steps (Open MPI for large blocks). A round
//! lasts as long as its slowest group (5 µs per step; every group sends the same
//! block to each peer, 256 MiB over the job's nodes, 20 iterations, as `sweep` does);
//! the pairs tier runs every pair alone with all_reduce of 256 MiB.
//!
//! It checks what it reports: every slow node is named as a node; every link slower
//! than what the whole job's alltoall can hide (`AllToAll::hides_above`) is named as a
//! link, wherever its two nodes sit; a link at 0.2× its nodes' rate is reported named
//! or not, with the largest group that cleared a pair, as the honest limit of ~log2(n)
//! rounds; a healthy fabric clears every pair; ≤ 2·log2(n)+2 rounds, and under 5% of the
//! pairs tier's modelled time at 1,024 nodes.
use burnin::topology::bisect::{pairs_tier_on_model, run_on_model, AllToAll, FabricModel};

const BYTES: f64 = 256.0 * 1024.0 * 1024.0;
const ITERS: u32 = 20;
const FRACTION: f64 = 0.8;
const RATE: f64 = 50.0;

struct Case {
    name: String,
    slow_nodes: Vec<usize>,
    slow_links: Vec<(usize, usize, f64)>,
    /// Whether the search must name it (false: reported only).
    must: bool,
}

fn cases(n: usize, algo: AllToAll) -> Vec<Case> {
    let seen = RATE * algo.hides_above(n, FRACTION) * 0.5;
    vec![
        Case {
            name: "healthy".into(),
            slow_nodes: vec![],
            slow_links: vec![],
            must: true,
        },
        Case {
            name: "one slow node (0.4×)".into(),
            slow_nodes: vec![n * 2 / 3],
            slow_links: vec![],
            must: true,
        },
        Case {
            name: "two slow nodes (0.4×)".into(),
            slow_nodes: vec![n / 5, n * 4 / 5],
            slow_links: vec![],
            must: true,
        },
        Case {
            name: format!("link of neighbours ({:.3}×)", seen / RATE),
            slow_nodes: vec![],
            slow_links: vec![(n / 2 - 1, n / 2, seen)],
            must: true,
        },
        Case {
            name: format!("link far apart ({:.3}×)", seen / RATE),
            slow_nodes: vec![],
            slow_links: vec![(1, n - 2, seen)],
            must: true,
        },
        Case {
            name: "link far apart (0.2×)".into(),
            slow_nodes: vec![],
            slow_links: vec![(1, n - 2, 0.2 * RATE)],
            must: false,
        },
    ]
}

fn main() {
    println!("| nodes | alltoall | fault | rounds | 2·log2(n)+2 | pairs rounds | bisection (s, model) | pairs tier (s, model) | time ratio | named | pairs cleared | largest clearing group | a link can hide above (in that group) |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    let mut ok = true;
    for algo in [AllToAll::Concurrent, AllToAll::Pairwise] {
        for n in [16usize, 64, 256, 1024] {
            for c in cases(n, algo) {
                let mut m = FabricModel::uniform(n, RATE);
                for &s in &c.slow_nodes {
                    m.node_gbps[s] = 0.4 * RATE;
                }
                m.slow_links.extend(c.slow_links.iter().copied());
                // As sweep sends it: the largest size over the job's ranks per peer.
                let block = (BYTES / n as f64).max(64.0 * 1024.0);
                let (f, t) = run_on_model(&m, FRACTION, block, ITERS, algo);
                let (pr, pt) = pairs_tier_on_model(&m, BYTES, ITERS);
                let links: Vec<(usize, usize)> = c.slow_links.iter().map(|l| (l.0, l.1)).collect();
                let right = f.slow_nodes == c.slow_nodes
                    && f.slow_links == links
                    && f.unresolved.is_empty();
                let bound = 2.0 * (n as f64).log2() + 2.0;
                let healthy_cleared =
                    !c.name.starts_with("healthy") || f.pairs_cleared == f.pairs_total;
                if c.must {
                    ok &= right && (f.rounds as f64) <= bound && healthy_cleared;
                    ok &= n < 1024 || t < 0.05 * pt;
                }
                println!(
                    "| {n} | {} | {} | {} | {bound:.0} | {pr} | {t:.2} | {pt:.1} | {:.4} | {} | {} of {} | {} | {:.3}× |",
                    algo.name(),
                    c.name,
                    f.rounds,
                    t / pt,
                    match (right, c.must) {
                        (true, _) => "yes",
                        (false, true) => "NO",
                        (false, false) => "no (hidden)",
                    },
                    f.pairs_cleared,
                    f.pairs_total,
                    f.largest_clearing_group,
                    algo.hides_above(f.largest_clearing_group, FRACTION),
                );
            }
        }
    }
    println!();
    println!(
        "goal (slow nodes, and links below what the whole job's alltoall can hide, named as such wherever they sit; a healthy fabric's every pair cleared; ≤ 2·log2(n)+2 rounds; < 5% of the pairs tier's time at 1,024 nodes): {}",
        if ok { "met" } else { "NOT met" }
    );
    if !ok {
        std::process::exit(1);
    }
}
