//! `--fabric-map`: the fabric as measured (see `topology::fabric_map`), run after the
//! tiers on the same backend: every node pair in the circle method's rounds (which
//! nodes share a leaf), then each leaf alone (injection) and the two halves against
//! each other (bisection). Every group runs the bisection search's alltoall
//! (`find_slow::bisect_plan`), points recorded with tier `map`; each round runs twice.
//! The injection and bisection rounds stream: every pair of the round starts
//! together and keeps moving blocks for [`STREAM_S`] seconds, so that every pair
//! shares the uplinks for the whole time (pairs that each run a fixed count end at
//! different times, the last ones alone with the uplinks: 6 iterations a pair read
//! 3.0–4.6:1 on a fabric shaped 4:1).
//!
//! * A node link's rate (pair rounds, injection) is a pair's median iteration (the
//!   first timed iteration after a pause runs up to 3x slower on the simulated
//!   cluster); the injection rate (of a leaf, of the fabric) is the fast mode of every
//!   reading of a pair inside the leaf, the pair rounds' and the injection round's
//!   ([`fast_mode`]): on the simulated cluster a pair's connection settles at one of
//!   two rates for a whole run, and the map measures the fabric, not one node (that
//!   is `--find-slow`'s work). A lone pair leaves its
//!   link idle between iterations (each alltoall's rendezvous messages wait behind
//!   its data): on the simulated cluster its bytes over its whole time are 55–60%
//!   of the link's rate, its median iteration 93–96%.
//! * The cut's bandwidth (bisection) is what its pairs moved, summed over the pairs,
//!   of the run that moved the most: every pair streamed through it at once, so that
//!   is what it carried, however unevenly the uplinks shared it out. Each pair counts
//!   at its median iteration, the statistic a node link's rate is read at. A round
//!   whose pairs' medians average [`LINK_HELD`] of a node link's rate or more, and
//!   whose bytes over time average [`MEANS_HELD`] of a lone pair's (the injection
//!   round's), was held by the node links, not the cut (a non-blocking cut), and its
//!   pairs count at their best run like node links. (Medians alone misjudged a 2:1
//!   cut as non-blocking in one run of three: a median picks the faster of an
//!   iteration time's two modes.)
//!
//! On the simulated cluster (8 nodes in two leaves of 4, quiet) this measured 3.87–4.30:1
//! at 4:1 (200 Mbit/s, 5 runs), 1.83–1.94:1 at 2:1 (400 Mbit/s, 3 runs) and
//! 1.01–1.20:1 at 1:1 (200 Mbit/s, 4 runs). Recomputed from the points of 11 recorded
//! 4:1 runs: 3.5–4.3:1 (4.0 on average) with the cut at its pairs' medians, 3.8–4.6:1
//! with each cut pair between its median and its bytes over time (the reading before),
//! 4.1–4.9:1 at its bytes over time.
use super::find_slow::node_rate;
use super::TierRun;
use crate::kinds::TierKind;
use crate::results::sweep::{FabricMap, MapLeaf, Plan, Sampling};
use crate::topology::fabric_map::{self as fm, Inference};
use crate::topology::switches::{Fabric, Switch};
use crate::topology::{self, Round, Tier};
use anyhow::Result;

/// Times each map round runs (each group counts at its best).
const RUNS: usize = 2;

/// Seconds every pair of a streamed round (injection, bisection) moves blocks, after
/// its warm-up.
pub const STREAM_S: f64 = 1.5;

/// `plan` (the bisection plan) run for `seconds` after its warm-up instead of a
/// count: the adaptive sampler with a confidence no sample reaches, so that its
/// time budget ends it (its batches are sized to fit the budget).
pub fn streamed(plan: &Plan, seconds: f64) -> Plan {
    let warmup = match plan.sampling {
        Sampling::Fixed { warmup, .. } | Sampling::Adaptive { warmup, .. } => warmup,
    };
    Plan {
        sampling: Sampling::Adaptive {
            warmup,
            ci: 0.0,
            budget_s: seconds,
            max_iters: 1_000_000,
        },
        ..plan.clone()
    }
}

/// A measured oversubscription this far from the declared one is a difference.
const DECLARED_TOLERANCE: f64 = 0.2;

