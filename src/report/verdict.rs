//! The verdict: every criterion of the card judged from the results folder's JSON.
//!
//! Pure: a [`RunData`] in, a list of [`Criterion`] out, so `burnin run` (at the end of
//! the run) and `burnin report` (later, anywhere) reach the same verdict. A criterion
//! is PASS, FAIL or NOT RUN:
//! - a phase that crashed, timed out or was interrupted fails all its criteria (the
//!   measured value is still shown when there is one);
//! - a phase that was not available (e.g. `burnin chaos` missing from this build) or
//!   not selected (`--phases`) leaves its criteria NOT RUN, which is not a failure;
//! - a folder without a card (a bare `burnin sweep --out` folder) is judged by the
//!   defaults: zero wrong elements, no outlier, and the topology's own `min_fraction`.
use super::data::{ChaosTrial, ProbeRow, RunData, SweepData, TrainData};
use crate::card::{Card, ChaosCriteria, SweepCriteria, TrainCriteria};
use crate::kinds::CollKind;
use crate::kinds::TierKind;
pub use crate::results::acceptance::{Criterion, Status};
use crate::results::analysis::{Analysis, TierResult};
use crate::results::train::TrainReport;
use crate::sweep::analysis::{analyze, Rules};
use crate::topology::file::Topology;
use crate::units::Bytes;

use super::criteria::{count_wrong, crit, gate, gated, Gate};

/// The criteria a folder without a card is judged by.
pub fn default_card(data: &RunData) -> Card {
    let topo_frac = data.topology().map(|t| t.acceptance.min_fraction);
    Card {
        name: data.name(),
        description: "no card: judged by burnin's defaults".into(),
        topology: None,
        launch: None,
        backend: None,
        step_timeout_s: None,
        cost: None,
        probe: None,
        gpu: data
            .gpu
            .as_ref()
            .map(|_| crate::card::GpuPhaseSpec::default()),
        replay: data.replay.as_ref().map(|r| crate::card::ReplaySpec {
            trace: r.trace_files.iter().map(std::path::PathBuf::from).collect(),
            criteria: crate::card::ReplayCriteria {
                max_slowdown: r.max_slowdown,
                zero_wrong: true,
            },
            ..Default::default()
        }),
        sweep: data.sweep.as_ref().map(|_| crate::card::SweepSpec {
            collectives: vec![],
            tiers: vec![],
            min_bytes: Bytes(1),
            max_bytes: Bytes(1),
            step_factor: None,
            budget_s: None,
            warmup: None,
            iters: None,
            placement: None,
            dtype: None,
            args: vec![],
            timeout_s: None,
            fabric: None,
            oversubscription: None,
            fabric_map: false,
            criteria: SweepCriteria {
                min_fraction_of_expected: topo_frac,
                ..Default::default()
            },
        }),
        train: data.train.as_ref().map(|_| crate::card::TrainSpec {
            steps: 1,
            ckpt_every: None,
            ckpt_bytes: None,
            ckpt_dir: None,
            keep_checkpoints: false,
            preset: None,
            args: vec![],
            timeout_s: None,
            criteria: TrainCriteria {
                resume_parity: false,
                ..Default::default()
            },
        }),
        chaos: data.chaos.as_ref().map(|_| crate::card::ChaosSpec {
            kinds: vec![],
            trials: 1,
            args: vec![],
            command: None,
            keep_checkpoints: false,
            timeout_s: None,
            criteria: ChaosCriteria::default(),
        }),
        soak: data.soaked().map(|s| soak_defaults(s.report.as_ref())),
    }
}

/// A bare soak's criteria: the thresholds it ran with.
fn soak_defaults(r: Option<&crate::results::sweep::SweepReport>) -> crate::card::SoakSpec {
    let soak = r.and_then(|r| r.soak.as_ref());
    crate::card::SoakSpec {
        duration_s: soak.map(|s| s.duration_s).unwrap_or(1.0),
        bytes: None,
        collectives: None,
        tiers: None,
        budget_s: None,
        iters: None,
        dtype: None,
        args: vec![],
        timeout_s: None,
        criteria: crate::card::SoakCriteria {
            max_drift: soak.map(|s| s.max_drift).unwrap_or(0.9),
            max_pass_cv: soak.and_then(|s| s.max_pass_cv),
            drift_window_s: soak.and_then(|s| s.drift_window_s),
            zero_wrong: true,
        },
    }
}

/// Judge every criterion of the run's card (or of [`default_card`]).
pub fn judge(data: &RunData) -> Vec<Criterion> {
    let fallback;
    let card = match data.card() {
        Some(c) => c,
        None => {
            fallback = default_card(data);
            &fallback
        }
    };
    let mut out = Vec::new();
    if card.probe.is_some() {
        out.extend(judge_probe(data, card));
    }
    if let Some(g) = &card.gpu {
        out.extend(judge_gpu(data, &g.criteria));
    }
    if let Some(s) = &card.sweep {
        out.extend(judge_sweep(data, &s.criteria));
    }
    if let Some(r) = &card.replay {
        out.extend(judge_replay(data, &r.criteria));
    }
    if let Some(t) = &card.train {
        out.extend(judge_train(data, &t.criteria));
    }
    if let Some(c) = &card.chaos {
        out.extend(judge_chaos(data, &c.criteria));
    }
    if let Some(k) = &card.soak {
        out.extend(super::soak::judge(data, &k.criteria));
    }
    out
}

/// The nodes' GPUs, NVLinks and NICs against the topology file (node and rank counts
/// have criteria of their own).
fn fabric_criterion(rows: &[ProbeRow], t: &Topology) -> Criterion {
    let mut c = crit(
        "probe.fabric",
        "probe",
        "GPUs, NVLinks and NICs of every node as the topology declares".into(),
        format!("no difference from {}", t.name),
    );
    let views = crate::fabric::views_by_node(
        rows,
        |r| r.node,
        |r| r.host.as_str(),
        |r| r.fabric.as_ref(),
        |r| r.cuda_gpus.clone(),
    );
    let d: Vec<String> = crate::fabric::compare(t, &views)
        .into_iter()
        .filter(|d| d.what != "nodes" && d.what != "ranks")
        .map(|d| d.text)
        .collect();
    if d.is_empty() {
        c.measured = format!("{} node(s) match", views.len());
        c.status = Status::Pass;
    } else {
        c.measured = format!("{} difference(s)", d.len());
        c.detail = d.iter().take(8).cloned().collect::<Vec<_>>().join("; ");
    }
    c
}

/// `probe.ranks_per_node`: every node runs `want` ranks.
fn ranks_per_node_criterion(
    rows: &[ProbeRow],
    nodes: &[crate::kinds::Node],
    want: usize,
) -> Criterion {
    let mut c = crit(
        "probe.ranks_per_node",
        "probe",
        "ranks on every node".into(),
        format!("= {want}"),
    );
    if !rows.is_empty() {
        let off: Vec<String> = nodes
            .iter()
            .filter(|n| n.ranks.len() != want)
            .map(|n| format!("{}: {}", n.host, n.ranks.len()))
            .collect();
        if off.is_empty() {
            c.measured = format!("{want} on all {} node(s)", nodes.len());
            c.status = Status::Pass;
        } else {
            c.measured = off.join(", ");
            c.status = Status::Fail;
        }
    }
    c
}

/// `probe.gpu_model`: every rank's GPU name contains `model`.
fn gpu_model_criterion(rows: &[ProbeRow], model: &str) -> Criterion {
    let mut c = crit(
        "probe.gpu_model",
        "probe",
        "every rank has its own GPU of the expected model".into(),
        format!("name contains \"{model}\""),
    );
    if !rows.is_empty() {
        let bad: Vec<String> = rows
            .iter()
            .filter(|r| !r.gpu.as_deref().is_some_and(|g| g.contains(model)))
            .map(|r| {
                format!(
                    "rank {} ({}): {}",
                    r.rank,
                    r.host,
                    r.gpu.as_deref().unwrap_or("no GPU")
                )
            })
            .collect();
        c.measured = format!("{}/{} rank(s) match", rows.len() - bad.len(), rows.len());
        c.status = if bad.is_empty() {
            Status::Pass
        } else {
            Status::Fail
        };
        if let Some(first) = bad.first() {
            c.detail = format!("first mismatch: {first}");
        }
    }
    c
}

