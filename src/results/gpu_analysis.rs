//! The GPU phase judged: every criterion of a card's `[gpu.criteria]` over `gpu.json`
//! (and the counters read again at the end of the acceptance), each failure naming
//! the GPU or pair and its host. Pure: `burnin gpu` prints it with the default
//! criteria, the report's verdict uses the card's.
use super::acceptance::{Criterion, Status};
use super::gpu::{GpuHealth, GpuReport, NodeMatrix};
use crate::card::GpuCriteria;
use crate::topology::file::GpuSpec;

/// A pair below this fraction of its node's median pair is an outlier, by default.
pub const PAIR_OUTLIER_FRACTION: f64 = 0.8;
/// Failures named in one criterion's detail, at most (the rest are counted).
const NAMED: usize = 8;

/// "node1 GPU 3".
pub fn gpu_name(g: &GpuHealth) -> String {
    format!("{} GPU {}", g.host, g.gpu)
}

fn crit(id: &str, what: &str, threshold: String) -> Criterion {
    Criterion {
        id: format!("gpu.{id}"),
        phase: "gpu".into(),
        what: what.into(),
        measured: "no data".into(),
        threshold,
        status: Status::NotRun,
        detail: String::new(),
    }
}

/// Set the verdict from the failures found: PASS when none, else FAIL naming them.
fn settle(mut c: Criterion, measured: String, fails: Vec<String>) -> Criterion {
    c.measured = measured;
    if fails.is_empty() {
        c.status = Status::Pass;
    } else {
        c.status = Status::Fail;
        let more = fails.len().saturating_sub(NAMED);
        let mut d = fails.into_iter().take(NAMED).collect::<Vec<_>>().join("; ");
        if more > 0 {
            d.push_str(&format!("; and {more} more"));
        }
        c.detail = d;
    }
    c
}

fn not_run(mut c: Criterion, why: &str) -> Criterion {
    c.status = Status::NotRun;
    c.detail = why.into();
    c
}

/// A floor and its text, or why it cannot be set; None: no such criterion.
type Floor = Option<Result<(f64, String), String>>;

/// A floor from an absolute value and a fraction of an expected one (the higher of
/// the two), with its text; Err: the fraction needs a number the topology lacks.
fn floor(
    abs: Option<f64>,
    frac: Option<f64>,
    expected: Option<f64>,
    field: &str,
    unit: &str,
) -> Floor {
    let from_frac = match (frac, expected) {
        (Some(f), Some(e)) => Some((f * e, format!("{f} × {e} {unit} (topology gpu.{field})"))),
        (Some(_), None) if abs.is_none() => {
            return Some(Err(format!("the topology has no gpu.{field}")));
        }
        _ => None,
    };
    let from_abs = abs.map(|a| (a, format!("{a} {unit}")));
    match (from_abs, from_frac) {
        (Some(a), Some(f)) => Some(Ok(if a.0 >= f.0 { a } else { f })),
        (Some(a), None) => Some(Ok(a)),
        (None, Some(f)) => Some(Ok(f)),
        (None, None) => None,
    }
}

/// What a criterion is judged on: the report, or why there is none (then every
/// criterion is NOT RUN with that reason).
struct On<'a> {
    report: Result<&'a GpuReport, String>,
    after: Option<&'a GpuReport>,
}

impl On<'_> {
    /// `c` judged by `f`, or NOT RUN when there is nothing to judge.
    fn judge(&self, c: Criterion, f: impl FnOnce(Criterion, &GpuReport) -> Criterion) -> Criterion {
        match &self.report {
            Ok(r) => f(c, r),
            Err(why) => not_run(c, why),
        }
    }

    /// A floor criterion: NOT RUN when the floor needs a number the topology lacks.
    fn floor(
        &self,
        id: &str,
        what: &str,
        floor: Floor,
        f: impl FnOnce(Criterion, &GpuReport, f64) -> Criterion,
    ) -> Option<Criterion> {
        Some(match floor? {
            Err(why) => not_run(crit(id, what, "-".into()), &why),
            Ok((min, text)) => {
                self.judge(crit(id, what, format!("≥ {text}")), |c, r| f(c, r, min))
            }
        })
    }
}

/// Every criterion of `c` over `report` (`Err` with the reason: the phase did not
/// run; a report with `error` set measured nothing — every criterion NOT RUN).
/// `after`: the counters read at the end of the acceptance, when it re-read them.
pub fn judge(
    report: Result<&GpuReport, String>,
    after: Option<&GpuReport>,
    c: &GpuCriteria,
    expect: Option<&GpuSpec>,
) -> Vec<Criterion> {
    let e = expect.cloned().unwrap_or_default();
    let sdc_ran = report.as_ref().ok().and_then(|r| r.sdc.as_ref());
    let sdc_crit = (sdc_ran.is_some() || c.max_sdc_disagreements.is_some()).then(|| {
        let max = c.max_sdc_disagreements.unwrap_or(0);
        let k = crit(
            "sdc",
            "no rank's output disagrees with its model's majority (silent data corruption vote)",
            format!("≤ {max} disagreement(s)"),
        );
        match sdc_ran {
            Some(s) => sdc(k, s, max),
            None => not_run(k, "no SDC rounds ran (burnin gpu --sdc; card [gpu] sdc_s)"),
        }
    });
    let report = report.and_then(|r| match &r.error {
        None if !r.gpus.is_empty() => Ok(r),
        err => Err(err.clone().unwrap_or_else(|| "no GPU measured".into())),
    });
    let on = On { report, after };
    let mut out = vec![on.judge(
        crit(
            "measured",
            "every rank's GPU measured (context, copies, burn)",
            "no GPU failed".into(),
        ),
        measured,
    )];
    if c.zero_wrong {
        let what = "every copy verified and every burn result right";
        out.push(on.judge(crit("wrong", what, "0 wrong".into()), wrong));
    }
    out.extend(floors(&on, c, &e));
    let outlier = c.pair_outlier_fraction.unwrap_or(PAIR_OUTLIER_FRACTION);
    if c.no_pair_outlier {
        let what = "no GPU pair's peer copy far below its node's median pair";
        let k = crit(
            "pair_outlier",
            what,
            format!("≥ {outlier} × the node's median pair"),
        );
        out.push(on.judge(k, |k, r| pair_outliers(k, r, outlier)));
    }
    if let Some(s) = c.max_tflops_spread {
        let what = "burn TFLOP/s spread across GPUs, (fastest − slowest) / fastest";
        out.push(
            on.judge(crit("tflops_spread", what, format!("≤ {s}")), |k, r| {
                spread(k, r, s)
            }),
        );
    }
    if let Some(s) = c.max_throttled_share {
        let what = "share of the burn a GPU spent throttled (thermal, HW slowdown, power brake, sync boost)";
        out.push(on.judge(crit("throttle", what, format!("≤ {s}")), |k, r| {
            throttle(k, r, s)
        }));
    }
    if c.pcie_at_max {
        let want = match (e.pcie_gen, e.pcie_width) {
            (Some(g), Some(w)) => format!("at the GPU's max gen and width, and ≥ Gen{g} x{w}"),
            _ => "at the GPU's max gen and width".into(),
        };
        let k = crit("pcie", "every GPU's PCIe link under load", want);
        out.push(on.judge(k, |k, r| pcie(k, r, &e)));
    }
    if c.zero_new_errors {
        let what = "no new uncorrected ECC error, row-remap failure, pending retirement or XID";
        out.push(on.judge(crit("errors", what, "0 new".into()), |k, r| {
            errors(k, r, on.after)
        }));
    }
    let memtest_ran = on
        .report
        .as_ref()
        .is_ok_and(|r| r.gpus.iter().any(|g| g.memtest.is_some()));
    if memtest_ran || c.min_memtest_share.is_some() {
        let min = c.min_memtest_share.unwrap_or(MEMTEST_SHARE);
        let what = "device memory test (address, walking ones and zeros, random; each inverted) on every GPU";
        let k = crit(
            "memtest",
            what,
            format!("0 failing words over ≥ {:.0}% of free memory", min * 100.0),
        );
        out.push(if memtest_ran {
            on.judge(k, |k, r| memtest(k, r, min))
        } else {
            not_run(
                k,
                "no memory test ran (burnin gpu --memtest; card [gpu] memtest_s)",
            )
        });
    }
    if c.model_floors {
        let what = "every GPU of a known model at its floors (cards/floors/gpu-floors.toml): device memory, FP32 burn, host copies";
        let k = crit("model_floors", what, "≥ the model's floors".into());
        out.push(on.judge(k, model_floors));
    }
    if c.dcgm_diag {
        let what = "DCGM diagnostic (dcgmi diag -r 1) on every node";
        out.push(on.judge(crit("dcgm", what, "every test passed".into()), dcgm));
    }
    out.extend(sdc_crit);
    out
}

