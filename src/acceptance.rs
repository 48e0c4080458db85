//! `burnin run --card FILE`: the whole acceptance — every phase of the card in order,
//! into one results folder, ending with the verdict table and the report.
//!
//! DESIGN: `burnin run` is a supervisor on the launch host, not an MPI program. It is
//! started without mpirun and runs each phase as a child job,
//! `<launcher…> <this burnin> <global flags> <phase> <flags> --out <folder>/<phase>`,
//! with argument vectors (the `--launch` prefix is split shell-like, nothing in it is
//! evaluated), in a process group of its own, under a per-phase bound (SIGTERM to the
//! job's tree, 5 s grace, SIGKILL). Why this shape:
//! - chaos needs a supervisor outside the MPI job (a killed rank ends the job; only a
//!   process outside it can see that, time it and relaunch), and once that supervisor
//!   exists the other phases are simplest as its children too;
//! - a phase that crashes or hangs cannot take the run down: it is recorded, its
//!   criteria fail, and the run goes on to the next phase and to the report;
//! - every phase is a plain burnin command a user can copy from the report and re-run;
//! - the launcher is the user's (mpirun, srun, `launch/sim-cluster exec --`), so burnin
//!   needs no knowledge of hostfiles or schedulers.
//!
//! `burnin chaos` is itself a supervisor: it is run directly (not under the launcher)
//! with the launcher prefix as an argument. When this build has no `chaos` command
//! the phase is recorded as not available and its criteria are NOT RUN.
//!
//! The folder: `acceptance.json` (card, launcher, every job's command line, exit and
//! times; rewritten after every job, so a killed run leaves a readable record),
//! `card.toml` (the card as given), one sub-folder per job with its own JSON and its
//! `stdout.log`/`stderr.log`, then `report.md` and `report.html`.
use crate::card::{split_launch, Card, PHASES};
use crate::config::GlobalArgs;
use crate::error::Outcome;
use crate::process::{self, Launcher};
use crate::progress::Live;
use crate::report::verdict;
use crate::results::acceptance::{AcceptanceRecord, JobRecord, JobStatus, SCHEMA_VERSION};
use crate::results::utc_stamp;
use crate::results::{create_out_dir, write_json_atomic};
use crate::topology::file::Topology;
use crate::watchdog::unix_seconds;
use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct RunArgs {
    /// Acceptance card (TOML, see cards/).
    #[arg(long, value_name = "FILE")]
    pub card: PathBuf,
    /// Launcher prefix each phase runs under, split like a shell would (nothing in it
    /// is expanded), e.g. 'mpirun -np 16 --hostfile hosts' or 'launch/sim-cluster exec
    /// --'. Default: the card's `launch`.
    #[arg(long, value_name = "PREFIX")]
    pub launch: Option<String>,
    /// Results folder (default: results/<UTC time>-<card name>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only these of the card's phases (comma list of probe, gpu, sweep, replay, train, chaos, soak);
    /// the others' criteria are NOT RUN.
    #[arg(long, value_name = "LIST")]
    pub phases: Option<String>,
    /// Do not echo the jobs' output (it is still in each job's stdout.log/stderr.log).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// How a supervised child ended.
struct Ended {
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    interrupted: bool,
}

/// SIGTERM to a job that passed its bound (or was interrupted), then this long before
/// SIGKILL.
const JOB_GRACE: Duration = Duration::from_secs(5);

/// A sink of a job's output: each line to `log` and, unless `quiet`, to the terminal
/// (stderr lines to stderr, around the live line). Reading stops at a line that is
/// not UTF-8.
fn echo(log: PathBuf, to_err: bool, quiet: bool, live: Live) -> process::Sink {
    let mut log = std::fs::File::create(&log).ok();
    Box::new(move |buf: &[u8]| {
        let Ok(text) = std::str::from_utf8(buf) else {
            return ControlFlow::Break(());
        };
        let line = text.strip_suffix('\n').unwrap_or(text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(f) = &mut log {
            let _ = writeln!(f, "{line}");
        }
        if !quiet {
            live.suspend(|| {
                if to_err {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            });
        }
        ControlFlow::Continue(())
    })
}

/// Run `argv` in its own process group, its output copied line by line to the
/// terminal and to `log_dir/{stdout,stderr}.log`, bounded by `limit` (SIGTERM to its
/// group and tree, [`JOB_GRACE`], SIGKILL); an interruption ends it the same way. On
/// a terminal a live line names the job (its folder's name) while it runs.
fn supervise(argv: &[String], log_dir: &Path, limit: Duration, quiet: bool) -> Result<Ended> {
    let (prog, args) = argv.split_first().ok_or_else(|| anyhow!("empty command"))?;
    let name = log_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let live = Live::start(format!(
        "{name}: running (bound {:.0} s)",
        limit.as_secs_f64()
    ));
    let mut cmd = Command::new(prog);
    cmd.args(args);
    let mut job = Launcher::spawn(
        cmd,
        echo(log_dir.join("stdout.log"), false, quiet, live.clone()),
        echo(log_dir.join("stderr.log"), true, quiet, live.clone()),
    )
    .with_context(|| format!("cannot start {prog}"))?;
    let ended = job.wait_bounded(limit, JOB_GRACE, process::stop_requested)?;
    job.join_readers(None);
    live.finish();
    Ok(Ended {
        code: ended.status.code(),
        signal: ended.status.signal(),
        timed_out: ended.timed_out,
        interrupted: ended.interrupted,
    })
}

/// Everything the jobs share.
struct Runner {
    out: PathBuf,
    /// The card's file: the replay's paths are relative to its folder.
    card_path: PathBuf,
    launch: Vec<String>,
    burnin: String,
    global: Vec<String>,
    quiet: bool,
    record: AcceptanceRecord,
    /// `--metrics-every` when `--metrics-file` is written: each job then writes its
    /// own file in `OUT/metrics/`, copied into ours while it runs.
    metrics_every: Option<f64>,
}

impl Runner {
    /// `argv` with `--metrics-file OUT/metrics/<name>.prom` after the burnin binary
    /// (global flags go before the command), when metrics are written; that file is
    /// merged into ours from now on.
    fn with_metrics(&self, name: &str, mut argv: Vec<String>) -> Result<Vec<String>> {
        let Some(every) = self.metrics_every else {
            return Ok(argv);
        };
        let dir = self.out.join("metrics");
        create_out_dir(&dir, "--metrics-file")?;
        let file = dir.join(format!("{name}.prom"));
        let _ = std::fs::remove_file(&file);
        if let Some(i) = argv.iter().position(|a| *a == self.burnin) {
            let flags = [
                "--metrics-file".to_string(),
                path_text(&file),
                "--metrics-every".to_string(),
                format!("{every}"),
            ];
            argv.splice(i + 1..i + 1, flags);
            crate::metrics::merge(Some(file));
        }
        crate::metrics::phase(name);
        crate::metrics::flush();
        Ok(argv)
    }

    fn save(&self) -> Result<()> {
        write_json_atomic(&self.out.join("acceptance.json"), &self.record)
    }

    /// The launcher prefix, this burnin, the global flags, then `args`.
    fn under_launcher(&self, args: &[String]) -> Vec<String> {
        let mut v = self.launch.clone();
        v.push(self.burnin.clone());
        v.extend(self.global.iter().cloned());
        v.extend(args.iter().cloned());
        v
    }

    fn job_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.out.join(name);
        create_out_dir(&d, "--out")?;
        Ok(d)
    }

    /// Record a job that does not run.
    fn not_run(&mut self, phase: &str, name: &str, status: JobStatus, note: String) -> Result<()> {
        println!("== {name}: {}", note);
        let now = unix_seconds(SystemTime::now());
        self.record.jobs.push(JobRecord {
            phase: phase.into(),
            name: name.into(),
            argv: Vec::new(),
            dir: name.into(),
            started_unix: now,
            finished_unix: Some(now),
            exit_code: None,
            signal: None,
            timeout_s: 0.0,
            status,
            note,
        });
        self.save()
    }

    /// Run one job, recording it before it starts and after it ends.
    fn job(
        &mut self,
        phase: &str,
        name: &str,
        argv: Vec<String>,
        timeout_s: f64,
    ) -> Result<JobStatus> {
        let dir = self.job_dir(name)?;
        let argv = self.with_metrics(name, argv)?;
        println!(
            "== {name}: {}",
            shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_default()
        );
        let _ = std::io::stdout().flush();
        self.record.jobs.push(JobRecord {
            phase: phase.into(),
            name: name.into(),
            argv: argv.clone(),
            dir: name.into(),
            started_unix: unix_seconds(SystemTime::now()),
            finished_unix: None,
            exit_code: None,
            signal: None,
            timeout_s,
            status: JobStatus::Running,
            note: String::new(),
        });
        self.save()?;
        let ended = supervise(&argv, &dir, Duration::from_secs_f64(timeout_s), self.quiet);
        let rec = self
            .record
            .jobs
            .last_mut()
            .ok_or_else(|| anyhow!("no job"))?;
        rec.finished_unix = Some(unix_seconds(SystemTime::now()));
        match ended {
            Err(e) => {
                rec.status = JobStatus::Crashed;
                rec.note = format!("{e:#}");
            }
            Ok(e) => {
                rec.exit_code = e.code;
                rec.signal = e.signal;
                rec.status = if e.interrupted {
                    JobStatus::Interrupted
                } else if e.timed_out {
                    JobStatus::TimedOut
                } else {
                    match e.code {
                        Some(0) => JobStatus::Passed,
                        Some(1) => JobStatus::Failed,
                        _ => JobStatus::Crashed,
                    }
                };
                if rec.status == JobStatus::Crashed {
                    rec.note = last_error_line(&dir.join("stderr.log"));
                    if e.signal.is_some() && wrote_final_record(name, &dir, rec.started_unix) {
                        rec.status = JobStatus::LauncherCrashed;
                    }
                }
            }
        }
        let status = rec.status;
        crate::metrics::count(
            "burnin_acceptance_jobs_total",
            "Acceptance jobs ended, by phase and status.",
            &[("phase", phase), ("status", status_name(status).as_str())],
            1.0,
        );
        crate::metrics::flush();
        println!(
            "== {name}: {} in {:.1} s",
            rec.describe(),
            rec.seconds().unwrap_or(0.0)
        );
        self.save()?;
        Ok(status)
    }
}

/// A job status as acceptance.json spells it ("passed", "timed_out", ...).
fn status_name(s: JobStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// Whether job `name` wrote, since `since`, the record its phase writes last (probe's
/// probe.json, a sweep's or training's run.json): then a signal that ended the
/// launcher came after the work was done.
fn wrote_final_record(name: &str, dir: &Path, since: f64) -> bool {
    let file = match name {
        "probe" => "probe.json",
        "sweep" | "train" | "train-part" | "train-resume" => "run.json",
        "gpu" | "gpu-after" => "gpu.json",
        "replay" => "replay.json",
        _ => return false,
    };
    let Ok(meta) = std::fs::metadata(dir.join(file)) else {
        return false;
    };
    let Ok(modified) = meta.modified() else {
        return false;
    };
    meta.len() > 0 && unix_seconds(modified) >= since
}

/// The last line of a log that looks like an error (for the job's note).
fn last_error_line(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.contains("Error") || l.contains("error"))
        .or(lines.last())
        .map(|l| l.chars().take(300).collect())
        .unwrap_or_default()
}

fn secs(v: Option<f64>, default: f64) -> f64 {
    v.unwrap_or(default)
}

/// The phases to run: the card's, narrowed by `--phases`.
fn select_phases(card: &Card, only: Option<&str>) -> Result<Vec<String>> {
    let have = card.phases();
    let Some(list) = only else {
        return Ok(have.into_iter().map(String::from).collect());
    };
    let mut out = Vec::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if !PHASES.contains(&p) {
            bail!("--phases: unknown phase '{p}' ({})", PHASES.join(", "));
        }
        if !have.contains(&p) {
            bail!("--phases: the card has no [{p}] section");
        }
        if !out.iter().any(|x: &String| x == p) {
            out.push(p.to_string());
        }
    }
    if out.is_empty() {
        bail!("--phases: no phase given");
    }
    // Always in the card's order.
    out.sort_by_key(|p| PHASES.iter().position(|x| x == p));
    Ok(out)
}

/// Whether this burnin has a `chaos` command.
fn has_chaos(burnin: &str) -> bool {
    Command::new(burnin)
        .args(["chaos", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

fn sweep_args(card: &Card, topo: Option<&Path>, dir: &Path) -> Vec<String> {
    match &card.sweep {
        Some(s) => sweep_argv(s, topo, dir),
        None => Vec::new(),
    }
}

/// `--fabric` and `--oversubscription` of the card's [sweep] section (the file
/// resolved against the card's folder), and `--fabric-map` when the section asks for
/// the map or a criterion judges it.
fn fabric_args(card: &Card, card_path: &Path) -> Vec<String> {
    let Some(s) = &card.sweep else {
        return Vec::new();
    };
    let mut a = Vec::new();
    if let Some(f) = &s.fabric {
        let base = card_path.parent().unwrap_or(Path::new("."));
        a.extend(["--fabric".into(), path_text(&absolute(&base.join(f)))]);
        if let Some(r) = s.oversubscription {
            a.extend(["--oversubscription".into(), r.to_string()]);
        }
    }
    let c = &s.criteria;
    if s.fabric_map || c.min_bisection_fraction.is_some() || c.max_oversubscription.is_some() {
        a.push("--fabric-map".into());
    }
    a
}

/// The `burnin sweep --duration` flags of the card's [soak] section: one size, the
/// sweep's collectives and tiers unless the soak names its own.
fn soak_args(card: &Card, topo: Option<&Path>, dir: &Path) -> Vec<String> {
    let Some(k) = &card.soak else {
        return Vec::new();
    };
    let sweep = card.sweep.as_ref();
    let size = k.size(sweep).unwrap_or(crate::units::Bytes(1 << 20));
    let spec = crate::card::SweepSpec {
        collectives: k
            .collectives
            .clone()
            .or_else(|| sweep.map(|s| s.collectives.clone()))
            .unwrap_or_else(|| vec!["all_reduce".into()]),
        tiers: k
            .tiers
            .clone()
            .or_else(|| sweep.map(|s| s.tiers.clone()))
            .unwrap_or_else(|| vec!["all".into()]),
        min_bytes: size,
        max_bytes: size,
        step_factor: None,
        budget_s: k.budget_s,
        warmup: None,
        iters: k.iters,
        placement: None,
        dtype: k.dtype.clone(),
        args: k.args.clone(),
        timeout_s: None,
        fabric: None,
        oversubscription: None,
        fabric_map: false,
        criteria: crate::card::SweepCriteria {
            outlier_fraction: sweep.and_then(|s| s.criteria.outlier_fraction),
            ..Default::default()
        },
    };
    let mut a = sweep_argv(&spec, topo, dir);
    a.extend([
        "--duration".into(),
        k.duration_s.to_string(),
        "--max-drift".into(),
        k.criteria.max_drift.to_string(),
    ]);
    if let Some(cv) = k.criteria.max_pass_cv {
        a.extend(["--max-pass-cv".into(), cv.to_string()]);
    }
    if let Some(w) = k.criteria.drift_window_s {
        a.extend(["--drift-window".into(), w.to_string()]);
    }
    a
}

fn sweep_argv(s: &crate::card::SweepSpec, topo: Option<&Path>, dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "sweep".into(),
        "-c".into(),
        s.collectives.join(","),
        "-b".into(),
        s.min_bytes.to_string(),
        "-e".into(),
        s.max_bytes.to_string(),
        "--tiers".into(),
        s.tiers.join(","),
    ];
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.push(flag.into());
            a.push(v);
        }
    };
    opt("-f", s.step_factor.map(|f| f.to_string()));
    opt("-n", s.iters.map(|n| n.to_string()));
    opt("-w", s.warmup.map(|w| w.to_string()));
    opt("--budget", s.budget_s.map(|b| b.to_string()));
    opt("--placement", s.placement.clone());
    opt("-d", s.dtype.clone());
    opt("--topology", topo.map(path_text));
    opt(
        "--outlier-fraction",
        s.criteria.outlier_fraction.map(|f| f.to_string()),
    );
    opt(
        "--min-fraction",
        s.criteria.min_fraction_of_expected.map(|f| f.to_string()),
    );
    a.push("--out".into());
    a.push(path_text(dir));
    a.extend(s.args.iter().cloned());
    a
}

/// The `burnin gpu` flags of the card's [gpu] section.
fn gpu_args(card: &Card, topo: Option<&Path>, dir: &Path) -> Vec<String> {
    let Some(g) = &card.gpu else {
        return Vec::new();
    };
    let mut a: Vec<String> = vec!["gpu".into()];
    if let Some(b) = g.burn_s {
        a.extend(["--burn".into(), b.to_string()]);
    }
    if let Some(b) = g.copy_bytes {
        a.extend(["--copy-bytes".into(), b.to_string()]);
    }
    if let Some(s) = g.sdc_s {
        a.extend(["--sdc".into(), s.to_string()]);
    }
    if let Some(s) = g.memtest_s {
        a.extend(["--memtest".into(), s.to_string()]);
    }
    if let Some(s) = g.memtest_share {
        a.extend(["--memtest-share".into(), s.to_string()]);
    }
    if g.dcgm_diag.unwrap_or(g.criteria.dcgm_diag) {
        a.push("--dcgm-diag".into());
    }
    if let Some(t) = topo {
        a.extend(["--topology".into(), path_text(t)]);
    }
    a.extend(["--out".into(), path_text(dir)]);
    a.extend(g.args.iter().cloned());
    a
}

/// The `burnin replay` flags of the card's [replay] section (paths resolved against
/// the card's folder).
fn replay_args(card: &Card, card_path: &Path, dir: &Path) -> Vec<String> {
    let Some(p) = &card.replay else {
        return Vec::new();
    };
    let (trace, baseline) = p.paths(card_path);
    let mut a: Vec<String> = vec!["replay".into(), "--trace".into()];
    a.extend(trace.iter().map(|t| path_text(&absolute(t))));
    let mut flag = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            a.extend([k.to_string(), v]);
        }
    };
    flag("--format", p.format.clone());
    flag("--steps", p.steps.map(|v| v.to_string()));
    flag("--warmup", p.warmup.map(|v| v.to_string()));
    flag("--step-calls", p.step_calls.map(|v| v.to_string()));
    flag("--grow", p.grow.clone());
    flag(
        "--rank-map",
        p.rank_map.as_ref().map(|m| {
            m.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }),
    );
    flag("--baseline", baseline.map(|b| path_text(&absolute(&b))));
    flag(
        "--max-slowdown",
        p.criteria.max_slowdown.map(|v| v.to_string()),
    );
    flag("--out", Some(path_text(dir)));
    a.extend(p.args.iter().cloned());
    a
}