/// The probe criteria: it ran, node and rank counts, the fabric and the GPU model.
fn judge_probe(data: &RunData, card: &Card) -> Vec<Criterion> {
    let g = gate(data, "probe");
    let topo = data.topology();
    let crit_spec = card
        .probe
        .as_ref()
        .map(|p| p.criteria.clone())
        .unwrap_or_default();
    let rows = data.probe.as_deref().unwrap_or(&[]);
    let nodes = data.nodes();
    let mut out = Vec::new();
    let mut c = crit(
        "probe.ran",
        "probe",
        "every rank started and reported".into(),
        "probe.json with every rank".into(),
    );
    if !rows.is_empty() {
        c.measured = format!("{} rank(s) on {} node(s)", rows.len(), nodes.len());
        c.status = Status::Pass;
    }
    out.push(gated(&g, c));
    if let Some(want) = crit_spec.nodes.or(topo.and_then(|t| t.node.count)) {
        let mut c = crit(
            "probe.nodes",
            "probe",
            "nodes in the job".into(),
            format!("= {want}"),
        );
        if !rows.is_empty() {
            c.measured = nodes.len().to_string();
            c.status = if nodes.len() == want {
                Status::Pass
            } else {
                Status::Fail
            };
        }
        out.push(gated(&g, c));
    }
    if let Some(want) = crit_spec
        .ranks_per_node
        .or(topo.map(|t| t.ranks_per_node()))
    {
        out.push(gated(&g, ranks_per_node_criterion(rows, &nodes, want)));
    }
    if let (Some(t), true) = (topo, rows.iter().any(|r| r.fabric.is_some())) {
        out.push(gated(&g, fabric_criterion(rows, t)));
    }
    let model = crit_spec.gpu_model.clone().or_else(|| {
        topo.filter(|t| t.node.gpus > 0)
            .and_then(|t| t.node.gpu_model.clone())
    });
    if let Some(model) = model {
        out.push(gated(&g, gpu_model_criterion(rows, &model)));
    }
    out
}

/// The sweep judged by the card's rules (the same pure analysis `burnin sweep` runs,
/// with the card's message size and fractions), over the tiers the card judges.
pub fn sweep_analysis(data: &RunData, sweep: &SweepData, c: &SweepCriteria) -> Analysis {
    let topo = data.topology();
    let mut rules = Rules::from(topo, c.outlier_fraction, c.min_fraction_of_expected);
    if let Some(b) = c.at_bytes {
        rules.large_message = Some(b.get());
    }
    rules.fabric = sweep.report.as_ref().and_then(|r| r.fabric.clone());
    let hosts: Vec<String> = data.nodes().into_iter().map(|n| n.host).collect();
    let judged: Vec<&str> = c
        .judge_tiers
        .iter()
        .filter_map(|t| TierKind::parse(t).map(|k| k.name()))
        .collect();
    if judged.is_empty() {
        return analyze(&sweep.points, topo, &rules, &hosts);
    }
    let points: Vec<crate::results::sweep::Point> = sweep
        .points
        .iter()
        .filter(|p| judged.contains(&p.tier.name()))
        .cloned()
        .collect();
    analyze(&points, topo, &rules, &hosts)
}

/// Every tier analysed by the card's rules, judged or not (for display).
pub fn sweep_analysis_all(data: &RunData, sweep: &SweepData, c: &SweepCriteria) -> Analysis {
    let all = SweepCriteria {
        judge_tiers: Vec::new(),
        ..c.clone()
    };
    sweep_analysis(data, sweep, &all)
}

fn judge_sweep(data: &RunData, c: &SweepCriteria) -> Vec<Criterion> {
    let g = gate(data, "sweep");
    let j = SweepJudge::new(data, c);
    let mut out = vec![gated(&g, j.complete())];
    for (tier, floor) in &c.min_busbw_gbps {
        out.push(gated(&g, j.busbw(tier, *floor)));
    }
    if let Some(frac) = c.min_fraction_of_expected {
        out.extend(j.expected(&g, frac));
    }
    if c.no_outlier {
        out.push(gated(&g, j.no_outlier()));
    }
    if let Some(k) = judge_transport(data, c) {
        out.push(gated(&g, k));
    }
    for k in super::fabric::criteria(data, c) {
        out.push(gated(&g, k));
    }
    if c.zero_wrong {
        out.push(gated(&g, j.zero_wrong()));
    }
    out
}

/// What the sweep's criteria read: the collective they judge, the message size in
/// words, the sweep (when it left anything) and its analysis by the card's rules.
struct SweepJudge<'a> {
    data: &'a RunData,
    coll: CollKind,
    at: String,
    sweep: Option<&'a SweepData>,
    analysis: Option<Analysis>,
}

impl<'a> SweepJudge<'a> {
    fn new(data: &'a RunData, c: &SweepCriteria) -> Self {
        let sweep = data.sweep.as_ref();
        SweepJudge {
            data,
            coll: CollKind::parse(&c.collective).unwrap_or(CollKind::AllReduce),
            at: c
                .at_bytes
                .map(|b| format!("at ≥ {b}"))
                .unwrap_or_else(|| "at the largest size".into()),
            sweep,
            analysis: sweep.map(|s| sweep_analysis(data, s, c)),
        }
    }

    /// The analysed tiers of the judged collective.
    fn tiers(&self) -> impl Iterator<Item = &TierResult> {
        self.analysis
            .iter()
            .flat_map(|a| a.tiers.iter())
            .filter(move |t| t.collective == self.coll)
    }

    /// Completeness: a sweep without run.json did not finish.
    fn complete(&self) -> Criterion {
        let mut done = crit(
            "sweep.complete",
            "sweep",
            "the sweep measured every planned size and tier".into(),
            "finished (run.json)".into(),
        );
        if let Some(s) = self.sweep {
            if s.finished() {
                done.measured = format!("{} point(s), finished", s.points.len());
                done.status = Status::Pass;
            } else {
                done.measured = format!("{} point(s), did not finish", s.points.len());
            }
        }
        done
    }

    /// `min_busbw_gbps`: the slowest group of `tier` against its floor.
    fn busbw(&self, tier: &str, floor: f64) -> Criterion {
        let coll = self.coll;
        let tier = TierKind::parse(tier).map(|k| k.name()).unwrap_or(tier);
        let mut k = crit(
            &format!("sweep.busbw.{tier}"),
            "sweep",
            format!("{coll} busbw {}, tier {tier} (slowest group)", self.at),
            format!("≥ {floor} GB/s"),
        );
        let slowest = self
            .tiers()
            .filter(|t| t.tier.name() == tier)
            .flat_map(|t| t.groups.iter())
            .min_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps));
        if let Some(wg) = slowest {
            k.measured = format!(
                "{:.3} GB/s ({} at {})",
                wg.busbw_gbps,
                wg.label,
                Bytes(wg.bytes)
            );
            k.status = if wg.busbw_gbps >= floor {
                Status::Pass
            } else {
                Status::Fail
            };
        } else if self.sweep.is_some() {
            k.measured = "not measured".into();
        }
        k
    }

    /// `min_fraction_of_expected`: one criterion per tier the topology expects a
    /// number of (NOT RUN without a topology, FAIL when no such tier was measured).
    fn expected(&self, g: &Gate, frac: f64) -> Vec<Criterion> {
        let coll = self.coll;
        let judged: Vec<&TierResult> = self.tiers().filter(|t| t.expected_gbps.is_some()).collect();
        let mut out = Vec::new();
        let whole = || {
            crit(
                "sweep.expected",
                "sweep",
                format!("{coll} busbw {} vs the topology's expectation", self.at),
                format!("≥ {:.0}% of expected", frac * 100.0),
            )
        };
        if self.data.topology().is_none() {
            let mut k = whole();
            k.status = Status::NotRun;
            k.measured = "-".into();
            k.detail = "no topology file to expect anything from".into();
            out.push(k);
        }
        if judged.is_empty() && self.data.topology().is_some() {
            let mut k = whole();
            if self.sweep.is_some() {
                k.measured = "no tier with an expectation measured".into();
            }
            out.push(gated(g, k));
        }
        let mut seen: Vec<&str> = Vec::new();
        for t in &judged {
            if seen.contains(&t.tier.name()) {
                continue;
            }
            seen.push(t.tier.name());
            out.push(gated(g, self.expected_tier(&judged, t, frac)));
        }
        out
    }

    /// The worst of tier `t`'s (type, op, placement) results against the topology.
    fn expected_tier(&self, judged: &[&TierResult], t: &TierResult, frac: f64) -> Criterion {
        let coll = self.coll;
        let worst = judged
            .iter()
            .filter(|x| x.tier == t.tier)
            .min_by(|a, b| {
                a.worst_vs_expected
                    .unwrap_or(0.0)
                    .total_cmp(&b.worst_vs_expected.unwrap_or(0.0))
            })
            .copied()
            .unwrap_or(t);
        let expected = worst.expected_gbps.unwrap_or(0.0);
        let ratio = worst.worst_vs_expected.unwrap_or(0.0);
        let wg = worst.slowest_group();
        let mut k = crit(
            &format!("sweep.expected.{}", t.tier),
            "sweep",
            format!("{coll} busbw {}, tier {} vs the topology", self.at, t.tier),
            format!("≥ {:.0}% of {expected:.3} GB/s", frac * 100.0),
        );
        k.measured = format!(
            "{:.0}% ({:.3} GB/s{})",
            ratio * 100.0,
            wg.map(|g| g.busbw_gbps).unwrap_or(0.0),
            wg.map(|g| format!(", {}", g.label)).unwrap_or_default()
        );
        k.status = if ratio >= frac {
            Status::Pass
        } else {
            Status::Fail
        };
        k
    }

    /// `no_outlier`: no node, pair or rail named by the analysis.
    fn no_outlier(&self) -> Criterion {
        let mut k = crit(
            "sweep.no_outlier",
            "sweep",
            "no slow node or link (groups vs their tier's median)".into(),
            "none named".into(),
        );
        if let Some(a) = &self.analysis {
            let named: Vec<&crate::results::analysis::Finding> = a
                .findings
                .iter()
                .filter(|f| !f.subject.starts_with("tier "))
                .collect();
            if named.is_empty() {
                // What "none" covers: the groups each tier compared with its median.
                let mut seen: Vec<(String, usize)> = Vec::new();
                for t in &a.tiers {
                    let name = t.tier.to_string();
                    match seen.iter_mut().find(|(n, _)| *n == name) {
                        Some(e) => e.1 = e.1.max(t.groups.len()),
                        None => seen.push((name, t.groups.len())),
                    }
                }
                let compared: Vec<String> = seen
                    .iter()
                    .filter(|(_, g)| *g >= 2)
                    .map(|(n, g)| format!("{g} {n} groups"))
                    .collect();
                k.measured = if compared.is_empty() {
                    "none, but no tier ran two or more groups to compare".into()
                } else {
                    format!("none among {}", compared.join(", "))
                };
                k.status = Status::Pass;
            } else {
                let mut subjects: Vec<String> = Vec::new();
                for f in &named {
                    if !subjects.contains(&f.subject) {
                        subjects.push(f.subject.clone());
                    }
                }
                k.measured = format!("outlier: {}", subjects.join(", "));
                k.detail = named[0].text.clone();
                k.status = Status::Fail;
            }
        }
        k
    }

    /// `zero_wrong`: every checked element right.
    fn zero_wrong(&self) -> Criterion {
        let mut k = crit(
            "sweep.zero_wrong",
            "sweep",
            "every element of every checked result is right".into(),
            "0 wrong".into(),
        );
        let Some(s) = self.sweep else { return k };
        if !count_wrong(&mut k, &s.points) {
            return k;
        }
        if let Some(p) = s.points.iter().find(|p| p.wrong.unwrap_or(0) > 0) {
            k.detail = format!(
                "first: {} {} {} on {}, group ranks {:?}",
                p.collective,
                p.dtype,
                Bytes(p.bytes),
                p.label,
                p.wrong_ranks.iter().map(|w| w.0).collect::<Vec<_>>()
            );
        }
        k
    }
}

