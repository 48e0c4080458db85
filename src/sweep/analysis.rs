//! Judging tiers: against the topology file's expectation, and against peers (a
//! group below a fraction of its tier's median busbw is an outlier). From the node
//! pairs it names the node or the link to suspect. Pure: works on recorded points, so
//! `burnin report` can re-judge a results folder.
use crate::kinds::{CollKind, Dtype, RedOp, TierKind};
use crate::results::analysis::{Analysis, Finding, GroupResult, PairClass, PairMatrix, TierResult};
use crate::results::sweep::Point;
use crate::stats::{median, Combine, TimeStats};
use crate::topology::file::Topology;
use crate::topology::switches::Fabric;
use crate::units::Bytes;
use std::collections::{BTreeMap, HashMap};

/// Settings of the judgement.
#[derive(Clone, Debug)]
pub struct Rules {
    pub outlier_fraction: f64,
    /// Per-tier outlier fractions from the topology file's tier sections; empty when
    /// the fraction was given on the command line (or card), which then rules all tiers.
    pub tier_outlier_fraction: BTreeMap<TierKind, f64>,
    pub min_fraction: f64,
    /// Judge busbw at sizes ≥ this (None: the largest size of each group).
    pub large_message: Option<u64>,
    /// The switch fabric (`--fabric`): node pairs are judged only against pairs the
    /// fabric lets run alike.
    pub fabric: Option<Fabric>,
}

impl Rules {
    pub fn from(
        topology: Option<&Topology>,
        outlier_fraction: Option<f64>,
        min_fraction: Option<f64>,
    ) -> Rules {
        let acc = topology.map(|t| t.acceptance.clone()).unwrap_or_default();
        let mut tier_outlier_fraction = BTreeMap::new();
        if let (Some(t), None) = (topology, outlier_fraction) {
            for tier in TierKind::ALL {
                if let Some(f) = t.tier_outlier_fraction(tier.name()) {
                    tier_outlier_fraction.insert(tier, f);
                }
            }
        }
        Rules {
            outlier_fraction: outlier_fraction.unwrap_or(acc.outlier_fraction),
            tier_outlier_fraction,
            min_fraction: min_fraction.unwrap_or(acc.min_fraction),
            large_message: acc.large_message.map(|b| b.get()),
            fabric: None,
        }
    }

    /// The outlier fraction that judges `tier`.
    pub fn outlier_for(&self, tier: TierKind) -> f64 {
        self.tier_outlier_fraction
            .get(&tier)
            .copied()
            .unwrap_or(self.outlier_fraction)
    }
}

type Key = (TierKind, CollKind, Dtype, Option<RedOp>, bool);

/// Best busbw at large sizes per group of one key.
fn group_best(points: &[&Point], large: Option<u64>) -> Vec<(usize, f64, u64)> {
    let mut by_group: BTreeMap<usize, Vec<&Point>> = BTreeMap::new();
    for p in points {
        by_group.entry(p.group).or_default().push(p);
    }
    by_group
        .into_iter()
        .map(|(g, ps)| {
            let largest = ps.iter().map(|p| p.bytes).max().unwrap_or(0);
            let threshold = large.map(|l| l.min(largest)).unwrap_or(largest);
            let best = ps
                .iter()
                .filter(|p| p.bytes >= threshold)
                .max_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps));
            match best {
                Some(p) => (g, p.busbw_gbps, p.bytes),
                None => (g, 0.0, largest),
            }
        })
        .collect()
}

/// Judge every tier in `points`. `node_hosts` names node indices.
pub fn analyze(
    points: &[Point],
    topology: Option<&Topology>,
    rules: &Rules,
    node_hosts: &[String],
) -> Analysis {
    let mut a = Analysis {
        pass: true,
        ..Default::default()
    };
    for ((tier, coll, dtype, op, in_place), pts) in judged_keys(points) {
        let outlier_fraction = rules.outlier_for(tier);
        let (mut groups, med) = group_results(&pts, rules.large_message, outlier_fraction);
        let expected = topology.and_then(|t| {
            let g = pts.first()?;
            let nodes = g.hosts.len().max(1);
            t.expectation(tier.name(), coll, g.members.len(), nodes)
        });
        let worst_vs = expected.map(|e| worst_busbw(&groups) / e);
        let meets = worst_vs.map(|w| w >= rules.min_fraction);
        if let (Some(false), Some(e)) = (meets, expected) {
            a.findings.push(below_expectation(
                tier,
                coll,
                &groups,
                e,
                rules.min_fraction,
            ));
            a.pass = false;
        }
        if tier == TierKind::Pairs {
            match &rules.fabric {
                Some(f) => {
                    groups =
                        fabric_pair_findings(&mut a, groups, coll, outlier_fraction, node_hosts, f)
                }
                None => pair_findings(&mut a, &groups, coll, outlier_fraction, node_hosts),
            }
        } else {
            if let Some(f) = &rules.fabric {
                let lone = judge_by_fabric_class(&mut groups, f, outlier_fraction);
                if !lone.is_empty() {
                    a.findings.push(Finding {
                        severity: "info".into(),
                        subject: format!("tier {tier}"),
                        text: format!(
                            "tier {tier} {coll}: {} alone in its fabric class, not judged as an outlier (no group of its class to compare with; the card's expectation for the tier still applies)",
                            lone.join(", ")
                        ),
                    });
                }
            }
            outlier_findings(&mut a, tier, coll, &groups, rules.fabric.is_some());
        }
        a.tiers.push(TierResult {
            tier,
            collective: coll,
            dtype,
            op,
            in_place,
            groups,
            median_gbps: med,
            expected_gbps: expected,
            min_fraction: rules.min_fraction,
            worst_vs_expected: worst_vs,
            meets_expectation: meets,
        });
    }
    a.outlier_nodes.sort();
    a.outlier_nodes.dedup();
    a
}

/// The points of each key to judge, in tier, collective, type, placement order:
/// out-of-place when it was measured, in-place only otherwise.
fn judged_keys(points: &[Point]) -> Vec<(Key, Vec<&Point>)> {
    let mut keys: BTreeMap<Key, Vec<&Point>> = BTreeMap::new();
    // The bisection search's and the fabric map's groups are judged by them (their
    // groups differ in size and class by design, so a tier median means nothing).
    for p in points
        .iter()
        .filter(|p| !matches!(p.tier, TierKind::Bisect | TierKind::Map))
    {
        keys.entry((p.tier, p.collective, p.dtype, p.op, p.in_place))
            .or_default()
            .push(p);
    }
    let mut ordered: Vec<(Key, Vec<&Point>)> = keys.into_iter().collect();
    ordered.sort_by_key(|(k, _)| (k.0, k.1, k.2, k.4));
    let has_out: Vec<(TierKind, CollKind, Dtype, Option<RedOp>)> = ordered
        .iter()
        .filter(|(k, _)| !k.4)
        .map(|(k, _)| (k.0, k.1, k.2, k.3))
        .collect();
    ordered.retain(|(k, _)| !(k.4 && has_out.contains(&(k.0, k.1, k.2, k.3))));
    ordered
}