/// The SDC vote: FAIL past `max` disagreements, naming each; NOT RUN when no round ran
/// or no model had two ranks to vote.
fn sdc(c: Criterion, s: &super::sdc::SdcReport, max: u64) -> Criterion {
    if s.rounds == 0 {
        return not_run(c, s.error.as_deref().unwrap_or("no SDC round ran"));
    }
    let mut models: Vec<&str> = s.ranks.iter().map(|r| r.model.as_str()).collect();
    models.sort_unstable();
    let voting = models
        .iter()
        .filter(|m| models.iter().filter(|x| x == m).count() >= 2)
        .count();
    if voting == 0 && s.ranks.iter().all(|r| r.host_check.is_none()) {
        return not_run(
            c,
            "no GPU (or CPU) model has two ranks: there is nothing to vote against",
        );
    }
    let checked: Vec<bool> = s.ranks.iter().filter_map(|r| r.host_check).collect();
    let mut measured = format!(
        "{} disagreement(s) in {} round(s) of {} voting rank(s)",
        s.findings_total, s.rounds, voting
    );
    if s.ranks.iter().all(|r| r.gpu.is_none()) {
        measured.push_str("; CPU ranks only (no GPU: the GPU kernels did not run)");
    }
    if !checked.is_empty() {
        measured.push_str(&format!(
            "; {} of {} GPU(s) agree with the host",
            checked.iter().filter(|x| **x).count(),
            checked.len()
        ));
    }
    // Per rank: how often it was named, and the first finding that named it.
    let mut fails: Vec<String> = s
        .ranks
        .iter()
        .filter(|r| r.host_check == Some(false))
        .map(|r| {
            let what: Vec<&str> = r
                .host_checks
                .iter()
                .filter(|n| !n.contains(": equal") && !n.contains(": within"))
                .filter(|n| !n.contains(": not run"))
                .map(String::as_str)
                .collect();
            if what.is_empty() {
                format!(
                    "{}: the first round's fma output differs from the host's chains",
                    super::sdc::name(r)
                )
            } else {
                format!(
                    "{}: the first round differs from the host ({})",
                    super::sdc::name(r),
                    what.join("; ")
                )
            }
        })
        .collect();
    if s.findings_total > max {
        for r in s.ranks.iter().filter(|r| r.disagreements > 0) {
            let first = s.findings.iter().find(|f| f.ranks.contains(&r.rank));
            fails.push(format!(
                "{} named in {} round(s){}",
                super::sdc::name(r),
                r.disagreements,
                first
                    .map(|f| format!(", first: {}", super::sdc::describe(f, &s.ranks)))
                    .unwrap_or_default()
            ));
        }
    }
    // A GPU that failed during the vote: its later rounds did not vote, which is no
    // pass (and no SDC either).
    for r in s.ranks.iter().filter(|r| r.gpu_lost.is_some()) {
        fails.push(format!(
            "{}: its GPU failed ({}); it did not vote in {} round(s) after that",
            super::sdc::name(r),
            r.gpu_lost.as_deref().unwrap_or_default(),
            r.rounds_lost
        ));
    }
    if let Some(e) = &s.error {
        if !fails.iter().any(|f| f.contains(e.as_str())) {
            fails.push(e.clone());
        }
    }
    settle(c, measured, fails)
}

/// The four floor criteria the card asks for: host copies, memory, peer, burn.
fn floors(on: &On, c: &GpuCriteria, e: &GpuSpec) -> Vec<Criterion> {
    [
        on.floor(
            "host_copy",
            "host↔device copy (pinned), every GPU, both directions",
            floor(
                c.min_host_copy_gbps,
                c.min_host_copy_fraction,
                e.host_copy_gbps,
                "host_copy_gbps",
                "GB/s",
            ),
            host_copy,
        ),
        on.floor(
            "memory",
            "device memory bandwidth (device-local copy, read + write), every GPU",
            floor(
                None,
                c.min_memory_fraction,
                e.memory_gbps,
                "memory_gbps",
                "GB/s",
            ),
            memory,
        ),
        on.floor(
            "peer",
            "peer copy of every GPU pair with peer access, each direction",
            floor(None, c.min_peer_fraction, e.peer_gbps, "peer_gbps", "GB/s"),
            peer,
        ),
        on.floor(
            "tflops",
            "compute burn, every GPU",
            floor(
                c.min_tflops,
                c.min_tflops_fraction,
                e.fp32_tflops,
                "fp32_tflops",
                "TFLOP/s",
            ),
            tflops,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn measured(c: Criterion, r: &GpuReport) -> Criterion {
    let fails: Vec<String> = r
        .gpus
        .iter()
        .filter_map(|g| {
            g.error
                .as_ref()
                .map(|e| format!("rank {} ({}): {e}", g.rank, g.host))
        })
        .collect();
    let ok = r.gpus.len() - fails.len();
    settle(c, format!("{ok} of {} GPUs", r.gpus.len()), fails)
}

/// The share of free memory the memory test must cover when a card does not say.
pub const MEMTEST_SHARE: f64 = 0.9;

/// Every GPU's memory test: FAIL on a failing word (named by address and bits), an
/// error, a GPU that did not run it, or less than `min` of its free memory covered.
fn memtest(c: Criterion, r: &GpuReport, min: f64) -> Criterion {
    let mut fails = Vec::new();
    let (mut gpus, mut bytes, mut slowest) = (0, 0u64, f64::INFINITY);
    let mut low_share = f64::INFINITY;
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        let Some(m) = &g.memtest else {
            fails.push(format!("{}: no memory test ran", gpu_name(g)));
            continue;
        };
        gpus += 1;
        bytes += m.tested_bytes;
        if m.gbps > 0.0 {
            slowest = slowest.min(m.gbps);
        }
        low_share = low_share.min(m.share_of_free);
        if m.failing_words > 0 {
            let first = m.failures.first().map_or(String::new(), |f| {
                format!(
                    "; first at {} bit(s) {:?} ({}, pass {}: wrote {}, read {})",
                    f.address, f.bits, f.pattern, f.pass, f.expected, f.read
                )
            });
            fails.push(format!(
                "{}: {} failing 8-byte word(s){first}",
                gpu_name(g),
                m.failing_words
            ));
        }
        if let Some(e) = &m.error {
            fails.push(format!("{}: the memory test stopped: {e}", gpu_name(g)));
        } else if m.share_of_free < min {
            fails.push(format!(
                "{}: tested {} of {} free ({:.1}%, below {:.0}%)",
                gpu_name(g),
                crate::units::Bytes(m.tested_bytes),
                crate::units::Bytes(m.free_bytes),
                m.share_of_free * 100.0,
                min * 100.0
            ));
        }
    }
    let mut measured = format!("{gpus} GPU(s), {} tested", crate::units::Bytes(bytes));
    if low_share.is_finite() {
        measured.push_str(&format!(
            ", ≥ {:.1}% of free memory each",
            low_share * 100.0
        ));
    }
    if slowest.is_finite() {
        measured.push_str(&format!(", slowest {slowest:.1} GB/s"));
    }
    settle(c, measured, fails)
}

fn wrong(c: Criterion, r: &GpuReport) -> Criterion {
    let mut fails = Vec::new();
    let mut checked = 0u64;
    for g in &r.gpus {
        for (dir, copy) in [
            ("H2D", &g.copies.h2d),
            ("D2H", &g.copies.d2h),
            ("D2D", &g.copies.d2d),
        ] {
            if let Some(x) = copy.as_ref().filter(|x| x.error.is_none()) {
                checked += 1;
                if !x.verified {
                    fails.push(format!(
                        "{} {dir} copy differs from its source",
                        gpu_name(g)
                    ));
                }
            }
        }
        if let Some(b) = &g.burn {
            checked += b.checked;
            if b.wrong > 0 {
                fails.push(format!(
                    "{} computed {} wrong value(s) of {} in the burn",
                    gpu_name(g),
                    b.wrong,
                    b.checked
                ));
            }
        }
    }
    for n in &r.nodes {
        for p in n.pairs.iter() {
            if let Some(x) = p.copy.as_ref().filter(|x| x.error.is_none()) {
                checked += 1;
                if !x.verified {
                    fails.push(format!(
                        "{} GPU{}→GPU{} peer copy differs from its source",
                        n.host, p.src, p.dst
                    ));
                }
            }
        }
    }
    let n = fails.len();
    settle(
        c,
        format!("{n} GPU(s) or pair(s) wrong; {checked} copies and burn values checked"),
        fails,
    )
}

/// The lowest of `values` (GB/s or TFLOP/s) with its name, and the names below `min`.
fn lowest(values: Vec<(String, f64)>, min: f64, unit: &str) -> (String, Vec<String>) {
    let worst = values.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let measured = match worst {
        Some((who, v)) => format!("lowest {v:.1} {unit} ({who})"),
        None => "no data".into(),
    };
    let fails = values
        .iter()
        .filter(|(_, v)| *v < min)
        .map(|(who, v)| format!("{who} at {v:.1} {unit}"))
        .collect();
    (measured, fails)
}

/// Each GPU of a model the floors table has, against its floors; a miss names the
/// value, the floor, the peak it is a fraction of and where that peak comes from.
fn model_floors(c: Criterion, r: &GpuReport) -> Criterion {
    let table = match super::gpu_floors::Table::built_in() {
        Ok(t) => t,
        Err(e) => return not_run(c, &e),
    };
    let f = &table.fractions;
    let mut fails = Vec::new();
    let mut checked = 0;
    let mut unknown: Vec<String> = Vec::new();
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        let Some(m) = table.find(&g.name) else {
            if !unknown.contains(&g.name) {
                unknown.push(g.name.clone());
            }
            continue;
        };
        checked += 1;
        let who = gpu_name(g);
        let mut below = |what: String,
                         v: Option<f64>,
                         frac: f64,
                         peak: f64,
                         unit: &str,
                         of: String| {
            if let Some(v) = v.filter(|v| *v < frac * peak) {
                fails.push(format!(
                    "{who}: {what} {v:.1} {unit} below its floor {:.1} {unit} ({frac} × {of}: {}, {})",
                    frac * peak,
                    m.name,
                    m.source
                ));
            }
        };
        below(
            "device memory".into(),
            g.copies.memory_gbps(),
            f.memory,
            m.memory_gbps,
            "GB/s",
            format!("the peak {} GB/s", m.memory_gbps),
        );
        let burn = g
            .burn
            .as_ref()
            .filter(|b| b.error.is_none() && b.tflops > 0.0)
            .map(|b| b.tflops);
        below(
            "FP32 burn".into(),
            burn,
            f.fp32,
            m.fp32_tflops,
            "TFLOP/s",
            format!("the peak FP32 {} TFLOP/s", m.fp32_tflops),
        );
        if let Some(line) = super::gpu_floors::pcie_line_gbps(m.pcie_gen, m.pcie_width) {
            for (dir, x) in [("H2D", &g.copies.h2d), ("D2H", &g.copies.d2h)] {
                below(
                    format!("{dir} copy"),
                    copy_rate(x),
                    f.host_copy,
                    line,
                    "GB/s",
                    format!(
                        "the PCIe Gen{} x{} line rate {line:.1} GB/s",
                        m.pcie_gen, m.pcie_width
                    ),
                );
            }
        }
    }
    if checked == 0 {
        return not_run(
            c,
            &format!(
                "no floors for {} (cards/floors/gpu-floors.toml has {})",
                if unknown.is_empty() {
                    "these GPUs".to_string()
                } else {
                    unknown.join(", ")
                },
                table.names()
            ),
        );
    }
    let mut measured = format!("{checked} GPU(s) of known models against their floors");
    if !unknown.is_empty() {
        measured.push_str(&format!("; no floors for {}", unknown.join(", ")));
    }
    settle(c, measured, fails)
}

fn copy_rate(x: &Option<super::gpu::CopyRate>) -> Option<f64> {
    x.as_ref().filter(|x| x.error.is_none()).map(|x| x.gbps)
}

fn host_copy(c: Criterion, r: &GpuReport, min: f64) -> Criterion {
    let mut v = Vec::new();
    let mut missing = Vec::new();
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        for (dir, x) in [("H2D", &g.copies.h2d), ("D2H", &g.copies.d2h)] {
            match copy_rate(x) {
                Some(rate) => v.push((format!("{} {dir}", gpu_name(g)), rate)),
                None => missing.push(format!("{} {dir} not measured", gpu_name(g))),
            }
        }
    }
    if v.is_empty() {
        return not_run(c, "no GPU's host copies were measured");
    }
    let (m, mut fails) = lowest(v, min, "GB/s");
    fails.extend(missing);
    settle(c, m, fails)
}

