//! `burnin compare A B`: two results folders side by side — two fabrics, two
//! reservations, before and after a fix. Per tier and size the busbw of each and the
//! ratio B/A, training and recovery numbers side by side, and the criteria whose
//! verdict flipped. Rendered through the same document model as the report.
use super::charts::{self, BwSeries};
use super::data::RunData;
use super::doc::planned;
use super::verdict::{self, Criterion};
use super::{html, markdown, ratio, Doc};
use crate::kinds::CollKind;
use crate::units::Bytes;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Slowest group's busbw per (tier, collective, size), first type/op, out-of-place
/// when measured.
fn busbw_grid(d: &RunData) -> Grid {
    let mut m = BTreeMap::new();
    let Some(s) = &d.sweep else { return m };
    for coll in planned(d, s).collectives {
        let of: Vec<_> = s.points.iter().filter(|p| p.collective == coll).collect();
        let Some(first) = of.first() else { continue };
        let any_out = of.iter().any(|p| !p.in_place);
        for p in of.iter().filter(|p| {
            p.dtype == first.dtype
                && p.op == first.op
                && p.in_place != any_out
                && !matches!(
                    p.tier,
                    crate::kinds::TierKind::Bisect | crate::kinds::TierKind::Map
                )
        }) {
            let e = m
                .entry((p.tier as usize, p.tier.to_string(), coll, p.bytes))
                .or_insert(f64::INFINITY);
            *e = e.min(p.busbw_gbps);
        }
    }
    m
}

fn f3(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into())
}

/// Slowest group's busbw per (tier order, tier, collective, size).
type Grid = BTreeMap<GridKey, f64>;
type GridKey = (usize, String, CollKind, u64);

/// Build the comparison of `a` (the baseline) and `b`.
pub fn build(a: &RunData, b: &RunData, name_a: &str, name_b: &str, charts: bool) -> Doc {
    let mut d = Doc::default();
    let title = format!("burnin compare: {name_a} vs {name_b}");
    d.title = title.clone();
    d.h(1, title);
    let ca = verdict::judge(a);
    let cb = verdict::judge(b);
    d.p(format!(
        "A = `{name_a}` ({}): **{}**. B = `{name_b}` ({}): **{}**. Ratios are B ÷ A.",
        a.name(),
        super::doc::summary_line(&ca),
        b.name(),
        super::doc::summary_line(&cb)
    ));

    d.h(2, "Criteria that flipped");
    let flipped = flips(&ca, &cb);
    if flipped.is_empty() {
        d.p("None: every criterion judged in both runs has the same verdict.");
    } else {
        d.table(
            &["criterion", "A", "B", "A measured", "B measured"],
            flipped,
        );
    }

    d.h(2, "busbw (GB/s, slowest group)");
    let ga = busbw_grid(a);
    let gb = busbw_grid(b);
    let mut keys: Vec<&GridKey> = ga.keys().chain(gb.keys()).collect();
    keys.sort();
    keys.dedup();
    busbw_tables(&mut d, &keys, &ga, &gb);
    if charts {
        busbw_charts(&mut d, &keys, [(name_a, &ga), (name_b, &gb)]);
    }

    let fabric = super::fabric::compare_rows(a, b);
    if fabric.iter().any(|r| r[1] != "-" || r[2] != "-") {
        d.h(2, "Fabric");
        d.p("The fabric map (`--fabric-map`), the pairs tier's classes (inside one switch, across by how many pairs shared the busiest uplink) and what they mean for the job.");
        d.table(&["metric", "A", "B", "B/A"], fabric);
    }

    d.h(2, "Training and recovery");
    let rows = side_by_side(a, b);
    if rows.is_empty() {
        d.p("Neither run has training or chaos results.");
    } else {
        d.table(&["metric", "A", "B", "B/A"], rows);
    }
    d
}

/// tier, collective, size, A, B, B/A.
fn grid_row(k: &GridKey, ga: &Grid, gb: &Grid) -> Vec<String> {
    vec![
        k.1.clone(),
        k.2.name().to_string(),
        Bytes(k.3).to_string(),
        f3(ga.get(k).copied()),
        f3(gb.get(k).copied()),
        ratio(ga.get(k).copied(), gb.get(k).copied()),
    ]
}

/// Each tier at its largest size common to both, then every tier and size.
fn busbw_tables(d: &mut Doc, keys: &[&GridKey], ga: &Grid, gb: &Grid) {
    let mut summary = Vec::new();
    let mut seen: Vec<(String, CollKind)> = Vec::new();
    for k in keys.iter().rev() {
        let tc = (k.1.clone(), k.2);
        if seen.contains(&tc) || !(ga.contains_key(*k) && gb.contains_key(*k)) {
            continue;
        }
        seen.push(tc);
        summary.push(grid_row(k, ga, gb));
    }
    summary.sort_by_key(|r| {
        (
            ["world", "intra", "inter", "rails", "pairs"]
                .iter()
                .position(|x| *x == r[0])
                .unwrap_or(9),
            r[1].clone(),
        )
    });
    if summary.is_empty() {
        d.p("No tier measured in both runs.");
    } else {
        d.h(3, "Per tier, at the largest size both measured");
        d.table(&["tier", "collective", "size", "A", "B", "B/A"], summary);
    }
    if !keys.is_empty() {
        d.h(3, "Per tier and size");
        let rows = keys.iter().map(|k| grid_row(k, ga, gb)).collect();
        d.table(&["tier", "collective", "size", "A", "B", "B/A"], rows);
    }
}