/// After the last phase: every GPU's error counters once more, so the GPU criteria
/// compare the start of the GPU phase with the end of the whole acceptance.
fn gpu_counters_after(r: &mut Runner) -> Result<()> {
    let measured = std::fs::read_to_string(r.out.join("gpu").join("gpu.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<crate::results::gpu::GpuReport>(&t).ok())
        .is_some_and(|g| g.error.is_none());
    if !measured {
        return r.not_run(
            "gpu",
            "gpu-after",
            JobStatus::Skipped,
            "the GPU phase measured no GPU: no counters to compare".into(),
        );
    }
    let dir = r.out.join("gpu-after");
    let argv = r.under_launcher(&[
        "gpu".into(),
        "--counters-only".into(),
        "--out".into(),
        path_text(&dir),
    ]);
    r.job("gpu", "gpu-after", argv, 300.0)?;
    Ok(())
}

fn train_args(
    spec: &crate::card::TrainSpec,
    steps: u64,
    out: &Path,
    ckpt_dir: Option<PathBuf>,
    resume: bool,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["train".into(), "--steps".into(), steps.to_string()];
    if resume {
        a.push("--resume".into());
    }
    if let Some(e) = spec.ckpt_every {
        a.extend(["--ckpt-every".into(), e.to_string()]);
    }
    if let Some(b) = spec.ckpt_bytes {
        a.extend(["--ckpt-bytes".into(), b.to_string()]);
    }
    if let Some(p) = &spec.preset {
        a.extend(["--preset".into(), p.clone()]);
    }
    if let Some(d) = ckpt_dir {
        a.extend(["--ckpt-dir".into(), path_text(&d)]);
    }
    a.extend(["--out".into(), path_text(out)]);
    a.extend(spec.args.iter().cloned());
    a
}

/// The `burnin chaos` command line: the card's template, or the default one —
/// `burnin chaos --launch PREFIX --fault K1,K2 --kind-order cycle --trials N --out DIR
/// [args] -- <train flags>`, with the card's trials per kind, and the training the
/// supervisor runs under faults taken from the card's [train] section (its backend
/// and step deadline too).
fn chaos_argv(card: &Card, burnin: &str, launch: &[String], dir: &Path) -> Vec<String> {
    let Some(c) = &card.chaos else {
        return Vec::new();
    };
    let launch_text = shlex::try_join(launch.iter().map(String::as_str)).unwrap_or_default();
    let kinds = c.kinds.join(",");
    let trials = (c.trials as usize * c.kinds.len().max(1)).to_string();
    let out = path_text(dir);
    if let Some(t) = &c.command {
        let mut v = vec![burnin.to_string()];
        v.extend(t.iter().map(|a| {
            a.replace("{launch}", &launch_text)
                .replace("{out}", &out)
                .replace("{kinds}", &kinds)
                .replace("{trials}", &trials)
                .replace("{burnin}", burnin)
        }));
        return v;
    }
    let mut v: Vec<String> = vec![
        burnin.into(),
        "chaos".into(),
        "--launch".into(),
        launch_text,
        "--fault".into(),
        kinds,
        "--kind-order".into(),
        "cycle".into(),
        "--trials".into(),
        trials,
        "--out".into(),
        out,
    ];
    v.extend(c.args.iter().cloned());
    let mut train: Vec<String> = Vec::new();
    if let Some(b) = &card.backend {
        train.extend(["--backend".into(), b.clone()]);
    }
    if let Some(t) = card.step_timeout_s {
        train.extend(["-T".into(), t.to_string()]);
    }
    if let Some(t) = &card.train {
        train.extend(["--steps".into(), t.steps.to_string()]);
        if let Some(e) = t.ckpt_every {
            train.extend(["--ckpt-every".into(), e.to_string()]);
        }
        if let Some(b) = t.ckpt_bytes {
            train.extend(["--ckpt-bytes".into(), b.to_string()]);
        }
        if let Some(p) = &t.preset {
            train.extend(["--preset".into(), p.clone()]);
        }
    }
    if !train.is_empty() {
        v.push("--".into());
        v.extend(train);
    }
    v
}

/// `burnin run`.
pub fn run(args: &RunArgs, global: &GlobalArgs) -> Result<Outcome> {
    let card = Card::load(&args.card)?;
    let plan = Plan::new(args, &card)?;
    let mut r = Runner::new(args, global, &card, &plan)?;
    r.save()?;
    process::catch_stop();
    println!(
        "# burnin run: card {} ({}), phases {}, results {}",
        card.name,
        args.card.display(),
        plan.phases.join(","),
        plan.out.display()
    );
    for phase in &plan.phases {
        if process::stop_requested() {
            break;
        }
        run_phase(&mut r, &card, phase, plan.topo_path.as_deref())?;
    }
    if plan.phases.iter().any(|p| p == "gpu") && !process::stop_requested() {
        gpu_counters_after(&mut r)?;
    }
    let interrupted = process::stop_requested();
    finish(&mut r, interrupted)
}

/// What the command line and the card fix before anything runs.
struct Plan {
    topo_path: Option<PathBuf>,
    topology: Option<Topology>,
    launch: Vec<String>,
    phases: Vec<String>,
    started: f64,
    out: PathBuf,
}

impl Plan {
    /// The topology, launcher, phases and results folder (created, and refused if it
    /// holds an acceptance run already).
    fn new(args: &RunArgs, card: &Card) -> Result<Plan> {
        let topo_path = card.topology_path(&args.card).map(|p| absolute(&p));
        let topology = card.load_topology(&args.card)?;
        let launch_text = args
            .launch
            .clone()
            .or_else(|| card.launch.clone())
            .ok_or_else(|| {
                anyhow!(
                    "--launch: {} names no launcher; pass one, e.g. --launch 'mpirun -np 8 --hostfile hosts'",
                    args.card.display()
                )
            })?;
        let launch = split_launch(&launch_text).map_err(|e| anyhow!("--launch: {e}"))?;
        let phases = select_phases(card, args.phases.as_deref())?;
        let started = unix_seconds(SystemTime::now());
        let out = absolute(&args.out.clone().unwrap_or_else(|| {
            PathBuf::from("results").join(format!("{}-{}", utc_stamp(started), card.name))
        }));
        if out.join("acceptance.json").exists() {
            bail!(
                "--out: {} already holds an acceptance run; give another folder",
                out.display()
            );
        }
        create_out_dir(&out, "--out")?;
        Ok(Plan {
            topo_path,
            topology,
            launch,
            phases,
            started,
            out,
        })
    }
}

impl Runner {
    /// This burnin, the card's global flags, a copy of the card in the folder, and the
    /// record with no job yet.
    fn new(args: &RunArgs, gargs: &GlobalArgs, card: &Card, plan: &Plan) -> Result<Runner> {
        let burnin = crate::process::self_exe()
            .context("cannot find this burnin binary")?
            .display()
            .to_string();
        let mut global: Vec<String> = Vec::new();
        if let Some(b) = &card.backend {
            global.extend(["--backend".into(), b.clone()]);
        }
        if let Some(t) = card.step_timeout_s {
            global.extend(["-T".into(), t.to_string()]);
        }
        if let Ok(text) = std::fs::read_to_string(&args.card) {
            let _ = std::fs::write(plan.out.join("card.toml"), text);
        }
        let record = AcceptanceRecord {
            schema_version: SCHEMA_VERSION,
            kind: "acceptance".into(),
            card: card.clone(),
            card_path: path_text(&args.card),
            topology: plan.topology.clone(),
            launch: plan.launch.clone(),
            burnin: burnin.clone(),
            burnin_version: env!("CARGO_PKG_VERSION").into(),
            argv: std::env::args().collect(),
            launch_host: hostname(),
            phases_selected: plan.phases.clone(),
            started_unix: plan.started,
            finished_unix: None,
            jobs: Vec::new(),
            criteria: Vec::new(),
            comm_efficiency: None,
            outcome: None,
        };
        Ok(Runner {
            out: plan.out.clone(),
            card_path: args.card.clone(),
            launch: plan.launch.clone(),
            burnin,
            global,
            quiet: args.quiet,
            record,
            metrics_every: crate::metrics::enabled().then_some(gargs.metrics_every),
        })
    }
}

/// Run one phase's job(s).
fn run_phase(r: &mut Runner, card: &Card, phase: &str, topo_path: Option<&Path>) -> Result<()> {
    let out = r.out.clone();
    match phase {
        "probe" => {
            let t = secs(card.probe.as_ref().and_then(|p| p.timeout_s), 300.0);
            let dir = out.join("probe");
            let argv = r.under_launcher(&[
                "probe".into(),
                "--json".into(),
                path_text(&dir.join("probe.json")),
            ]);
            r.job("probe", "probe", argv, t)?;
        }
        "gpu" => {
            let t = secs(card.gpu.as_ref().and_then(|g| g.timeout_s), 900.0);
            let argv = r.under_launcher(&gpu_args(card, topo_path, &out.join("gpu")));
            r.job("gpu", "gpu", argv, t)?;
        }
        "sweep" => {
            let t = secs(card.sweep.as_ref().and_then(|s| s.timeout_s), 1800.0);
            let mut a = sweep_args(card, topo_path, &out.join("sweep"));
            a.extend(fabric_args(card, &r.card_path));
            let argv = r.under_launcher(&a);
            r.job("sweep", "sweep", argv, t)?;
        }
        "soak" => {
            let t = card.soak.as_ref().map(|k| k.bound_s()).unwrap_or(600.0);
            let argv = r.under_launcher(&soak_args(card, topo_path, &out.join("soak")));
            r.job("soak", "soak", argv, t)?;
        }
        "replay" => {
            let t = secs(card.replay.as_ref().and_then(|p| p.timeout_s), 600.0);
            let argv = r.under_launcher(&replay_args(card, &r.card_path, &out.join("replay")));
            r.job("replay", "replay", argv, t)?;
        }
        "train" => run_train(r, card)?,
        "chaos" => {
            if !has_chaos(&r.burnin) {
                return r.not_run(
                    "chaos",
                    "chaos",
                    JobStatus::NotAvailable,
                    "this burnin has no `chaos` command; its criteria are not run".into(),
                );
            }
            let t = secs(card.chaos.as_ref().and_then(|c| c.timeout_s), 1800.0);
            let argv = chaos_argv(card, &r.burnin, &r.launch, &out.join("chaos"));
            r.job("chaos", "chaos", argv, t)?;
            if !card.chaos.as_ref().is_some_and(|c| c.keep_checkpoints) {
                for d in checkpoint_dirs(&out.join("chaos"), 4) {
                    remove_checkpoints(&d);
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// After the last job: judge and report from the JSON on disk (exactly what `burnin
/// report` will see), print the verdict.
fn finish(r: &mut Runner, interrupted: bool) -> Result<Outcome> {
    let out = r.out.clone();
    r.record.finished_unix = Some(unix_seconds(SystemTime::now()));
    r.save()?;
    let data = crate::report::data::RunData::load(&out)?;
    let criteria = verdict::judge(&data);
    let pass = crate::results::acceptance::passed(&criteria);
    r.record.criteria = criteria.clone();
    r.record.comm_efficiency = data.comm_efficiency();
    r.record.outcome = Some(if pass { "pass" } else { "fail" }.into());
    r.save()?;
    crate::metrics::phase("verdict");
    crate::metrics::gauge(
        "burnin_acceptance_passed",
        "1 when every criterion of the card passed, 0 when one did not (set at the end).",
        &[],
        if pass { 1.0 } else { 0.0 },
    );
    crate::report::render_dir(&out, &out)?;
    println!();
    print!("{}", crate::report::verdict_text(&criteria));
    println!("# report: {}", out.join("report.md").display());
    println!("# report: {}", out.join("report.html").display());
    if interrupted {
        bail!("interrupted; the report shows what was measured");
    }
    Ok(Outcome::from_ok(pass))
}

fn run_train(r: &mut Runner, card: &Card) -> Result<()> {
    let Some(spec) = card.train.clone() else {
        return Ok(());
    };
    let result = train_jobs(r, &spec);
    if !spec.keep_checkpoints {
        // Only what this run created: the jobs' default checkpoint folders inside the
        // results folder, or this run's sub-folder of the card's ckpt_dir.
        let mut dirs = vec![
            r.out.join("train").join("ckpt"),
            r.out.join("train-part").join("ckpt"),
        ];
        if let (Some(d), Some(name)) = (&spec.ckpt_dir, r.out.file_name()) {
            dirs.push(d.join(name));
        }
        for d in dirs.into_iter().filter(|d| d.is_dir()) {
            remove_checkpoints(&d);
        }
    }
    result
}

fn remove_checkpoints(d: &Path) {
    match std::fs::remove_dir_all(d) {
        Ok(()) => println!("== removed checkpoints {}", d.display()),
        Err(e) => eprintln!("warning: cannot remove checkpoints {}: {e}", d.display()),
    }
}

/// Folders named `ckpt` holding only `step-…` checkpoints, at most `depth` levels
/// below `root` (what `burnin chaos` leaves in its reference and trial folders).
fn checkpoint_dirs(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let only_steps = || {
            std::fs::read_dir(&p).is_ok_and(|it| {
                it.flatten()
                    .all(|c| c.file_name().to_string_lossy().starts_with("step-"))
            })
        };
        if e.file_name() == "ckpt" && only_steps() {
            out.push(p);
        } else if depth > 1 {
            out.extend(checkpoint_dirs(&p, depth - 1));
        }
    }
    out
}

fn train_jobs(r: &mut Runner, spec: &crate::card::TrainSpec) -> Result<()> {
    let spec = spec.clone();
    let t = secs(spec.timeout_s, 1800.0);
    let folder = r
        .out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    // A card's checkpoint directory is shared storage used again by later runs: each
    // run and each job gets a fresh sub-folder, since training refuses to start fresh
    // over old checkpoints.
    let ckpt = |job: &str| spec.ckpt_dir.as_ref().map(|d| d.join(&folder).join(job));
    let dir = r.out.join("train");
    let argv = r.under_launcher(&train_args(&spec, spec.steps, &dir, ckpt("train"), false));
    let full = r.job("train", "train", argv, t)?;
    if !spec.criteria.resume_parity {
        return Ok(());
    }
    if !matches!(
        full,
        JobStatus::Passed | JobStatus::Failed | JobStatus::LauncherCrashed
    ) {
        let note = "the uninterrupted training run did not finish".to_string();
        r.not_run("train", "train-part", JobStatus::Skipped, note.clone())?;
        return r.not_run("train", "train-resume", JobStatus::Skipped, note);
    }
    // Stop half-way (a checkpoint is always written at the last step), then resume
    // from that checkpoint to the end: the weights must match the uninterrupted run.
    let half = (spec.steps / 2).max(1);
    let part_dir = r.out.join("train-part");
    let part_ckpt = ckpt("train-part").unwrap_or_else(|| part_dir.join("ckpt"));
    let argv = r.under_launcher(&train_args(
        &spec,
        half,
        &part_dir,
        Some(part_ckpt.clone()),
        false,
    ));
    let part = r.job("train", "train-part", argv, t)?;
    if !matches!(
        part,
        JobStatus::Passed | JobStatus::Failed | JobStatus::LauncherCrashed
    ) {
        return r.not_run(
            "train",
            "train-resume",
            JobStatus::Skipped,
            "the first half of the resumed pair did not finish".into(),
        );
    }
    let res_dir = r.out.join("train-resume");
    let argv = r.under_launcher(&train_args(
        &spec,
        spec.steps,
        &res_dir,
        Some(part_ckpt),
        true,
    ));
    r.job("train", "train-resume", argv, t)?;
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fabric_floor_or_the_key_asks_the_sweep_for_the_map() {
        let card = |crit: &str| {
            Card::parse(
                &format!("name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='4M'\nfabric='t.conf'\noversubscription=2\n{crit}"),
                "c.toml",
            )
            .unwrap()
        };
        let p = Path::new("/cards/c.toml");
        let a = fabric_args(&card(""), p);
        assert_eq!(a, ["--fabric", "/cards/t.conf", "--oversubscription", "2"]);
        let a = fabric_args(&card("[sweep.criteria]\nmax_oversubscription=2.5\n"), p);
        assert_eq!(a.last().map(String::as_str), Some("--fabric-map"));
        let a = fabric_args(&card("fabric_map=true\n"), p);
        assert_eq!(a.last().map(String::as_str), Some("--fabric-map"));
    }

    use super::*;
    use std::time::Instant;

    #[test]
    fn phases_narrow_in_card_order() {
        let card = Card::parse(
            "name='c'\n[probe]\n[sweep]\nmin_bytes='1K'\nmax_bytes='1K'\n[chaos]\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(
            select_phases(&card, None).unwrap(),
            ["probe", "sweep", "chaos"]
        );
        assert_eq!(
            select_phases(&card, Some("chaos,probe")).unwrap(),
            ["probe", "chaos"]
        );
        let e = select_phases(&card, Some("train")).unwrap_err().to_string();
        assert!(e.contains("no [train] section"), "{e}");
        let e = select_phases(&card, Some("bogus")).unwrap_err().to_string();
        assert!(e.contains("unknown phase 'bogus'"), "{e}");
    }

    #[test]
    fn job_commands_are_argument_vectors() {
        let card = Card::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("cards/sim-4node.toml"))
            .unwrap();
        let a = sweep_args(&card, Some(Path::new("/t/sim.toml")), Path::new("/r/sweep"));
        let text = a.join(" ");
        assert!(
            text.starts_with("sweep -c all_reduce,all_gather -b 256KiB -e 16MiB --tiers all -f 4"),
            "{text}"
        );
        assert!(
            text.contains("--budget 0.3 --placement out --topology /t/sim.toml"),
            "{text}"
        );
        assert!(text.ends_with("--out /r/sweep"), "{text}");
        let launch = split_launch("launch/sim-cluster exec --").unwrap();
        let c = chaos_argv(&card, "/b/burnin", &launch, Path::new("/r/chaos"));
        assert_eq!(
            shlex::try_join(c.iter().map(String::as_str)).unwrap(),
            "/b/burnin chaos --launch 'launch/sim-cluster exec --' --fault 'kill,hang' --kind-order cycle \
             --trials 2 --out /r/chaos -- --backend mpi -T 20 --steps 20 --ckpt-every 10 \
             --ckpt-bytes 4MiB --preset tiny"
        );
        let t = train_args(
            card.train.as_ref().unwrap(),
            10,
            Path::new("/r/p"),
            None,
            true,
        );
        assert_eq!(
            t.join(" "),
            "train --steps 10 --resume --ckpt-every 10 --ckpt-bytes 4MiB --preset tiny --out /r/p --log-every 5"
        );
        // The replay's trace is found next to the card, wherever burnin runs from.
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cards/sim-4node.toml");
        let r = replay_args(&card, &path, Path::new("/r/replay"));
        let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("cards/traces/dp-tp-2node.log");
        assert_eq!(
            r.join(" "),
            format!(
                "replay --trace {} --steps 10 --grow auto --out /r/replay",
                trace.display()
            )
        );
        let mut c2 = card.clone();
        let spec = c2.replay.as_mut().unwrap();
        spec.baseline = Some("/b/replay.json".into());
        spec.criteria.max_slowdown = Some(1.25);
        spec.step_calls = Some(3);
        spec.rank_map = Some(vec![1, 0]);
        spec.args = vec!["--check".into(), "0".into()];
        let r = replay_args(&c2, &path, Path::new("/r/replay")).join(" ");
        assert!(
            r.ends_with("--steps 10 --step-calls 3 --grow auto --rank-map 1,0 --baseline /b/replay.json --max-slowdown 1.25 --out /r/replay --check 0"),
            "{r}"
        );
    }

    #[test]
    fn soak_measures_one_size_with_the_sweeps_tiers() {
        let card = Card::parse(
            "name='c'\n[sweep]\nmin_bytes='1M'\nmax_bytes='4M'\ntiers=['world','pairs']\n\
             [sweep.criteria]\noutlier_fraction=0.5\n\
             [soak]\nduration_s=90\nbudget_s=0.2\n[soak.criteria]\nmax_pass_cv=0.3\ndrift_window_s=30\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(
            soak_args(&card, None, Path::new("/r/soak")).join(" "),
            "sweep -c all_reduce -b 4MiB -e 4MiB --tiers world,pairs --budget 0.2 \
             --outlier-fraction 0.5 --out /r/soak --duration 90 --max-drift 0.9 --max-pass-cv 0.3 \
             --drift-window 30"
        );
    }

    #[test]
    fn only_checkpoint_folders_are_found_for_removal() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in [
            "reference/ckpt/step-000000010",
            "trials/000/ckpt/step-000000020",
            "trials/000/run",
            "other/ckpt/notes",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        let mut found = checkpoint_dirs(r, 4);
        found.sort();
        assert_eq!(
            found,
            [r.join("reference/ckpt"), r.join("trials/000/ckpt")],
            "a ckpt folder holding anything but step-… folders is left alone"
        );
    }

    #[test]
    fn a_hung_job_is_killed_at_its_bound_with_its_tree() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = ["sh", "-c", "sleep 30 & sleep 30; echo never"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let t = Instant::now();
        let e = supervise(&argv, dir.path(), Duration::from_millis(300), true).unwrap();
        assert!(e.timed_out);
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        let e = supervise(
            &[
                "sh".into(),
                "-c".into(),
                "echo hi; echo oops >&2; exit 3".into(),
            ],
            dir.path(),
            Duration::from_secs(10),
            true,
        )
        .unwrap();
        assert_eq!(e.code, Some(3));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("stdout.log")).unwrap(),
            "hi\n"
        );
        assert_eq!(last_error_line(&dir.path().join("stderr.log")), "oops");
    }
}
