//! `burnin replay`'s record (replay.json) and its analysis from every rank's timings:
//! pure, unit-tested.
//!
//! A step's communication time is, per replayed step, the slowest rank's time from the
//! step's start (all ranks leave a barrier together) to its last call's end. Each
//! distinct call (communicator, collective, size, type) gets the median over steps of
//! its slowest rank's time, its bus bandwidth (nccl-tests' factors), its share of the
//! step, and where the trace has times (Flight Recorder), the source cluster's median
//! and the ratio here / there.
use crate::kinds::{CollKind, Dtype, RedOp};
use crate::stats::{self, TimeStats};
use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One distinct call of the step (on one communicator), over all its ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayCall {
    /// The trace's communicator id and its global ranks.
    pub comm: String,
    /// Ranks of the communicator.
    pub ranks: usize,
    /// Where its ranks are: "intra-node" (one host) or "inter-node (N hosts)".
    #[serde(default)]
    pub tier: String,
    /// The collective.
    pub collective: CollKind,
    /// The trace's element type (the replay may have used another of its size: notes).
    pub dtype: Dtype,
    /// The reduction, for the collectives that reduce.
    pub op: Option<RedOp>,
    /// Message bytes (nccl-tests' convention).
    pub bytes: u64,
    /// How often a step makes it.
    pub per_step: usize,
    /// Median over steps and calls of the slowest rank's time, µs.
    pub time_us: f64,
    /// Median over steps and calls of the fastest rank's time, µs: the last rank to
    /// arrive waits for nobody, so this is the call's own cost without the ranks' skew.
    #[serde(default)]
    pub last_us: f64,
    /// Bus bandwidth at that time, GB/s (nccl-tests' factors).
    pub busbw_gbps: f64,
    /// Its calls' share of the step's communication time (sum of its times / step).
    pub share: f64,
    /// The source's median time for it (Flight Recorder durations, or `--baseline`'s
    /// replay), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_us: Option<f64>,
    /// The `--baseline` replay's `last_us` for it, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_last_us: Option<f64>,
    /// last_us / source_last_us with a `--baseline`, else time_us / source_us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
    /// Collectives NCCL launched as one group (one opCount in its log, one coalesced
    /// Flight Recorder entry), replayed as one group and timed together: how many (0:
    /// a call alone). `collective`, `dtype` and `op` are its first call's, `bytes` the
    /// group's sum, and `busbw_gbps` reads the sum as one `collective`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub group_of: usize,
}

impl ReplayCall {
    /// Its collective, or its group ("all_reduce group of 3": its first call's).
    pub fn label(&self) -> String {
        match self.group_of {
            0 => self.collective.name().to_string(),
            n => format!("{} group of {n}", self.collective.name()),
        }
    }
}

/// One call of the timeline's step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaySpan {
    /// The communicator's id.
    pub comm: String,
    /// The collective.
    pub collective: CollKind,
    /// Message bytes.
    pub bytes: u64,
    /// Its start in the step: the median times of the calls before it, µs.
    pub start_us: f64,
    /// Its median time over the steps on this rank, µs.
    pub time_us: f64,
}

