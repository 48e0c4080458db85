//! The fabric in the report and in `burnin compare`: the map as measured
//! (`--fabric-map`) as a table and a drawing of leaves, spine and uplinks with their
//! rates, the pairs tier's classes, and two runs' fabrics side by side.
use super::data::RunData;
use super::ratio;
use super::Doc;
use crate::card::SweepCriteria;
use crate::kinds::{CollKind, TierKind};
use crate::results::acceptance::{Criterion, Status};
use crate::results::sweep::{FabricMap, SweepReport};
use anyhow::Result;

fn f4(v: f64) -> String {
    format!("{v:.4}")
}

/// The fabric map's section.
pub fn section(d: &mut Doc, m: &FabricMap, charts: bool) {
    d.h(3, "Fabric map (measured)");
    d.p(format!(
        "Leaves {} ({}). Injection {} GB/s per node (every node paired inside its leaf, all at once); bisection {} GB/s over {} pairs across the halves ({:.2} of injection); oversubscription **{:.1}:1** as measured{}.",
        m.leaves_from,
        m.inference,
        f4(m.injection_gbps),
        f4(m.bisection_gbps),
        m.bisection_pairs.len(),
        m.bisection_fraction,
        m.oversubscription,
        m.declared_oversubscription
            .map_or(String::new(), |r| format!(", {r}:1 declared"))
    ));
    let rows = m
        .leaves
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                l.hosts.join(" "),
                f4(l.injection_gbps),
                f4(l.cross_gbps),
                format!("{:.1}:1", l.oversubscription),
            ]
        })
        .collect();
    d.table(
        &[
            "leaf",
            "nodes",
            "injection (GB/s/node)",
            "average cross pair (GB/s/node)",
            "oversubscription",
        ],
        rows,
    );
    if !m.differences.is_empty() {
        d.p("Where the measurement differs from the declared fabric:");
        d.list(m.differences.clone());
    }
    if !m.limits.is_empty() {
        d.p("Limits of this map:");
        d.list(m.limits.clone());
    }
    if charts {
        d.chart("fabric map", drawing(m));
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Leaves under a spine, each uplink labelled with its average cross pair's rate and
/// the leaf's measured oversubscription, the nodes under each leaf: an SVG.
pub fn drawing(m: &FabricMap) -> Result<String> {
    let n = m.leaves.len().max(1);
    let col = 170.0;
    let width = (n as f64 * col).max(340.0);
    let longest = m.leaves.iter().map(|l| l.hosts.len()).max().unwrap_or(0);
    let height = 190.0 + 16.0 * longest.min(40) as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    s.push_str(&format!(
        r##"<title>fabric map: {} leaves, oversubscription {:.1}:1 measured</title><rect x="{:.0}" y="10" width="120" height="30" rx="4" fill="#dde6f0" stroke="#345"/><text x="{:.0}" y="30" text-anchor="middle">spine</text>"##,
        m.leaves.len(),
        m.oversubscription,
        width / 2.0 - 60.0,
        width / 2.0
    ));
    for (i, l) in m.leaves.iter().enumerate() {
        let cx = col * i as f64 + col / 2.0 + (width - n as f64 * col) / 2.0;
        let warn = m.differences.iter().any(|d| d.contains(&l.name));
        let stroke = if warn { "#b22" } else { "#345" };
        s.push_str(&format!(
            r##"<line x1="{:.0}" y1="40" x2="{cx:.0}" y2="100" stroke="{stroke}" stroke-width="2"/><text x="{cx:.0}" y="78" text-anchor="middle" fill="#333">{} GB/s, {:.1}:1</text>"##,
            width / 2.0,
            f4(l.cross_gbps),
            l.oversubscription
        ));
        s.push_str(&format!(
            r##"<rect x="{:.0}" y="100" width="140" height="30" rx="4" fill="#eef3e6" stroke="{stroke}"/><text x="{cx:.0}" y="120" text-anchor="middle">{}</text><text x="{cx:.0}" y="148" text-anchor="middle" fill="#555">inject {}</text>"##,
            cx - 70.0,
            esc(&l.name),
            f4(l.injection_gbps)
        ));
        for (k, h) in l.hosts.iter().take(40).enumerate() {
            s.push_str(&format!(
                r#"<text x="{cx:.0}" y="{:.0}" text-anchor="middle">{}</text>"#,
                170.0 + 16.0 * k as f64,
                esc(h)
            ));
        }
    }
    s.push_str("</svg>");
    Ok(s)
}

/// The world tier's all_reduce busbw at its largest size (slowest group), GB/s.
fn world_all_reduce(r: &SweepReport) -> Option<(u64, f64)> {
    let pts: Vec<_> = r
        .points
        .iter()
        .filter(|p| p.tier == TierKind::World && p.collective == CollKind::AllReduce)
        .collect();
    let largest = pts.iter().map(|p| p.bytes).max()?;
    let v = pts
        .iter()
        .filter(|p| p.bytes == largest)
        .map(|p| p.busbw_gbps)
        .fold(f64::INFINITY, f64::min);
    Some((largest, v))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// metric, A, B, B/A: the two runs' fabrics (map, pair classes) and what they mean for
/// the job (the world tier's all_reduce at its largest size, a replayed step).
pub fn compare_rows(a: &RunData, b: &RunData) -> Vec<Vec<String>> {
    let ra = a.sweep.as_ref().and_then(|s| s.report.as_ref());
    let rb = b.sweep.as_ref().and_then(|s| s.report.as_ref());
    let ma = ra.and_then(|r| r.fabric_map.as_ref());
    let mb = rb.and_then(|r| r.fabric_map.as_ref());
    let mut rows = Vec::new();
    let mut row = |k: String, x: Option<f64>, y: Option<f64>, digits: usize| {
        rows.push(vec![k, opt(x, digits), opt(y, digits), ratio(x, y)]);
    };
    let leaves = |m: Option<&FabricMap>| m.map(|m| m.leaves.len() as f64);
    row("leaves (map)".into(), leaves(ma), leaves(mb), 0);
    row(
        "injection, GB/s per node".into(),
        ma.map(|m| m.injection_gbps),
        mb.map(|m| m.injection_gbps),
        4,
    );
    row(
        "bisection, GB/s".into(),
        ma.map(|m| m.bisection_gbps),
        mb.map(|m| m.bisection_gbps),
        4,
    );
    row(
        "bisection / injection".into(),
        ma.map(|m| m.bisection_fraction),
        mb.map(|m| m.bisection_fraction),
        2,
    );
    row(
        "oversubscription (measured, :1)".into(),
        ma.map(|m| m.oversubscription),
        mb.map(|m| m.oversubscription),
        1,
    );
    // the pairs tier's classes, by name, each run's median
    let classes = |r: Option<&SweepReport>| -> Vec<(String, f64)> {
        r.map(|r| {
            r.analysis
                .pair_classes
                .iter()
                .map(|c| {
                    (
                        format!("pairs {} ({})", c.class, c.collective.name()),
                        c.median_gbps,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
    };
    let (ca, cb) = (classes(ra), classes(rb));
    let mut names: Vec<&String> = ca.iter().chain(&cb).map(|c| &c.0).collect();
    names.sort();
    names.dedup();
    for name in names {
        let get = |v: &[(String, f64)]| v.iter().find(|c| &c.0 == name).map(|c| c.1);
        row(format!("{name}, median GB/s"), get(&ca), get(&cb), 4);
    }
    let (wa, wb) = (ra.and_then(world_all_reduce), rb.and_then(world_all_reduce));
    if wa.is_some() || wb.is_some() {
        let size = wa.or(wb).map(|w| crate::units::Bytes(w.0).to_string());
        row(
            format!(
                "world all_reduce busbw at {}, GB/s",
                size.unwrap_or_default()
            ),
            wa.map(|w| w.1),
            wb.map(|w| w.1),
            4,
        );
    }
    let step = |d: &RunData| d.replay.as_ref().map(|r| r.step.p50_us / 1e3);
    if a.replay.is_some() || b.replay.is_some() {
        row("replayed step (median), ms".into(), step(a), step(b), 3);
    }
    rows
}

/// The card's fabric floors (`sweep.criteria.min_bisection_fraction`,
/// `max_oversubscription`), judged on the sweep's fabric map: FAIL with "no data"
/// when the sweep left none.
pub fn criteria(data: &RunData, c: &SweepCriteria) -> Vec<Criterion> {
    let map = data
        .sweep
        .as_ref()
        .and_then(|s| s.report.as_ref())
        .and_then(|r| r.fabric_map.as_ref());
    let mut out = Vec::new();
    if let Some(floor) = c.min_bisection_fraction {
        let mut k = super::criteria::crit(
            "fabric.min_bisection_fraction",
            "sweep",
            "bisection bandwidth over injection (fabric map, measured)".into(),
            format!("≥ {floor}"),
        );
        if let Some(m) = map {
            k.measured = format!(
                "{:.2} ({} of {} GB/s per node)",
                m.bisection_fraction,
                f4(m.bisection_gbps / m.bisection_pairs.len().max(1) as f64),
                f4(m.injection_gbps)
            );
            k.status = pass(m.bisection_fraction >= floor);
        } else {
            k.detail = "the sweep has no fabric map (burnin sweep --fabric-map)".into();
        }
        out.push(k);
    }
    if let Some(max) = c.max_oversubscription {
        let mut k = super::criteria::crit(
            "fabric.max_oversubscription",
            "sweep",
            "oversubscription as measured (fabric map: injection over the average bisection pair)"
                .into(),
            format!("≤ {max}:1"),
        );
        if let Some(m) = map {
            k.measured = format!("{:.1}:1", m.oversubscription);
            k.status = pass(m.oversubscription > 0.0 && m.oversubscription <= max);
        } else {
            k.detail = "the sweep has no fabric map (burnin sweep --fabric-map)".into();
        }
        out.push(k);
    }
    out
}

fn pass(ok: bool) -> Status {
    if ok {
        Status::Pass
    } else {
        Status::Fail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::sweep::MapLeaf;

    fn map() -> FabricMap {
        FabricMap {
            leaves_from: "measured".into(),
            leaves: vec![
                MapLeaf {
                    name: "group 1".into(),
                    hosts: vec!["node0".into(), "node2".into()],
                    injection_gbps: 0.025,
                    cross_gbps: 0.006,
                    oversubscription: 4.1,
                },
                MapLeaf {
                    name: "leaf<2>".into(),
                    hosts: vec!["node1".into(), "node3".into()],
                    injection_gbps: 0.025,
                    cross_gbps: 0.006,
                    oversubscription: 4.0,
                },
            ],
            inference: "2 leaves".into(),
            oversubscription: 4.0,
            differences: vec!["node3 answers as a member of group 1".into()],
            ..FabricMap::default()
        }
    }

    #[test]
    fn the_drawing_shows_every_leaf_its_uplink_and_nodes() {
        let svg = drawing(&map()).unwrap();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        for s in [
            "spine",
            "group 1",
            "leaf&lt;2&gt;",
            "node3",
            "0.0060 GB/s, 4.1:1",
        ] {
            assert!(svg.contains(s), "{s}: {svg}");
        }
        assert_eq!(svg.matches("<line").count(), 2);
    }

    #[test]
    fn the_section_says_the_measured_ratio_and_the_differences() {
        let mut d = Doc::default();
        section(&mut d, &map(), false);
        let md = super::super::markdown::render(&d);
        assert!(
            md.contains("oversubscription **4.0:1** as measured"),
            "{md}"
        );
        assert!(md.contains("node3 answers as a member of group 1"), "{md}");
        assert!(
            md.contains("| group 1 | node0 node2 | 0.0250 | 0.0060 | 4.1:1 |"),
            "{md}"
        );
    }
}
