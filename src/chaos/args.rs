//! `burnin chaos`'s flags and their validation.
use crate::config::GlobalArgs;
use crate::error::usage;
use crate::fault::{FaultKind, Pick};
use crate::train::TrainArgs;
use anyhow::Result;
use clap::{Args, Parser, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Debug, Serialize, Clone)]
pub struct ChaosArgs {
    /// The launcher that starts the job, as one string split like a shell would (but
    /// never run by one); burnin and the train arguments are appended. E.g.
    /// 'mpirun --allow-run-as-root --oversubscribe -np 4' or 'launch/sim-cluster exec --'.
    #[arg(long, value_name = "COMMAND")]
    pub launch: String,
    /// Fault kinds, comma-separated; each trial draws one: kill, exit, hang, slow,
    /// corrupt-ckpt, node-loss:NODE, link-cut:NODE (simulated cluster).
    #[arg(long, value_name = "LIST", default_value = "kill")]
    pub fault: String,
    /// How each trial's kind is chosen from --fault: random (seeded), or cycle (in
    /// turn, so every kind is covered).
    #[arg(long, value_enum, default_value_t = KindOrder::Random)]
    pub kind_order: KindOrder,
    /// Victim rank, or `random` (drawn per trial).
    #[arg(long, value_name = "RANK|random", default_value = "random")]
    pub fault_rank: String,
    /// Step at whose end the fault fires, or `random` (drawn per trial).
    #[arg(long, value_name = "STEP|random", default_value = "random")]
    pub fault_step: String,
    /// `slow`: the victim's steps take this many times as long.
    #[arg(long, value_name = "F", default_value_t = 3.0)]
    pub slow_factor: f64,
    /// Number of trials (each: inject, detect, tear down, relaunch, verify).
    #[arg(long, default_value_t = 1)]
    pub trials: usize,
    /// Seed of the per-trial random draws (kind, rank, step).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Results folder: chaos.json, trials.jsonl, reference/ and trials/NNN/.
    #[arg(long, value_name = "DIR", default_value = "results/chaos")]
    pub out: PathBuf,
    /// Price of one GPU-hour (ranks count as GPUs): the report gives the cost of one
    /// failure, (recovery time + lost steps x step time) x GPUs x price.
    #[arg(long, value_name = "USD")]
    pub gpu_hour_usd: Option<f64>,
    /// The burnin binary the job runs (default: this one).
    #[arg(long, value_name = "PATH")]
    pub burnin: Option<PathBuf>,
    /// launch/sim-cluster, for link-cut (default: the --launch program when it is
    /// sim-cluster).
    #[arg(long, value_name = "PATH")]
    pub sim_cluster: Option<PathBuf>,
    /// A failure nothing has noticed this long after the injection is a hang: the
    /// supervisor reports it and ends the job. Default: 60 s, or the job's deadline
    /// (`-T` in the train arguments) + 30 s when that is longer; a limit that does not
    /// exceed the deadline by 10 s is refused (the supervisor would give up before the
    /// ranks' deadline names the hung rank, and report a hang of its own making).
    #[arg(long, value_name = "SECS")]
    pub hang_limit: Option<f64>,
    /// Once a failure is visible, how long the launcher gets to end the job by itself
    /// before the supervisor sends SIGTERM to every process of it.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub teardown_wait: f64,
    /// Between SIGTERM and SIGKILL.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    pub grace: f64,
    /// Longest any one run may take (default: the reference's time x 4 + 60 s; one hour
    /// for the reference itself).
    #[arg(long, value_name = "SECS")]
    pub run_timeout: Option<f64>,
    /// `burnin train` arguments (after --); chaos owns --out, --ckpt-dir, --resume and
    /// the --fault flags.
    #[arg(last = true, value_name = "TRAIN ARGS")]
    pub train_args: Vec<String>,
}

/// How trials pick their fault kind.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KindOrder {
    Random,
    Cycle,
}

/// `burnin train ARGS` as the job will parse it.
#[derive(Parser, Debug)]
#[command(name = "train", no_binary_name = true)]
struct TrainCmd {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(flatten)]
    train: TrainArgs,
}

/// How long a failure may go unnoticed before the supervisor calls it a hang, for
/// the job's deadline `job_timeout` (the train arguments' `-T`) and `--hang-limit`.
pub fn hang_limit(given: Option<f64>, job_timeout: Option<f64>) -> Result<f64> {
    const DEFAULT: f64 = 60.0;
    const AFTER_DEADLINE: f64 = 30.0;
    const MIN_MARGIN: f64 = 10.0;
    match (given, job_timeout) {
        (None, None) => Ok(DEFAULT),
        (None, Some(t)) => Ok(DEFAULT.max(t + AFTER_DEADLINE)),
        (Some(h), Some(t)) if h < t + MIN_MARGIN => Err(usage(
            "--hang-limit",
            format!(
                "{h} s does not exceed the job's deadline -T {t} (train arguments) by {MIN_MARGIN} s: \
                 the supervisor would give up before the ranks' deadline names the hung rank; \
                 give --hang-limit {} or more, or leave it out ({} s then)",
                t + MIN_MARGIN,
                DEFAULT.max(t + AFTER_DEADLINE)
            ),
        )),
        (Some(h), _) => Ok(h),
    }
}