/// replay.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplayReport {
    /// Version of this record's layout.
    pub schema_version: u32,
    /// "nccl-coll", "flight-recorder" or "profiler".
    pub trace_format: String,
    /// The files read, as given.
    pub trace_files: Vec<String>,
    /// Ranks of this replay (the traced job's, unless it was scaled).
    pub ranks: usize,
    /// The traced job's ranks when `--grow` scaled the trace to this job's (notes say
    /// how each communicator scaled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaled_from: Option<usize>,
    /// Communicators replayed: id and global ranks.
    pub comms: Vec<(String, Vec<usize>)>,
    /// Steps run before timing.
    pub warmup_steps: u32,
    /// Steps timed.
    pub steps: u32,
    /// Calls of one step, per rank (replayed ones).
    pub calls_per_step: Vec<usize>,
    /// What the replay left out, changed or assumed, said once each ("bf16 sum as u8
    /// on this backend (the same bytes)", how a scaled trace's groups grew).
    pub notes: Vec<String>,
    /// The backend and why it was chosen.
    pub backend: String,
    /// Per step, the slowest rank's communication time.
    pub step: TimeStats,
    /// The step's calls end to end, each at its own cost (`last_us`: the median time of
    /// the last rank to arrive, which waits for nobody), µs: the prediction without the
    /// ranks' skew, which back-to-back calls pile up and a job's compute between calls
    /// absorbs.
    #[serde(default)]
    pub calls_sum_us: f64,
    /// The source's step: the sum of its calls' median times (one rank, the slowest),
    /// or `--baseline`'s step median, µs; None without times.
    pub source_step_us: Option<f64>,
    /// step median / source_step_us.
    pub slowdown: Option<f64>,
    /// Each distinct call of the step, the largest share first.
    pub calls: Vec<ReplayCall>,
    /// The rank whose step is the longest (median over steps): the timeline's.
    #[serde(default)]
    pub timeline_rank: usize,
    /// That rank's step, call by call in order, at each call's median time.
    #[serde(default)]
    pub timeline: Vec<ReplaySpan>,
    /// Wrong elements in the checked step (None: not checked).
    pub wrong: Option<u64>,
    /// The calls that had wrong elements (rank, call, communicator), the first 20.
    pub wrong_calls: Vec<String>,
    /// `--max-slowdown` (the card's `replay.max_slowdown`).
    pub max_slowdown: Option<f64>,
    /// What `--allow-partial` left out of a trace that was not the whole job (ranks
    /// missing, ranks that disagree): NOT COMPARABLE.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_comparable: Vec<String>,
    /// Nothing failed: no wrong element and, when judged, the slowdown within the
    /// bound (the exit code).
    pub pass: bool,
    /// PASS, FAIL, NOT RUN (`max_slowdown` asked without source times) or NOT
    /// COMPARABLE (a part of the trace left out): only a whole trace, every asked
    /// criterion judged, is a PASS.
    #[serde(default)]
    pub status: String,
    /// Why it failed, or what was not judged.
    pub verdict: String,
}

/// One rank's timings: per step its time (s), and per replayed call of its step (in
/// step order) the time of each step (s).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankTimes {
    pub step_s: Vec<f64>,
    /// (key into the calls' description list, per-step times).
    pub calls: Vec<(usize, Vec<f64>)>,
}

/// A replayed call's description, the same on every rank that makes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallKey {
    pub comm: String,
    pub ranks: usize,
    pub tier: String,
    pub collective: CollKind,
    pub dtype: Dtype,
    pub op: Option<RedOp>,
    pub bytes: u64,
    pub source_us: Option<f64>,
    pub source_last_us: Option<f64>,
    /// Collectives of one NCCL group timed together (0: a call alone).
    #[serde(default)]
    pub group_of: usize,
}

/// The step's time summary and the per-call table from every rank's times.
pub fn analyze(keys: &[CallKey], ranks: &[RankTimes]) -> (TimeStats, Vec<ReplayCall>) {
    let steps = ranks.iter().map(|r| r.step_s.len()).max().unwrap_or(0);
    let step_s: Vec<f64> = (0..steps)
        .map(|s| {
            ranks
                .iter()
                .filter_map(|r| r.step_s.get(s))
                .fold(0.0, |a: f64, b| a.max(*b))
        })
        .collect();
    let step = stats::summarize(&step_s);
    let step_total: f64 = step_s.iter().sum();
    let mut out = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        // Per rank, this key's calls in step order; the i-th call of a step on every
        // rank is the same collective, so the slowest rank's time is its time.
        let per_rank: Vec<Vec<&Vec<f64>>> = ranks
            .iter()
            .map(|r| r.calls.iter().filter(|c| c.0 == k).map(|c| &c.1).collect())
            .collect();
        let per_step = per_rank.iter().map(Vec::len).max().unwrap_or(0);
        if per_step == 0 {
            continue;
        }
        let (mut slowest, mut last) = (Vec::new(), Vec::new());
        for i in 0..per_step {
            for s in 0..steps {
                let t: Vec<f64> = per_rank
                    .iter()
                    .filter_map(|calls| calls.get(i).and_then(|v| v.get(s)).copied())
                    .collect();
                slowest.push(t.iter().copied().fold(0.0, f64::max));
                last.push(t.iter().copied().fold(f64::INFINITY, f64::min));
            }
        }
        let time = stats::median(&slowest);
        let own = stats::median(&last);
        let (_, busbw) = crate::collective::bandwidths(key.collective, key.bytes, time, key.ranks);
        let share = if step_total > 0.0 {
            slowest.iter().sum::<f64>() / step_total
        } else {
            0.0
        };
        out.push(ReplayCall {
            comm: key.comm.clone(),
            ranks: key.ranks,
            tier: key.tier.clone(),
            collective: key.collective,
            dtype: key.dtype,
            op: key.op,
            bytes: key.bytes,
            per_step,
            time_us: time * 1e6,
            last_us: own * 1e6,
            busbw_gbps: busbw,
            share,
            source_us: key.source_us,
            source_last_us: key.source_last_us,
            group_of: key.group_of,
            // The call's own cost against the source's, when both are known; else
            // the slowest rank's times.
            slowdown: match key.source_last_us.filter(|s| *s > 0.0) {
                Some(s) => Some(own * 1e6 / s),
                None => key.source_us.filter(|s| *s > 0.0).map(|s| time * 1e6 / s),
            },
        });
    }
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    (step, out)
}

