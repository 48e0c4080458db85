//! The fabric as measured (`burnin sweep --fabric-map`): which nodes share a leaf
//! switch, each leaf's injection and cross-leaf rate, the bisection bandwidth, and the
//! oversubscription these give — from measurements alone, or checked against a
//! declared `topology.conf`.
//!
//! Every measurement is an alltoall of the same block per peer, read as a per-node
//! link rate (`sweep::find_slow::node_rate`), so groups of any size compare.
//!
//! * **Which nodes share a leaf** ([`infer_leaves`]): every node pair runs in the
//!   circle method's rounds, all pairs of a round at once. Pairs across leaves share
//!   the uplinks with the other crossing pairs of their round, so on an oversubscribed
//!   fabric they run slower than pairs inside a leaf. The pair rates are split at their
//!   widest gap (ratio between neighbours in sorted order); nodes joined by fast pairs
//!   are one leaf. How sure: the gap's ratio, and whether every pair inside a leaf was
//!   fast and every pair across was slow. Where the fast pairs join every node (at
//!   2:1 only the rounds whose pairs all cross run slow), the slow pairs' two sides
//!   are the leaves when they hold (`two_sides`). Its limit: a leaf's boundary shows only
//!   where some round loaded its uplink past its capacity. On a non-blocking fabric,
//!   or one whose rounds never put more pairs on an uplink than it carries at full
//!   rate, the nodes answer as one switch, and the map says so.
//! * **Injection** ([`injection_pairs`]): inside each leaf its nodes paired off, every
//!   pair of every leaf at once: every node link busy, no traffic on an uplink.
//! * **Bisection** ([`bisection_pairs`]): the leaves dealt into two halves of near-equal
//!   node count, each node of one half paired with a node of the other on another
//!   leaf, every pair at once: every uplink carries all its paired nodes' traffic.
//!   Every pair streams for the same time, so the bisection bandwidth is the sum of
//!   the pairs' rates (each way; how they are read: `sweep::fabric_map`); its
//!   fraction is the average pair's rate over the injection rate, and the
//!   oversubscription as measured its inverse (per leaf: over the average pair of its
//!   nodes).
use serde::{Deserialize, Serialize};

/// Leaves as measured, and how sure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inference {
    /// Node indices per leaf, each ascending, leaves by their first node.
    pub leaves: Vec<Vec<usize>>,
    /// The gap the pair rates were split at: slowest fast pair over fastest slow
    /// one (1: no split).
    pub separation: f64,
    /// Pairs inside an inferred leaf measured fast, of those inside.
    pub inside_fast: (usize, usize),
    /// Pairs across inferred leaves measured slow, of those across.
    pub across_slow: (usize, usize),
    /// In words: what the map rests on.
    pub how: String,
}

/// A pair slower than this fraction of the fast pairs' rate (the median of the
/// faster half) was slowed by the pairs it ran beside.
pub const FAST_FRACTION: f64 = 0.8;

/// Two nodes joined by a fast pair are one leaf only when their fast neighbourhoods
/// (each node with its fast partners) overlap by at least this much (shared over
/// either): a pair across leaves that ran fast because its round left the uplink room
/// joins nodes whose other fast partners differ.
pub const SAME_LEAF_OVERLAP: f64 = 0.5;

/// Leaves from the rates of node pairs (a, b, GB/s; a pair measured more than once
/// counts at its mean) over nodes `0..n` (see the module).
pub fn infer_leaves(n: usize, pairs: &[(usize, usize, f64)]) -> Inference {
    infer_leaves_in_rounds(n, pairs, &[])
}

