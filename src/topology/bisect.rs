//! Finding the slow node or link in about log2(n) rounds (`--find-slow`), instead of
//! the pairs tier's n−1.
//!
//! Each round runs one all_reduce per group, every group at the same time (groups are
//! disjoint). A group is *slow* when its bus bandwidth is below `fraction` × the best
//! group bandwidth seen so far in the search (bus bandwidth does not depend on the
//! group's size for a ring, so a healthy half, quarter or pair reads the same), or
//! below the absolute `floor` when the card gives one.
//!
//! 1. **Split**: round 0 runs the whole job; round 1 splits it into quarters (halves
//!    below 8 nodes), so that one or two slow nodes still leave healthy groups to
//!    compare with; every later round splits each slow group in halves. A group that
//!    is not slow clears its nodes. Splitting stops at groups of 4 nodes or fewer.
//!    When a slow group's parts are all fast, the slow hop was one the split cut: the
//!    ring hops between the parts (last of one, first of the next) become suspects.
//! 2. **Pairs**: each suspect group of ≤ 4 nodes (topped up to 3 with cleared nodes,
//!    so every node has two partners) runs all its pairs, 3 rounds for every group at
//!    once. A node whose every pair is slow is a slow node; a slow pair of two nodes
//!    that are fast with someone else is a slow link.
//!
//! What it cannot see: a ring all_reduce crosses only the hops between neighbours in
//! the group's ring order (node order), so a slow link between two nodes that are
//! never neighbours in a group is on no ring; that is the pairs tier's job (`--tiers
//! pairs`). The planner is pure: `sweep` runs its rounds, the model bench
//! (`benches/bisect_model.rs`) runs it on modelled fabrics.
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Splitting stops at groups of this many nodes or fewer.
pub const LEAF_NODES: usize = 4;

/// One decision of the search, as the report shows the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Round number, from 0.
    pub round: usize,
    /// The group's node indices, ascending.
    pub nodes: Vec<usize>,
    /// Its bus bandwidth, GB/s.
    pub busbw_gbps: f64,
    /// The bandwidth it was judged against (fraction × best so far, or the floor), GB/s.
    pub threshold_gbps: f64,
    /// Below the threshold.
    pub slow: bool,
}

/// What the search found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Nodes whose every measured pair was slow, ascending.
    pub slow_nodes: Vec<usize>,
    /// Slow pairs of nodes that are each fast with another partner (a slow link).
    pub slow_links: Vec<(usize, usize)>,
    /// Slow groups the search could not separate further (too few nodes, or no pair
    /// of the group was slow on its own), each ascending.
    pub unresolved: Vec<Vec<usize>>,
    /// Rounds run.
    pub rounds: usize,
    /// Every group measured, in order.
    pub path: Vec<Decision>,
}

#[derive(Debug)]
enum Phase {
    Split,
    /// Pair rounds still to run (each a list of groups of two nodes).
    Pairs(Vec<Vec<Vec<usize>>>),
    Done,
}

/// The search's state between rounds: ask [`Bisection::next_round`] for the groups to
/// run, then give their bandwidths to [`Bisection::record`].
#[derive(Debug)]
pub struct Bisection {
    n: usize,
    fraction: f64,
    floor_gbps: Option<f64>,
    best_gbps: f64,
    suspects: Vec<Vec<usize>>,
    /// Suspects that are a hop a split cut (not groups measured slow themselves).
    cut_hops: BTreeSet<Vec<usize>>,
    cleared: BTreeSet<usize>,
    pending: Vec<Vec<usize>>,
    /// The groups split into `pending`: (its busbw, the indices of its parts there).
    parents: Vec<(f64, std::ops::Range<usize>)>,
    /// Each pair group, and whether it stands for a cut hop.
    pair_groups: Vec<(Vec<usize>, bool)>,
    /// The pair step's (a, b, rate), judged together once every pair has run.
    pair_results: Vec<(usize, usize, f64)>,
    /// The first round of the pair step.
    pair_round0: usize,
    phase: Phase,
    finding: Finding,
}

/// `items` cut into `k` contiguous parts of near-equal size (larger parts first).
fn split(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    let k = k.clamp(1, items.len().max(1));
    let (base, extra) = (items.len() / k, items.len() % k);
    let mut out = Vec::with_capacity(k);
    let mut at = 0;
    for i in 0..k {
        let len = base + usize::from(i < extra);
        out.push(items[at..at + len].to_vec());
        at += len;
    }
    out
}