fn memory(c: Criterion, r: &GpuReport, min: f64) -> Criterion {
    let mut v = Vec::new();
    let mut fails = Vec::new();
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        match g.copies.memory_gbps() {
            Some(m) => v.push((gpu_name(g), m)),
            None => fails.push(format!("{} device copy not measured", gpu_name(g))),
        }
    }
    if v.is_empty() {
        return not_run(c, "no GPU's device-local copy was measured");
    }
    let (m, f) = lowest(v, min, "GB/s");
    fails.splice(0..0, f);
    settle(c, m, fails)
}

/// One measured pair of a node.
struct PairRate<'a> {
    host: &'a str,
    src: usize,
    dst: usize,
    gbps: f64,
    peer_access: bool,
}

impl PairRate<'_> {
    /// "node0 GPU3→GPU5".
    fn name(&self) -> String {
        format!("{} GPU{}→GPU{}", self.host, self.src, self.dst)
    }
}

/// Every measured pair of a node.
fn pair_rates(n: &NodeMatrix) -> Vec<PairRate<'_>> {
    n.pairs
        .iter()
        .filter_map(|p| {
            copy_rate(&p.copy).map(|gbps| PairRate {
                host: &n.host,
                src: p.src,
                dst: p.dst,
                gbps,
                peer_access: p.peer_access,
            })
        })
        .collect()
}

fn peer(c: Criterion, r: &GpuReport, min: f64) -> Criterion {
    let v: Vec<(String, f64)> = r
        .nodes
        .iter()
        .flat_map(pair_rates)
        .filter(|p| p.peer_access)
        .map(|p| (p.name(), p.gbps))
        .collect();
    if v.is_empty() {
        return not_run(
            c,
            "no GPU pair with peer access (one GPU per node, or none granted)",
        );
    }
    let (m, fails) = lowest(v, min, "GB/s");
    settle(c, m, fails)
}

/// A pair below the outlier fraction of its node's median pair.
#[derive(Clone, Debug, PartialEq)]
pub struct PairOutlier {
    pub host: String,
    pub src: usize,
    pub dst: usize,
    pub gbps: f64,
    pub median_gbps: f64,
}

impl PairOutlier {
    /// "node0 GPU3→GPU5 at 0.40x the median pair (123.0 of 310.0 GB/s)".
    pub fn text(&self) -> String {
        format!(
            "{} GPU{}→GPU{} at {:.2}x the median pair ({:.1} of {:.1} GB/s)",
            self.host,
            self.src,
            self.dst,
            self.gbps / self.median_gbps,
            self.gbps,
            self.median_gbps
        )
    }
}

/// The pairs measured and those below `fraction` × their node's median pair.
pub fn pair_outlier_list(nodes: &[NodeMatrix], fraction: f64) -> (usize, Vec<PairOutlier>) {
    let mut pairs = 0;
    let mut out = Vec::new();
    for n in nodes {
        let rates = pair_rates(n);
        pairs += rates.len();
        let values: Vec<f64> = rates.iter().map(|p| p.gbps).collect();
        if values.len() < 2 {
            continue;
        }
        let median = crate::stats::median(&values);
        out.extend(
            rates
                .iter()
                .filter(|p| median > 0.0 && p.gbps < fraction * median)
                .map(|p| PairOutlier {
                    host: p.host.to_string(),
                    src: p.src,
                    dst: p.dst,
                    gbps: p.gbps,
                    median_gbps: median,
                }),
        );
    }
    (pairs, out)
}

/// The counters to compare with a GPU's first reading: the re-read at the end of the
/// acceptance when there is one for the same GPU (host and UUID), else the phase's own.
pub fn end_counters<'a>(
    g: &'a GpuHealth,
    after: Option<&'a GpuReport>,
) -> Option<&'a super::gpu::ErrorCounters> {
    after
        .and_then(|a| a.gpus.iter().find(|x| x.host == g.host && x.uuid == g.uuid))
        .and_then(|x| x.counters_after.as_ref().or(x.counters_before.as_ref()))
        .or(g.counters_after.as_ref())
}

fn pair_outliers(c: Criterion, r: &GpuReport, fraction: f64) -> Criterion {
    let (pairs, outliers) = pair_outlier_list(&r.nodes, fraction);
    let fails: Vec<String> = outliers.iter().map(PairOutlier::text).collect();
    if pairs < 2 {
        return not_run(c, "fewer than two GPU pairs measured (one GPU per node?)");
    }
    let n = fails.len();
    settle(c, format!("{n} outlier(s) of {pairs} pairs"), fails)
}

fn burn_rates(r: &GpuReport) -> Vec<(String, f64)> {
    r.gpus
        .iter()
        .filter_map(|g| {
            g.burn
                .as_ref()
                .filter(|b| b.error.is_none() && b.tflops > 0.0)
                .map(|b| (gpu_name(g), b.tflops))
        })
        .collect()
}

fn tflops(c: Criterion, r: &GpuReport, min: f64) -> Criterion {
    if r.gpus.iter().all(|g| g.burn.is_none()) {
        return not_run(c, "no GPU ran the compute burn");
    }
    let mut fails: Vec<String> = r
        .gpus
        .iter()
        .filter(|g| g.error.is_none())
        .filter_map(|g| match &g.burn {
            Some(b) if b.error.is_none() => None,
            Some(b) => Some(format!(
                "{}: burn failed: {}",
                gpu_name(g),
                b.error.as_deref().unwrap_or("")
            )),
            None => Some(format!("{}: no burn", gpu_name(g))),
        })
        .collect();
    let (m, f) = lowest(burn_rates(r), min, "TFLOP/s");
    fails.splice(0..0, f);
    settle(c, m, fails)
}

