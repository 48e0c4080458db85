//! Finding the slow node or link in about log2(n) rounds (`--find-slow`), instead of
//! the pairs tier's n−1, with every node pair it clears crossed by measured traffic.
//!
//! Each round runs one alltoall per group, every group at the same time (groups are
//! disjoint). In an alltoall every rank sends to every other rank of its group, so the
//! traffic of a group crosses every link between its nodes: a group is fast only if
//! every link inside it carried its share at speed, and a cut between two groups is
//! cleared only by a group that spans it. Rates are per-node link rates (see
//! `sweep::find_slow::node_rate`), which do not depend on the group's size; a group is
//! *slow* when its rate is below `fraction` × the best rate so far of the groups up to
//! twice its size (a pair: of the pairs, once three ran; see
//! [`Bisection::threshold`]), or below the absolute `floor` when the card gives one.
//!
//! 1. **Root**: round 0 runs the whole job, round 1 its two halves.
//! 2. **Split**: a slow group's halves run; each slow half is split again. A group of
//!    two nodes that is slow is a *leaf*.
//! 3. **Cut**: a slow group whose halves A and B are both fast has a slow link that
//!    crosses the cut. With A = A1+A2 and B = B1+B2 the groups A1+B1, A2+B2 (one round)
//!    and A1+B2, A2+B1 (the next) each cross a quarter of the cut, and their insides
//!    were cleared already; a slow one is searched the same way, so a link on a cut
//!    is found in 2 rounds per halving.
//! 4. **Leaf**: a slow pair (a, b) runs a and b each with a node already cleared, in
//!    one round: a slow partner pair names that node slow; both fast names the link.
//!
//! One slow node takes about log2(n)+2 rounds, one slow link at most 2·log2(n)+1.
//! Every pair inside a group judged fast is *cleared*; the finding counts them of the
//! n·(n−1)/2, and records the largest group that a pair was cleared in (the smallest
//! fast group holding each pair, the largest of those): an alltoall of k nodes spreads
//! each node's traffic over k−1 links, so one link slower than the others by less than
//! about that factor can hide in a fast group of k nodes, which only the pairs tier
//! (`--tiers pairs`, every pair alone) rules out. The planner is pure: `sweep` runs its
//! rounds, the model bench (`benches/bisect_model.rs`) runs it on modelled fabrics.
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One decision of the search, as the report shows the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Round number, from 0.
    pub round: usize,
    /// The group's node indices, ascending.
    pub nodes: Vec<usize>,
    /// Its rate (a per-node link rate), GB/s.
    pub busbw_gbps: f64,
    /// The rate it was judged against (fraction × best so far, or the floor), GB/s.
    pub threshold_gbps: f64,
    /// Below the threshold.
    pub slow: bool,
}

/// What the search found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Nodes slow with a cleared partner too, ascending.
    pub slow_nodes: Vec<usize>,
    /// Slow pairs of nodes that are each fast with a cleared partner (a slow link).
    pub slow_links: Vec<(usize, usize)>,
    /// Slow groups the search could not separate (no cleared partner to compare with,
    /// or no part of the group was slow on its own), each ascending.
    pub unresolved: Vec<Vec<usize>>,
    /// Rounds run.
    pub rounds: usize,
    /// Every group measured, in round order.
    pub path: Vec<Decision>,
    /// Node pairs: n·(n−1)/2.
    pub pairs_total: usize,
    /// Node pairs inside a group judged fast.
    pub pairs_cleared: usize,
    /// The largest group a pair was cleared in: for each cleared pair the smallest
    /// fast group holding it, the largest of those (0: none cleared).
    pub largest_clearing_group: usize,
    /// Node pairs neither cleared nor explained by what was named (a slow link, or a
    /// pair with a slow node): what the search did not see.
    pub pairs_open: usize,
}

/// What a measured group stands for in its job.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// Part i of the job's group (its halves; the whole job's quarters).
    Part(usize),
    /// A side pair (Ai, Bj) of a cut: index into the job's sides.
    Side(usize),
    /// Node a (0) or b (1) of a leaf with a cleared partner.
    Partner(usize),
    /// Pair (a, b) of a job too small to split.
    Pair(usize, usize),
}

#[derive(Debug)]
struct Probe {
    nodes: Vec<usize>,
    role: Role,
    /// Index of its decision in the path once measured.
    decision: Option<usize>,
    scheduled: bool,
    /// Its rate when first measured, once it is queued again ([`Bisection::recheck`]).
    first_gbps: Option<f64>,
}

#[derive(Debug)]
enum Kind {
    /// The whole job: its parts (quarters from 8 nodes, else halves), and every two
    /// parts together (`sides[s]`: the parts of Side(s)).
    Root {
        parts: Vec<Vec<usize>>,
        sides: Vec<(usize, usize)>,
    },
    /// A slow group's halves.
    Split { parts: Vec<Vec<usize>> },
    /// A slow link crosses between parts whose insides are cleared: each side pair
    /// (X, Y) is probed as X+Y; `group` is what stays unresolved if none is slow.
    Cut {
        group: Vec<usize>,
        sides: Vec<(Vec<usize>, Vec<usize>)>,
    },
    /// A cut with the single node `c` on one side, `c` never in a fast group: `c`
    /// with a cleared partner first (slow: `c` is the slow node), then the cut.
    NodeTest {
        c: usize,
        group: Vec<usize>,
        sides: Vec<(Vec<usize>, Vec<usize>)>,
    },
    /// A slow pair, each node with a cleared partner.
    Leaf { a: usize, b: usize },
    /// A job of at most [`ALL_PAIRS_NODES`] nodes: every pair, 3 rounds.
    AllPairs,
}

/// Up to this many nodes the search runs every pair (3 rounds): with fewer, a slow
/// node would be in every group the split makes, with nothing healthy to compare.
pub const ALL_PAIRS_NODES: usize = 4;

#[derive(Debug)]
struct Job {
    kind: Kind,
    probes: Vec<Probe>,
    done: bool,
}