/// [`infer_leaves`], told which pairs ran together (`rounds`, each round's pairs):
/// a round whose pairs average below [`FAST_FRACTION`] of the fast pairs loaded an
/// uplink past its capacity, and every pair of it counts as slow for the slow pairs'
/// two sides (`two_sides`), however the round's pairs shared the uplink (at 2:1 one
/// crossing pair of such a round read 0.0304 and 0.0425 GB/s, its partners 0.027-0.033).
pub fn infer_leaves_in_rounds(
    n: usize,
    pairs: &[(usize, usize, f64)],
    rounds: &[Vec<(usize, usize)>],
) -> Inference {
    let mut sums: std::collections::BTreeMap<(usize, usize), (f64, usize)> = Default::default();
    for &(a, b, r) in pairs {
        if a < n && b < n && a != b {
            let e = sums.entry((a.min(b), a.max(b))).or_insert((0.0, 0));
            e.0 += r;
            e.1 += 1;
        }
    }
    let best: std::collections::BTreeMap<(usize, usize), f64> = sums
        .into_iter()
        .map(|(k, (s, c))| (k, s / c as f64))
        .collect();
    let mut rates: Vec<f64> = best.values().copied().collect();
    rates.sort_by(f64::total_cmp);
    let reference = median(&rates[rates.len() / 2..]);
    let cut = FAST_FRACTION * reference;
    let fast = |a: usize, b: usize| best.get(&(a.min(b), a.max(b))).is_some_and(|&r| r >= cut);
    let (fast_rates, slow_rates): (Vec<f64>, Vec<f64>) = rates.iter().partition(|&&r| r >= cut);
    let separation = if slow_rates.is_empty() {
        1.0
    } else {
        median(&fast_rates) / median(&slow_rates).max(f64::MIN_POSITIVE)
    };
    let one = |how: String| Inference {
        leaves: if n == 0 {
            Vec::new()
        } else {
            vec![(0..n).collect()]
        },
        separation,
        inside_fast: (fast_rates.len(), best.len()),
        across_slow: (0, 0),
        how,
    };
    if slow_rates.is_empty() {
        return one(format!(
            "one switch as far as measured: every one of the {} node pairs ran within {FAST_FRACTION} of the fast pairs (a leaf shows only where a round loaded its uplink past its capacity; a non-blocking fabric answers as one switch)",
            best.len()
        ));
    }
    let mut leaves = shared_partners(n, best.keys().copied(), fast);
    // The fast pairs join every node where the rounds loaded only some uplinks past
    // capacity (at 2:1 on leaves of 4, only the rounds whose pairs all cross): the
    // slow pairs' two sides are then the leaves, when they hold. They are tried too
    // where the leaves found hold a slow pair inside (a healthy 2:1 run joined 7
    // nodes and left one alone: 13 of 21 inside fast).
    let slow_inside = leaves.iter().any(|l| {
        l.iter()
            .enumerate()
            .any(|(i, &a)| l[i + 1..].iter().any(|&b| !fast(a, b)))
    });
    let mut sided = false;
    if leaves.len() < 2 || slow_inside {
        let slow = side_pairs(n, &best, rounds, cut);
        match two_sides(n, &slow, fast) {
            Some(l) => {
                leaves = l;
                sided = true;
            }
            None if leaves.len() >= 2 => {}
            None => {
                return one(format!(
                    "one switch as far as measured: {} of {} node pairs ran below {FAST_FRACTION} of the fast pairs, but the fast pairs join every node and the slow ones do not split the nodes in two (slow pairs inside a leaf, or rounds that loaded only some uplinks past capacity: declare the fabric with --fabric)",
                    slow_rates.len(),
                    best.len()
                ));
            }
        }
    }
    let leaf = |x: usize| leaves.iter().position(|l| l.contains(&x));
    let (mut inside, mut across) = ((0, 0), (0, 0));
    for &(a, b) in best.keys() {
        if leaf(a) == leaf(b) {
            inside.1 += 1;
            inside.0 += usize::from(fast(a, b));
        } else {
            across.1 += 1;
            across.0 += usize::from(!fast(a, b));
        }
    }
    let sure = if inside.0 == inside.1 && across.0 == across.1 {
        "every pair inside a leaf fast, every pair across slow"
    } else {
        "not every pair agrees: see the counts; a pair across leaves runs fast where its round left the uplinks room"
    };
    let joined = if sided {
        "the two sides of the slow pairs, which reach every node and join none of a side, every pair inside a side fast: only some rounds loaded the uplinks past capacity"
    } else {
        "nodes of one leaf share most fast partners"
    };
    Inference {
        how: format!(
            "{} leaves from {} node pairs (fast: at least {FAST_FRACTION} of the fast pairs' median; {joined}), fast pairs {separation:.2}x the slow ones ({sure}: {} of {} inside fast, {} of {} across slow)",
            leaves.len(),
            best.len(),
            inside.0,
            inside.1,
            across.0,
            across.1
        ),
        leaves,
        separation,
        inside_fast: inside,
        across_slow: across,
    }
}