impl Bisection {
    /// A search over nodes `0..n`; `fraction` is the outlier fraction (e.g. 0.8),
    /// `floor_gbps` the card's absolute minimum bus bandwidth, if any.
    pub fn new(n: usize, fraction: f64, floor_gbps: Option<f64>) -> Bisection {
        let all: Vec<usize> = (0..n).collect();
        let mut b = Bisection {
            n,
            fraction,
            floor_gbps,
            best_gbps: 0.0,
            suspects: Vec::new(),
            cut_hops: BTreeSet::new(),
            cleared: BTreeSet::new(),
            pending: Vec::new(),
            parents: Vec::new(),
            pair_groups: Vec::new(),
            pair_results: Vec::new(),
            pair_round0: 0,
            phase: Phase::Split,
            finding: Finding::default(),
        };
        if n < 2 {
            b.phase = Phase::Done;
        } else if n <= LEAF_NODES {
            // Too few to split: every pair at once.
            b.suspects = vec![all];
            b.start_pairs();
        } else {
            b.pending = vec![all];
        }
        b
    }

    /// The groups of the next round (node indices), or None when the search is over.
    pub fn next_round(&mut self) -> Option<Vec<Vec<usize>>> {
        match &mut self.phase {
            Phase::Done => None,
            Phase::Split => Some(self.pending.clone()),
            Phase::Pairs(rounds) => rounds.first().cloned(),
        }
    }

    fn threshold(&self) -> f64 {
        let rel = self.fraction * self.best_gbps;
        self.floor_gbps.map_or(rel, |f| rel.max(f))
    }

    /// The bus bandwidth (GB/s) of each group of the round [`Bisection::next_round`]
    /// returned, in its order (a group that failed: 0).
    pub fn record(&mut self, busbw_gbps: &[f64]) {
        let groups = match self.next_round() {
            Some(g) => g,
            None => return,
        };
        let round = self.finding.rounds;
        self.finding.rounds += 1;
        self.best_gbps = busbw_gbps.iter().copied().fold(self.best_gbps, f64::max);
        let threshold = self.threshold();
        let mut slow_flags = Vec::with_capacity(groups.len());
        for (g, &bw) in groups.iter().zip(busbw_gbps) {
            let slow = bw < threshold;
            self.finding.path.push(Decision {
                round,
                nodes: g.clone(),
                busbw_gbps: bw,
                threshold_gbps: threshold,
                slow,
            });
            slow_flags.push(slow);
            // Round 0's whole job is never "fast": nothing to compare it with yet.
            if !slow && round > 0 && matches!(self.phase, Phase::Split) {
                self.cleared.extend(g.iter().copied());
            }
            if let Phase::Pairs(_) = self.phase {
                self.pair_results.push((g[0], g[1], bw));
            }
        }
        match &mut self.phase {
            Phase::Split => self.after_split(&groups, busbw_gbps, &slow_flags),
            Phase::Pairs(rounds) => {
                rounds.remove(0);
                if rounds.is_empty() {
                    self.judge_pairs();
                }
            }
            Phase::Done => {}
        }
    }