/// The search's state between rounds: ask [`Bisection::next_round`] for the groups to
/// run, then give their rates to [`Bisection::record`].
#[derive(Debug)]
pub struct Bisection {
    n: usize,
    fraction: f64,
    floor_gbps: Option<f64>,
    /// Every rate measured, with its group's size in nodes.
    seen: Vec<(usize, f64)>,
    /// Rates of groups of the same class measured by other searches (the other leaves
    /// of a fabric, see `topology::fabric_search`): judged against as if seen here.
    peers: Vec<(usize, f64)>,
    jobs: Vec<Job>,
    /// The round handed out: (job, probe) of each group, in order.
    current: Vec<(usize, usize)>,
    /// Per node pair (see `pair_index`): the smallest fast group holding it (0: none).
    cleared: Vec<u32>,
    /// Nodes inside a group judged fast: the partners a leaf compares with.
    healthy: BTreeSet<usize>,
    partner_cursor: usize,
    finished: bool,
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

/// Two halves (the first the larger); a side of one node gives it and an empty half.
fn halves(items: &[usize]) -> [Vec<usize>; 2] {
    let mut parts = split(items, 2).into_iter();
    [
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    ]
}

/// Pairs seen before pairs are their own reference (the pair judged and at least
/// two others).
const PAIR_PEERS: usize = 3;

/// [`Bisection::threshold`] over the rates `seen` (size in nodes, rate).
fn threshold_over(seen: &[(usize, f64)], k: usize, fraction: f64, floor: Option<f64>) -> f64 {
    let same = k == 2 && seen.iter().filter(|s| s.0 == 2).count() >= PAIR_PEERS;
    let near = |&&(size, _): &&(usize, f64)| if same { size == k } else { size <= 2 * k };
    let best = |it: &mut dyn Iterator<Item = f64>| it.fold(0.0, f64::max);
    let mut b = best(&mut seen.iter().filter(near).map(|s| s.1));
    if b <= 0.0 {
        b = best(&mut seen.iter().map(|s| s.1));
    }
    let rel = fraction * b;
    floor.map_or(rel, |f| rel.max(f))
}

fn union(a: &[usize], b: &[usize]) -> Vec<usize> {
    let mut u: Vec<usize> = a.iter().chain(b).copied().collect();
    u.sort_unstable();
    u.dedup();
    u
}

impl Bisection {
    /// A search over nodes `0..n`; `fraction` is the outlier fraction (e.g. 0.8),
    /// `floor_gbps` the card's absolute minimum rate, if any.
    pub fn new(n: usize, fraction: f64, floor_gbps: Option<f64>) -> Bisection {
        let mut b = Bisection {
            n,
            fraction,
            floor_gbps,
            seen: Vec::new(),
            peers: Vec::new(),
            jobs: Vec::new(),
            current: Vec::new(),
            cleared: vec![0; n * n.saturating_sub(1) / 2],
            healthy: BTreeSet::new(),
            partner_cursor: 0,
            finished: false,
            finding: Finding {
                pairs_total: n * n.saturating_sub(1) / 2,
                ..Finding::default()
            },
        };
        if (3..=ALL_PAIRS_NODES).contains(&n) {
            let probes = super::pair_rounds(n)
                .into_iter()
                .flatten()
                .map(|(a, c)| Probe::new(vec![a, c], Role::Pair(a, c)))
                .collect();
            b.jobs.push(Job {
                kind: Kind::AllPairs,
                probes,
                done: false,
            });
        } else if n >= 2 {
            let all: Vec<usize> = (0..n).collect();
            // Quarters from 8 nodes: one or two slow nodes still leave fast groups to
            // compare with.
            let parts = split(&all, if n >= 8 { 4 } else { 2 });
            let sides: Vec<(usize, usize)> = super::pair_rounds(parts.len())
                .into_iter()
                .flatten()
                .collect();
            let mut probes: Vec<Probe> = parts
                .iter()
                .enumerate()
                .filter(|(_, p)| p.len() >= 2)
                .map(|(i, p)| Probe::new(p.clone(), Role::Part(i)))
                .collect();
            probes.extend(
                sides
                    .iter()
                    .enumerate()
                    .map(|(s, &(i, j))| Probe::new(union(&parts[i], &parts[j]), Role::Side(s))),
            );
            b.jobs.push(Job {
                kind: Kind::Root { parts, sides },
                probes,
                done: false,
            });
        }
        b
    }

    /// The groups of the next round (node indices), or None when the search is over.
    pub fn next_round(&mut self) -> Option<Vec<Vec<usize>>> {
        if self.current.is_empty() {
            let mut busy = vec![false; self.n];
            for (j, job) in self.jobs.iter_mut().enumerate() {
                if job.done {
                    continue;
                }
                for (p, probe) in job.probes.iter_mut().enumerate() {
                    if probe.scheduled || probe.nodes.iter().any(|&x| busy[x]) {
                        continue;
                    }
                    for &x in &probe.nodes {
                        busy[x] = true;
                    }
                    probe.scheduled = true;
                    self.current.push((j, p));
                }
            }
        }
        if self.current.is_empty() {
            self.finish();
            return None;
        }
        Some(self.current_groups())
    }

    /// What a group of `k` nodes is judged against: `fraction` × the best rate of
    /// the groups of at most 2k nodes seen so far (of any size when there is none),
    /// or the floor; a pair, once three pairs have been seen (itself among them),
    /// against the best pair. Groups of another size need not run at the same
    /// per-node rate on a healthy fabric — a large alltoall can be slower than a
    /// small one (incast), and on the simulated cluster 4-node groups ran 15–20%
    /// faster than pairs, which judged against them named a healthy pair on a loaded
    /// machine. Only pairs: the pairs of a round are disjoint, so a slow node is in
    /// at most one of them and the best pair is a healthy one, while every larger
    /// group of a round can hold a slow node (the concurrent rounds cross groups).
    fn threshold(&self, k: usize) -> f64 {
        let all: Vec<(usize, f64)> = self.seen.iter().chain(&self.peers).copied().collect();
        threshold_over(&all, k, self.fraction, self.floor_gbps)
    }

    /// Rates (group size in nodes, GB/s) of the same class measured elsewhere, which
    /// the groups of this search are judged against too (replacing the last set).
    pub fn set_peers(&mut self, peers: Vec<(usize, f64)>) {
        self.peers = peers;
    }

    /// Every rate this search measured (group size in nodes, GB/s).
    pub fn seen(&self) -> &[(usize, f64)] {
        &self.seen
    }

    /// The groups of the round handed out, node indices (empty between rounds).
    pub fn current_groups(&self) -> Vec<Vec<usize>> {
        self.current
            .iter()
            .map(|&(j, p)| self.jobs[j].probes[p].nodes.clone())
            .collect()
    }

    /// Which groups of the round [`Bisection::next_round`] returned would be judged
    /// slow if `rates_gbps` (in its order) were recorded now: the driver measures
    /// those again before it records (see `sweep::find_slow`). Pure.
    pub fn below_threshold(&self, rates_gbps: &[f64]) -> Vec<bool> {
        let sizes: Vec<usize> = self
            .current
            .iter()
            .map(|&(j, p)| self.jobs[j].probes[p].nodes.len())
            .collect();
        let mut seen: Vec<(usize, f64)> = self.seen.iter().chain(&self.peers).copied().collect();
        seen.extend(sizes.iter().zip(rates_gbps).map(|(&k, &r)| (k, r)));
        sizes
            .iter()
            .zip(rates_gbps)
            .map(|(&k, &r)| r < threshold_over(&seen, k, self.fraction, self.floor_gbps))
            .collect()
    }

