//! `--find-slow`: the bisection search of `topology::bisect`, run after the tiers on
//! the same backend and deadlines. Rank 0 plans each round from the last one's
//! results and broadcasts it; every group measures alltoall (the plan's first type,
//! out of place) with the same block per peer (`bisect_bytes`), so its traffic
//! crosses every pair of its nodes; points are recorded with tier `bisect`.
use super::TierRun;
use crate::kinds::{CollKind, RedOp, TierKind};
use crate::results::sweep::{FindSlow, FindSlowStep, Plan, Point};
use crate::topology::{self, fabric_search::FabricSearch, Round, Tier};
use anyhow::Result;

/// The plan every bisection group runs: one alltoall (its size: [`bisect_bytes`]).
pub(super) fn bisect_plan(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    p.collectives = vec![CollKind::AllToAll];
    p.dtypes.truncate(1);
    p.ops = vec![RedOp::Sum];
    p.placements = vec![false];
    p.sizes = plan.sizes.last().copied().into_iter().collect();
    p
}

/// The smallest block a bisection alltoall sends to each peer, bytes.
pub const MIN_BLOCK: u64 = 64 * 1024;

/// Bytes per rank of a bisection group of `members` ranks: the plan's largest size
/// spread over the whole job's `world` ranks gives the block each rank sends to each
/// peer (at least [`MIN_BLOCK`], a multiple of 256 bytes), and a group sends that
/// block to each of its members. Every group then moves the same blocks, so the
/// per-step latency weighs the same in a pair as in the whole job and their rates
/// compare.
pub fn bisect_bytes(largest: u64, world: usize, members: usize) -> u64 {
    let block = (largest / world.max(1) as u64 / 256 * 256).max(MIN_BLOCK);
    block * members as u64
}

/// An alltoall's busbw as a per-node link rate, so a pair and a half of the job
/// compare: with N ranks on k nodes (N/k each) and S bytes per rank, each node sends
/// (N/k)·S·(k−1)/k to other nodes; busbw is algbw·(N−1)/N with algbw = S/t, so the
/// node rate is busbw·N/(N−1)·(N/k)·(k−1)/k.
pub fn node_rate(busbw_gbps: f64, ranks: usize, nodes: usize) -> f64 {
    if nodes < 2 || ranks < 2 {
        return busbw_gbps;
    }
    let (n, k) = (ranks as f64, nodes as f64);
    busbw_gbps * n / (n - 1.0) * (n / k) * (k - 1.0) / k
}

/// A search measurement's busbw at its fastest iteration (every rank's, the slowest
/// rank's counting): what the group's path carries when nothing else stalls it. The
/// search asks whether a path is able, not how steady it is (the tiers, the soak and
/// `sweep.no_outlier` judge that): a stall on a busy host only ever adds time, and a
/// slow link or node never lets an iteration through faster than it. On 2 cores a
/// healthy pair's alltoall iterations alternated between about 5.6 and 13.9 ms, so
/// the median of 4 flipped between the two (0.47x to 0.98x of the best pair over 28
/// quiet runs, and a healthy pair named in CI at 0.49x); the fastest iteration read
/// 0.90x-0.98x in every quiet run. A point without its fastest time (an old record)
/// counts at its median.
pub fn peak_busbw(p: &Point) -> f64 {
    let t = &p.time;
    if t.min_us > 0.0 && t.p50_us >= t.min_us {
        p.busbw_gbps * t.p50_us / t.min_us
    } else {
        p.busbw_gbps
    }
}

/// Bounds the search even if a planner bug never ended it.
const MAX_ROUNDS: usize = 64;

/// How many times a group judged slow is measured again before the search hears of
/// it ([`TierRun::remeasure_slow`]).
pub const REMEASURE: usize = 2;