    /// The next split round from the last one's slow groups (`slow[i]`: group i of
    /// `groups` was slow), or the pair step when every suspect is small.
    fn after_split(&mut self, groups: &[Vec<usize>], bw: &[f64], slow: &[bool]) {
        let threshold = self.threshold();
        for (parent_bw, parts) in std::mem::take(&mut self.parents) {
            if parent_bw < threshold && !slow[parts.clone()].iter().any(|s| *s) {
                self.suspect_cut_hops(&groups[parts]);
            }
        }
        let first_round = self.finding.rounds == 1;
        let mut next = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            if !(slow[i] || first_round) {
                continue;
            }
            if g.len() <= LEAF_NODES {
                self.suspects.push(g.clone());
                continue;
            }
            let k = if first_round && g.len() >= 8 { 4 } else { 2 };
            let parts = split(g, k);
            self.parents
                .push((bw[i], next.len()..next.len() + parts.len()));
            next.extend(parts);
        }
        if next.is_empty() {
            self.start_pairs();
        } else {
            self.pending = next;
        }
    }

    /// A slow group whose parts are all fast: the hops between consecutive parts
    /// (and from the last back to the first) are the suspects.
    fn suspect_cut_hops(&mut self, parts: &[Vec<usize>]) {
        for i in 0..parts.len() {
            let next = &parts[(i + 1) % parts.len()];
            if let (Some(&a), Some(&b)) = (parts[i].last(), next.first()) {
                if a != b {
                    let hop = vec![a.min(b), a.max(b)];
                    self.cut_hops.insert(hop.clone());
                    self.suspects.push(hop);
                }
            }
        }
    }

    /// Every pair of every suspect group (topped up to 3 nodes with cleared ones),
    /// merged into rounds of disjoint pairs.
    fn start_pairs(&mut self) {
        let busy: BTreeSet<usize> = self.suspects.iter().flatten().copied().collect();
        let mut spare: Vec<usize> = self.cleared.difference(&busy).copied().collect();
        let mut rounds: Vec<Vec<Vec<usize>>> = Vec::new();
        for s in std::mem::take(&mut self.suspects) {
            let mut g = s.clone();
            while g.len() < 3 {
                match spare.pop() {
                    Some(h) => g.push(h),
                    None => break,
                }
            }
            if g.len() < 3 {
                self.finding.unresolved.push(s);
                continue;
            }
            g.sort_unstable();
            let hop = self.cut_hops.contains(&s);
            for (r, pairs) in super::pair_rounds(g.len()).into_iter().enumerate() {
                if rounds.len() <= r {
                    rounds.push(Vec::new());
                }
                rounds[r].extend(pairs.into_iter().map(|(a, b)| vec![g[a], g[b]]));
            }
            self.pair_groups.push((g, hop));
        }
        self.pair_round0 = self.finding.rounds;
        self.phase = if rounds.is_empty() {
            Phase::Done
        } else {
            Phase::Pairs(rounds)
        };
    }

    /// Every pair against the best rate of the whole search (a pair step's first
    /// rounds had no fast pair to compare with yet).
    fn judge_pairs(&mut self) {
        let threshold = self.threshold();
        let first = self.pair_round0;
        for d in self.finding.path.iter_mut().filter(|d| d.round >= first) {
            d.threshold_gbps = threshold;
            d.slow = d.busbw_gbps < threshold;
        }
        let judged: Vec<(usize, usize, bool)> = self
            .pair_results
            .iter()
            .map(|&(a, b, bw)| (a, b, bw < threshold))
            .collect();
        // A cut hop whose pairs are all fast is cleared when another suspect explains
        // the slow group; a slow group whose pairs are all fast stays unresolved.
        let mut clean: Vec<(Vec<usize>, bool)> = Vec::new();
        for (g, hop) in std::mem::take(&mut self.pair_groups) {
            let inside = |&(a, b, _): &&(usize, usize, bool)| g.contains(a) && g.contains(b);
            let results: Vec<&(usize, usize, bool)> = judged.iter().filter(inside).collect();
            let node_slow = |x: usize| {
                let mine: Vec<_> = results.iter().filter(|r| r.0 == x || r.1 == x).collect();
                mine.len() >= 2 && mine.iter().all(|r| r.2)
            };
            let nodes: Vec<usize> = g.iter().copied().filter(|&x| node_slow(x)).collect();
            let links: Vec<(usize, usize)> = results
                .iter()
                .filter(|r| r.2 && !nodes.contains(&r.0) && !nodes.contains(&r.1))
                .map(|r| (r.0, r.1))
                .collect();
            if nodes.is_empty() && links.is_empty() {
                clean.push((g.clone(), hop));
            }
            self.finding.slow_nodes.extend(nodes);
            self.finding.slow_links.extend(links);
        }
        let explained = !(self.finding.slow_nodes.is_empty() && self.finding.slow_links.is_empty());
        for (g, hop) in clean {
            if !(hop && explained) {
                self.finding.unresolved.push(g);
            }
        }
        self.finding.slow_nodes.sort_unstable();
        self.finding.slow_nodes.dedup();
        self.finding.slow_links.sort_unstable();
        self.finding.slow_links.dedup();
        self.phase = Phase::Done;
    }

    /// Nodes in the search.
    pub fn nodes(&self) -> usize {
        self.n
    }

    /// What the search found so far (final once [`Bisection::next_round`] is None).
    pub fn finding(&self) -> &Finding {
        &self.finding
    }
}

