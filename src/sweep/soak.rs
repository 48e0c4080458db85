//! `--duration`: the soak. The planned tiers and sizes run pass after pass until the
//! time is up (rank 0 decides whether another pass fits and every rank follows; the
//! deadlines of each collective are the sweep's own). Every point keeps its pass and
//! time; at the end each series (tier, group, collective, type, op, placement at the
//! largest size) is judged: drift (last quarter of the passes against the first),
//! variability over the passes, and every wrong element with its time and rank.
use crate::kinds::TierKind;
use crate::results::gpu::{Sample, XidEvent, THROTTLE_MASK};
use crate::results::sweep::{Point, Soak, SoakGpu, SoakSeries, WrongSeen};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// `--max-drift` and `--max-pass-cv` in range (the error names the flag).
pub fn validate(max_drift: f64, max_pass_cv: Option<f64>) -> Result<()> {
    if !(max_drift > 0.0 && max_drift <= 1.0) {
        bail!("--max-drift: {max_drift} must be above 0 and at most 1");
    }
    if let Some(cv) = max_pass_cv {
        if !(cv > 0.0 && cv.is_finite()) {
            bail!("--max-pass-cv: {cv} must be above 0");
        }
    }
    Ok(())
}

/// `--drift-window`: positive and at most half the soak, so that the first and last
/// windows do not overlap.
pub fn validate_window(window_s: Option<f64>, duration_s: f64) -> Result<()> {
    match window_s {
        Some(w) if !(w > 0.0 && w.is_finite()) => bail!("--drift-window: {w} s must be above 0"),
        Some(w) if w > duration_s / 2.0 => bail!(
            "--drift-window: {w} s is more than half of --duration {duration_s} s: the first and last windows would overlap"
        ),
        _ => Ok(()),
    }
}

/// How a soak's series are judged.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    /// `--max-drift`.
    pub max_drift: f64,
    /// `--max-pass-cv`.
    pub max_pass_cv: Option<f64>,
    /// `--drift-window` (None: a quarter of the passes at each end).
    pub drift_window_s: Option<f64>,
}

/// How many points at each end of a series the drift averages: `passes` of them, or
/// those within `seconds` of the series' first and last point (at least one each).
#[derive(Clone, Copy, Debug)]
enum Window {
    Passes(usize),
    Seconds(f64),
}

impl Window {
    fn ends(self, unix: &[f64]) -> (usize, usize) {
        let n = unix.len();
        let (a, b) = match self {
            Window::Passes(w) => (w, w),
            Window::Seconds(s) => (
                unix.iter().filter(|t| **t - unix[0] <= s).count(),
                unix.iter().filter(|t| unix[n - 1] - **t <= s).count(),
            ),
        };
        (a.clamp(1, n.max(1)), b.clamp(1, n.max(1)))
    }
}

/// How often a soak samples its GPU with NVML: about 300 samples over the soak, 1 to
/// 60 s apart (hours of soak on thousands of GPUs stay a readable run.json).
pub fn sample_period(duration_s: f64) -> Duration {
    Duration::from_secs_f64((duration_s / 300.0).clamp(1.0, 60.0))
}

/// What one rank's GPU looked like over the soak: its samples (`t_s` counted from
/// `start_unix`) as a timeline, with the extremes and the throttling.
pub fn gpu_timeline(
    who: (usize, &str, &str),
    start_unix: f64,
    samples: &[Sample],
    xids: Vec<XidEvent>,
    error: Option<String>,
) -> SoakGpu {
    let (rank, host, bus) = who;
    let throttled: Vec<Option<bool>> = samples
        .iter()
        .map(|s| s.reasons.map(|r| r & THROTTLE_MASK != 0))
        .collect();
    let known = throttled.iter().flatten().count();
    let held = throttled.iter().flatten().filter(|t| **t).count();
    SoakGpu {
        rank,
        host: host.into(),
        pci_bus_id: bus.into(),
        unix: samples.iter().map(|s| start_unix + s.t_s).collect(),
        temp_c: samples.iter().map(|s| s.temp_c).collect(),
        sm_mhz: samples.iter().map(|s| s.sm_mhz).collect(),
        temp_c_max: samples.iter().filter_map(|s| s.temp_c).max(),
        sm_mhz_min: samples.iter().filter_map(|s| s.sm_mhz).min(),
        throttled_share: if known == 0 {
            0.0
        } else {
            held as f64 / known as f64
        },
        first_throttled_unix: samples
            .iter()
            .zip(&throttled)
            .find(|(_, t)| **t == Some(true))
            .map(|(s, _)| start_unix + s.t_s),
        throttled,
        xids,
        error,
    }
}