/// Each group's best large-message busbw against the median group's (outliers
/// marked), and that median.
fn group_results(
    pts: &[&Point],
    large_message: Option<u64>,
    outlier_fraction: f64,
) -> (Vec<GroupResult>, f64) {
    let best = group_best(pts, large_message);
    let med = median(&best.iter().map(|b| b.1).collect::<Vec<_>>());
    let first_of: BTreeMap<usize, &Point> = pts.iter().rev().map(|p| (p.group, *p)).collect();
    let mut groups: Vec<GroupResult> = best
        .iter()
        .filter_map(|&(g, bw, bytes)| {
            let p = first_of.get(&g)?;
            let vs = if med > 0.0 { bw / med } else { 1.0 };
            Some(GroupResult {
                group: g,
                label: p.label.clone(),
                members: p.members.clone(),
                hosts: p.hosts.clone(),
                busbw_gbps: bw,
                bytes,
                vs_median: vs,
                outlier: best.len() >= 3 && vs < outlier_fraction,
            })
        })
        .collect();
    // Two groups: the slower is an outlier only when clearly below the faster.
    if groups.len() == 2 {
        let (lo, hi) = if groups[0].busbw_gbps <= groups[1].busbw_gbps {
            (0, 1)
        } else {
            (1, 0)
        };
        if groups[hi].busbw_gbps > 0.0
            && groups[lo].busbw_gbps / groups[hi].busbw_gbps < outlier_fraction
        {
            groups[lo].outlier = true;
        }
    }
    (groups, med)
}

/// A group's place on the fabric: how many of its nodes sit under each leaf it
/// spans, sorted (nodes the fabric does not place count as one more leaf). Groups of
/// one class cross the same number of uplinks with the same share of their nodes, so
/// the fabric lets them run alike; groups of two classes may differ by the
/// oversubscription and are not compared.
fn fabric_class(f: &Fabric, hosts: &[String]) -> Vec<usize> {
    let mut per_leaf: BTreeMap<Option<usize>, usize> = BTreeMap::new();
    let mut seen: Vec<&str> = Vec::new();
    for h in hosts {
        if !seen.contains(&h.as_str()) {
            seen.push(h);
            *per_leaf.entry(f.leaf_of(h)).or_default() += 1;
        }
    }
    let mut class: Vec<usize> = per_leaf.into_values().collect();
    class.sort_unstable();
    class
}

/// The outlier rule of a tier other than pairs on a known fabric: each group against
/// the median of the groups of its fabric class ([`fabric_class`]), the two-group rule
/// within a class of two, and a group alone in its class is not judged (nothing the
/// fabric lets run alike was measured beside it).
///
/// Returns the groups left unjudged: alone in their class in a tier of several groups
/// (the flat rule would have compared them; no group of their class can).
fn judge_by_fabric_class(
    groups: &mut [GroupResult],
    f: &Fabric,
    outlier_fraction: f64,
) -> Vec<String> {
    let mut classes: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        classes
            .entry(fabric_class(f, &g.hosts))
            .or_default()
            .push(i);
    }
    for members in classes.values() {
        let bw: Vec<f64> = members.iter().map(|&i| groups[i].busbw_gbps).collect();
        let med = median(&bw);
        let best = bw.iter().copied().fold(0.0, f64::max);
        for &i in members {
            let g = &mut groups[i];
            g.vs_median = if med > 0.0 { g.busbw_gbps / med } else { 1.0 };
            g.outlier = match members.len() {
                0 | 1 => false,
                2 => best > 0.0 && g.busbw_gbps / best < outlier_fraction,
                _ => g.vs_median < outlier_fraction,
            };
        }
    }
    let lone = classes.values().filter(|m| m.len() == 1).map(|m| m[0]);
    if groups.len() < 2 {
        return Vec::new();
    }
    lone.map(|i| groups[i].label.clone()).collect()
}

/// The slowest group's busbw (infinite when there is none).
fn worst_busbw(groups: &[GroupResult]) -> f64 {
    groups
        .iter()
        .map(|g| g.busbw_gbps)
        .fold(f64::INFINITY, f64::min)
}

/// The finding of a tier whose slowest group is below `min_fraction` × `expected`.
fn below_expectation(
    tier: TierKind,
    coll: CollKind,
    groups: &[GroupResult],
    expected: f64,
    min_fraction: f64,
) -> Finding {
    let worst = worst_busbw(groups);
    let worst_g = groups
        .iter()
        .min_by(|x, y| x.busbw_gbps.total_cmp(&y.busbw_gbps));
    let at = worst_g
        .map(|g| format!(" ({} at {})", g.label, Bytes(g.bytes)))
        .unwrap_or_default();
    Finding {
        severity: "fail".into(),
        subject: format!("tier {tier}"),
        text: format!(
            "tier {tier} {coll}: {worst:.3} GB/s{at} is {:.2}× the expected {expected:.3} GB/s (needs ≥ {min_fraction:.2}×)",
            worst / expected,
        ),
    }
}

/// A finding for each outlier group of a tier other than pairs, naming what to suspect.
fn outlier_findings(
    a: &mut Analysis,
    tier: TierKind,
    coll: CollKind,
    groups: &[GroupResult],
    by_class: bool,
) {
    let of_class = if by_class { " of its fabric class" } else { "" };
    for g in groups.iter().filter(|g| g.outlier) {
        let what = match tier {
            TierKind::Intra => format!(
                "suspect {}'s intra-node links (NVLink/PCIe or memory)",
                g.label
            ),
            TierKind::Rails => format!(
                "suspect the NIC or switch port of {} on one of its nodes",
                g.label
            ),
            _ => "suspect this group's slowest member".into(),
        };
        a.findings.push(Finding {
            severity: "fail".into(),
            subject: g.label.clone(),
            text: format!(
                "{} ({tier} {coll}): {:.3} GB/s is {:.2}× the median {tier} group{of_class} — {what}",
                g.label, g.busbw_gbps, g.vs_median
            ),
        });
        if tier == TierKind::Intra {
            a.outlier_nodes.push(g.label.clone());
        }
        a.pass = false;
    }
}