/// Leaves by the first rule: nodes joined by a fast pair whose fast neighbourhoods
/// (each node with its fast partners) overlap by [`SAME_LEAF_OVERLAP`] or more, over
/// the measured `pairs`; each ascending, leaves by their first node.
fn shared_partners(
    n: usize,
    pairs: impl Iterator<Item = (usize, usize)> + Clone,
    fast: impl Fn(usize, usize) -> bool + Copy,
) -> Vec<Vec<usize>> {
    let hood: Vec<Vec<usize>> = (0..n)
        .map(|x| (0..n).filter(|&y| y == x || fast(x, y)).collect())
        .collect();
    let overlap = |a: usize, b: usize| {
        let shared = hood[a].iter().filter(|y| hood[b].contains(y)).count();
        let either = hood[a].len() + hood[b].len() - shared;
        shared as f64 / either.max(1) as f64
    };
    // Union-find over fast pairs whose neighbourhoods agree.
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], x: usize) -> usize {
        let mut x = x;
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for (a, b) in pairs {
        if fast(a, b) && overlap(a, b) >= SAME_LEAF_OVERLAP {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            if ra != rb {
                parent[ra.max(rb)] = ra.min(rb);
            }
        }
    }
    let mut leaves: Vec<Vec<usize>> = Vec::new();
    let mut root_of: std::collections::BTreeMap<usize, usize> = Default::default();
    for x in 0..n {
        let r = find(&mut parent, x);
        let at = *root_of.entry(r).or_insert_with(|| {
            leaves.push(Vec::new());
            leaves.len() - 1
        });
        leaves[at].push(x);
    }
    leaves
}

/// The pairs the slow pairs' two sides are drawn from: every pair of a round (of
/// `rounds`) whose measured pairs average below `cut` (a pair inside a leaf that one
/// stall slowed then stays out), or, where no round was, the pairs below `cut`.
fn side_pairs(
    n: usize,
    best: &std::collections::BTreeMap<(usize, usize), f64>,
    rounds: &[Vec<(usize, usize)>],
    cut: f64,
) -> Vec<(usize, usize)> {
    let key = |&(a, b): &(usize, usize)| (a.min(b), a.max(b));
    let mut loaded: std::collections::BTreeSet<(usize, usize)> = Default::default();
    for round in rounds {
        let rs: Vec<f64> = round
            .iter()
            .filter_map(|p| best.get(&key(p)).copied())
            .collect();
        if !rs.is_empty() && rs.iter().sum::<f64>() / (rs.len() as f64) < cut {
            loaded.extend(round.iter().map(key));
        }
    }
    if loaded.is_empty() {
        best.iter()
            .filter(|(_, &r)| r < cut)
            .map(|(&k, _)| k)
            .collect()
    } else {
        loaded
            .into_iter()
            .filter(|&(a, b)| a < n && b < n)
            .collect()
    }
}

/// Of the pairs inside the slow pairs' two sides, at least this fraction ran fast
/// (a healthy 2:1 run read one inside pair at 0.0356 against a cut of 0.0358 GB/s).
pub const SIDES_INSIDE_FAST: f64 = 0.75;