/// A modelled fabric: per-node link rates and slow links, and the time of a ring
/// all_reduce on it (the model bench and the planner's tests use it).
#[derive(Clone, Debug)]
pub struct FabricModel {
    /// Each node's link rate, GB/s.
    pub node_gbps: Vec<f64>,
    /// Links (a < b) slower than both their nodes, GB/s.
    pub slow_links: Vec<(usize, usize, f64)>,
    /// Per-step latency of one ring hop, seconds.
    pub hop_latency_s: f64,
}

impl FabricModel {
    /// `n` nodes at `gbps` each, 5 µs per hop.
    pub fn uniform(n: usize, gbps: f64) -> FabricModel {
        FabricModel {
            node_gbps: vec![gbps; n],
            slow_links: Vec::new(),
            hop_latency_s: 5e-6,
        }
    }

    fn hop_gbps(&self, a: usize, b: usize) -> f64 {
        let (lo, hi) = (a.min(b), a.max(b));
        let link = self
            .slow_links
            .iter()
            .find(|l| l.0 == lo && l.1 == hi)
            .map_or(f64::INFINITY, |l| l.2);
        self.node_gbps[a].min(self.node_gbps[b]).min(link)
    }

    /// Seconds of a ring all_reduce of `bytes` over `group` (ring in the given order):
    /// 2(k−1) steps of bytes/k each, paced by the slowest hop.
    pub fn ring_seconds(&self, group: &[usize], bytes: f64) -> f64 {
        let k = group.len();
        if k < 2 {
            return 0.0;
        }
        let slowest = (0..k)
            .map(|i| self.hop_gbps(group[i], group[(i + 1) % k]))
            .fold(f64::INFINITY, f64::min);
        let steps = 2.0 * (k as f64 - 1.0);
        steps * (bytes / k as f64 / (slowest * 1e9) + self.hop_latency_s)
    }

    /// nccl-tests' bus bandwidth of that all_reduce, GB/s.
    pub fn ring_busbw_gbps(&self, group: &[usize], bytes: f64) -> f64 {
        let k = group.len() as f64;
        let t = self.ring_seconds(group, bytes);
        if t <= 0.0 {
            return 0.0;
        }
        bytes / t / 1e9 * 2.0 * (k - 1.0) / k
    }
}

/// Run the whole search on a model: the finding and the modelled seconds (each round
/// lasts as long as its slowest group, `iters` all_reduces of `bytes`).
pub fn run_on_model(model: &FabricModel, fraction: f64, bytes: f64, iters: u32) -> (Finding, f64) {
    let mut b = Bisection::new(model.node_gbps.len(), fraction, None);
    let mut seconds = 0.0;
    let mut guard = 0;
    while let Some(groups) = b.next_round() {
        guard += 1;
        if guard > 4 * model.node_gbps.len() + 8 {
            break; // cannot happen: every round shrinks the search
        }
        let bw: Vec<f64> = groups
            .iter()
            .map(|g| model.ring_busbw_gbps(g, bytes))
            .collect();
        seconds += groups
            .iter()
            .map(|g| model.ring_seconds(g, bytes))
            .fold(0.0, f64::max)
            * f64::from(iters);
        b.record(&bw);
    }
    (b.finding().clone(), seconds)
}