/// The step of the rank whose median step is the longest, call by call at each
/// call's median time (the chart of the report): (rank, spans).
pub fn timeline(keys: &[CallKey], ranks: &[RankTimes]) -> (usize, Vec<ReplaySpan>) {
    let Some(r) = (0..ranks.len()).max_by(|a, b| {
        stats::median(&ranks[*a].step_s).total_cmp(&stats::median(&ranks[*b].step_s))
    }) else {
        return (0, Vec::new());
    };
    let mut at = 0.0;
    let spans = ranks[r]
        .calls
        .iter()
        .filter_map(|(k, times)| {
            let key = keys.get(*k)?;
            let t = stats::median(times) * 1e6;
            let s = ReplaySpan {
                comm: key.comm.clone(),
                collective: key.collective,
                bytes: key.bytes,
                start_us: at,
                time_us: t,
            };
            at += t;
            Some(s)
        })
        .collect();
    (r, spans)
}

/// The time a call adds to a step against the source (us): its own cost now less
/// the source's, times its calls per step; the slowest rank's times where the source
/// has no own cost. None without source times.
pub fn added_us(c: &ReplayCall) -> Option<f64> {
    let (now, source) = match c.source_last_us.filter(|s| *s > 0.0) {
        Some(s) => (c.last_us, s),
        None => (c.time_us, c.source_us.filter(|s| *s > 0.0)?),
    };
    Some((now - source) * c.per_step as f64)
}