/// Whether the topology declares an RDMA fabric between nodes (the fabric criterion
/// is then on by default).
pub fn declares_rdma(topo: Option<&crate::topology::file::Topology>) -> bool {
    topo.and_then(|t| t.inter.as_ref())
        .and_then(|i| i.nic_kind.as_deref())
        .is_some_and(|k| {
            matches!(
                k.to_ascii_lowercase().as_str(),
                "infiniband" | "ib" | "roce" | "efa" | "slingshot" | "cxi"
            )
        })
}

/// `nccl_transport_required`: inter-node NCCL traffic over NET/IB on enough HCAs.
fn judge_transport(data: &RunData, c: &SweepCriteria) -> Option<Criterion> {
    let topo = data.topology();
    if !c.nccl_transport_required.unwrap_or(declares_rdma(topo)) {
        return None;
    }
    let inter = topo.and_then(|t| t.inter.as_ref());
    let nics = inter.and_then(|i| i.nics);
    let fabric = crate::transport::Fabric::from_nic_kind(inter.and_then(|i| i.nic_kind.as_deref()));
    let mut k = crit(
        "sweep.nccl_transport",
        "sweep",
        format!(
            "inter-node NCCL traffic over the RDMA fabric ({}, not NET/Socket), every host",
            fabric.shown()
        ),
        match nics {
            Some(n) => format!("{} on ≥ {n} adapter(s) per host", fabric.shown()),
            None => fabric.shown().into(),
        },
    );
    if let Some(s) = &data.sweep {
        let rep = s.report.as_ref().and_then(|r| r.transport.as_ref());
        let j = crate::transport::judge_nccl_fabric(rep, nics, fabric);
        k.measured = j.measured;
        k.detail = j.detail;
        k.status = match j.status {
            crate::transport::FabricStatus::Pass => Status::Pass,
            crate::transport::FabricStatus::Fail => Status::Fail,
            crate::transport::FabricStatus::NotApplicable => Status::NotRun,
        };
    }
    Some(k)
}

fn finished_ok(t: Option<&TrainData>) -> Option<&TrainReport> {
    t.and_then(|t| t.run.as_ref())
}

/// The GPU phase: its criteria over gpu.json (NOT RUN with the reason when it measured
/// no GPU), the error counters compared up to the re-read at the end of the run.
fn judge_gpu(data: &RunData, c: &crate::card::GpuCriteria) -> Vec<Criterion> {
    let g = gate(data, "gpu");
    let expect = data.topology().and_then(|t| t.gpu.as_ref());
    let report = data
        .gpu
        .as_ref()
        .map(|d| &d.report)
        .ok_or_else(|| "no gpu.json".to_string());
    let after = data.gpu.as_ref().and_then(|d| d.after.as_ref());
    crate::results::gpu_analysis::judge(report, after, c, expect)
        .into_iter()
        .map(|k| gated(&g, k))
        .collect()
}

/// The replay phase: its checked step's values, and its step against the source's.
fn judge_replay(data: &RunData, c: &crate::card::ReplayCriteria) -> Vec<Criterion> {
    let g = gate(data, "replay");
    let r = data.replay.as_ref();
    let mut out = Vec::new();
    if c.zero_wrong {
        let mut k = crit(
            "replay.zero_wrong",
            "replay",
            "every element of the replayed step's results right".into(),
            "0 wrong".into(),
        );
        match r.map(|r| (r.wrong, r)) {
            None => k.detail = "no replay.json".into(),
            Some((None, _)) => {
                k.status = Status::NotRun;
                k.measured = "-".into();
                k.detail = "the replay ran without checking (--check 0)".into();
            }
            Some((Some(w), r)) => {
                k.measured = format!("{w} wrong");
                k.status = if w == 0 { Status::Pass } else { Status::Fail };
                // What was covered: every element of one step's calls on every rank.
                let calls: usize = r.calls_per_step.iter().sum();
                let covered = format!(
                    "checked every element of one step: {calls} call(s) over {} rank(s)",
                    r.ranks
                );
                k.detail = if w == 0 {
                    covered
                } else {
                    format!("{}; {covered}", r.wrong_calls.join("; "))
                };
            }
        }
        out.push(gated(&g, k));
    }
    if let Some(max) = c.max_slowdown {
        let mut k = crit(
            "replay.max_slowdown",
            "replay",
            "a step of the job's own collectives, here against the source cluster".into(),
            format!("<= {max}x the source's time"),
        );
        match r {
            None => k.detail = "no replay.json".into(),
            Some(r) if !r.not_comparable.is_empty() => {
                k.status = Status::NotRun;
                k.measured = "-".into();
                k.detail = format!(
                    "NOT COMPARABLE: the trace is not the whole job ({})",
                    r.not_comparable.join("; ")
                );
            }
            Some(r) => match (r.slowdown, r.source_step_us) {
                (Some(x), Some(src)) => {
                    k.measured =
                        format!("{x:.2}x ({:.1} us here, {src:.1} us there)", r.step.p50_us);
                    k.status = if x <= max { Status::Pass } else { Status::Fail };
                    k.detail = crate::results::replay::worst_call(r)
                        .map(|w| format!("adds most: {w}"))
                        .unwrap_or_default();
                }
                _ => {
                    k.status = Status::NotRun;
                    k.measured = "-".into();
                    k.detail = "the trace has no source times (an NCCL COLL log has none): give the card a baseline (the source's replay.json) or a Flight Recorder dump with durations".into();
                }
            },
        }
        out.push(gated(&g, k));
    }
    out
}

fn judge_train(data: &RunData, c: &TrainCriteria) -> Vec<Criterion> {
    let g = gate(data, "train");
    let run = finished_ok(data.train.as_ref());
    let mut out = vec![gated(&g, train_completes(data, run))];
    if let Some(floor) = c.min_ckpt_write_gbps {
        out.push(gated(&g, train_ckpt_write(data, run, floor)));
    }
    if let Some(ceil) = c.max_step_p50_ms {
        out.push(gated(&g, train_step_p50(run, ceil)));
    }
    if let Some(floor) = c.min_comm_efficiency {
        out.push(gated(&g, train_comm_efficiency(data, run, floor)));
    }
    if c.resume_parity {
        let k = train_resume_parity(data, run);
        // Both halves of the resumed pair must have run too.
        let g2 = match (gate(data, "train-part"), gate(data, "train-resume")) {
            (Gate::Crashed(w), _) | (_, Gate::Crashed(w)) => Gate::Crashed(w),
            (Gate::NotRun(w), _) | (_, Gate::NotRun(w)) => Gate::NotRun(w),
            _ => Gate::Judge,
        };
        let k = gated(&g2, k);
        out.push(if k.status == Status::NotRun {
            k
        } else {
            gated(&g, k)
        });
    }
    out
}

