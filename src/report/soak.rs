//! The soak (`sweep --duration`, the card's `[soak]`): its section of the report (each
//! tier's busbw over the soak's time, the series that drifted or varied, the wrong
//! elements seen) and its criteria.
use super::charts;
use super::criteria::{count_wrong, crit, gate, gated};
use super::data::{RunData, SweepData};
use super::Doc;
use crate::card::SoakCriteria;
use crate::results::acceptance::{Criterion, Status};
use crate::results::sweep::{Soak, SoakGpu, SoakSeries};
use crate::units::Bytes;

/// A chart line: its series' drift (to sort by), its name, its points.
type Line = (f64, String, Vec<(f64, f64)>);

/// Lines of one chart at most (the slowest series of the tier first).
const MAX_LINES: usize = 8;

/// The soak's findings (under the caller's heading).
pub fn section(d: &mut Doc, s: &Soak, charts: bool) {
    let windows = match s.drift_window_s {
        Some(w) => format!("of the passes of the last {w:.0} s over those of the first {w:.0} s"),
        None => format!(
            "of the last {} pass(es) over the first {}",
            s.window_passes, s.window_passes
        ),
    };
    d.p(format!(
        "{} passes in {:.0} s (asked {:.0} s). Drift is the mean busbw {windows}; a series fails below {}{}. {}",
        s.passes,
        s.elapsed_s,
        s.duration_s,
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
    gpus(d, s, t0, charts);
}

/// Rows of the GPU table at most (the most throttled, then the hottest, first).
const MAX_GPU_ROWS: usize = 16;

/// The GPUs over the soak (NVML): the most throttled and hottest, throttles on the
/// suspect hosts, temperature and SM clock on the busbw charts' time axis.
fn gpus(d: &mut Doc, s: &Soak, t0: f64, charts: bool) {
    if s.gpus.is_empty() {
        if let Some(n) = &s.gpu_note {
            d.p(format!("GPUs over the soak: not sampled ({n})."));
        }
        return;
    }
    let since = |t: f64| {
        if t0.is_finite() {
            format!("{:.0} s", t - t0)
        } else {
            crate::results::utc_text(t)
        }
    };
    let mut worst: Vec<&SoakGpu> = s.gpus.iter().collect();
    worst.sort_by(|a, b| {
        b.throttled_share
            .total_cmp(&a.throttled_share)
            .then(b.temp_c_max.cmp(&a.temp_c_max))
    });
    let throttled = worst.iter().filter(|g| g.throttled_share > 0.0).count();
    d.p(format!(
        "GPUs over the soak (NVML, every rank's GPU): {} sampled, {throttled} throttled (thermal, HW slowdown, power brake or sync boost){}.",
        s.gpus.len(),
        s.gpu_note
            .as_ref()
            .map(|n| format!("; {n}"))
            .unwrap_or_default()
    ));
    for g in worst
        .iter()
        .filter(|g| s.suspects.contains(&g.host) && g.throttled_share > 0.0)
    {
        d.p(format!(
            "On suspect {}: the GPU of rank {} ({}) throttled from {} into the soak — read the drift against it.",
            g.host,
            g.rank,
            g.pci_bus_id,
            g.first_throttled_unix.map(since).unwrap_or_default()
        ));
    }
    let opt = |v: Option<u32>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = worst
        .iter()
        .take(MAX_GPU_ROWS)
        .map(|g| {
            vec![
                g.host.clone(),
                g.rank.to_string(),
                g.pci_bus_id.clone(),
                opt(g.temp_c_max),
                opt(g.sm_mhz_min),
                format!("{:.0}%", 100.0 * g.throttled_share),
                g.first_throttled_unix
                    .map(since)
                    .unwrap_or_else(|| "-".into()),
                if g.xids.is_empty() {
                    "-".into()
                } else {
                    g.xids
                        .iter()
                        .map(|x| x.xid.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ]
        })
        .collect();
    d.table(
        &[
            "host",
            "rank",
            "PCI",
            "max °C",
            "min SM MHz",
            "throttled",
            "first throttle",
            "XIDs",
        ],
        rows,
    );
    if worst.len() > MAX_GPU_ROWS {
        d.p(format!(
            "{} more GPU(s) in run.json's soak.gpus.",
            worst.len() - MAX_GPU_ROWS
        ));
    }
    if charts && t0.is_finite() {
        gpu_chart(d, "GPU temperature over the soak", "°C", &worst, t0, |g| {
            &g.temp_c
        });
        worst.sort_by_key(|g| g.sm_mhz_min.unwrap_or(u32::MAX));
        gpu_chart(d, "GPU SM clock over the soak", "MHz", &worst, t0, |g| {
            &g.sm_mhz
        });
    }
}

/// One line per GPU (the first [`MAX_LINES`] of `gpus`) of `values` over the seconds.
fn gpu_chart(
    d: &mut Doc,
    title: &str,
    unit: &str,
    gpus: &[&SoakGpu],
    t0: f64,
    values: fn(&SoakGpu) -> &Vec<Option<u32>>,
) {
    let series: Vec<(String, Vec<(f64, f64)>)> = gpus
        .iter()
        .take(MAX_LINES)
        .map(|g| {
            let pts = g
                .unix
                .iter()
                .zip(values(g))
                .filter_map(|(t, v)| Some((t - t0, f64::from((*v)?))))
                .collect();
            (format!("{} rank {}", g.host, g.rank), pts)
        })
        .collect();
    d.chart(title, charts::over_x(title, "seconds", unit, &series, &[]));
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

/// The acceptance's soak phase: its findings, or what it left when it did not finish.
pub fn phase_section(d: &mut Doc, data: &RunData, charts: bool) {
    match data.soak.as_ref() {
        Some(w) => match w.report.as_ref().and_then(|r| r.soak.as_ref()) {
            Some(s) => section(d, s, charts),
            None => d.p(format!(
                "The soak did not finish (no run.json): {} point(s) measured in {} pass(es), in {}.",
                w.points.len(),
                w.points.iter().map(|p| p.pass + 1).max().unwrap_or(0),
                w.dir.join("points.jsonl").display()
            )),
        },
        None => d.p("No soak results: the phase did not run or wrote nothing."),
    }
}

/// The soak's criteria, judged from what it wrote (the card's thresholds, so a report
/// of the folder reaches the verdict `burnin run` reached).
pub fn judge(data: &RunData, c: &SoakCriteria) -> Vec<Criterion> {
    let g = gate(data, "soak");
    let sweep = data.soaked();
    let soak = sweep.and_then(|s| s.report.as_ref()?.soak.as_ref());
    let mut out = vec![gated(&g, complete(sweep, soak))];
    out.push(gated(&g, drift(soak, c.max_drift)));
    if let Some(cv) = c.max_pass_cv {
        out.push(gated(&g, pass_cv(soak, cv)));
    }
    if c.zero_wrong {
        out.push(gated(&g, zero_wrong(sweep, soak)));
    }
    out
}

/// The soak's first second (the earliest point of any series).
fn start(s: &Soak) -> f64 {
    s.series
        .iter()
        .filter_map(|x| x.unix.first().copied())
        .fold(f64::INFINITY, f64::min)
}

fn series_name(x: &SoakSeries) -> String {
    format!("{} {} {}", x.tier.name(), x.label, x.collective)
}

fn complete(sweep: Option<&SweepData>, soak: Option<&Soak>) -> Criterion {
    let mut k = crit(
        "soak.complete",
        "soak",
        "the soak repeated its tiers until its duration was up".into(),
        "finished (run.json with its soak)".into(),
    );
    match (sweep, soak) {
        (_, Some(s)) => {
            k.measured = format!(
                "{} pass(es) in {:.0} s of {:.0} s",
                s.passes, s.elapsed_s, s.duration_s
            );
            k.status = Status::Pass;
        }
        (Some(w), None) => {
            let passes = w.points.iter().map(|p| p.pass + 1).max().unwrap_or(0);
            k.measured = format!(
                "{} point(s) in {passes} pass(es), did not finish",
                w.points.len()
            );
        }
        (None, None) => {}
    }
    k
}

fn s_window(soak: Option<&Soak>) -> Option<f64> {
    soak.and_then(|s| s.drift_window_s)
}

/// Every series' drift against the floor: the worst one is shown.
fn drift(soak: Option<&Soak>, floor: f64) -> Criterion {
    let mut k = crit(
        "soak.drift",
        "soak",
        match s_window(soak) {
            Some(w) => format!("busbw of every series, mean of its passes of the last {w:.0} s over those of the first {w:.0} s (worst series)"),
            None => "busbw of every series, mean of its last quarter of passes over its first quarter's (worst series)".into(),
        },
        format!("≥ {floor}"),
    );
    let Some(s) = soak else { return k };
    if s.passes < 2 {
        k.measured = format!("{} pass", s.passes);
        k.detail = "a drift needs at least 2 passes: lengthen duration_s".into();
        return k;
    }
    let Some(worst) = s.series.iter().min_by(|a, b| a.drift.total_cmp(&b.drift)) else {
        k.measured = "no series".into();
        return k;
    };
    k.measured = format!("{:.2} ({})", worst.drift, series_name(worst));
    let low: Vec<&SoakSeries> = s.series.iter().filter(|x| x.drift < floor).collect();
    if low.is_empty() {
        k.status = Status::Pass;
        return k;
    }
    let t0 = start(s);
    let began = low
        .iter()
        .filter_map(|x| x.began_unix)
        .fold(f64::INFINITY, f64::min);
    k.detail = format!(
        "{} of {} series below {floor}{}{}",
        low.len(),
        s.series.len(),
        if began.is_finite() {
            format!("; the drop began {:.0} s into the soak", began - t0)
        } else {
            String::new()
        },
        if s.suspects.is_empty() {
            String::new()
        } else {
            format!("; suspect: {}", s.suspects.join(", "))
        }
    );
    k
}

fn pass_cv(soak: Option<&Soak>, ceil: f64) -> Criterion {
    let mut k = crit(
        "soak.pass_cv",
        "soak",
        "coefficient of variation of every series' busbw over the passes (worst series)".into(),
        format!("≤ {ceil}"),
    );
    let Some(s) = soak else { return k };
    let Some(worst) = s
        .series
        .iter()
        .max_by(|a, b| a.pass_cv.total_cmp(&b.pass_cv))
    else {
        k.measured = "no series".into();
        return k;
    };
    k.measured = format!("{:.3} ({})", worst.pass_cv, series_name(worst));
    if worst.pass_cv <= ceil {
        k.status = Status::Pass;
    }
    k
}

/// No wrong element in any pass; the first one seen is named.
fn zero_wrong(sweep: Option<&SweepData>, soak: Option<&Soak>) -> Criterion {
    let mut k = crit(
        "soak.zero_wrong",
        "soak",
        "every element of every checked result right, over the whole soak".into(),
        "0 wrong".into(),
    );
    let Some(w) = sweep else { return k };
    if !count_wrong(&mut k, &w.points) {
        return k;
    }
    if let Some((s, first)) = soak.and_then(|s| Some((s, s.wrong.first()?))) {
        let who: Vec<String> = first
            .ranks
            .iter()
            .map(|(r, h, _)| format!("rank {r} on {h}"))
            .collect();
        k.detail = format!(
            "first {:.0} s into the soak (pass {}): {} {} on {}, {}",
            first.unix - start(s),
            first.pass,
            first.collective,
            Bytes(first.bytes),
            first.label,
            who.join(", ")
        );
    }
    k
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
        let s = crate::sweep::soak::analyze(
            &pts,
            80.0,
            80.0,
            crate::sweep::soak::Judged {
                max_drift: 0.9,
                max_pass_cv: None,
                drift_window_s: None,
            },
            &hosts,
        );
        let mut d = Doc::default();
        section(&mut d, &s, false);
        let text = crate::report::markdown::render(&d);
        assert!(!text.contains("### Soak"), "the caller's heading: {text}");
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
        let k = drift(Some(&s), 0.9);
        assert_eq!(k.status, Status::Fail);
        assert_eq!(k.measured, "0.20 (world world all_reduce)");
        assert_eq!(
            k.detail,
            "3 of 4 series below 0.9; the drop began 40 s into the soak; suspect: node2"
        );
        assert_eq!(drift(Some(&s), 0.1).status, Status::Pass);
        let k = pass_cv(Some(&s), 0.3);
        assert_eq!(
            (k.status, k.measured.as_str()),
            (Status::Fail, "0.667 (pairs node1+node2 all_reduce)")
        );
        let k = complete(None, Some(&s));
        assert_eq!(
            (k.status, k.measured.as_str()),
            (Status::Pass, "8 pass(es) in 80 s of 80 s")
        );
    }
}
