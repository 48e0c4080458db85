//! One trial of `burnin chaos`, phase by phase: choose the fault, launch the job with
//! it, watch until the failure is visible, tear the job down, read what the ranks
//! recorded, then recover (relaunch with `--resume`) and check the recovered run. Each
//! phase fills its part of the [`Trial`] record; a failure of the *job* is recorded
//! there, only a failure of the supervisor itself is an `Err`.
use super::args::KindOrder;
use super::ckptcheck;
use super::events::{self, unix_now, Event, What};
use super::launch::{self, run_to_end, tail, Job, Ran, Teardown, POLL, SLOW_POLL};
use super::parity::{last_step, parity, read_json};
use super::report::{self, ClockOffset, Mark, Parity, Reference, StragglerSeen, Times, Trial};
use super::setup::{fault_args, link_cut_step, s, Setup};
use super::sim::{sim, Cut};
use crate::fault::{self, FaultKind, Pick, SplitMix64};
use crate::process::stop_requested;
use crate::progress::Live;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a trial compares with.
pub struct Baseline<'a> {
    pub reference: &'a Reference,
    pub losses: &'a [f64],
}

/// Where and when the supervisor cuts a link.
struct CutAt {
    node: String,
    step: u64,
}

/// One trial's fixed facts.
struct Plan<'a> {
    st: &'a Setup,
    n: usize,
    kind: FaultKind,
    p: Paths,
    /// Longest one run may take.
    limit: Duration,
    cut_at: Option<CutAt>,
    /// The campaign's live line (on a terminal).
    live: &'a Live,
}

impl Plan<'_> {
    /// Show what the trial is doing on the live line.
    fn phase(&self, what: &str) {
        let (n, of, kind) = (self.n + 1, self.st.trials, &self.kind);
        self.live
            .set(format!("chaos: trial {n}/{of}: {kind}: {what}"));
    }
}

/// A trial's folder: launcher output, the faulted run, the resumed run, checkpoints.
struct Paths {
    dir: PathBuf,
    run: PathBuf,
    resume: PathBuf,
    ckpt: PathBuf,
}

impl Paths {
    fn fresh(out: &std::path::Path, n: usize) -> Result<Paths> {
        let dir = out.join("trials").join(format!("{n:03}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Paths {
            run: dir.join("run"),
            resume: dir.join("resume"),
            ckpt: dir.join("ckpt"),
            dir,
        })
    }
}

fn blank(n: usize, seed: u64, kind: &FaultKind, dir: PathBuf) -> Trial {
    Trial {
        schema_version: report::SCHEMA_VERSION,
        trial: n,
        seed,
        fault: kind.name(),
        family: kind.family().into(),
        description: None,
        victim_ranks: Vec::new(),
        victim_hosts: Vec::new(),
        fault_step: None,
        outcome: "failed".into(),
        problems: Vec::new(),
        notes: Vec::new(),
        relaunches: 0,
        detected_by: None,
        hung: false,
        stall: None,
        stall_missing: Vec::new(),
        straggler: None,
        teardown: None,
        expected_restore_step: None,
        restored_step: None,
        skipped_checkpoints: Vec::new(),
        checkpoints_verify: None,
        steps_lost: None,
        times: Times::default(),
        parity: Parity::default(),
        cost_usd: None,
        timeline: Vec::new(),
        clock_offsets: Vec::new(),
        dir,
    }
}

fn mark(t: &mut Trial, event: &str, unix: f64, source: impl Into<String>) {
    t.timeline.push(Mark {
        event: event.into(),
        unix,
        source: source.into(),
    });
}

/// The job's extra arguments for this fault, and where the supervisor cuts a link.
fn fault_flags(
    st: &Setup,
    kind: &FaultKind,
    seed: u64,
    p: &Paths,
    t: &mut Trial,
) -> Result<(Vec<String>, Option<CutAt>)> {
    let mut extra = vec![
        "--out".to_string(),
        s(&p.run),
        "--ckpt-dir".into(),
        s(&p.ckpt),
    ];
    if let FaultKind::LinkCut(node) = kind {
        let step = link_cut_step(st.step, st.train.steps, seed)?;
        t.description = Some(format!(
            "{kind} once step {step} is done{}",
            if st.step == Pick::Random {
                format!(" (step drawn with seed {seed})")
            } else {
                String::new()
            }
        ));
        let at = CutAt {
            node: node.clone(),
            step,
        };
        return Ok((extra, Some(at)));
    }
    let fa = fault_args(kind, st.rank, st.step, st.slow_factor, seed);
    extra.extend(["--fault".into(), kind.name()]);
    if let Some(r) = fa.fault_rank {
        extra.extend(["--fault-rank".into(), r]);
    }
    extra.extend([
        "--fault-step".into(),
        st.step.as_arg(),
        "--fault-seed".into(),
        seed.to_string(),
        "--slow-factor".into(),
        fa.slow_factor.to_string(),
    ]);
    Ok((extra, None))
}

