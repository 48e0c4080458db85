//! The report's content, built once from a [`RunData`] for every format: verdict and
//! provenance on top, then one section per phase (sweep, training, chaos), cost, and
//! what could not be read.
//!
//! A sweep that did not finish is shown as far as it got: every (tier, collective,
//! size) the plan called for but no point measured is marked "missing". The plan is
//! run.json's when the sweep finished, else the card's sweep section over the node
//! map the probe saw, else only what the points themselves show.
use super::charts::{self, BwSeries};
use super::cost;
use super::data::{RunData, SweepData, TrainData, CHAOS_EVENTS};
use super::text::human_bytes;
use super::verdict;
use super::{Block, Doc, Table};
use crate::card::SweepCriteria;
use crate::kinds::TierKind;
use crate::kinds::{CollKind, Dtype, RedOp};
use crate::results::acceptance::{passed, Criterion, JobStatus, Status};
use crate::results::analysis::{Analysis, PairMatrix};
use crate::results::provenance::Provenance;
use crate::results::sweep::Point;
use crate::results::train::{CkptWrite, TrainReport};
use crate::results::utc_text;
use crate::topology;
use crate::transport::TransportReport;
use crate::units::Bytes;
use std::collections::BTreeMap;

/// "FAIL — 2 of 14 criteria failed, 3 not run".
pub fn summary_line(criteria: &[Criterion]) -> String {
    let fail = criteria.iter().filter(|c| c.status == Status::Fail).count();
    let not_run = criteria
        .iter()
        .filter(|c| c.status == Status::NotRun)
        .count();
    let pass = criteria.iter().filter(|c| c.status == Status::Pass).count();
    let nr = if not_run > 0 {
        format!(", {not_run} not run")
    } else {
        String::new()
    };
    if fail > 0 {
        format!("FAIL — {fail} of {} criteria failed{nr}", criteria.len())
    } else {
        format!("PASS — {pass} of {} criteria passed{nr}", criteria.len())
    }
}

fn secs_text(s: f64) -> String {
    if s >= 120.0 {
        format!("{} min {:.0} s", (s / 60.0).floor(), s % 60.0)
    } else {
        format!("{s:.1} s")
    }
}

fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// Environment variables a reader can act on: the launcher's own plumbing (Open MPI
/// daemon URIs, session directories, PMIx internals) is left out of the report; it
/// stays in run.json.
fn interesting_env(k: &str) -> bool {
    const PLUMBING: [&str; 14] = [
        "OMPI_MCA_orte_",
        "OMPI_MCA_ess",
        "OMPI_MCA_pmix",
        "OMPI_MCA_shmem_",
        "OMPI_MCA_initial_wdir",
        "OMPI_APP_CTX",
        "OMPI_ARGV",
        "OMPI_COMMAND",
        "OMPI_FIRST_RANKS",
        "OMPI_NUM_APP_CTX",
        "OMPI_UNIVERSE_SIZE",
        "PMIX_",
        "BURNIN_SIM_STATE",
        "BURNIN_SIM_USER_SHELL",
    ];
    !PLUMBING.iter().any(|p| k.starts_with(p))
}

/// Build the report. Charts are drawn only when `charts` (HTML).
pub fn build(data: &RunData, criteria: &[Criterion], charts: bool) -> Doc {
    let mut d = Doc::default();
    let verdict_word = if passed(criteria) { "PASS" } else { "FAIL" };
    let title = match data.card() {
        Some(c) => format!("burnin acceptance: {} — {verdict_word}", c.name),
        None => format!("burnin report: {} — {verdict_word}", data.name()),
    };
    d.title = title.clone();
    d.h(1, title);
    header(&mut d, data);
    d.h(2, "Verdict");
    verdict_section(&mut d, criteria);
    d.h(2, "Provenance");
    provenance(&mut d, data);
    if let Some(a) = &data.acceptance {
        d.h(2, "Phases");
        phases_section(&mut d, a);
    }
    if data.gpu.is_some() || data.card().is_some_and(|c| c.gpu.is_some()) {
        d.h(2, "GPU health");
        super::gpu::section(&mut d, data, charts);
    }
    if let Some(s) = &data.sweep {
        d.h(2, "Sweep");
        sweep_section(&mut d, data, s, charts);
    } else if data.card().is_some_and(|c| c.sweep.is_some()) {
        d.h(2, "Sweep");
        d.p("No sweep results: the phase did not run or wrote nothing.");
    }
    if data.replay.is_some() || data.card().is_some_and(|c| c.replay.is_some()) {
        d.h(2, "Replay of the job's trace");
        super::replay::section(&mut d, data, charts);
    }
    if data.train.is_some() || data.train_resume.is_some() {
        d.h(2, "Training");
        train_section(&mut d, data, charts);
    } else if data.card().is_some_and(|c| c.train.is_some()) {
        d.h(2, "Training");
        d.p("No training results: the phase did not run or wrote nothing.");
    }
    if data.chaos.is_some() || data.card().is_some_and(|c| c.chaos.is_some()) {
        d.h(2, "Chaos");
        chaos_section(&mut d, data, charts);
    }
    if data.card().is_some_and(|c| c.soak.is_some()) {
        d.h(2, "Soak");
        super::soak::phase_section(&mut d, data, charts);
    }
    if let Some(spec) = data.card().and_then(|c| c.cost.as_ref()) {
        d.h(2, "Cost");
        cost_section(&mut d, data, spec);
    }
    if let Some(p) = super::next_job::plan(data) {
        super::next_job::section(&mut d, &p);
    }
    notes_section(&mut d, data);
    d
}

