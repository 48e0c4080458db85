//! Scale on paper: the node-pair schedule and the outlier analysis for up to 1,024
//! nodes, timed (`cargo bench --bench pair_schedule`). No peer tool schedules node
//! pairs, so this reports absolute times; it checks what it times (every pair once, no
//! node twice in a round, the slow node named) so a fast wrong answer cannot pass.
use burnin::kinds::TierKind;
use burnin::results::sweep::Point;
use burnin::sweep::analysis::{analyze, judged_point, Rules};
use burnin::topology::pair_rounds;
use std::time::Instant;

fn point(g: usize, a: usize, b: usize, busbw: f64) -> Point {
    let (ha, hb) = (format!("node{a}"), format!("node{b}"));
    judged_point(
        TierKind::Pairs,
        g,
        format!("{ha}+{hb}"),
        vec![2 * a, 2 * b],
        vec![ha, hb],
        1 << 26,
        busbw,
    )
}

fn main() {
    println!("| nodes | rounds | pairs | schedule (ms) | analysis (ms) | slow node named |");
    println!("|---:|---:|---:|---:|---:|---|");
    for n in [16usize, 64, 256, 1024] {
        let t = Instant::now();
        let rounds = pair_rounds(n);
        let schedule_ms = t.elapsed().as_secs_f64() * 1e3;
        // What was timed is right: every pair once, nobody twice in a round.
        let mut seen = vec![false; n * n];
        for r in &rounds {
            let mut busy = vec![false; n];
            for &(a, b) in r {
                assert!(!busy[a] && !busy[b], "node twice in a round");
                busy[a] = true;
                busy[b] = true;
                let k = a.min(b) * n + a.max(b);
                assert!(!seen[k], "pair twice");
                seen[k] = true;
            }
        }
        let pairs = n * (n - 1) / 2;
        assert_eq!(seen.iter().filter(|s| **s).count(), pairs);
        let slow = n * 2 / 3;
        let pts: Vec<Point> = rounds
            .iter()
            .flatten()
            .enumerate()
            .map(|(g, &(a, b))| point(g, a, b, if a == slow || b == slow { 12.0 } else { 46.0 }))
            .collect();
        let hosts: Vec<String> = (0..n).map(|i| format!("node{i}")).collect();
        let t = Instant::now();
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts);
        let analysis_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(a.outlier_nodes, vec![format!("node{slow}")]);
        println!(
            "| {n} | {} | {pairs} | {schedule_ms:.2} | {analysis_ms:.1} | node{slow} |",
            rounds.len()
        );
    }
}