/// What watching the faulted run found.
struct Watched<'a> {
    job: Job,
    /// Injection as first seen live (rank 0's clock), and by whom.
    inject: Option<(f64, String)>,
    /// The sign that ended the watch.
    visible: Option<Sign>,
    timed_out: bool,
    cut: Option<Cut<'a>>,
}

/// Watch the faulted run until its failure is visible (or, for `slow`, until it
/// ends), injecting a link cut when its step comes.
fn watch<'a>(plan: &Plan<'a>, job: Job, t: &mut Trial) -> Result<Watched<'a>> {
    let kind = &plan.kind;
    let mut w = Watched {
        job,
        inject: None,
        visible: None,
        timed_out: false,
        cut: None,
    };
    let ends = kind.ends_the_job();
    let mut last_events = Instant::now() - SLOW_POLL;
    let mut seen_lines = 0usize;
    loop {
        let gone = w.job.poll(SLOW_POLL);
        let now = unix_now();
        if ends && w.visible.is_none() && w.job.exit.is_none() {
            if let Some((pid, sn)) = gone.iter().find(|(_, sn)| sn.rank.is_some()) {
                w.visible = Some(Sign {
                    unix: sn.gone.unwrap_or(now),
                    what: format!("rank {} (pid {pid}) exited", sn.rank.unwrap_or(0)),
                });
            }
        }
        if ends && w.visible.is_none() {
            let lines = w.job.lines();
            if let Some(l) = lines[seen_lines.min(lines.len())..]
                .iter()
                .find(|l| launch::is_failure_line(&l.text))
            {
                w.visible = Some(Sign {
                    unix: l.unix,
                    what: l.text.clone(),
                });
            }
            seen_lines = lines.len();
        }
        if last_events.elapsed() >= SLOW_POLL {
            last_events = Instant::now();
            read_live_events(plan, &mut w, t)?;
        }
        if watch_ends(plan, &mut w, t, now) {
            break;
        }
        std::thread::sleep(POLL);
    }
    Ok(w)
}

/// One look at the events of the faulted run (while [`watch`]ing it): the injection
/// as first seen, a check-in or watchdog line as the visible sign, and the link cut
/// injected once the cut step is reached.
fn read_live_events<'a>(plan: &Plan<'a>, w: &mut Watched<'a>, t: &mut Trial) -> Result<()> {
    let (st, n, p) = (plan.st, plan.n, &plan.p);
    let ends = plan.kind.ends_the_job();
    for e in events::read_all(&p.run) {
        match &e.what {
            What::Inject { .. } if w.inject.is_none() => {
                w.inject = Some((e.unix0(), format!("rank {} ({})", e.rank, e.host)));
            }
            What::CheckinTimeout { line, .. } | What::Watchdog { line } if ends => {
                w.visible.get_or_insert(Sign {
                    unix: e.unix0(),
                    what: line.clone(),
                });
            }
            _ => {}
        }
    }
    if let (Some(CutAt { node, step }), None, Some(sim_path)) = (&plan.cut_at, &w.cut, &st.sim) {
        let reached = last_step(&p.run);
        if w.job.exit.is_none() && reached.is_some_and(|s| s >= *step) {
            sim(sim_path, "cut", node)?;
            w.cut = Some(Cut::new(sim_path, node));
            w.inject = Some((unix_now(), "supervisor (sim-cluster cut)".into()));
            t.fault_step = reached;
            plan.live.suspend(|| {
                println!(
                    "# chaos: trial {}: cut {node}'s link after step {}",
                    n + 1,
                    reached.unwrap_or(*step)
                )
            });
        }
    }
    Ok(())
}

