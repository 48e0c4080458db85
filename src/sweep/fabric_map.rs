//! `--fabric-map`: the fabric as measured (see `topology::fabric_map`), run after the
//! tiers on the same backend: every node pair in the circle method's rounds (which
//! nodes share a leaf), then each leaf alone (injection) and the two halves against
//! each other (bisection). Every group runs the bisection search's alltoall
//! (`find_slow::bisect_plan`), points recorded with tier `map`; each round runs twice
//! and each group counts at its best (noise only ever slows a transfer), at its median
//! iteration (the first timed iteration after a pause runs up to 3x slower on the
//! simulated cluster, which a mean would count). The groups of a round start
//! together and run the same iterations: the bisection round has moved its bytes
//! when its slowest pair has, so the cut's bandwidth is the pairs times that pair's
//! rate.
use super::find_slow::node_rate;
use super::TierRun;
use crate::kinds::TierKind;
use crate::results::sweep::{FabricMap, MapLeaf};
use crate::topology::fabric_map::{self as fm, Inference};
use crate::topology::{self, Round, Tier};
use anyhow::Result;

/// Times each map round runs (each group counts at its best).
const RUNS: usize = 2;

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
        for round in topology::pair_rounds(n) {
            let groups: Vec<Vec<usize>> = round.iter().map(|&(a, b)| vec![a, b]).collect();
            let runs = self.map_round(&groups, ranks_per_node, &mut index)?;
            // every measurement of a pair: the inference takes their mean (a pair
            // slowed by its round's neighbours once is evidence of a shared uplink)
            for (&(a, b), r) in round.iter().zip(runs) {
                pairs.extend(r.into_iter().map(|x| (a, b, x)));
            }
        }
        let inference = (world.rank == 0).then(|| fm::infer_leaves(n, &pairs));
        let declared = self.rules.fabric.is_some().then(|| self.leaves());
        let leaves: Vec<Vec<usize>> = match &declared {
            Some(d) => d.clone(),
            None => world.broadcast_json(inference.as_ref().map(|i| &i.leaves))?,
        };
        let inj_pairs = fm::injection_pairs(&leaves);
        let groups: Vec<Vec<usize>> = inj_pairs.iter().map(|&(a, b)| vec![a, b]).collect();
        let inj = best(self.map_round(&groups, ranks_per_node, &mut index)?);
        let bis = fm::bisection_pairs(&leaves);
        let groups: Vec<Vec<usize>> = bis.iter().map(|&(a, b)| vec![a, b]).collect();
        let cross = best(self.map_round(&groups, ranks_per_node, &mut index)?);
        let Some(inference) = inference else {
            return Ok(None);
        };
        let m = Measured {
            leaves: &leaves,
            declared: declared.is_some(),
            inj_pairs: &inj_pairs,
            inj: &inj,
            bis: &bis,
            cross: &cross,
            inference: &inference,
        };
        let map = self.assemble(&m);
        print!("{}", render(&map));
        Ok(Some(map))
    }

    /// One map round, run [`RUNS`] times: each group's per-node rate in each run
    /// (rank 0; other ranks get zeros).
    fn map_round(
        &mut self,
        groups: &[Vec<usize>],
        ranks_per_node: Option<usize>,
        index: &mut usize,
    ) -> Result<Vec<Vec<f64>>> {
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
            self.round(&tier, 0)?;
            for (k, g) in tier.rounds[0].groups.iter().enumerate() {
                // the group's points of this run: the last ones recorded
                let mine: Vec<f64> = self
                    .sink
                    .points
                    .iter()
                    .filter(|p| p.tier == TierKind::Map && p.group == g.index)
                    .map(|p| p.busbw_gbps)
                    .collect();
                let busbw = mine.get(pass).copied().unwrap_or(0.0);
                out[k].push(node_rate(busbw, g.members.len(), g.nodes.len()));
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
            let inside: Vec<f64> = m
                .inj_pairs
                .iter()
                .zip(m.inj)
                .filter(|((a, _), _)| l.contains(a))
                .map(|(_, &r)| r)
                .collect();
            let injection = fm::median(&inside);
            let mine: Vec<f64> = m
                .bis
                .iter()
                .zip(m.cross)
                .filter(|((a, b), _)| l.contains(a) || l.contains(b))
                .map(|(_, &r)| r)
                .collect();
            // the round's bytes cross in the time of its slowest pair
            let cross = mine.iter().copied().fold(f64::INFINITY, f64::min);
            let cross = if cross.is_finite() { cross } else { 0.0 };
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
        let injection = fm::median(m.inj);
        // Every pair of the bisection round moves the same bytes, and the round has
        // moved them when its slowest pair has: the cut carried pairs × that rate.
        // (Pairs of a round share an uplink unevenly, and the faster ones end first
        // and leave it to the others: their sum overstates what the cut carries.)
        let slowest = m.cross.iter().copied().fold(f64::INFINITY, f64::min);
        let slowest = if slowest.is_finite() { slowest } else { 0.0 };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut map = FabricMap {
            leaves_from: if m.declared { "declared" } else { "measured" }.into(),
            leaves,
            inference: m.inference.how.clone(),
            separation: m.inference.separation,
            bisection_pairs: m.bis.iter().map(|&(a, b)| (host(a), host(b))).collect(),
            bisection_pair_gbps: m.cross.to_vec(),
            bisection_gbps: slowest * m.cross.len() as f64,
            injection_gbps: injection,
            bisection_fraction: ratio(slowest, injection),
            oversubscription: ratio(injection, slowest),
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

/// Each group at its best run (noise only ever slows a transfer).
fn best(runs: Vec<Vec<f64>>) -> Vec<f64> {
    runs.into_iter()
        .map(|r| r.into_iter().fold(0.0, f64::max))
        .collect()
}

/// What the map's rounds measured (rank 0).
struct Measured<'a> {
    leaves: &'a [Vec<usize>],
    declared: bool,
    inj_pairs: &'a [(usize, usize)],
    inj: &'a [f64],
    bis: &'a [(usize, usize)],
    cross: &'a [f64],
    inference: &'a Inference,
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
