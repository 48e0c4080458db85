//! What `burnin chaos`'s flags fix for a whole campaign, validated once ([`Setup`]):
//! the launcher words, the fault kinds, the job's train arguments, the supervisor's
//! bounds; and the command line of each run of the job.
use super::args::{self, ChaosArgs, KindOrder};
use crate::error::usage;
use crate::fault::{self, FaultKind, Pick, SplitMix64};
use crate::results;
use crate::train::TrainArgs;
use anyhow::{anyhow, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    args::hang_limit(a.hang_limit, args::train_timeout(&a.train_args))?;
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

impl Setup {
    /// The campaign `burnin chaos`'s flags describe: validated, the `--sim-cluster` and
    /// `--burnin` paths checked, the results folder created.
    pub(super) fn from_args(a: &ChaosArgs) -> Result<Setup> {
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
            None => crate::process::self_exe()
                .context("cannot find this burnin's path; give --burnin")?,
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
            hang_limit: secs(args::hang_limit(
                a.hang_limit,
                args::train_timeout(&a.train_args),
            )?),
            teardown_wait: secs(a.teardown_wait),
            grace: secs(a.grace),
            run_timeout: a.run_timeout.map(secs),
            price: a.gpu_hour_usd,
            trials: a.trials,
            seed: a.seed,
        })
    }
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