/// Which groups of a round to measure again, by position: the slow ones (`below`),
/// and, when no reference was doubted yet (`doubt`), the fastest group not below as
/// the reference to doubt — if the round has slow groups, or if that group reads
/// faster than every group of the rounds before (`best_before`, node rates): it
/// would become the bar every group of the search is judged against, those of the
/// rounds already run included, which are not measured again.
fn again(
    rates: &[f64],
    below: &[bool],
    doubt: bool,
    best_before: f64,
) -> (Vec<usize>, Option<usize>) {
    let slow: Vec<usize> = (0..rates.len()).filter(|&k| below[k]).collect();
    let fastest = (0..rates.len())
        .filter(|&k| !below[k])
        .max_by(|&a, &b| rates[a].total_cmp(&rates[b]));
    let reference = fastest.filter(|&k| doubt && (!slow.is_empty() || rates[k] > best_before));
    (slow, reference)
}

/// A round's node rates as the search hears them: each group at its best measurement
/// (`best`), and the doubted reference at position `doubted` at its worst (`worst`) —
/// but never below the round's next best group nor the fastest of the rounds before
/// (`floor`), nor above its own best, so a doubted reference that reads slow by
/// itself is judged at no less than the others and never named at its worst (a round
/// of one group has no next best; the rounds before are its bar).
fn round_rates(best: &[f64], worst: &[f64], doubted: Option<usize>, floor: f64) -> Vec<f64> {
    let mut rates = best.to_vec();
    if let Some(d) = doubted.filter(|&d| d < rates.len()) {
        let others = (0..best.len())
            .filter(|&k| k != d)
            .map(|k| best[k])
            .fold(floor, f64::max);
        rates[d] = worst
            .get(d)
            .copied()
            .unwrap_or(best[d])
            .max(others)
            .min(best[d]);
    }
    rates
}