/// busbw against size of A and B, one chart per (tier, collective) but pairs.
fn busbw_charts(d: &mut Doc, keys: &[&GridKey], runs: [(&str, &Grid); 2]) {
    let mut tiers: Vec<(String, CollKind)> = keys
        .iter()
        .filter(|k| k.1 != "pairs")
        .map(|k| (k.1.clone(), k.2))
        .collect();
    tiers.dedup();
    for (tier, coll) in tiers {
        let line = |g: &Grid| -> Vec<(u64, f64)> {
            g.iter()
                .filter(|(k, _)| k.1 == tier && k.2 == coll)
                .map(|(k, v)| (k.3, *v))
                .collect()
        };
        let series = [("A", runs[0]), ("B", runs[1])].map(|(ab, (name, g))| BwSeries {
            label: format!("{ab} {name}"),
            points: line(g),
            alert: false,
        });
        d.chart(
            &format!("{coll} {tier}"),
            charts::busbw_vs_size(
                &format!("{coll} busbw, tier {tier}: A vs B"),
                &series,
                None,
                &[],
            ),
        );
    }
}

/// Criteria judged (PASS or FAIL) in both runs whose verdict differs, and those
/// judged in only one.
pub fn flips(a: &[Criterion], b: &[Criterion]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for x in a {
        match b.iter().find(|y| y.id == x.id) {
            Some(y) if y.status != x.status => rows.push(vec![
                format!("{} (`{}`)", x.what, x.id),
                x.status.label().into(),
                y.status.label().into(),
                x.measured.clone(),
                y.measured.clone(),
            ]),
            Some(_) => {}
            None => rows.push(vec![
                format!("{} (`{}`)", x.what, x.id),
                x.status.label().into(),
                "absent".into(),
                x.measured.clone(),
                "-".into(),
            ]),
        }
    }
    for y in b.iter().filter(|y| !a.iter().any(|x| x.id == y.id)) {
        rows.push(vec![
            format!("{} (`{}`)", y.what, y.id),
            "absent".into(),
            y.status.label().into(),
            "-".into(),
            y.measured.clone(),
        ]);
    }
    rows
}

fn side_by_side(a: &RunData, b: &RunData) -> Vec<Vec<String>> {
    type Metric = fn(&RunData) -> Option<f64>;
    let metrics: [(&str, Metric); 9] = [
        ("replay: step communication p50 (µs)", |d| {
            Some(d.replay.as_ref()?.step.p50_us).filter(|v| *v > 0.0)
        }),
        ("replay: calls at their own cost (µs)", |d| {
            Some(d.replay.as_ref()?.calls_sum_us).filter(|v| *v > 0.0)
        }),
        ("training step p50 (ms)", |d| {
            let r = d.train.as_ref()?.run.as_ref()?;
            (r.steps_run > 0).then(|| r.step_time.p50_us / 1e3)
        }),
        ("tokens/s", |d| {
            Some(d.train.as_ref()?.run.as_ref()?.tokens_per_s)
        }),
        ("checkpoint write (GB/s)", |d| {
            d.train
                .as_ref()?
                .run
                .as_ref()?
                .storage
                .as_ref()?
                .ckpt_write_gbps
        }),
        ("restore after resume (s)", |d| {
            Some(
                d.train_resume
                    .as_ref()?
                    .run
                    .as_ref()?
                    .resumed
                    .as_ref()?
                    .restore_s,
            )
        }),
        ("chaos: detect, worst trial (s)", |d| {
            d.chaos
                .as_ref()?
                .trials
                .iter()
                .filter_map(|t| t.detect_s)
                .reduce(f64::max)
        }),
        ("chaos: recovery, worst trial (s)", |d| {
            d.chaos
                .as_ref()?
                .trials
                .iter()
                .filter_map(|t| t.recovery_s)
                .reduce(f64::max)
        }),
        ("chaos: steps lost, worst trial", |d| {
            d.chaos
                .as_ref()?
                .trials
                .iter()
                .filter_map(|t| t.steps_lost)
                .reduce(f64::max)
        }),
    ];
    metrics
        .iter()
        .filter_map(|(name, f)| {
            let (x, y) = (f(a), f(b));
            (x.is_some() || y.is_some()).then(|| vec![name.to_string(), f3(x), f3(y), ratio(x, y)])
        })
        .collect()
}

/// `burnin compare`: Markdown on stdout, or compare.md and compare.html in `out`.
pub fn run(a: &Path, b: &Path, out: Option<&Path>) -> Result<()> {
    let da = RunData::load(a)?;
    let db = RunData::load(b)?;
    let (na, nb) = (a.display().to_string(), b.display().to_string());
    let md = markdown::render(&build(&da, &db, &na, &nb, false));
    match out {
        None => print!("{md}"),
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--out: cannot create directory {}", dir.display()))?;
            let page = html::render(&build(&da, &db, &na, &nb, true));
            crate::results::write_atomic(&dir.join("compare.md"), md.as_bytes())?;
            crate::results::write_atomic(&dir.join("compare.html"), page.as_bytes())?;
            println!("# compare: {}", dir.join("compare.md").display());
            println!("# compare: {}", dir.join("compare.html").display());
        }
    }
    Ok(())
}