/// The pairs tier on the same model: its rounds and modelled seconds.
pub fn pairs_tier_on_model(model: &FabricModel, bytes: f64, iters: u32) -> (usize, f64) {
    let rounds = super::pair_rounds(model.node_gbps.len());
    let seconds: f64 = rounds
        .iter()
        .map(|r| {
            r.iter()
                .map(|&(a, b)| model.ring_seconds(&[a, b], bytes))
                .fold(0.0, f64::max)
        })
        .sum::<f64>()
        * f64::from(iters);
    (rounds.len(), seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: f64 = 256.0 * 1024.0 * 1024.0;

    fn slow_nodes(n: usize, slow: &[usize]) -> FabricModel {
        let mut m = FabricModel::uniform(n, 50.0);
        for &s in slow {
            m.node_gbps[s] = 20.0;
        }
        m
    }

    #[test]
    fn split_is_contiguous_and_near_equal() {
        let v: Vec<usize> = (0..7).collect();
        assert_eq!(split(&v, 2), vec![vec![0, 1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(
            split(&v, 4),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6]]
        );
    }

    #[test]
    fn one_slow_node_is_named_among_every_size_with_few_rounds() {
        for n in [3usize, 4, 5, 6, 7, 8, 9, 16, 33, 64, 1024] {
            for slow in [0, n / 2, n - 1] {
                let (f, _) = run_on_model(&slow_nodes(n, &[slow]), 0.8, BYTES, 1);
                assert_eq!(f.slow_nodes, vec![slow], "n={n} slow={slow}: {f:?}");
                assert!(f.slow_links.is_empty(), "n={n}: {f:?}");
                let bound = 2.0 * (n as f64).log2();
                assert!(
                    (f.rounds as f64) <= bound.max(5.0),
                    "n={n}: {} rounds",
                    f.rounds
                );
            }
        }
    }

    #[test]
    fn a_healthy_fabric_ends_after_two_rounds_with_nothing_named() {
        let (f, _) = run_on_model(&FabricModel::uniform(64, 50.0), 0.8, BYTES, 1);
        assert_eq!(f.rounds, 2, "the whole job, then its quarters");
        assert!(f.slow_nodes.is_empty() && f.slow_links.is_empty() && f.unresolved.is_empty());
        assert_eq!(f.path.len(), 5);
        assert!(f.path.iter().all(|d| !d.slow));
    }

    #[test]
    fn two_slow_nodes_in_different_or_the_same_quarter_are_both_named() {
        for slow in [[3usize, 40], [3, 5], [10, 11]] {
            let (f, _) = run_on_model(&slow_nodes(64, &slow), 0.8, BYTES, 1);
            assert_eq!(f.slow_nodes, slow.to_vec(), "{slow:?}: {f:?}");
        }
    }

    #[test]
    fn a_slow_link_between_neighbours_is_named_as_a_pair() {
        // 3-4 and 31-32 lie on cuts between parts: found through the cut hops.
        for (n, a) in [
            (16usize, 5usize),
            (16, 3),
            (64, 20),
            (64, 31),
            (6, 2),
            (1024, 700),
        ] {
            let mut m = FabricModel::uniform(n, 50.0);
            m.slow_links.push((a, a + 1, 10.0));
            let (f, _) = run_on_model(&m, 0.8, BYTES, 1);
            assert_eq!(f.slow_links, vec![(a, a + 1)], "n={n}: {f:?}");
            assert!(f.slow_nodes.is_empty(), "n={n}: {f:?}");
            // The other cut hops' pairs were fast: cleared, not left unresolved.
            assert!(f.unresolved.is_empty(), "n={n}: {f:?}");
        }
    }

    #[test]
    fn bisection_is_a_small_share_of_the_pairs_tier_at_1024_nodes() {
        let m = slow_nodes(1024, &[777]);
        let (f, t) = run_on_model(&m, 0.8, BYTES, 20);
        let (pair_rounds, pair_t) = pairs_tier_on_model(&m, BYTES, 20);
        assert_eq!(pair_rounds, 1023);
        assert!(f.rounds <= 20, "{} rounds", f.rounds);
        assert!(t < 0.05 * pair_t, "{t} s vs pairs {pair_t} s");
    }

    #[test]
    fn the_ring_model_matches_nccl_tests_busbw_convention() {
        let m = FabricModel {
            hop_latency_s: 0.0,
            ..FabricModel::uniform(8, 25.0)
        };
        let g: Vec<usize> = (0..8).collect();
        // busbw of a ring paced by 25 GB/s links is 25 GB/s, whatever the size.
        assert!((m.ring_busbw_gbps(&g, BYTES) - 25.0).abs() < 1e-9);
        assert!((m.ring_busbw_gbps(&g[..2], BYTES) - 25.0).abs() < 1e-9);
    }

    #[test]
    fn a_floor_finds_a_uniformly_slow_fabric_and_two_nodes_cannot_be_split() {
        let mut b = Bisection::new(8, 0.8, Some(40.0));
        let g = b.next_round().unwrap_or_default();
        b.record(&vec![20.0; g.len()]);
        assert!(b.finding().path.iter().all(|d| d.slow));
        let mut two = Bisection::new(2, 0.8, None);
        let g = two.next_round().unwrap_or_default();
        assert!(g.is_empty() || g.len() == 1);
        assert!(Bisection::new(1, 0.8, None).next_round().is_none());
    }
}