impl TierRun<'_> {
    /// Measure the map; rank 0 gets it (other ranks None).
    pub(super) fn fabric_map(
        &mut self,
        ranks_per_node: Option<usize>,
    ) -> Result<Option<FabricMap>> {
        let world = self.world;
        let n = world.nodes.len();
        if n < 2 {
            if world.rank == 0 {
                println!("# fabric map: one node, no fabric to map");
            }
            return Ok(None);
        }
        if world.rank == 0 {
            println!(
                "# fabric map: {n} nodes, every pair, then each leaf alone and the halves across"
            );
        }
        let mut index = 0;
        let mut pairs: Vec<(usize, usize, f64)> = Vec::new();
        let rounds = topology::pair_rounds(n);
        for round in &rounds {
            let groups: Vec<Vec<usize>> = round.iter().map(|&(a, b)| vec![a, b]).collect();
            let runs = self.map_round(&groups, ranks_per_node, &mut index, false)?;
            // every measurement of a pair: the inference takes their mean (a pair
            // slowed by its round's neighbours once is evidence of a shared uplink)
            for (&(a, b), r) in round.iter().zip(runs) {
                pairs.extend(r.into_iter().map(|(x, _)| (a, b, x)));
            }
        }
        let inference = (world.rank == 0).then(|| fm::infer_leaves_in_rounds(n, &pairs, &rounds));
        let declared = self.rules.fabric.is_some().then(|| self.leaves());
        let leaves: Vec<Vec<usize>> = match &declared {
            Some(d) => d.clone(),
            None => world.broadcast_json(inference.as_ref().map(|i| &i.leaves))?,
        };
        let inj_pairs = fm::injection_pairs(&leaves);
        let groups: Vec<Vec<usize>> = inj_pairs.iter().map(|&(a, b)| vec![a, b]).collect();
        let inj_runs = self.map_round(&groups, ranks_per_node, &mut index, true)?;
        let lone = average(&best(means(&inj_runs)));
        // every reading of a pair inside one leaf, by leaf: the pair rounds' and the
        // injection round's (each of its runs)
        let inside: Vec<Vec<f64>> = leaves
            .iter()
            .map(|l| {
                let within = |a: &usize, b: &usize| l.contains(a) && l.contains(b);
                pairs
                    .iter()
                    .filter(|(a, b, _)| within(a, b))
                    .map(|&(_, _, r)| r)
                    .chain(
                        inj_pairs
                            .iter()
                            .zip(&inj_runs)
                            .filter(|((a, b), _)| within(a, b))
                            .flat_map(|(_, r)| r.iter().map(|&(median, _)| median)),
                    )
                    .collect()
            })
            .collect();
        let inj = best(medians(inj_runs));
        let bis = fm::bisection_pairs(&leaves);
        let groups: Vec<Vec<usize>> = bis.iter().map(|&(a, b)| vec![a, b]).collect();
        let runs = self.map_round(&groups, ranks_per_node, &mut index, true)?;
        // the streamed injection round's best pair, and a node link's rate
        let streamed = inj.iter().copied().fold(0.0, f64::max);
        let link = match fast_mode(&inside.concat()) {
            r if r > 0.0 => r,
            _ => streamed,
        };
        let cross = cut_rates(runs, streamed, lone, link);
        let Some(inference) = inference else {
            return Ok(None);
        };
        let m = Measured {
            leaves: &leaves,
            declared: declared.is_some(),
            inj_pairs: &inj_pairs,
            inj: &inj,
            inside: &inside,
            link,
            bis: &bis,
            cross: &cross,
            inference: &inference,
        };
        let map = self.assemble(&m);
        print!("{}", render(&map));
        Ok(Some(map))
    }

    /// One map round, run [`RUNS`] times: each group's per-node rate in each run, at
    /// its median and at its mean iteration (rank 0; other ranks get zeros);
    /// `stream`: for [`STREAM_S`] seconds each run, else the plan's iterations.
    fn map_round(
        &mut self,
        groups: &[Vec<usize>],
        ranks_per_node: Option<usize>,
        index: &mut usize,
        stream: bool,
    ) -> Result<Vec<Vec<(f64, f64)>>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let nodes = &self.world.nodes;
        let tier = Tier {
            kind: TierKind::Map,
            rounds: vec![Round {
                groups: groups
                    .iter()
                    .enumerate()
                    .map(|(k, g)| topology::node_group(nodes, g, ranks_per_node, *index + k))
                    .collect(),
            }],
        };
        *index += groups.len();
        let mut out = vec![Vec::new(); groups.len()];
        for pass in 0..RUNS {
            self.stream_s = stream.then_some(STREAM_S);
            let ran = self.round(&tier, 0);
            self.stream_s = None;
            ran?;
            for (k, g) in tier.rounds[0].groups.iter().enumerate() {
                // the group's points of this run: the last ones recorded
                let mine: Vec<(f64, f64)> = self
                    .sink
                    .points
                    .iter()
                    .filter(|p| p.tier == TierKind::Map && p.group == g.index)
                    .map(|p| (p.busbw_gbps, p.busbw_mean_gbps))
                    .collect();
                let (median, mean) = mine.get(pass).copied().unwrap_or((0.0, 0.0));
                let rate = |b: f64| node_rate(b, g.members.len(), g.nodes.len());
                out[k].push((rate(median), rate(mean)));
            }
        }
        Ok(out)
    }

    /// rank 0: the map from its measurements.
    fn assemble(&self, m: &Measured) -> FabricMap {
        let host = |i: usize| self.world.nodes[i].host.clone();
        let fabric = self.rules.fabric.as_ref();
        let name = |k: usize, l: &[usize]| -> String {
            match (m.declared, fabric) {
                (true, Some(f)) => f
                    .leaf_of(&self.world.nodes[l[0]].host)
                    .map(|s| f.name(s).to_string())
                    .unwrap_or_else(|| format!("group {}", k + 1)),
                _ => format!("group {}", k + 1),
            }
        };
        let mut leaves: Vec<MapLeaf> = Vec::new();
        for (k, l) in m.leaves.iter().enumerate() {
            let round: Vec<f64> = m
                .inj_pairs
                .iter()
                .zip(m.inj)
                .filter(|((a, _), _)| l.contains(a))
                .map(|(_, &r)| r)
                .collect();
            let injection = match m.inside.get(k).map(|v| fast_mode(v)) {
                Some(r) if r > 0.0 => r,
                _ => round.iter().copied().fold(0.0, f64::max),
            };
            let mine: Vec<f64> = m
                .bis
                .iter()
                .zip(m.cross)
                .filter(|((a, b), _)| l.contains(a) || l.contains(b))
                .map(|(_, &r)| r)
                .collect();
            // what its nodes' pairs moved through its uplink, a pair on average
            let cross = if mine.is_empty() {
                0.0
            } else {
                mine.iter().sum::<f64>() / mine.len() as f64
            };
            leaves.push(MapLeaf {
                name: name(k, l),
                hosts: l.iter().map(|&i| host(i)).collect(),
                injection_gbps: injection,
                cross_gbps: cross,
                oversubscription: if injection > 0.0 && cross > 0.0 {
                    injection / cross
                } else {
                    0.0
                },
            });
        }
        let injection = m.link;
        // Every pair streamed through the cut at once for the same time: what the
        // cut carries is their sum, however unevenly the uplinks share it out.
        let cut: f64 = m.cross.iter().sum();
        let per_pair = if m.cross.is_empty() {
            0.0
        } else {
            cut / m.cross.len() as f64
        };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut map = FabricMap {
            leaves_from: if m.declared { "declared" } else { "measured" }.into(),
            leaves,
            inference: m.inference.how.clone(),
            separation: m.inference.separation,
            bisection_pairs: m.bis.iter().map(|&(a, b)| (host(a), host(b))).collect(),
            bisection_pair_gbps: m.cross.to_vec(),
            bisection_gbps: cut,
            injection_gbps: injection,
            bisection_fraction: ratio(per_pair, injection),
            oversubscription: ratio(injection, per_pair),
            declared_oversubscription: fabric.and_then(|f| f.oversubscription),
            differences: Vec::new(),
            limits: Vec::new(),
        };
        self.differences(&mut map, m);
        map
    }

    /// rank 0: where the measurement and the declaration differ, and the limits.
    fn differences(&self, map: &mut FabricMap, m: &Measured) {
        let host = |i: usize| self.world.nodes[i].host.clone();
        let n = self.world.nodes.len();
        if m.declared {
            let names: Vec<String> = map.leaves.iter().map(|l| l.name.clone()).collect();
            for (x, d, mi) in fm::misplaced(m.leaves, &m.inference.leaves) {
                let with: Vec<String> = m.inference.leaves[mi]
                    .iter()
                    .filter(|&&y| y != x)
                    .map(|&y| host(y))
                    .collect();
                let theirs = fm::majority(m.leaves, &m.inference.leaves[mi])
                    .map_or("another leaf".to_string(), |l| names[l].clone());
                map.differences.push(format!(
                    "{} answers as a member of {theirs} (with {}), declared {}",
                    host(x),
                    with.join(", "),
                    names[d]
                ));
            }
            if m.inference.leaves.len() != m.leaves.len() && m.inference.leaves.len() > 1 {
                map.differences.push(format!(
                    "the pair rates show {} leaves, {} declared",
                    m.inference.leaves.len(),
                    m.leaves.len()
                ));
            }
            if m.inference.leaves.len() == 1 && m.leaves.len() > 1 {
                map.limits.push(format!(
                    "the pair rates did not show the declared leaves ({})",
                    m.inference.how
                ));
            }
        }
        if let Some(d) = map.declared_oversubscription {
            let got = map.oversubscription;
            if got > 0.0 && (got - d).abs() > DECLARED_TOLERANCE * d {
                map.differences
                    .push(format!("measured {got:.1}:1, declared {d}:1"));
            }
        }
        let paired = 2 * m.bis.len();
        if paired < n {
            map.limits.push(format!(
                "{} of {n} nodes sat out the bisection round (the halves differ in size), so their uplinks carried less than all their nodes",
                n - paired
            ));
        }
        let single: Vec<&str> = map
            .leaves
            .iter()
            .filter(|l| l.hosts.len() < 2)
            .map(|l| l.name.as_str())
            .collect();
        if !single.is_empty() {
            map.limits.push(format!(
                "leaves of one node have no injection rate: {}",
                single.join(", ")
            ));
        }
        if map.leaves.len() < 2 {
            map.limits.push(
                "one leaf: the injection and bisection rounds both pair the nodes by their index halves, so they measure the same thing"
                    .into(),
            );
        }
    }
}