/// The run reached its last (planned) step with no problem and agreeing replicas.
fn train_completes(data: &RunData, run: Option<&TrainReport>) -> Criterion {
    let planned = data.card().and_then(|c| c.train.as_ref()).map(|t| t.steps);
    let mut k = crit(
        "train.completes",
        "train",
        "training runs to its last step: finite loss, replicas agree".into(),
        match planned {
            Some(n) => format!("{n} steps, no problem"),
            None => "no problem".into(),
        },
    );
    if let Some(r) = run {
        k.measured = format!(
            "{} step(s){}{}",
            r.steps_run,
            if r.replicas_agree {
                ", replicas agree"
            } else {
                ", replicas DIFFER"
            },
            if r.problems.is_empty() {
                String::new()
            } else {
                format!(", {} problem(s)", r.problems.len())
            }
        );
        let enough = planned.map_or(true, |n| r.last_step >= n);
        k.status = if r.problems.is_empty() && r.replicas_agree && enough {
            Status::Pass
        } else {
            Status::Fail
        };
        if let Some(p) = r.problems.first() {
            k.detail = p.clone();
        }
    } else if let Some(t) = &data.train {
        k.measured = format!("{} step(s), did not finish", t.steps.len());
    }
    k
}

/// `min_ckpt_write_gbps`: the run's aggregate, else the median of its checkpoints.
fn train_ckpt_write(data: &RunData, run: Option<&TrainReport>, floor: f64) -> Criterion {
    let mut k = crit(
        "train.ckpt_write",
        "train",
        "checkpoint write, all ranks together (median over checkpoints)".into(),
        format!("≥ {floor} GB/s"),
    );
    let measured = run
        .and_then(|r| r.storage.as_ref())
        .and_then(|s| s.ckpt_write_gbps)
        .or_else(|| {
            let c = data.train.as_ref()?.checkpoints();
            (!c.is_empty())
                .then(|| crate::stats::median(&c.iter().map(|c| c.write_gbps).collect::<Vec<_>>()))
        });
    if let Some(v) = measured {
        k.measured = format!("{v:.3} GB/s");
        k.status = if v >= floor {
            Status::Pass
        } else {
            Status::Fail
        };
    }
    k
}

/// `max_step_p50_ms`: the median step time.
fn train_step_p50(run: Option<&TrainReport>, ceil: f64) -> Criterion {
    let mut k = crit(
        "train.step_p50",
        "train",
        "median step time (slowest rank per step)".into(),
        format!("≤ {ceil} ms"),
    );
    if let Some(r) = run.filter(|r| r.steps_run > 0) {
        let ms = r.step_time.p50_us / 1e3;
        k.measured = format!("{ms:.2} ms");
        k.status = if ms <= ceil {
            Status::Pass
        } else {
            Status::Fail
        };
    }
    k
}

/// `min_comm_efficiency`: the gradient all-reduce against the sweep at its size.
fn train_comm_efficiency(data: &RunData, run: Option<&TrainReport>, floor: f64) -> Criterion {
    let mut k = crit(
        "train.comm_efficiency",
        "train",
        "gradient all-reduce busbw at the bucket size / the sweep's world all_reduce busbw at that size"
            .into(),
        format!("≥ {floor}"),
    );
    match (run, data.comm_efficiency()) {
        (Some(_), Some(e)) => {
            k.measured = format!(
                "{:.2} ({:.3} / {:.3} GB/s at {})",
                e.ratio,
                e.train_busbw_gbps,
                e.sweep_busbw_gbps,
                crate::units::Bytes(e.bytes)
            );
            if e.sweep_bytes.len() > 1 {
                k.detail = format!(
                    "sweep busbw interpolated between {} and {}",
                    crate::units::Bytes(e.sweep_bytes[0]),
                    crate::units::Bytes(e.sweep_bytes[1])
                );
            }
            k.status = if e.ratio >= floor {
                Status::Pass
            } else {
                Status::Fail
            };
        }
        (Some(r), None) => {
            k.detail = match (r.allreduce.iter().max_by_key(|b| b.buckets), &data.sweep) {
                (None, _) => "the training recorded no gradient all-reduce times".into(),
                (Some(_), None) => "needs the sweep phase".into(),
                (Some(b), Some(_)) => format!(
                    "the sweep's world all_reduce sizes do not reach the bucket size {}",
                    crate::units::Bytes(b.bytes)
                ),
            };
        }
        _ => {}
    }
    k
}

/// `resume_parity`: the resumed run's weights and losses against the uninterrupted
/// run's (not gated: the caller gates it by all three jobs).
fn train_resume_parity(data: &RunData, full: Option<&TrainReport>) -> Criterion {
    let mut k = crit(
        "train.resume_parity",
        "train",
        "a run stopped at a checkpoint and resumed matches the uninterrupted run".into(),
        "same final weights (sha256) and losses".into(),
    );
    let resumed = finished_ok(data.train_resume.as_ref());
    let (Some(a), Some(b)) = (full, resumed) else {
        return k;
    };
    let from = b.resumed.as_ref().map(|r| r.step);
    let tail: Vec<f64> = match from {
        Some(s) => a.losses.iter().skip(s as usize).copied().collect(),
        None => Vec::new(),
    };
    let same_sha =
        !a.final_weights_sha256.is_empty() && a.final_weights_sha256 == b.final_weights_sha256;
    let same_loss = from.is_some()
        && tail.len() == b.losses.len()
        && tail
            .iter()
            .zip(&b.losses)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    k.measured = match (from, same_sha, same_loss) {
        (None, _, _) => "the second run did not resume from a checkpoint".into(),
        (Some(s), true, true) => format!(
            "resumed at step {s}: weights and {} loss(es) identical",
            b.losses.len()
        ),
        (Some(s), sha, loss) => format!(
            "resumed at step {s}: weights {}, losses {}",
            if sha { "identical" } else { "DIFFER" },
            if loss { "identical" } else { "DIFFER" }
        ),
    };
    k.status = if from.is_some() && same_sha && same_loss {
        Status::Pass
    } else {
        Status::Fail
    };
    k
}

fn judge_chaos(data: &RunData, c: &ChaosCriteria) -> Vec<Criterion> {
    let g = gate(data, "chaos");
    let trials = data
        .chaos
        .as_ref()
        .map(|c| c.trials.as_slice())
        .unwrap_or(&[]);
    let mut out = vec![gated(&g, chaos_ran(data, trials))];
    let times: [(&str, &str, Option<f64>, TrialTime); 2] = [
        (
            "chaos.detect",
            "time from the fault to its detection (worst trial)",
            c.max_detect_s,
            |t| t.detect_s,
        ),
        (
            "chaos.recovery",
            "time from the fault to the first step after the restart (worst trial)",
            c.max_recovery_s,
            |t| t.recovery_s,
        ),
    ];
    for (id, what, ceil, f) in times {
        let Some(ceil) = ceil else { continue };
        let mut k = crit(id, "chaos", what.into(), format!("≤ {ceil} s"));
        if let Some((v, i, missing)) = worst_trial(trials, f) {
            k.measured = format!("{v:.2} s (trial {})", i + 1);
            k.status = if v <= ceil && missing == 0 {
                Status::Pass
            } else {
                Status::Fail
            };
            if missing > 0 {
                k.detail = format!("{missing} trial(s) without this measurement");
            }
        } else if data.chaos.is_some() {
            k.measured = "not measured".into();
        }
        out.push(gated(&g, k));
    }
    if c.recovered_parity {
        out.push(gated(&g, chaos_parity(data, trials)));
    }
    if c.no_hang {
        out.push(gated(&g, chaos_no_hang(data, trials)));
    }
    out
}

/// One time a trial measures (detection, recovery), when it does.
type TrialTime = fn(&ChaosTrial) -> Option<f64>;

/// The largest of `f` over the trials: (value, trial index, trials without it).
fn worst_trial(trials: &[ChaosTrial], f: TrialTime) -> Option<(f64, usize, usize)> {
    let vals: Vec<(f64, usize)> = trials
        .iter()
        .filter_map(|t| Some((f(t)?, t.index)))
        .collect();
    let missing = trials.len() - vals.len();
    vals.into_iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(v, i)| (v, i, missing))
}

fn chaos_ran(data: &RunData, trials: &[ChaosTrial]) -> Criterion {
    let mut k = crit(
        "chaos.ran",
        "chaos",
        "every fault-injection trial ran and was recorded".into(),
        "≥ 1 trial in chaos.json".into(),
    );
    if data.chaos.is_some() {
        k.measured = format!("{} trial(s)", trials.len());
        k.status = if trials.is_empty() {
            Status::Fail
        } else {
            Status::Pass
        };
    }
    k
}