fn spread(c: Criterion, r: &GpuReport, max_spread: f64) -> Criterion {
    let v = burn_rates(r);
    if v.len() < 2 {
        return not_run(c, "fewer than two GPUs burned");
    }
    let fast = v.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let slow = v.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let (Some(fast), Some(slow)) = (fast, slow) else {
        return c;
    };
    let s = (fast.1 - slow.1) / fast.1;
    let m = format!(
        "{s:.3} (slowest {} {:.1}, fastest {} {:.1} TFLOP/s)",
        slow.0, slow.1, fast.0, fast.1
    );
    let fails = if s > max_spread {
        vec![format!("{} is {:.1}% below {}", slow.0, 100.0 * s, fast.0)]
    } else {
        Vec::new()
    };
    settle(c, m, fails)
}

fn throttle(c: Criterion, r: &GpuReport, max: f64) -> Criterion {
    let mut v = Vec::new();
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        if let Some(t) = g.throttle.as_ref().filter(|t| t.samples > 0) {
            v.push((g, t));
        }
    }
    if v.is_empty() {
        return not_run(c, "no NVML samples during the burn");
    }
    let worst = v
        .iter()
        .max_by(|a, b| a.1.throttled_share.total_cmp(&b.1.throttled_share));
    let m = worst
        .map(|(g, t)| format!("highest {:.3} ({})", t.throttled_share, gpu_name(g)))
        .unwrap_or_default();
    let fails = v
        .iter()
        .filter(|(_, t)| t.throttled_share > max)
        .map(|(g, t)| {
            let reasons: Vec<String> = t
                .by_reason
                .iter()
                .filter(|(name, _)| {
                    super::gpu::REASONS
                        .iter()
                        .any(|(b, n)| n == name && b & super::gpu::THROTTLE_MASK != 0)
                })
                .map(|(n, s)| format!("{n} {:.0}%", 100.0 * s))
                .collect();
            format!(
                "{} throttled {:.0}% of the burn ({})",
                gpu_name(g),
                100.0 * t.throttled_share,
                reasons.join(", ")
            )
        })
        .collect();
    settle(c, m, fails)
}

fn pcie(c: Criterion, r: &GpuReport, e: &GpuSpec) -> Criterion {
    let mut fails = Vec::new();
    let mut seen = 0;
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        let Some(p) = &g.pcie else { continue };
        let (Some(gen), Some(width)) = (p.gen, p.width) else {
            continue;
        };
        seen += 1;
        let max_gen = p.max_gen.unwrap_or(gen);
        let max_width = p.max_width.unwrap_or(width);
        let want_gen = e.pcie_gen.map_or(max_gen, |x| x.max(max_gen));
        let want_width = e.pcie_width.map_or(max_width, |x| x.max(max_width));
        if gen < want_gen || width < want_width {
            fails.push(format!(
                "{} PCIe Gen{gen} x{width} (GPU max Gen{max_gen} x{max_width}{})",
                gpu_name(g),
                match (e.pcie_gen, e.pcie_width) {
                    (Some(eg), Some(ew)) => format!(", topology Gen{eg} x{ew}"),
                    _ => String::new(),
                }
            ));
        }
    }
    if seen == 0 {
        return not_run(c, "NVML gave no PCIe link for any GPU");
    }
    let n = fails.len();
    settle(c, format!("{} of {seen} GPUs at max", seen - n), fails)
}

/// Human phrases for counters that got worse from `before` to `after`: the fatal ones
/// (uncorrected errors, remapping failures, pending retirements) and the notes
/// (corrected errors).
/// PCIe replays a GPU may count during the phase: DCGM's PCIe plugin fails a GPU
/// with more than 80 while it runs (its `max_pcie_replays` default, NVIDIA/DCGM
/// nvvs/plugin_src/pcie).
pub const PCIE_REPLAYS_MAX: u64 = 80;

pub fn counter_changes(
    before: &super::gpu::ErrorCounters,
    after: &super::gpu::ErrorCounters,
) -> (Vec<String>, Vec<String>) {
    let up = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => 0,
    };
    let became = |a: Option<bool>, b: Option<bool>| b == Some(true) && a != Some(true);
    let mut fatal = Vec::new();
    let mut notes = Vec::new();
    let unc = up(
        before.ecc_volatile_uncorrected,
        after.ecc_volatile_uncorrected,
    )
    .max(up(
        before.ecc_aggregate_uncorrected,
        after.ecc_aggregate_uncorrected,
    ));
    if unc > 0 {
        fatal.push(format!("{unc} new uncorrected ECC error(s)"));
    }
    let dbe = up(before.retired_pages_dbe, after.retired_pages_dbe);
    if dbe > 0 {
        fatal.push(format!("{dbe} page(s) newly retired for double-bit errors"));
    }
    let rows = up(
        before.remapped_rows_uncorrected,
        after.remapped_rows_uncorrected,
    );
    if rows > 0 {
        fatal.push(format!(
            "{rows} row(s) newly remapped for uncorrected errors"
        ));
    }
    if became(before.remapped_rows_failure, after.remapped_rows_failure) {
        fatal.push("a row remapping failed".into());
    }
    if became(before.remapped_rows_pending, after.remapped_rows_pending) {
        fatal.push("a row remapping is pending (needs a GPU reset)".into());
    }
    if became(before.retired_pages_pending, after.retired_pages_pending) {
        fatal.push("a page retirement is pending (needs a driver reload)".into());
    }
    let replays = up(before.pcie_replays, after.pcie_replays);
    if replays > PCIE_REPLAYS_MAX {
        fatal.push(format!(
            "{replays} PCIe replays (link retransmissions), more than {PCIE_REPLAYS_MAX}: a marginal link, riser or slot"
        ));
    } else if replays > 0 {
        notes.push(format!("{replays} PCIe replay(s)"));
    }
    let corr = up(before.ecc_volatile_corrected, after.ecc_volatile_corrected).max(up(
        before.ecc_aggregate_corrected,
        after.ecc_aggregate_corrected,
    ));
    if corr > 0 {
        notes.push(format!("{corr} new corrected ECC error(s)"));
    }
    let lost = unread(before, after);
    if !lost.is_empty() {
        fatal.push(format!(
            "{} read at the start but not at the end",
            lost.join(", ")
        ));
    }
    (fatal, notes)
}

/// The counters `before` had and `after` lacks (NVML failed to read them at the end:
/// no comparison is no proof of "no new errors").
fn unread(
    before: &super::gpu::ErrorCounters,
    after: &super::gpu::ErrorCounters,
) -> Vec<&'static str> {
    let (b, a) = (before, after);
    [
        (
            "ecc_volatile_corrected",
            b.ecc_volatile_corrected.is_some(),
            a.ecc_volatile_corrected.is_some(),
        ),
        (
            "ecc_volatile_uncorrected",
            b.ecc_volatile_uncorrected.is_some(),
            a.ecc_volatile_uncorrected.is_some(),
        ),
        (
            "ecc_aggregate_corrected",
            b.ecc_aggregate_corrected.is_some(),
            a.ecc_aggregate_corrected.is_some(),
        ),
        (
            "ecc_aggregate_uncorrected",
            b.ecc_aggregate_uncorrected.is_some(),
            a.ecc_aggregate_uncorrected.is_some(),
        ),
        (
            "retired_pages_sbe",
            b.retired_pages_sbe.is_some(),
            a.retired_pages_sbe.is_some(),
        ),
        (
            "retired_pages_dbe",
            b.retired_pages_dbe.is_some(),
            a.retired_pages_dbe.is_some(),
        ),
        (
            "retired_pages_pending",
            b.retired_pages_pending.is_some(),
            a.retired_pages_pending.is_some(),
        ),
        (
            "remapped_rows_corrected",
            b.remapped_rows_corrected.is_some(),
            a.remapped_rows_corrected.is_some(),
        ),
        (
            "remapped_rows_uncorrected",
            b.remapped_rows_uncorrected.is_some(),
            a.remapped_rows_uncorrected.is_some(),
        ),
        (
            "remapped_rows_pending",
            b.remapped_rows_pending.is_some(),
            a.remapped_rows_pending.is_some(),
        ),
        (
            "pcie_replays",
            b.pcie_replays.is_some(),
            a.pcie_replays.is_some(),
        ),
        (
            "remapped_rows_failure",
            b.remapped_rows_failure.is_some(),
            a.remapped_rows_failure.is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, had, has)| *had && !*has)
    .map(|(name, _, _)| name)
    .collect()
}