/// Whether [`watch`] stops now (`now`: unix s): the job ended or its failure is
/// visible, or (a problem of the trial) it hung, ran past --run-timeout, or was
/// interrupted.
fn watch_ends(plan: &Plan, w: &mut Watched, t: &mut Trial, now: f64) -> bool {
    let (st, ends) = (plan.st, plan.kind.ends_the_job());
    if w.job.exit.is_some() || (ends && w.visible.is_some()) {
        return true;
    }
    if let (true, Some((at, _))) = (ends, &w.inject) {
        if now - at > st.hang_limit.as_secs_f64() {
            t.hung = true;
            t.problems.push(format!(
                "nothing noticed the failure within --hang-limit {:.0} s: the job hung",
                st.hang_limit.as_secs_f64()
            ));
            return true;
        }
    }
    if w.job.elapsed() > plan.limit {
        w.timed_out = true;
        t.problems.push(format!(
            "the faulted run did not end within {:.0} s (--run-timeout)",
            plan.limit.as_secs_f64()
        ));
        return true;
    }
    if stop_requested() {
        t.problems.push("interrupted".into());
        return true;
    }
    false
}

/// Record what the teardown left.
fn check_teardown(t: &mut Trial, job: &mut Job, td: &Teardown) {
    if !td.tree_empty {
        let live: Vec<String> = job.live().iter().map(|(p, c)| format!("{p} {c}")).collect();
        t.problems.push(format!(
            "processes of the job survived the teardown ({})",
            live.join(", ")
        ));
    }
    if !td.left_behind.is_empty() {
        // Reported, not a failure of the trial: the supervisor ended them, and what a
        // launcher cannot reach (a cut node) it cannot stop.
        t.notes.push(format!(
            "the launcher exited leaving processes behind (the supervisor ended them): {}",
            td.left_behind.join(", ")
        ));
    }
}

/// From the faulted run's events: clock offsets, the resolved fault, victims,
/// stragglers, and where the job waited in vain.
fn read_events(t: &mut Trial, evs: &[Event], cut_at: &Option<CutAt>) {
    read_plan(t, evs, cut_at);
    read_stragglers(t, evs);
    read_stall(t, evs);
}

/// The faulted run's start and plan events: clock offsets (by rank), the resolved
/// fault, its victims (a cut node's ranks when no rank was named).
fn read_plan(t: &mut Trial, evs: &[Event], cut_at: &Option<CutAt>) {
    for e in evs {
        match &e.what {
            What::Start { clock_rtt_s, .. } => t.clock_offsets.push(ClockOffset {
                rank: e.rank,
                host: e.host.clone(),
                offset_s: e.offset_s,
                rtt_s: *clock_rtt_s,
            }),
            What::FaultPlan {
                ranks,
                step,
                description,
                ..
            } => {
                t.victim_ranks = ranks.clone();
                t.fault_step = Some(*step);
                t.description = Some(description.clone());
            }
            What::Inject { .. } if !t.victim_hosts.contains(&e.host) => {
                t.victim_hosts.push(e.host.clone());
            }
            _ => {}
        }
    }
    t.clock_offsets.sort_by_key(|c| c.rank);
    if let (true, Some(CutAt { node, .. })) = (t.victim_ranks.is_empty(), cut_at) {
        t.victim_ranks = t
            .clock_offsets
            .iter()
            .filter(|c| &c.host == node)
            .map(|c| c.rank)
            .collect();
        t.victim_hosts = vec![node.clone()];
    }
}

/// The straggler: the victim's report if there is one; the others are noted.
fn read_stragglers(t: &mut Trial, evs: &[Event]) {
    let stragglers: Vec<(&Event, StragglerSeen)> = evs
        .iter()
        .filter_map(|e| match &e.what {
            What::Straggler {
                straggler,
                straggler_host,
                factor,
                step,
                line,
                ..
            } => Some((
                e,
                StragglerSeen {
                    rank: *straggler,
                    host: straggler_host.clone(),
                    factor: *factor,
                    step: *step,
                    detect_s: None,
                    line: line.clone(),
                },
            )),
            _ => None,
        })
        .collect();
    let chosen = stragglers
        .iter()
        .find(|(_, sg)| t.victim_ranks.contains(&sg.rank))
        .or(stragglers.first());
    if let Some((e, sg)) = chosen {
        t.straggler = Some(sg.clone());
        mark(t, "straggler", e.unix0(), format!("rank {}", e.rank));
    }
    for (_, sg) in &stragglers {
        if Some(sg.rank) != t.straggler.as_ref().map(|c| c.rank) {
            t.notes
                .push(format!("also reported as a straggler: {}", sg.line));
        }
    }
}