/// `recovered_parity`: every trial's recovered run matched the uninterrupted one.
fn chaos_parity(data: &RunData, trials: &[ChaosTrial]) -> Criterion {
    let mut k = crit(
        "chaos.parity",
        "chaos",
        "every recovered run matches the uninterrupted run".into(),
        "same weights and losses, every trial".into(),
    );
    if data.chaos.is_none() || trials.is_empty() {
        return k;
    }
    let differ: Vec<String> = trials
        .iter()
        .filter(|t| t.parity == Some(false))
        .map(|t| format!("trial {}", t.index + 1))
        .collect();
    let unknown = trials.iter().filter(|t| t.parity.is_none()).count();
    k.measured = if !differ.is_empty() {
        format!("differs: {}", differ.join(", "))
    } else if unknown > 0 {
        format!("{unknown} trial(s) without a parity check")
    } else {
        format!("identical in {} trial(s)", trials.len())
    };
    k.status = if differ.is_empty() && unknown == 0 {
        Status::Pass
    } else {
        Status::Fail
    };
    k
}

/// `no_hang`: every fault detected, every trial ended or recovered.
fn chaos_no_hang(data: &RunData, trials: &[ChaosTrial]) -> Criterion {
    let mut k = crit(
        "chaos.no_hang",
        "chaos",
        "no trial hung: every fault was detected and the job ended or recovered".into(),
        "0 hung".into(),
    );
    if data.chaos.is_none() || trials.is_empty() {
        return k;
    }
    let hung: Vec<String> = trials
        .iter()
        .filter(|t| t.hung == Some(true) || t.event("detect").is_none() && t.detect_s.is_none())
        .map(|t| format!("trial {} ({})", t.index + 1, t.kind))
        .collect();
    k.measured = if hung.is_empty() {
        format!("0 of {} hung", trials.len())
    } else {
        format!("{} hung: {}", hung.len(), hung.join(", "))
    };
    k.status = if hung.is_empty() {
        Status::Pass
    } else {
        Status::Fail
    };
    k
}

#[cfg(test)]
mod tests {
    //! The verdict on the report fixtures (two real runs of the simulated cluster,
    //! healthy and with node3 shaped), and on copies of them changed one fact at a time.
    use super::*;
    use crate::results::acceptance::JobStatus;
    use std::path::Path;

    fn load(name: &str) -> RunData {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        RunData::load(&dir).unwrap()
    }