fn errors(c: Criterion, r: &GpuReport, after: Option<&GpuReport>) -> Criterion {
    let mut fails = Vec::new();
    let mut notes = Vec::new();
    let mut compared = 0;
    for g in r.gpus.iter().filter(|g| g.error.is_none()) {
        match (&g.counters_before, end_counters(g, after)) {
            (Some(b), Some(a)) => {
                compared += 1;
                let (f, n) = counter_changes(b, a);
                fails.extend(f.into_iter().map(|f| format!("{}: {f}", gpu_name(g))));
                notes.extend(n.into_iter().map(|n| format!("{}: {n}", gpu_name(g))));
            }
            (Some(_), None) => fails.push(format!(
                "{}: error counters read at the start but not at the end",
                gpu_name(g)
            )),
            _ => {}
        }
        if !g.xid_listening {
            let why = g.nvml_error.as_deref().unwrap_or("NVML gave no event set");
            notes.push(format!("{}: XIDs not watched ({why})", gpu_name(g)));
        }
        if g.sample_errors > 0 {
            notes.push(format!(
                "{}: {} NVML sample(s) with a failed read (first: {})",
                gpu_name(g),
                g.sample_errors,
                g.sample_error.as_deref().unwrap_or("?")
            ));
        }
        for x in &g.xids {
            fails.push(format!(
                "{}: XID {} at {}",
                gpu_name(g),
                x.xid,
                super::utc_text(x.at_unix)
            ));
        }
    }
    let listening = r.gpus.iter().filter(|g| g.xid_listening).count();
    if compared == 0 && listening == 0 {
        return not_run(c, "NVML gave no error counters and no XID events");
    }
    let n = fails.len();
    let mut c = settle(
        c,
        format!(
            "{n} new; counters compared on {compared}, XIDs listened to on {listening} of {} GPUs",
            r.gpus.len()
        ),
        fails,
    );
    if !notes.is_empty() {
        if !c.detail.is_empty() {
            c.detail.push_str("; ");
        }
        c.detail.push_str(&format!("notes: {}", notes.join("; ")));
    }
    c
}