/// Where the job waited in vain (the trial's stall line and the ranks it names).
fn read_stall(t: &mut Trial, evs: &[Event]) {
    // Where the job waited in vain: rank 0's line (it hears every rank, so it names
    // the missing ones), else the first check-in line, else the first watchdog line;
    // failing those (the launcher ended the job first), who went silent.
    let lines: Vec<(&Event, &String, Option<&Vec<usize>>)> = evs
        .iter()
        .filter_map(|e| match &e.what {
            What::CheckinTimeout { line, missing, .. } => Some((e, line, Some(missing))),
            What::Watchdog { line } => Some((e, line, None)),
            _ => None,
        })
        .collect();
    let silent: Vec<(&Event, &String, Option<&Vec<usize>>)> = evs
        .iter()
        .filter_map(|e| match &e.what {
            What::Silent { line, ranks } => Some((e, line, Some(ranks))),
            _ => None,
        })
        .collect();
    let pick = lines
        .iter()
        .find(|(e, _, m)| e.rank == 0 && m.is_some())
        .or_else(|| lines.iter().find(|(e, _, _)| e.rank == 0))
        .or_else(|| lines.iter().find(|(_, _, m)| m.is_some()))
        .or(lines.first())
        .or_else(|| silent.iter().find(|(e, _, _)| e.rank == 0))
        .or(silent.first());
    if let Some((_, line, missing)) = pick {
        t.stall = Some((*line).clone());
        t.stall_missing = missing.cloned().unwrap_or_default();
    }
}

/// `slow`: the job must run to its end, name the straggler, and stay correct.
fn finish_slow(t: &mut Trial, w: &Watched, td: Teardown, p: &Paths, base: &Baseline) {
    let exit = td.launcher_exit.clone();
    t.teardown = Some(td);
    if exit != "exit 0" || w.timed_out {
        t.problems.push(format!(
            "the run with a straggler did not finish ({exit}): {}",
            tail(&w.job.lines(), 3)
        ));
    }
    match read_json(&p.run.join("run.json")) {
        Ok(run) => {
            t.parity = parity(
                &run,
                base.losses,
                &base.reference.final_weights_sha256,
                None,
            )
        }
        Err(e) => t.problems.push(format!("{e:#}")),
    }
    t.times.detect_s = t.straggler.as_ref().and_then(|sg| sg.detect_s);
    match &t.straggler {
        None => t.problems.push("no straggler was reported".into()),
        Some(sg) if !t.victim_ranks.contains(&sg.rank) => t.problems.push(format!(
            "the straggler reported is rank {}, the slowed rank is {:?}",
            sg.rank, t.victim_ranks
        )),
        _ => {}
    }
    if !t.parity.ok() {
        let why = t.parity.detail.clone().unwrap_or_default();
        t.problems.push(format!("parity: {why}"));
    }
    if t.problems.is_empty() {
        t.outcome = "completed".into();
    }
    let end = w.job.exit.as_ref().map(|e| e.1).unwrap_or_else(unix_now);
    mark(t, "end", end, "supervisor");
}

/// A sign that the job failed, and when it was seen.
#[derive(Clone, Debug)]
pub(super) struct Sign {
    pub(super) unix: f64,
    pub(super) what: String,
}

/// The signs of failure in what a job left: rank processes gone while the launcher
/// ran, failure lines, deadline events, the launcher's exit.
pub(super) fn signs(job: &Job, evs: &[Event]) -> Vec<Sign> {
    let mut out = Vec::new();
    let launcher_end = job.exit.as_ref().map(|(_, t)| *t).unwrap_or(f64::INFINITY);
    for (pid, seen) in &job.seen {
        if let (Some(rank), Some(gone)) = (seen.rank, seen.gone) {
            if gone < launcher_end {
                out.push(Sign {
                    unix: gone,
                    what: format!("rank {rank} (pid {pid}) exited while the job ran"),
                });
            }
        }
    }
    for l in job.lines() {
        if launch::is_failure_line(&l.text) {
            out.push(Sign {
                unix: l.unix,
                what: format!("launcher output: {}", l.text.trim()),
            });
        }
    }
    for e in evs {
        match &e.what {
            What::CheckinTimeout { line, .. }
            | What::Watchdog { line }
            | What::Silent { line, .. } => out.push(Sign {
                unix: e.unix0(),
                what: format!("events of rank {}: {line}", e.rank),
            }),
            _ => {}
        }
    }
    if let Some((st, t)) = &job.exit {
        out.push(Sign {
            unix: *t,
            what: format!("launcher exited ({})", launch::describe_exit(st)),
        });
    }
    out.sort_by(|a, b| a.unix.total_cmp(&b.unix));
    out
}