/// Readings within this fraction of the fastest are the fast mode ([`fast_mode`]).
const FAST_MODE: f64 = 0.85;

/// A node link's rate from every reading of a pair inside one leaf (the pair rounds'
/// and the injection round's runs): the median of the readings within [`FAST_MODE`]
/// of the fastest (0 when none). On the simulated cluster a pair's median iteration
/// settles at one of two rates for a whole run, the slower 0.67 of the faster (an
/// iteration 5.6 ms longer; its cause is not settled), and every pair of a run often
/// settles alike: both injection runs of one 4:1 map read 0.0155 GB/s where the pair
/// rounds' 24 readings inside a leaf reached 0.0233, and the map read 2.75:1. The
/// median of the fast mode takes the rate the links allow without resting on one
/// reading that ran fast: a mode of one reading among three or more is not one, and
/// that reading is left out.
fn fast_mode(readings: &[f64]) -> f64 {
    let mode = |v: &[f64]| -> Vec<f64> {
        let top = v.iter().copied().fold(0.0, f64::max);
        v.iter()
            .copied()
            .filter(|&r| r >= FAST_MODE * top && r > 0.0)
            .collect()
    };
    let mut fast = mode(readings);
    if fast.len() == 1 && readings.len() >= 3 {
        let lone = fast[0];
        let rest: Vec<f64> = readings.iter().copied().filter(|&r| r < lone).collect();
        fast = mode(&rest);
    }
    fm::median(&fast)
}