/// Two leaves from the slow pairs alone (`slow`, over nodes `0..n`): their graph
/// reaches every node, is connected and has two sides with no slow pair inside either
/// (a slow pair between two nodes of one leaf would be a slow link, not the fabric),
/// each side of two nodes or more, at least [`SIDES_INSIDE_FAST`] of the pairs inside
/// the sides `fast`. None otherwise: the slow pairs then say nothing a map can rest on.
fn two_sides(
    n: usize,
    slow: &[(usize, usize)],
    fast: impl Fn(usize, usize) -> bool,
) -> Option<Vec<Vec<usize>>> {
    if n < 4 {
        return None;
    }
    let mut next = vec![Vec::new(); n];
    for &(a, b) in slow {
        next[a].push(b);
        next[b].push(a);
    }
    let mut side: Vec<Option<bool>> = vec![None; n];
    side[0] = Some(false);
    let mut stack = vec![0];
    while let Some(x) = stack.pop() {
        let s = side[x].unwrap_or(false);
        for &y in &next[x] {
            match side[y] {
                None => {
                    side[y] = Some(!s);
                    stack.push(y);
                }
                Some(t) if t == s => return None,
                Some(_) => {}
            }
        }
    }
    let side: Vec<bool> = side.into_iter().collect::<Option<Vec<bool>>>()?;
    let leaves: Vec<Vec<usize>> = [false, true]
        .iter()
        .map(|&s| (0..n).filter(|&x| side[x] == s).collect())
        .collect();
    if leaves.iter().any(|l: &Vec<usize>| l.len() < 2) {
        return None;
    }
    let (mut quick, mut inside) = (0usize, 0usize);
    for l in &leaves {
        for (i, &a) in l.iter().enumerate() {
            for &b in &l[i + 1..] {
                inside += 1;
                quick += usize::from(fast(a, b));
            }
        }
    }
    (quick as f64 >= SIDES_INSIDE_FAST * inside as f64).then_some(leaves)
}

/// The injection round: inside every leaf its nodes paired off (the first with the
/// middle one, and so on; a leaf of odd size leaves its last node out), every pair of
/// every leaf at once: every node link busy, no uplink used. Pairs, like the
/// bisection round's, so that the two compare.
pub fn injection_pairs(leaves: &[Vec<usize>]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for l in leaves {
        let h = l.len() / 2;
        out.extend((0..h).map(|i| (l[i], l[h + i])));
    }
    out
}