/// Detection and teardown times, from every sign the job left.
fn detection(t: &mut Trial, w: &Watched, evs: &[Event], inject_t: f64, td: &Teardown) {
    let first = signs(&w.job, evs)
        .into_iter()
        .find(|sg| sg.unix >= inject_t - 0.01);
    let detect_t = match first {
        Some(sg) => {
            t.detected_by = Some(sg.what);
            Some(sg.unix.max(inject_t))
        }
        None => w.visible.as_ref().map(|v| v.unix),
    };
    if let Some(d) = detect_t {
        t.times.detect_s = Some(d - inject_t);
        t.times.teardown_s = Some((td.done_unix - d).max(0.0));
        let by = t.detected_by.clone().unwrap_or_default();
        mark(t, "detect", d, by);
    }
    mark(t, "teardown-begin", td.began_unix, "supervisor");
    mark(
        t,
        "teardown-done",
        td.done_unix,
        format!("supervisor ({})", td.how),
    );
}

/// Relaunch with `--resume` (retried when it fails before its ranks are up), then
/// time the recovery and check it against the reference.
fn recover(plan: &Plan, base: &Baseline, t: &mut Trial, gone_t: f64, inject_t: f64) -> Result<()> {
    let p = &plan.p;
    t.expected_restore_step = ckptcheck::inspect(&p.ckpt).newest_verified();
    if plan.cut_at.is_some() {
        // A cut lands a moment after the supervisor saw the step it waits for: the
        // job may finish more steps (and checkpoint one) while the cut is applied.
        // The fault step is the newest step the job is known to have done: its last
        // logged step, or a newer checkpoint's.
        t.fault_step = [t.fault_step, last_step(&p.run), t.expected_restore_step]
            .into_iter()
            .flatten()
            .max();
    }
    let r = relaunch(plan, t)?;
    check_resumed_run(t, &r, plan.limit);
    recovery_times(t, p, &r, gone_t, inject_t);
    check_recovered(t, plan, base);
    Ok(())
}

/// Like a launcher with restarts: a job that fails before its ranks are up (a
/// daemon that could not connect yet) is started again, twice at most.
fn relaunch(plan: &Plan, t: &mut Trial) -> Result<Ran> {
    let (st, p) = (plan.st, &plan.p);
    let argv = st.argv(&[
        "--out".into(),
        s(&p.resume),
        "--ckpt-dir".into(),
        s(&p.ckpt),
        "--resume".into(),
    ]);
    let mut attempt = 1;
    let r = loop {
        let name = match attempt {
            1 => "resume".to_string(),
            a => format!("resume-{a}"),
        };
        let r = run_to_end(&argv, &p.dir, &name, plan.limit, st.grace)?;
        mark(
            t,
            "relaunch",
            r.job.spawned_unix,
            format!("supervisor (attempt {attempt})"),
        );
        let up = events::read_all(&p.resume)
            .iter()
            .any(|e| matches!(e.what, What::Start { .. }));
        if up || r.teardown.launcher_exit == "exit 0" || attempt == 3 || stop_requested() {
            break r;
        }
        t.notes.push(format!(
            "relaunch attempt {attempt} failed before the ranks were up ({}): {}",
            r.teardown.launcher_exit,
            tail(&r.job.lines(), 2)
        ));
        attempt += 1;
        std::thread::sleep(Duration::from_secs(1));
    };
    t.relaunches = attempt;
    Ok(r)
}