/// From node-pair results: a node all of whose pairs are slow is named; otherwise
/// each slow pair is named as a link.
fn pair_findings(
    a: &mut Analysis,
    groups: &[GroupResult],
    coll: CollKind,
    outlier_fraction: f64,
    node_hosts: &[String],
) {
    let n = node_hosts.len();
    push_pair_matrix(a, groups, coll, node_hosts);
    let index = host_index(node_hosts);
    let pairs: Vec<(usize, usize, f64, f64)> = groups
        .iter()
        .filter_map(|g| pair_nodes(g, &index).map(|(x, y)| (x, y, g.busbw_gbps, g.vs_median)))
        .collect();
    if pairs.len() < 2 {
        return;
    }
    let slow = |v: f64| v < outlier_fraction;
    // Each node's pairs' ratios to the median, in one pass.
    let mut per_node: Vec<Vec<f64>> = vec![Vec::new(); n];
    for &(x, y, _, v) in &pairs {
        per_node[x].push(v);
        per_node[y].push(v);
    }
    let mut suspect_nodes = Vec::new();
    for (x, host) in node_hosts.iter().enumerate() {
        let mine = &per_node[x];
        if mine.len() >= 2 && mine.iter().all(|&v| slow(v)) {
            let ratio = median(mine);
            a.findings.push(Finding {
                severity: "fail".into(),
                subject: host.clone(),
                text: format!(
                    "{host}: every pair that includes it runs at {ratio:.2}× the median pair busbw ({coll}) — suspect {host}'s link"
                ),
            });
            a.outlier_nodes.push(host.clone());
            suspect_nodes.push(x);
            a.pass = false;
        }
    }
    for &(x, y, _, v) in &pairs {
        if slow(v) && !suspect_nodes.contains(&x) && !suspect_nodes.contains(&y) && findings_room(a)
        {
            let (hx, hy) = (&node_hosts[x], &node_hosts[y]);
            a.findings.push(Finding {
                severity: "fail".into(),
                subject: format!("{hx}+{hy}"),
                text: format!(
                    "{hx}+{hy}: runs at {v:.2}× the median pair busbw ({coll}) — suspect the link between {hx} and {hy}"
                ),
            });
            a.pass = false;
        }
    }
}

/// The pairs tier on a known fabric. Each pair is compared only with the pairs the
/// fabric lets run as fast: those inside one switch, or those across switches whose
/// path's busiest uplink carried as many of their round's pairs (the rounds are the
/// circle method's, [`crate::topology::pair_rounds`]). With a declared
/// oversubscription a pair across switches is judged against what the declared
/// uplinks allow it (the inside-switch median scaled by the uplink's share), so that a
/// uniformly slow uplink is seen too. Then a node whose every pair is slow is named,
/// an uplink whose every crossing pair is slow is named as the uplink (uplinks that
/// every measured pair crossed together are named together: these measurements
/// cannot tell them apart), and each slow pair left is named as a link. Returns the
/// groups with `vs_median`/`outlier` against their class.
fn fabric_pair_findings(
    a: &mut Analysis,
    mut groups: Vec<GroupResult>,
    coll: CollKind,
    fraction: f64,
    node_hosts: &[String],
    fabric: &Fabric,
) -> Vec<GroupResult> {
    push_pair_matrix(a, &groups, coll, node_hosts);
    let unplaced = fabric.unplaced(node_hosts);
    if !unplaced.is_empty() {
        a.findings.push(Finding {
            severity: "fail".into(),
            subject: "fabric".into(),
            text: format!(
                "{}: no switch holds {} — the pairs tier cannot be judged on this fabric",
                fabric.source,
                unplaced.join(", ")
            ),
        });
        a.pass = false;
        return groups;
    }
    let mut j = FabricJudge::new(&groups, coll, fraction, node_hosts, fabric);
    if j.ps.len() < 2 {
        return groups;
    }
    j.judge_classes(a);
    for p in &j.ps {
        groups[p.g].vs_median = p.vs;
        groups[p.g].outlier = p.slow;
    }
    let named_nodes = j.name_nodes(a);
    let uplink_pairs = j.name_uplinks(a, &named_nodes);
    j.name_links_and_clear(a, &named_nodes, &uplink_pairs);
    groups
}

/// One node pair of the pairs tier, placed on the fabric.
struct FabricPair {
    /// Its group's index in the tier's groups.
    g: usize,
    x: usize,
    y: usize,
    bw: f64,
    /// The uplinks it crosses (switch indices, sorted).
    path: Vec<usize>,
    /// Pairs of its round on its busiest uplink (0: inside one switch).
    share: usize,
    /// What the declared oversubscription allows it (GB/s).
    expected: Option<f64>,
    vs: f64,
    slow: bool,
}

/// The pairs tier's judgement on a fabric (see [`fabric_pair_findings`]).
struct FabricJudge<'a> {
    coll: CollKind,
    fraction: f64,
    node_hosts: &'a [String],
    fabric: &'a Fabric,
    ps: Vec<FabricPair>,
    round_of: BTreeMap<(usize, usize), usize>,
    /// Per round, the pairs on each uplink.
    load: Vec<BTreeMap<usize, usize>>,
}

fn class_name(share: usize) -> String {
    if share == 0 {
        "inside one switch".to_string()
    } else {
        format!(
            "across switches, busiest uplink shared {share} way{}",
            if share == 1 { "" } else { "s" }
        )
    }
}