/// Each group at its best run (noise only ever slows a transfer).
fn best(runs: Vec<Vec<f64>>) -> Vec<f64> {
    runs.into_iter()
        .map(|r| r.into_iter().fold(0.0, f64::max))
        .collect()
}

/// Each group's runs at their median iteration.
fn medians(runs: Vec<Vec<(f64, f64)>>) -> Vec<Vec<f64>> {
    runs.into_iter()
        .map(|r| r.into_iter().map(|(m, _)| m).collect())
        .collect()
}

/// A bisection round whose pairs' median iterations average this fraction of a node
/// link's rate or more was held by the node links, not by the cut. Below 0.8: a lone
/// pair's median on the simulated cluster reads 0.79 of the best now and then (two
/// modes, 11 and 14 ms an iteration); above what pairs get through a 2:1 cut (0.5;
/// their medians averaged 0.53–0.61 of the link there, single pairs up to 0.8, which
/// is why the round decides as a whole).
const LINK_HELD: f64 = 0.7;

/// Each group's runs at their mean iteration.
fn means(runs: &[Vec<(f64, f64)>]) -> Vec<Vec<f64>> {
    runs.iter()
        .map(|r| r.iter().map(|&(_, m)| m).collect())
        .collect()
}

/// The average of `v` (0 when empty).
fn average(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// A bisection round whose pairs' bytes over their time average this fraction of a
/// lone pair's (the injection round's) or more was not held back by the cut. At 1:1
/// the pairs across moved 0.98–1.01 of the lone pairs' bytes on the simulated cluster,
/// at 2:1 0.87 (the uplink's half a node link each, against the 0.6 of its link a lone
/// pair's alltoall keeps busy), while their medians read a lone pair's 0.9 in one run
/// of three: a median picks the faster of an iteration time's two modes.
const MEANS_HELD: f64 = 0.95;

/// The bisection pairs' rates, each at its median iteration: when the cut held the
/// round back, of the run that moved the most; else (a non-blocking cut: each pair
/// held by its own link) each pair at its best run, like a node link, in proportion
/// to the streamed injection round: both rounds stream, and on the simulated cluster
/// a streamed pair's median often settles at the slower of its two rates for a whole
/// round, injection and cut alike (at 1:1 both read 0.0154 GB/s where the pair rounds
/// reached 0.021-0.023), so a cut that ran as fast as the injection round counts at
/// `link`. `streamed`: the injection round's best pair; `lone`: a lone pair's bytes
/// over its time (the injection pairs' average mean); `link`: a node link's rate
/// ([`fast_mode`]). The cut held the round back unless both its pairs' best medians
/// average [`LINK_HELD`] of `streamed` and its means [`MEANS_HELD`] of `lone`.
///
/// A held-back pair counts at its median, as a node link does: with the node link
/// read at the fast mode of the pairs' medians, the cut read at its pairs' medians
/// measured 3.5–4.3:1 on a fabric shaped 4:1 (4.0 on average over 11 runs) and
/// 1.75–2.09:1 at 2:1; at the geometric mean of median and bytes over time, as the
/// map did while it read a node link at the best pair, 3.8–4.6:1 and 1.92–2.21:1
/// from the same runs. Bytes over time count the moments every pair on an uplink was
/// between iterations at once as moments the cut carried nothing.
fn cut_rates(runs: Vec<Vec<(f64, f64)>>, streamed: f64, lone: f64, link: f64) -> Vec<f64> {
    let at_mean = best_run(means(&runs));
    let held_back = best_run(medians(runs.clone()));
    let at_median = best(medians(runs));
    if average(&at_median) >= LINK_HELD * streamed && average(&at_mean) >= MEANS_HELD * lone {
        let scale = if streamed > 0.0 { link / streamed } else { 1.0 };
        at_median.into_iter().map(|r| r * scale).collect()
    } else {
        held_back
    }
}

/// The run whose groups moved the most in all (noise only ever slows a transfer;
/// a streamed round's pairs share the uplinks, so a run counts as a whole).
fn best_run(runs: Vec<Vec<f64>>) -> Vec<f64> {
    let passes = runs.first().map_or(0, Vec::len);
    (0..passes)
        .map(|k| {
            runs.iter()
                .map(|r| r.get(k).copied().unwrap_or(0.0))
                .collect::<Vec<f64>>()
        })
        .max_by(|a, b| a.iter().sum::<f64>().total_cmp(&b.iter().sum::<f64>()))
        .unwrap_or_else(|| vec![0.0; runs.len()])
}

/// What the map's rounds measured (rank 0).
struct Measured<'a> {
    leaves: &'a [Vec<usize>],
    declared: bool,
    inj_pairs: &'a [(usize, usize)],
    inj: &'a [f64],
    /// Every reading of a pair inside each leaf (pair rounds and injection round).
    inside: &'a [Vec<f64>],
    /// A node link's rate: the fast mode of every reading inside a leaf.
    link: f64,
    bis: &'a [(usize, usize)],
    cross: &'a [f64],
    inference: &'a Inference,
}