/// The resumed run's own problems: a timeout, survivors, a failed exit.
fn check_resumed_run(t: &mut Trial, r: &Ran, limit: Duration) {
    if r.timed_out {
        t.problems.push(format!(
            "the resumed run did not end within {:.0} s",
            limit.as_secs_f64()
        ));
    }
    if !r.teardown.tree_empty {
        t.problems
            .push("processes of the resumed job survived its end".into());
    }
    if r.teardown.launcher_exit != "exit 0" {
        t.problems.push(format!(
            "the resumed run failed ({}): {}",
            r.teardown.launcher_exit,
            tail(&r.job.lines(), 3)
        ));
    }
}

/// From the resumed run's events: the restored step, the recovery marks and times,
/// and the steps lost.
fn recovery_times(t: &mut Trial, p: &Paths, r: &Ran, gone_t: f64, inject_t: f64) {
    let revs = events::read_all(&p.resume);
    let rank0 = |pick: fn(&What) -> bool| {
        revs.iter()
            .find(|e| e.rank == 0 && pick(&e.what))
            .map(|e| e.unix0())
    };
    let up = rank0(|w| matches!(w, What::Start { .. }));
    let restored = rank0(|w| matches!(w, What::Restored { .. }));
    let first_step = rank0(|w| matches!(w, What::FirstStep { .. }));
    for e in revs.iter().filter(|e| e.rank == 0) {
        if let What::Restored { step, skipped, .. } = &e.what {
            t.restored_step = *step;
            t.skipped_checkpoints = skipped.clone();
        }
    }
    for (name, time) in [
        ("ranks-up", up),
        ("restore", restored),
        ("first-step", first_step),
    ] {
        if let Some(u) = time {
            mark(t, name, u, "rank 0 of the relaunched job");
        }
    }
    let end = r.job.exit.as_ref().map(|e| e.1).unwrap_or_else(unix_now);
    mark(t, "end", end, "supervisor");
    let between = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    t.times.relaunch_s = between(Some(gone_t), up);
    t.times.restore_s = between(up, restored);
    t.times.first_step_s = between(restored, first_step);
    t.times.total_recovery_s = between(Some(inject_t), first_step);
    t.steps_lost = t
        .fault_step
        .map(|fs| fs.saturating_sub(t.restored_step.unwrap_or(0)));
}

/// The recovered run against what it should be: the checkpoint it restored, the
/// checkpoints after it, parity with the reference; and what the recovery cost.
fn check_recovered(t: &mut Trial, plan: &Plan, base: &Baseline) {
    let (st, p, kind) = (plan.st, &plan.p, &plan.kind);
    if t.restored_step != t.expected_restore_step {
        t.problems.push(format!(
            "restored step {:?}, but the newest checkpoint that verified when the job was gone is {:?}",
            t.restored_step, t.expected_restore_step
        ));
    }
    if *kind == FaultKind::CorruptCkpt && t.skipped_checkpoints.is_empty() {
        t.problems
            .push("the damaged checkpoint was not reported as skipped".into());
    }
    let after = ckptcheck::inspect(&p.ckpt);
    t.checkpoints_verify = Some(after.bad.is_empty());
    if !after.bad.is_empty() {
        t.problems.push(format!(
            "checkpoints that do not verify after the recovery: {:?}",
            after.bad
        ));
    }
    match read_json(&p.resume.join("run.json")) {
        Ok(run) => {
            t.parity = parity(
                &run,
                base.losses,
                &base.reference.final_weights_sha256,
                t.fault_step.map(|s| (p.run.as_path(), s)),
            )
        }
        Err(e) => t.problems.push(format!("{e:#}")),
    }
    if !t.parity.ok() {
        let why = t
            .parity
            .detail
            .clone()
            .unwrap_or_else(|| "not checked".into());
        t.problems.push(format!("parity: {why}"));
    }
    if let (Some(price), Some(total), Some(lost)) =
        (st.price, t.times.total_recovery_s, t.steps_lost)
    {
        let seconds = total + lost as f64 * base.reference.step_p50_s;
        t.cost_usd = Some(seconds * base.reference.world_size as f64 * price / 3600.0);
    }
}

