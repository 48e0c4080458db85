//! `--find-slow` on a fabric of leaf switches: the bisection search of
//! [`super::bisect`] inside every leaf at once, then the leaves against each other.
//!
//! A group that crosses leaves runs at what the uplinks allow it, which on an
//! oversubscribed fabric is less than a group inside one leaf: judged against groups
//! inside a leaf, healthy cross-leaf groups would be named slow. So:
//!
//! 1. **Inside.** One search per leaf, all in the same rounds (their groups never leave
//!    their leaf, so no uplink carries anything). Every group inside a leaf is of one
//!    class, so each leaf's groups are judged against the rates of every leaf's groups
//!    (a leaf of two nodes has a reference too).
//! 2. **Across.** Then the leaves two by two, in the circle method's rounds: each
//!    group is two whole leaves (without the nodes the first phase named), so every
//!    uplink of a round carries one group's traffic. A group's rate is divided by its
//!    *allowance* — what the declared oversubscription lets an alltoall of a·b nodes
//!    reach: a node of leaf A sends b/(a+b−1) of its traffic across, and A's uplink
//!    carries a/R node links, so the rate is at most (a+b−1)/(b·R) of a node link
//!    (1 on a non-blocking fabric), and less when the alltoall runs as pairwise steps
//!    whose crossings bunch up ([`pairwise_allowance`]; the lower of the two) — and
//!    judged against the best group inside a leaf
//!    (times [`DECLARED_SLACK`]) when the fabric declares its oversubscription, else
//!    against the best of the
//!    cross groups (three at least; with fewer, nothing to compare with: cleared and
//!    said so). A leaf slow with every partner, where a partner of it is fast with
//!    another leaf, has a slow uplink; leaves slow with every partner that cannot be
//!    told apart are named together; a slow group explained by neither is left
//!    unresolved.
//!
//! Pure, like the search it runs: `sweep::find_slow` measures the groups.
use super::bisect::{Bisection, Decision, Finding};
use super::pair_rounds;

/// Where a group of the current round came from.
#[derive(Clone, Debug)]
enum Member {
    /// The search of leaf `search` (an index into `inner`).
    Inner { search: usize },
    /// Leaves `a` and `b` together (indices into `leaves`).
    Cross {
        a: usize,
        b: usize,
        nodes: Vec<usize>,
    },
}

/// A group that ran: decision `decision` of inner search `search`, or cross group
/// `cross`.
#[derive(Clone, Copy, Debug)]
enum Ran {
    Inner { search: usize, decision: usize },
    Cross(usize),
}

/// One measured group of two leaves.
#[derive(Clone, Debug)]
struct Cross {
    a: usize,
    b: usize,
    nodes: Vec<usize>,
    round: usize,
    rate: f64,
    allowance: f64,
}

/// The search over a fabric's leaves (see the module's text).
#[derive(Debug)]
pub struct FabricSearch {
    n: usize,
    fraction: f64,
    floor_gbps: Option<f64>,
    oversubscription: Option<f64>,
    leaves: Vec<Vec<usize>>,
    /// Each node's ranks in a group (world ranks; one each unless told,
    /// [`FabricSearch::set_ranks`]): a group's communicator orders its ranks by world
    /// rank, which decides what each step of a pairwise alltoall sends where.
    node_ranks: Vec<Vec<usize>>,
    /// (leaf, its search) for every leaf of two nodes or more.
    inner: Vec<(usize, Bisection)>,
    /// Leaf-pair rounds still to run; None while the inside phase runs.
    across: Option<Vec<Vec<(usize, usize)>>>,
    current: Vec<Member>,
    /// The groups in the order they ran, with their global round.
    order: Vec<(usize, Ran)>,
    cross: Vec<Cross>,
    rounds: usize,
    /// Leaf sets whose uplinks are slow (one leaf, or several not told apart).
    slow_uplinks: Vec<Vec<usize>>,
    notes: Vec<String>,
    finding: Option<Finding>,
}

/// A cross group is judged against the declared allowance times this as well as the
/// outlier fraction: the allowance models links only (every flow its fair share, no
/// cost of its own), and an alltoall of a whole leaf pair pays its own cost on top —
/// healthy 4:1 cross groups of 8 nodes ran as low as 0.77 of the fluid bound (0.92 of
/// the pairwise one) on the simulated cluster (TCP shares an uplink unevenly, 8 ranks
/// on 2 cores), judged against pairs inside a leaf; at 2:1 in interleaved rack order
/// they ran at 0.48 of a node link, 0.55 of the fluid bound and 0.75 of the pairwise
/// one. A uniformly slow uplink at half its declared rate is still named.
pub const DECLARED_SLACK: f64 = 0.75;