/// The call that adds most time to a step (not the largest ratio: a 50 us call that
/// a busy CPU stretches 40 times adds less than a link-bound call twice as slow),
/// named with its communicator, ranks, tier, slowdown and the time it adds.
pub fn worst_call(r: &ReplayReport) -> Option<String> {
    r.calls
        .iter()
        .filter_map(|c| Some((c, added_us(c)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, added)| {
            format!(
                "{} {} on {} ({} ranks, {}), {:.2}x, +{:.0} us a step",
                c.label(),
                crate::units::Bytes(c.bytes),
                c.comm,
                c.ranks,
                c.tier,
                c.slowdown.unwrap_or(0.0),
                added
            )
        })
}

/// The verdict: wrong values fail; with `max_slowdown` and source times, a step
/// slower than that many times the source's fails; a part left out is NOT
/// COMPARABLE and `max_slowdown` without source times NOT RUN, neither a PASS.
/// (nothing failed, status, why).
pub fn judge(r: &ReplayReport) -> (bool, String, String) {
    if let Some(w) = r.wrong.filter(|w| *w > 0) {
        return (
            false,
            "FAIL".into(),
            format!("{w} wrong element(s): {}", r.wrong_calls.join("; ")),
        );
    }
    let partial = (!r.not_comparable.is_empty()).then(|| {
        format!(
            "the trace is not the whole job; NOT COMPARABLE: {}",
            r.not_comparable.join("; ")
        )
    });
    let with_partial = |status: &str, why: String| -> (bool, String, String) {
        match &partial {
            Some(p) if status == "PASS" => (true, "NOT COMPARABLE".into(), format!("{why}; {p}")),
            Some(p) => (status != "FAIL", status.into(), format!("{why}; {p}")),
            None => (status != "FAIL", status.into(), why),
        }
    };
    match (r.max_slowdown, r.slowdown) {
        (Some(max), Some(s)) if s > max => {
            let worst = worst_call(r)
                .map(|w| format!("; most of it: {w}"))
                .unwrap_or_default();
            with_partial(
                "FAIL",
                format!("a step takes {s:.2}x the source's communication time (max {max}){worst}"),
            )
        }
        (Some(max), Some(s)) => with_partial("PASS", format!("a step takes {s:.2}x the source's (max {max})")),
        (Some(_), None) => with_partial(
            "NOT RUN",
            "max_slowdown NOT RUN: no source times (NCCL COLL logs have none: give --baseline, a replay.json of the same trace on the source cluster, or a Flight Recorder dump with TORCH_NCCL_ENABLE_TIMING=1)".into(),
        ),
        (None, _) => with_partial("PASS", "no max_slowdown asked".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(comm: &str, ranks: usize, bytes: u64, source: Option<f64>) -> CallKey {
        CallKey {
            comm: comm.into(),
            ranks,
            tier: "inter-node (2 hosts)".into(),
            collective: CollKind::AllReduce,
            dtype: Dtype::F32,
            op: Some(RedOp::Sum),
            bytes,
            source_us: source,
            source_last_us: None,
            group_of: 0,
        }
    }

    #[test]
    fn the_slowest_rank_times_each_call_and_the_step() {
        let keys = vec![key("dp", 2, 1 << 20, Some(100.0)), key("tp", 2, 4096, None)];
        let ranks = vec![
            RankTimes {
                step_s: vec![300e-6, 310e-6, 290e-6],
                calls: vec![
                    (0, vec![200e-6, 210e-6, 190e-6]),
                    (1, vec![10e-6, 10e-6, 10e-6]),
                ],
            },
            RankTimes {
                step_s: vec![320e-6, 300e-6, 300e-6],
                calls: vec![
                    (0, vec![220e-6, 200e-6, 200e-6]),
                    (1, vec![20e-6, 20e-6, 20e-6]),
                ],
            },
        ];
        let (step, calls) = analyze(&keys, &ranks);
        assert!((step.mean_us - (320.0 + 310.0 + 300.0) / 3.0).abs() < 1e-6);
        assert_eq!(calls[0].comm, "dp");
        assert!((calls[0].time_us - 210.0).abs() < 1e-6, "{calls:?}");
        assert!((calls[0].slowdown.unwrap() - 2.1).abs() < 1e-9);
        // all_reduce busbw: 2(n-1)/n × bytes / time
        assert!((calls[0].busbw_gbps - (1u64 << 20) as f64 / 210e-6 / 1e9).abs() < 1e-6);
        assert!((calls[1].time_us - 20.0).abs() < 1e-6);
        assert!((calls[0].share - 630.0 / 930.0).abs() < 1e-9);
        assert_eq!(calls[1].slowdown, None);
    }

    #[test]
    fn the_worst_call_is_the_one_that_adds_most_time_not_the_largest_ratio() {
        // Seen under two busy loops: a 60 us intra-node all_gather stretched 47x by the
        // CPU, and the link-bound all_reduce 3.5x on a link at a quarter of its rate.
        let with_own = |comm: &str, bytes: u64, own_us: f64| CallKey {
            source_last_us: Some(own_us),
            ..key(comm, 2, bytes, Some(own_us))
        };
        let mut ag = with_own("tp", 256 << 10, 60.0);
        ag.collective = CollKind::AllGather;
        ag.tier = "intra-node".into();
        let keys = vec![ag, with_own("dp", 1 << 20, 10_000.0)];
        let rank = |ag_s: f64, ar_s: f64| RankTimes {
            step_s: vec![ag_s + ar_s; 3],
            calls: vec![(0, vec![ag_s; 3]), (1, vec![ar_s; 3])],
        };
        let ranks = vec![rank(2.82e-3, 35e-3), rank(2.9e-3, 36e-3)];
        let (_, calls) = analyze(&keys, &ranks);
        let ratio = |c: &str| {
            calls
                .iter()
                .find(|x| x.comm == c)
                .unwrap()
                .slowdown
                .unwrap()
        };
        assert!(ratio("tp") > 40.0 && ratio("dp") < 4.0, "{calls:?}");
        let added = |c: &str| added_us(calls.iter().find(|x| x.comm == c).unwrap()).unwrap();
        assert!((added("dp") - 25_000.0).abs() < 1e-6, "{calls:?}");
        assert!((added("tp") - 2_760.0).abs() < 1e-6, "{calls:?}");
        let r = ReplayReport {
            calls,
            ..report_with(Some(2.0), Some(1.5))
        };
        let w = worst_call(&r).unwrap();
        assert!(
            w.starts_with("all_reduce 1MiB on dp") && w.contains("+25000 us"),
            "{w}"
        );
        assert!(judge(&r).2.contains("most of it: all_reduce 1MiB on dp"));
    }

    #[test]
    fn the_timeline_is_the_longest_ranks_step_call_after_call() {
        let keys = vec![key("dp", 2, 1 << 20, None), key("tp", 2, 4096, None)];
        let ranks = vec![
            RankTimes {
                step_s: vec![100e-6, 100e-6, 100e-6],
                calls: vec![(1, vec![1e-6; 3]), (0, vec![90e-6; 3])],
            },
            RankTimes {
                step_s: vec![300e-6, 290e-6, 310e-6],
                calls: vec![
                    (1, vec![10e-6, 30e-6, 20e-6]),
                    (0, vec![250e-6, 260e-6, 270e-6]),
                    (1, vec![5e-6, 5e-6, 5e-6]),
                ],
            },
        ];
        let (r, spans) = timeline(&keys, &ranks);
        assert_eq!(r, 1);
        let got: Vec<(&str, f64, f64)> = spans
            .iter()
            .map(|s| (s.comm.as_str(), s.start_us, s.time_us))
            .collect();
        let want = [("tp", 0.0, 20.0), ("dp", 20.0, 260.0), ("tp", 280.0, 5.0)];
        assert_eq!(got.len(), 3);
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0);
            assert!(
                (g.1 - w.1).abs() < 1e-6 && (g.2 - w.2).abs() < 1e-6,
                "{got:?}"
            );
        }
        assert_eq!(timeline(&keys, &[]), (0, Vec::new()));
    }

    fn report_with(slowdown: Option<f64>, max_slowdown: Option<f64>) -> ReplayReport {
        ReplayReport {
            schema_version: SCHEMA_VERSION,
            trace_format: "flight-recorder".into(),
            trace_files: vec![],
            ranks: 2,
            scaled_from: None,
            comms: vec![],
            warmup_steps: 1,
            steps: 3,
            calls_per_step: vec![1, 1],
            notes: vec![],
            backend: "mpi".into(),
            step: TimeStats::default(),
            calls_sum_us: 0.0,
            source_step_us: Some(100.0),
            slowdown,
            calls: vec![],
            timeline_rank: 0,
            timeline: vec![],
            wrong: Some(0),
            wrong_calls: vec![],
            max_slowdown,
            not_comparable: vec![],
            pass: true,
            status: String::new(),
            verdict: String::new(),
        }
    }

    #[test]
    fn the_verdict_names_wrong_values_and_the_slowdown() {
        let mut r = report_with(Some(2.5), Some(2.0));
        let (pass, status, why) = judge(&r);
        assert!(
            !pass && status == "FAIL" && why.contains("2.50x") && why.contains("max 2"),
            "{why}"
        );
        r.max_slowdown = Some(3.0);
        assert_eq!(judge(&r).1, "PASS");
        // Part of the trace left out: never a PASS.
        r.not_comparable = vec!["communicator 0xa of 4 rank(s): the trace holds 2 of them".into()];
        let (pass, status, why) = judge(&r);
        assert!(
            pass && status == "NOT COMPARABLE" && why.contains("2 of them"),
            "{why}"
        );
        r.not_comparable.clear();
        // max_slowdown asked, no source times: NOT RUN with the reason.
        r.slowdown = None;
        let (pass, status, why) = judge(&r);
        assert!(
            pass && status == "NOT RUN" && why.contains("no source times"),
            "{why}"
        );
        r.wrong = Some(3);
        r.wrong_calls = vec!["all_reduce 1MiB on dp".into()];
        let (pass, status, why) = judge(&r);
        assert!(
            !pass
                && status == "FAIL"
                && why.starts_with("3 wrong element(s): all_reduce 1MiB on dp"),
            "{why}"
        );
    }
}