    /// The rate (GB/s) of each group of the round [`Bisection::next_round`] returned,
    /// in its order (a group that failed: 0).
    pub fn record(&mut self, rates_gbps: &[f64]) {
        if self.current.is_empty() && self.next_round().is_none() {
            return;
        }
        let round = self.finding.rounds;
        self.finding.rounds += 1;
        for (k, &(j, p)) in self.current.iter().enumerate() {
            let size = self.jobs[j].probes[p].nodes.len();
            self.seen
                .push((size, rates_gbps.get(k).copied().unwrap_or(0.0)));
        }
        let current = std::mem::take(&mut self.current);
        let mut touched = Vec::new();
        for (k, &(j, p)) in current.iter().enumerate() {
            let measured = rates_gbps.get(k).copied().unwrap_or(0.0);
            // a group measured again counts at the better of its two measurements
            let rate = self.jobs[j].probes[p]
                .first_gbps
                .map_or(measured, |r| r.max(measured));
            let threshold = self.threshold(self.jobs[j].probes[p].nodes.len());
            let probe = &mut self.jobs[j].probes[p];
            probe.decision = Some(self.finding.path.len());
            // Judged now against the best so far; judged again when its job ends.
            self.finding.path.push(Decision {
                round,
                nodes: probe.nodes.clone(),
                busbw_gbps: rate,
                threshold_gbps: threshold,
                slow: rate < threshold,
            });
            if !touched.contains(&j) {
                touched.push(j);
            }
        }
        for j in touched {
            if self.jobs[j].probes.iter().all(|p| p.decision.is_some()) {
                self.complete(j);
            }
        }
    }

    /// Before job `j` is judged: its groups that were fast against the bar of their
    /// own round and are slow against the bar now (raised by a later round) are
    /// queued to run once more, and the job waits for them (true). A group counts at
    /// the better of its two measurements ([`Bisection::record`]); its first stays
    /// in the path, judged slow against the bar now. A bar raised by one fast reading
    /// after a group's round would otherwise name a group no one measured again: on
    /// 2 cores beside a CPU hog healthy pairs read 0.023-0.047 GB/s, and a pair at
    /// 0.0232 in the first round was named against 0.5 of 0.047 read two rounds on.
    fn recheck(&mut self, j: usize) -> bool {
        let mut again = false;
        for p in 0..self.jobs[j].probes.len() {
            let probe = &self.jobs[j].probes[p];
            let Some(d) = probe.decision else { continue };
            if probe.first_gbps.is_some() {
                continue;
            }
            let threshold = self.threshold(self.finding.path[d].nodes.len());
            let dec = &mut self.finding.path[d];
            if dec.slow || dec.busbw_gbps >= threshold {
                continue;
            }
            dec.threshold_gbps = threshold;
            dec.slow = true;
            let rate = dec.busbw_gbps;
            let probe = &mut self.jobs[j].probes[p];
            probe.first_gbps = Some(rate);
            probe.decision = None;
            probe.scheduled = false;
            again = true;
        }
        again
    }

    /// A job whose groups have all run: judge them, clear the fast ones' pairs, and
    /// queue what follows.
    fn complete(&mut self, j: usize) {
        if self.recheck(j) {
            return;
        }
        self.jobs[j].done = true;
        let mut slow_of = Vec::new();
        for p in 0..self.jobs[j].probes.len() {
            let Some(d) = self.jobs[j].probes[p].decision else {
                continue;
            };
            let threshold = self.threshold(self.finding.path[d].nodes.len());
            let dec = &mut self.finding.path[d];
            dec.threshold_gbps = threshold;
            dec.slow = dec.busbw_gbps < threshold;
            let (slow, nodes) = (dec.slow, dec.nodes.clone());
            if !slow {
                self.clear(&nodes);
            }
            slow_of.push((self.jobs[j].probes[p].role, slow));
        }
        let slow = |role: Role| slow_of.iter().any(|&(r, s)| r == role && s);
        let kind = std::mem::replace(&mut self.jobs[j].kind, Kind::Leaf { a: 0, b: 0 });
        match kind {
            Kind::Root { parts, sides } => {
                let part_slow: Vec<bool> = (0..parts.len()).map(|i| slow(Role::Part(i))).collect();
                // Slow parts are searched inside; two fast parts slow together have
                // a slow link between them.
                for (s, &(i, j)) in sides.iter().enumerate() {
                    if slow(Role::Side(s)) && !part_slow[i] && !part_slow[j] {
                        self.cut(parts[i].clone(), parts[j].clone());
                    }
                }
                self.descend(parts, false, &part_slow);
            }
            Kind::Split { parts } => {
                let part_slow: Vec<bool> = (0..parts.len()).map(|i| slow(Role::Part(i))).collect();
                self.descend(parts, true, &part_slow);
            }
            Kind::Cut { group, sides } => {
                let slow_sides: Vec<(Vec<usize>, Vec<usize>)> = sides
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| slow(Role::Side(*i)))
                    .map(|(_, s)| s)
                    .collect();
                if slow_sides.is_empty() {
                    self.finding.unresolved.push(group);
                }
                for (x, y) in slow_sides {
                    self.cut(x, y);
                }
            }
            Kind::NodeTest { c, group, sides } => {
                if slow(Role::Partner(0)) {
                    self.finding.slow_nodes.push(c);
                } else {
                    self.cut_job(group, sides);
                }
            }
            Kind::AllPairs => {
                let pairs: Vec<(usize, usize, bool)> = slow_of
                    .iter()
                    .filter_map(|&(r, s)| match r {
                        Role::Pair(a, b) => Some((a, b, s)),
                        _ => None,
                    })
                    .collect();
                let nodes: Vec<usize> = (0..self.n)
                    .filter(|&x| pairs.iter().filter(|p| p.0 == x || p.1 == x).all(|p| p.2))
                    .collect();
                for &(a, b, s) in &pairs {
                    if s && !nodes.contains(&a) && !nodes.contains(&b) {
                        self.finding.slow_links.push((a, b));
                    }
                }
                self.finding.slow_nodes.extend(nodes);
            }
            Kind::Leaf { a, b } => {
                // (a node already in a fast group was not probed: not slow)
                let (sa, sb) = (slow(Role::Partner(0)), slow(Role::Partner(1)));
                if sa {
                    self.finding.slow_nodes.push(a);
                }
                if sb {
                    self.finding.slow_nodes.push(b);
                }
                if !sa && !sb {
                    self.finding.slow_links.push((a.min(b), a.max(b)));
                }
            }
        }
    }