/// What an alltoall over leaves of `a` and `b` nodes may reach as a fraction of a node
/// link when every leaf's uplink carries its node links over `r` (see the module).
pub fn cross_allowance(a: usize, b: usize, r: f64) -> f64 {
    if a == 0 || b == 0 || r <= 0.0 {
        return 1.0;
    }
    let k = (a + b - 1) as f64;
    (k / (b as f64 * r)).min(k / (a as f64 * r)).min(1.0)
}

/// What a pairwise-exchange alltoall (Open MPI's choice for large blocks: at step k
/// rank i sends to rank i+k and receives from rank i−k, the steps one after another)
/// may reach as a fraction of a node link, ranks in communicator order on the nodes
/// `seq` (node index per rank), nodes on the leaves `leaf_of`, each leaf's uplink
/// carrying its `sizes[l]` node links over `r`. A step lasts as long as its busiest
/// link: a node link carrying f flows f blocks, an uplink f·r/size blocks. The
/// fraction is the steps' time on a non-blocking fabric over their time on this one.
/// In an order where a step sends every rank across the leaves (racks interleaved:
/// node0, node2, … on one leaf), that step loads each uplink with the whole leaf while
/// the next loads none: 7/11 of a node link for two leaves of 4 at 2:1, where the fluid
/// bound ([`cross_allowance`]) says 7/8.
pub fn pairwise_allowance(seq: &[usize], leaf_of: &[usize], sizes: &[usize], r: f64) -> f64 {
    let m = seq.len();
    if m < 2 || r <= 0.0 {
        return 1.0;
    }
    let leaf = |x: usize| leaf_of.get(x).copied().unwrap_or(usize::MAX);
    let (mut flat, mut here) = (0.0, 0.0);
    for k in 1..m {
        let mut node_out = std::collections::BTreeMap::<usize, usize>::new();
        let mut node_in = std::collections::BTreeMap::<usize, usize>::new();
        let mut up = std::collections::BTreeMap::<(usize, bool), usize>::new();
        for (i, &src) in seq.iter().enumerate() {
            let dst = seq[(i + k) % m];
            if src == dst {
                continue; // inside one node: shared memory
            }
            *node_out.entry(src).or_default() += 1;
            *node_in.entry(dst).or_default() += 1;
            let (ls, ld) = (leaf(src), leaf(dst));
            if ls != ld {
                *up.entry((ls, true)).or_default() += 1;
                *up.entry((ld, false)).or_default() += 1;
            }
        }
        let nodes = node_out
            .values()
            .chain(node_in.values())
            .copied()
            .max()
            .unwrap_or(0) as f64;
        let uplinks = up
            .iter()
            .map(|(&(l, _), &f)| {
                let size = sizes.get(l).copied().unwrap_or(0).max(1) as f64;
                f as f64 * r / size
            })
            .fold(0.0, f64::max);
        flat += nodes;
        here += nodes.max(uplinks);
    }
    if here > 0.0 {
        (flat / here).min(1.0)
    } else {
        1.0
    }
}

impl FabricSearch {
    /// A search over nodes `0..n` hung from `leaves` (node indices each; every node in
    /// exactly one), judged at `fraction` (and `floor_gbps`, if any); the fabric's
    /// declared oversubscription, if any. One leaf is the flat search.
    pub fn new(
        n: usize,
        leaves: Vec<Vec<usize>>,
        fraction: f64,
        floor_gbps: Option<f64>,
        oversubscription: Option<f64>,
    ) -> FabricSearch {
        let leaves: Vec<Vec<usize>> = leaves.into_iter().filter(|l| !l.is_empty()).collect();
        let inner = leaves
            .iter()
            .enumerate()
            .filter(|(_, l)| l.len() >= 2)
            .map(|(i, l)| (i, Bisection::new(l.len(), fraction, floor_gbps)))
            .collect();
        FabricSearch {
            n,
            fraction,
            floor_gbps,
            oversubscription,
            leaves,
            node_ranks: (0..n).map(|i| vec![i]).collect(),
            inner,
            across: None,
            current: Vec::new(),
            order: Vec::new(),
            cross: Vec::new(),
            rounds: 0,
            slow_uplinks: Vec::new(),
            notes: Vec::new(),
            finding: None,
        }
    }

    /// Each node's ranks in the search's groups (world ranks, as the groups take
    /// them); ignored unless one list per node.
    pub fn set_ranks(&mut self, node_ranks: Vec<Vec<usize>>) {
        if node_ranks.len() == self.n && node_ranks.iter().all(|r| !r.is_empty()) {
            self.node_ranks = node_ranks;
        }
    }

    /// Nodes in the search.
    pub fn nodes(&self) -> usize {
        self.n
    }

    /// The leaves (node indices each), as given less empty ones.
    pub fn leaves(&self) -> &[Vec<usize>] {
        &self.leaves
    }

