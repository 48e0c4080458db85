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
use super::events::{unix_now, Event, What};
use super::launch::{self, Job, Line, Teardown};
use super::proctree;
use super::report::{self, ChaosReport, Parity, Reference};
use super::trial;
use crate::error::{usage, Outcome};
use crate::fault::{self, FaultKind, Pick, SplitMix64};
use crate::results::{self, Jsonl};
use crate::train::TrainArgs;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the watch loop looks (output lines and known processes); the full
/// process-tree scan and the events files are read every [`SLOW_POLL`].
pub(super) const POLL: Duration = Duration::from_millis(20);
pub(super) const SLOW_POLL: Duration = Duration::from_millis(100);

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

pub(super) fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Everything a campaign needs, validated.
pub(super) struct Setup {
    pub(super) launch: Vec<String>,
    pub(super) burnin: PathBuf,
    pub(super) kinds: Vec<FaultKind>,
    pub(super) order: KindOrder,
    pub(super) rank: Pick,
    pub(super) step: Pick,
    pub(super) slow_factor: f64,
    pub(super) train: TrainArgs,
    pub(super) train_args: Vec<String>,
    pub(super) sim: Option<PathBuf>,
    pub(super) out: PathBuf,
    pub(super) hang_limit: Duration,
    pub(super) teardown_wait: Duration,
    pub(super) grace: Duration,
    pub(super) run_timeout: Option<Duration>,
    pub(super) price: Option<f64>,
    pub(super) trials: usize,
    pub(super) seed: u64,
}

/// What `burnin chaos`'s flags mean, checked without touching anything: the launcher
/// words, the fault kinds and the job's train arguments.
pub fn validate(a: &ChaosArgs) -> Result<(Vec<String>, Vec<FaultKind>, TrainArgs)> {
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
    Ok((launch, kinds, train))
}

fn setup(a: &ChaosArgs) -> Result<Setup> {
    let (launch, kinds, train) = validate(a)?;
    let rank = Pick::parse("--fault-rank", Some(&a.fault_rank))?;
    let step = Pick::parse("--fault-step", Some(&a.fault_step))?;
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
pub(super) fn fault_args(
    k: &FaultKind,
    rank: Pick,
    step: Pick,
    slow: f64,
    seed: u64,
) -> fault::FaultArgs {
    fault::FaultArgs {
        fault: Some(k.name()),
        fault_rank: k.has_victim_rank().then(|| rank.as_arg()),
        fault_step: Some(step.as_arg()),
        slow_factor: slow,
        fault_seed: Some(seed),
    }
}

/// The step at which the supervisor cuts a link.
pub(super) fn link_cut_step(step: Pick, steps: u64, seed: u64) -> Result<u64> {
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
    pub(super) fn argv(&self, extra: &[String]) -> Vec<String> {
        let mut v = self.launch.clone();
        v.push(self.burnin.display().to_string());
        v.push("train".into());
        v.extend(self.train_args.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }
}

pub(super) fn s(p: &Path) -> String {
    p.display().to_string()
}

/// What a finished (or torn down) run left.
pub(super) struct Ran {
    pub(super) job: Job,
    pub(super) teardown: Teardown,
    pub(super) timed_out: bool,
    pub(super) interrupted: bool,
}

/// Run to the end (bounded by `limit`), then check that nothing is left.
pub(super) fn run_to_end(
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
/// Why a run failed, from its output: burnin's own deadline and error lines first
/// (they say who and where), else the last `n` lines of stderr.
pub(super) fn tail(lines: &[Line], n: usize) -> String {
    let own: Vec<&str> = lines
        .iter()
        .map(|l| l.text.trim())
        .filter(|t| {
            t.starts_with("Error") || (t.starts_with("burnin: rank ") && t.contains(" waited "))
        })
        .take(2)
        .collect();
    if !own.is_empty() {
        return own.join(" | ");
    }
    let l: Vec<&str> = lines
        .iter()
        .filter(|l| l.stderr && !l.text.trim().is_empty())
        .map(|l| l.text.as_str())
        .collect();
    l[l.len().saturating_sub(n)..].join(" | ")
}

pub(super) fn read_json(p: &Path) -> Result<Value> {
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

/// Newest step recorded in a run's steps.jsonl.
pub(super) fn last_step(out: &Path) -> Option<u64> {
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
pub(super) fn sim(sim: &Path, verb: &str, node: &str) -> Result<()> {
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
pub(super) struct Cut<'a> {
    sim: &'a Path,
    node: String,
    healed: bool,
}

impl<'a> Cut<'a> {
    pub(super) fn new(sim: &'a Path, node: &str) -> Cut<'a> {
        Cut {
            sim,
            node: node.to_string(),
            healed: false,
        }
    }

    pub(super) fn heal(&mut self) -> Result<f64> {
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
pub(super) fn parity(
    run: &Value,
    ref_losses: &[f64],
    ref_sha: &str,
    before: Option<(&Path, u64)>,
) -> Parity {
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

fn write_report(path: &Path, rep: &mut ChaosReport) -> Result<()> {
    rep.summary = report::summarize(&rep.trials);
    let s = &rep.summary;
    let pass = rep.reference.is_some()
        && rep.trials.len() == rep.trials_planned
        && s.failed == 0
        && s.hangs == 0
        && s.parity_failures == 0
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
        let base = trial::Baseline {
            reference: &reference,
            losses: &ref_losses,
        };
        let t = trial::run(&st, &base, n)?;
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
        "# {} trial(s): {} recovered, {} completed (slow), {} failed; hangs {}, parity failures {}, processes surviving a teardown in {}, checkpoints lost {}; the launcher left processes for the supervisor to end in {}",
        s.trials, s.recovered, s.completed, s.failed, s.hangs, s.parity_failures, s.not_torn_down, s.lost_checkpoints, s.left_behind
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