impl<'a> FabricJudge<'a> {
    /// Every pair placed: its path, its round's uplink loads, and with a declared
    /// oversubscription what the uplinks allow it.
    fn new(
        groups: &[GroupResult],
        coll: CollKind,
        fraction: f64,
        node_hosts: &'a [String],
        fabric: &'a Fabric,
    ) -> FabricJudge<'a> {
        let index = host_index(node_hosts);
        let rounds = crate::topology::pair_rounds(node_hosts.len());
        let path = |x: usize, y: usize| {
            let mut p = fabric
                .path(&node_hosts[x], &node_hosts[y])
                .unwrap_or_default();
            p.sort_unstable();
            p
        };
        let mut round_of = BTreeMap::new();
        let mut load: Vec<BTreeMap<usize, usize>> = vec![BTreeMap::new(); rounds.len()];
        for (r, pairs) in rounds.iter().enumerate() {
            for &(x, y) in pairs {
                round_of.insert((x, y), r);
                for u in path(x, y) {
                    *load[r].entry(u).or_default() += 1;
                }
            }
        }
        let mut ps = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            let Some((x, y)) = pair_nodes(g, &index) else {
                continue;
            };
            let p = path(x, y);
            let share = match round_of.get(&(x, y)) {
                Some(&r) => p.iter().map(|u| load[r][u]).max().unwrap_or(0),
                None => usize::from(!p.is_empty()),
            };
            ps.push(FabricPair {
                g: gi,
                x,
                y,
                bw: g.busbw_gbps,
                path: p,
                share,
                expected: None,
                vs: 1.0,
                slow: false,
            });
        }
        let mut j = FabricJudge {
            coll,
            fraction,
            node_hosts,
            fabric,
            ps,
            round_of,
            load,
        };
        j.declared_allowance();
        j
    }

    /// The declared uplinks' allowance: a switch's uplink carries its hosts' links over
    /// the oversubscription, split among the round's pairs on it.
    fn declared_allowance(&mut self) {
        let inside: Vec<f64> = self
            .ps
            .iter()
            .filter(|p| p.share == 0)
            .map(|p| p.bw)
            .collect();
        let (Some(r), false) = (self.fabric.oversubscription, inside.is_empty()) else {
            return;
        };
        let b = median(&inside);
        for i in 0..self.ps.len() {
            if self.ps[i].share == 0 {
                continue;
            }
            let round = self.round(i);
            let allow = self.ps[i]
                .path
                .iter()
                .map(|&u| {
                    let k = self.fabric.hosts_under(u).len().max(1) as f64;
                    let l = round
                        .and_then(|r| self.load[r].get(&u).copied())
                        .unwrap_or(1)
                        .max(1) as f64;
                    k / r / l
                })
                .fold(1.0f64, f64::min);
            self.ps[i].expected = Some(b * allow);
        }
    }

    fn round(&self, i: usize) -> Option<usize> {
        self.round_of.get(&(self.ps[i].x, self.ps[i].y)).copied()
    }

    /// The mean busbw of pair i and the pairs of its round on its busiest uplink.
    fn shared_mean(&self, i: usize) -> f64 {
        let r = self.round(i);
        let busiest = self.ps[i]
            .path
            .iter()
            .copied()
            .max_by_key(|u| r.and_then(|r| self.load[r].get(u).copied()).unwrap_or(0));
        let same: Vec<f64> = (0..self.ps.len())
            .filter(|&q| {
                self.round(q) == r && busiest.is_some_and(|u| self.ps[q].path.contains(&u))
            })
            .map(|q| self.ps[q].bw)
            .collect();
        same.iter().sum::<f64>() / same.len().max(1) as f64
    }

    /// Each pair against its class (or its declared allowance); the classes recorded.
    fn judge_classes(&mut self, a: &mut Analysis) {
        let fraction = self.fraction;
        let mut classes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.ps.iter().enumerate() {
            classes.entry(p.share).or_default().push(i);
        }
        for (&share, members) in &classes {
            let med = median(&members.iter().map(|&i| self.ps[i].bw).collect::<Vec<_>>());
            let declared = share > 0 && self.ps[members[0]].expected.is_some();
            let mut refs = Vec::new();
            for &i in members {
                let reference = if declared {
                    self.ps[i].expected.unwrap_or(med)
                } else {
                    med
                };
                let vs = if reference > 0.0 {
                    self.ps[i].bw / reference
                } else {
                    1.0
                };
                // Alone in its class, a pair is judged only against a declaration.
                let mut slow = vs < fraction && (declared || members.len() >= 2);
                // Pairs sharing an uplink do not share it evenly (TCP, NCCL's
                // channels): a pair is slow only when the pairs of its round on its
                // busiest uplink were slow together, not when others took its part.
                if slow && share > 1 {
                    slow = reference <= 0.0 || self.shared_mean(i) / reference < fraction;
                }
                self.ps[i].vs = vs;
                self.ps[i].slow = slow;
                refs.push(reference);
            }
            a.pair_classes.push(PairClass {
                collective: self.coll,
                class: class_name(share),
                pairs: members.len(),
                median_gbps: med,
                reference_gbps: median(&refs),
                reference: if declared {
                    "declared oversubscription"
                } else {
                    "class median"
                }
                .into(),
                slowest_vs_reference: members
                    .iter()
                    .map(|&i| self.ps[i].vs)
                    .fold(f64::INFINITY, f64::min),
                threshold: fraction,
            });
        }
    }

    /// Nodes: at least two slow pairs, and no pair of the node clearly faster than its
    /// slow ones (a pair held below the node's own rate by a shared uplink hides it).
    fn name_nodes(&self, a: &mut Analysis) -> Vec<usize> {
        let coll = self.coll;
        let mut named = Vec::new();
        for (x, host) in self.node_hosts.iter().enumerate() {
            let mine: Vec<&FabricPair> = self.ps.iter().filter(|p| p.x == x || p.y == x).collect();
            let slow: Vec<&FabricPair> = mine.iter().copied().filter(|p| p.slow).collect();
            let cap = slow.iter().map(|p| p.bw).fold(0.0, f64::max);
            let hidden = mine.iter().filter(|p| !p.slow).count();
            if slow.len() < 2 || !mine.iter().all(|p| p.slow || p.bw * self.fraction <= cap) {
                continue;
            }
            let ratio = median(&slow.iter().map(|p| p.vs).collect::<Vec<_>>());
            let also = if hidden > 0 {
                format!("; its {hidden} other pair(s) ran no faster, held down by shared uplinks")
            } else {
                String::new()
            };
            a.findings.push(Finding {
                severity: "fail".into(),
                subject: host.clone(),
                text: format!(
                    "{host}: {} of its pairs run at {ratio:.2}× what their class of pairs on this fabric runs at ({coll}){also} — suspect {host}'s link",
                    slow.len()
                ),
            });
            a.outlier_nodes.push(host.clone());
            named.push(x);
            a.pass = false;
        }
        named
    }

    fn explained(&self, i: usize, nodes: &[usize]) -> bool {
        nodes.contains(&self.ps[i].x) || nodes.contains(&self.ps[i].y)
    }

    /// Each uplink's pairs (those a named node does not explain) over what they should
    /// run at: declared, their allowance; undeclared, the pairs of their class that do
    /// not cross it (when a slow uplink carries most of a class, the class median is
    /// its own).
    fn uplink_ratios(&self, nodes: &[usize]) -> BTreeMap<usize, (Vec<usize>, Vec<f64>)> {
        let mut crossing: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.ps.iter().enumerate() {
            if !self.explained(i, nodes) {
                for &u in &p.path {
                    crossing.entry(u).or_default().push(i);
                }
            }
        }
        let vs_others = |i: usize, u: usize| -> Option<f64> {
            let mates: Vec<f64> = (0..self.ps.len())
                .filter(|&q| {
                    self.ps[q].share == self.ps[i].share
                        && !self.ps[q].path.contains(&u)
                        && !self.explained(q, nodes)
                })
                .map(|q| self.ps[q].bw)
                .collect();
            (!mates.is_empty()).then(|| self.ps[i].bw / median(&mates))
        };
        crossing
            .into_iter()
            .map(|(u, members)| {
                let ratios: Vec<f64> = if members.iter().all(|&i| self.ps[i].expected.is_some()) {
                    members.iter().map(|&i| self.ps[i].vs).collect()
                } else {
                    members.iter().filter_map(|&i| vs_others(i, u)).collect()
                };
                (u, (members, ratios))
            })
            .collect()
    }

    /// Uplinks most of whose pairs (at least two) are slow, named together when every
    /// measured pair crossed them together; returns the pairs they explain.
    fn name_uplinks(&self, a: &mut Analysis, nodes: &[usize]) -> Vec<usize> {
        let fraction = self.fraction;
        let crossing = self.uplink_ratios(nodes);
        let mut named: Vec<Vec<usize>> = Vec::new();
        let mut explained = Vec::new();
        for (&u, (members, ratios)) in &crossing {
            // Most, not all: in a round where another uplink of its path was busier,
            // a pair through a slow uplink can run as its class does.
            if ratios.iter().filter(|&&v| v < fraction).count() < 2 || median(ratios) >= fraction {
                continue;
            }
            match named.iter_mut().find(|g| &crossing[&g[0]].0 == members) {
                Some(g) => g.push(u),
                None => named.push(vec![u]),
            }
            explained.extend(members.iter().copied());
        }
        for ups in &named {
            let (members, ratios) = &crossing[&ups[0]];
            let names: Vec<String> = ups.iter().map(|&u| self.fabric.uplink_name(u)).collect();
            let what = if names.len() == 1 {
                format!("suspect the uplink {}", names[0])
            } else {
                format!(
                    "suspect one of the uplinks {} (every pair measured crossed them together: these measurements cannot tell them apart)",
                    names.join(", ")
                )
            };
            a.findings.push(Finding {
                severity: "fail".into(),
                subject: names.join(" "),
                text: format!(
                    "uplink {}: the {} pairs through it run at {:.2}× the pairs of their class that do not cross it, or of what the declared oversubscription allows ({}) — {what}",
                    names.join(" / "),
                    members.len(),
                    median(ratios),
                    self.coll
                ),
            });
            a.pass = false;
        }
        explained
    }

    /// Slow pairs nothing else explains, as links; or, when nothing is slow, what the
    /// judgement cleared, class by class.
    fn name_links_and_clear(&self, a: &mut Analysis, nodes: &[usize], uplink_pairs: &[usize]) {
        let coll = self.coll;
        for (i, p) in self.ps.iter().enumerate() {
            if p.slow && !self.explained(i, nodes) && !uplink_pairs.contains(&i) && findings_room(a)
            {
                let (hx, hy) = (&self.node_hosts[p.x], &self.node_hosts[p.y]);
                a.findings.push(Finding {
                    severity: "fail".into(),
                    subject: format!("{hx}+{hy}"),
                    text: format!(
                        "{hx}+{hy}: runs at {:.2}× its class ({}, {coll}) — suspect the link between {hx} and {hy}",
                        p.vs,
                        class_name(p.share)
                    ),
                });
                a.pass = false;
            }
        }
        if a.findings.iter().any(|f| f.severity == "fail") {
            return;
        }
        let said: Vec<String> = a
            .pair_classes
            .iter()
            .filter(|c| c.collective == coll)
            .map(|c| {
                format!(
                    "{} pairs {} (against the {}; a pair below {:.2}× would be named)",
                    c.pairs, c.class, c.reference, c.threshold
                )
            })
            .collect();
        let cross_paths: std::collections::BTreeSet<&Vec<usize>> = self
            .ps
            .iter()
            .filter(|p| p.share > 0)
            .map(|p| &p.path)
            .collect();
        let blind = self.fabric.oversubscription.is_none() && cross_paths.len() == 1;
        a.findings.push(Finding {
            severity: "info".into(),
            subject: "fabric".into(),
            text: format!(
                "pairs tier ({coll}) on the fabric of {}: nothing slow; cleared {}{}",
                self.fabric.source,
                said.join("; "),
                if blind {
                    " — every pair across switches crossed the same uplinks, so one uniformly slow uplink would look like the fabric's design: declare the oversubscription to judge it"
                } else {
                    ""
                }
            ),
        });
    }
}