    /// The groups of the next round (node indices), or None when the search is over.
    pub fn next_round(&mut self) -> Option<Vec<Vec<usize>>> {
        if self.finding.is_some() {
            return None;
        }
        if self.current.is_empty() {
            self.plan_round();
        }
        if self.current.is_empty() {
            self.finish();
            return None;
        }
        Some(self.current_groups())
    }

    fn current_groups(&self) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        let mut done = vec![false; self.inner.len()];
        for m in &self.current {
            match m {
                Member::Inner { search } if !done[*search] => {
                    done[*search] = true;
                    let (leaf, s) = &self.inner[*search];
                    for g in s.current_groups() {
                        out.push(g.iter().map(|&x| self.leaves[*leaf][x]).collect());
                    }
                }
                Member::Inner { .. } => {}
                Member::Cross { nodes, .. } => out.push(nodes.clone()),
            }
        }
        out
    }

    fn plan_round(&mut self) {
        if self.across.is_none() {
            for (i, (_, s)) in self.inner.iter_mut().enumerate() {
                if let Some(groups) = s.next_round() {
                    self.current
                        .extend(groups.iter().map(|_| Member::Inner { search: i }));
                }
            }
            if !self.current.is_empty() {
                return;
            }
            self.across = Some(self.across_rounds());
        }
        while self.current.is_empty() {
            let Some(round) = self
                .across
                .as_mut()
                .filter(|a| !a.is_empty())
                .map(|a| a.remove(0))
            else {
                return;
            };
            for (a, b) in round {
                let nodes = self.cross_nodes(a, b);
                if !nodes.is_empty() {
                    self.current.push(Member::Cross { a, b, nodes });
                }
            }
        }
    }

    /// Nodes the inside phase named (slow nodes, both ends of slow links, unresolved
    /// groups): left out of the cross groups, which they would slow.
    fn named_inside(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (leaf, s) in &self.inner {
            let f = s.finding();
            let local = f
                .slow_nodes
                .iter()
                .copied()
                .chain(f.slow_links.iter().flat_map(|&(a, b)| [a, b]))
                .chain(f.unresolved.iter().flatten().copied());
            out.extend(local.map(|x| self.leaves[*leaf][x]));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn across_rounds(&self) -> Vec<Vec<(usize, usize)>> {
        if self.leaves.len() < 2 {
            return Vec::new();
        }
        pair_rounds(self.leaves.len())
    }

    fn cross_nodes(&self, a: usize, b: usize) -> Vec<usize> {
        let named = self.named_inside();
        let keep = |l: usize| -> Vec<usize> {
            self.leaves[l]
                .iter()
                .copied()
                .filter(|x| !named.contains(x))
                .collect()
        };
        let (x, y) = (keep(a), keep(b));
        if x.is_empty() || y.is_empty() {
            return Vec::new();
        }
        let mut v: Vec<usize> = x.into_iter().chain(y).collect();
        v.sort_unstable();
        v
    }

    /// The best rate of any group inside a leaf, GB/s (0: none ran).
    fn best_inside(&self) -> f64 {
        self.inner
            .iter()
            .flat_map(|(_, s)| s.seen().iter().map(|p| p.1))
            .fold(0.0, f64::max)
    }

    fn allowance(&self, a: usize, b: usize, nodes: &[usize]) -> f64 {
        let Some(r) = self.oversubscription else {
            return 1.0;
        };
        let count = |l: usize| nodes.iter().filter(|x| self.leaves[l].contains(x)).count();
        let mut ranks: Vec<(usize, usize)> = nodes
            .iter()
            .flat_map(|&x| self.node_ranks[x].iter().map(move |&rank| (rank, x)))
            .collect();
        ranks.sort_unstable();
        let seq: Vec<usize> = ranks.into_iter().map(|(_, x)| x).collect();
        let leaf_of: Vec<usize> = (0..self.n)
            .map(|x| self.leaf_of(x).unwrap_or(usize::MAX))
            .collect();
        let sizes: Vec<usize> = self.leaves.iter().map(|l| l.len()).collect();
        cross_allowance(count(a), count(b), r).min(pairwise_allowance(&seq, &leaf_of, &sizes, r))
    }

    /// The rate a cross group's normalised rate (rate / allowance) is judged against,
    /// over the cross groups `crosses` (None: nothing to compare with).
    fn cross_reference(&self, crosses: &[(f64, f64)], planned: usize) -> Option<f64> {
        let inside = self.best_inside();
        if self.oversubscription.is_some() && inside > 0.0 {
            return Some(inside * DECLARED_SLACK);
        }
        if planned < 3 {
            return None;
        }
        let best = crosses
            .iter()
            .map(|&(rate, allow)| rate / allow)
            .fold(0.0, f64::max);
        (best > 0.0).then_some(best)
    }

    fn cross_threshold(&self, reference: Option<f64>, allowance: f64) -> f64 {
        let rel = reference.map_or(0.0, |r| self.fraction * r * allowance);
        self.floor_gbps.map_or(rel, |f| rel.max(f))
    }

    fn planned_cross(&self) -> usize {
        let leaves = self.leaves.len();
        leaves * leaves.saturating_sub(1) / 2
    }

    /// Rates of every inside group of the leaves other than `except`'s, this round's
    /// included (`now`: the round's rates by search).
    fn peers(&self, except: usize, now: &[Vec<f64>]) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        for (i, (_, s)) in self.inner.iter().enumerate() {
            if i == except {
                continue;
            }
            out.extend_from_slice(s.seen());
            let sizes = s.current_groups();
            out.extend(sizes.iter().zip(&now[i]).map(|(g, &r)| (g.len(), r)));
        }
        out
    }

    /// The round's rates split by inside search (in the order of `current_groups`).
    fn split_rates(&self, rates: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut by_search = vec![Vec::new(); self.inner.len()];
        let mut cross = Vec::new();
        let mut at = 0;
        let mut done = vec![false; self.inner.len()];
        for m in &self.current {
            match m {
                Member::Inner { search } if !done[*search] => {
                    done[*search] = true;
                    let k = self.inner[*search].1.current_groups().len();
                    for _ in 0..k {
                        by_search[*search].push(rates.get(at).copied().unwrap_or(0.0));
                        at += 1;
                    }
                }
                Member::Inner { .. } => {}
                Member::Cross { .. } => {
                    cross.push(rates.get(at).copied().unwrap_or(0.0));
                    at += 1;
                }
            }
        }
        (by_search, cross)
    }

    /// Which groups of the round [`FabricSearch::next_round`] returned would be judged
    /// slow if `rates_gbps` were recorded now (the driver measures those again). Pure.
    pub fn below_threshold(&mut self, rates_gbps: &[f64]) -> Vec<bool> {
        let (by_search, cross_rates) = self.split_rates(rates_gbps);
        let mut out = Vec::new();
        let mut done = vec![false; self.inner.len()];
        let mut ci = 0;
        let crosses: Vec<(f64, f64)> = self.cross.iter().map(|c| (c.rate, c.allowance)).collect();
        let members = self.current.clone();
        let mut now_cross = crosses.clone();
        for (m, &r) in members
            .iter()
            .filter(|m| matches!(m, Member::Cross { .. }))
            .zip(&cross_rates)
        {
            if let Member::Cross { a, b, nodes } = m {
                now_cross.push((r, self.allowance(*a, *b, nodes)));
            }
        }
        let reference = self.cross_reference(&now_cross, self.planned_cross());
        for m in &members {
            match m {
                Member::Inner { search } if !done[*search] => {
                    done[*search] = true;
                    let peers = self.peers(*search, &by_search);
                    let s = &mut self.inner[*search].1;
                    s.set_peers(peers);
                    out.extend(s.below_threshold(&by_search[*search]));
                }
                Member::Inner { .. } => {}
                Member::Cross { a, b, nodes } => {
                    let allow = self.allowance(*a, *b, nodes);
                    let t = self.cross_threshold(reference, allow);
                    out.push(cross_rates[ci] < t);
                    ci += 1;
                }
            }
        }
        out
    }

    /// The rate (GB/s) of each group of the round [`FabricSearch::next_round`] returned,
    /// in its order (a group that failed: 0).
    pub fn record(&mut self, rates_gbps: &[f64]) {
        if self.current.is_empty() && self.next_round().is_none() {
            return;
        }
        let (by_search, cross_rates) = self.split_rates(rates_gbps);
        let round = self.rounds;
        self.rounds += 1;
        let members = std::mem::take(&mut self.current);
        let peers: Vec<Vec<(usize, f64)>> = (0..self.inner.len())
            .map(|i| self.peers(i, &by_search))
            .collect();
        let mut done = vec![false; self.inner.len()];
        let mut ci = 0;
        for m in members {
            match m {
                Member::Inner { search } if !done[search] => {
                    done[search] = true;
                    let s = &mut self.inner[search].1;
                    let first = s.finding().path.len();
                    s.set_peers(peers[search].clone());
                    s.record(&by_search[search]);
                    let last = s.finding().path.len();
                    self.order.extend(
                        (first..last).map(|decision| (round, Ran::Inner { search, decision })),
                    );
                }
                Member::Inner { .. } => {}
                Member::Cross { a, b, nodes } => {
                    let allowance = self.allowance(a, b, &nodes);
                    self.order.push((round, Ran::Cross(self.cross.len())));
                    self.cross.push(Cross {
                        a,
                        b,
                        nodes,
                        round,
                        rate: cross_rates[ci],
                        allowance,
                    });
                    ci += 1;
                }
            }
        }
        // Keep every leaf's peers current for the judgements its jobs make later.
        let all: Vec<Vec<(usize, f64)>> = (0..self.inner.len())
            .map(|i| self.peers(i, &vec![Vec::new(); self.inner.len()]))
            .collect();
        for (i, p) in all.into_iter().enumerate() {
            self.inner[i].1.set_peers(p);
        }
    }

    /// What the search found (final once [`FabricSearch::next_round`] is None).
    pub fn finding(&self) -> Finding {
        self.finding.clone().unwrap_or_default()
    }

    /// Leaf sets (indices into [`FabricSearch::leaves`]) whose uplink is slow: one
    /// leaf, or several whose uplinks the measurements cannot tell apart.
    pub fn slow_uplinks(&self) -> &[Vec<usize>] {
        &self.slow_uplinks
    }

    /// What the search could not judge, said.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The cross groups judged: (leaf a, leaf b, rate, threshold, slow).
    fn judge_cross(&mut self) -> Vec<bool> {
        let crosses: Vec<(f64, f64)> = self.cross.iter().map(|c| (c.rate, c.allowance)).collect();
        let reference = self.cross_reference(&crosses, self.cross.len());
        if reference.is_none() && self.floor_gbps.is_none() && !self.cross.is_empty() {
            self.notes.push(format!(
                "{} group(s) across leaves ran but were not judged: with no oversubscription declared and fewer than three leaf pairs, nothing runs as they should (declare the fabric's oversubscription to judge its uplinks)",
                self.cross.len()
            ));
        }
        self.cross
            .iter()
            .map(|c| c.rate < self.cross_threshold(reference, c.allowance))
            .collect()
    }

    fn finish(&mut self) {
        let slow = self.judge_cross();
        let crosses: Vec<(f64, f64)> = self.cross.iter().map(|c| (c.rate, c.allowance)).collect();
        let reference = self.cross_reference(&crosses, self.cross.len());
        let mut f = Finding {
            rounds: self.rounds,
            pairs_total: self.n * self.n.saturating_sub(1) / 2,
            ..Finding::default()
        };
        let mut cleared = vec![false; f.pairs_total];
        let idx = |i: usize, j: usize, n: usize| {
            let (i, j) = (i.min(j), i.max(j));
            i * n - i * (i + 1) / 2 + (j - i - 1)
        };
        for (round, at) in &self.order {
            let d = match at {
                Ran::Inner { search, decision } => {
                    let (leaf, search) = &self.inner[*search];
                    let mut d = search.finding().path[*decision].clone();
                    d.nodes = d.nodes.iter().map(|&x| self.leaves[*leaf][x]).collect();
                    d
                }
                Ran::Cross(c) => {
                    let c = &self.cross[*c];
                    Decision {
                        round: c.round,
                        nodes: c.nodes.clone(),
                        busbw_gbps: c.rate,
                        threshold_gbps: self.cross_threshold(reference, c.allowance),
                        slow: false,
                    }
                }
            };
            let mut d = d;
            d.round = *round;
            if let Ran::Cross(c) = at {
                d.slow = slow[*c];
            }
            if !d.slow {
                for (x, &i) in d.nodes.iter().enumerate() {
                    for &j in &d.nodes[x + 1..] {
                        cleared[idx(i, j, self.n)] = true;
                    }
                }
                f.largest_clearing_group = f.largest_clearing_group.max(d.nodes.len());
            }
            f.path.push(d);
        }
        for (leaf, s) in &self.inner {
            let g = s.finding();
            let map = |x: usize| self.leaves[*leaf][x];
            f.slow_nodes.extend(g.slow_nodes.iter().map(|&x| map(x)));
            f.slow_links
                .extend(g.slow_links.iter().map(|&(a, b)| (map(a), map(b))));
            f.unresolved.extend(
                g.unresolved
                    .iter()
                    .map(|u| u.iter().map(|&x| map(x)).collect()),
            );
        }
        self.name_uplinks(&slow, &mut f);
        f.slow_nodes.sort_unstable();
        f.slow_links.sort_unstable();
        f.unresolved.sort();
        f.pairs_cleared = cleared.iter().filter(|&&c| c).count();
        let mut open = 0;
        for i in 0..self.n {
            for j in i + 1..self.n {
                let explained = f.slow_nodes.contains(&i)
                    || f.slow_nodes.contains(&j)
                    || f.slow_links.contains(&(i, j))
                    || self.under_slow_uplink(i, j);
                if !cleared[idx(i, j, self.n)] && !explained {
                    open += 1;
                }
            }
        }
        f.pairs_open = open;
        self.finding = Some(f);
    }

    fn leaf_of(&self, x: usize) -> Option<usize> {
        self.leaves.iter().position(|l| l.contains(&x))
    }

    fn under_slow_uplink(&self, i: usize, j: usize) -> bool {
        let (Some(a), Some(b)) = (self.leaf_of(i), self.leaf_of(j)) else {
            return false;
        };
        a != b
            && self
                .slow_uplinks
                .iter()
                .any(|s| s.contains(&a) || s.contains(&b))
    }

    /// Leaves slow with every partner: alone where a partner is fast elsewhere, else
    /// together; slow groups neither explains stay unresolved.
    fn name_uplinks(&mut self, slow: &[bool], f: &mut Finding) {
        let leaves = self.leaves.len();
        let groups_of = |l: usize| -> Vec<usize> {
            (0..self.cross.len())
                .filter(|&c| self.cross[c].a == l || self.cross[c].b == l)
                .collect()
        };
        let all_slow: Vec<bool> = (0..leaves)
            .map(|l| {
                let g = groups_of(l);
                !g.is_empty() && g.iter().all(|&c| slow[c])
            })
            .collect();
        let has_fast = |l: usize| groups_of(l).iter().any(|&c| !slow[c]);
        let alone: Vec<usize> = (0..leaves)
            .filter(|&l| {
                all_slow[l]
                    && groups_of(l).iter().any(|&c| {
                        let p = if self.cross[c].a == l {
                            self.cross[c].b
                        } else {
                            self.cross[c].a
                        };
                        has_fast(p)
                    })
            })
            .collect();
        if !alone.is_empty() {
            self.slow_uplinks = alone.iter().map(|&l| vec![l]).collect();
        } else {
            let together: Vec<usize> = (0..leaves).filter(|&l| all_slow[l]).collect();
            if !together.is_empty() {
                self.slow_uplinks = vec![together];
            }
        }
        let named: Vec<usize> = self.slow_uplinks.iter().flatten().copied().collect();
        for (c, cross) in self.cross.iter().enumerate() {
            if slow[c] && !named.contains(&cross.a) && !named.contains(&cross.b) {
                f.unresolved.push(cross.nodes.clone());
            }
        }
    }
}