/// The acceptance's jobs: status, exit code and seconds of each.
fn phases_section(d: &mut Doc, a: &crate::results::acceptance::AcceptanceRecord) {
    let rows = a
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.name.clone(),
                match j.status {
                    JobStatus::Passed => "passed".into(),
                    _ => j.describe(),
                },
                j.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                j.seconds()
                    .map(|s| format!("{s:.1}"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    d.table(&["job", "status", "exit", "seconds"], rows);
}

/// The cost table: the billed rate and each priced unit of work with its formula.
fn cost_section(d: &mut Doc, data: &RunData, spec: &crate::card::CostSpec) {
    let c = cost::compute(spec, data);
    d.p(format!("Billed rate: {}.", c.hourly_formula));
    let rows = c
        .lines
        .iter()
        .map(|l| {
            vec![
                l.what.clone(),
                l.cost
                    .map(|v| cost::money(&c.currency, v))
                    .unwrap_or_else(|| "-".into()),
                l.formula.clone(),
            ]
        })
        .collect();
    d.table(&["unit of work", "cost", "formula"], rows);
    d.p("Each billed component is counted once: idle time inside a recovery is part of the recovery time, and redone work is the steps lost at the measured step time.");
}

/// The run's notes and the jobs that did not end normally, paths relative to the
/// run's folder.
fn notes_section(d: &mut Doc, data: &RunData) {
    let mut notes = data.notes.clone();
    for j in data.acceptance.iter().flat_map(|a| a.jobs.iter()) {
        if matches!(
            j.status,
            JobStatus::Crashed
                | JobStatus::LauncherCrashed
                | JobStatus::TimedOut
                | JobStatus::Interrupted
                | JobStatus::Running
        ) {
            notes.push(format!("job `{}`: {}", j.name, j.describe()));
        }
    }
    // Paths in notes are of the machine that rendered: keep them relative to the folder.
    let base = format!("{}/", data.dir.display());
    let notes: Vec<String> = notes.into_iter().map(|n| n.replace(&base, "")).collect();
    if !notes.is_empty() {
        d.h(2, "Notes");
        d.list(notes);
    }
}

fn header(d: &mut Doc, data: &RunData) {
    let mut lines = Vec::new();
    match (data.card(), &data.acceptance) {
        (Some(c), Some(a)) => {
            lines.push(format!(
                "Card `{}` ({}){}.",
                c.name,
                a.card_path,
                if c.description.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.description)
                }
            ));
            let end = a
                .finished_unix
                .map(|f| format!(", finished {} ({})", utc_text(f), secs_text(f - a.started_unix)))
                .unwrap_or_else(|| ", never finished (the run was killed)".into());
            lines.push(format!("Started {}{end}.", utc_text(a.started_unix)));
        }
        _ => lines.push(
            "No acceptance card: judged by burnin's defaults (zero wrong elements, no outlier, the topology's own fraction).".into(),
        ),
    }
    if let Some(t) = data.topology() {
        lines.push(format!(
            "Topology `{}`{}.",
            t.name,
            if t.description.is_empty() {
                String::new()
            } else {
                format!(": {}", t.description)
            }
        ));
    }
    d.p(lines.join(" "));
}

/// One row per criterion: phase, criterion, measured, threshold, verdict (the
/// report's table and the terminal's).
pub fn verdict_table(criteria: &[Criterion]) -> Table {
    let rows = criteria
        .iter()
        .map(|c| {
            vec![
                c.phase.clone(),
                c.what.clone(),
                c.measured.clone(),
                c.threshold.clone(),
                c.status.label().to_string(),
            ]
        })
        .collect();
    Table::new(
        &["phase", "criterion", "measured", "threshold", "verdict"],
        rows,
    )
}

fn verdict_section(d: &mut Doc, criteria: &[Criterion]) {
    d.blocks.push(Block::Table(verdict_table(criteria)));
    d.p(format!("**{}**", summary_line(criteria)));
    let details: Vec<String> = criteria
        .iter()
        .filter(|c| !c.detail.is_empty())
        .map(|c| format!("`{}` ({}): {}", c.id, c.status.label(), c.detail))
        .collect();
    d.list(details);
}

fn distinct<'a>(v: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for x in v {
        if !x.is_empty() && !seen.contains(&x) {
            seen.push(x);
        }
    }
    if seen.is_empty() {
        "-".into()
    } else {
        seen.join("; ")
    }
}