    /// A slow group split into parts, each part of 2+ nodes probed.
    fn split_job(&mut self, parts: Vec<Vec<usize>>) {
        let mut probes = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            if part.len() >= 2 {
                probes.push(Probe::new(part.clone(), Role::Part(i)));
            }
        }
        self.jobs.push(Job {
            kind: Kind::Split { parts },
            probes,
            done: false,
        });
    }

    /// A group's parts judged: go into each slow part; when none is slow but the group
    /// was, the slow link crosses between parts.
    fn descend(&mut self, parts: Vec<Vec<usize>>, group_slow: bool, part_slow: &[bool]) {
        for (h, &s) in parts.iter().zip(part_slow) {
            if !s {
                continue;
            }
            if h.len() == 2 {
                self.leaf(h[0], h[1]);
            } else {
                self.split_job(split(h, 2));
            }
        }
        if !group_slow || part_slow.iter().any(|&s| s) {
            return;
        }
        if let [a, b] = &parts[..] {
            self.cut(a.clone(), b.clone());
        }
    }

    /// Search the cut between `a` and `b` (each side's inside already cleared): its
    /// quarters A1+B1, A2+B2, A1+B2, A2+B1.
    fn cut(&mut self, a: Vec<usize>, b: Vec<usize>) {
        if a.is_empty() || b.is_empty() {
            return;
        }
        if a.len() == 1 && b.len() == 1 {
            self.leaf(a[0], b[0]);
            return;
        }
        let [a1, a2] = halves(&a);
        let [b1, b2] = halves(&b);
        let sides: Vec<(Vec<usize>, Vec<usize>)> = [(&a1, &b1), (&a2, &b2), (&a1, &b2), (&a2, &b1)]
            .into_iter()
            .filter(|(x, y)| !x.is_empty() && !y.is_empty())
            .map(|(x, y)| (x.clone(), y.clone()))
            .collect();
        let group = union(&a, &b);
        // One node alone on a side is in every side pair: if it was never in a fast
        // group, it may be the slow node itself, which one round tells.
        let single = match (&a[..], &b[..]) {
            ([c], _) | (_, [c]) => Some(*c),
            _ => None,
        };
        if let Some(c) = single.filter(|c| !self.healthy.contains(c)) {
            if let Some(w) = self.partner(&[c]) {
                self.jobs.push(Job {
                    kind: Kind::NodeTest { c, group, sides },
                    probes: vec![Probe::new(union(&[c], &[w]), Role::Partner(0))],
                    done: false,
                });
                return;
            }
        }
        self.cut_job(group, sides);
    }

    fn cut_job(&mut self, group: Vec<usize>, sides: Vec<(Vec<usize>, Vec<usize>)>) {
        let probes = sides
            .iter()
            .enumerate()
            .map(|(i, (x, y))| Probe::new(union(x, y), Role::Side(i)))
            .collect();
        self.jobs.push(Job {
            kind: Kind::Cut { group, sides },
            probes,
            done: false,
        });
    }

    /// A cleared node outside `not`, in turn (so that leaves spread over them).
    fn partner(&mut self, not: &[usize]) -> Option<usize> {
        let partners: Vec<usize> = self
            .healthy
            .iter()
            .copied()
            .filter(|x| !not.contains(x))
            .collect();
        if partners.is_empty() {
            return None;
        }
        let p = partners[self.partner_cursor % partners.len()];
        self.partner_cursor += 1;
        Some(p)
    }

    /// A slow pair: a node already in a fast group is not slow, so if both were, the
    /// link is; else each other node runs with a cleared partner (a different one
    /// each, when there are).
    fn leaf(&mut self, a: usize, b: usize) {
        let mut probes = Vec::new();
        for (i, x) in [a, b].into_iter().enumerate() {
            if self.healthy.contains(&x) {
                continue;
            }
            let Some(z) = self.partner(&[a, b]) else {
                self.finding.unresolved.push(vec![a.min(b), a.max(b)]);
                return;
            };
            probes.push(Probe::new(union(&[x], &[z]), Role::Partner(i)));
        }
        if probes.is_empty() {
            self.finding.slow_links.push((a.min(b), a.max(b)));
            return;
        }
        self.jobs.push(Job {
            kind: Kind::Leaf { a, b },
            probes,
            done: false,
        });
    }

    fn pair_index(&self, i: usize, j: usize) -> usize {
        let (i, j) = (i.min(j), i.max(j));
        i * self.n - i * (i + 1) / 2 + (j - i - 1)
    }

    /// Every pair inside a fast group is cleared (remembering the smallest such group).
    fn clear(&mut self, nodes: &[usize]) {
        let k = nodes.len() as u32;
        for (x, &i) in nodes.iter().enumerate() {
            self.healthy.insert(i);
            for &j in &nodes[x + 1..] {
                let at = self.pair_index(i, j);
                let c = &mut self.cleared[at];
                if *c == 0 || k < *c {
                    *c = k;
                }
            }
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let f = &mut self.finding;
        f.pairs_cleared = self.cleared.iter().filter(|&&c| c > 0).count();
        f.largest_clearing_group = self.cleared.iter().copied().max().unwrap_or(0) as usize;
        f.slow_nodes.sort_unstable();
        f.slow_nodes.dedup();
        f.slow_links.sort_unstable();
        f.slow_links.dedup();
        // A link of a slow node is that node's, not a link's.
        let nodes = f.slow_nodes.clone();
        f.slow_links
            .retain(|(a, b)| !nodes.contains(a) && !nodes.contains(b));
        f.unresolved.sort();
        f.unresolved.dedup();
        let mut open = 0;
        for i in 0..self.n {
            for j in i + 1..self.n {
                let explained = nodes.contains(&i)
                    || nodes.contains(&j)
                    || self.finding.slow_links.contains(&(i, j));
                if self.cleared[self.pair_index(i, j)] == 0 && !explained {
                    open += 1;
                }
            }
        }
        self.finding.pairs_open = open;
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

impl Probe {
    fn new(nodes: Vec<usize>, role: Role) -> Probe {
        Probe {
            nodes,
            role,
            decision: None,
            scheduled: false,
            first_gbps: None,
        }
    }
}

/// How a modelled alltoall moves its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllToAll {
    /// Every block at once (NCCL's grouped send/recv, Open MPI's linear algorithm):
    /// a node's link is shared by its k−1 streams.
    Concurrent,
    /// k−1 steps, one partner each (Open MPI's pairwise algorithm for large blocks).
    Pairwise,
}

impl AllToAll {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            AllToAll::Concurrent => "concurrent",
            AllToAll::Pairwise => "pairwise",
        }
    }

    /// The slowest a single link may be, as a fraction of the node rate, and still
    /// hide in a fast alltoall of `k` nodes judged at `fraction`: a link slower than
    /// this is seen.
    pub fn hides_above(self, k: usize, fraction: f64) -> f64 {
        if k < 2 {
            return 0.0;
        }
        let k = k as f64;
        match self {
            // its block takes b/s; the node's k−1 blocks take (k−1)·b: seen when
            // b/s > (k−1)·b/fraction.
            AllToAll::Concurrent => (fraction / (k - 1.0)).min(1.0),
            // step s sends to rank+s and receives from rank−s, so a link is used in
            // two of the k−1 steps, or in one (both ways at once) when its nodes are
            // k/2 apart: c steps at s and the rest at full speed, seen when
            // (k−1)/(k−1−c+c/s) < fraction; the lesser bound of the two holds for
            // every link.
            AllToAll::Pairwise => {
                let seen = |c: f64| (c / ((k - 1.0) / fraction - (k - 1.0 - c)).max(c)).min(1.0);
                let even = (k as usize) % 2 == 0;
                if even {
                    seen(1.0)
                } else {
                    seen(2.0)
                }
            }
        }
    }
}