/// A leaf/spine fabric on paper, for the tests and the model bench
/// (`benches/fabric_model.rs`): node link rates, the leaves, each leaf's uplink, and
/// slow links between two nodes.
#[derive(Clone, Debug)]
pub struct LeafSpineModel {
    /// Each node's link rate, GB/s.
    pub node: Vec<f64>,
    /// Node indices per leaf.
    pub leaves: Vec<Vec<usize>>,
    /// Each leaf's uplink, GB/s each way.
    pub uplink: Vec<f64>,
    /// Node pairs (a < b) whose path is slower than both nodes, GB/s.
    pub slow_pairs: Vec<(usize, usize, f64)>,
}

impl LeafSpineModel {
    /// `leaves` leaves of `k` nodes at 10 GB/s, nodes dealt out in turn (node i on leaf
    /// i % leaves), each uplink k·10/r.
    pub fn new(leaves: usize, k: usize, r: f64) -> LeafSpineModel {
        LeafSpineModel {
            node: vec![10.0; leaves * k],
            leaves: (0..leaves)
                .map(|l| (0..k).map(|i| i * leaves + l).collect())
                .collect(),
            uplink: vec![k as f64 * 10.0 / r; leaves],
            slow_pairs: Vec::new(),
        }
    }

    /// The same in rack order: node i on leaf i / k.
    pub fn racked(leaves: usize, k: usize, r: f64) -> LeafSpineModel {
        let mut m = LeafSpineModel::new(leaves, k, r);
        m.leaves = (0..leaves)
            .map(|l| (0..k).map(|i| l * k + i).collect())
            .collect();
        m
    }