impl TierRun<'_> {
    /// Run the search; rank 0 gets what it found (other ranks None).
    pub(super) fn find_slow(
        &mut self,
        fraction: f64,
        ranks_per_node: Option<usize>,
    ) -> Result<Option<FindSlow>> {
        let world = self.world;
        let n = world.nodes.len();
        let leaves = self.leaves();
        let over = self.rules.fabric.as_ref().and_then(|f| f.oversubscription);
        let take = ranks_per_node.unwrap_or(usize::MAX).max(1);
        let mut search = (world.rank == 0).then(|| {
            let mut s = FabricSearch::new(n, leaves.clone(), fraction, None, over);
            // the ranks each group takes of a node (topology::node_group)
            s.set_ranks(
                world
                    .nodes
                    .iter()
                    .map(|x| x.ranks.iter().take(take).copied().collect())
                    .collect(),
            );
            s
        });
        let mut steps: Vec<FindSlowStep> = Vec::new();
        // rank 0: the fastest node rate the search has heard (see `again`)
        let mut best_before = 0.0_f64;
        let mut index = 0;
        if world.rank == 0 {
            println!("# find-slow: bisection over {n} nodes (outlier fraction {fraction})");
            if leaves.len() > 1 {
                println!(
                    "# find-slow: inside each of {} leaf switches at once, then the leaves two by two (--fabric)",
                    leaves.len()
                );
            }
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
            let doubted = self.remeasure_slow(&tier, search.as_mut(), best_before)?;
            if let Some(s) = search.as_mut() {
                let judged = self.judge_round(&tier, round, s, doubted, best_before);
                best_before = judged
                    .iter()
                    .map(|j| j.node_rate_gbps)
                    .fold(best_before, f64::max);
                steps.extend(judged);
            }
        }
        Ok(search.map(|s| self.found(&s, fraction, steps)))
    }

    /// Measure again, at most [`REMEASURE`] times and each by itself, the groups of the
    /// round just run that the search would judge slow, before it hears of them: a
    /// group measured beside a slow one shares the host with its waiting ranks (a
    /// healthy 4-node group read 0.076 GB/s against 0.087 beside the slow node's
    /// group, where the healthy groups away from it read 0.10-0.11), and on a busy node one
    /// measurement can catch a stall that says nothing about the fabric, so a slow
    /// group counts at its best measurement. A slow link stays slow every time; a stall
    /// does not come back on cue.
    ///
    /// The reference is doubted the same way: the round's fastest group is measured
    /// again by itself too and counts at its worst measurement (the index returned),
    /// for a measurement can also read fast — a rank descheduled mid-call lets a
    /// shaper's bucket or the socket buffers fill, and the next transfer leaves at
    /// once (a healthy pair read 0.064 GB/s on a 0.05 GB/s link in CI and made the
    /// round's three other healthy pairs slow). That is done when the round has slow
    /// groups, and when its fastest group reads faster than every round before
    /// (`best_before`, rank 0), for it would raise the bar of the rounds already
    /// judged: beside a CPU hog in CI one healthy pair read 0.043 GB/s where the
    /// other 27 read 0.021–0.033, two rounds after a pair at 0.021 that was fast
    /// enough when it ran and was named at 0.5 of 0.043. A group is named only when
    /// it is slow at its best against a reference at its worst. Collective: rank 0
    /// decides, every rank runs.
    fn remeasure_slow(
        &mut self,
        tier: &Tier,
        mut search: Option<&mut FabricSearch>,
        best_before: f64,
    ) -> Result<Option<usize>> {
        let groups = &tier.rounds[0].groups;
        let mut doubted: Option<usize> = None;
        for _ in 0..REMEASURE {
            let plan: Option<(Vec<usize>, Option<usize>)> = search.as_mut().map(|s| {
                let (rates, _) = self.round_rates(groups, doubted, best_before);
                let below = s.below_threshold(&rates);
                again(&rates, &below, doubted.is_none(), best_before)
            });
            let (slow, reference): (Vec<usize>, Option<usize>) =
                self.world.broadcast_json(plan.as_ref())?;
            if slow.is_empty() && reference.is_none() {
                break;
            }
            doubted = doubted.or(reference.map(|k| groups[k].index));
            // Each slow group again by itself: a group that ran beside a slow one
            // shared the host's cores (and a fabric's links) with its stalled ranks,
            // which spin while they wait; alone, only its own nodes and links count.
            for k in slow.into_iter().chain(reference) {
                let again = Tier {
                    kind: tier.kind,
                    rounds: vec![Round {
                        groups: vec![groups[k].clone()],
                    }],
                };
                self.round(&again, 0)?;
            }
        }
        Ok(doubted)
    }

    /// A bisection group's busbw over its measurements: (best, worst); (0, 0): none.
    /// Each measurement counts at its fastest iteration ([`peak_busbw`]).
    fn group_busbw(&self, g: &topology::Group) -> (f64, f64) {
        let (best, worst) = self
            .sink
            .points
            .iter()
            .filter(|p| p.tier == TierKind::Bisect && p.group == g.index)
            .map(peak_busbw)
            .fold((0.0, f64::INFINITY), |(b, w), r| {
                (f64::max(b, r), f64::min(w, r))
            });
        (best, if worst.is_finite() { worst } else { 0.0 })
    }

    /// The round's per-node link rates ([`round_rates`]; `doubted`: the group index
    /// of the doubted reference), with each group's best busbw.
    fn round_rates(
        &self,
        groups: &[topology::Group],
        doubted: Option<usize>,
        floor: f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let rate =
            |g: &topology::Group, busbw: f64| node_rate(busbw, g.members.len(), g.nodes.len());
        let measured: Vec<(f64, f64)> = groups.iter().map(|g| self.group_busbw(g)).collect();
        let best: Vec<f64> = groups
            .iter()
            .zip(&measured)
            .map(|(g, m)| rate(g, m.0))
            .collect();
        let worst: Vec<f64> = groups
            .iter()
            .zip(&measured)
            .map(|(g, m)| rate(g, m.1))
            .collect();
        let rates = round_rates(
            &best,
            &worst,
            doubted.and_then(|d| groups.iter().position(|g| g.index == d)),
            floor,
        );
        (rates, measured.into_iter().map(|m| m.0).collect())
    }

    /// rank 0: the round's rates into the search; its groups' steps, judged once the
    /// search is over (see [`TierRun::found`]).
    fn judge_round(
        &self,
        tier: &Tier,
        round: usize,
        s: &mut FabricSearch,
        doubted: Option<usize>,
        floor: f64,
    ) -> Vec<FindSlowStep> {
        let groups = &tier.rounds[0].groups;
        let (rates, best) = self.round_rates(groups, doubted, floor);
        let steps: Vec<FindSlowStep> = groups
            .iter()
            .zip(rates.iter().zip(best))
            .map(|(g, (&rate, best))| {
                // the busbw the rate stands for: the best measurement, or for the
                // doubted reference the rate's (a bound, maybe not one measurement)
                let per = node_rate(1.0, g.members.len(), g.nodes.len());
                let busbw = match doubted {
                    Some(d) if d == g.index && per > 0.0 => rate / per,
                    _ => best,
                };
                FindSlowStep {
                    round,
                    label: g.label.clone(),
                    hosts: g
                        .nodes
                        .iter()
                        .map(|&i| self.world.nodes[i].host.clone())
                        .collect(),
                    busbw_gbps: busbw,
                    node_rate_gbps: rate,
                    threshold_gbps: 0.0,
                    slow: false,
                }
            })
            .collect();
        s.record(&rates);
        steps
    }

    /// The job's nodes by leaf switch (`--fabric`): node indices each, in the
    /// fabric's order; without a fabric, one leaf of every node.
    pub(super) fn leaves(&self) -> Vec<Vec<usize>> {
        let nodes = &self.world.nodes;
        let Some(f) = self.rules.fabric.as_ref() else {
            return vec![(0..nodes.len()).collect()];
        };
        let mut by: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, n) in nodes.iter().enumerate() {
            // load_fabric refused a job with a host no switch holds
            by.entry(f.leaf_of(&n.host).unwrap_or(usize::MAX))
                .or_default()
                .push(i);
        }
        by.into_values().collect()
    }

    /// "leaf2↔spine": the uplink of the switch holding these nodes.
    fn uplink_of(&self, nodes: &[usize]) -> String {
        let f = self.rules.fabric.as_ref();
        let leaf = nodes
            .first()
            .and_then(|&i| f.and_then(|f| f.leaf_of(&self.world.nodes[i].host)));
        match (f, leaf) {
            (Some(f), Some(l)) => f.uplink_name(l),
            _ => "?".into(),
        }
    }

    /// rank 0: the finding with host names, printed.
    fn found(&self, s: &FabricSearch, fraction: f64, path: Vec<FindSlowStep>) -> FindSlow {
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
            pairs_total: f.pairs_total,
            pairs_cleared: f.pairs_cleared,
            largest_clearing_group: f.largest_clearing_group,
            pairs_open: f.pairs_open,
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
            slow_uplinks: s
                .slow_uplinks()
                .iter()
                .map(|set| {
                    set.iter()
                        .map(|&l| self.uplink_of(&s.leaves()[l]))
                        .collect()
                })
                .collect(),
            notes: s.notes().to_vec(),
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
    let uncleared = f.pairs_total.saturating_sub(f.pairs_cleared);
    if f.clean() {
        s.push_str(&format!(
            "# find-slow: no slow node or link {rounds}; {} of {} pairs exercised and cleared (node pairs), in alltoall groups of up to {} nodes (a link slower than its peers by less than about that many times can hide in such a group: --tiers pairs runs every pair alone)\n",
            f.pairs_cleared, f.pairs_total, f.largest_clearing_group
        ));
    } else if f.found_nothing() {
        s.push_str(&format!(
            "# find-slow: not cleared: {uncleared} pairs unexercised (of {} node pairs), run --tiers pairs ({rounds})\n",
            f.pairs_total
        ));
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
    for set in &f.slow_uplinks {
        if let [one] = &set[..] {
            s.push_str(&format!(
                "# find-slow: slow uplink {one}: its leaf is slow with every other leaf, fast inside ({rounds})\n"
            ));
        } else {
            s.push_str(&format!(
                "# find-slow: slow uplinks {} (cannot tell them apart: every group that crossed one crossed the others) ({rounds})\n",
                set.join(" ")
            ));
        }
    }
    for g in &f.unresolved {
        s.push_str(&format!(
            "# find-slow: {} slow together but not separated ({rounds})\n",
            g.join("+")
        ));
    }
    for n in &f.notes {
        s.push_str(&format!("# find-slow: {n}\n"));
    }
    if !f.found_nothing() {
        s.push_str(&format!(
            "# find-slow: {} of {} node pairs cleared, {} explained by what is named above",
            f.pairs_cleared,
            f.pairs_total,
            uncleared - f.pairs_open.min(uncleared)
        ));
        if f.pairs_open > 0 {
            s.push_str(&format!(
                "; {} only in slow groups, not seen: run --tiers pairs for them",
                f.pairs_open
            ));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_counts_at_its_fastest_iteration() {
        let mut p = crate::sweep::analysis::judged_point(
            TierKind::Bisect,
            0,
            "node0+node1".into(),
            vec![0, 1],
            vec!["node0".into(), "node1".into()],
            1 << 19,
            0.025,
        );
        // iterations alternating 5.6 and 13.9 ms: the median between them
        p.time.min_us = 5600.0;
        p.time.p50_us = 9750.0;
        assert!((peak_busbw(&p) - 0.025 * 9750.0 / 5600.0).abs() < 1e-12);
        // a record without its fastest time counts at its median
        p.time.min_us = 0.0;
        assert_eq!(peak_busbw(&p), 0.025);
    }

    #[test]
    fn node_rate_turns_busbw_of_any_group_into_one_scale() {
        // 2 ranks per node on 3 GB/s links, S bytes per rank: a node sends
        // 2·S·(k−1)/k off the node in t = that / 3 GB/s; busbw = (S/t)·(N−1)/N.
        let rate = 3.0;
        for (ranks, nodes) in [(4usize, 2usize), (8, 4), (16, 8)] {
            let (n, k) = (ranks as f64, nodes as f64);
            let s = 1.0;
            let t = 2.0 * s * (k - 1.0) / k / rate;
            let busbw = s / t * (n - 1.0) / n;
            assert!(
                (node_rate(busbw, ranks, nodes) - rate).abs() < 1e-12,
                "{ranks} {nodes}"
            );
        }
        // One rank per node: a pair's busbw is the link rate.
        assert_eq!(node_rate(2.0, 2, 2), 2.0);
    }

    #[test]
    fn every_group_sends_the_same_block_per_peer() {
        // 4 MiB over 16 ranks: 256 KiB blocks; a pair of 2 ranks sends 512 KiB.
        assert_eq!(bisect_bytes(4 << 20, 16, 2), 512 << 10);
        assert_eq!(bisect_bytes(4 << 20, 16, 16), 4 << 20);
        // Small sizes or huge jobs: at least 64 KiB per peer.
        assert_eq!(bisect_bytes(1 << 20, 1024, 4), 4 * MIN_BLOCK);
        assert_eq!(bisect_bytes(1000 * 1024, 3, 3) % 256, 0);
    }

    #[test]
    fn render_names_nodes_links_and_the_clean_case() {
        let mut f = FindSlow {
            rounds: 2,
            pairs_tier_rounds: 7,
            pairs_total: 28,
            pairs_cleared: 28,
            largest_clearing_group: 8,
            ..Default::default()
        };
        let t = render(&f);
        assert!(t.contains("no slow node or link in 2 rounds"), "{t}");
        assert!(
            t.contains(
                "28 of 28 pairs exercised and cleared (node pairs), in alltoall groups of up to 8 nodes"
            ),
            "{t}"
        );
        // Fewer pairs cleared than there are: never an all-clear.
        f.pairs_cleared = 22;
        assert!(!f.clean());
        let t = render(&f);
        assert!(
            t.contains("not cleared: 6 pairs unexercised (of 28 node pairs), run --tiers pairs"),
            "{t}"
        );
        assert!(!t.contains("no slow node"), "{t}");
        f.pairs_cleared = 28;
        f.slow_nodes = vec!["node2".into()];
        f.pairs_cleared = 20;
        f.pairs_open = 1;
        f.slow_links = vec![("node0".into(), "node1".into())];
        let t = render(&f);
        assert!(t.contains("slow node node2"), "{t}");
        assert!(t.contains("slow link node0<->node1"), "{t}");
        assert!(t.contains("20 of 28 node pairs cleared, 7 explained by what is named above; 1 only in slow groups, not seen: run --tiers pairs"), "{t}");
        assert!(!f.clean());
    }

    #[test]
    fn the_doubted_reference_counts_at_its_worst_but_not_below_the_next_best() {
        let best = [0.0468, 0.0478, 0.0465, 0.0643];
        // by itself it read 0.055: that counts
        let worst = [0.0468, 0.0478, 0.0465, 0.055];
        assert_eq!(round_rates(&best, &worst, Some(3), 0.0)[3], 0.055);
        // by itself 0.046, or stuck low at 0.031: the next best (0.0478), never less
        for low in [0.046, 0.031] {
            let worst = [0.0468, 0.0478, 0.0465, low];
            let r = round_rates(&best, &worst, Some(3), 0.0);
            assert_eq!(r, [0.0468, 0.0478, 0.0465, 0.0478]);
        }
        // nothing doubted, or a doubted index out of range: the best of each
        assert_eq!(round_rates(&best, &best, None, 0.0), best);
        assert_eq!(round_rates(&best, &[0.0; 4], Some(9), 0.0), best);
        // never above its own best, even when the others read faster
        assert_eq!(
            round_rates(&[0.02, 0.05], &[0.01, 0.05], Some(0), 0.0)[0],
            0.02
        );
    }

    #[test]
    fn a_round_with_slow_groups_doubts_its_fastest_group_once() {
        // The CI round: three healthy pairs below 0.8 of one pair read too fast.
        let rates = [0.0468, 0.0478, 0.0465, 0.0643];
        let below = [true, true, true, false];
        assert_eq!(again(&rates, &below, true, 0.07), (vec![0, 1, 2], Some(3)));
        // Already doubted: the slow ones only.
        assert_eq!(again(&rates, &below, false, 0.0), (vec![0, 1, 2], None));
        // Nothing slow, nothing faster than the rounds before: nothing again.
        assert_eq!(again(&rates, &[false; 4], true, 0.07), (vec![], None));
        // Every group slow (against earlier rounds): no reference in this round.
        assert_eq!(
            again(&rates, &[true; 4], true, 0.0),
            (vec![0, 1, 2, 3], None)
        );
        // The reference is the fastest of those not below, wherever it sits.
        let rates = [0.05, 0.02, 0.049, 0.03];
        assert_eq!(
            again(&rates, &[false, true, false, true], true, 0.07),
            (vec![1, 3], Some(0))
        );
    }

    #[test]
    fn a_round_reading_faster_than_every_round_before_doubts_its_fastest_group() {
        // The CI hog run at 4:1: round 2 of a leaf's pairs, nothing slow in it, one
        // pair faster than all 8 before (best 0.0332): it is measured again.
        let rates = [0.0286, 0.0427, 0.0314, 0.0250];
        assert_eq!(again(&rates, &[false; 4], true, 0.0332), (vec![], Some(1)));
        // the first round has nothing before it
        assert_eq!(again(&rates, &[false; 4], true, 0.0), (vec![], Some(1)));
        // not above the best before, or already doubted: nothing
        assert_eq!(again(&rates, &[false; 4], true, 0.0427), (vec![], None));
        assert_eq!(again(&rates, &[false; 4], false, 0.0), (vec![], None));
        // doubted, it counts at its worst, never below the round's next best
        let r = round_rates(&rates, &[0.0286, 0.0301, 0.0314, 0.0250], Some(1), 0.0332);
        assert_eq!(r, [0.0286, 0.0332, 0.0314, 0.0250]);
        // a round of one group: at its worst, but not below the rounds before
        assert_eq!(round_rates(&[1.0], &[0.5], Some(0), 0.9), [0.9]);
        assert_eq!(round_rates(&[1.0], &[0.95], Some(0), 0.9), [0.95]);
        // a doubted group below the rounds before stays at its best
        assert_eq!(
            round_rates(&[0.5, 0.4], &[0.3, 0.4], Some(0), 0.9),
            [0.5, 0.4]
        );
    }
}
