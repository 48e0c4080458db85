//! Judging tiers: against the topology file's expectation, and against peers (a
//! group below a fraction of its tier's median busbw is an outlier). From the node
//! pairs it names the node or the link to suspect. Pure: works on recorded points, so
//! `burnin report` can re-judge a results folder.
use crate::kinds::{CollKind, Dtype, RedOp, TierKind};
use crate::results::analysis::{Analysis, Finding, GroupResult, PairMatrix, TierResult};
use crate::results::sweep::Point;
use crate::stats::{median, Combine, TimeStats};
use crate::topology::file::Topology;
use crate::units::Bytes;
use std::collections::BTreeMap;

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
        let (groups, med) = group_results(&pts, rules.large_message, outlier_fraction);
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
            pair_findings(&mut a, &groups, coll, outlier_fraction, node_hosts);
        } else {
            outlier_findings(&mut a, tier, coll, &groups);
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
    for p in points {
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
fn outlier_findings(a: &mut Analysis, tier: TierKind, coll: CollKind, groups: &[GroupResult]) {
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
                "{} ({tier} {coll}): {:.3} GB/s is {:.2}× the median {tier} group — {what}",
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
    let mut m = vec![vec![None; n]; n];
    let index: std::collections::HashMap<&str, usize> = node_hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.as_str(), i))
        .collect();
    let node_of_group = |g: &GroupResult| -> Option<(usize, usize)> {
        let idx: Vec<usize> = g
            .hosts
            .iter()
            .filter_map(|h| index.get(h.as_str()).copied())
            .collect();
        (idx.len() == 2).then(|| (idx[0].min(idx[1]), idx[0].max(idx[1])))
    };
    let mut pairs: Vec<(usize, usize, f64, f64)> = Vec::new();
    for g in groups {
        if let Some((x, y)) = node_of_group(g) {
            m[x][y] = Some(g.busbw_gbps);
            m[y][x] = Some(g.busbw_gbps);
            pairs.push((x, y, g.busbw_gbps, g.vs_median));
        }
    }
    a.pair_matrices.push(PairMatrix {
        collective: coll,
        bytes: groups.iter().map(|g| g.bytes).max().unwrap_or(0),
        nodes: node_hosts.to_vec(),
        busbw_gbps: m,
    });
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
