//! The soak part of a sweep's section (`sweep --duration`): each tier's busbw over
//! the soak's time, the series that drifted or varied, and the wrong elements seen.
use super::charts;
use super::Doc;
use crate::results::sweep::Soak;

/// A chart line: its series' drift (to sort by), its name, its points.
type Line = (f64, String, Vec<(f64, f64)>);

/// Lines of one chart at most (the slowest series of the tier first).
const MAX_LINES: usize = 8;

/// The soak's subsection, when the sweep soaked.
pub fn section(d: &mut Doc, s: &Soak, charts: bool) {
    d.h(3, "Soak");
    d.p(format!(
        "{} passes in {:.0} s (asked {:.0} s). Drift is the mean busbw of the last {} pass(es) over the first {}; a series fails below {}{}. {}",
        s.passes,
        s.elapsed_s,
        s.duration_s,
        s.window_passes,
        s.window_passes,
        s.max_drift,
        s.max_pass_cv
            .map(|c| format!(", or with a coefficient of variation over the passes above {c}"))
            .unwrap_or_default(),
        if s.pass { "PASS." } else { "FAIL." }
    ));
    if !s.suspects.is_empty() {
        d.p(format!(
            "Suspect: {} (in every drifting group).",
            s.suspects.join(", ")
        ));
    }
    let t0 = s
        .series
        .iter()
        .filter_map(|x| x.unix.first().copied())
        .fold(f64::INFINITY, f64::min);
    let rows: Vec<Vec<String>> = s
        .series
        .iter()
        .map(|x| {
            vec![
                x.tier.name().to_string(),
                x.label.clone(),
                x.collective.to_string(),
                format!("{:.3}", x.first_gbps),
                format!("{:.3}", x.last_gbps),
                format!("{:.2}", x.drift),
                format!("{:.3}", x.slope_gbps_per_hour),
                format!("{:.3}", x.pass_cv),
                format!("{:.2}", x.pass_time_p99_over_p50),
                x.began_unix
                    .map(|t| format!("{:.0} s", t - t0))
                    .unwrap_or_else(|| "-".into()),
                if x.drifted || x.too_variable {
                    "FAIL"
                } else {
                    "PASS"
                }
                .into(),
            ]
        })
        .collect();
    d.table(
        &[
            "tier",
            "group",
            "collective",
            "first GB/s",
            "last GB/s",
            "drift",
            "GB/s per hour",
            "pass cv",
            "p99/p50 time",
            "drop began",
            "verdict",
        ],
        rows,
    );
    if charts && t0.is_finite() {
        timeline(d, s, t0);
    }
    let wrong: Vec<String> = s
        .wrong
        .iter()
        .map(|w| {
            let ranks: Vec<String> = w
                .ranks
                .iter()
                .map(|(r, h, i)| format!("rank {r} on {h} (element {i})"))
                .collect();
            format!(
                "{} (pass {}, {:.0} s): {} {} {} bytes, {} wrong: {}",
                crate::results::utc_text(w.unix),
                w.pass,
                w.unix - t0,
                w.tier.name(),
                w.collective,
                w.bytes,
                w.wrong,
                ranks.join("; ")
            )
        })
        .collect();
    if wrong.is_empty() {
        d.p("No wrong element in any pass.");
    } else {
        d.p("Wrong elements, in time order:");
        d.list(wrong);
    }
}

/// busbw over the soak's seconds, one chart per tier.
fn timeline(d: &mut Doc, s: &Soak, t0: f64) {
    let mut tiers: Vec<_> = s.series.iter().map(|x| x.tier).collect();
    tiers.dedup();
    for tier in tiers {
        let mut lines: Vec<Line> = s
            .series
            .iter()
            .filter(|x| x.tier == tier)
            .map(|x| {
                let pts = x
                    .unix
                    .iter()
                    .zip(&x.busbw_gbps)
                    .map(|(t, b)| (t - t0, *b))
                    .collect();
                (x.drift, format!("{} {}", x.label, x.collective), pts)
            })
            .collect();
        lines.sort_by(|a, b| a.0.total_cmp(&b.0));
        lines.truncate(MAX_LINES);
        let series: Vec<(String, Vec<(f64, f64)>)> =
            lines.into_iter().map(|(_, l, p)| (l, p)).collect();
        let title = format!("busbw over the soak: tier {}", tier.name());
        d.chart(
            &title,
            charts::over_x(&title, "seconds", "busbw (GB/s)", &series, &[]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::TierKind;
    use crate::report::Block;
    use crate::sweep::soak::soak_point;

    #[test]
    fn the_section_has_the_table_the_suspect_a_timeline_per_tier_and_the_wrong_log() {
        let mut pts = Vec::new();
        for pass in 0..8u32 {
            for (tier, label, hosts, slow) in [
                (
                    TierKind::World,
                    "world",
                    vec!["node0", "node1", "node2"],
                    true,
                ),
                (TierKind::Pairs, "node0+node2", vec!["node0", "node2"], true),
                (TierKind::Pairs, "node1+node2", vec!["node1", "node2"], true),
                (
                    TierKind::Pairs,
                    "node0+node1",
                    vec!["node0", "node1"],
                    false,
                ),
            ] {
                let bw = if slow && pass >= 4 { 2.0 } else { 10.0 };
                let mut p = soak_point(tier, label, &hosts, pass, bw, 5000.0);
                if pass == 6 && label == "node0+node1" {
                    p.wrong = Some(3);
                    p.wrong_ranks = vec![(1, 42)];
                }
                pts.push(p);
            }
        }
        let hosts: Vec<String> = (0..3).map(|i| format!("node{i}")).collect();
        let s = crate::sweep::soak::analyze(&pts, 80.0, 80.0, 0.9, None, &hosts);
        let mut d = Doc::default();
        section(&mut d, &s, false);
        let text = crate::report::markdown::render(&d);
        assert!(text.contains("### Soak"), "{text}");
        assert!(
            text.contains("Suspect: node2 (in every drifting group)."),
            "{text}"
        );
        assert!(
            text.contains("| pairs | node0+node2 | all_reduce | 10.000 | 2.000 | 0.20 |"),
            "{text}"
        );
        assert!(text.contains("| 40 s | FAIL |"), "{text}");
        assert!(text.contains("(pass 6, 60 s): pairs all_reduce 4194304 bytes, 3 wrong: rank 1 on node1 (element 42)"), "{text}");
        let mut d = Doc::default();
        section(&mut d, &s, true);
        let charts = d
            .blocks
            .iter()
            .filter(|b| matches!(b, Block::Chart(_)))
            .count();
        assert_eq!(charts, 2, "one per tier");
    }
}