/// Node index of each host name.
fn host_index(node_hosts: &[String]) -> HashMap<&str, usize> {
    node_hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i))
        .collect()
}

/// The two nodes (lower index first) of a group of two nodes.
fn pair_nodes(g: &GroupResult, index: &HashMap<&str, usize>) -> Option<(usize, usize)> {
    let idx: Vec<usize> = g
        .hosts
        .iter()
        .filter_map(|h| index.get(h.as_str()).copied())
        .collect();
    (idx.len() == 2).then(|| (idx[0].min(idx[1]), idx[0].max(idx[1])))
}

/// The pairs tier's node-pair busbw matrix, into `a.pair_matrices`.
fn push_pair_matrix(
    a: &mut Analysis,
    groups: &[GroupResult],
    coll: CollKind,
    node_hosts: &[String],
) {
    let n = node_hosts.len();
    let index = host_index(node_hosts);
    let mut m = vec![vec![None; n]; n];
    for g in groups {
        if let Some((x, y)) = pair_nodes(g, &index) {
            m[x][y] = Some(g.busbw_gbps);
            m[y][x] = Some(g.busbw_gbps);
        }
    }
    a.pair_matrices.push(PairMatrix {
        collective: coll,
        bytes: groups.iter().map(|g| g.bytes).max().unwrap_or(0),
        nodes: node_hosts.to_vec(),
        busbw_gbps: m,
    });
}

/// Cap on per-link findings: a sick fabric with thousands of slow pairs gets the
/// first hundred named, not a report nobody can read.
fn findings_room(a: &Analysis) -> bool {
    a.findings.len() < 100
}