    fn get<'a>(cs: &'a [Criterion], id: &str) -> &'a Criterion {
        cs.iter().find(|c| c.id == id).unwrap_or_else(|| {
            let ids: Vec<&str> = cs.iter().map(|c| c.id.as_str()).collect();
            panic!("no criterion {id} among {ids:?}")
        })
    }

    fn status(cs: &[Criterion], id: &str) -> Status {
        get(cs, id).status
    }

    const HEALTHY: [&str; 19] = [
        "probe.ran",
        "probe.nodes",
        "probe.ranks_per_node",
        "sweep.complete",
        "sweep.busbw.inter",
        "sweep.expected.world",
        "sweep.expected.inter",
        "sweep.expected.rails",
        "sweep.expected.pairs",
        "sweep.no_outlier",
        "sweep.zero_wrong",
        "train.completes",
        "train.ckpt_write",
        "train.resume_parity",
        "chaos.ran",
        "chaos.detect",
        "chaos.recovery",
        "chaos.parity",
        "chaos.no_hang",
    ];

    #[test]
    fn the_healthy_run_passes_every_criterion_of_its_card_in_order() {
        let cs = judge(&load("sim-healthy"));
        let ids: Vec<&str> = cs.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, HEALTHY);
        for c in &cs {
            assert_eq!(c.status, Status::Pass, "{c:?}");
        }
        assert_eq!(get(&cs, "probe.nodes").measured, "4");
        assert_eq!(
            get(&cs, "probe.ranks_per_node").measured,
            "2 on all 4 node(s)"
        );
        assert_eq!(get(&cs, "sweep.complete").measured, "30 point(s), finished");
        assert_eq!(
            get(&cs, "sweep.zero_wrong").measured,
            "0 wrong in 30 checked point(s)"
        );
        assert_eq!(
            get(&cs, "train.completes").measured,
            "10 step(s), replicas agree"
        );
        assert_eq!(
            get(&cs, "train.resume_parity").measured,
            "resumed at step 5: weights and 5 loss(es) identical"
        );
        assert_eq!(get(&cs, "chaos.ran").measured, "1 trial(s)");
        assert_eq!(get(&cs, "chaos.parity").measured, "identical in 1 trial(s)");
        assert_eq!(get(&cs, "chaos.no_hang").measured, "0 of 1 hung");
        assert_eq!(get(&cs, "chaos.detect").threshold, "≤ 10 s");
        assert_eq!(
            get(&cs, "sweep.no_outlier").measured,
            "none among 2 rails groups, 6 pairs groups"
        );
        for c in &cs {
            assert_eq!(
                c.detail, "",
                "a passing criterion with nothing to add: {c:?}"
            );
        }
    }

    #[test]
    fn the_shaped_run_fails_its_slow_tiers_names_node3_and_leaves_the_rest_not_run() {
        let cs = judge(&load("sim-shaped"));
        let want = [
            ("probe.ran", Status::Pass),
            ("probe.nodes", Status::Pass),
            ("probe.ranks_per_node", Status::Pass),
            ("sweep.complete", Status::Pass),
            ("sweep.busbw.inter", Status::Fail),
            ("sweep.expected.world", Status::Fail),
            ("sweep.expected.intra", Status::Pass),
            ("sweep.expected.inter", Status::Fail),
            ("sweep.expected.rails", Status::Fail),
            ("sweep.expected.pairs", Status::Fail),
            ("sweep.no_outlier", Status::Fail),
            ("sweep.zero_wrong", Status::Pass),
            ("train.completes", Status::NotRun),
            ("train.ckpt_write", Status::NotRun),
            ("train.resume_parity", Status::NotRun),
            ("chaos.ran", Status::NotRun),
            ("chaos.detect", Status::NotRun),
            ("chaos.recovery", Status::NotRun),
            ("chaos.no_hang", Status::NotRun),
        ];
        let got: Vec<(&str, Status)> = cs.iter().map(|c| (c.id.as_str(), c.status)).collect();
        assert_eq!(got, want);
        assert_eq!(get(&cs, "sweep.no_outlier").measured, "outlier: node3");
        assert_eq!(
            get(&cs, "sweep.busbw.inter").measured,
            "0.030 GB/s (inter at 16MiB)"
        );
        assert_eq!(get(&cs, "train.completes").measured, "-");
    }

    #[test]
    fn a_crashed_job_fails_its_criteria_and_a_missing_one_is_not_run_with_the_reason() {
        let mut d = load("sim-healthy");
        let acc = d.acceptance.as_mut().unwrap();
        let j = acc.jobs.iter_mut().find(|j| j.name == "train").unwrap();
        j.status = JobStatus::Crashed;
        acc.jobs.retain(|j| j.name != "chaos");
        let cs = judge(&d);
        let c = get(&cs, "train.completes");
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.starts_with("train: "), "{c:?}");
        // What it measured is still shown.
        assert_eq!(c.measured, "10 step(s), replicas agree");
        assert_eq!(status(&cs, "train.ckpt_write"), Status::Fail);
        let c = get(&cs, "chaos.ran");
        assert_eq!((c.status, c.measured.as_str()), (Status::NotRun, "-"));
        assert_eq!(c.detail, "the run ended before this phase");
        // Not selected at all: said so.
        d.acceptance
            .as_mut()
            .unwrap()
            .phases_selected
            .retain(|p| p != "chaos");
        let cs = judge(&d);
        assert_eq!(get(&cs, "chaos.no_hang").detail, "not selected (--phases)");
        // A skipped job is not run; a timed-out one fails.
        let mut d = load("sim-healthy");
        let acc = d.acceptance.as_mut().unwrap();
        acc.jobs
            .iter_mut()
            .find(|j| j.name == "probe")
            .unwrap()
            .status = JobStatus::Skipped;
        acc.jobs
            .iter_mut()
            .find(|j| j.name == "sweep")
            .unwrap()
            .status = JobStatus::TimedOut;
        let cs = judge(&d);
        assert_eq!(status(&cs, "probe.nodes"), Status::NotRun);
        assert_eq!(status(&cs, "sweep.zero_wrong"), Status::Fail);
        assert_eq!(status(&cs, "train.completes"), Status::Pass);
    }

    #[test]
    fn wrong_elements_fail_the_zero_wrong_criterion() {
        let mut d = load("sim-healthy");
        let s = d.sweep.as_mut().unwrap();
        s.points[3].wrong = Some(3);
        if let Some(r) = s.report.as_mut() {
            r.points[3].wrong = Some(3);
        }
        let cs = judge(&d);
        let c = get(&cs, "sweep.zero_wrong");
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.measured.starts_with("3 wrong"), "{c:?}");
        let p = &d.sweep.as_ref().unwrap().points[3];
        assert!(
            c.detail.starts_with(&format!("first: {} ", p.collective)),
            "{c:?}"
        );
        assert_eq!(status(&cs, "sweep.complete"), Status::Pass);
    }

    #[test]
    fn training_that_disagrees_stops_short_or_does_not_resume_fails() {
        let base = load("sim-healthy");
        let mut d = base.clone();
        d.train
            .as_mut()
            .unwrap()
            .run
            .as_mut()
            .unwrap()
            .replicas_agree = false;
        let cs = judge(&d);
        let c = get(&cs, "train.completes");
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "10 step(s), replicas DIFFER")
        );

        let mut d = base.clone();
        let r = d.train.as_mut().unwrap().run.as_mut().unwrap();
        r.problems.push("loss is NaN at step 4".into());
        let c = judge(&d)
            .into_iter()
            .find(|c| c.id == "train.completes")
            .unwrap();
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.detail, "loss is NaN at step 4");
        assert!(c.measured.ends_with(", 1 problem(s)"), "{c:?}");

        let mut d = base.clone();
        d.train.as_mut().unwrap().run.as_mut().unwrap().last_step = 9;
        assert_eq!(status(&judge(&d), "train.completes"), Status::Fail);

        // One resumed loss one bit off: parity fails, naming the losses.
        let mut d = base.clone();
        let r = d.train_resume.as_mut().unwrap().run.as_mut().unwrap();
        let l = r.losses.last_mut().unwrap();
        *l = f64::from_bits(l.to_bits() ^ 1);
        let c = judge(&d)
            .into_iter()
            .find(|c| c.id == "train.resume_parity")
            .unwrap();
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.measured,
            "resumed at step 5: weights identical, losses DIFFER"
        );

        let mut d = base.clone();
        d.train_resume
            .as_mut()
            .unwrap()
            .run
            .as_mut()
            .unwrap()
            .final_weights_sha256 = "0".into();
        let c = judge(&d)
            .into_iter()
            .find(|c| c.id == "train.resume_parity")
            .unwrap();
        assert_eq!(
            c.measured,
            "resumed at step 5: weights DIFFER, losses identical"
        );

        let mut d = base;
        d.train_resume
            .as_mut()
            .unwrap()
            .run
            .as_mut()
            .unwrap()
            .resumed = None;
        let c = judge(&d)
            .into_iter()
            .find(|c| c.id == "train.resume_parity")
            .unwrap();
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.measured,
            "the second run did not resume from a checkpoint"
        );
    }

    #[test]
    fn chaos_times_parity_and_hangs_are_judged_against_the_card() {
        let base = load("sim-healthy");
        let detect = |d: &RunData| get(&judge(d), "chaos.detect").clone();
        let mut d = base.clone();
        d.chaos.as_mut().unwrap().trials[0].detect_s = Some(10.0);
        assert_eq!(detect(&d).status, Status::Pass, "the ceiling itself passes");
        d.chaos.as_mut().unwrap().trials[0].detect_s = Some(10.5);
        let c = detect(&d);
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "10.50 s (trial 1)")
        );
        d.chaos.as_mut().unwrap().trials[0].detect_s = None;
        assert_eq!(detect(&d).measured, "not measured");
        // The trial's detect event is still there: it did not hang.
        assert_eq!(status(&judge(&d), "chaos.no_hang"), Status::Pass);
        assert_eq!(detect(&d).status, Status::Fail);

        // A second trial without a recovery time: the worst measured one is shown,
        // and the missing one fails the criterion.
        let mut d = base.clone();
        let mut t = d.chaos.as_ref().unwrap().trials[0].clone();
        t.index = 1;
        t.recovery_s = None;
        d.chaos.as_mut().unwrap().trials.push(t);
        let c = get(&judge(&d), "chaos.recovery").clone();
        assert_eq!(c.status, Status::Fail);
        assert_eq!(c.detail, "1 trial(s) without this measurement");
        assert!(c.measured.ends_with("(trial 1)"), "{c:?}");

        let mut d = base.clone();
        d.chaos.as_mut().unwrap().trials[0].parity = Some(false);
        let c = get(&judge(&d), "chaos.parity").clone();
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "differs: trial 1")
        );
        d.chaos.as_mut().unwrap().trials[0].parity = None;
        let c = get(&judge(&d), "chaos.parity").clone();
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "1 trial(s) without a parity check")
        );

        let mut d = base.clone();
        d.chaos.as_mut().unwrap().trials[0].hung = Some(true);
        let c = get(&judge(&d), "chaos.no_hang").clone();
        assert_eq!(c.status, Status::Fail);
        assert!(c.measured.starts_with("1 hung: trial 1 ("), "{c:?}");

        let mut d = base;
        d.chaos.as_mut().unwrap().trials.clear();
        let cs = judge(&d);
        assert_eq!(get(&cs, "chaos.ran").measured, "0 trial(s)");
        assert_eq!(status(&cs, "chaos.ran"), Status::Fail);
        assert_eq!(status(&cs, "chaos.no_hang"), Status::Fail);
        assert_eq!(get(&cs, "chaos.no_hang").measured, "no data");
        assert_eq!(get(&cs, "chaos.parity").measured, "no data");
        assert_eq!(status(&cs, "chaos.parity"), Status::Fail);
    }

    #[test]
    fn probe_counts_nodes_ranks_and_gpu_models() {
        let base = load("sim-healthy");
        let nodes = |d: &mut RunData| {
            let r = d.sweep.as_mut().unwrap().report.as_mut().unwrap();
            std::mem::take(&mut r.provenance.nodes)
        };
        let put = |d: &mut RunData, n| {
            d.sweep
                .as_mut()
                .unwrap()
                .report
                .as_mut()
                .unwrap()
                .provenance
                .nodes = n;
        };
        let mut d = base.clone();
        let mut n = nodes(&mut d);
        n.pop();
        put(&mut d, n);
        let cs = judge(&d);
        let c = get(&cs, "probe.nodes");
        assert_eq!((c.status, c.measured.as_str()), (Status::Fail, "3"));
        assert_eq!(get(&cs, "probe.ran").measured, "8 rank(s) on 3 node(s)");
        assert_eq!(
            get(&cs, "probe.ranks_per_node").measured,
            "2 on all 3 node(s)"
        );

        let mut d = base.clone();
        let mut n = nodes(&mut d);
        n[3].ranks.pop();
        let host = n[3].host.clone();
        put(&mut d, n);
        let c = get(&judge(&d), "probe.ranks_per_node").clone();
        assert_eq!((c.status, c.measured), (Status::Fail, format!("{host}: 1")));

        let mut d = base.clone();
        let card = &mut d.acceptance.as_mut().unwrap().card;
        card.probe.as_mut().unwrap().criteria.gpu_model = Some("H100".into());
        let c = get(&judge(&d), "probe.gpu_model").clone();
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "0/8 rank(s) match")
        );
        assert!(
            c.detail.starts_with("first mismatch: rank 0 (") && c.detail.ends_with("): no GPU")
        );
        let rows = d.probe.as_mut().unwrap();
        for r in rows.iter_mut() {
            r.gpu = Some("NVIDIA H100 80GB HBM3".into());
        }
        rows[5].gpu = Some("NVIDIA A100-SXM4-80GB".into());
        let host5 = rows[5].host.clone();
        let c = get(&judge(&d), "probe.gpu_model").clone();
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "7/8 rank(s) match")
        );
        assert_eq!(
            c.detail,
            format!("first mismatch: rank 5 ({host5}): NVIDIA A100-SXM4-80GB")
        );
        d.probe.as_mut().unwrap()[5].gpu = Some("NVIDIA H100 80GB HBM3".into());
        let c = get(&judge(&d), "probe.gpu_model").clone();
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Pass, "8/8 rank(s) match")
        );

        // No probe.json: nothing measured, nothing passes.
        let mut d = base;
        d.probe = None;
        let cs = judge(&d);
        for id in ["probe.ran", "probe.nodes", "probe.ranks_per_node"] {
            let c = get(&cs, id);
            assert_eq!(
                (c.status, c.measured.as_str()),
                (Status::Fail, "no data"),
                "{id}"
            );
        }
    }

    #[test]
    fn training_thresholds_of_the_card_are_inclusive_and_say_what_is_missing() {
        let base = load("sim-healthy");
        let with = |f: &dyn Fn(&mut TrainCriteria)| {
            let mut d = base.clone();
            let card = &mut d.acceptance.as_mut().unwrap().card;
            f(&mut card.train.as_mut().unwrap().criteria);
            judge(&d)
        };
        // The fixture's median step: 82.051071 ms; checkpoint writes 0.3587 GB/s.
        let cs = with(&|c| c.max_step_p50_ms = Some(82.06));
        let c = get(&cs, "train.step_p50");
        assert_eq!((c.status, c.measured.as_str()), (Status::Pass, "82.05 ms"));
        let cs = with(&|c| c.max_step_p50_ms = Some(82.0));
        assert_eq!(status(&cs, "train.step_p50"), Status::Fail);
        let cs = with(&|c| c.min_ckpt_write_gbps = Some(0.36));
        let c = get(&cs, "train.ckpt_write");
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "0.359 GB/s")
        );
        let cs = with(&|c| c.min_ckpt_write_gbps = Some(0.358));
        assert_eq!(status(&cs, "train.ckpt_write"), Status::Pass);
        // Without the run's storage record, the median of the checkpoints' writes.
        let mut d = base.clone();
        d.acceptance
            .as_mut()
            .unwrap()
            .card
            .train
            .as_mut()
            .unwrap()
            .criteria
            .min_ckpt_write_gbps = Some(0.01);
        d.train.as_mut().unwrap().run.as_mut().unwrap().storage = None;
        let ck = d.train.as_ref().unwrap().checkpoints();
        assert!(!ck.is_empty());
        let med = crate::stats::median(&ck.iter().map(|c| c.write_gbps).collect::<Vec<_>>());
        let c = get(&judge(&d), "train.ckpt_write").clone();
        assert_eq!(
            (c.status, c.measured),
            (Status::Pass, format!("{med:.3} GB/s"))
        );
        // A run of no steps has no median step.
        let mut d = base.clone();
        d.acceptance
            .as_mut()
            .unwrap()
            .card
            .train
            .as_mut()
            .unwrap()
            .criteria
            .max_step_p50_ms = Some(1e9);
        d.train.as_mut().unwrap().run.as_mut().unwrap().steps_run = 0;
        let c = get(&judge(&d), "train.step_p50").clone();
        assert_eq!((c.status, c.measured.as_str()), (Status::Fail, "no data"));
        // The training crashed and the resumed pair never ran: parity is not run.
        let mut d = base.clone();
        let acc = d.acceptance.as_mut().unwrap();
        acc.jobs
            .iter_mut()
            .find(|j| j.name == "train")
            .unwrap()
            .status = JobStatus::Crashed;
        acc.jobs.retain(|j| j.name != "train-resume");
        assert_eq!(status(&judge(&d), "train.resume_parity"), Status::NotRun);
        // This fixture's training recorded no all-reduce times: not judged, and said.
        let cs = with(&|c| c.min_comm_efficiency = Some(0.5));
        let c = get(&cs, "train.comm_efficiency");
        assert_eq!((c.status, c.measured.as_str()), (Status::Fail, "no data"));
        assert_eq!(
            c.detail,
            "the training recorded no gradient all-reduce times"
        );
        // Without the resumed pair's jobs, resume parity is not run.
        let mut d = base.clone();
        d.acceptance
            .as_mut()
            .unwrap()
            .jobs
            .retain(|j| j.name != "train-resume");
        let c = get(&judge(&d), "train.resume_parity").clone();
        assert_eq!(c.status, Status::NotRun);
        let mut d = base;
        let acc = d.acceptance.as_mut().unwrap();
        acc.jobs
            .iter_mut()
            .find(|j| j.name == "train-part")
            .unwrap()
            .status = JobStatus::Crashed;
        assert_eq!(status(&judge(&d), "train.resume_parity"), Status::Fail);
    }

    #[test]
    fn comm_efficiency_compares_the_training_bucket_with_the_sweep_at_its_size() {
        // The fixture's world all_reduce (out of place): 4 MiB 0.1333, 8 MiB 0.08296,
        // 16 MiB 0.1075 GB/s.
        let sweep_8m = 0.082_962_963_431_820_12;
        let judge_with = |bytes: u64, busbw: f64, floor: f64, no_sweep: bool| {
            let mut d = load("sim-healthy");
            d.acceptance
                .as_mut()
                .unwrap()
                .card
                .train
                .as_mut()
                .unwrap()
                .criteria
                .min_comm_efficiency = Some(floor);
            d.train.as_mut().unwrap().run.as_mut().unwrap().allreduce = vec![
                crate::results::comm::BucketComm {
                    bytes: 1 << 20,
                    buckets: 1,
                    samples: 10,
                    time_p50_s: 0.01,
                    own_p50_s: 0.01,
                    algbw_gbps: 0.5,
                    busbw_gbps: 0.9,
                },
                crate::results::comm::BucketComm {
                    bytes,
                    buckets: 3,
                    samples: 30,
                    time_p50_s: 0.1,
                    own_p50_s: 0.1,
                    algbw_gbps: busbw / 1.75,
                    busbw_gbps: busbw,
                },
            ];
            if no_sweep {
                d.sweep = None;
            }
            get(&judge(&d), "train.comm_efficiency").clone()
        };
        // The most frequent bucket (3 per step), at a size the sweep measured.
        let c = judge_with(8 << 20, sweep_8m / 2.0, 0.5, false);
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Pass, "0.50 (0.041 / 0.083 GB/s at 8MiB)")
        );
        assert_eq!(c.detail, "");
        assert_eq!(
            judge_with(8 << 20, sweep_8m / 2.0, 0.5001, false).status,
            Status::Fail
        );
        // Between two sizes: interpolated in log size, and said.
        let c = judge_with(6 << 20, 0.2, 0.5, false);
        assert_eq!(c.detail, "sweep busbw interpolated between 4MiB and 8MiB");
        assert_eq!(c.status, Status::Pass);
        // Beyond the sweep's sizes, or without the sweep: not judged, and said why.
        let c = judge_with(32 << 20, 0.2, 0.5, false);
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.detail,
            "the sweep's world all_reduce sizes do not reach the bucket size 32MiB"
        );
        let c = judge_with(8 << 20, 0.2, 0.5, true);
        assert_eq!(
            (c.status, c.detail.as_str()),
            (Status::Fail, "needs the sweep phase")
        );
    }

    #[test]
    fn an_rdma_topology_turns_the_nccl_transport_criterion_on() {
        for (kind, on) in [
            ("InfiniBand", true),
            ("ib", true),
            ("RoCE", true),
            ("efa", true),
            ("Slingshot", true),
            ("cxi", true),
            ("veth", false),
            ("ethernet", false),
        ] {
            let mut d = load("sim-healthy");
            let t = d.acceptance.as_mut().unwrap().topology.as_mut().unwrap();
            t.inter.as_mut().unwrap().nic_kind = Some(kind.into());
            assert_eq!(declares_rdma(d.topology()), on, "{kind}");
            let cs = judge(&d);
            let ids: Vec<&str> = cs.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids.contains(&"sweep.nccl_transport"), on, "{kind}: {ids:?}");
            if on {
                // Placed before the wrong-elements criterion, and never a pass for an
                // MPI sweep that recorded no NCCL transport.
                let at = ids
                    .iter()
                    .position(|i| *i == "sweep.nccl_transport")
                    .unwrap();
                assert_eq!(ids[at + 1], "sweep.zero_wrong");
                assert_ne!(cs[at].status, Status::Pass, "{:?}", cs[at]);
            }
        }
        assert!(!declares_rdma(None));
        // The card can ask for it on any fabric.
        let mut d = load("sim-healthy");
        let card = &mut d.acceptance.as_mut().unwrap().card;
        card.sweep
            .as_mut()
            .unwrap()
            .criteria
            .nccl_transport_required = Some(true);
        assert!(judge(&d).iter().any(|c| c.id == "sweep.nccl_transport"));
    }

    #[test]
    fn the_topologys_gpu_model_is_judged_only_where_it_declares_gpus() {
        let mut d = load("sim-healthy");
        let t = d.acceptance.as_mut().unwrap().topology.as_mut().unwrap();
        t.node.gpu_model = Some("H200".into());
        t.node.gpus = 0;
        assert!(judge(&d).iter().all(|c| c.id != "probe.gpu_model"));
        d.acceptance
            .as_mut()
            .unwrap()
            .topology
            .as_mut()
            .unwrap()
            .node
            .gpus = 2;
        let c = get(&judge(&d), "probe.gpu_model").clone();
        assert_eq!(
            (c.status, c.threshold.as_str()),
            (Status::Fail, "name contains \"H200\"")
        );
    }

    #[test]
    fn the_replay_is_judged_on_its_checked_step_and_its_slowdown() {
        let mut d = load("sim-healthy");
        let acc = d.acceptance.as_mut().unwrap();
        acc.card.replay = Some(crate::card::ReplaySpec {
            trace: vec!["t.log".into()],
            criteria: crate::card::ReplayCriteria {
                max_slowdown: Some(1.5),
                zero_wrong: true,
            },
            ..Default::default()
        });
        // Not among the phases this run selected: NOT RUN, with why.
        let cs = judge(&d);
        for id in ["replay.zero_wrong", "replay.max_slowdown"] {
            assert_eq!(status(&cs, id), Status::NotRun, "{:?}", get(&cs, id));
        }
        let acc = d.acceptance.as_mut().unwrap();
        let mut job = acc.jobs[0].clone();
        job.name = "replay".into();
        job.phase = "replay".into();
        job.status = JobStatus::Failed;
        acc.jobs.push(job);
        acc.phases_selected.push("replay".into());
        // Ran, no record: both fail.
        let cs = judge(&d);
        assert_eq!(get(&cs, "replay.zero_wrong").detail, "no replay.json");
        assert_eq!(status(&cs, "replay.max_slowdown"), Status::Fail);
        let call = serde_json::json!({
            "comm": "0xd0", "ranks": 2, "tier": "inter-node (2 hosts)",
            "collective": "all_reduce", "dtype": "f32", "op": "sum", "bytes": 1048576,
            "per_step": 1, "time_us": 250.0, "last_us": 240.0, "busbw_gbps": 4.0,
            "share": 0.9, "source_us": 100.0, "slowdown": 2.5
        });
        let mut r: crate::results::replay::ReplayReport = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "trace_format": "nccl-coll", "trace_files": ["t.log"],
            "ranks": 4, "comms": [], "warmup_steps": 1, "steps": 5,
            "calls_per_step": [1, 1, 1, 1], "notes": [], "backend": "mpi",
            "step": {"min_us": 200.0, "p50_us": 280.0, "mean_us": 280.0, "p99_us": 300.0, "max_us": 300.0},
            "source_step_us": 140.0, "slowdown": 2.0, "calls": [call],
            "wrong": 0, "wrong_calls": [], "max_slowdown": 1.5, "pass": false, "verdict": ""
        }))
        .unwrap();
        d.replay = Some(r.clone());
        let cs = judge(&d);
        assert_eq!(status(&cs, "replay.zero_wrong"), Status::Pass);
        let k = get(&cs, "replay.max_slowdown");
        assert_eq!(k.status, Status::Fail, "{k:?}");
        assert_eq!(k.measured, "2.00x (280.0 us here, 140.0 us there)");
        assert_eq!(
            k.detail,
            "adds most: all_reduce 1MiB on 0xd0 (2 ranks, inter-node (2 hosts)), 2.50x, +150 us a step"
        );
        // Within the bound (inclusive); without source times NOT RUN, naming the fix.
        r.slowdown = Some(1.5);
        d.replay = Some(r.clone());
        assert_eq!(status(&judge(&d), "replay.max_slowdown"), Status::Pass);
        r.slowdown = None;
        r.source_step_us = None;
        r.wrong = Some(3);
        r.wrong_calls = vec!["rank 1: all_reduce on 0xd0".into()];
        d.replay = Some(r.clone());
        let cs = judge(&d);
        let k = get(&cs, "replay.max_slowdown");
        assert!(
            k.status == Status::NotRun && k.detail.contains("baseline"),
            "{k:?}"
        );
        let k = get(&cs, "replay.zero_wrong");
        assert!(
            k.status == Status::Fail && k.measured == "3 wrong" && k.detail.contains("rank 1"),
            "{k:?}"
        );
        r.wrong = None;
        d.replay = Some(r);
        assert_eq!(status(&judge(&d), "replay.zero_wrong"), Status::NotRun);
        // A crashed replay fails both.
        let acc = d.acceptance.as_mut().unwrap();
        acc.jobs.last_mut().unwrap().status = JobStatus::Crashed;
        let cs = judge(&d);
        assert_eq!(status(&cs, "replay.zero_wrong"), Status::Fail);
        assert_eq!(status(&cs, "replay.max_slowdown"), Status::Fail);
    }

    #[test]
    fn a_card_with_a_gpu_phase_and_no_gpu_record_is_not_passed() {
        let mut d = load("sim-healthy");
        d.acceptance.as_mut().unwrap().card.gpu = Some(crate::card::GpuPhaseSpec::default());
        let cs = judge(&d);
        let gpu: Vec<&Criterion> = cs.iter().filter(|c| c.phase == "gpu").collect();
        assert!(!gpu.is_empty(), "{cs:?}");
        assert!(gpu.iter().all(|c| c.status != Status::Pass), "{gpu:?}");
    }

    #[test]
    fn the_report_analyses_every_tier_whatever_the_card_judges() {
        let d = load("sim-shaped");
        let sweep = d.sweep.as_ref().unwrap();
        let c = SweepCriteria {
            judge_tiers: vec!["inter".into()],
            ..d.card().unwrap().sweep.as_ref().unwrap().criteria.clone()
        };
        let tiers = |a: &Analysis| {
            let mut t: Vec<String> = a.tiers.iter().map(|t| t.tier.to_string()).collect();
            t.dedup();
            t
        };
        let judged = tiers(&sweep_analysis(&d, sweep, &c));
        let all = tiers(&sweep_analysis_all(&d, sweep, &c));
        assert_eq!(judged, ["inter"]);
        assert!(
            all.len() >= 4 && all.contains(&"pairs".to_string()),
            "{all:?}"
        );
        assert_eq!(sweep_analysis_all(&d, sweep, &c).outlier_nodes, ["node3"]);
    }

    #[test]
    fn a_bare_sweep_folder_is_judged_by_the_defaults() {
        let mut d = load("sim-shaped");
        d.acceptance = None;
        let cs = judge(&d);
        assert!(cs.iter().all(|c| c.phase == "sweep"), "{cs:?}");
        assert_eq!(status(&cs, "sweep.zero_wrong"), Status::Pass);
        assert_eq!(status(&cs, "sweep.no_outlier"), Status::Fail);
        assert_eq!(get(&cs, "sweep.no_outlier").measured, "outlier: node3");
        // The topology's own min_fraction (0.6 in sim-4node), not the card's 50%.
        let c = get(&cs, "sweep.expected.world");
        assert_eq!(c.threshold, "≥ 60% of 0.120 GB/s");
        assert_eq!(
            (c.status, c.measured.as_str()),
            (Status::Fail, "35% (0.042 GB/s, world)")
        );
        assert_eq!(status(&cs, "sweep.expected.intra"), Status::Pass);
        let ids: Vec<&str> = cs.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "sweep.complete",
                "sweep.expected.world",
                "sweep.expected.intra",
                "sweep.expected.inter",
                "sweep.expected.rails",
                "sweep.expected.pairs",
                "sweep.no_outlier",
                "sweep.zero_wrong"
            ]
        );
        // A bare folder with a training: judged on completion only, no resume parity.
        let mut d = load("sim-healthy");
        d.acceptance = None;
        let cs = judge(&d);
        assert_eq!(status(&cs, "train.completes"), Status::Pass);
        assert!(cs.iter().all(|c| c.id != "train.resume_parity"), "{cs:?}");
        assert_eq!(get(&cs, "train.completes").threshold, "no problem");
    }

    /// One probe row a node: `gpus` as CUDA showed them, with a discovered fabric
    /// (NVML's list empty, so the GPUs are CUDA's) on the node's first rank.
    fn probe_rows(nodes: &[(&str, usize, &[&str])]) -> Vec<ProbeRow> {
        let mut rows = Vec::new();
        for (node, (host, ranks, gpus)) in nodes.iter().enumerate() {
            for local_rank in 0..*ranks {
                rows.push(ProbeRow {
                    rank: rows.len(),
                    host: host.to_string(),
                    node,
                    local_rank,
                    gpu: None,
                    driver: None,
                    nccl: None,
                    libtorch: None,
                    mpi: "Open MPI v4.1.4".into(),
                    cuda_gpus: gpus.iter().map(|g| g.to_string()).collect(),
                    fabric: (local_rank == 0).then(crate::fabric::NodeFabric::default),
                });
            }
        }
        rows
    }

    #[test]
    fn the_fabric_criterion_leaves_node_and_rank_counts_to_their_own_criteria() {
        let t = Topology::parse(
            "name='hgx'\n[node]\ngpus=2\ngpu_model='H200'\nranks=2\ncount=2\n",
            "t.toml",
        )
        .unwrap();
        let h200: &[&str] = &["NVIDIA H200", "NVIDIA H200"];
        // Three nodes where two are expected, one with a rank short: not this
        // criterion's differences.
        let counts_only = probe_rows(&[("n0", 2, h200), ("n1", 2, h200), ("n2", 1, h200)]);
        let c = fabric_criterion(&counts_only, &t);
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!(c.measured, "3 node(s) match");
        // The same with a GPU of another model: only that difference is named.
        let mixed: &[&str] = &["NVIDIA H200", "NVIDIA H100 80GB HBM3"];
        let wrong_gpu = probe_rows(&[("n0", 2, h200), ("n1", 2, mixed), ("n2", 1, h200)]);
        let c = fabric_criterion(&wrong_gpu, &t);
        assert_ne!(c.status, Status::Pass, "{c:?}");
        assert_eq!(c.measured, "1 difference(s)", "{c:?}");
        assert_eq!(
            c.detail,
            "n1: GPU 1 is NVIDIA H100 80GB HBM3, hgx expects H200"
        );
    }
}
