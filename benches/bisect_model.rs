//! `--find-slow` on paper: the bisection planner against the pairs tier on modelled
//! fabrics of 16 to 1,024 nodes (`cargo bench --bench bisect_model`). Each node has a
//! link rate; a slow node or a slow link paces every ring that crosses it; a round
//! lasts as long as its slowest group (ring all_reduce time model, 5 µs per hop,
//! 256 MiB × 20 iterations per group). It checks what it reports: the bisection must
//! name exactly the slow nodes/links it was given, in at most 2·log2(n) rounds, and take
//! under 5% of the pairs tier's modelled time at 1,024 nodes.
use burnin::topology::bisect::{pairs_tier_on_model, run_on_model, FabricModel};

const BYTES: f64 = 256.0 * 1024.0 * 1024.0;
const ITERS: u32 = 20;

struct Case {
    name: &'static str,
    slow_nodes: Vec<usize>,
    slow_links: Vec<(usize, usize)>,
}

fn cases(n: usize) -> Vec<Case> {
    vec![
        Case {
            name: "one slow node",
            slow_nodes: vec![n * 2 / 3],
            slow_links: vec![],
        },
        Case {
            name: "two slow nodes",
            slow_nodes: vec![n / 5, n * 4 / 5],
            slow_links: vec![],
        },
        Case {
            name: "one slow link",
            slow_nodes: vec![],
            slow_links: vec![(n / 2 - 1, n / 2)],
        },
    ]
}

fn main() {
    println!("| nodes | fault | bisection rounds | 2·log2(n) | pairs rounds | bisection (s, model) | pairs tier (s, model) | time ratio | named |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---|");
    let mut ok = true;
    for n in [16usize, 64, 256, 1024] {
        for c in cases(n) {
            let mut m = FabricModel::uniform(n, 50.0);
            for &s in &c.slow_nodes {
                m.node_gbps[s] = 20.0;
            }
            for &(a, b) in &c.slow_links {
                m.slow_links.push((a, b, 10.0));
            }
            let (f, t) = run_on_model(&m, 0.8, BYTES, ITERS);
            let (pr, pt) = pairs_tier_on_model(&m, BYTES, ITERS);
            let right = f.slow_nodes == c.slow_nodes && f.slow_links == c.slow_links;
            let bound = 2.0 * (n as f64).log2();
            ok &= right && (f.rounds as f64) <= bound && (n < 1024 || t < 0.05 * pt);
            println!(
                "| {n} | {} | {} | {bound:.0} | {pr} | {t:.2} | {pt:.1} | {:.4} | {} |",
                c.name,
                f.rounds,
                t / pt,
                if right { "yes" } else { "NO" }
            );
        }
    }
    println!();
    println!(
        "goal (the right nodes named, ≤ 2·log2(n) rounds, < 5% of the pairs tier's time at 1,024 nodes): {}",
        if ok { "met" } else { "NOT met" }
    );
    if !ok {
        std::process::exit(1);
    }
}
