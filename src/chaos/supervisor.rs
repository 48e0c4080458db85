//! `burnin chaos`: the supervisor, run once on the launch host (not under mpirun).
//!
//! 1. Run the job once without a fault: the reference (final weights, losses, step
//!    time).
//! 2. Per trial: launch the job with a fault into a fresh checkpoint folder; watch the
//!    launcher's output, the process tree and the ranks' events JSONL; note the first
//!    visible sign of failure; tear the job down (the launcher's own clean-up first,
//!    then SIGTERM, grace, SIGKILL to every process) and check that nothing is left;
//!    check the checkpoints independently; relaunch with `--resume`; compare the
//!    recovered run with the reference (losses bit for bit, final weights' sha256).
//!    `link-cut` is injected here (`sim-cluster cut NODE` once the job's steps.jsonl
//!    reaches the step, `heal` after the teardown); `slow` is not torn down: it must
//!    run to its end, with the straggler named.
//! 3. Write `trials.jsonl` (a line per trial, as it ends) and `chaos.json` (rewritten
//!    after every trial), print a line per trial and a summary table.
//!
//! Clocks: rank events are put on rank 0's clock with the offsets each rank measured
//! at start; the supervisor's own marks (teardown, relaunch) are on its clock. On one
//! host (the simulated cluster, plain mpirun) the clocks are the same; across hosts the
//! launch host and rank 0's host are assumed NTP-synchronised (typically the same).
use super::args::{self, ChaosArgs, KindOrder};
use super::ckptcheck;
use super::events::{self, unix_now, Event, What};
use super::fault::{self, FaultKind, Pick, SplitMix64};
use super::launch::{self, Job, Line, Teardown};
use super::proctree;
use super::report::{
    self, ChaosReport, ClockOffset, Mark, Parity, Reference, StragglerSeen, Times, Trial,
};
use crate::error::{usage, Outcome};
use crate::results::{self, Jsonl};
use crate::train::TrainArgs;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the watch loop looks (output lines and known processes); the full
/// process-tree scan and the events files are read every [`SLOW_POLL`].
const POLL: Duration = Duration::from_millis(20);
const SLOW_POLL: Duration = Duration::from_millis(100);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM to the supervisor: tear the job down, then stop. (The job runs in
/// its own process group, so a terminal's Ctrl-C does not reach it directly.)
fn catch_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Everything a campaign needs, validated.
struct Setup {
    launch: Vec<String>,
    burnin: PathBuf,
    kinds: Vec<FaultKind>,
    order: KindOrder,
    rank: Pick,
    step: Pick,
    slow_factor: f64,
    train: TrainArgs,
    train_args: Vec<String>,
    sim: Option<PathBuf>,
    out: PathBuf,
    hang_limit: Duration,
    teardown_wait: Duration,
    grace: Duration,
    run_timeout: Option<Duration>,
    price: Option<f64>,
    trials: usize,
    seed: u64,
}

fn setup(a: &ChaosArgs) -> Result<Setup> {
    args::check_numbers(a)?;
    let launch = shlex::split(&a.launch).ok_or_else(|| {
        usage(
            "--launch",
            format!(
                "cannot split '{}' into words (an unbalanced quote?)",
                a.launch
            ),
        )
    })?;
    if launch.is_empty() {
        return Err(usage(
            "--launch",
            "is empty; give the launcher, e.g. 'mpirun -np 4'",
        ));
    }
    let kinds = args::parse_kinds(&a.fault)?;
    let train = args::parse_train_args(&a.train_args)?;
    let rank = Pick::parse("--fault-rank", Some(&a.fault_rank))?;
    let step = Pick::parse("--fault-step", Some(&a.fault_step))?;
    // Each kind must fit the run (the job checks the rank against its size).
    for k in &kinds {
        let fa = fault_args(k, Pick::Random, step, a.slow_factor, 0);
        if let FaultKind::LinkCut(_) = k {
            link_cut_step(step, train.steps, 1)?;
        } else {
            fault::plan(
                &fa,
                usize::MAX,
                train.steps,
                train.ckpt_every,
                train.keep,
                0,
            )
            .map_err(|e| anyhow!("{e:#} (for --fault {k})"))?;
        }
    }
    let sim = if kinds.iter().any(|k| matches!(k, FaultKind::LinkCut(_))) {
        let p = match &a.sim_cluster {
            Some(p) => p.clone(),
            None if Path::new(&launch[0]).file_name().is_some_and(|n| n == "sim-cluster") => {
                PathBuf::from(&launch[0])
            }
            None => {
                return Err(usage(
                    "--fault link-cut",
                    "needs the simulated cluster: --launch 'launch/sim-cluster exec --', or --sim-cluster PATH",
                ))
            }
        };
        if !p.is_file() {
            return Err(usage(
                "--sim-cluster",
                format!("{} is not a file", p.display()),
            ));
        }
        Some(p)
    } else {
        None
    };
    let burnin = match &a.burnin {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("cannot find this burnin's path; give --burnin")?,
    };
    if !burnin.is_file() {
        return Err(usage(
            "--burnin",
            format!("{} is not a file", burnin.display()),
        ));
    }
    results::create_out_dir(&a.out, "--out")?;
    let secs = Duration::from_secs_f64;
    Ok(Setup {
        launch,
        burnin,
        kinds,
        order: a.kind_order,
        rank,
        step,
        slow_factor: a.slow_factor,
        train,
        train_args: a.train_args.clone(),
        sim,
        out: a.out.clone(),
        hang_limit: secs(a.hang_limit),
        teardown_wait: secs(a.teardown_wait),
        grace: secs(a.grace),
        run_timeout: a.run_timeout.map(secs),
        price: a.gpu_hour_usd,
        trials: a.trials,
        seed: a.seed,
    })
}

/// The `--fault*` flags a trial hands the job.
fn fault_args(k: &FaultKind, rank: Pick, step: Pick, slow: f64, seed: u64) -> fault::FaultArgs {
    fault::FaultArgs {
        fault: Some(k.name()),
        fault_rank: k.has_victim_rank().then(|| rank.as_arg()),
        fault_step: Some(step.as_arg()),
        slow_factor: slow,
        fault_seed: Some(seed),
    }
}

/// The step at which the supervisor cuts a link.
fn link_cut_step(step: Pick, steps: u64, seed: u64) -> Result<u64> {
    match step {
        Pick::Fixed(s) if s >= 1 && s < steps => Ok(s),
        Pick::Fixed(s) => Err(usage(
            "--fault-step",
            format!(
                "{s} must be between 1 and --steps - 1 = {}",
                steps.saturating_sub(1)
            ),
        )),
        Pick::Random => {
            let (lo, hi) = FaultKind::LinkCut(String::new())
                .step_range(steps, 0, 2)
                .map_err(|e| usage("--fault-step", e))?;
            Ok(SplitMix64(seed).between(lo, hi))
        }
    }
}

impl Setup {
    /// launcher + burnin train + the user's train args + `extra`.
    fn argv(&self, extra: &[String]) -> Vec<String> {
        let mut v = self.launch.clone();
        v.push(self.burnin.display().to_string());
        v.push("train".into());
        v.extend(self.train_args.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// What a finished (or torn down) run left.
struct Ran {
    job: Job,
    teardown: Teardown,
    timed_out: bool,
    interrupted: bool,
}

/// Run to the end (bounded by `limit`), then check that nothing is left.
fn run_to_end(
    argv: &[String],
    dir: &Path,
    name: &str,
    limit: Duration,
    grace: Duration,
) -> Result<Ran> {
    let mut job = Job::spawn(
        argv,
        &dir.join(format!("{name}.stdout")),
        &dir.join(format!("{name}.stderr")),
    )?;
    let mut timed_out = false;
    let mut interrupted = false;
    while job.exit.is_none() {
        job.poll(SLOW_POLL);
        if job.elapsed() > limit {
            timed_out = true;
            break;
        }
        if stopping() {
            interrupted = true;
            break;
        }
        std::thread::sleep(POLL);
    }
    let teardown = job.teardown(Duration::ZERO, grace);
    Ok(Ran {
        job,
        teardown,
        timed_out,
        interrupted,
    })
}

/// The last lines of a run's stderr, for a problem message.
fn tail(lines: &[Line], n: usize) -> String {
    let l: Vec<&str> = lines
        .iter()
        .filter(|l| l.stderr && !l.text.trim().is_empty())
        .map(|l| l.text.as_str())
        .collect();
    l[l.len().saturating_sub(n)..].join(" | ")
}

fn read_json(p: &Path) -> Result<Value> {
    let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", p.display()))
}

fn losses(run: &Value) -> Vec<f64> {
    run["losses"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default()
}

fn reference(st: &Setup) -> Result<Reference> {
    let dir = st.out.join("reference");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let run_dir = dir.join("run");
    let ckpt = dir.join("ckpt");
    let _ = std::fs::remove_dir_all(&run_dir);
    let _ = std::fs::remove_dir_all(&ckpt);
    let argv = st.argv(&["--out".into(), s(&run_dir), "--ckpt-dir".into(), s(&ckpt)]);
    println!("# chaos: reference run (no fault): {}", argv.join(" "));
    let limit = st.run_timeout.unwrap_or(Duration::from_secs(3600));
    let r = run_to_end(&argv, &dir, "launch", limit, st.grace)?;
    if r.interrupted {
        bail!("interrupted");
    }
    let exit = r.teardown.launcher_exit.clone();
    if r.timed_out || exit != "exit 0" {
        bail!(
            "the reference run (no fault) did not succeed ({}); see {}: {}",
            if r.timed_out {
                "timed out".to_string()
            } else {
                exit
            },
            dir.display(),
            tail(&r.job.lines(), 3)
        );
    }
    let run = read_json(&run_dir.join("run.json"))?;
    let wall_s = r
        .job
        .exit
        .as_ref()
        .map(|(_, t)| *t)
        .unwrap_or_else(unix_now)
        - r.job.spawned_unix;
    let reference = Reference {
        dir,
        wall_s,
        steps: run["plan"]["steps"].as_u64().unwrap_or(0),
        world_size: run["provenance"]["world_size"].as_u64().unwrap_or(1) as usize,
        step_p50_s: run["step_time"]["p50_us"].as_f64().unwrap_or(0.0) / 1e6,
        final_weights_sha256: run["final_weights_sha256"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    };
    println!(
        "# chaos: reference: {} ranks, {} steps in {:.1} s, step p50 {:.1} ms, final weights {}",
        reference.world_size,
        reference.steps,
        reference.wall_s,
        reference.step_p50_s * 1e3,
        &reference.final_weights_sha256[..reference.final_weights_sha256.len().min(16)]
    );
    Ok(reference)
}

/// A sign that the job failed, and when it was seen.
#[derive(Clone, Debug)]
struct Sign {
    unix: f64,
    what: String,
}

/// The signs of failure in what a job left: rank processes gone while the launcher
/// ran, failure lines, deadline events, the launcher's exit.
fn signs(job: &Job, evs: &[Event]) -> Vec<Sign> {
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
            What::CheckinTimeout { line, .. } | What::Watchdog { line } => out.push(Sign {
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

/// Newest step recorded in a run's steps.jsonl.
fn last_step(out: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(out.join("steps.jsonl")).ok()?;
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok()?["step"].as_u64())
}

/// step -> loss of a run's steps.jsonl.
fn step_losses(out: &Path) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(out.join("steps.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some((v["step"].as_u64()?, v["loss"].as_f64()?))
        })
        .collect()
}

/// Run `sim-cluster cut|heal NODE`.
fn sim(sim: &Path, verb: &str, node: &str) -> Result<()> {
    let out = std::process::Command::new(sim)
        .args([verb, node])
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} {verb} {node}", sim.display()))?;
    if !out.status.success() {
        bail!(
            "{} {verb} {node} failed: {}",
            sim.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Heals a cut link whatever happens.
struct Cut<'a> {
    sim: &'a Path,
    node: String,
    healed: bool,
}

impl Cut<'_> {
    fn heal(&mut self) -> Result<f64> {
        self.healed = true;
        sim(self.sim, "heal", &self.node)?;
        Ok(unix_now())
    }
}

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        if !self.healed {
            let _ = sim(self.sim, "heal", &self.node);
        }
    }
}

/// Parity of a finished run (`run.json` in `out`) against the reference losses/sha.
fn parity(run: &Value, ref_losses: &[f64], ref_sha: &str, before: Option<(&Path, u64)>) -> Parity {
    let mut p = Parity::default();
    let sha = run["final_weights_sha256"].as_str().unwrap_or("");
    p.weights_match = Some(!sha.is_empty() && sha == ref_sha);
    if p.weights_match == Some(false) {
        p.detail = Some(format!("final weights {sha} vs reference {ref_sha}"));
    }
    let first = run["first_step"].as_u64().unwrap_or(1).max(1);
    let l = losses(run);
    let mut ok = !l.is_empty() || run["steps_run"].as_u64() == Some(0);
    for (i, x) in l.iter().enumerate() {
        let step = first + i as u64;
        match ref_losses.get(step as usize - 1) {
            Some(r) if r.to_bits() == x.to_bits() => {}
            other => {
                ok = false;
                p.detail.get_or_insert(format!(
                    "loss of step {step}: {x} vs reference {}",
                    other
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "none".into())
                ));
                break;
            }
        }
    }
    p.losses_match = Some(ok);
    p.steps_compared = l.len();
    if let Some((dir, upto)) = before {
        let mut same = true;
        for (step, x) in step_losses(dir).into_iter().filter(|(s, _)| *s <= upto) {
            if ref_losses.get(step as usize - 1).map(|r| r.to_bits()) != Some(x.to_bits()) {
                same = false;
                p.detail
                    .get_or_insert(format!("loss of step {step} before the fault differs"));
                break;
            }
        }
        p.before_fault_match = Some(same);
    }
    p
}

/// One trial, start to finish. Errors of the supervisor itself (cannot spawn, cannot
/// write) are returned; the job's failures are recorded in the trial.
fn trial(st: &Setup, reference: &Reference, ref_losses: &[f64], n: usize) -> Result<Trial> {
    let seed = fault::trial_seed(st.seed, n);
    let mut rng = SplitMix64(seed);
    let k = match st.order {
        KindOrder::Random => rng.between(0, st.kinds.len() as u64 - 1) as usize,
        KindOrder::Cycle => n % st.kinds.len(),
    };
    let kind = st.kinds[k].clone();
    let dir = st.out.join("trials").join(format!("{n:03}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let run_dir = dir.join("run");
    let resume_dir = dir.join("resume");
    let ckpt = dir.join("ckpt");
    let mut t = Trial {
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
        dir: dir.clone(),
    };
    let mut extra = vec![
        "--out".to_string(),
        s(&run_dir),
        "--ckpt-dir".into(),
        s(&ckpt),
    ];
    let mut cut_at: Option<(String, u64)> = None;
    match &kind {
        FaultKind::LinkCut(node) => {
            let step = link_cut_step(st.step, st.train.steps, seed)?;
            cut_at = Some((node.clone(), step));
            t.description = Some(format!(
                "{kind} once step {step} is done{}",
                if st.step == Pick::Random {
                    format!(" (step drawn with seed {seed})")
                } else {
                    String::new()
                }
            ));
        }
        k => {
            let fa = fault_args(k, st.rank, st.step, st.slow_factor, seed);
            extra.extend(["--fault".into(), k.name()]);
            if let Some(r) = &fa.fault_rank {
                extra.extend(["--fault-rank".into(), r.clone()]);
            }
            extra.extend([
                "--fault-step".into(),
                st.step.as_arg(),
                "--fault-seed".into(),
                seed.to_string(),
                "--slow-factor".into(),
                st.slow_factor.to_string(),
            ]);
        }
    }
    let limit = st
        .run_timeout
        .unwrap_or_else(|| Duration::from_secs_f64((reference.wall_s * 4.0 + 60.0).max(120.0)));
    let argv = st.argv(&extra);
    let mut job = Job::spawn(
        &argv,
        &dir.join("launch.stdout"),
        &dir.join("launch.stderr"),
    )?;
    let mut cut: Option<Cut> = None;
    let mut inject: Option<(f64, String)> = None;
    let mut visible: Option<Sign> = None;
    let mut last_events = Instant::now() - SLOW_POLL;
    let mut seen_lines = 0usize;
    let mut timed_out = false;
    // ---- watch the faulted run
    loop {
        let gone = job.poll(SLOW_POLL);
        let now = unix_now();
        if kind.ends_the_job() && visible.is_none() {
            if let Some((pid, sn)) = gone.iter().find(|(_, sn)| sn.rank.is_some()) {
                if job.exit.is_none() {
                    visible = Some(Sign {
                        unix: sn.gone.unwrap_or(now),
                        what: format!("rank {} (pid {pid}) exited", sn.rank.unwrap_or(0)),
                    });
                }
            }
            let lines = job.lines();
            if let Some(l) = lines[seen_lines.min(lines.len())..]
                .iter()
                .find(|l| launch::is_failure_line(&l.text))
            {
                visible.get_or_insert(Sign {
                    unix: l.unix,
                    what: l.text.clone(),
                });
            }
            seen_lines = lines.len();
        }
        if last_events.elapsed() >= SLOW_POLL {
            last_events = Instant::now();
            let evs = events::read_all(&run_dir);
            for e in &evs {
                match &e.what {
                    What::Inject { .. } if inject.is_none() => {
                        inject = Some((e.unix0(), format!("rank {} ({})", e.rank, e.host)));
                    }
                    What::CheckinTimeout { line, .. } | What::Watchdog { line }
                        if kind.ends_the_job() =>
                    {
                        visible.get_or_insert(Sign {
                            unix: e.unix0(),
                            what: line.clone(),
                        });
                    }
                    _ => {}
                }
            }
            if let (Some((node, step)), None, Some(sim_path)) = (&cut_at, &cut, &st.sim) {
                if job.exit.is_none() && last_step(&run_dir).is_some_and(|s| s >= *step) {
                    let reached = last_step(&run_dir).unwrap_or(*step);
                    sim(sim_path, "cut", node)?;
                    let at = unix_now();
                    cut = Some(Cut {
                        sim: sim_path,
                        node: node.clone(),
                        healed: false,
                    });
                    inject = Some((at, "supervisor (sim-cluster cut)".into()));
                    t.fault_step = Some(reached);
                    println!(
                        "# chaos: trial {}: cut {node}'s link after step {reached}",
                        n + 1
                    );
                }
            }
        }
        if kind.ends_the_job() {
            if visible.is_some() {
                break;
            }
            if job.exit.is_some() {
                break;
            }
            if let Some((at, _)) = &inject {
                if now - at > st.hang_limit.as_secs_f64() {
                    t.hung = true;
                    t.problems.push(format!(
                        "nothing noticed the failure within --hang-limit {:.0} s: the job hung",
                        st.hang_limit.as_secs_f64()
                    ));
                    break;
                }
            }
        } else if job.exit.is_some() {
            break;
        }
        if job.elapsed() > limit {
            timed_out = true;
            t.problems.push(format!(
                "the faulted run did not end within {:.0} s (--run-timeout)",
                limit.as_secs_f64()
            ));
            break;
        }
        if stopping() {
            t.problems.push("interrupted".into());
            break;
        }
        std::thread::sleep(POLL);
    }
    let teardown = job.teardown(st.teardown_wait, st.grace);
    if !teardown.tree_empty {
        t.problems.push(format!(
            "processes of the job survived the teardown ({})",
            job.live()
                .iter()
                .map(|(p, c)| format!("{p} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !teardown.left_behind.is_empty() {
        t.problems.push(format!(
            "the launcher left processes behind: {}",
            teardown.left_behind.join(", ")
        ));
    }
    let healed = match cut.as_mut() {
        Some(c) => Some(c.heal()?),
        None => None,
    };
    drop(cut);
    // ---- what happened
    let evs = events::read_all(&run_dir);
    for e in &evs {
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
    // Stragglers: the victim's report if there is one; others are noted.
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
        t.timeline.push(Mark {
            event: "straggler".into(),
            unix: e.unix0(),
            source: format!("rank {}", e.rank),
        });
    }
    for (_, sg) in &stragglers {
        if Some(sg.rank) != t.straggler.as_ref().map(|c| c.rank) {
            t.notes
                .push(format!("also reported as a straggler: {}", sg.line));
        }
    }
    // Where the job waited in vain: rank 0's line (it hears every rank, so it names
    // the missing ones), else the first check-in line, else the first watchdog line.
    let deadline_lines: Vec<(&Event, &String, Option<&Vec<usize>>)> = evs
        .iter()
        .filter_map(|e| match &e.what {
            What::CheckinTimeout { line, missing, .. } => Some((e, line, Some(missing))),
            What::Watchdog { line } => Some((e, line, None)),
            _ => None,
        })
        .collect();
    let pick = deadline_lines
        .iter()
        .find(|(e, _, m)| e.rank == 0 && m.is_some())
        .or_else(|| deadline_lines.iter().find(|(e, _, _)| e.rank == 0))
        .or_else(|| deadline_lines.iter().find(|(_, _, m)| m.is_some()))
        .or(deadline_lines.first());
    if let Some((_, line, missing)) = pick {
        t.stall = Some((*line).clone());
        t.stall_missing = missing.cloned().unwrap_or_default();
    }
    if t.victim_ranks.is_empty() {
        if let Some((node, _)) = &cut_at {
            t.victim_ranks = t
                .clock_offsets
                .iter()
                .filter(|c| &c.host == node)
                .map(|c| c.rank)
                .collect();
            t.victim_hosts = vec![node.clone()];
        }
    }
    let inject_t = evs
        .iter()
        .filter(|e| matches!(e.what, What::Inject { .. }))
        .map(|e| e.unix0())
        .min_by(f64::total_cmp)
        .or(inject.as_ref().map(|i| i.0));
    let Some(inject_t) = inject_t else {
        t.problems.insert(
            0,
            format!(
                "the fault never fired (launcher {}): {}",
                teardown.launcher_exit,
                tail(&job.lines(), 3)
            ),
        );
        t.teardown = Some(teardown);
        return Ok(t);
    };
    t.timeline.push(Mark {
        event: "inject".into(),
        unix: inject_t,
        source: inject
            .as_ref()
            .map(|i| i.1.clone())
            .unwrap_or_else(|| "victim".into()),
    });
    if let Some(sg) = &mut t.straggler {
        sg.detect_s = t
            .timeline
            .iter()
            .find(|m| m.event == "straggler")
            .map(|m| (m.unix - inject_t).max(0.0));
    }
    if !kind.ends_the_job() {
        // slow: the job runs to its end with the straggler named, and stays correct.
        let exit = teardown.launcher_exit.clone();
        t.teardown = Some(teardown);
        if exit != "exit 0" || timed_out {
            t.problems.push(format!(
                "the run with a straggler did not finish ({exit}): {}",
                tail(&job.lines(), 3)
            ));
        }
        match read_json(&run_dir.join("run.json")) {
            Ok(run) => t.parity = parity(&run, ref_losses, &reference.final_weights_sha256, None),
            Err(e) => t.problems.push(format!("{e:#}")),
        }
        match &t.straggler {
            None => t.problems.push("no straggler was reported".into()),
            Some(sg) if !t.victim_ranks.contains(&sg.rank) => t.problems.push(format!(
                "the straggler reported is rank {}, the slowed rank is {:?}",
                sg.rank, t.victim_ranks
            )),
            _ => {}
        }
        if !t.parity.ok() {
            t.problems.push(format!(
                "parity: {}",
                t.parity.detail.clone().unwrap_or_default()
            ));
        }
        if t.problems.is_empty() {
            t.outcome = "completed".into();
        }
        t.timeline.push(Mark {
            event: "end".into(),
            unix: job.exit.as_ref().map(|e| e.1).unwrap_or_else(unix_now),
            source: "supervisor".into(),
        });
        return Ok(t);
    }
    let all_signs = signs(&job, &evs);
    let first = all_signs.iter().find(|sg| sg.unix >= inject_t - 0.01);
    let detect_t = match first {
        Some(sg) => {
            t.detected_by = Some(sg.what.clone());
            Some(sg.unix.max(inject_t))
        }
        None => visible.as_ref().map(|v| v.unix),
    };
    if let Some(d) = detect_t {
        t.times.detect_s = Some(d - inject_t);
        t.times.teardown_s = Some((teardown.done_unix - d).max(0.0));
        t.timeline.push(Mark {
            event: "detect".into(),
            unix: d,
            source: t.detected_by.clone().unwrap_or_default(),
        });
    }
    t.timeline.push(Mark {
        event: "teardown-begin".into(),
        unix: teardown.began_unix,
        source: "supervisor".into(),
    });
    t.timeline.push(Mark {
        event: "teardown-done".into(),
        unix: teardown.done_unix,
        source: format!("supervisor ({})", teardown.how),
    });
    if let Some(h) = healed {
        t.timeline.push(Mark {
            event: "heal".into(),
            unix: h,
            source: "supervisor (sim-cluster heal)".into(),
        });
    }
    if kind == FaultKind::Hang {
        let victim_named = t.victim_ranks.iter().all(|v| t.stall_missing.contains(v));
        if !victim_named {
            t.problems.push(format!(
                "the hang of rank(s) {:?} was not named: {}",
                t.victim_ranks,
                t.stall.clone().unwrap_or_else(|| "no deadline line".into())
            ));
        }
    }
    let gone_t = teardown.done_unix;
    let teardown_ok = teardown.tree_empty;
    t.teardown = Some(teardown);
    if t.hung || !teardown_ok || stopping() {
        return Ok(t);
    }
    // ---- recover
    let before = ckptcheck::inspect(&ckpt);
    t.expected_restore_step = before.newest_verified();
    let argv = st.argv(&[
        "--out".into(),
        s(&resume_dir),
        "--ckpt-dir".into(),
        s(&ckpt),
        "--resume".into(),
    ]);
    // Relaunch like a launcher with restarts would: a job that fails before its ranks
    // are up (a daemon that could not connect yet) is started again, twice at most.
    let mut attempt = 1;
    let r = loop {
        let name = if attempt == 1 {
            "resume".to_string()
        } else {
            format!("resume-{attempt}")
        };
        let r = run_to_end(&argv, &dir, &name, limit, st.grace)?;
        t.timeline.push(Mark {
            event: "relaunch".into(),
            unix: r.job.spawned_unix,
            source: format!("supervisor (attempt {attempt})"),
        });
        let up = events::read_all(&resume_dir)
            .iter()
            .any(|e| matches!(e.what, What::Start { .. }));
        if up || r.teardown.launcher_exit == "exit 0" || attempt == 3 || stopping() {
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
    let revs = events::read_all(&resume_dir);
    let at = |pick: fn(&What) -> bool| {
        revs.iter()
            .find(|e| e.rank == 0 && pick(&e.what))
            .map(|e| e.unix0())
    };
    let up = at(|w| matches!(w, What::Start { .. }));
    let restored = at(|w| matches!(w, What::Restored { .. }));
    let first_step = at(|w| matches!(w, What::FirstStep { .. }));
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
            t.timeline.push(Mark {
                event: name.into(),
                unix: u,
                source: "rank 0 of the relaunched job".into(),
            });
        }
    }
    t.timeline.push(Mark {
        event: "end".into(),
        unix: r.job.exit.as_ref().map(|e| e.1).unwrap_or_else(unix_now),
        source: "supervisor".into(),
    });
    t.times.relaunch_s = up.map(|u| u - gone_t);
    t.times.restore_s = match (up, restored) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    t.times.first_step_s = match (restored, first_step) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    t.times.total_recovery_s = first_step.map(|f| f - inject_t);
    if let Some(fs) = t.fault_step {
        t.steps_lost = Some(fs.saturating_sub(t.restored_step.unwrap_or(0)));
    }
    if t.restored_step != t.expected_restore_step {
        t.problems.push(format!(
            "restored step {:?}, but the newest checkpoint that verified when the job was gone is {:?}",
            t.restored_step, t.expected_restore_step
        ));
    }
    if kind == FaultKind::CorruptCkpt && t.skipped_checkpoints.is_empty() {
        t.problems
            .push("the damaged checkpoint was not reported as skipped".into());
    }
    let after = ckptcheck::inspect(&ckpt);
    t.checkpoints_verify = Some(after.bad.is_empty());
    if !after.bad.is_empty() {
        t.problems.push(format!(
            "checkpoints that do not verify after the recovery: {:?}",
            after.bad
        ));
    }
    match read_json(&resume_dir.join("run.json")) {
        Ok(run) => {
            t.parity = parity(
                &run,
                ref_losses,
                &reference.final_weights_sha256,
                t.fault_step.map(|s| (run_dir.as_path(), s)),
            )
        }
        Err(e) => t.problems.push(format!("{e:#}")),
    }
    if !t.parity.ok() {
        t.problems.push(format!(
            "parity: {}",
            t.parity
                .detail
                .clone()
                .unwrap_or_else(|| "not checked".into())
        ));
    }
    if let (Some(price), Some(total), Some(lost)) =
        (st.price, t.times.total_recovery_s, t.steps_lost)
    {
        let seconds = total + lost as f64 * reference.step_p50_s;
        t.cost_usd = Some(seconds * reference.world_size as f64 * price / 3600.0);
    }
    if t.problems.is_empty() {
        t.outcome = "recovered".into();
    }
    Ok(t)
}

fn write_report(path: &Path, rep: &mut ChaosReport) -> Result<()> {
    rep.summary = report::summarize(&rep.trials);
    let s = &rep.summary;
    let pass = rep.reference.is_some()
        && rep.trials.len() == rep.trials_planned
        && s.failed == 0
        && s.hangs == 0
        && s.parity_failures == 0
        && s.left_behind == 0
        && s.not_torn_down == 0
        && s.lost_checkpoints == 0;
    rep.outcome = if pass { "pass" } else { "fail" }.into();
    results::write_json_atomic(path, rep)
}

/// `burnin chaos`.
pub fn run(a: &ChaosArgs) -> Result<Outcome> {
    let st = setup(a)?;
    catch_signals();
    if !proctree::become_subreaper() {
        eprintln!("burnin: warning: cannot become a child subreaper: orphans of the job may escape the check");
    }
    let report_path = st.out.join("chaos.json");
    let trials_path = st.out.join("trials.jsonl");
    let _ = std::fs::remove_file(&trials_path);
    let mut trials_file = Jsonl::open(&trials_path)?;
    let mut rep = ChaosReport {
        schema_version: report::SCHEMA_VERSION,
        kind: "chaos".into(),
        burnin_version: env!("CARGO_PKG_VERSION").into(),
        argv: std::env::args().collect(),
        launch: st.launch.clone(),
        train_args: st.train_args.clone(),
        faults: st.kinds.iter().map(|k| k.name()).collect(),
        trials_planned: st.trials,
        seed: st.seed,
        gpu_hour_usd: st.price,
        started_unix: unix_now(),
        finished_unix: None,
        clock_note: "rank events are on rank 0's clock (each rank's offset to it measured by \
                     ping-pong at start, minimum round trip); supervisor marks on the launch \
                     host's clock, assumed synchronised with rank 0's (the same clock on one host)"
            .into(),
        reference: None,
        trials: Vec::new(),
        summary: Default::default(),
        outcome: "fail".into(),
    };
    write_report(&report_path, &mut rep)?;
    let reference = reference(&st)?;
    let ref_losses = losses(&read_json(&reference.dir.join("run").join("run.json"))?);
    rep.reference = Some(reference.clone());
    write_report(&report_path, &mut rep)?;
    for n in 0..st.trials {
        if stopping() {
            break;
        }
        let t = trial(&st, &reference, &ref_losses, n)?;
        println!("{}", report::trial_line(&t, st.trials));
        trials_file.append(&t)?;
        rep.trials.push(t);
        write_report(&report_path, &mut rep)?;
    }
    rep.finished_unix = Some(unix_now());
    write_report(&report_path, &mut rep)?;
    print!("\n{}", report::table(&rep.summary, st.price.is_some()));
    let s = &rep.summary;
    println!(
        "# {} trial(s): {} recovered, {} completed (slow), {} failed; hangs {}, parity failures {}, launcher left processes in {}, checkpoints lost {}",
        s.trials, s.recovered, s.completed, s.failed, s.hangs, s.parity_failures, s.left_behind, s.lost_checkpoints
    );
    println!(
        "# results: {} and {}",
        report_path.display(),
        trials_path.display()
    );
    if stopping() {
        bail!("interrupted; the job was torn down");
    }
    Ok(Outcome::from_ok(rep.outcome == "pass"))
}