/// Why the soak has no GPU timeline, or which ranks' NVML failed.
pub fn gpu_note(kind: crate::backend::BackendKind, gpus: &[SoakGpu]) -> Option<String> {
    if kind != crate::backend::BackendKind::Nccl {
        return Some(format!("{kind} backend: no GPU to sample"));
    }
    let failed: Vec<String> = gpus
        .iter()
        .filter_map(|g| Some(format!("rank {}: {}", g.rank, g.error.as_ref()?)))
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// When to stop: another pass starts only while it is expected to end in time (the
/// last pass's length as its estimate); the first pass always runs.
pub struct Clock {
    start: Instant,
    duration: Duration,
    pass_start: Instant,
}

impl Clock {
    pub fn start(duration_s: f64) -> Clock {
        let now = Instant::now();
        Clock {
            start: now,
            duration: Duration::from_secs_f64(duration_s),
            pass_start: now,
        }
    }

    /// A pass just ended: whether another one fits.
    pub fn another(&mut self) -> bool {
        self.another_at(Instant::now())
    }

    /// [`Clock::another`] with the pass ending at `now`.
    fn another_at(&mut self, now: Instant) -> bool {
        let last = now.saturating_duration_since(self.pass_start);
        self.pass_start = now;
        now.saturating_duration_since(self.start) + last <= self.duration
    }

    pub fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

type Key = (TierKind, String, String, String, String, bool);

fn key(p: &Point) -> Key {
    (
        p.tier,
        p.label.clone(),
        p.collective.to_string(),
        p.dtype.to_string(),
        p.op.map(|o| o.name()).unwrap_or("none").to_string(),
        p.in_place,
    )
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Least-squares slope of `y` over `x`.
fn slope(x: &[f64], y: &[f64]) -> f64 {
    let (mx, my) = (mean(x), mean(y));
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

/// Nearest-rank quantile of `v` (any order).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// The first pass from which busbw is below `floor` there and on average after it
/// (one backward pass: the means of every suffix).
fn began(points: &[&Point], floor: f64) -> Option<f64> {
    let n = points.len();
    let mut suffix_mean = vec![0.0; n];
    let mut sum = 0.0;
    for i in (0..n).rev() {
        sum += points[i].busbw_gbps;
        suffix_mean[i] = sum / (n - i) as f64;
    }
    (0..n)
        .find(|&i| points[i].busbw_gbps < floor && suffix_mean[i] < floor)
        .map(|i| points[i].unix)
}

/// One series from its points (pass order).
fn series(points: &[&Point], window: Window, max_drift: f64, max_cv: Option<f64>) -> SoakSeries {
    let p0 = points[0];
    let bw: Vec<f64> = points.iter().map(|p| p.busbw_gbps).collect();
    let unix: Vec<f64> = points.iter().map(|p| p.unix).collect();
    let (w, w_last) = window.ends(&unix);
    let first = mean(&bw[..w]);
    let last = mean(&bw[bw.len() - w_last..]);
    let drift = if first > 0.0 { last / first } else { 1.0 };
    let hours: Vec<f64> = unix.iter().map(|t| (t - unix[0]) / 3600.0).collect();
    let m = mean(&bw);
    let sd = (bw.iter().map(|b| (b - m) * (b - m)).sum::<f64>() / bw.len() as f64).sqrt();
    let cv = if m > 0.0 { sd / m } else { 0.0 };
    let times: Vec<f64> = points.iter().map(|p| p.time.p50_us).collect();
    let p50 = quantile(&times, 0.5);
    let drifted = bw.len() >= 2 && drift < max_drift;
    SoakSeries {
        tier: p0.tier,
        label: p0.label.clone(),
        hosts: p0.hosts.clone(),
        collective: p0.collective,
        dtype: p0.dtype,
        op: p0.op,
        in_place: p0.in_place,
        bytes: p0.bytes,
        busbw_gbps: bw.clone(),
        unix,
        first_gbps: first,
        last_gbps: last,
        drift,
        slope_gbps_per_hour: slope(&hours, &bw),
        pass_cv: cv,
        pass_time_p99_over_p50: if p50 > 0.0 {
            quantile(&times, 0.99) / p50
        } else {
            1.0
        },
        began_unix: if drifted {
            began(&points[w..], max_drift * first)
        } else {
            None
        },
        drifted,
        too_variable: max_cv.is_some_and(|c| bw.len() >= 2 && cv > c),
    }
}

/// Hosts common to every drifting series, when that is fewer than all of them.
fn suspects(series: &[SoakSeries], all_hosts: &[String]) -> Vec<String> {
    let mut drifting = series.iter().filter(|s| s.drifted);
    let Some(first) = drifting.next() else {
        return Vec::new();
    };
    let mut common: Vec<String> = first.hosts.clone();
    for s in drifting {
        common.retain(|h| s.hosts.contains(h));
    }
    if common.len() >= all_hosts.len() {
        return Vec::new();
    }
    common
}

/// The wrong elements seen, in time order, with each rank's host.
fn wrong_seen(points: &[Point]) -> Vec<WrongSeen> {
    let mut v: Vec<WrongSeen> = points
        .iter()
        .filter(|p| p.wrong.unwrap_or(0) > 0)
        .map(|p| WrongSeen {
            unix: p.unix,
            pass: p.pass,
            tier: p.tier,
            label: p.label.clone(),
            collective: p.collective,
            bytes: p.bytes,
            wrong: p.wrong.unwrap_or(0),
            ranks: p
                .wrong_ranks
                .iter()
                .map(|&(gr, idx)| {
                    let rank = p.members.get(gr).copied().unwrap_or(gr);
                    (rank, host_of(p, gr), idx)
                })
                .collect(),
        })
        .collect();
    v.sort_by(|a, b| a.unix.total_cmp(&b.unix));
    v
}

/// The host of group rank `gr` of `p` (hosts are per node, members per rank: the
/// members are in node order, so the share of ranks per host tells).
fn host_of(p: &Point, gr: usize) -> String {
    let per = (p.members.len() / p.hosts.len().max(1)).max(1);
    p.hosts.get(gr / per).cloned().unwrap_or_else(|| "?".into())
}

/// Judge the soak from every point of every pass.
pub fn analyze(
    points: &[Point],
    duration_s: f64,
    elapsed_s: f64,
    judged: Judged,
    all_hosts: &[String],
) -> Soak {
    let Judged {
        max_drift,
        max_pass_cv,
        drift_window_s,
    } = judged;
    let passes = points.iter().map(|p| p.pass + 1).max().unwrap_or(0);
    let quarter = (passes as usize / 4).max(1);
    let window = match drift_window_s {
        Some(s) => Window::Seconds(s),
        None => Window::Passes(quarter),
    };
    let largest = points.iter().map(|p| p.bytes).max().unwrap_or(0);
    let mut by: BTreeMap<Key, Vec<&Point>> = BTreeMap::new();
    for p in points
        .iter()
        .filter(|p| p.bytes == largest && !matches!(p.tier, TierKind::Bisect | TierKind::Map))
    {
        by.entry(key(p)).or_default().push(p);
    }
    let series: Vec<SoakSeries> = by
        .values_mut()
        .map(|v| {
            v.sort_by_key(|p| p.pass);
            series(v, window, max_drift, max_pass_cv)
        })
        .collect();
    let wrong = wrong_seen(points);
    let pass = wrong.is_empty() && !series.iter().any(|s| s.drifted || s.too_variable);
    Soak {
        duration_s,
        elapsed_s,
        passes,
        max_drift,
        max_pass_cv,
        window_passes: if drift_window_s.is_some() {
            0
        } else {
            quarter as u32
        },
        drift_window_s,
        suspects: suspects(&series, all_hosts),
        series,
        wrong,
        pass,
        gpus: Vec::new(),
        gpu_note: None,
    }
}

/// The soak's lines for the terminal.
pub fn render(s: &Soak, t0_unix: f64) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "#\n# soak: {} passes in {:.0} s (asked {:.0} s); drift = mean busbw of the last {} pass(es) / the first {}",
        s.passes, s.elapsed_s, s.duration_s, s.window_passes, s.window_passes
    );
    for x in s.series.iter().filter(|x| x.drifted || x.too_variable) {
        let when = x
            .began_unix
            .map(|t| {
                format!(
                    ", from {} ({:.0} s into the soak)",
                    crate::results::utc_text(t),
                    t - t0_unix
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "# soak: {} {} {}: busbw {:.3} -> {:.3} GB/s ({:.2}x, limit {}), pass cv {:.3}{when}",
            x.tier.name(),
            x.label,
            x.collective,
            x.first_gbps,
            x.last_gbps,
            x.drift,
            s.max_drift,
            x.pass_cv
        );
    }
    for w in &s.wrong {
        let ranks: Vec<String> = w
            .ranks
            .iter()
            .map(|(r, h, i)| format!("rank {r} on {h} (first at element {i})"))
            .collect();
        let _ = writeln!(
            o,
            "# soak: wrong: {} pass {} {} {} {} bytes: {} element(s), {}",
            crate::results::utc_text(w.unix),
            w.pass,
            w.tier.name(),
            w.collective,
            w.bytes,
            w.wrong,
            ranks.join("; ")
        );
    }
    let drifted = s.series.iter().filter(|x| x.drifted).count();
    if !s.suspects.is_empty() {
        let began = s
            .series
            .iter()
            .filter(|x| x.drifted)
            .filter_map(|x| x.began_unix)
            .fold(f64::INFINITY, f64::min);
        let when = if began.is_finite() {
            format!(
                ", beginning {} ({:.0} s into the soak)",
                crate::results::utc_text(began),
                began - t0_unix
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "# soak: drift FAIL: suspect {}: in every one of the {drifted} drifting group(s){when}",
            s.suspects.join(", ")
        );
    } else if drifted > 0 {
        let _ = writeln!(o, "# soak: drift FAIL: {drifted} group(s) drifted");
    }
    // What the drift verdict covered: a series of one pass has nothing to compare.
    let judged = s.series.iter().filter(|x| x.busbw_gbps.len() >= 2).count();
    let single = s.series.len() - judged;
    let _ = writeln!(
        o,
        "# soak: drift judged on {judged} of {} series{}",
        s.series.len(),
        if single > 0 {
            format!(" ({single} ran only one pass: not judged, a longer --duration judges them)")
        } else {
            String::new()
        }
    );
    let _ = writeln!(o, "# soak: {}", if s.pass { "PASS" } else { "FAIL" });
    o
}

/// Test only: a judged point of pass `pass` at `t0 + 10 s × pass`, 4 MiB.
#[cfg(test)]
pub(crate) fn soak_point(
    tier: TierKind,
    label: &str,
    hosts: &[&str],
    pass: u32,
    bw: f64,
    t0: f64,
) -> Point {
    let mut p = crate::sweep::analysis::judged_point(
        tier,
        0,
        label.into(),
        (0..hosts.len()).collect(),
        hosts.iter().map(|h| h.to_string()).collect(),
        1 << 22,
        bw,
    );
    p.pass = pass;
    p.unix = t0 + 10.0 * f64::from(pass);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(label: &str, hosts: &[&str], pass: u32, bw: f64) -> Point {
        soak_point(TierKind::Pairs, label, hosts, pass, bw, 1000.0)
    }

    fn hosts() -> Vec<String> {
        (0..4).map(|i| format!("node{i}")).collect()
    }

    fn j(max_drift: f64, max_pass_cv: Option<f64>) -> Judged {
        Judged {
            max_drift,
            max_pass_cv,
            drift_window_s: None,
        }
    }

    #[test]
    fn a_drift_window_in_seconds_averages_the_passes_of_that_time_at_each_end() {
        // 8 passes 10 s apart; only the last is slow.
        let pts: Vec<Point> = (0..8)
            .map(|pass| {
                let bw = if pass == 7 { 2.0 } else { 10.0 };
                pt("node0+node1", &["node0", "node1"], pass, bw)
            })
            .collect();
        let quarters = analyze(&pts, 80.0, 80.0, j(0.75, None), &hosts());
        assert!(
            (quarters.series[0].drift - 0.6).abs() < 1e-9,
            "(10 + 2) / 2 / 10"
        );
        assert!(!quarters.pass);
        let judged = Judged {
            drift_window_s: Some(30.0),
            ..j(0.75, None)
        };
        let timed = analyze(&pts, 80.0, 80.0, judged, &hosts());
        // The last 30 s hold passes 4..7: (3 x 10 + 2) / 4 / 10.
        assert!((timed.series[0].drift - 0.8).abs() < 1e-9);
        assert!(timed.pass);
        assert_eq!((timed.window_passes, timed.drift_window_s), (0, Some(30.0)));
        assert!(validate_window(Some(30.0), 60.0).is_ok());
        assert!(validate_window(None, 60.0).is_ok());
        let e = validate_window(Some(31.0), 60.0).unwrap_err().to_string();
        assert!(
            e.starts_with("--drift-window: 31 s is more than half of --duration 60 s"),
            "{e}"
        );
        assert!(validate_window(Some(0.0), 60.0).is_err());
    }

    #[test]
    fn the_node_in_every_drifting_group_is_named_with_when_it_began() {
        let mut pts = Vec::new();
        for pass in 0..8 {
            let slow = if pass >= 4 { 0.2 } else { 1.0 };
            pts.push(pt("node0+node2", &["node0", "node2"], pass, 10.0 * slow));
            pts.push(pt("node1+node2", &["node1", "node2"], pass, 10.0 * slow));
            pts.push(pt("node0+node1", &["node0", "node1"], pass, 10.0));
        }
        let s = analyze(&pts, 80.0, 80.0, j(0.9, None), &hosts());
        assert!(!s.pass);
        assert_eq!(s.passes, 8);
        assert_eq!(s.window_passes, 2);
        assert_eq!(s.suspects, vec!["node2".to_string()]);
        let d: Vec<&SoakSeries> = s.series.iter().filter(|x| x.drifted).collect();
        assert_eq!(d.len(), 2);
        for x in d {
            assert!((x.drift - 0.2).abs() < 1e-9, "{x:?}");
            assert_eq!(x.began_unix, Some(1040.0));
            assert!(x.slope_gbps_per_hour < 0.0);
        }
        let text = render(&s, 1000.0);
        assert!(text.contains("# soak: drift FAIL: suspect node2: in every one of the 2 drifting group(s), beginning "), "{text}");
        assert!(text.contains("(40 s into the soak)"), "{text}");
        assert!(
            text.contains("# soak: drift judged on 3 of 3 series\n"),
            "{text}"
        );
    }

    #[test]
    fn a_series_of_one_pass_is_said_to_be_unjudged() {
        let pts = vec![pt("node0+node1", &["node0", "node1"], 0, 10.0)];
        let s = analyze(&pts, 10.0, 10.0, j(0.9, None), &hosts());
        let text = render(&s, 1000.0);
        assert!(
            text.contains("# soak: drift judged on 0 of 1 series (1 ran only one pass: not judged"),
            "{text}"
        );
        assert!(!text.contains("drift FAIL"), "nothing drifted: {text}");
    }

    #[test]
    fn a_steady_soak_passes_and_a_wrong_element_fails_naming_rank_and_host() {
        let mut pts: Vec<Point> = (0..6)
            .map(|pass| {
                pt(
                    "node0+node1",
                    &["node0", "node1"],
                    pass,
                    10.0 + f64::from(pass % 2) * 0.1,
                )
            })
            .collect();
        let s = analyze(&pts, 60.0, 60.0, j(0.9, Some(0.05)), &hosts());
        assert!(s.pass, "{s:?}");
        assert!(s.suspects.is_empty());
        assert!(s.series[0].pass_cv < 0.01);
        pts[3].wrong = Some(2);
        pts[3].wrong_ranks = vec![(1, 17)];
        let s = analyze(&pts, 60.0, 60.0, j(0.9, Some(0.05)), &hosts());
        assert!(!s.pass);
        assert_eq!(s.wrong.len(), 1);
        assert_eq!(s.wrong[0].ranks, vec![(1, "node1".to_string(), 17)]);
        assert_eq!(s.wrong[0].pass, 3);
        assert!(render(&s, 1000.0).contains("rank 1 on node1 (first at element 17)"));
        let s = analyze(&pts, 60.0, 60.0, j(0.9, Some(0.001)), &hosts());
        assert!(s.series[0].too_variable);
    }

    #[test]
    fn bounds_name_their_flag_and_the_clock_runs_one_pass_at_least() {
        assert!(validate(0.0, None)
            .unwrap_err()
            .to_string()
            .starts_with("--max-drift"));
        assert!(validate(0.9, Some(-1.0))
            .unwrap_err()
            .to_string()
            .starts_with("--max-pass-cv"));
        assert!(validate(0.95, Some(0.1)).is_ok());
        let mut c = Clock::start(0.0);
        assert!(!c.another(), "no time for a second pass");
        let mut c = Clock::start(3600.0);
        assert!(c.another());
    }

    #[test]
    fn another_pass_starts_only_if_the_last_ones_length_still_fits() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = Clock {
            start: t0,
            duration: ms(100),
            pass_start: t0,
        };
        // 30 ms in, a 30 ms pass: 60 ≤ 100.
        assert!(c.another_at(t0 + ms(30)));
        // 50 ms in, a 20 ms pass: 70 ≤ 100.
        assert!(c.another_at(t0 + ms(50)));
        // 80 ms in, a 30 ms pass: 110 > 100.
        assert!(!c.another_at(t0 + ms(80)));
        // Exactly at the end fits.
        let mut c = Clock {
            start: t0,
            duration: ms(100),
            pass_start: t0,
        };
        assert!(c.another_at(t0 + ms(50)));
        // The clock reads its start: a soak started two seconds ago has run two.
        if let Some(earlier) = t0.checked_sub(Duration::from_secs(2)) {
            let c = Clock {
                start: earlier,
                duration: ms(100),
                pass_start: earlier,
            };
            let e = c.elapsed_s();
            assert!((2.0..60.0).contains(&e), "{e}");
        }
    }

    #[test]
    fn a_pass_cv_exactly_at_the_limit_is_not_too_variable() {
        // busbw 5 and 15: mean 10, population sd 5, cv exactly 0.5.
        let pts: Vec<Point> = [5.0, 15.0]
            .iter()
            .enumerate()
            .map(|(i, &b)| pt("node0+node1", &["node0", "node1"], i as u32, b))
            .collect();
        let refs: Vec<&Point> = pts.iter().collect();
        let x = series(&refs, Window::Passes(1), 0.5, Some(0.5));
        assert_eq!(x.pass_cv, 0.5);
        assert!(!x.too_variable, "{x:?}");
        let x = series(&refs, Window::Passes(1), 0.5, Some(0.499));
        assert!(x.too_variable, "{x:?}");
    }

    #[test]
    fn bounds_are_inclusive_where_the_flags_say_so() {
        assert!(validate(1.0, None).is_ok(), "a drift limit of 1 is allowed");
        assert!(validate(1.01, None).is_err());
        assert!(validate(f64::NAN, None).is_err());
        assert!(validate(0.9, Some(0.0)).is_err());
        assert!(validate(0.9, Some(f64::INFINITY)).is_err());
        assert!(validate(0.9, Some(f64::NAN)).is_err());
        // Exactly half the soak: the windows meet, they do not overlap.
        assert!(validate_window(Some(30.0), 60.0).is_ok());
        assert!(validate_window(Some(f64::INFINITY), 1e9).is_err());
        let e = validate_window(Some(-1.0), 60.0).unwrap_err().to_string();
        assert_eq!(e, "--drift-window: -1 s must be above 0");
        // About 300 samples, 1 to 60 s apart.
        assert_eq!(sample_period(0.0), Duration::from_secs(1));
        assert_eq!(sample_period(300.0), Duration::from_secs(1));
        assert_eq!(sample_period(3000.0), Duration::from_secs(10));
        assert_eq!(sample_period(1e6), Duration::from_secs(60));
    }

    #[test]
    fn a_time_window_counts_the_points_on_its_edge_and_at_least_one() {
        let unix = [0.0, 10.0, 20.0, 30.0, 40.0];
        assert_eq!(Window::Seconds(10.0).ends(&unix), (2, 2));
        assert_eq!(Window::Seconds(9.0).ends(&unix), (1, 1));
        assert_eq!(Window::Seconds(25.0).ends(&unix), (3, 3));
        // Uneven spacing: each end counts its own points.
        assert_eq!(Window::Seconds(5.0).ends(&[0.0, 1.0, 2.0, 30.0]), (3, 1));
        assert_eq!(Window::Passes(2).ends(&unix), (2, 2));
        assert_eq!(Window::Passes(0).ends(&unix), (1, 1));
        assert_eq!(Window::Passes(9).ends(&unix), (5, 5));
        // Times are unix seconds: each end is measured from its own point.
        let late = [1.7e9, 1.7e9 + 10.0, 1.7e9 + 20.0, 1.7e9 + 35.0];
        assert_eq!(Window::Seconds(10.0).ends(&late), (2, 1));
        assert_eq!(Window::Seconds(15.0).ends(&late), (2, 2));
    }

    #[test]
    fn slope_quantile_and_mean_are_the_textbook_ones() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        // y = 3 - 2x.
        assert!((slope(&[0.0, 1.0, 2.0, 3.0], &[3.0, 1.0, -1.0, -3.0]) + 2.0).abs() < 1e-12);
        assert!((slope(&[1.0, 2.0, 4.0], &[2.0, 4.0, 8.0]) - 2.0).abs() < 1e-12);
        // One x: no slope.
        assert_eq!(slope(&[5.0, 5.0], &[1.0, 9.0]), 0.0);
        // Nearest rank: the ceil(q·n)-th smallest.
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.51), 3.0);
        assert_eq!(quantile(&v, 0.99), 4.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&hundred, 0.99), 99.0);
    }

    #[test]
    fn a_drop_that_recovers_did_not_begin_the_drift() {
        let mk = |bw: &[f64]| -> Vec<Point> {
            bw.iter()
                .enumerate()
                .map(|(i, &b)| pt("node0+node1", &["node0", "node1"], i as u32, b))
                .collect()
        };
        // Pass 1 dips and recovers; from pass 3 it stays low.
        let pts = mk(&[10.0, 4.0, 10.0, 4.0, 4.0, 4.0]);
        let refs: Vec<&Point> = pts.iter().collect();
        assert_eq!(began(&refs, 5.0), Some(1030.0));
        // Pass 1 is below the floor but the mean from it is 5.2; from pass 3 both
        // hold. A floor at exactly the points' busbw is not below it.
        assert_eq!(began(&refs, 4.0), None);
        assert_eq!(began(&refs[..0], 4.0), None);
        // A single low point at the end is enough.
        let pts = mk(&[10.0, 10.0, 1.0]);
        let refs: Vec<&Point> = pts.iter().collect();
        assert_eq!(began(&refs, 5.0), Some(1020.0));
        // Both tests are strict: a point exactly at the floor does not begin the drift
        // even when the mean after it is below, and a mean exactly at the floor does not
        // either.
        let pts = mk(&[10.0, 4.0, 3.0]);
        let refs: Vec<&Point> = pts.iter().collect();
        assert_eq!(began(&refs, 4.0), Some(1020.0));
        let pts = mk(&[10.0, 3.0, 5.0]);
        let refs: Vec<&Point> = pts.iter().collect();
        assert_eq!(began(&refs, 4.0), None);
    }

    #[test]
    fn a_series_reads_its_ends_spread_and_tail_from_its_points() {
        let mut pts: Vec<Point> = [8.0, 12.0, 10.0, 6.0]
            .iter()
            .enumerate()
            .map(|(i, &b)| pt("node0+node1", &["node0", "node1"], i as u32, b))
            .collect();
        for (i, p) in pts.iter_mut().enumerate() {
            p.time.p50_us = [100.0, 100.0, 100.0, 300.0][i];
        }
        let refs: Vec<&Point> = pts.iter().collect();
        let x = series(&refs, Window::Passes(2), 0.9, Some(0.1));
        assert_eq!((x.first_gbps, x.last_gbps), (10.0, 8.0));
        assert!((x.drift - 0.8).abs() < 1e-12);
        assert!(x.drifted);
        // mean 9, population sd sqrt(5).
        assert!((x.pass_cv - 5f64.sqrt() / 9.0).abs() < 1e-12, "{x:?}");
        assert!(x.too_variable);
        // p99 / p50 of the pass times: 300 / 100.
        assert!((x.pass_time_p99_over_p50 - 3.0).abs() < 1e-12);
        assert_eq!(x.unix, vec![1000.0, 1010.0, 1020.0, 1030.0]);
        // 10 s a pass = 1/360 h: -0.8 GB/s a pass (least squares over 4 points).
        assert!(
            (x.slope_gbps_per_hour - (-0.8 * 360.0)).abs() < 1e-6,
            "{x:?}"
        );
        // The drift began where the points after the first window stay below 0.9 × 10.
        assert_eq!(x.began_unix, Some(1030.0));
        // Two points are enough to judge.
        let two = [&pts[0], &pts[3]];
        let x = series(&two, Window::Passes(1), 0.9, Some(0.1));
        assert!(x.drifted && x.too_variable, "{x:?}");
        // Drift exactly at the limit is not a drift.
        let x = series(&refs, Window::Passes(2), 0.8, None);
        assert!(!x.drifted && !x.too_variable);
        assert_eq!(x.began_unix, None);
        // Zero busbw at the start, zero pass times: neutral ratios, not NaN.
        for p in &mut pts {
            p.busbw_gbps = 0.0;
            p.time.p50_us = 0.0;
        }
        let refs: Vec<&Point> = pts.iter().collect();
        let x = series(&refs, Window::Passes(1), 0.9, Some(0.1));
        assert_eq!(
            (x.drift, x.pass_cv, x.pass_time_p99_over_p50),
            (1.0, 0.0, 1.0)
        );
        assert!(!x.drifted && !x.too_variable);
        // One pass is never judged: not even against limits the flags refuse (a
        // drift limit above 1, a negative cv), which would fail any series.
        pts[0].busbw_gbps = 3.0;
        let one = [&pts[0]];
        let x = series(&one, Window::Passes(1), 1.5, Some(-1.0));
        assert!(!x.drifted && !x.too_variable, "{x:?}");
    }

    #[test]
    fn only_the_largest_size_of_non_bisect_tiers_is_judged_and_hosts_are_by_node() {
        let mut pts = Vec::new();
        for pass in 0..4 {
            pts.push(pt("node0+node1", &["node0", "node1"], pass, 10.0));
            // A smaller size that collapses and a bisection point that does: neither
            // is a series.
            let mut small = pt(
                "node0+node1",
                &["node0", "node1"],
                pass,
                10.0 / f64::from(pass + 1),
            );
            small.bytes = 1 << 20;
            pts.push(small);
            let mut bis = soak_point(
                TierKind::Bisect,
                "half",
                &["node0", "node1"],
                pass,
                1.0,
                1000.0,
            );
            bis.busbw_gbps = 10.0 / f64::from(pass + 1);
            pts.push(bis);
        }
        let s = analyze(&pts, 40.0, 41.0, j(0.9, None), &hosts());
        assert_eq!(s.series.len(), 1, "{:?}", s.series);
        assert!(s.pass);
        assert_eq!((s.passes, s.window_passes), (4, 1));
        assert_eq!((s.duration_s, s.elapsed_s), (40.0, 41.0));
        assert!(render(&s, 1000.0).starts_with(
            "#\n# soak: 4 passes in 41 s (asked 40 s); drift = mean busbw of the last 1 pass(es) / the first 1\n"
        ));
        assert!(render(&s, 1000.0).ends_with("# soak: PASS\n"));
        // Two ranks a node: group ranks 2 and 3 are on the second host; past the end,
        // "?".
        let mut p = pt("a", &["node0", "node1"], 0, 1.0);
        p.members = vec![4, 5, 6, 7];
        assert_eq!(host_of(&p, 1), "node0");
        assert_eq!(host_of(&p, 2), "node1");
        assert_eq!(host_of(&p, 9), "?");
        p.hosts.clear();
        assert_eq!(host_of(&p, 0), "?");
        // Wrong elements: in time order, world ranks from the members, zero is none.
        let mut a = p.clone();
        a.hosts = vec!["node0".into(), "node1".into()];
        a.unix = 2000.0;
        a.wrong = Some(1);
        a.wrong_ranks = vec![(3, 5)];
        let mut b = a.clone();
        b.unix = 1500.0;
        b.wrong_ranks = vec![(0, 1)];
        let mut c = a.clone();
        c.wrong = Some(0);
        let w = wrong_seen(&[a, b, c]);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].unix, 1500.0);
        assert_eq!(w[0].ranks, vec![(4, "node0".to_string(), 1)]);
        assert_eq!(w[1].ranks, vec![(7, "node1".to_string(), 5)]);
    }

    #[test]
    fn drifting_groups_on_every_host_name_no_suspect() {
        let mut pts = Vec::new();
        for pass in 0..4 {
            let bw = if pass >= 2 { 2.0 } else { 10.0 };
            pts.push(pt("node0+node1", &["node0", "node1"], pass, bw));
        }
        let two: Vec<String> = vec!["node0".into(), "node1".into()];
        let s = analyze(&pts, 40.0, 40.0, j(0.9, None), &two);
        assert!(!s.pass);
        assert!(s.suspects.is_empty(), "both hosts are all hosts");
        let text = render(&s, 1000.0);
        assert!(
            text.contains("# soak: drift FAIL: 1 group(s) drifted\n"),
            "{text}"
        );
        assert!(
            text.contains("# soak: pairs node0+node1 all_reduce: busbw 10.000 -> 2.000 GB/s (0.20x, limit 0.9), pass cv 0.667, from "),
            "{text}"
        );
        assert!(text.contains(" (20 s into the soak)\n"), "{text}");
        assert!(text.ends_with("# soak: FAIL\n"), "{text}");
        // Among four hosts, both are suspects.
        let s = analyze(&pts, 40.0, 40.0, j(0.9, None), &hosts());
        assert_eq!(s.suspects, two);
        // No drift: nobody.
        assert!(suspects(&[], &hosts()).is_empty());
    }

    #[test]
    fn the_gpu_timeline_keeps_its_samples_and_reads_throttling() {
        let sample = |t_s: f64, temp: u32, mhz: u32, reasons: Option<u64>| Sample {
            t_s,
            temp_c: Some(temp),
            sm_mhz: Some(mhz),
            reasons,
            ..Default::default()
        };
        let samples = vec![
            sample(0.0, 40, 1980, Some(0)),
            // 0x1: GPU idle, not a throttle.
            sample(1.0, 55, 1980, Some(0x1)),
            sample(2.0, 70, 1500, Some(0x20)),
            sample(3.0, 65, 1700, None),
        ];
        let g = gpu_timeline((3, "node1", "0000:1b:00.0"), 100.0, &samples, vec![], None);
        assert_eq!(
            (g.rank, g.host.as_str(), g.pci_bus_id.as_str()),
            (3, "node1", "0000:1b:00.0")
        );
        assert_eq!(g.unix, vec![100.0, 101.0, 102.0, 103.0]);
        assert_eq!(g.temp_c_max, Some(70));
        assert_eq!(g.sm_mhz_min, Some(1500));
        assert_eq!(
            g.throttled,
            vec![Some(false), Some(false), Some(true), None]
        );
        // One of the three samples with a known mask.
        assert!((g.throttled_share - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(g.first_throttled_unix, Some(102.0));
        let none = gpu_timeline((0, "n", "b"), 0.0, &[sample(0.0, 1, 1, None)], vec![], None);
        assert_eq!(
            (none.throttled_share, none.first_throttled_unix),
            (0.0, None)
        );
        // Notes: MPI has no GPU; NCCL names the ranks whose NVML failed, else none.
        use crate::backend::BackendKind;
        assert_eq!(
            gpu_note(BackendKind::Mpi, &[]).as_deref(),
            Some("mpi backend: no GPU to sample")
        );
        assert_eq!(gpu_note(BackendKind::Nccl, std::slice::from_ref(&g)), None);
        let mut bad = g.clone();
        bad.error = Some("NVML: not found".into());
        let mut bad2 = bad.clone();
        bad2.rank = 5;
        assert_eq!(
            gpu_note(BackendKind::Nccl, &[g, bad, bad2]).as_deref(),
            Some("rank 3: NVML: not found; rank 5: NVML: not found")
        );
    }
}
