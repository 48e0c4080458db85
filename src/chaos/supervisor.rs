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
use super::args::ChaosArgs;
use super::events::unix_now;
use super::launch::{run_to_end, tail};
use super::parity::{losses, read_json};
use super::report::{self, ChaosReport, Reference};
use super::setup::{s, Setup};
use super::trial;
use crate::error::Outcome;
use crate::process::{self, stop_requested};
use crate::progress::Live;
use crate::results::{self, Jsonl};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

pub use super::setup::validate;

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
    let live = Live::start("chaos: reference run (no fault)");
    let r = run_to_end(&argv, &dir, "launch", limit, st.grace)?;
    live.finish();
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
    let st = Setup::from_args(a)?;
    process::catch_stop();
    if !process::become_subreaper() {
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
    crate::metrics::phase("chaos reference");
    crate::metrics::gauge(
        "burnin_chaos_trials_planned",
        "Chaos trials this run plans.",
        &[],
        st.trials as f64,
    );
    let reference = reference(&st)?;
    let ref_losses = losses(&read_json(&reference.dir.join("run").join("run.json"))?);
    rep.reference = Some(reference.clone());
    write_report(&report_path, &mut rep)?;
    for n in 0..st.trials {
        if stop_requested() {
            break;
        }
        let base = trial::Baseline {
            reference: &reference,
            losses: &ref_losses,
        };
        crate::metrics::phase(&format!("chaos trial {}/{}", n + 1, st.trials));
        let live = Live::start(format!("chaos: trial {}/{}", n + 1, st.trials));
        let t = trial::run(&st, &base, n, &live)?;
        live.finish();
        println!("{}", report::trial_line(&t, st.trials));
        trials_file.append(&t)?;
        crate::metrics::chaos_trial(&t);
        crate::metrics::flush();
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
    if stop_requested() {
        bail!("interrupted; the job was torn down");
    }
    Ok(Outcome::from_ok(rep.outcome == "pass"))
}
