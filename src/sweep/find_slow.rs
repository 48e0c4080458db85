//! `--find-slow`: the bisection search of `topology::bisect`, run after the tiers on
//! the same backend and deadlines. Rank 0 plans each round from the last one's
//! results and broadcasts it; every group measures all_reduce (the plan's first type,
//! out of place) at the largest size; points are recorded with tier `bisect`.
use super::TierRun;
use crate::kinds::{CollKind, RedOp, TierKind};
use crate::results::sweep::{FindSlow, FindSlowStep, Plan, Point};
use crate::topology::{self, bisect::Bisection, Round, Tier};
use anyhow::Result;

/// The plan every bisection group runs: one all_reduce at the largest size.
pub(super) fn bisect_plan(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    p.collectives = vec![CollKind::AllReduce];
    p.dtypes.truncate(1);
    p.ops = vec![RedOp::Sum];
    p.placements = vec![false];
    p.sizes = plan.sizes.last().copied().into_iter().collect();
    p
}

/// busbw as a per-node link rate: busbw·(ranks−1)/(nodes−1) (the inverse of the
/// topology file's relation), so a pair and a half of the job compare.
pub fn node_rate(busbw_gbps: f64, ranks: usize, nodes: usize) -> f64 {
    if nodes < 2 || ranks < 2 {
        return busbw_gbps;
    }
    busbw_gbps * (ranks - 1) as f64 / (nodes - 1) as f64
}

/// Bounds the search even if a planner bug never ended it.
const MAX_ROUNDS: usize = 64;

impl TierRun<'_> {
    /// Run the search; rank 0 gets what it found (other ranks None).
    pub(super) fn find_slow(
        &mut self,
        fraction: f64,
        ranks_per_node: Option<usize>,
    ) -> Result<Option<FindSlow>> {
        let world = self.world;
        let n = world.nodes.len();
        let mut search = (world.rank == 0).then(|| Bisection::new(n, fraction, None));
        let mut steps: Vec<FindSlowStep> = Vec::new();
        let mut index = 0;
        if world.rank == 0 {
            println!("# find-slow: bisection over {n} nodes (outlier fraction {fraction})");
        }
        for round in 0..MAX_ROUNDS {
            let next = search.as_mut().map(|s| s.next_round());
            let planned: Option<Vec<Vec<usize>>> = world.broadcast_json(next.as_ref())?;
            let Some(groups) = planned else { break };
            let tier = Tier {
                kind: TierKind::Bisect,
                rounds: vec![Round {
                    groups: groups
                        .iter()
                        .enumerate()
                        .map(|(k, g)| {
                            topology::node_group(&world.nodes, g, ranks_per_node, index + k)
                        })
                        .collect(),
                }],
            };
            index += groups.len();
            self.round(&tier, 0)?;
            if let Some(s) = search.as_mut() {
                steps.extend(self.judge_round(&tier, round, s));
            }
        }
        Ok(search.map(|s| self.found(&s, fraction, steps)))
    }

    /// rank 0: the round's rates into the search; its groups' steps, judged once the
    /// search is over (see [`TierRun::found`]).
    fn judge_round(&self, tier: &Tier, round: usize, s: &mut Bisection) -> Vec<FindSlowStep> {
        let groups = &tier.rounds[0].groups;
        let point_of = |g: &topology::Group| -> Option<&Point> {
            self.sink
                .points
                .iter()
                .rev()
                .find(|p| p.tier == TierKind::Bisect && p.group == g.index)
        };
        let steps: Vec<FindSlowStep> = groups
            .iter()
            .map(|g| {
                let busbw = point_of(g).map_or(0.0, |p| p.busbw_gbps);
                FindSlowStep {
                    round,
                    label: g.label.clone(),
                    hosts: g
                        .nodes
                        .iter()
                        .map(|&i| self.world.nodes[i].host.clone())
                        .collect(),
                    busbw_gbps: busbw,
                    node_rate_gbps: node_rate(busbw, g.members.len(), g.nodes.len()),
                    threshold_gbps: 0.0,
                    slow: false,
                }
            })
            .collect();
        let rates: Vec<f64> = steps.iter().map(|s| s.node_rate_gbps).collect();
        s.record(&rates);
        steps
    }

    /// rank 0: the finding with host names, printed.
    fn found(&self, s: &Bisection, fraction: f64, path: Vec<FindSlowStep>) -> FindSlow {
        let host = |i: usize| self.world.nodes[i].host.clone();
        let f = s.finding();
        let mut path = path;
        for (step, d) in path.iter_mut().zip(&f.path) {
            step.threshold_gbps = d.threshold_gbps;
            step.slow = d.slow;
            println!(
                "#   round {}: {:<24} busbw {:>9.3} GB/s, node rate {:>9.3} (threshold {:.3}): {}",
                step.round,
                step.label,
                step.busbw_gbps,
                step.node_rate_gbps,
                step.threshold_gbps,
                if step.slow { "slow" } else { "ok" }
            );
        }
        let out = FindSlow {
            outlier_fraction: fraction,
            rounds: f.rounds,
            pairs_tier_rounds: topology::pair_rounds(s.nodes()).len(),
            slow_nodes: f.slow_nodes.iter().map(|&i| host(i)).collect(),
            slow_links: f
                .slow_links
                .iter()
                .map(|&(a, b)| (host(a), host(b)))
                .collect(),
            unresolved: f
                .unresolved
                .iter()
                .map(|g| g.iter().map(|&i| host(i)).collect())
                .collect(),
            path,
        };
        print!("{}", render(&out));
        out
    }
}

/// The search's verdict lines.
pub fn render(f: &FindSlow) -> String {
    let mut s = String::new();
    let rounds = format!(
        "in {} rounds (the pairs tier: {})",
        f.rounds, f.pairs_tier_rounds
    );
    if f.clean() {
        s.push_str(&format!("# find-slow: no slow node or link {rounds}\n"));
    }
    for n in &f.slow_nodes {
        s.push_str(&format!(
            "# find-slow: slow node {n}: every pair that includes it is slow ({rounds})\n"
        ));
    }
    for (a, b) in &f.slow_links {
        s.push_str(&format!(
            "# find-slow: slow link {a}<->{b}: slow together, fast with other partners ({rounds})\n"
        ));
    }
    for g in &f.unresolved {
        s.push_str(&format!(
            "# find-slow: {} slow together but not separated ({rounds})\n",
            g.join("+")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_rate_turns_busbw_of_any_group_into_one_scale() {
        // 2 ranks per node: a pair (4 ranks) and 4 nodes (8 ranks) on 3 GB/s links.
        let rate = 3.0;
        let pair_busbw = rate * 1.0 / 3.0;
        let half_busbw = rate * 3.0 / 7.0;
        assert!((node_rate(pair_busbw, 4, 2) - rate).abs() < 1e-12);
        assert!((node_rate(half_busbw, 8, 4) - rate).abs() < 1e-12);
        assert_eq!(node_rate(2.0, 2, 2), 2.0);
    }

    #[test]
    fn render_names_nodes_links_and_the_clean_case() {
        let mut f = FindSlow {
            rounds: 5,
            pairs_tier_rounds: 5,
            ..Default::default()
        };
        assert!(render(&f).contains("no slow node or link in 5 rounds"));
        f.slow_nodes = vec!["node2".into()];
        f.slow_links = vec![("node0".into(), "node1".into())];
        let t = render(&f);
        assert!(t.contains("slow node node2"), "{t}");
        assert!(t.contains("slow link node0<->node1"), "{t}");
        assert!(!f.clean());
    }
}