    fn leaf(&self, x: usize) -> usize {
        self.leaves.iter().position(|l| l.contains(&x)).unwrap_or(0)
    }

    /// Each group's alltoall node rate in a round (every block at once): its slowest
    /// node; a slow pair inside it, which carries one of a node's k−1 blocks, at
    /// (k−1)× its rate; and each uplink it crosses, shared with the round's other
    /// groups by what each puts on it.
    pub fn rates(&self, groups: &[Vec<usize>]) -> Vec<f64> {
        let leaf_of: Vec<usize> = (0..self.node.len()).map(|x| self.leaf(x)).collect();
        let mut load = vec![0.0; self.leaves.len()];
        let shares: Vec<Vec<(usize, f64)>> = groups
            .iter()
            .map(|g| {
                let k = g.len() as f64;
                let mut per: std::collections::BTreeMap<usize, f64> = Default::default();
                for &x in g {
                    *per.entry(leaf_of[x]).or_insert(0.0) += 1.0;
                }
                per.into_iter()
                    .filter(|&(_, inside)| inside < k)
                    .map(|(l, inside)| (l, inside * (k - inside) / (k - 1.0)))
                    .collect()
            })
            .collect();
        for sh in &shares {
            for &(l, v) in sh {
                load[l] += v;
            }
        }
        groups
            .iter()
            .zip(&shares)
            .map(|(g, sh)| {
                let mut r = g
                    .iter()
                    .map(|&x| self.node[x])
                    .fold(f64::INFINITY, f64::min);
                let k1 = g.len().saturating_sub(1) as f64;
                for &(a, b, s) in &self.slow_pairs {
                    if g.contains(&a) && g.contains(&b) {
                        r = r.min(k1 * s);
                    }
                }
                for &(l, _) in sh {
                    r = r.min(self.uplink[l] / load[l]);
                }
                r
            })
            .collect()
    }
}