/// A modelled fabric: per-node link rates and slow links, and the time of a ring
/// all_reduce or an alltoall on it (the model bench and the planner's tests use it).
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

    /// Seconds of an alltoall over `group` that sends `block` bytes to each peer:
    /// every block at once, or k−1 pairwise steps; either way a latency per peer (a
    /// step each, or each message's own cost when they go at once).
    pub fn alltoall_seconds(&self, group: &[usize], block: f64, algo: AllToAll) -> f64 {
        let k = group.len();
        if k < 2 {
            return 0.0;
        }
        let lat = (k - 1) as f64 * self.hop_latency_s;
        match algo {
            AllToAll::Concurrent => {
                let nodes = group
                    .iter()
                    .map(|&i| (k - 1) as f64 * block / (self.node_gbps[i] * 1e9))
                    .fold(0.0, f64::max);
                let links = group
                    .iter()
                    .enumerate()
                    .flat_map(|(x, &i)| group[x + 1..].iter().map(move |&j| (i, j)))
                    .map(|(i, j)| block / (self.hop_gbps(i, j) * 1e9))
                    .fold(0.0, f64::max);
                nodes.max(links) + lat
            }
            AllToAll::Pairwise => {
                (1..k)
                    .map(|s| {
                        (0..k)
                            .map(|i| block / (self.hop_gbps(group[i], group[(i + s) % k]) * 1e9))
                            .fold(0.0, f64::max)
                    })
                    .sum::<f64>()
                    + lat
            }
        }
    }

    /// The per-node link rate that alltoall shows, GB/s: the bytes each node sent to
    /// other nodes, block·(k−1), over its time (the same for any healthy group).
    pub fn alltoall_node_rate(&self, group: &[usize], block: f64, algo: AllToAll) -> f64 {
        let k = group.len() as f64;
        let t = self.alltoall_seconds(group, block, algo);
        if t <= 0.0 {
            return 0.0;
        }
        block * (k - 1.0) / t / 1e9
    }
}

/// Run the whole search on a model: the finding and the modelled seconds (each round
/// lasts as long as its slowest group, `iters` alltoalls of `block` bytes per peer,
/// as `sweep` runs them).
pub fn run_on_model(
    model: &FabricModel,
    fraction: f64,
    block: f64,
    iters: u32,
    algo: AllToAll,
) -> (Finding, f64) {
    let n = model.node_gbps.len();
    let mut b = Bisection::new(n, fraction, None);
    let mut seconds = 0.0;
    let mut guard = 0;
    while let Some(groups) = b.next_round() {
        guard += 1;
        if guard > 8 * n + 16 {
            break; // cannot happen: every job's groups are smaller than its parent's
        }
        let rates: Vec<f64> = groups
            .iter()
            .map(|g| model.alltoall_node_rate(g, block, algo))
            .collect();
        seconds += groups
            .iter()
            .map(|g| model.alltoall_seconds(g, block, algo))
            .fold(0.0, f64::max)
            * f64::from(iters);
        b.record(&rates);
    }
    (b.finding().clone(), seconds)
}