fn provenance(d: &mut Doc, data: &RunData) {
    let sweep_prov = data
        .sweep
        .as_ref()
        .and_then(|s| s.report.as_ref())
        .map(|r| &r.provenance);
    let train_prov = data
        .train
        .as_ref()
        .and_then(|t| t.run.as_ref())
        .map(|r| &r.provenance);
    let prov = sweep_prov.or(train_prov);
    d.list(provenance_items(data, prov));
    node_table(d, data);
    command_lines(d, data, sweep_prov, train_prov);
    let env: Vec<String> = prov
        .iter()
        .flat_map(|p| p.env.iter())
        .filter(|(k, _)| interesting_env(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !env.is_empty() {
        d.h(3, "Environment (rank 0; launcher plumbing left out)");
        d.code(env.join("\n"));
    }
}

/// burnin, the launch, the world, MPI and the software stack, one item each.
fn provenance_items(data: &RunData, prov: Option<&Provenance>) -> Vec<String> {
    let mut items = Vec::new();
    if let Some(a) = &data.acceptance {
        items.push(format!(
            "burnin {} on launch host `{}`, launcher `{}`",
            a.burnin_version,
            a.launch_host,
            shlex::try_join(a.launch.iter().map(String::as_str)).unwrap_or_default()
        ));
    } else if let Some(p) = prov {
        items.push(format!("burnin {}", p.burnin_version));
    }
    if let Some(p) = prov {
        items.push(format!(
            "{} ranks on {} nodes; backend: {}",
            p.world_size,
            p.nodes.len(),
            p.backend
        ));
        items.push(format!("MPI: {}", p.mpi_version));
        if !p.rank_stacks.is_empty() {
            items.push(format!(
                "data plane per rank: {}",
                distinct(p.rank_stacks.iter().map(String::as_str))
            ));
        }
    }
    if let Some(rows) = &data.probe {
        items.push(format!(
            "CUDA driver: {}; NCCL: {}; libtorch: {}",
            distinct(rows.iter().map(|r| r.driver.as_deref().unwrap_or(""))),
            distinct(rows.iter().map(|r| r.nccl.as_deref().unwrap_or(""))),
            distinct(rows.iter().map(|r| r.libtorch.as_deref().unwrap_or("")))
        ));
        if prov.is_none() {
            items.push(format!(
                "MPI: {}",
                distinct(rows.iter().map(|r| r.mpi.as_str()))
            ));
        }
    }
    items
}

/// Every node with its host, ranks and GPUs (as the probe saw them).
fn node_table(d: &mut Doc, data: &RunData) {
    let nodes = data.nodes();
    if nodes.is_empty() {
        return;
    }
    let rows = nodes
        .iter()
        .map(|n| {
            let gpus: Vec<String> = data
                .probe
                .iter()
                .flatten()
                .filter(|r| r.node == n.index)
                .map(|r| r.gpu.clone().unwrap_or_else(|| "none".into()))
                .collect();
            let gpu = if gpus.is_empty() {
                "-".into()
            } else {
                let first = &gpus[0];
                if gpus.iter().all(|g| g == first) {
                    format!("{} × {first}", gpus.len())
                } else {
                    gpus.join(", ")
                }
            };
            vec![
                n.index.to_string(),
                n.host.clone(),
                format!("{:?}", n.ranks),
                gpu,
            ]
        })
        .collect();
    d.table(&["node", "host", "ranks", "GPUs"], rows);
}

/// Command lines: every job of an acceptance run, else the workloads' own.
fn command_lines(
    d: &mut Doc,
    data: &RunData,
    sweep_prov: Option<&Provenance>,
    train_prov: Option<&Provenance>,
) {
    let words =
        |argv: &[String]| shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default();
    let mut cmds = Vec::new();
    if let Some(a) = &data.acceptance {
        cmds.push(format!("# burnin run\n{}", words(&a.argv)));
        for j in a.jobs.iter().filter(|j| !j.argv.is_empty()) {
            cmds.push(format!("# {}\n{}", j.name, words(&j.argv)));
        }
    } else {
        for (name, p) in [("sweep", sweep_prov), ("train", train_prov)] {
            if let Some(p) = p {
                cmds.push(format!("# {name}\n{}", words(&p.argv)));
            }
        }
    }
    if !cmds.is_empty() {
        d.h(3, "Command lines");
        d.code(cmds.join("\n"));
    }
}

/// The series shown for a collective: its first type and op, out-of-place when
/// measured (other types and ops stay in run.json).
fn shown(points: &[Point], coll: CollKind) -> Vec<&Point> {
    let of: Vec<&Point> = points.iter().filter(|p| p.collective == coll).collect();
    let Some(first) = of.first() else {
        return of;
    };
    let (dt, op): (Dtype, Option<RedOp>) = (first.dtype, first.op);
    let any_out = of.iter().any(|p| !p.in_place);
    of.into_iter()
        .filter(|p| p.dtype == dt && p.op == op && (p.in_place != any_out))
        .collect()
}

/// What the sweep was meant to measure.
pub struct Planned {
    pub collectives: Vec<CollKind>,
    pub sizes: Vec<u64>,
    /// Tier names, with the number of groups each should have (None: unknown).
    pub tiers: Vec<(String, Option<usize>)>,
    /// Whether the plan is known (from run.json or the card), not guessed.
    pub known: bool,
}

fn tier_order(t: &str) -> usize {
    ["world", "intra", "inter", "rails", "pairs"]
        .iter()
        .position(|x| *x == t)
        .unwrap_or(9)
}

pub fn planned(data: &RunData, s: &SweepData) -> Planned {
    let mut seen_tiers: Vec<String> = Vec::new();
    for p in &s.points {
        if !seen_tiers.iter().any(|t| t == p.tier.name()) {
            seen_tiers.push(p.tier.to_string());
        }
    }
    seen_tiers.sort_by_key(|t| tier_order(t));
    let group_counts = |tiers: &[topology::Tier]| -> Vec<(String, Option<usize>)> {
        tiers
            .iter()
            .map(|t| {
                (
                    t.kind.name().to_string(),
                    Some(t.rounds.iter().map(|r| r.groups.len()).sum()),
                )
            })
            .collect()
    };
    let nodes = data.nodes();
    let nics = data
        .topology()
        .and_then(|t| t.inter.as_ref())
        .and_then(|i| i.nics);
    if let Some(r) = &s.report {
        return Planned {
            collectives: r.plan.collectives.clone(),
            sizes: r.plan.sizes.clone(),
            tiers: seen_tiers.into_iter().map(|t| (t, None)).collect(),
            known: true,
        };
    }
    if let Some(spec) = data.card().and_then(|c| c.sweep.as_ref()) {
        let sizes = crate::sweep::size_ladder(
            spec.min_bytes.get(),
            spec.max_bytes.get(),
            spec.step_factor,
            None,
        )
        .unwrap_or_default();
        let mut collectives = Vec::new();
        for c in &spec.collectives {
            if c == "all" {
                collectives.extend(CollKind::ALL);
            } else if let Some(k) = CollKind::parse(c) {
                collectives.push(k);
            }
        }
        collectives.dedup();
        let wanted = topology::parse_tiers(&spec.tiers.join(",")).unwrap_or_default();
        let have_map = nodes.iter().all(|n| !n.ranks.is_empty()) && !nodes.is_empty();
        let tiers = if have_map {
            group_counts(&topology::plan_tiers(&nodes, &wanted, nics))
        } else {
            wanted
                .iter()
                .map(|k| (k.name().to_string(), None))
                .collect()
        };
        return Planned {
            collectives,
            sizes,
            tiers,
            known: true,
        };
    }
    let mut sizes: Vec<u64> = s.points.iter().map(|p| p.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut collectives: Vec<CollKind> = s.points.iter().map(|p| p.collective).collect();
    collectives.sort();
    collectives.dedup();
    Planned {
        collectives,
        sizes,
        tiers: seen_tiers.into_iter().map(|t| (t, None)).collect(),
        known: false,
    }
}

/// Sizes a tier runs: pairs run at the largest size only.
fn tier_sizes(tier: &str, sizes: &[u64]) -> Vec<u64> {
    if tier == TierKind::Pairs.name() {
        sizes.last().copied().into_iter().collect()
    } else {
        sizes.to_vec()
    }
}

/// Sizes of one (tier, collective) that were planned and not measured.
pub type Missing = (String, CollKind, Vec<u64>);

/// (tier, collective, sizes) planned and not measured, and tiers with groups missing.
pub fn missing(plan: &Planned, points: &[Point]) -> (Vec<Missing>, Vec<String>) {
    let mut out = Vec::new();
    let mut groups_missing = Vec::new();
    for (tier, groups) in &plan.tiers {
        for &coll in &plan.collectives {
            let have: Vec<&Point> = points
                .iter()
                .filter(|p| p.tier.name() == tier.as_str() && p.collective == coll)
                .collect();
            let miss: Vec<u64> = tier_sizes(tier, &plan.sizes)
                .into_iter()
                .filter(|b| !have.iter().any(|p| p.bytes == *b))
                .collect();
            if !miss.is_empty() {
                out.push((tier.clone(), coll, miss));
            }
            if let Some(n) = groups {
                let mut g: Vec<usize> = have.iter().map(|p| p.group).collect();
                g.sort_unstable();
                g.dedup();
                if !g.is_empty() && g.len() < *n {
                    groups_missing.push(format!(
                        "tier {tier} {coll}: {} of {n} groups measured",
                        g.len()
                    ));
                }
            }
        }
    }
    (out, groups_missing)
}

fn sweep_criteria(data: &RunData) -> SweepCriteria {
    match data.card().and_then(|c| c.sweep.as_ref()) {
        Some(s) => s.criteria.clone(),
        None => verdict::default_card(data)
            .sweep
            .map(|s| s.criteria)
            .unwrap_or_default(),
    }
}

fn sweep_section(d: &mut Doc, data: &RunData, s: &SweepData, charts: bool) {
    let crit = sweep_criteria(data);
    let judged = verdict::sweep_analysis(data, s, &crit);
    let plan = planned(data, s);
    let (miss, groups_missing) = missing(&plan, &s.points);
    let v = SweepView {
        data,
        s,
        analysis: verdict::sweep_analysis_all(data, s, &crit),
        plan,
        miss,
        charts,
    };
    sweep_intro(d, s, &v.plan, &crit);
    sweep_findings(d, s, &crit, &v.analysis, &judged);
    tier_table(d, &v.analysis);
    if let Some(soak) = s.report.as_ref().and_then(|r| r.soak.as_ref()) {
        d.h(3, "Soak");
        super::soak::section(d, soak, charts);
    }
    if let Some(t) = s.report.as_ref().and_then(|r| r.transport.as_ref()) {
        transport_section(d, t);
    }
    for &coll in &v.plan.collectives {
        busbw_by_size(d, &v, coll);
    }
    for m in &v.analysis.pair_matrices {
        pair_matrix(d, m, &v.analysis.outlier_nodes, charts);
    }
    if let Some(m) = s.report.as_ref().and_then(|r| r.fabric_map.as_ref()) {
        super::fabric::section(d, m, charts);
    }
    rank_spread(d, data, s, &v.plan, charts);
    missing_section(d, &v.miss, groups_missing);
}

/// What the sweep's tables and charts are drawn from: the plan and what of it was
/// not measured, and every tier analysed by the card's rules.
struct SweepView<'a> {
    data: &'a RunData,
    s: &'a SweepData,
    plan: Planned,
    miss: Vec<Missing>,
    analysis: Analysis,
    charts: bool,
}

/// What was measured, at which sizes, and whether the sweep finished.
fn sweep_intro(d: &mut Doc, s: &SweepData, plan: &Planned, crit: &SweepCriteria) {
    let backend = s
        .report
        .as_ref()
        .map(|r| format!("; backend {}", r.provenance.backend))
        .unwrap_or_default();
    let sizes = match (plan.sizes.first(), plan.sizes.last()) {
        (Some(a), Some(b)) => format!("{} to {}", Bytes(*a), Bytes(*b)),
        _ => "-".into(),
    };
    let judged_at = crit
        .at_bytes
        .map(|b| format!("messages ≥ {b}"))
        .unwrap_or_else(|| "the largest size".into());
    d.p(format!(
        "{} point(s) measured; collectives {}; sizes {sizes}; tiers {}{backend}. busbw is judged at {judged_at}.{}",
        s.points.len(),
        plan.collectives.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "),
        plan.tiers.iter().map(|t| t.0.as_str()).collect::<Vec<_>>().join(", "),
        if s.finished() {
            String::new()
        } else {
            format!(
                " **The sweep did not finish** (no run.json): what follows is what it measured; planned points it never reached are marked missing{}.",
                if plan.known { "" } else { " (the plan is unknown without run.json or a card: only gaps between measured points are shown)" }
            )
        }
    ));
}

/// The findings in the tiers the card judges, then those in the others (not counted).
fn sweep_findings(
    d: &mut Doc,
    s: &SweepData,
    crit: &SweepCriteria,
    analysis: &Analysis,
    judged: &Analysis,
) {
    let of_what = if s.finished() {
        ""
    } else {
        " (of what was measured)"
    };
    let only = if crit.judge_tiers.is_empty() {
        String::new()
    } else {
        format!(" (the card judges tiers {})", crit.judge_tiers.join(", "))
    };
    if judged.findings.is_empty() {
        d.p(format!(
            "Findings{of_what}{only}: no outlier node or link; every tier meets its expectation."
        ));
    } else {
        d.p(format!("Findings{of_what}{only}:"));
        d.list(
            judged
                .findings
                .iter()
                .map(|f| format!("**{}** {}", f.severity.to_uppercase(), f.text))
                .collect(),
        );
    }
    let unjudged: Vec<String> = analysis
        .findings
        .iter()
        .filter(|f| !judged.findings.contains(f))
        .map(|f| f.text.clone())
        .collect();
    if !unjudged.is_empty() {
        d.p("In tiers the card does not judge (shown, not counted):");
        d.list(unjudged);
    }
}

/// One collective's busbw by size and tier (the slowest group), and its charts.
fn busbw_by_size(d: &mut Doc, v: &SweepView, coll: CollKind) {
    let plan = &v.plan;
    let pts = shown(&v.s.points, coll);
    let tiers: Vec<&str> = plan.tiers.iter().map(|t| t.0.as_str()).collect();
    d.h(
        3,
        format!("{coll}: busbw by message size (GB/s, slowest group of each tier)"),
    );
    let rows = plan
        .sizes
        .iter()
        .map(|&b| {
            let mut row = vec![Bytes(b).to_string()];
            row.extend(tiers.iter().map(|t| busbw_cell(v, &pts, t, coll, b)));
            row
        })
        .collect();
    let mut header = vec!["size"];
    header.extend(tiers.iter().copied());
    d.table(&header, rows);
    if v.charts {
        for t in tiers.iter().filter(|t| **t != "pairs") {
            bw_chart(d, v.data, &v.analysis, &pts, &v.miss, t, coll);
        }
    }
}

/// The slowest group's busbw of `tier` at `b`; "missing" when planned and not
/// measured, "-" when not planned.
fn busbw_cell(v: &SweepView, pts: &[&Point], tier: &str, coll: CollKind, b: u64) -> String {
    let at: Vec<f64> = pts
        .iter()
        .filter(|p| p.tier.name() == tier && p.bytes == b)
        .map(|p| p.busbw_gbps)
        .collect();
    let planned_here = tier_sizes(tier, &v.plan.sizes).contains(&b);
    if !at.is_empty() {
        f3(at.iter().copied().fold(f64::INFINITY, f64::min))
    } else if planned_here
        && v.miss
            .iter()
            .any(|m| m.0 == tier && m.1 == coll && m.2.contains(&b))
    {
        "missing".into()
    } else {
        "-".into()
    }
}

/// The node-pair matrix: a table up to 32 nodes, and its heat map.
fn pair_matrix(d: &mut Doc, m: &PairMatrix, outliers: &[String], charts: bool) {
    d.h(
        3,
        format!(
            "Node pairs: {} busbw at {} (GB/s)",
            m.collective,
            Bytes(m.bytes)
        ),
    );
    if m.nodes.len() <= 32 {
        let label = |h: &String| {
            if outliers.contains(h) {
                format!("{h} (outlier)")
            } else {
                h.clone()
            }
        };
        let rows = m
            .nodes
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let mut r = vec![label(h)];
                r.extend(
                    m.busbw_gbps[i]
                        .iter()
                        .map(|v| v.map(f3).unwrap_or_else(|| "-".into())),
                );
                r
            })
            .collect();
        let mut header = vec![String::from("node")];
        header.extend(m.nodes.iter().cloned());
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        d.table(&header_refs, rows);
    } else {
        d.p(format!(
            "{} nodes: the matrix is in report.html and run.json.",
            m.nodes.len()
        ));
    }
    if charts {
        d.chart(
            &format!("node pairs {}", m.collective),
            charts::pair_heatmap(
                &format!("node pairs: {} busbw at {}", m.collective, Bytes(m.bytes)),
                &m.nodes,
                &m.busbw_gbps,
                outliers,
            ),
        );
    }
}