/// The leaves the map measured, as a fabric to judge the run's tiers on (every leaf
/// under one spine): None when a fabric was declared or fewer than two leaves were
/// found (one switch: the flat judgement is the fabric's).
pub fn measured_fabric(m: &FabricMap) -> Option<Fabric> {
    if m.leaves_from != "measured" || m.leaves.len() < 2 {
        return None;
    }
    let mut switches: Vec<Switch> = m
        .leaves
        .iter()
        .map(|l| Switch {
            name: l.name.clone(),
            nodes: l.hosts.clone(),
            switches: Vec::new(),
        })
        .collect();
    switches.push(Switch {
        name: "spine".into(),
        nodes: Vec::new(),
        switches: m.leaves.iter().map(|l| l.name.clone()).collect(),
    });
    Some(Fabric {
        source: "the leaves --fabric-map measured".into(),
        switches,
        oversubscription: None,
    })
}

/// The map as text lines.
pub fn render(m: &FabricMap) -> String {
    let mut s = format!(
        "# fabric map ({} leaves, {}): injection {:.4} GB/s per node, bisection {:.4} GB/s over {} pairs ({:.2} of injection), oversubscription {:.1}:1 measured{}\n",
        m.leaves.len(),
        m.leaves_from,
        m.injection_gbps,
        m.bisection_gbps,
        m.bisection_pairs.len(),
        m.bisection_fraction,
        m.oversubscription,
        m.declared_oversubscription
            .map_or(String::new(), |d| format!(", {d}:1 declared"))
    );
    for l in &m.leaves {
        s.push_str(&format!(
            "#   {}: {} — injection {:.4}, cross {:.4} GB/s per node, {:.1}:1\n",
            l.name,
            l.hosts.join(" "),
            l.injection_gbps,
            l.cross_gbps,
            l.oversubscription
        ));
    }
    s.push_str(&format!("# fabric map: leaves: {}\n", m.inference));
    for d in &m.differences {
        s.push_str(&format!("# fabric map: DIFFERS: {d}\n"));
    }
    for l in &m.limits {
        s.push_str(&format!("# fabric map: limit: {l}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(name: &str, hosts: &[&str]) -> MapLeaf {
        MapLeaf {
            name: name.into(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            injection_gbps: 1.0,
            cross_gbps: 0.25,
            oversubscription: 4.0,
        }
    }

    #[test]
    fn the_leaves_the_map_found_judge_the_tiers_as_a_fabric() {
        let mut m = FabricMap {
            leaves_from: "measured".into(),
            leaves: vec![
                leaf("group 1", &["node0", "node2"]),
                leaf("group 2", &["node1", "node3"]),
            ],
            ..Default::default()
        };
        let f = measured_fabric(&m).unwrap();
        assert_eq!(f.source, "the leaves --fabric-map measured");
        assert_eq!(f.oversubscription, None);
        assert_eq!((f.leaf_of("node2"), f.leaf_of("node3")), (Some(0), Some(1)));
        // two nodes on two leaves cross both uplinks, under the one spine
        assert_eq!(f.path("node0", "node1").map(|p| p.len()), Some(2));
        assert_eq!(f.path("node0", "node2").map(|p| p.len()), Some(0));
        // one switch found, or the leaves declared: no fabric of the map's own
        m.leaves_from = "declared".into();
        assert!(measured_fabric(&m).is_none());
        m.leaves_from = "measured".into();
        m.leaves.truncate(1);
        assert!(measured_fabric(&m).is_none());
    }

    #[test]
    fn a_streamed_plan_runs_for_its_time_after_the_warm_up() {
        let p = Plan {
            collectives: vec![crate::kinds::CollKind::AllToAll],
            dtypes: vec![crate::kinds::Dtype::F32],
            ops: vec![crate::kinds::RedOp::Sum],
            sizes: vec![1 << 20],
            placements: vec![false],
            root: 0,
            check: true,
            combine: crate::stats::Combine::Max,
            sampling: Sampling::Fixed {
                warmup: 3,
                iters: 6,
            },
            timing: Default::default(),
        };
        match streamed(&p, 1.5).sampling {
            Sampling::Adaptive {
                warmup,
                ci,
                budget_s,
                max_iters,
            } => {
                assert_eq!((warmup, budget_s), (3, 1.5));
                // no confidence ends it before the budget, nor the iteration cap
                assert!(ci <= 0.0 && max_iters >= 100_000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_run_that_moved_the_most_counts_as_a_whole() {
        // per pair, its runs: the best per pair would mix runs (4 + 4); the runs moved
        // 4 + 1 and 2 + 4
        let runs = vec![vec![4.0, 2.0], vec![1.0, 4.0]];
        assert_eq!(best_run(runs), [2.0, 4.0]);
        assert!(best_run(Vec::new()).is_empty());
    }

    #[test]
    fn a_node_links_rate_is_the_fast_mode_of_the_readings_inside_a_leaf() {
        assert_eq!(fast_mode(&[]), 0.0);
        // the 4:1 map whose injection runs both read the slow mode: 0.0155 eight
        // times, the pair rounds' inside pairs mostly 0.023
        let mut r = vec![0.0155; 8];
        r.extend([0.0231, 0.0233, 0.0232, 0.0155, 0.0234, 0.0233, 0.0229]);
        assert!((fast_mode(&r) - 0.02325).abs() < 1e-12, "{}", fast_mode(&r));
        // one reading far above the rest is not the rate; the fast mode's median is
        assert_eq!(fast_mode(&[1.0, 1.0, 1.02, 1.5]), 1.0);
        assert_eq!(fast_mode(&[1.0, 1.0, 1.02, 1.1]), 1.01);
        // of two readings, the faster
        assert_eq!(fast_mode(&[0.67, 1.0]), 1.0);
    }

    #[test]
    fn a_cut_that_held_its_pairs_back_counts_them_at_their_medians_of_one_run() {
        // per pair, its runs as (median, mean); a node link carries 1.0
        let held = vec![vec![(0.6, 0.5), (0.4, 0.5)], vec![(0.5, 0.45), (0.55, 0.5)]];
        // medians average 0.55 of the link in their best run: the cut held them, and
        // each pair counts at its median, of the run that moved the most (the first:
        // 0.6 + 0.5 against 0.4 + 0.55), not each pair at its own best
        assert_eq!(cut_rates(held, 1.0, 0.6, 1.0), [0.6, 0.5]);
        // a non-blocking cut: each pair at its median in its best run, like a node
        // link, not at its mean (a lone pair's link idles between its iterations)
        let free = vec![
            vec![(0.95, 0.6), (0.8, 0.6)],
            vec![(0.9, 0.6), (0.97, 0.62)],
        ];
        assert_eq!(cut_rates(free, 1.0, 0.6, 1.0), [0.95, 0.97]);
        // one pair in the slow mode in its first run: at its second
        let free = vec![
            vec![(0.67, 0.6), (1.0, 0.6)],
            vec![(1.0, 0.6), (0.67, 0.62)],
        ];
        assert_eq!(cut_rates(free.clone(), 1.0, 0.6, 1.0), [1.0, 1.0]);
        // the injection round streamed at 0.7 of the link, the cut as fast: the cut
        // counts at the link
        let slow: Vec<Vec<(f64, f64)>> = free
            .iter()
            .map(|r| r.iter().map(|&(m, x)| (m * 0.7, x)).collect())
            .collect();
        let got = cut_rates(slow, 0.7, 0.6, 1.0);
        assert!(got.iter().all(|r| (r - 1.0).abs() < 1e-12), "{got:?}");
        // medians at a lone pair's, bytes over time at 0.8 of a lone pair's: a
        // median in the fast mode of a held-back pair; the cut held them
        let fast_mode = vec![vec![(0.9, 0.48), (0.4, 0.4)], vec![(0.9, 0.48), (0.4, 0.4)]];
        assert_eq!(cut_rates(fast_mode, 1.0, 0.6, 1.0), [0.9, 0.9]);
    }
}