/// The pairs tier on the same model (every pair alone, all_reduce): its rounds and
/// modelled seconds.
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
    const ALGOS: [AllToAll; 2] = [AllToAll::Concurrent, AllToAll::Pairwise];

    fn slow_nodes(n: usize, slow: &[usize]) -> FabricModel {
        let mut m = FabricModel::uniform(n, 50.0);
        for &s in slow {
            m.node_gbps[s] = 20.0;
        }
        m
    }

    /// A link slow enough that every group of the search sees it (half the rate at
    /// which it could hide in the whole job).
    fn seen_link(n: usize, algo: AllToAll) -> f64 {
        50.0 * algo.hides_above(n, 0.8) * 0.5
    }

    fn log2(n: usize) -> f64 {
        (n as f64).log2()
    }

    #[test]
    fn a_group_is_judged_against_the_best_of_groups_up_to_twice_its_size() {
        let mut b = Bisection::new(16, 0.8, None);
        // A 16-node group ran faster than the 4-node ones: a group of 4 is judged
        // against groups of at most 8 nodes, not it.
        b.seen = vec![(16, 50.0), (4, 20.0), (8, 10.0)];
        assert_eq!(b.threshold(4), 0.8 * 20.0);
        assert_eq!(b.threshold(8), 0.8 * 50.0);
        // No group of at most 2k seen: the best of any size.
        assert_eq!(b.threshold(1), 0.8 * 50.0);
        // Three pairs: their best is the pairs' reference, not a faster group of 4
        // (a pair at 0.093 beside pairs at 0.102 and 4-node groups at 0.118 is not
        // slow at 0.8); fewer, and larger groups, keep the rule above.
        let mut p = Bisection::new(8, 0.8, None);
        p.seen = vec![(2, 0.1024), (2, 0.0973), (2, 0.0934), (4, 0.1177), (3, 0.2)];
        assert_eq!(p.threshold(2), 0.8 * 0.1024);
        assert_eq!(p.threshold(4), 0.8 * 0.2);
        p.seen = vec![(2, 0.1024), (2, 0.0973), (4, 0.1177)];
        assert_eq!(p.threshold(2), 0.8 * 0.1177);
        // The floor when it is higher.
        let mut f = Bisection::new(16, 0.8, Some(30.0));
        f.seen = b.seen.clone();
        assert_eq!(f.threshold(4), 30.0);
        assert_eq!(f.threshold(8), 40.0);
    }

    #[test]
    fn a_ring_is_paced_by_its_slowest_hop_between_neighbours() {
        let mut m = FabricModel::uniform(4, 50.0);
        m.hop_latency_s = 0.0;
        let ring = [0, 1, 2, 3];
        let at = |gbps: f64| 6.0 * (BYTES / 4.0 / (gbps * 1e9));
        assert_eq!(m.ring_seconds(&ring, BYTES), at(50.0));
        // A slow link between neighbours 1 and 2 of the ring paces every step; one
        // between non-neighbours (0 and 2) is not on the ring.
        m.slow_links = vec![(1, 2, 10.0)];
        assert_eq!(m.ring_seconds(&ring, BYTES), at(10.0));
        m.slow_links = vec![(0, 2, 10.0)];
        assert_eq!(m.ring_seconds(&ring, BYTES), at(50.0));
        // The hop that closes the ring, 3 back to 0.
        m.slow_links = vec![(0, 3, 5.0)];
        assert_eq!(m.ring_seconds(&ring, BYTES), at(5.0));
        assert_eq!(m.ring_seconds(&[2], BYTES), 0.0);
        // Each of the 2(k-1) steps adds a hop's latency.
        m.slow_links.clear();
        m.hop_latency_s = 5e-6;
        let with_latency = 6.0 * (BYTES / 4.0 / (50.0 * 1e9) + 5e-6);
        assert_eq!(m.ring_seconds(&ring, BYTES), with_latency);
    }

    /// A 4-node all-pairs search whose first round's second pair runs at `second`
    /// GB/s and every other pair at 50, at fraction 0.5: its finding and that pair.
    fn four_nodes_with_one_pair_at(second: f64) -> (Finding, Vec<usize>) {
        let mut b = Bisection::new(4, 0.5, None);
        let mut rounds = 0;
        while let Some(groups) = b.next_round() {
            rounds += 1;
            assert!(rounds <= 3, "{:?}", b.finding);
            let mut rates = vec![50.0; groups.len()];
            if rounds == 1 {
                rates[1] = second;
            }
            b.record(&rates);
        }
        let pair = b.finding.path[1].nodes.clone();
        (b.finding, pair)
    }

    #[test]
    fn a_pair_exactly_at_the_threshold_when_its_job_ends_is_not_a_slow_link() {
        // 0.5 × the best (50) is 25: a pair at 25 is not slow, at 24 it is.
        let (f, _) = four_nodes_with_one_pair_at(25.0);
        assert!(f.slow_links.is_empty() && f.slow_nodes.is_empty(), "{f:?}");
        let (f, pair) = four_nodes_with_one_pair_at(24.0);
        assert_eq!(f.slow_links, vec![(pair[0], pair[1])], "{f:?}");
        assert!(f.slow_nodes.is_empty(), "{f:?}");
    }

    #[test]
    fn a_leaf_names_the_node_slow_with_a_healthy_partner_and_else_the_link() {
        // The last step of a link search: nodes 0 and 1, each tried with a healthy
        // partner (2 and 3).
        let leaf = |rates: [f64; 2]| {
            let mut b = Bisection::new(8, 0.5, None);
            // Pairs seen before at 50 GB/s.
            b.seen = vec![(2, 50.0)];
            b.jobs = vec![Job {
                kind: Kind::Leaf { a: 0, b: 1 },
                probes: vec![
                    Probe::new(vec![0, 2], Role::Partner(0)),
                    Probe::new(vec![1, 3], Role::Partner(1)),
                ],
                done: false,
            }];
            b.record(&rates);
            assert!(b.next_round().is_none(), "{:?}", b.finding);
            b.finding
        };
        let f = leaf([10.0, 50.0]);
        assert_eq!(
            (f.slow_nodes.as_slice(), f.slow_links.as_slice()),
            (&[0][..], &[][..])
        );
        let f = leaf([50.0, 10.0]);
        assert_eq!(
            (f.slow_nodes.as_slice(), f.slow_links.as_slice()),
            (&[1][..], &[][..])
        );
        let f = leaf([10.0, 10.0]);
        assert_eq!(f.slow_nodes, vec![0, 1], "{f:?}");
        assert!(f.slow_links.is_empty(), "{f:?}");
        // Both fast with other partners: the link between them.
        let f = leaf([50.0, 50.0]);
        assert_eq!(
            (f.slow_nodes.as_slice(), f.slow_links.as_slice()),
            (&[][..], &[(0, 1)][..])
        );
    }

    #[test]
    fn an_alltoall_adds_a_hop_latency_per_peer_and_waits_for_its_slowest_step() {
        let mut m = FabricModel::uniform(4, 50.0);
        let g = [0, 1, 2, 3];
        let block = 1e6;
        let one = block / (50.0 * 1e9);
        // Three peers: three blocks out of each node at once, or three steps of one.
        let lat = 3.0 * 5e-6;
        assert_eq!(
            m.alltoall_seconds(&g, block, AllToAll::Concurrent),
            3.0 * one + lat
        );
        assert_eq!(
            m.alltoall_seconds(&g, block, AllToAll::Pairwise),
            one + one + one + lat
        );
        // A link at a tenth of the rate: one step (or one message) takes ten blocks.
        m.slow_links = vec![(1, 2, 5.0)];
        let ten = block / (5.0 * 1e9);
        assert_eq!(
            m.alltoall_seconds(&g, block, AllToAll::Concurrent),
            ten + lat
        );
        assert_eq!(
            m.alltoall_seconds(&g, block, AllToAll::Pairwise),
            ten + one + ten + lat
        );
        assert_eq!(m.alltoall_seconds(&[3], block, AllToAll::Pairwise), 0.0);
    }

    #[test]
    fn a_cut_with_an_empty_side_is_nothing_and_no_side_pair_has_an_empty_side() {
        let mut b = Bisection::new(8, 0.5, None);
        let before = b.jobs.len();
        b.cut(vec![], vec![5]);
        b.cut(vec![1, 2], vec![]);
        assert_eq!(b.jobs.len(), before, "{:?}", &b.jobs[before..]);
        // Node 0 against nodes 1-3, no healthy node known to test 0 alone with: the
        // side pairs at once — none with an empty side.
        b.cut(vec![0], vec![1, 2, 3]);
        assert_eq!(b.jobs.len(), before + 1);
        let Kind::Cut { group, sides } = &b.jobs[before].kind else {
            panic!("{:?}", b.jobs[before]);
        };
        assert_eq!(group.as_slice(), &[0, 1, 2, 3][..]);
        let [h1, h2] = halves(&[1, 2, 3]);
        assert_eq!(sides, &vec![(vec![0], h1), (vec![0], h2)]);
    }

    #[test]
    fn a_round_recorded_unasked_is_the_next_and_a_rate_at_the_threshold_is_not_slow() {
        let mut b = Bisection::new(4, 0.5, None);
        // record() without next_round(): the rates are the next round's groups.
        b.record(&[50.0, 25.0]);
        assert_eq!(b.finding.rounds, 1);
        assert_eq!(b.finding.path.len(), 2);
        assert_eq!(b.finding.path[1].threshold_gbps, 25.0);
        assert_eq!(b.finding.path[1].busbw_gbps, 25.0);
        assert!(!b.finding.path[1].slow, "{:?}", b.finding.path[1]);
        b.record(&[50.0, 24.0]);
        assert!(b.finding.path[3].slow, "{:?}", b.finding.path[3]);
    }

    #[test]
    fn a_group_slow_only_against_a_later_rounds_bar_is_measured_again_first() {
        // CI beside a CPU hog, a leaf of 4 at 0.5: a pair at 0.0232 in the first
        // round, fast against that round (0.5 x 0.0318), slow against 0.5 x 0.047
        // read a round later: it runs once more and counts at its better reading
        let mut b = Bisection::new(4, 0.5, None);
        let rounds = [[0.0232, 0.0318], [0.047, 0.0314], [0.0320, 0.0313]];
        let mut first = Vec::new();
        for rates in rounds {
            first.push(b.next_round().unwrap());
            b.record(&rates);
        }
        assert_eq!(b.next_round().unwrap(), vec![first[0][0].clone()]);
        b.record(&[0.045]);
        assert!(b.next_round().is_none());
        let f = b.finding();
        assert!(f.slow_links.is_empty() && f.slow_nodes.is_empty(), "{f:?}");
        assert_eq!(f.pairs_cleared, 6, "{f:?}");
        // slow again when measured again: named
        let mut b = Bisection::new(4, 0.5, None);
        for rates in rounds {
            b.next_round().unwrap();
            b.record(&rates);
        }
        b.next_round().unwrap();
        b.record(&[0.0230]);
        assert!(b.next_round().is_none());
        let f = b.finding();
        assert!(
            !f.slow_links.is_empty() || !f.slow_nodes.is_empty(),
            "{f:?}"
        );
    }

    #[test]
    fn below_threshold_judges_a_round_with_its_own_rates_and_records_nothing() {
        let mut b = Bisection::new(8, 0.8, None);
        let round = b.next_round().unwrap();
        assert_eq!(round, vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]);
        // The round's best (1.0) is the reference: 0.79 is below 0.8 of it, 0.8 is not.
        let rates = [1.0, 0.8, 0.79, 0.95];
        assert_eq!(b.below_threshold(&rates), [false, false, true, false]);
        assert_eq!(b.below_threshold(&rates), [false, false, true, false]);
        assert_eq!(b.finding().rounds, 0, "nothing recorded");
        // The same rates recorded judge the same way.
        b.record(&rates);
        let slow: Vec<bool> = b.finding().path.iter().map(|d| d.slow).collect();
        assert_eq!(slow, [false, false, true, false]);
    }

    #[test]
    fn split_is_contiguous_and_near_equal() {
        let v: Vec<usize> = (0..7).collect();
        assert_eq!(split(&v, 2), vec![vec![0, 1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(
            split(&v, 4),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6]]
        );
        assert_eq!(halves(&[9]), [vec![9], vec![]]);
    }

    #[test]
    fn one_slow_node_is_named_among_every_size_in_about_log2_n_rounds() {
        for algo in ALGOS {
            for n in [3usize, 4, 5, 6, 7, 8, 9, 16, 33, 64, 1024] {
                for slow in [0, n / 2, n - 1] {
                    let (f, _) = run_on_model(&slow_nodes(n, &[slow]), 0.8, BYTES, 1, algo);
                    assert_eq!(
                        f.slow_nodes,
                        vec![slow],
                        "{algo:?} n={n} slow={slow}: {f:?}"
                    );
                    assert!(
                        f.slow_links.is_empty() && f.unresolved.is_empty(),
                        "n={n}: {f:?}"
                    );
                    // +1 for a group fast against its own round's bar and slow
                    // against a later one, measured once more (`recheck`)
                    assert!(
                        f.rounds as f64 <= log2(n).ceil() + 3.0,
                        "{algo:?} n={n}: {} rounds",
                        f.rounds
                    );
                }
            }
        }
    }

    #[test]
    fn a_healthy_fabric_is_cleared_pair_by_pair_in_two_rounds() {
        for n in [2usize, 3, 4, 5, 8, 64] {
            let (f, _) = run_on_model(
                &FabricModel::uniform(n, 50.0),
                0.8,
                BYTES,
                1,
                AllToAll::Pairwise,
            );
            // Up to 4 nodes every pair (3 rounds); then the job and its halves or quarters.
            // ... 8 nodes and more: the quarters, then every two quarters together.
            let rounds = match n {
                2 => 1,
                3 | 4 => 3,
                5..=7 => 2,
                _ => 4,
            };
            assert_eq!(f.rounds, rounds, "n={n}");
            assert!(f.slow_nodes.is_empty() && f.slow_links.is_empty() && f.unresolved.is_empty());
            assert!(f.path.iter().all(|d| !d.slow));
            assert_eq!(f.pairs_total, n * (n - 1) / 2);
            assert_eq!(f.pairs_cleared, f.pairs_total, "n={n}");
            assert_eq!(f.pairs_open, 0);
            // Pairs across two parts are crossed only by the two parts together.
            let largest = match n {
                2..=4 => 2,
                5..=7 => n,
                _ => n / 2,
            };
            assert_eq!(f.largest_clearing_group, largest, "n={n}");
        }
    }

    #[test]
    fn two_slow_nodes_in_different_or_the_same_half_are_both_named() {
        for slow in [[3usize, 40], [3, 5], [10, 11], [31, 32]] {
            let (f, _) = run_on_model(&slow_nodes(64, &slow), 0.8, BYTES, 1, AllToAll::Concurrent);
            assert_eq!(f.slow_nodes, slow.to_vec(), "{slow:?}: {f:?}");
            assert!(f.slow_links.is_empty(), "{f:?}");
        }
    }

    #[test]
    fn a_slow_link_between_any_two_nodes_is_named_as_a_link_within_2_log2_n_plus_2_rounds() {
        // Neighbours, far apart, across the first cut, inside a quarter: an alltoall
        // crosses every pair, whatever a ring's order would have been.
        let mut checked = 0;
        for algo in ALGOS {
            for n in [3usize, 4, 5, 6, 7, 8, 16, 64, 1024] {
                let picks = [
                    (0, 1),
                    (1, n - 2),
                    (0, n - 1),
                    (n / 2 - 1, n / 2),
                    (n / 5, 4 * n / 5),
                    (1, n / 2 + 1),
                ];
                for (a, b) in picks {
                    if a >= b || b >= n {
                        continue;
                    }
                    let mut m = FabricModel::uniform(n, 50.0);
                    m.slow_links.push((a, b, seen_link(n, algo)));
                    let (f, _) = run_on_model(&m, 0.8, BYTES, 1, algo);
                    assert_eq!(
                        f.slow_links,
                        vec![(a, b)],
                        "{algo:?} n={n} ({a},{b}): {f:?}"
                    );
                    // Each pair is cleared, or the named link, or open (only in slow
                    // groups: those holding the link).
                    assert_eq!(f.pairs_cleared + 1 + f.pairs_open, f.pairs_total, "{f:?}");
                    assert!(f.slow_nodes.is_empty() && f.unresolved.is_empty(), "{f:?}");
                    assert!(
                        f.rounds as f64 <= 2.0 * log2(n).ceil() + 2.0,
                        "{algo:?} n={n} ({a},{b}): {} rounds",
                        f.rounds
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 80, "{checked}");
    }

    #[test]
    fn a_link_slowed_by_less_than_the_groups_spread_hides_and_the_finding_says_how_large_it_was() {
        // 8 nodes: node1 and node5 meet only in quarters 0 and 2 together, a group of
        // 4 (where they are 2 apart, the pairwise algorithm's worst case); a link
        // above hides_above(4) is not seen, and the finding says pairs were cleared in
        // groups of 4.
        for algo in ALGOS {
            let hide = algo.hides_above(4, 0.8);
            let mut m = FabricModel::uniform(8, 50.0);
            // 1 and 5 are 4 apart: the pairwise algorithm's worst link.
            m.slow_links.push((1, 5, 50.0 * hide * 1.2));
            let (f, _) = run_on_model(&m, 0.8, BYTES, 1, algo);
            assert!(f.slow_links.is_empty(), "{algo:?}: {f:?}");
            assert_eq!(f.largest_clearing_group, 4);
            // Below it, it is seen.
            m.slow_links[0].2 = 50.0 * hide * 0.8;
            let (f, _) = run_on_model(&m, 0.8, BYTES, 1, algo);
            assert_eq!(f.slow_links, vec![(1, 5)], "{algo:?}: {f:?}");
        }
        // The pairwise algorithm hides less than the concurrent one, and a pair alone
        // hides nothing below the fraction itself.
        assert!(AllToAll::Pairwise.hides_above(8, 0.8) > AllToAll::Concurrent.hides_above(8, 0.8));
        for algo in ALGOS {
            assert!((algo.hides_above(2, 0.8) - 0.8).abs() < 1e-12);
        }
    }

    #[test]
    fn bisection_is_a_small_share_of_the_pairs_tier_at_1024_nodes() {
        let m = slow_nodes(1024, &[777]);
        // 256 MiB per rank spread over the job's 1,024 ranks: 256 KiB blocks.
        let (f, t) = run_on_model(&m, 0.8, BYTES / 1024.0, 20, AllToAll::Concurrent);
        let (pair_rounds, pair_t) = pairs_tier_on_model(&m, BYTES, 20);
        assert_eq!(pair_rounds, 1023);
        assert!(f.rounds <= 12, "{} rounds", f.rounds);
        assert!(t < 0.05 * pair_t, "{t} s vs pairs {pair_t} s");
    }

    #[test]
    fn the_models_match_nccl_tests_conventions() {
        let m = FabricModel {
            hop_latency_s: 0.0,
            ..FabricModel::uniform(8, 25.0)
        };
        let g: Vec<usize> = (0..8).collect();
        // busbw of a ring paced by 25 GB/s links is 25 GB/s, whatever the size.
        assert!((m.ring_busbw_gbps(&g, BYTES) - 25.0).abs() < 1e-9);
        assert!((m.ring_busbw_gbps(&g[..2], BYTES) - 25.0).abs() < 1e-9);
        // An alltoall's node rate is the link rate, whatever the group's size.
        for algo in ALGOS {
            for k in [2usize, 3, 8] {
                let r = m.alltoall_node_rate(&g[..k], BYTES, algo);
                assert!((r - 25.0).abs() < 1e-9, "{algo:?} k={k}: {r}");
            }
        }
    }

    #[test]
    fn a_floor_finds_a_uniformly_slow_fabric_and_tiny_jobs_end() {
        let mut b = Bisection::new(8, 0.8, Some(40.0));
        let g = b.next_round().unwrap_or_default();
        b.record(&vec![20.0; g.len()]);
        let g = b.next_round().unwrap_or_default();
        b.record(&vec![20.0; g.len()]);
        assert!(b.finding().path.iter().all(|d| d.slow));
        let mut two = Bisection::new(2, 0.8, None);
        assert_eq!(two.next_round(), Some(vec![vec![0, 1]]));
        let mut one = Bisection::new(1, 0.8, None);
        assert!(one.next_round().is_none());
        assert_eq!(one.finding().pairs_total, 0);
    }

    #[test]
    fn groups_of_one_round_never_share_a_node() {
        let mut m = slow_nodes(64, &[5, 40]);
        m.slow_links.push((20, 50, 0.1));
        let mut b = Bisection::new(64, 0.8, None);
        let mut rounds = 0;
        while let Some(groups) = b.next_round() {
            rounds += 1;
            assert!(rounds < 100);
            let mut seen = BTreeSet::new();
            for g in &groups {
                assert!(g.len() >= 2, "{g:?}");
                for &x in g {
                    assert!(seen.insert(x), "node {x} twice in one round: {groups:?}");
                }
            }
            let rates: Vec<f64> = groups
                .iter()
                .map(|g| m.alltoall_node_rate(g, BYTES, AllToAll::Concurrent))
                .collect();
            b.record(&rates);
        }
        let f = b.finding();
        // Two slow nodes in quarters 0 and 2, and a link between quarters 1 and 3,
        // which those two quarters together cross: all three named.
        assert_eq!(f.slow_nodes, vec![5, 40], "{f:?}");
        assert_eq!(f.slow_links, vec![(20, 50)], "{f:?}");
        assert_eq!(b.cleared[b.pair_index(20, 50)], 0);
    }

    #[test]
    fn a_pair_keeps_the_smallest_fast_group_it_was_cleared_in() {
        let mut b = Bisection::new(6, 0.8, None);
        b.clear(&[0, 1, 2, 3]);
        b.clear(&[0, 1, 4]);
        b.clear(&[2, 3, 4, 5]);
        assert_eq!(b.cleared[b.pair_index(0, 1)], 3, "cleared in 4 then in 3");
        assert_eq!(b.cleared[b.pair_index(2, 3)], 4, "cleared in 4 twice");
        assert_eq!(b.cleared[b.pair_index(0, 4)], 3);
        assert_eq!(b.cleared[b.pair_index(0, 5)], 0, "never together");
        b.finish();
        let f = b.finding();
        // 6 pairs of {0..3}, 2 new of {0,1,4}, 5 new of {2..5}: 13 of 15.
        assert_eq!(f.pairs_cleared, 13);
        assert_eq!(f.largest_clearing_group, 4);
        assert_eq!(f.pairs_open, 2, "(0,5) and (1,5)");
    }

    #[test]
    fn finish_gives_a_slow_nodes_links_to_the_node_and_counts_only_unexplained_pairs() {
        let mut b = Bisection::new(5, 0.8, None);
        b.finding.slow_nodes = vec![2, 2];
        b.finding.slow_links = vec![(3, 4), (1, 2), (2, 4), (3, 4)];
        b.finish();
        let f = b.finding().clone();
        assert_eq!(f.slow_nodes, vec![2]);
        assert_eq!(f.slow_links, vec![(3, 4)], "links of node 2 are node 2's");
        // 10 pairs: 4 hold node 2, 1 is the slow link, none cleared: 5 open.
        assert_eq!(f.pairs_open, 5);
        // A second finish changes nothing.
        b.finish();
        assert_eq!(b.finding(), &f);
        assert_eq!(b.nodes(), 5);
        assert_eq!(Bisection::new(64, 0.8, None).nodes(), 64);
    }

    #[test]
    fn alltoall_algorithms_are_named_as_the_tables_print_them() {
        assert_eq!(AllToAll::Concurrent.name(), "concurrent");
        assert_eq!(AllToAll::Pairwise.name(), "pairwise");
    }

    #[test]
    fn modelled_seconds_are_each_rounds_slowest_group_times_the_iterations() {
        // Two healthy nodes: one round (the pair) is fast and ends the search, so the
        // search costs that one alltoall, `iters` times.
        let m = FabricModel::uniform(2, 25.0);
        let all = [0usize, 1];
        for algo in ALGOS {
            let one = m.alltoall_seconds(&all, BYTES / 2.0, algo);
            assert!(one > 0.0);
            let (f, t) = run_on_model(&m, 0.8, BYTES / 2.0, 20, algo);
            assert_eq!(f.rounds, 1, "{algo:?}");
            assert!(
                (t - 20.0 * one).abs() <= 1e-9 * t,
                "{algo:?}: {t} vs 20 × {one}"
            );
        }
        // The pairs tier: every round of pairs is as slow as one pair's all_reduce.
        let m = FabricModel::uniform(2, 25.0);
        let (rounds, t) = pairs_tier_on_model(&m, BYTES, 20);
        let one = m.ring_seconds(&[0, 1], BYTES);
        assert_eq!(rounds, 1);
        assert!(one > 0.0);
        assert!((t - 20.0 * one).abs() <= 1e-9 * t, "{t} vs 20 × {one}");
    }
}