/// The bisection round's pairs: leaves dealt (largest first) into the half with fewer
/// nodes, then each node of the smaller half paired with a node of the other half,
/// taken leaf by leaf in turn so that partners spread over the other half's leaves.
/// One leaf (or a leaf holding every node): its node-index halves.
pub fn bisection_pairs(leaves: &[Vec<usize>]) -> Vec<(usize, usize)> {
    let mut order: Vec<&Vec<usize>> = leaves.iter().filter(|l| !l.is_empty()).collect();
    if order.len() < 2 {
        let all: Vec<usize> = order.first().map(|l| l.to_vec()).unwrap_or_default();
        let h = all.len() / 2;
        return (0..h).map(|i| (all[i], all[h + i])).collect();
    }
    order.sort_by_key(|l| std::cmp::Reverse(l.len()));
    let (mut a, mut b): (Vec<&Vec<usize>>, Vec<&Vec<usize>>) = (Vec::new(), Vec::new());
    let count = |s: &Vec<&Vec<usize>>| s.iter().map(|l| l.len()).sum::<usize>();
    for l in order {
        if count(&a) <= count(&b) {
            a.push(l);
        } else {
            b.push(l);
        }
    }
    let interleave = |side: &Vec<&Vec<usize>>| -> Vec<usize> {
        let longest = side.iter().map(|l| l.len()).max().unwrap_or(0);
        (0..longest)
            .flat_map(|i| side.iter().filter_map(move |l| l.get(i).copied()))
            .collect()
    };
    let (xa, xb) = (interleave(&a), interleave(&b));
    xa.into_iter().zip(xb).collect()
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// Nodes the measurements place on another leaf than the declaration: (node, the
/// declared leaf's index, the measured leaf's nodes), for every measured leaf whose
/// nodes are mostly one declared leaf's. Empty when the measurement found one leaf.
pub fn misplaced(declared: &[Vec<usize>], measured: &[Vec<usize>]) -> Vec<(usize, usize, usize)> {
    if measured.len() < 2 {
        return Vec::new();
    }
    let leaf_of = |x: usize| declared.iter().position(|l| l.contains(&x));
    let mut out = Vec::new();
    for (mi, m) in measured.iter().enumerate() {
        let Some(major) = majority(declared, m) else {
            continue;
        };
        for &x in m {
            if let Some(d) = leaf_of(x).filter(|&d| d != major) {
                out.push((x, d, mi));
            }
        }
    }
    out.sort_unstable();
    out
}

/// The declared leaf each measured leaf stands for (its nodes' majority), if any.
pub fn majority(declared: &[Vec<usize>], measured: &[usize]) -> Option<usize> {
    let mut votes = vec![0usize; declared.len()];
    for &x in measured {
        if let Some(d) = declared.iter().position(|l| l.contains(&x)) {
            votes[d] += 1;
        }
    }
    let (d, &v) = votes.iter().enumerate().max_by_key(|(_, v)| **v)?;
    (2 * v > measured.len()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs of 8 nodes on two interleaved leaves: inside `inside`, across `across`.
    fn rates(inside: f64, across: f64) -> Vec<(usize, usize, f64)> {
        let mut v = Vec::new();
        for a in 0..8 {
            for b in a + 1..8 {
                let r = if a % 2 == b % 2 { inside } else { across };
                v.push((a, b, r * (1.0 + 0.01 * ((a * 7 + b) % 5) as f64)));
            }
        }
        v
    }

    #[test]
    fn two_leaves_are_found_from_slow_cross_pairs() {
        let inf = infer_leaves(8, &rates(10.0, 4.0));
        assert_eq!(inf.leaves, vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        assert_eq!(inf.inside_fast, (12, 12));
        assert_eq!(inf.across_slow, (16, 16));
        assert!(inf.separation > 2.0, "{inf:?}");
        // three leaves of unequal size, nodes in any order
        let leaf = |x: usize| [0, 1, 2, 0, 1, 0, 2, 0, 1][x];
        let mut v = Vec::new();
        for a in 0..9 {
            for b in a + 1..9 {
                v.push((a, b, if leaf(a) == leaf(b) { 5.0 } else { 2.0 }));
            }
        }
        let inf = infer_leaves(9, &v);
        assert_eq!(
            inf.leaves,
            vec![vec![0, 3, 5, 7], vec![1, 4, 8], vec![2, 6]]
        );
        assert!(inf.how.contains("3 leaves"), "{}", inf.how);
    }

    #[test]
    fn at_2_to_1_the_slow_pairs_two_sides_are_the_leaves() {
        // only the rounds whose pairs all cross ran slow: two of them, whose pairs
        // make one cycle through all 8 nodes; every other pair, across or not, fast
        let slow_rounds = [
            [(0, 1), (2, 3), (4, 5), (6, 7)],
            [(0, 3), (2, 5), (4, 7), (1, 6)],
        ];
        let with = |rounds: &[[(usize, usize); 4]]| {
            let mut r = rates(10.0, 10.0);
            for p in &mut r {
                if rounds.iter().flatten().any(|&q| q == (p.0, p.1)) {
                    p.2 = 5.0;
                }
            }
            r
        };
        let inf = infer_leaves(8, &with(&slow_rounds));
        assert_eq!(
            inf.leaves,
            vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]],
            "{inf:?}"
        );
        assert_eq!(inf.inside_fast, (12, 12));
        assert_eq!(inf.across_slow, (8, 16));
        assert!(
            inf.how.contains("two sides of the slow pairs"),
            "{}",
            inf.how
        );
        // one such round: its pairs split the nodes into four, not two: one switch
        let inf = infer_leaves(8, &with(&slow_rounds[..1]));
        assert_eq!(inf.leaves.len(), 1, "{inf:?}");
        // a slow pair inside a side (a slow link): no two sides, one switch
        let mut r = with(&slow_rounds);
        for p in &mut r {
            if (p.0, p.1) == (0, 2) {
                p.2 = 5.0;
            }
        }
        let inf = infer_leaves(8, &r);
        assert_eq!(inf.leaves.len(), 1, "{inf:?}");
        assert!(
            inf.how.contains("do not split the nodes in two"),
            "{}",
            inf.how
        );
    }

    #[test]
    fn a_round_that_loaded_the_uplinks_counts_whole_however_its_pairs_shared_them() {
        // the 2:1 pattern, but in each all-crossing round node1's pair took a fast
        // share (9 of 10) and its partners the rest (5): alone, node1 is slow with
        // nobody and the sides do not reach it; told the rounds, both count whole
        let slow_rounds = vec![
            vec![(0, 1), (2, 3), (4, 5), (6, 7)],
            vec![(0, 3), (2, 5), (4, 7), (1, 6)],
        ];
        let mut r = rates(10.0, 10.0);
        for p in &mut r {
            if slow_rounds.iter().flatten().any(|&q| q == (p.0, p.1)) {
                p.2 = if p.0 == 1 || p.1 == 1 { 9.0 } else { 5.0 };
            }
        }
        let alone = infer_leaves(8, &r);
        assert_eq!(alone.leaves.len(), 1, "{alone:?}");
        let mut rounds = slow_rounds.clone();
        rounds.push(vec![(0, 2), (1, 3), (4, 6), (5, 7)]);
        let inf = infer_leaves_in_rounds(8, &r, &rounds);
        assert_eq!(
            inf.leaves,
            vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]],
            "{inf:?}"
        );
        assert_eq!(inf.inside_fast, (12, 12));
        // a stall slowed one pair inside a leaf: the loaded rounds still split the
        // nodes, the pair is counted as what it was
        for p in &mut r {
            if (p.0, p.1) == (5, 7) {
                p.2 = 7.0;
            }
        }
        let inf = infer_leaves_in_rounds(8, &r, &rounds);
        assert_eq!(inf.leaves.len(), 2, "{inf:?}");
        assert_eq!(inf.inside_fast, (11, 12));
    }

    #[test]
    fn a_non_blocking_fabric_answers_as_one_switch() {
        let inf = infer_leaves(8, &rates(10.0, 9.7));
        assert_eq!(inf.leaves, vec![(0..8).collect::<Vec<_>>()]);
        assert!(inf.how.contains("one switch"), "{}", inf.how);
    }

    #[test]
    fn cross_pairs_unloaded_in_their_round_do_not_join_the_leaves() {
        // a third of the cross pairs ran fast (their round left the uplinks room)
        let mut r = rates(10.0, 4.0);
        for p in &mut r {
            if p.0 % 2 != p.1 % 2 && (p.0 + p.1) % 3 == 0 {
                p.2 = 10.0;
            }
        }
        let inf = infer_leaves(8, &r);
        assert_eq!(
            inf.leaves,
            vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]],
            "{inf:?}"
        );
        assert!(inf.how.contains("not every pair agrees"), "{}", inf.how);
        // slow pairs scattered with no structure: one switch, said
        let mut r = rates(10.0, 10.0);
        for p in &mut r {
            if (p.0, p.1) == (0, 1) || (p.0, p.1) == (2, 5) {
                p.2 = 4.0;
            }
        }
        let inf = infer_leaves(8, &r);
        assert_eq!(inf.leaves.len(), 1, "{inf:?}");
        assert!(
            inf.how.contains("fast pairs join every node"),
            "{}",
            inf.how
        );
    }

    #[test]
    fn bisection_pairs_cross_leaves_and_balance_halves() {
        let leaves = vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]];
        let p = bisection_pairs(&leaves);
        assert_eq!(p.len(), 4);
        for (a, b) in &p {
            assert_ne!(a % 2, b % 2);
        }
        // four leaves of 2: halves of two leaves each, partners spread
        let leaves: Vec<Vec<usize>> = (0..4).map(|l| vec![2 * l, 2 * l + 1]).collect();
        let p = bisection_pairs(&leaves);
        assert_eq!(p.len(), 4);
        let side = |x: usize| [0usize, 2].contains(&(x / 2));
        for (a, b) in &p {
            assert_ne!(side(*a), side(*b), "{p:?}");
        }
        // uneven: 5 and 3: three pairs
        let p = bisection_pairs(&[vec![0, 1, 2, 3, 4], vec![5, 6, 7]]);
        assert_eq!(p.len(), 3);
        // one leaf: its index halves
        assert_eq!(bisection_pairs(&[vec![0, 1, 2, 3]]), vec![(0, 2), (1, 3)]);
    }

    #[test]
    fn misplaced_nodes_are_named_against_the_declaration() {
        let declared = vec![vec![0, 2, 4, 5], vec![1, 3, 6, 7]];
        let measured = vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]];
        assert_eq!(misplaced(&declared, &measured), vec![(5, 0, 1), (6, 1, 0)]);
        assert_eq!(majority(&declared, &measured[1]), Some(1));
        assert!(misplaced(&declared, &[vec![0, 1, 2, 3, 4, 5, 6, 7]]).is_empty());
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