fn dcgm(c: Criterion, r: &GpuReport) -> Criterion {
    let ran: Vec<_> = r
        .dcgm
        .iter()
        .filter_map(|h| h.diag.as_ref().map(|d| (h, d)))
        .collect();
    if ran.is_empty() {
        let why = r
            .dcgm
            .iter()
            .find_map(|h| h.error.clone())
            .unwrap_or_else(|| "DCGM's diagnostic was not run".into());
        return not_run(c, &why);
    }
    let mut fails = Vec::new();
    let mut skipped = Vec::new();
    for (h, d) in &ran {
        fails.extend(d.failures().into_iter().map(|f| format!("{}: {f}", h.host)));
        skipped.extend(d.skipped().into_iter().map(|s| format!("{}: {s}", h.host)));
    }
    for h in r.dcgm.iter().filter(|h| h.diag.is_none()) {
        fails.push(format!(
            "{}: {}",
            h.host,
            h.error.as_deref().unwrap_or("no diagnostic")
        ));
    }
    let n = fails.len();
    let mut c = settle(c, format!("{n} failure(s) on {} node(s)", ran.len()), fails);
    if !skipped.is_empty() {
        if !c.detail.is_empty() {
            c.detail.push_str("; ");
        }
        c.detail
            .push_str(&format!("skipped: {}", skipped.join("; ")));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::gpu::*;

    fn rate(gbps: f64) -> Option<CopyRate> {
        Some(CopyRate {
            bytes: 1 << 28,
            reps: 5,
            gbps,
            verified: true,
            error: None,
        })
    }

    fn healthy_gpu(host: &str, gpu: usize) -> GpuHealth {
        let counters = ErrorCounters {
            ecc_volatile_corrected: Some(0),
            ecc_volatile_uncorrected: Some(0),
            ecc_aggregate_corrected: Some(3),
            ecc_aggregate_uncorrected: Some(0),
            remapped_rows_corrected: Some(0),
            remapped_rows_uncorrected: Some(0),
            remapped_rows_pending: Some(false),
            remapped_rows_failure: Some(false),
            ..Default::default()
        };
        GpuHealth {
            rank: gpu,
            host: host.into(),
            local_rank: gpu,
            gpu,
            name: "NVIDIA H200".into(),
            uuid: format!("GPU-{host}-{gpu}"),
            pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + gpu),
            copies: GpuCopies {
                h2d: rate(55.0),
                d2h: rate(55.5),
                d2d: rate(2100.0),
                ..GpuCopies::default()
            },
            burn: Some(Burn {
                kernel: "fma-ptx".into(),
                seconds: 60.0,
                launches: 1200,
                tflops: 60.0 + gpu as f64 * 0.1,
                tflops_by_tenth: vec![60.0; 10],
                checked: 1000,
                wrong: 0,
                error: None,
                ..Burn::default()
            }),
            memtest: None,
            throttle: Some(ThrottleSummary {
                samples: 300,
                throttled_share: 0.0,
                ..Default::default()
            }),
            pcie: Some(PcieLink {
                gen: Some(5),
                max_gen: Some(5),
                width: Some(16),
                max_width: Some(16),
            }),
            counters_before: Some(counters.clone()),
            counters_after: Some(counters),
            xids: Vec::new(),
            xid_listening: true,
            nvml_error: None,
            sample_errors: 0,
            sample_error: None,
            error: None,
        }
    }

    fn node(host: &str, n: usize, slow: Option<(usize, usize)>) -> NodeMatrix {
        let mut pairs = Vec::new();
        for s in 0..n {
            for d in (0..n).filter(|d| *d != s) {
                let g = if slow == Some((s, d)) { 150.0 } else { 380.0 };
                pairs.push(PeerCopy {
                    src: s,
                    dst: d,
                    peer_access: true,
                    copy: rate(g),
                    error: None,
                });
            }
        }
        NodeMatrix {
            host: host.into(),
            rank: 0,
            gpus: (0..n).collect(),
            pairs,
            error: None,
        }
    }

    fn healthy() -> GpuReport {
        GpuReport {
            schema_version: SCHEMA_VERSION,
            kind: "gpu".into(),
            gpus: (0..4).map(|g| healthy_gpu("node1", g)).collect(),
            nodes: vec![node("node1", 4, None)],
            ..Default::default()
        }
    }

    fn criteria() -> GpuCriteria {
        GpuCriteria {
            min_host_copy_fraction: Some(0.7),
            min_memory_fraction: Some(0.8),
            min_peer_fraction: Some(0.7),
            min_tflops_fraction: Some(0.7),
            max_tflops_spread: Some(0.1),
            max_throttled_share: Some(0.05),
            ..Default::default()
        }
    }

    fn spec() -> GpuSpec {
        GpuSpec {
            memory_gbps: Some(4800.0),
            fp32_tflops: Some(67.0),
            pcie_gen: Some(5),
            pcie_width: Some(16),
            host_copy_gbps: Some(64.0),
            peer_gbps: Some(450.0),
        }
    }

    fn judged(r: &GpuReport) -> Vec<Criterion> {
        judge(Ok(r), None, &criteria(), Some(&spec()))
    }

    fn one<'a>(cs: &'a [Criterion], id: &str) -> &'a Criterion {
        cs.iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("{id} in {cs:#?}"))
    }

    /// Only `id` fails, and its detail names `who`.
    fn only_fails(r: &GpuReport, id: &str, who: &str) {
        let cs = judged(r);
        let failed: Vec<&str> = cs
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(failed, [id], "{cs:#?}");
        let c = one(&cs, id);
        assert!(c.detail.contains(who), "{c:#?}");
    }

    #[test]
    fn a_healthy_node_passes_every_criterion() {
        let cs = judged(&healthy());
        assert_eq!(cs.len(), 11, "{cs:#?}");
        let not_pass: Vec<_> = cs
            .iter()
            .filter(|c| c.status != Status::Pass && c.id != "gpu.dcgm")
            .collect();
        assert!(not_pass.is_empty(), "{not_pass:#?}");
        assert_eq!(
            one(&cs, "gpu.memory").measured,
            "lowest 4200.0 GB/s (node1 GPU 0)"
        );
    }

    fn tested(free: u64, tested: u64) -> crate::results::gpu::MemTest {
        crate::results::gpu::MemTest {
            free_bytes: free,
            tested_bytes: tested,
            share_of_free: tested as f64 / free as f64,
            passes: 1,
            gbps: 2900.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_memory_test_names_a_failing_word_a_short_cover_and_a_gpu_without_it() {
        let mut r = healthy();
        for g in &mut r.gpus {
            g.memtest = Some(tested(80 << 30, 73 << 30));
        }
        let cs = judged(&r);
        let m = one(&cs, "gpu.memtest");
        assert_eq!(m.status, Status::Pass, "{m:#?}");
        assert!(m.measured.starts_with("4 GPU(s), "), "{m:#?}");
        let f = r.gpus[1].memtest.as_mut().unwrap();
        f.failing_words = 3;
        f.failures.push(crate::results::gpu::MemFailure {
            address: "0x7a0000100020".into(),
            pattern: "walking one".into(),
            bits: vec![13],
            ..Default::default()
        });
        only_fails(
            &r,
            "gpu.memtest",
            "node1 GPU 1: 3 failing 8-byte word(s); first at 0x7a0000100020 bit(s) [13] (walking one",
        );
        let mut r = healthy();
        for g in &mut r.gpus {
            g.memtest = Some(tested(80 << 30, 73 << 30));
        }
        r.gpus[2].memtest = Some(tested(80 << 30, 40 << 30));
        r.gpus[3].memtest = None;
        let cs = judged(&r);
        let d = &one(&cs, "gpu.memtest").detail;
        assert!(d.contains("node1 GPU 2: tested 40"), "{d}");
        assert!(d.contains("(50.0%, below 90%)"), "{d}");
        assert!(d.contains("node1 GPU 3: no memory test ran"), "{d}");
        // Not asked for and not run: no criterion; asked for and not run: NOT RUN.
        assert!(judged(&healthy()).iter().all(|c| c.id != "gpu.memtest"));
        let asked = GpuCriteria {
            min_memtest_share: Some(0.5),
            ..criteria()
        };
        let cs = judge(Ok(&healthy()), None, &asked, Some(&spec()));
        assert_eq!(one(&cs, "gpu.memtest").status, Status::NotRun, "{cs:#?}");
    }

    #[test]
    fn a_throttled_gpu_fails_naming_it_and_its_reason() {
        let mut r = healthy();
        let t = r.gpus[2].throttle.as_mut().unwrap();
        t.throttled_share = 0.4;
        t.by_reason.insert("hw_thermal_slowdown".into(), 0.4);
        t.by_reason.insert("sw_power_cap".into(), 0.9);
        only_fails(
            &r,
            "gpu.throttle",
            "node1 GPU 2 throttled 40% of the burn (hw_thermal_slowdown 40%)",
        );
    }

    #[test]
    fn an_xid_fails_naming_the_gpu() {
        let mut r = healthy();
        r.gpus[1].xids.push(XidEvent {
            at_unix: 1.0e9,
            xid: 79,
        });
        only_fails(&r, "gpu.errors", "node1 GPU 1: XID 79");
    }

    #[test]
    fn a_new_uncorrected_ecc_error_fails_and_a_corrected_one_is_a_note() {
        let mut r = healthy();
        let a = r.gpus[3].counters_after.as_mut().unwrap();
        a.ecc_volatile_uncorrected = Some(2);
        a.ecc_aggregate_uncorrected = Some(2);
        a.ecc_volatile_corrected = Some(5);
        only_fails(
            &r,
            "gpu.errors",
            "node1 GPU 3: 2 new uncorrected ECC error(s)",
        );
        let cs = judged(&r);
        assert!(one(&cs, "gpu.errors")
            .detail
            .contains("notes: node1 GPU 3: 5 new corrected ECC error(s)"));
        // Counters re-read at the end of the acceptance are the ones compared.
        let mut late = healthy();
        late.gpus[0]
            .counters_after
            .as_mut()
            .unwrap()
            .remapped_rows_failure = Some(true);
        let cs = judge(Ok(&healthy()), Some(&late), &criteria(), Some(&spec()));
        let c = one(&cs, "gpu.errors");
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail.contains("node1 GPU 0: a row remapping failed"),
            "{c:#?}"
        );
    }

    #[test]
    fn counters_not_read_at_the_end_fail_instead_of_passing_as_no_new_errors() {
        let mut r = healthy();
        let a = r.gpus[2].counters_after.as_mut().unwrap();
        a.ecc_volatile_uncorrected = None;
        a.remapped_rows_failure = None;
        only_fails(
            &r,
            "gpu.errors",
            "node1 GPU 2: ecc_volatile_uncorrected, remapped_rows_failure read at the start but not at the end",
        );
        let mut r = healthy();
        r.gpus[1].counters_after = None;
        only_fails(
            &r,
            "gpu.errors",
            "node1 GPU 1: error counters read at the start but not at the end",
        );
    }

    #[test]
    fn a_gpu_whose_xids_were_not_watched_is_named_in_the_notes() {
        let mut r = healthy();
        r.gpus[3].xid_listening = false;
        r.gpus[3].nvml_error = Some("XID events not watched: Not Supported".into());
        let cs = judged(&r);
        let c = one(&cs, "gpu.errors");
        assert_eq!(c.status, Status::Pass, "{c:#?}");
        assert_eq!(
            c.measured,
            "0 new; counters compared on 4, XIDs listened to on 3 of 4 GPUs"
        );
        assert_eq!(
            c.detail,
            "notes: node1 GPU 3: XIDs not watched (XID events not watched: Not Supported)"
        );
    }

    #[test]
    fn failed_nvml_sample_reads_are_counted_and_shown() {
        let mut r = healthy();
        r.gpus[1].sample_errors = 3;
        r.gpus[1].sample_error = Some("SM clock: an unknown error occurred".into());
        let cs = judged(&r);
        let c = one(&cs, "gpu.errors");
        assert_eq!(c.status, Status::Pass, "{c:#?}");
        assert_eq!(
            c.detail,
            "notes: node1 GPU 1: 3 NVML sample(s) with a failed read (first: SM clock: an unknown error occurred)"
        );
    }

    #[test]
    fn a_slow_pair_fails_as_an_outlier_and_below_the_nvlink_floor() {
        let mut r = healthy();
        r.nodes = vec![node("node1", 4, Some((3, 1)))];
        let cs = judged(&r);
        let o = one(&cs, "gpu.pair_outlier");
        assert_eq!(o.status, Status::Fail);
        assert!(
            o.detail
                .contains("node1 GPU3→GPU1 at 0.39x the median pair (150.0 of 380.0 GB/s)"),
            "{o:#?}"
        );
        let p = one(&cs, "gpu.peer");
        assert_eq!(p.status, Status::Fail);
        assert!(p.detail.contains("node1 GPU3→GPU1 at 150.0 GB/s"), "{p:#?}");
    }

    #[test]
    fn a_pcie_link_below_max_fails_naming_gen_and_width() {
        let mut r = healthy();
        r.gpus[0].pcie.as_mut().unwrap().gen = Some(4);
        only_fails(
            &r,
            "gpu.pcie",
            "node1 GPU 0 PCIe Gen4 x16 (GPU max Gen5 x16, topology Gen5 x16)",
        );
        let mut r = healthy();
        r.gpus[1].pcie.as_mut().unwrap().width = Some(8);
        only_fails(&r, "gpu.pcie", "node1 GPU 1 PCIe Gen5 x8");
    }

    #[test]
    fn wrong_burn_results_and_a_slow_gpu_fail() {
        let mut r = healthy();
        r.gpus[2].burn.as_mut().unwrap().wrong = 1;
        only_fails(
            &r,
            "gpu.wrong",
            "node1 GPU 2 computed 1 wrong value(s) of 1000",
        );
        let mut r = healthy();
        r.gpus[1].burn.as_mut().unwrap().tflops = 40.0;
        let cs = judged(&r);
        assert_eq!(one(&cs, "gpu.tflops").status, Status::Fail);
        assert!(one(&cs, "gpu.tflops")
            .detail
            .contains("node1 GPU 1 at 40.0 TFLOP/s"));
        assert_eq!(one(&cs, "gpu.tflops_spread").status, Status::Fail);
    }

    #[test]
    fn no_gpu_and_missing_numbers_are_not_run_with_the_reason() {
        let r = GpuReport {
            error: Some("no GPU on any of the 8 rank(s): no CUDA driver".into()),
            ..Default::default()
        };
        let cs = judge(Ok(&r), None, &criteria(), Some(&spec()));
        assert!(cs
            .iter()
            .all(|c| c.status == Status::NotRun && c.detail.contains("no CUDA driver")));
        let cs = judge(Ok(&healthy()), None, &criteria(), None);
        let m = one(&cs, "gpu.memory");
        assert_eq!(m.status, Status::NotRun);
        assert_eq!(m.detail, "the topology has no gpu.memory_gbps");
    }

    /// The gpu.dcgm criterion of a healthy node1 whose DCGM diagnostic is `text`.
    fn judge_diag(text: &str) -> Criterion {
        let mut r = healthy();
        r.dcgm.push(HostDcgm {
            host: "node1".into(),
            diag: Some(crate::dcgm::parse(text, "fixture").unwrap()),
            error: None,
        });
        let mut c = criteria();
        c.dcgm_diag = true;
        one(&judge(Ok(&r), None, &c, Some(&spec())), "gpu.dcgm").clone()
    }

    #[test]
    fn a_failed_dcgm_test_fails_the_criterion_naming_it() {
        let d = judge_diag(include_str!(
            "../../tests/fixtures/dcgm/dcgm-4.2.3-r1-fail.json"
        ));
        assert_eq!(d.status, Status::Fail, "{d:#?}");
        assert!(d.detail.starts_with("node1: "), "{d:#?}");
    }

    #[test]
    fn tests_dcgm_skipped_are_named_after_the_verdict() {
        // Every test passed but the EUD, which DCGM skipped: PASS, and the skip is said
        // after the count, alone.
        let d = judge_diag(include_str!(
            "../../tests/fixtures/dcgm/dcgm-3.1-r3-pass.json"
        ));
        assert_eq!(d.status, Status::Pass, "{d:#?}");
        assert_eq!(d.detail, "skipped: node1: EUD Test", "{d:#?}");
        // A failure and two skipped plugins: the failure first, then the skipped ones.
        let d = judge_diag(include_str!(
            "../../tests/fixtures/dcgm/dcgm-4.5.2-r2-fail.json"
        ));
        assert_eq!(d.status, Status::Fail, "{d:#?}");
        assert!(d.detail.starts_with("node1: software"), "{d:#?}");
        assert!(
            d.detail.ends_with("; skipped: node1: memory; node1: pcie"),
            "{d:#?}"
        );
    }

    /// The per-model floors (cards/floors/gpu-floors.toml): a healthy H200 passes; one at
    /// half its memory bandwidth and one at half its FP32 rate fail, each naming the
    /// floor, the peak and its source; a model the table lacks is NOT RUN.
    #[test]
    fn model_floors_fail_a_gpu_at_half_its_bandwidth_or_flops_naming_the_source() {
        let c = GpuCriteria {
            model_floors: true,
            ..Default::default()
        };
        let judge_floors = |r: &GpuReport| {
            judge(Ok(r), None, &c, None)
                .into_iter()
                .find(|k| k.id == "gpu.model_floors")
                .unwrap()
        };
        let k = judge_floors(&healthy());
        assert_eq!(k.status, Status::Pass, "{k:#?}");
        assert_eq!(k.measured, "4 GPU(s) of known models against their floors");
        let mut r = healthy();
        r.gpus[1].copies.d2d = rate(1200.0);
        r.gpus[2].burn.as_mut().unwrap().tflops = 33.5;
        let k = judge_floors(&r);
        assert_eq!(k.status, Status::Fail, "{k:#?}");
        assert!(
            k.detail.contains("GPU 1")
                && k.detail.contains("device memory 2400.0 GB/s below its floor 3120.0 GB/s (0.65 × the peak 4800 GB/s: H200 SXM, NVIDIA H200 Tensor Core GPU product page, https://www.nvidia.com/en-us/data-center/h200/"),
            "{}",
            k.detail
        );
        assert!(
            k.detail.contains("FP32 burn 33.5 TFLOP/s below its floor 46.9 TFLOP/s (0.7 × the peak FP32 67 TFLOP/s"),
            "{}",
            k.detail
        );
        // A host link at Gen4 speed on a Gen5 GPU.
        let mut r = healthy();
        r.gpus[3].copies.h2d = rate(25.0);
        let k = judge_floors(&r);
        assert!(
            k.detail.contains("H2D copy 25.0 GB/s below its floor 44.1 GB/s (0.7 × the PCIe Gen5 x16 line rate 63.0 GB/s"),
            "{}",
            k.detail
        );
        let mut r = healthy();
        for g in &mut r.gpus {
            g.name = "NVIDIA GeForce RTX 4090".into();
        }
        let k = judge_floors(&r);
        assert_eq!(k.status, Status::NotRun, "{k:#?}");
        assert!(
            k.detail.starts_with(
                "no floors for NVIDIA GeForce RTX 4090 (cards/floors/gpu-floors.toml has H100 NVL, "
            ),
            "{}",
            k.detail
        );
    }

    fn sdc_report(
        findings: Vec<crate::results::sdc::SdcFinding>,
    ) -> crate::results::sdc::SdcReport {
        use crate::results::sdc::SdcRank;
        let ranks = (0..3)
            .map(|r| SdcRank {
                rank: r,
                host: format!("node{r}"),
                gpu: Some(0),
                model: "NVIDIA H200".into(),
                kinds: vec!["fma".into(), "memory".into()],
                disagreements: findings.iter().filter(|f| f.ranks.contains(&r)).count() as u32,
                host_check: Some(true),
                host_checks: Vec::new(),
                ..Default::default()
            })
            .collect();
        crate::results::sdc::SdcReport {
            rounds: 100,
            findings_total: findings.len() as u64,
            findings,
            ranks,
            ..Default::default()
        }
    }

    #[test]
    fn the_sdc_vote_fails_past_the_threshold_naming_each_gpu_once() {
        // No SDC rounds and no card threshold: no such criterion.
        assert!(judged(&healthy()).iter().all(|c| c.id != "gpu.sdc"));
        // A card that asks for it without rounds: NOT RUN with the reason.
        let mut c = criteria();
        c.max_sdc_disagreements = Some(0);
        let cs = judge(Ok(&healthy()), None, &c, Some(&spec()));
        assert_eq!(one(&cs, "gpu.sdc").status, Status::NotRun);
        assert!(one(&cs, "gpu.sdc").detail.contains("--sdc"));
        let f = |round: u64| crate::results::sdc::SdcFinding {
            round,
            kind: "fma".into(),
            block: 3,
            model: "NVIDIA H200".into(),
            ranks: vec![2],
            majority: true,
            voters: 3,
            t_s: 1.0,
            temp_c: Some(80),
            sm_mhz: None,
        };
        let mut r = healthy();
        r.sdc = Some(sdc_report(vec![]));
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Pass, "{k:#?}");
        assert_eq!(k.measured, "0 disagreement(s) in 100 round(s) of 3 voting rank(s); 3 of 3 GPU(s) agree with the host");
        r.sdc = Some(sdc_report(vec![f(7), f(9)]));
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Fail);
        assert!(
            k.detail.starts_with(
                "node2 GPU 0 (rank 2, PCI ) named in 2 round(s), first: round 7 fma block 3: "
            ),
            "{}",
            k.detail
        );
        assert!(
            k.detail.contains("at 80 °C") && !k.detail.contains(';'),
            "{}",
            k.detail
        );
        // A threshold of 2 lets two pass.
        let cs = judge(Ok(&r), None, &c_with(2), Some(&spec()));
        assert_eq!(one(&cs, "gpu.sdc").status, Status::Pass);
        // A GPU lost during the vote fails the criterion, with no finding at all: its
        // later rounds did not vote.
        let mut s = sdc_report(vec![]);
        s.ranks[1].gpu_lost = Some("rank 1 round 40 gemm: CUDA_ERROR_LAUNCH_FAILED".into());
        s.ranks[1].rounds_lost = 60;
        r.sdc = Some(s);
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Fail, "{k:#?}");
        assert_eq!(
            k.detail,
            "node1 GPU 0 (rank 1, PCI ): its GPU failed (rank 1 round 40 gemm: CUDA_ERROR_LAUNCH_FAILED); it did not vote in 60 round(s) after that"
        );
        // The host check fails on its own, even with every vote agreeing.
        let mut s = sdc_report(vec![]);
        s.ranks[1].host_check = Some(false);
        r.sdc = Some(s);
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Fail);
        assert!(
            k.detail
                .contains("node1 GPU 0 (rank 1, PCI ): the first round's fma output differs"),
            "{}",
            k.detail
        );
        // One GPU alone (nothing to vote against) with no host check: NOT RUN.
        let mut s = sdc_report(vec![]);
        s.ranks.truncate(1);
        s.ranks[0].host_check = None;
        r.sdc = Some(s);
        assert_eq!(one(&judged(&r), "gpu.sdc").status, Status::NotRun);
        // No GPU anywhere, SDC on CPU ranks: the vote is still judged.
        let mut cpu = GpuReport {
            error: Some("no GPU on any of the 3 rank(s)".into()),
            ..Default::default()
        };
        cpu.sdc = Some(sdc_report(vec![f(1)]));
        let cs = judged(&cpu);
        assert_eq!(one(&cs, "gpu.sdc").status, Status::Fail);
        assert_eq!(one(&cs, "gpu.measured").status, Status::NotRun);
    }

    /// The edges the mutation run found untested: more failures than are named, an
    /// absolute floor against a fraction of the topology's number (and without it),
    /// a report that measured no GPU, the PCIe threshold's text, a lone GPU with a
    /// host check, which host-check notes a failure quotes, and the count of GPUs
    /// measured.
    #[test]
    fn floors_counts_and_texts_at_their_edges() {
        // Ten GPUs fail: eight are named, the rest counted; 0 of 10 measured.
        let mut r = healthy();
        r.gpus = (0..10).map(|g| healthy_gpu("node1", g)).collect();
        for g in &mut r.gpus {
            g.error = Some("context lost".into());
        }
        let m = one(&judged(&r), "gpu.measured").clone();
        assert_eq!(m.status, Status::Fail);
        assert_eq!(m.measured, "0 of 10 GPUs");
        assert!(m.detail.ends_with("; and 2 more"), "{}", m.detail);
        assert_eq!(m.detail.matches("context lost").count(), 8);
        // One of four fails: 3 of 4 measured.
        let mut r = healthy();
        r.gpus[2].error = Some("context lost".into());
        assert_eq!(one(&judged(&r), "gpu.measured").measured, "3 of 4 GPUs");
        // The higher of the absolute floor and the fraction judges: 65 TFLOP/s over
        // 0.7 × 67 fails every GPU (60); 10 leaves the fraction's 46.9, passed.
        let mut c = criteria();
        c.min_tflops = Some(65.0);
        let t = one(
            &judge(Ok(&healthy()), None, &c, Some(&spec())),
            "gpu.tflops",
        )
        .clone();
        assert_eq!(
            (t.status, t.threshold.as_str()),
            (Status::Fail, "≥ 65 TFLOP/s")
        );
        c.min_tflops = Some(10.0);
        let t = one(
            &judge(Ok(&healthy()), None, &c, Some(&spec())),
            "gpu.tflops",
        )
        .clone();
        assert_eq!(t.status, Status::Pass);
        assert!(t.threshold.starts_with("≥ 0.7 × 67 TFLOP/s"), "{t:#?}");
        // A GPU exactly at the floor passes it (GPU 0 burns 60.0).
        c.min_tflops = Some(60.0);
        let t = one(
            &judge(Ok(&healthy()), None, &c, Some(&spec())),
            "gpu.tflops",
        )
        .clone();
        assert_eq!(
            (t.status, t.measured.as_str()),
            (Status::Pass, "lowest 60.0 TFLOP/s (node1 GPU 0)")
        );
        c.min_tflops = Some(10.0);
        // Every copy and burn value counted: 4 GPUs × (3 copies + 1000 burn values)
        // and 12 peer copies.
        assert_eq!(
            one(&judged(&healthy()), "gpu.wrong").measured,
            "0 GPU(s) or pair(s) wrong; 4024 copies and burn values checked"
        );
        // Without the topology's number the absolute floor still judges.
        let t = one(&judge(Ok(&healthy()), None, &c, None), "gpu.tflops").clone();
        assert_eq!(
            (t.status, t.threshold.as_str()),
            (Status::Pass, "≥ 10 TFLOP/s")
        );
        // A report with no error and no GPU measured nothing.
        let cs = judged(&GpuReport::default());
        assert!(
            cs.iter()
                .all(|k| k.status != Status::Pass && k.detail.contains("no GPU measured")),
            "{cs:#?}"
        );
        // The PCIe threshold names the topology's gen and width when it has them.
        let p = one(&judged(&healthy()), "gpu.pcie").clone();
        assert_eq!(
            p.threshold,
            "at the GPU's max gen and width, and ≥ Gen5 x16"
        );
        let p = one(&judge(Ok(&healthy()), None, &criteria(), None), "gpu.pcie").clone();
        assert_eq!(p.threshold, "at the GPU's max gen and width");
        // A lone GPU (no vote) with a host check is judged on it.
        let mut r = healthy();
        let mut s = sdc_report(vec![]);
        s.ranks.truncate(1);
        r.sdc = Some(s.clone());
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Pass, "{k:#?}");
        assert!(
            k.measured.contains("1 of 1 GPU(s) agree with the host"),
            "{k:#?}"
        );
        // A failed host check quotes the notes that differ, not those that agree,
        // fall within the bound or did not run.
        s.ranks[0].host_check = Some(false);
        s.ranks[0].host_checks = vec![
            "fma: equal to the host bit for bit".into(),
            "gemm: 3 element(s) differ from the host (first at row 1, column 2)".into(),
            "memory: within the bound".into(),
            "reduce: not run (pre-Ampere)".into(),
        ];
        r.sdc = Some(s);
        let k = one(&judged(&r), "gpu.sdc").clone();
        assert_eq!(k.status, Status::Fail);
        assert!(
            k.detail.ends_with(
                "the first round differs from the host (gemm: 3 element(s) differ from the host (first at row 1, column 2))"
            ),
            "{}",
            k.detail
        );
    }

    /// Boundaries the mutation run found untested: a floor reached exactly passes,
    /// two measurements are enough to compare, a burn that failed or measured nothing
    /// is not a rate, counters of another GPU are not this one's, and counters fall.
    #[test]
    fn thresholds_are_inclusive_and_two_values_are_enough_to_compare() {
        // A node of 2 GPUs (2 pairs) is judged: its slow pair is named.
        let mut r = healthy();
        r.nodes = vec![node("node1", 2, Some((0, 1)))];
        let k = one(&judged(&r), "gpu.pair_outlier").clone();
        assert_eq!(k.status, Status::Fail, "{k:#?}");
        assert_eq!(k.measured, "1 outlier(s) of 2 pairs");
        // A pair at exactly the fraction × the median is not an outlier.
        let mut r = healthy();
        for (i, p) in r.nodes[0].pairs.iter_mut().enumerate() {
            p.copy = rate(if i == 0 { 50.0 } else { 100.0 });
        }
        let mut c = criteria();
        c.pair_outlier_fraction = Some(0.5);
        let k = one(&judge(Ok(&r), None, &c, Some(&spec())), "gpu.pair_outlier").clone();
        assert_eq!(k.status, Status::Pass, "{k:#?}");
        // Spread: exactly at the bound passes; two GPUs are enough; a burn that
        // failed or measured 0 TFLOP/s is not a rate, and a failed one is named.
        let mut r = healthy();
        r.gpus.truncate(2);
        r.gpus[0].burn.as_mut().unwrap().tflops = 100.0;
        r.gpus[1].burn.as_mut().unwrap().tflops = 90.0;
        let k = one(&judged(&r), "gpu.tflops_spread").clone();
        assert_eq!(k.status, Status::Pass, "{k:#?}");
        assert!(
            k.measured.starts_with("0.100 (slowest node1 GPU 1 90.0"),
            "{k:#?}"
        );
        let mut r = healthy();
        r.gpus[3].burn.as_mut().unwrap().tflops = 0.0;
        let b = r.gpus[2].burn.as_mut().unwrap();
        b.tflops = 1.0;
        b.error = Some("launch failed".into());
        let cs = judged(&r);
        let k = one(&cs, "gpu.tflops_spread");
        assert_eq!(k.status, Status::Pass, "only GPUs 0 and 1 burned: {k:#?}");
        let k = one(&cs, "gpu.tflops");
        assert_eq!(k.status, Status::Fail, "{k:#?}");
        assert_eq!(k.detail, "node1 GPU 2: burn failed: launch failed");
        // Throttling exactly at the bound passes; GPUs without samples are not judged.
        let mut r = healthy();
        r.gpus[1].throttle.as_mut().unwrap().throttled_share = 0.05;
        assert_eq!(one(&judged(&r), "gpu.throttle").status, Status::Pass);
        for g in &mut r.gpus {
            g.throttle.as_mut().unwrap().samples = 0;
        }
        assert_eq!(one(&judged(&r), "gpu.throttle").status, Status::NotRun);
        // Counters of a GPU with the same host but another UUID are not this one's.
        let mut after = healthy();
        after.gpus[0].uuid = "GPU-other".into();
        let a = after.gpus[0].counters_after.as_mut().unwrap();
        a.ecc_volatile_uncorrected = Some(9);
        let cs = judge(Ok(&healthy()), Some(&after), &criteria(), Some(&spec()));
        assert_eq!(one(&cs, "gpu.errors").status, Status::Pass);
        // XIDs listened to without counters (and counters without XIDs) are judged.
        let mut r = healthy();
        for g in &mut r.gpus {
            g.counters_before = None;
            g.counters_after = None;
        }
        assert_eq!(one(&judged(&r), "gpu.errors").status, Status::Pass);
        let mut r = healthy();
        for g in &mut r.gpus {
            g.xid_listening = false;
        }
        assert_eq!(one(&judged(&r), "gpu.errors").status, Status::Pass);
    }

    #[test]
    fn counters_that_rise_are_named_by_how_much_and_falling_ones_are_not() {
        let before = ErrorCounters {
            ecc_volatile_uncorrected: Some(2),
            retired_pages_dbe: Some(0),
            remapped_rows_uncorrected: Some(1),
            ecc_aggregate_corrected: Some(7),
            ..Default::default()
        };
        let after = ErrorCounters {
            ecc_volatile_uncorrected: Some(5),
            retired_pages_dbe: Some(2),
            remapped_rows_uncorrected: Some(3),
            ecc_aggregate_corrected: Some(4),
            ..Default::default()
        };
        let (fatal, notes) = counter_changes(&before, &after);
        assert_eq!(
            fatal,
            [
                "3 new uncorrected ECC error(s)",
                "2 page(s) newly retired for double-bit errors",
                "2 row(s) newly remapped for uncorrected errors",
            ]
        );
        assert!(
            notes.is_empty(),
            "a counter that fell is no news: {notes:?}"
        );
        let (fatal, _) = counter_changes(&after, &before);
        assert!(fatal.is_empty(), "{fatal:?}");
    }

    fn c_with(max: u64) -> GpuCriteria {
        let mut c = criteria();
        c.max_sdc_disagreements = Some(max);
        c
    }
}