/// The search on a modelled fabric: what it found, and its modelled seconds (each
/// round as long as its slowest group: `block` bytes to each peer at the group's node
/// rate; 0 leaves the time out).
pub fn run_on_leaf_spine(
    m: &LeafSpineModel,
    fraction: f64,
    declared: Option<f64>,
    block: f64,
) -> (FabricSearch, f64) {
    let mut s = FabricSearch::new(m.node.len(), m.leaves.clone(), fraction, None, declared);
    let mut seconds = 0.0;
    for _ in 0..10 * m.node.len() + 64 {
        let Some(groups) = s.next_round() else { break };
        let rates = m.rates(&groups);
        seconds += groups
            .iter()
            .zip(&rates)
            .map(|(g, r)| block * g.len().saturating_sub(1) as f64 / (r.max(1e-9) * 1e9))
            .fold(0.0, f64::max);
        s.record(&rates);
    }
    (s, seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Model = LeafSpineModel;

    trait Search {
        fn search(&self, r: Option<f64>) -> FabricSearch;
    }

    impl Search for Model {
        fn search(&self, r: Option<f64>) -> FabricSearch {
            let (s, _) = run_on_leaf_spine(self, 0.8, r, 0.0);
            s
        }
    }

    #[test]
    fn a_pairwise_alltoall_is_allowed_what_its_busiest_steps_allow() {
        let eps = 1e-12;
        // Two leaves of 4, racks interleaved (even nodes on leaf 0): the odd steps
        // send every rank across, 4 flows on each uplink.
        let inter: Vec<usize> = (0..8).map(|x| x % 2).collect();
        let seq: Vec<usize> = (0..8).collect();
        let sizes = [4, 4];
        assert!((pairwise_allowance(&seq, &inter, &sizes, 2.0) - 7.0 / 11.0).abs() < eps);
        assert!((pairwise_allowance(&seq, &inter, &sizes, 4.0) - 7.0 / 19.0).abs() < eps);
        assert!((pairwise_allowance(&seq, &inter, &sizes, 1.0) - 1.0).abs() < eps);
        // In rack order the crossings spread over the steps (1,2,3,4,3,2,1 a side).
        let rack: Vec<usize> = (0..8).map(|x| x / 4).collect();
        assert!((pairwise_allowance(&seq, &rack, &sizes, 2.0) - 7.0 / 9.0).abs() < eps);
        // Two ranks a node (ranks 2x and 2x+1 on node x): the steps inside a node
        // cost nothing, and a node link carries both its ranks' flows.
        let seq2: Vec<usize> = (0..16).map(|r| r / 2).collect();
        let a = pairwise_allowance(&seq2, &inter, &sizes, 2.0);
        assert!(a > 0.0 && a < 1.0, "{a}");
        assert_eq!(pairwise_allowance(&seq2, &inter, &sizes, 1.0), 1.0);
        // The search takes the lower of the two models.
        let mut s = FabricSearch::new(
            8,
            vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]],
            0.8,
            None,
            Some(2.0),
        );
        let all: Vec<usize> = (0..8).collect();
        assert!((s.allowance(0, 1, &all) - 7.0 / 11.0).abs() < eps);
        s.set_ranks((0..8).map(|x| vec![2 * x, 2 * x + 1]).collect());
        assert!((s.allowance(0, 1, &all) - a.min(7.0 / 8.0)).abs() < eps);
        let s = FabricSearch::new(
            8,
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]],
            0.8,
            None,
            Some(2.0),
        );
        assert!((s.allowance(0, 1, &all) - 7.0 / 9.0).abs() < eps);
    }

    #[test]
    fn allowance_of_two_leaves() {
        assert!((cross_allowance(4, 4, 4.0) - 7.0 / 16.0).abs() < 1e-12);
        assert!((cross_allowance(4, 4, 2.0) - 7.0 / 8.0).abs() < 1e-12);
        assert_eq!(cross_allowance(4, 4, 1.0), 1.0);
        // The smaller leaf's partner sends more of its traffic across.
        assert!((cross_allowance(2, 6, 4.0) - 7.0 / 24.0).abs() < 1e-12);
    }

    #[test]
    fn a_healthy_oversubscribed_fabric_names_nothing() {
        for (leaves, k) in [(2, 4), (3, 4), (4, 8), (2, 2), (5, 3)] {
            for r in [1.0, 2.0, 4.0] {
                let m = Model::new(leaves, k, r);
                for declared in [None, Some(r)] {
                    let s = m.search(declared);
                    let f = s.finding();
                    assert!(
                        f.slow_nodes.is_empty()
                            && f.slow_links.is_empty()
                            && f.unresolved.is_empty(),
                        "{leaves}x{k} {r}:1 {declared:?}: {f:?}"
                    );
                    assert!(s.slow_uplinks().is_empty(), "{leaves}x{k} {r}:1");
                    assert_eq!(f.pairs_cleared, f.pairs_total, "{leaves}x{k} {r}:1");
                    assert_eq!(f.pairs_open, 0);
                }
            }
        }
    }

    #[test]
    fn two_leaves_undeclared_say_they_were_not_judged() {
        let s = Model::new(2, 4, 4.0).search(None);
        assert!(s.notes()[0].contains("not judged"), "{:?}", s.notes());
        let s = Model::new(2, 4, 4.0).search(Some(4.0));
        assert!(s.notes().is_empty(), "{:?}", s.notes());
    }

    #[test]
    fn a_slow_node_is_named_and_no_uplink() {
        for r in [1.0, 4.0] {
            let mut m = Model::new(2, 4, r);
            m.node[5] = 4.0;
            let s = m.search(Some(r));
            let f = s.finding();
            assert_eq!(f.slow_nodes, vec![5], "{r}: {f:?}");
            assert!(s.slow_uplinks().is_empty(), "{r}");
            assert!(f.slow_links.is_empty() && f.unresolved.is_empty(), "{f:?}");
        }
    }

    #[test]
    fn a_slow_uplink_is_named_alone_among_three_leaves() {
        for declared in [None, Some(2.0)] {
            let mut m = Model::new(3, 4, 2.0);
            m.uplink[1] /= 4.0;
            let s = m.search(declared);
            let f = s.finding();
            assert_eq!(s.slow_uplinks(), &[vec![1]], "{declared:?}: {f:?}");
            assert!(f.slow_nodes.is_empty() && f.slow_links.is_empty(), "{f:?}");
            assert!(f.unresolved.is_empty(), "{f:?}");
            // The pairs behind it are explained, not open.
            assert_eq!(f.pairs_open, 0);
        }
    }

    #[test]
    fn cross_groups_below_the_fluid_model_but_healthy_are_not_named() {
        // the uplinks carry 0.77 of what the declared 4:1 allows (an alltoall's own
        // cost): nothing named; at half the declared rate, both uplinks are
        let mut m = Model::new(2, 4, 4.0);
        for u in &mut m.uplink {
            *u *= 0.77;
        }
        let s = m.search(Some(4.0));
        assert!(s.slow_uplinks().is_empty(), "{:?}", s.finding());
        for u in &mut m.uplink {
            *u *= 0.5 / 0.77;
        }
        assert_eq!(m.search(Some(4.0)).slow_uplinks(), &[vec![0, 1]]);
    }

    #[test]
    fn two_leaves_declared_name_their_uplinks_together() {
        let mut m = Model::new(2, 4, 4.0);
        m.uplink[1] /= 4.0;
        let s = m.search(Some(4.0));
        assert_eq!(s.slow_uplinks(), &[vec![0, 1]]);
        assert!(s.finding().slow_nodes.is_empty());
    }

    #[test]
    fn one_leaf_is_the_flat_search() {
        let mut m = Model::new(1, 8, 1.0);
        m.node[3] = 4.0;
        let s = m.search(None);
        assert_eq!(s.finding().slow_nodes, vec![3]);
        let mut b = Bisection::new(8, 0.8, None);
        while let Some(g) = b.next_round() {
            let rates = m.rates(&g);
            b.record(&rates);
        }
        assert_eq!(b.finding().rounds, s.finding().rounds);
        assert_eq!(b.finding().path, s.finding().path);
    }

    #[test]
    fn a_slow_node_on_a_leaf_of_two_is_seen_against_the_other_leaves() {
        let mut m = Model::new(3, 2, 1.0);
        m.node[4] = 4.0; // leaf 1 = {1, 4}
        let s = m.search(Some(1.0));
        let f = s.finding();
        assert!(
            f.slow_nodes == vec![4] || f.unresolved.contains(&vec![1, 4]),
            "{f:?}"
        );
        assert!(s.slow_uplinks().is_empty(), "{:?}", s.slow_uplinks());
    }
}