/// A trial's start: its fault kind (drawn or cycled), fresh paths, the fault's flags,
/// the run's time limit, and the faulted job spawned.
fn prepare<'a>(
    st: &'a Setup,
    base: &Baseline,
    n: usize,
    live: &'a Live,
) -> Result<(Plan<'a>, Job, Trial)> {
    let seed = fault::trial_seed(st.seed, n);
    let k = match st.order {
        KindOrder::Random => SplitMix64(seed).between(0, st.kinds.len() as u64 - 1) as usize,
        KindOrder::Cycle => n % st.kinds.len(),
    };
    let kind = st.kinds[k].clone();
    let p = Paths::fresh(&st.out, n)?;
    let mut t = blank(n, seed, &kind, p.dir.clone());
    let (extra, cut_at) = fault_flags(st, &kind, seed, &p, &mut t)?;
    let limit = st.run_timeout.unwrap_or_else(|| {
        Duration::from_secs_f64((base.reference.wall_s * 4.0 + 60.0).max(120.0))
    });
    let job = Job::spawn(
        &st.argv(&extra),
        &p.dir.join("launch.stdout"),
        &p.dir.join("launch.stderr"),
    )?;
    let plan = Plan {
        st,
        n,
        kind,
        p,
        limit,
        cut_at,
        live,
    };
    Ok((plan, job, t))
}

/// When the fault fired (unix s): the earliest inject event, else as first seen live.
fn first_injection(evs: &[Event], w: &Watched) -> Option<f64> {
    evs.iter()
        .filter(|e| matches!(e.what, What::Inject { .. }))
        .map(|e| e.unix0())
        .min_by(f64::total_cmp)
        .or(w.inject.as_ref().map(|i| i.0))
}

/// The injection on the timeline (by whom it was seen), and the straggler's detection
/// time (s after `inject_t`).
fn mark_injection(t: &mut Trial, w: &Watched, inject_t: f64) {
    let by = w.inject.as_ref().map(|i| i.1.clone());
    mark(t, "inject", inject_t, by.unwrap_or_else(|| "victim".into()));
    let seen_at = t
        .timeline
        .iter()
        .find(|m| m.event == "straggler")
        .map(|m| (m.unix - inject_t).max(0.0));
    if let Some(sg) = &mut t.straggler {
        sg.detect_s = seen_at;
    }
}

/// A hang must be named: every victim rank among the stall line's missing ones.
fn check_hang_named(t: &mut Trial) {
    if !t.victim_ranks.iter().all(|v| t.stall_missing.contains(v)) {
        let line = t.stall.clone().unwrap_or_else(|| "no deadline line".into());
        t.problems.push(format!(
            "the hang of rank(s) {:?} was not named: {line}",
            t.victim_ranks
        ));
    }
}

/// Trial `n`, start to finish.
/// `live`: the line that shows its phases on a terminal.
pub fn run(st: &Setup, base: &Baseline, n: usize, live: &Live) -> Result<Trial> {
    let (plan, job, mut t) = prepare(st, base, n, live)?;
    let (kind, p) = (&plan.kind, &plan.p);
    plan.phase("watching the job");
    let mut w = watch(&plan, job, &mut t)?;
    plan.phase("tearing the job down");
    let td = w.job.teardown(st.teardown_wait, st.grace);
    check_teardown(&mut t, &mut w.job, &td);
    let healed = match w.cut.as_mut() {
        Some(c) => Some(c.heal()?),
        None => None,
    };
    let evs = events::read_all(&p.run);
    read_events(&mut t, &evs, &plan.cut_at);
    let Some(inject_t) = first_injection(&evs, &w) else {
        t.problems.insert(
            0,
            format!(
                "the fault never fired (launcher {}): {}",
                td.launcher_exit,
                tail(&w.job.lines(), 3)
            ),
        );
        t.teardown = Some(td);
        return Ok(t);
    };
    mark_injection(&mut t, &w, inject_t);
    if !kind.ends_the_job() {
        finish_slow(&mut t, &w, td, p, base);
        return Ok(t);
    }
    detection(&mut t, &w, &evs, inject_t, &td);
    if let Some(h) = healed {
        mark(&mut t, "heal", h, "supervisor (sim-cluster heal)");
    }
    if *kind == FaultKind::Hang {
        check_hang_named(&mut t);
    }
    let (gone_t, torn_down) = (td.done_unix, td.tree_empty);
    t.teardown = Some(td);
    if t.hung || !torn_down || stop_requested() {
        return Ok(t);
    }
    plan.phase("recovering (relaunch with --resume)");
    recover(&plan, base, &mut t, gone_t, inject_t)?;
    if t.problems.is_empty() {
        t.outcome = "recovered".into();
    }
    Ok(t)
}