/// The train arguments' deadline (`-T`), parsed as [`parse_train_args`] does.
pub fn train_timeout(args: &[String]) -> Option<f64> {
    TrainCmd::try_parse_from(args)
        .ok()
        .and_then(|t| t.global.timeout)
}

/// The train arguments, parsed; refuses the flags chaos owns.
pub fn parse_train_args(args: &[String]) -> Result<TrainArgs> {
    let t = TrainCmd::try_parse_from(args).map_err(|e| {
        let text = e.to_string();
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim_start_matches("error: ")
            .to_string();
        usage("train arguments (after --)", first)
    })?;
    let owned = [
        ("--out", t.train.out.is_some()),
        ("--ckpt-dir", t.train.ckpt_dir.is_some()),
        ("--resume", t.train.resume),
        ("--fault", t.train.fault.fault.is_some()),
        ("--fault-rank", t.train.fault.fault_rank.is_some()),
        ("--fault-step", t.train.fault.fault_step.is_some()),
        ("--fault-seed", t.train.fault.fault_seed.is_some()),
        ("--test-die", t.train.test_die.is_some()),
    ];
    if let Some((flag, _)) = owned.iter().find(|(_, given)| *given) {
        return Err(usage(
            "train arguments (after --)",
            format!("{flag} is chosen by burnin chaos per run; give the fault flags before --, and leave {flag} out"),
        ));
    }
    Ok(t.train)
}

/// The fault kinds of `--fault LIST`.
pub fn parse_kinds(list: &str) -> Result<Vec<FaultKind>> {
    let kinds: Vec<FaultKind> = list
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| FaultKind::parse(s).map_err(|e| usage("--fault", e)))
        .collect::<Result<_>>()?;
    if kinds.is_empty() {
        return Err(usage("--fault", "names no fault kind"));
    }
    Ok(kinds)
}

/// The numbers that must be positive.
pub fn check_numbers(a: &ChaosArgs) -> Result<()> {
    if a.trials == 0 {
        return Err(usage("--trials", "must be at least 1"));
    }
    for (flag, v) in [
        ("--hang-limit", a.hang_limit.unwrap_or(1.0)),
        ("--teardown-wait", a.teardown_wait),
        ("--grace", a.grace),
        ("--run-timeout", a.run_timeout.unwrap_or(1.0)),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(usage(flag, format!("{v} must be a number of seconds >= 0")));
        }
    }
    if let Some(p) = a.gpu_hour_usd {
        if !(p.is_finite() && p >= 0.0) {
            return Err(usage("--gpu-hour-usd", format!("{p} must be a price >= 0")));
        }
    }
    Pick::parse("--fault-rank", Some(&a.fault_rank))?;
    Pick::parse("--fault-step", Some(&a.fault_step))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_hang_limit_outlasts_the_jobs_deadline() {
        assert_eq!(hang_limit(None, None).unwrap(), 60.0);
        assert_eq!(hang_limit(None, Some(10.0)).unwrap(), 60.0);
        // the sim card's step_timeout_s = 60 used to race the 60 s default
        assert_eq!(hang_limit(None, Some(60.0)).unwrap(), 90.0);
        assert_eq!(hang_limit(Some(75.0), Some(60.0)).unwrap(), 75.0);
        assert_eq!(hang_limit(Some(5.0), None).unwrap(), 5.0);
        let e = format!("{:#}", hang_limit(Some(60.0), Some(60.0)).unwrap_err());
        assert!(
            e.contains("--hang-limit") && e.contains("60") && e.contains("-T 60"),
            "{e}"
        );
        assert_eq!(train_timeout(&v(&["-T", "45", "--steps", "3"])), Some(45.0));
        assert_eq!(train_timeout(&v(&["--steps", "3"])), None);
    }

    #[test]
    fn train_args_parse_and_owned_flags_are_refused() {
        let t = parse_train_args(&v(&[
            "--steps",
            "30",
            "--ckpt-every",
            "5",
            "--backend",
            "mpi",
            "-T",
            "9",
        ]))
        .unwrap();
        assert_eq!((t.steps, t.ckpt_every), (30, 5));
        let e = format!("{:#}", parse_train_args(&v(&["--out", "x"])).unwrap_err());
        assert!(e.contains("--out is chosen by burnin chaos"), "{e}");
        let e = format!(
            "{:#}",
            parse_train_args(&v(&["--fault", "kill"])).unwrap_err()
        );
        assert!(e.contains("--fault is chosen"), "{e}");
        let e = format!("{:#}", parse_train_args(&v(&["--stepz", "3"])).unwrap_err());
        assert!(
            e.contains("train arguments (after --)") && e.contains("--stepz"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn kinds_are_a_comma_list() {
        let k = parse_kinds("kill,hang, link-cut:node2").unwrap();
        assert_eq!(k.len(), 3);
        assert_eq!(k[2], FaultKind::LinkCut("node2".into()));
        assert!(format!("{:#}", parse_kinds("kill,boom").unwrap_err())
            .contains("--fault: unknown fault 'boom'"));
        assert!(parse_kinds(",").is_err());
    }
}
