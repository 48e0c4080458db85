//! The report's replay section: a job's own collectives replayed here (replay.json),
//! the step's time against the source's, each call's bus bandwidth beside the sweep's
//! at its size and tier, and the step as a timeline, one lane per communicator.
use super::charts::{self, Span};
use super::data::RunData;
use super::text::human_bytes;
use super::Doc;
use crate::kinds::TierKind;
use crate::results::replay::{ReplayCall, ReplayReport};
use crate::results::sweep::Point;

/// The sweep tier a replayed communicator matches: its ranks inside one node
/// (intra), one rank on each of its nodes (inter), or every rank (world).
fn sweep_tier(c: &ReplayCall, world: usize) -> Option<TierKind> {
    let hosts: Option<usize> = c
        .tier
        .strip_prefix("inter-node (")
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    if c.ranks == world {
        Some(TierKind::World)
    } else if c.tier == "intra-node" {
        Some(TierKind::Intra)
    } else if hosts == Some(c.ranks) {
        Some(TierKind::Inter)
    } else {
        None
    }
}

/// The sweep's bus bandwidth for a replayed call: the same collective on the same tier
/// and group size, at the measured size nearest the call's (within a factor of 2),
/// the slowest group's. (bytes, GB/s, tier).
pub fn sweep_busbw(points: &[Point], c: &ReplayCall, world: usize) -> Option<(u64, f64, TierKind)> {
    let tier = sweep_tier(c, world)?;
    let dist = |b: u64| ((b.max(1) as f64).log2() - (c.bytes.max(1) as f64).log2()).abs();
    let same: Vec<&Point> = points
        .iter()
        .filter(|p| p.tier == tier && p.collective == c.collective && p.members.len() == c.ranks)
        .filter(|p| p.busbw_gbps.is_finite())
        .collect();
    let near = same
        .iter()
        .map(|p| p.bytes)
        .min_by(|a, b| dist(*a).total_cmp(&dist(*b)))
        .filter(|b| dist(*b) <= 1.0)?;
    let bw = same
        .iter()
        .filter(|p| p.bytes == near)
        .map(|p| p.busbw_gbps)
        .fold(f64::INFINITY, f64::min);
    Some((near, bw, tier))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

pub fn section(d: &mut Doc, data: &RunData, charts: bool) {
    let Some(r) = &data.replay else {
        d.p("No replay results: the phase did not run or wrote nothing.");
        return;
    };
    intro(d, r);
    let points: &[Point] = data
        .sweep
        .as_ref()
        .map(|s| s.points.as_slice())
        .unwrap_or(&[]);
    calls_table(d, r, points);
    if charts && !r.timeline.is_empty() {
        timeline(d, r);
    }
}

fn intro(d: &mut Doc, r: &ReplayReport) {
    let scaled = r
        .scaled_from
        .map(|n| format!(", scaled from its {n} ranks"))
        .unwrap_or_default();
    d.p(format!(
        "The job's own collectives ({} trace of {} file(s)) replayed on {} ranks{scaled}, {} communicator(s), backend {}: {} timed step(s) after {} warm-up, each started together by a barrier; calls in the trace's order. Communication only: the job's compute between calls is not replayed.",
        r.trace_format,
        r.trace_files.len(),
        r.ranks,
        r.comms.len(),
        r.backend,
        r.steps,
        r.warmup_steps
    ));
    let source = match (r.source_step_us, r.slowdown) {
        (Some(s), Some(x)) => format!(" The source's step: {s:.1} µs, so here / there = {x:.2}."),
        _ => " The trace has no source times (no here / there).".into(),
    };
    d.p(format!(
        "A step's communication time here: median {:.1} µs, p99 {:.1} µs; its calls end to end at their own cost (the last rank to arrive, which waits for nobody): {:.1} µs.{source} Checked step: {}. Verdict: {} — {}.",
        r.step.p50_us,
        r.step.p99_us,
        r.calls_sum_us,
        match r.wrong {
            Some(w) => format!("{w} wrong element(s)"),
            None => "not checked".into(),
        },
        if r.status.is_empty() {
            if r.pass { "PASS" } else { "FAIL" }
        } else {
            r.status.as_str()
        },
        r.verdict
    ));
    if !r.notes.is_empty() {
        d.list(r.notes.clone());
    }
}

/// Every distinct call, the largest share of the step first.
fn calls_table(d: &mut Doc, r: &ReplayReport, points: &[Point]) {
    let rows = r
        .calls
        .iter()
        .map(|c| {
            let sweep = sweep_busbw(points, c, r.ranks);
            vec![
                c.comm.clone(),
                c.ranks.to_string(),
                c.tier.clone(),
                c.label(),
                human_bytes(c.bytes),
                c.dtype.to_string(),
                c.per_step.to_string(),
                format!("{:.1}", c.time_us),
                format!("{:.1}", c.last_us),
                format!("{:.3}", c.busbw_gbps),
                match sweep {
                    Some((b, bw, t)) => format!("{bw:.3} ({} {})", t.name(), human_bytes(b)),
                    None => "-".into(),
                },
                format!("{:.1}%", c.share * 100.0),
                opt(c.source_us, 1),
                opt(c.slowdown, 2),
            ]
        })
        .collect();
    d.table(
        &[
            "comm",
            "ranks",
            "tier",
            "collective",
            "bytes",
            "type",
            "calls/step",
            "time (µs)",
            "own (µs)",
            "busbw (GB/s)",
            "sweep busbw (GB/s)",
            "share",
            "source (µs)",
            "here/there",
        ],
        rows,
    );
    d.p("time: the slowest rank's median; own: the fastest rank's (the call's cost without the ranks' skew); sweep busbw: the same collective and group size on the sweep's tier at the nearest measured size (the slowest group), where the run has a sweep; share: its calls' slowest-rank times over the step's (calls of communicators on different ranks run at the same time, so shares can add up past 100%); here/there: own / the baseline's own with a baseline, else time / the trace's time.");
}

/// The timeline rank's step, a lane per communicator.
fn timeline(d: &mut Doc, r: &ReplayReport) {
    let mut lanes: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    let spans: Vec<Span> = r
        .timeline
        .iter()
        .map(|s| {
            let lane = index(&mut lanes, &s.comm);
            let kind = index(&mut kinds, s.collective.name());
            Span {
                lane,
                start_us: s.start_us,
                time_us: s.time_us,
                kind,
                label: format!("{} {}", s.collective.name(), human_bytes(s.bytes)),
            }
        })
        .collect();
    let title = format!(
        "A replayed step on rank {} (its longest), call by call",
        r.timeline_rank
    );
    d.chart(
        &title,
        charts::step_timeline(&title, &lanes, &kinds, &spans),
    );
}

fn index(v: &mut Vec<String>, s: &str) -> usize {
    match v.iter().position(|x| x == s) {
        Some(i) => i,
        None => {
            v.push(s.to_string());
            v.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{CollKind, Dtype};

    fn call(ranks: usize, tier: &str, bytes: u64) -> ReplayCall {
        ReplayCall {
            comm: "c".into(),
            ranks,
            tier: tier.into(),
            collective: CollKind::AllReduce,
            dtype: Dtype::F32,
            op: None,
            bytes,
            per_step: 1,
            time_us: 1.0,
            last_us: 1.0,
            busbw_gbps: 1.0,
            share: 1.0,
            source_us: None,
            source_last_us: None,
            slowdown: None,
            group_of: 0,
        }
    }

    fn point(tier: TierKind, members: usize, bytes: u64, bw: f64) -> Point {
        crate::sweep::analysis::judged_point(
            tier,
            0,
            "g".into(),
            (0..members).collect(),
            vec![],
            bytes,
            bw,
        )
    }

    #[test]
    fn a_call_meets_the_sweep_on_its_tier_and_group_size_at_the_nearest_size() {
        let pts = vec![
            point(TierKind::Intra, 2, 1 << 20, 9.0),
            point(TierKind::Intra, 2, 4 << 20, 12.0),
            point(TierKind::Inter, 2, 1 << 20, 3.0),
            point(TierKind::Inter, 2, 1 << 20, 2.5),
            point(TierKind::World, 4, 1 << 20, 1.5),
        ];
        let got = |c: &ReplayCall| sweep_busbw(&pts, c, 4);
        assert_eq!(
            got(&call(2, "intra-node", 1_500_000)),
            Some((1 << 20, 9.0, TierKind::Intra))
        );
        assert_eq!(
            got(&call(2, "intra-node", 3 << 20)),
            Some((4 << 20, 12.0, TierKind::Intra))
        );
        // The slowest of the tier's groups at that size.
        assert_eq!(
            got(&call(2, "inter-node (2 hosts)", 1 << 20)),
            Some((1 << 20, 2.5, TierKind::Inter))
        );
        assert_eq!(
            got(&call(4, "inter-node (2 hosts)", 1 << 20)),
            Some((1 << 20, 1.5, TierKind::World))
        );
        // Too far from any measured size, a group of another size, no such tier.
        assert_eq!(got(&call(2, "intra-node", 64 << 10)), None);
        assert_eq!(got(&call(3, "inter-node (3 hosts)", 1 << 20)), None);
        assert_eq!(got(&call(2, "inter-node (1 hosts)", 1 << 20)), None);
    }
}