/// A point carrying only what [`analyze`] reads: an out-of-place f32 sum all_reduce
/// of `bytes` at `busbw_gbps` (algbw the same), every timing zero, checked with no
/// wrong value. For tests and benchmarks of the analysis, which judges recorded points.
pub fn judged_point(
    tier: TierKind,
    group: usize,
    label: String,
    members: Vec<usize>,
    hosts: Vec<String>,
    bytes: u64,
    busbw_gbps: f64,
) -> Point {
    Point {
        schema_version: 1,
        tier,
        group,
        label,
        members,
        hosts,
        collective: CollKind::AllReduce,
        dtype: Dtype::F32,
        op: Some(RedOp::Sum),
        root: None,
        in_place: false,
        bytes,
        count: (bytes / 4) as usize,
        iterations: 10,
        warmup: 1,
        adaptive: false,
        ci_half_width: 0.0,
        time: TimeStats::default(),
        combine: Combine::Max,
        rank_p50_us: vec![],
        slowest_rank: 0,
        rank_spread: 0.0,
        algbw_gbps: busbw_gbps,
        busbw_gbps,
        algbw_mean_gbps: busbw_gbps,
        busbw_mean_gbps: busbw_gbps,
        wrong: Some(0),
        wrong_ranks: vec![],
        wall_s: 0.0,
        in_calls_s: 0.0,
        pass: 0,
        unix: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        tier: &str,
        group: usize,
        label: &str,
        hosts: &[&str],
        bytes: u64,
        busbw: f64,
    ) -> Point {
        judged_point(
            TierKind::parse(tier).unwrap(),
            group,
            label.into(),
            vec![0, 1],
            hosts.iter().map(|h| h.to_string()).collect(),
            bytes,
            busbw,
        )
    }

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i}")).collect()
    }

    fn pairs_points(n: usize, slow: impl Fn(usize, usize) -> bool) -> Vec<Point> {
        let mut v = Vec::new();
        for (g, (a, b)) in crate::topology::pair_rounds(n)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let bw = if slow(a, b) { 0.05 } else { 0.2 };
            let (ha, hb) = (format!("node{a}"), format!("node{b}"));
            v.push(point(
                "pairs",
                g,
                &format!("{ha}+{hb}"),
                &[&ha, &hb],
                1 << 24,
                bw,
            ));
        }
        v
    }

    /// The pairs tier on a modelled two-level fabric: node links of 1.0, uplinks of
    /// `uplink(leaf)`, each round's pairs sharing the uplinks fairly; `node_rate(x)`
    /// and `pair_rate(x, y)` cap a node's or a pair's own link.
    fn fabric_points(
        f: &Fabric,
        n: usize,
        uplink: impl Fn(usize) -> f64,
        node_rate: impl Fn(usize) -> f64,
        pair_rate: impl Fn(usize, usize) -> f64,
    ) -> Vec<Point> {
        let host = |i: usize| format!("node{i}");
        let mut v = Vec::new();
        let mut g = 0;
        for round in crate::topology::pair_rounds(n) {
            let mut load: BTreeMap<usize, usize> = BTreeMap::new();
            for &(a, b) in &round {
                for u in f.path(&host(a), &host(b)).unwrap() {
                    *load.entry(u).or_default() += 1;
                }
            }
            for &(a, b) in &round {
                let mut bw = node_rate(a).min(node_rate(b)).min(pair_rate(a, b));
                for u in f.path(&host(a), &host(b)).unwrap() {
                    bw = bw.min(uplink(u) / load[&u] as f64);
                }
                let (ha, hb) = (host(a), host(b));
                v.push(point(
                    "pairs",
                    g,
                    &format!("{ha}+{hb}"),
                    &[&ha, &hb],
                    1 << 24,
                    bw,
                ));
                g += 1;
            }
        }
        v
    }

    fn leaf_spine(text: &str, over: Option<f64>) -> Rules {
        let mut f = Fabric::parse(text, "fabric.conf").unwrap();
        f.oversubscription = over;
        Rules {
            fabric: Some(f),
            ..Rules::from(None, None, None)
        }
    }

    const INTERLEAVED: &str = "SwitchName=leaf1 Nodes=node[0,2,4,6]\n\
        SwitchName=leaf2 Nodes=node[1,3,5,7]\nSwitchName=spine Switches=leaf[1-2]\n";

    fn fails(a: &Analysis) -> Vec<String> {
        a.findings
            .iter()
            .filter(|f| f.severity == "fail")
            .map(|f| f.subject.clone())
            .collect()
    }

    #[test]
    fn a_healthy_oversubscribed_fabric_names_nothing_and_says_what_it_cleared() {
        for over in [1.0, 2.0, 4.0] {
            let rules = leaf_spine(INTERLEAVED, None);
            let f = rules.fabric.clone().unwrap();
            let pts = fabric_points(&f, 8, |_| 4.0 / over, |_| 1.0, |_, _| 1.0);
            // without the fabric, the cross-leaf pairs of a 4:1 fabric are accused
            let flat = analyze(&pts, None, &Rules::from(None, None, None), &hosts(8));
            assert_eq!(flat.pass, over < 2.0, "{over}: {:?}", flat.findings);
            let a = analyze(&pts, None, &rules, &hosts(8));
            assert!(a.pass, "{over}:1: {:?}", a.findings);
            let info: Vec<&Finding> = a
                .findings
                .iter()
                .filter(|f| f.subject == "fabric")
                .collect();
            assert_eq!(info.len(), 1, "{:?}", a.findings);
            assert!(
                info[0].text.contains("inside one switch"),
                "{}",
                info[0].text
            );
            assert!(
                info[0].text.contains("declare the oversubscription"),
                "{}",
                info[0].text
            );
            assert!(!a.pair_classes.is_empty());
        }
    }

    #[test]
    fn on_a_fabric_a_slow_node_a_slow_pair_and_a_slow_uplink_are_named_as_what_they_are() {
        let text = "SwitchName=l1 Nodes=node[0-2]\nSwitchName=l2 Nodes=node[3-5]\n\
            SwitchName=l3 Nodes=node[6-8]\nSwitchName=sp Switches=l[1-3]\n";
        let rules = leaf_spine(text, None);
        let f = rules.fabric.clone().unwrap();
        let up = |r: f64| move |_: usize| r;
        // a slow node
        let pts = fabric_points(
            &f,
            9,
            up(1.5),
            |x| if x == 4 { 0.3 } else { 1.0 },
            |_, _| 1.0,
        );
        let a = analyze(&pts, None, &rules, &hosts(9));
        assert_eq!(fails(&a), vec!["node4"], "{:?}", a.findings);
        // a slow pair inside a leaf, and one across leaves
        for (x, y) in [(0, 1), (2, 7)] {
            let pts = fabric_points(
                &f,
                9,
                up(1.5),
                |_| 1.0,
                |a, b| if (a, b) == (x, y) { 0.2 } else { 1.0 },
            );
            let a = analyze(&pts, None, &rules, &hosts(9));
            assert_eq!(
                fails(&a),
                vec![format!("node{x}+node{y}")],
                "{:?}",
                a.findings
            );
        }
        // a slow uplink: l2's, at a third of the others
        let pts = fabric_points(
            &f,
            9,
            |u| if u == 1 { 0.5 } else { 1.5 },
            |_| 1.0,
            |_, _| 1.0,
        );
        let a = analyze(&pts, None, &rules, &hosts(9));
        assert_eq!(fails(&a), vec!["l2↔sp"], "{:?}", a.findings);
        assert!(
            a.findings[0].text.contains("uplink l2↔sp"),
            "{:?}",
            a.findings
        );
    }

    #[test]
    fn with_two_leaves_a_slow_uplink_needs_the_declared_oversubscription_and_is_not_told_apart() {
        let rules = leaf_spine(INTERLEAVED, Some(2.0));
        let f = rules.fabric.clone().unwrap();
        // healthy 2:1 judged against the declaration: nothing
        let pts = fabric_points(&f, 8, |_| 2.0, |_| 1.0, |_, _| 1.0);
        let a = analyze(&pts, None, &rules, &hosts(8));
        assert!(a.pass, "{:?}", a.findings);
        // leaf2's uplink at a quarter of its declared rate
        let pts = fabric_points(
            &f,
            8,
            |u| if u == 1 { 0.5 } else { 2.0 },
            |_| 1.0,
            |_, _| 1.0,
        );
        let a = analyze(&pts, None, &rules, &hosts(8));
        assert_eq!(
            fails(&a),
            vec!["leaf1↔spine leaf2↔spine"],
            "{:?}",
            a.findings
        );
        assert!(
            a.findings[0].text.contains("cannot tell them apart"),
            "{:?}",
            a.findings
        );
        // undeclared, the same measurements look like the design
        let undeclared = leaf_spine(INTERLEAVED, None);
        assert!(analyze(&pts, None, &undeclared, &hosts(8)).pass);
    }

    #[test]
    fn a_host_the_fabric_does_not_place_fails_the_pairs_judgement() {
        let rules = leaf_spine("SwitchName=l1 Nodes=node[0-2]\n", None);
        let a = analyze(&pairs_points(4, |_, _| false), None, &rules, &hosts(4));
        assert!(!a.pass);
        assert!(
            a.findings[0].text.contains("no switch holds node3"),
            "{:?}",
            a.findings
        );
    }

    /// Groups of the intra tier with these busbw values, one 16 MiB point each.
    fn groups_of(bw: &[f64]) -> Vec<Point> {
        bw.iter()
            .enumerate()
            .map(|(g, &b)| {
                point(
                    "intra",
                    g,
                    &format!("node{g}"),
                    &[&format!("node{g}")],
                    1 << 24,
                    b,
                )
            })
            .collect()
    }

    fn outliers(bw: &[f64]) -> Vec<bool> {
        let pts = groups_of(bw);
        let refs: Vec<&Point> = pts.iter().collect();
        group_results(&refs, None, 0.8)
            .0
            .iter()
            .map(|g| g.outlier)
            .collect()
    }

    #[test]
    fn of_two_groups_the_slower_is_an_outlier_only_when_clearly_below() {
        // whichever of the two is slower
        assert_eq!(outliers(&[5.0, 10.0]), vec![true, false]);
        assert_eq!(outliers(&[10.0, 5.0]), vec![false, true]);
        assert_eq!(outliers(&[10.0, 9.5]), vec![false, false]);
        // at exactly the fraction: not below it
        assert_eq!(outliers(&[8.0, 10.0]), vec![false, false]);
        assert_eq!(outliers(&[0.0, 0.0]), vec![false, false]);
    }

    #[test]
    fn of_three_groups_one_at_exactly_the_fraction_is_not_an_outlier() {
        assert_eq!(outliers(&[8.0, 10.0, 10.0]), vec![false, false, false]);
        assert_eq!(outliers(&[7.9, 10.0, 10.0]), vec![true, false, false]);
        // nothing measured: every group at 1.0 of the (zero) median, not NaN
        let pts = groups_of(&[0.0, 0.0, 0.0]);
        let refs: Vec<&Point> = pts.iter().collect();
        let (g, med) = group_results(&refs, None, 0.8);
        assert_eq!(med, 0.0);
        assert!(g.iter().all(|g| g.vs_median == 1.0 && !g.outlier), "{g:?}");
    }

    #[test]
    fn in_place_points_are_judged_when_no_out_of_place_ones_exist() {
        let mut pts = groups_of(&[10.0, 10.0]);
        pts.iter_mut().for_each(|p| p.in_place = true);
        let keys = judged_keys(&pts);
        assert_eq!(keys.len(), 1);
        assert!(keys[0].0 .4, "the in-place key");
        // with both, only the out-of-place one
        let mut both = groups_of(&[10.0, 10.0]);
        both.extend(pts);
        let keys = judged_keys(&both);
        assert_eq!(keys.len(), 1);
        assert!(!keys[0].0 .4);
    }

    fn pair_set(pairs: &[(usize, usize, f64)]) -> Vec<Point> {
        pairs
            .iter()
            .enumerate()
            .map(|(g, &(a, b, bw))| {
                let (ha, hb) = (format!("node{a}"), format!("node{b}"));
                point("pairs", g, &format!("{ha}+{hb}"), &[&ha, &hb], 1 << 24, bw)
            })
            .collect()
    }

    #[test]
    fn two_pairs_are_enough_to_name_a_slow_link_and_the_fraction_itself_is_not_slow() {
        let rules = Rules::from(None, None, None);
        let a = analyze(
            &pair_set(&[(0, 1, 5.0), (2, 3, 10.0)]),
            None,
            &rules,
            &hosts(4),
        );
        assert!(!a.pass);
        assert!(
            a.findings.iter().any(|f| f.subject == "node0+node1"),
            "{:?}",
            a.findings
        );
        // 8 against a median of 10: exactly 0.8, not below it
        let pts = pair_set(&[(0, 1, 8.0), (2, 3, 10.0), (4, 5, 10.0)]);
        let a = analyze(&pts, None, &rules, &hosts(6));
        assert!(a.pass, "{:?}", a.findings);
    }

    #[test]
    fn a_sick_fabric_gets_its_first_hundred_slow_links_named() {
        // 40 nodes, every pair with (a + b) % 3 == 0 slow: 260 slow links, no node
        // whose pairs are all slow.
        let pts = pairs_points(40, |a, b| (a + b) % 3 == 0);
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(40));
        assert!(!a.pass);
        assert!(a.outlier_nodes.is_empty(), "{:?}", a.outlier_nodes);
        assert_eq!(a.findings.len(), 100);
    }

    #[test]
    fn outlier_groups_say_what_to_suspect_by_tier() {
        let rules = Rules::from(None, None, None);
        for (tier, want) in [
            ("intra", "suspect node0's intra-node links"),
            ("rails", "suspect the NIC or switch port of node0"),
            ("world", "suspect this group's slowest member"),
        ] {
            let pts: Vec<Point> = [2.0, 10.0, 10.0]
                .iter()
                .enumerate()
                .map(|(g, &b)| {
                    let h = format!("node{g}");
                    point(tier, g, &h, &[&h], 1 << 24, b)
                })
                .collect();
            let a = analyze(&pts, None, &rules, &hosts(3));
            assert!(!a.pass, "{tier}");
            let f = a.findings.iter().find(|f| f.subject == "node0").unwrap();
            assert!(f.text.contains(want), "{tier}: {}", f.text);
        }
    }

    /// Rail groups over `hosts` each, at `bw`.
    fn rails(groups: &[(&[&str], f64)]) -> Vec<Point> {
        groups
            .iter()
            .enumerate()
            .map(|(g, (h, bw))| point("rails", g, &format!("rail {g}"), h, 1 << 24, *bw))
            .collect()
    }

    #[test]
    fn on_a_fabric_a_tier_compares_groups_only_within_their_class() {
        let rules = leaf_spine(INTERLEAVED, None);
        // rail 0 crosses the uplinks (node0 on leaf1, node1 on leaf2), rail 1 stays
        // under leaf1: half as fast is what the fabric allows, not an outlier.
        let pts = rails(&[(&["node0", "node1"], 0.5), (&["node0", "node2"], 1.0)]);
        let flat = analyze(&pts, None, &Rules::from(None, None, None), &hosts(3));
        assert_eq!(fails(&flat), ["rail 0"]);
        let a = analyze(&pts, None, &rules, &hosts(3));
        assert!(a.pass && fails(&a).is_empty(), "{:?}", a.findings);
        let t = &a.tiers[0];
        assert!(t.groups.iter().all(|g| !g.outlier && g.vs_median == 1.0));
        // Each alone in its class: said, not passed over in silence.
        let lone = a.findings.iter().find(|f| f.severity == "info").unwrap();
        assert!(
            lone.text
                .contains("rail 0, rail 1 alone in its fabric class, not judged"),
            "{}",
            lone.text
        );

        // Three groups of one class (one node under each leaf): the slow one is named,
        // against its class; the lone group of another class is not judged.
        let pts = rails(&[
            (&["node0", "node1"], 1.0),
            (&["node2", "node3"], 0.5),
            (&["node4", "node5"], 1.0),
            (&["node4", "node6"], 3.0),
        ]);
        let a = analyze(&pts, None, &rules, &hosts(7));
        assert_eq!(fails(&a), ["rail 1"]);
        let lone: Vec<&str> = a
            .findings
            .iter()
            .filter(|f| f.severity == "info")
            .map(|f| f.text.as_str())
            .collect();
        assert!(
            lone.len() == 1 && lone[0].contains(": rail 3 alone in its fabric class"),
            "{lone:?}"
        );
        let f = a.findings.iter().find(|f| f.subject == "rail 1").unwrap();
        assert!(
            f.text
                .contains("0.50× the median rails group of its fabric class"),
            "{}",
            f.text
        );
        // The classes: one node under each of two leaves, two nodes under one leaf.
        let f = rules.fabric.as_ref().unwrap();
        assert_eq!(fabric_class(f, &a.tiers[0].groups[0].hosts), [1, 1]);
        assert_eq!(fabric_class(f, &a.tiers[0].groups[3].hosts), [2]);
    }

    #[test]
    fn a_slow_node_is_named_from_its_pairs() {
        let pts = pairs_points(4, |a, b| a == 3 || b == 3);
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(4));
        assert!(!a.pass);
        assert_eq!(a.outlier_nodes, vec!["node3".to_string()]);
        let f = a.findings.iter().find(|f| f.subject == "node3").unwrap();
        assert!(
            f.text
                .contains("node3: every pair that includes it runs at")
                && f.text.contains("suspect node3's link"),
            "{}",
            f.text
        );
        assert_eq!(a.findings.len(), 1, "{:?}", a.findings);
        let m = &a.pair_matrices[0];
        assert_eq!(m.busbw_gbps[0][3], Some(0.05));
        assert_eq!(m.busbw_gbps[1][2], Some(0.2));
        assert_eq!(m.busbw_gbps[2][2], None);
    }

    #[test]
    fn a_single_slow_link_names_the_pair() {
        let pts = pairs_points(4, |a, b| (a, b) == (0, 2));
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(4));
        assert!(!a.pass);
        assert!(a.outlier_nodes.is_empty());
        assert_eq!(a.findings.len(), 1);
        assert!(
            a.findings[0]
                .text
                .contains("suspect the link between node0 and node2"),
            "{}",
            a.findings[0].text
        );
    }

    #[test]
    fn uniform_pairs_pass() {
        let pts = pairs_points(8, |_, _| false);
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(8));
        assert!(a.pass, "{:?}", a.findings);
    }

    #[test]
    fn scales_to_1024_nodes() {
        let pts = pairs_points(1024, |a, b| a == 700 || b == 700);
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(1024));
        assert_eq!(a.outlier_nodes, vec!["node700".to_string()]);
    }

    #[test]
    fn expectation_failures_name_the_tier() {
        let topo = Topology::parse(
            "name='t'\n[node]\ngpus=0\n[inter]\nall_reduce_busbw_gbps=0.2\n[acceptance]\nmin_fraction=0.8\n",
            "t.toml",
        )
        .unwrap();
        let pts = vec![point(
            "inter",
            0,
            "inter",
            &["node0", "node1"],
            1 << 24,
            0.1,
        )];
        let a = analyze(
            &pts,
            Some(&topo),
            &Rules::from(Some(&topo), None, None),
            &hosts(2),
        );
        assert!(!a.pass);
        assert!(
            a.findings[0]
                .text
                .contains("tier inter all_reduce: 0.100 GB/s"),
            "{}",
            a.findings[0].text
        );
        let pts = vec![point(
            "inter",
            0,
            "inter",
            &["node0", "node1"],
            1 << 24,
            0.19,
        )];
        assert!(
            analyze(
                &pts,
                Some(&topo),
                &Rules::from(Some(&topo), None, None),
                &hosts(2)
            )
            .pass
        );
    }

    #[test]
    fn intra_outlier_names_the_node() {
        let pts: Vec<Point> = (0..4)
            .map(|i| {
                point(
                    "intra",
                    i,
                    &format!("node{i}"),
                    &[&format!("node{i}")],
                    1 << 24,
                    if i == 1 { 1.0 } else { 5.0 },
                )
            })
            .collect();
        let a = analyze(&pts, None, &Rules::from(None, None, None), &hosts(4));
        assert_eq!(a.outlier_nodes, vec!["node1".to_string()]);
    }

    #[test]
    fn a_tier_section_sets_its_own_outlier_fraction_unless_the_command_line_does() {
        // node1 at 0.4x the median intra group: an outlier at the default 0.8, not at
        // the tier's own 0.25; --outlier-fraction 0.5 overrides the tier's value.
        let pts: Vec<Point> = (0..4)
            .map(|i| {
                point(
                    "intra",
                    i,
                    &format!("node{i}"),
                    &[&format!("node{i}")],
                    1 << 24,
                    if i == 1 { 2.0 } else { 5.0 },
                )
            })
            .collect();
        let topo = Topology::parse(
            "name='t'\n[node]\ngpus=0\n[intra]\noutlier_fraction=0.25\n",
            "t.toml",
        )
        .unwrap();
        let rules = Rules::from(Some(&topo), None, None);
        assert_eq!(rules.outlier_for(TierKind::Intra), 0.25);
        assert_eq!(rules.outlier_for(TierKind::Pairs), 0.8);
        let a = analyze(&pts, Some(&topo), &rules, &hosts(4));
        assert!(a.pass, "{:?}", a.findings);
        assert!(a.outlier_nodes.is_empty());
        let cli = Rules::from(Some(&topo), Some(0.5), None);
        let a = analyze(&pts, Some(&topo), &cli, &hosts(4));
        assert_eq!(a.outlier_nodes, vec!["node1".to_string()]);
        let err = Topology::parse(
            "name='t'\n[node]\ngpus=0\n[intra]\noutlier_fraction=1.5\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("t.toml: intra.outlier_fraction: 1.5"), "{err}");
    }
}