/// What the plan called for and no point measured.
fn missing_section(d: &mut Doc, miss: &[Missing], groups_missing: Vec<String>) {
    if miss.is_empty() && groups_missing.is_empty() {
        return;
    }
    d.h(3, "Missing");
    let mut items: Vec<String> = miss
        .iter()
        .map(|(t, c, sizes)| {
            format!(
                "tier {t} {c}: {} not measured",
                sizes
                    .iter()
                    .map(|b| Bytes(*b).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    items.extend(groups_missing);
    d.list(items);
}

/// Which transports carried each tier (and, for NCCL, each host's view).
fn transport_section(d: &mut Doc, t: &TransportReport) {
    d.h(3, "Transports");
    d.p(format!(
        "What carried the traffic, from {}; `-`: the tier has no such pair of ranks.",
        t.source
    ));
    let dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
    let rows = t
        .tiers
        .iter()
        .map(|x| {
            let mut r = vec![x.tier.to_string(), dash(&x.intra_node), dash(&x.inter_node)];
            if !x.algorithms.is_empty() {
                r[0] = format!("{} ({})", x.tier, x.algorithms.join(", "));
            }
            r
        })
        .collect();
    d.table(&["tier", "inside a node", "between nodes"], rows);
    if !t.pml.is_empty() {
        d.p(format!("Open MPI PML: {}.", t.pml.join(", ")));
    }
    if !t.hosts.is_empty() {
        let rows = t
            .hosts
            .iter()
            .map(|h| {
                let ib = h.inter.ib_devices();
                vec![
                    h.host.clone(),
                    format!("{} of {}", h.logs, h.ranks.len()),
                    h.version.clone().unwrap_or_else(|| "-".into()),
                    h.network.clone().unwrap_or_else(|| "-".into()),
                    if h.inter.is_empty() {
                        "-".into()
                    } else {
                        h.inter.describe()
                    },
                    if ib.is_empty() {
                        "-".into()
                    } else {
                        ib.len().to_string()
                    },
                    match h.gdr_enabled {
                        Some(true) => "enabled".into(),
                        Some(false) => "disabled".into(),
                        None => "-".into(),
                    },
                ]
            })
            .collect();
        d.table(
            &[
                "host",
                "logs read",
                "NCCL",
                "network",
                "between nodes",
                "HCAs used",
                "GPUDirect RDMA",
            ],
            rows,
        );
    }
    d.list(t.notes.clone());
}

fn tier_table(d: &mut Doc, a: &Analysis) {
    if a.tiers.is_empty() {
        return;
    }
    let rows = a
        .tiers
        .iter()
        .map(|t| {
            let mut r = t.table_cells();
            r.push(
                t.worst_vs_expected
                    .map(|w| format!("{:.0}%", w * 100.0))
                    .unwrap_or_else(|| "-".into()),
            );
            r
        })
        .collect();
    d.table(
        &[
            "tier",
            "collective",
            "groups",
            "median GB/s",
            "slowest GB/s",
            "slowest group",
            "expected GB/s",
            "slowest vs expected",
        ],
        rows,
    );
}

fn bw_chart(
    d: &mut Doc,
    data: &RunData,
    a: &Analysis,
    pts: &[&Point],
    miss: &[Missing],
    tier: &str,
    coll: CollKind,
) {
    let mut by_group: BTreeMap<usize, (String, Vec<(u64, f64)>)> = BTreeMap::new();
    for p in pts.iter().filter(|p| p.tier.name() == tier) {
        let e = by_group
            .entry(p.group)
            .or_insert_with(|| (p.label.clone(), Vec::new()));
        e.1.push((p.bytes, p.busbw_gbps));
    }
    let result = a
        .tiers
        .iter()
        .find(|t| t.tier.name() == tier && t.collective == coll);
    let outlier = |g: usize| {
        result
            .and_then(|t| t.groups.iter().find(|x| x.group == g))
            .is_some_and(|x| x.outlier)
    };
    let series: Vec<BwSeries> = by_group
        .into_iter()
        .take(16)
        .map(|(g, (label, mut points))| {
            points.sort_by_key(|p| p.0);
            BwSeries {
                label,
                points,
                alert: outlier(g),
            }
        })
        .collect();
    let expected = result.and_then(|t| t.expected_gbps).or_else(|| {
        let p = pts.iter().find(|p| p.tier.name() == tier)?;
        data.topology()?
            .expectation(tier, coll, p.members.len(), p.hosts.len().max(1))
    });
    let missing: Vec<u64> = miss
        .iter()
        .filter(|m| m.0 == tier && m.1 == coll)
        .flat_map(|m| m.2.iter().copied())
        .collect();
    if series.is_empty() && missing.is_empty() {
        return;
    }
    d.chart(
        &format!("{coll} {tier}"),
        charts::busbw_vs_size(
            &format!("{coll} busbw, tier {tier}"),
            &series,
            expected,
            &missing,
        ),
    );
}

fn rank_spread(d: &mut Doc, data: &RunData, s: &SweepData, plan: &Planned, charts: bool) {
    let host_of = |rank: usize| {
        data.nodes()
            .into_iter()
            .find(|n| n.ranks.contains(&rank))
            .map(|n| n.host)
            .unwrap_or_default()
    };
    for &coll in &plan.collectives {
        let pts = shown(&s.points, coll);
        let Some(p) = pts
            .iter()
            .filter(|p| p.tier == TierKind::World && !p.rank_p50_us.is_empty())
            .max_by_key(|p| p.bytes)
        else {
            continue;
        };
        d.h(
            3,
            format!(
                "Per-rank latency spread: {coll} at {}, whole job (spread {:.0}%)",
                Bytes(p.bytes),
                p.rank_spread * 100.0
            ),
        );
        let fastest = p.rank_p50_us.iter().copied().fold(f64::INFINITY, f64::min);
        let rows = p
            .rank_p50_us
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let rank = p.members.get(i).copied().unwrap_or(i);
                vec![
                    rank.to_string(),
                    host_of(rank),
                    if *t >= 1000.0 {
                        format!("{t:.0}")
                    } else {
                        format!("{t:.1}")
                    },
                    if fastest > 0.0 {
                        format!("{:.2}×", t / fastest)
                    } else {
                        "-".into()
                    },
                    if i == p.slowest_rank {
                        "slowest".into()
                    } else {
                        String::new()
                    },
                ]
            })
            .collect();
        d.table(&["rank", "host", "median µs", "vs fastest", ""], rows);
        if charts {
            let labels: Vec<String> = (0..p.rank_p50_us.len())
                .map(|i| p.members.get(i).copied().unwrap_or(i).to_string())
                .collect();
            d.chart(
                &format!("{coll} per rank"),
                charts::rank_bars(
                    &format!("{coll} at {}: each rank's median time", Bytes(p.bytes)),
                    &labels,
                    &p.rank_p50_us,
                ),
            );
        }
    }
}

fn loss_points(t: &TrainData) -> Vec<(f64, f64)> {
    match &t.run {
        Some(r) => r
            .losses
            .iter()
            .enumerate()
            .map(|(i, l)| ((r.first_step + i as u64) as f64, *l))
            .collect(),
        None => t.steps.iter().map(|s| (s.step as f64, s.loss)).collect(),
    }
}

fn train_section(d: &mut Doc, data: &RunData, charts: bool) {
    let Some(t) = data.train.as_ref() else {
        d.p("The uninterrupted training run left no results.");
        return;
    };
    let mut rows = Rows::default();
    match &t.run {
        Some(r) => train_run_rows(&mut rows, data, r),
        None => rows.row(
            "steps",
            format!("{} measured; the run did not finish", t.steps.len()),
        ),
    }
    resume_rows(&mut rows, data);
    d.table(&["metric", "value"], rows.0);
    let ckpts = t.checkpoints();
    checkpoint_table(d, &ckpts);
    if charts {
        train_charts(d, data, t, &ckpts);
    }
}

/// The rows of a metric/value table.
#[derive(Default)]
struct Rows(Vec<Vec<String>>);

impl Rows {
    fn row(&mut self, k: &str, v: String) {
        self.0.push(vec![k.to_string(), v]);
    }
}

/// A finished training run: what it ran, how fast, and what it ended with.
fn train_run_rows(rows: &mut Rows, data: &RunData, r: &TrainReport) {
    rows.row(
        "device",
        format!(
            "{} ({:.2} M parameters)",
            r.device,
            r.parameters as f64 / 1e6
        ),
    );
    rows.row(
        "steps",
        format!("{}..{} ({} run)", r.first_step, r.last_step, r.steps_run),
    );
    if let (Some(a), Some(b)) = (r.losses.first(), r.losses.last()) {
        rows.row("loss first → last", format!("{a:.4} → {b:.4}"));
    }
    rows.row("step time p50 / p99", r.step_time.p50_p99_ms());
    rows.row("tokens/s (all ranks)", format!("{:.0}", r.tokens_per_s));
    rows.row(
        "compute / gradient exchange / optimizer",
        format!(
            "{:.0}% / {:.0}% / {:.0}%",
            r.compute_fraction * 100.0,
            r.comm_fraction * 100.0,
            r.optimizer_fraction * 100.0
        ),
    );
    train_comm_rows(rows, data, r);
    if let Some(s) = &r.storage {
        rows.row(
            "checkpoint write (all ranks)",
            format!(
                "{} GB/s, {} of the raw file speed",
                s.ckpt_write_gbps.map(f3).unwrap_or_else(|| "-".into()),
                s.write_ratio
                    .map(|x| format!("{:.0}%", x * 100.0))
                    .unwrap_or_else(|| "-".into())
            ),
        );
    }
    rows.row("final weights sha256", r.final_weights_sha256.clone());
    rows.row(
        "replicas agree",
        if r.replicas_agree { "yes" } else { "NO" }.into(),
    );
    for p in &r.problems {
        rows.row("problem", p.clone());
    }
}

/// The gradient all-reduce: each bucket size, and against the sweep.
fn train_comm_rows(rows: &mut Rows, data: &RunData, r: &TrainReport) {
    for b in &r.allreduce {
        rows.row(
            "gradient all-reduce",
            format!(
                "{} bucket(s) of {} per step: p50 {:.3} ms, busbw {} GB/s{}",
                b.buckets,
                crate::units::Bytes(b.bytes),
                b.time_p50_s * 1e3,
                f3(b.busbw_gbps),
                r.grad_path
                    .map(|p| format!(" ({})", p.name()))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(e) = data.comm_efficiency() {
        rows.row(
            "all-reduce vs the sweep",
            format!(
                "{:.2} of the sweep's world all_reduce busbw at {} ({} GB/s)",
                e.ratio,
                crate::units::Bytes(e.bytes),
                f3(e.sweep_busbw_gbps)
            ),
        );
    }
}

/// The two halves of the resume check, when they ran.
fn resume_rows(rows: &mut Rows, data: &RunData) {
    if let Some(p) = data.train_part.as_ref().and_then(|p| p.run.as_ref()) {
        rows.row(
            "resume check: first half",
            format!("steps 1..{}, checkpoint at {}", p.last_step, p.last_step),
        );
    }
    if let Some(r) = data.train_resume.as_ref().and_then(|p| p.run.as_ref()) {
        rows.row(
            "resume check: resumed run",
            format!(
                "from step {} to {}, restore {}, final sha256 {}",
                r.resumed.as_ref().map(|x| x.step).unwrap_or(0),
                r.last_step,
                r.resumed
                    .as_ref()
                    .map(|x| format!("{:.3} s", x.restore_s))
                    .unwrap_or_else(|| "-".into()),
                r.final_weights_sha256
            ),
        );
    }
}

fn checkpoint_table(d: &mut Doc, ckpts: &[CkptWrite]) {
    if ckpts.is_empty() {
        return;
    }
    let rows = ckpts
        .iter()
        .map(|c| {
            vec![
                c.step.to_string(),
                human_bytes(c.bytes),
                format!("{:.3}", c.write_s),
                f3(c.write_gbps),
                format!("{:.3}", c.stall_s),
            ]
        })
        .collect();
    d.table(
        &[
            "checkpoint step",
            "bytes",
            "write s",
            "write GB/s",
            "stall s",
        ],
        rows,
    );
}

/// Loss (uninterrupted and resumed) and step time over the steps, checkpoints marked.
fn train_charts(d: &mut Doc, data: &RunData, t: &TrainData, ckpts: &[CkptWrite]) {
    let marks: Vec<(f64, String)> = ckpts
        .iter()
        .map(|c| (c.step as f64, "checkpoint".to_string()))
        .collect();
    let mut series = vec![("uninterrupted".to_string(), loss_points(t))];
    if let Some(r) = &data.train_resume {
        series.push(("resumed".to_string(), loss_points(r)));
    }
    d.chart(
        "loss",
        charts::over_steps("training loss", "loss", &series, &marks),
    );
    let times: Vec<(f64, f64)> = t
        .steps
        .iter()
        .map(|s| (s.step as f64, s.step_s * 1e3))
        .collect();
    if !times.is_empty() {
        d.chart(
            "step time",
            charts::over_steps(
                "step time (slowest rank)",
                "ms",
                &[("step time".to_string(), times)],
                &marks,
            ),
        );
    }
}

fn chaos_section(d: &mut Doc, data: &RunData, charts: bool) {
    let Some(c) = &data.chaos else {
        let why = match data.job("chaos") {
            Some(j) if !j.note.is_empty() && j.status == JobStatus::NotAvailable => j.note.clone(),
            Some(j) => j.describe(),
            None => "no chaos.json".into(),
        };
        d.p(format!("No chaos results: {why}."));
        return;
    };
    if c.trials.is_empty() {
        d.p("chaos.json holds no trial this burnin can read.");
    } else {
        let rows = c
            .trials
            .iter()
            .map(|t| {
                let inject = t.event("inject");
                let mut r = vec![(t.index + 1).to_string(), t.kind.clone()];
                for e in &CHAOS_EVENTS[1..] {
                    r.push(match (t.event(e), inject) {
                        (Some(x), Some(i)) => format!("+{:.2}", x - i),
                        _ => "-".into(),
                    });
                }
                r.push(
                    t.steps_lost
                        .map(|s| format!("{s:.0}"))
                        .unwrap_or_else(|| "-".into()),
                );
                r.push(
                    match t.parity {
                        Some(true) => "identical",
                        Some(false) => "DIFFERS",
                        None => "-",
                    }
                    .into(),
                );
                r.push(match t.hung {
                    Some(true) => "HUNG".into(),
                    _ => t.outcome.clone().unwrap_or_else(|| "-".into()),
                });
                r
            })
            .collect();
        d.table(
            &[
                "trial",
                "fault",
                "detect s",
                "teardown s",
                "relaunch s",
                "restore s",
                "first step s",
                "steps lost",
                "parity",
                "outcome",
            ],
            rows,
        );
        d.p("Times are seconds after the fault was injected (unix timestamps of the victim, the survivors and the supervisor).");
        if charts {
            let rows: Vec<(String, Vec<(String, f64)>)> = c
                .trials
                .iter()
                .filter_map(|t| {
                    let i = t.event("inject")?;
                    Some((
                        format!("trial {} ({})", t.index + 1, t.kind),
                        t.events.iter().map(|(n, x)| (n.clone(), x - i)).collect(),
                    ))
                })
                .collect();
            if !rows.is_empty() {
                d.chart(
                    "recovery timeline",
                    charts::recovery_timeline("recovery per trial", &rows),
                );
            }
        }
    }
    if !c.summary.is_empty() {
        d.table(
            &["summary", "value"],
            c.summary
                .iter()
                .map(|(k, v)| vec![k.clone(), v.clone()])
                .collect(),
        );
    }
}
