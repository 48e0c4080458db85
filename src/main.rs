//! burnin: acceptance tests for rented multi-node GPU reservations.
//!
//! `main` is wiring only: parse the command line, start the MPI world, prove every
//! rank got the same configuration, dispatch to the workload, map the result to an
//! exit code (0 pass, 1 a check failed, 2 an error).
use burnin::{
    acceptance, app, argcheck, chaos, cli, error, evidence, health, probe, replay, report, smoke,
    sweep, trainer,
};

use cli::{Cli, Command};
use error::{Outcome, EXIT_ERROR};
use std::process::ExitCode;

fn main() -> ExitCode {
    match app::parse_cli() {
        Ok(cli) => ExitCode::from(run(cli) as u8),
        Err(code) => ExitCode::from(code as u8),
    }
}

/// The commands that run on the launch host and never start MPI: the acceptance
/// supervisor and the exporters. None for the MPI workloads.
fn host_command(cli: &Cli) -> Option<i32> {
    let result = match &cli.command {
        Command::Run(args) => with_metrics(cli, "burnin_acceptance", || {
            acceptance::run(args, &cli.global)
        }),
        Command::Report(args) => report::run_report(args),
        Command::Compare(args) => {
            report::compare::run(&args.a, &args.b, args.out.as_deref()).map(|_| Outcome::Pass)
        }
        _ => return None,
    };
    Some(match result {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("Error: {e:#}");
            EXIT_ERROR
        }
    })
}

/// `f` with `--metrics-file` written by this process (the launch host's), when given.
fn with_metrics(
    cli: &Cli,
    namespace: &'static str,
    f: impl FnOnce() -> anyhow::Result<Outcome>,
) -> anyhow::Result<Outcome> {
    let name = app::command_name(&cli.command);
    let _writer = cli.global.start_metrics(namespace, name, 0, 1)?;
    let result = f();
    burnin::metrics::phase("done");
    result
}

fn run(cli: Cli) -> i32 {
    if let Some(ranks) = argcheck::requested() {
        return match ranks.and_then(|n| argcheck::check(&cli, n)) {
            Ok(()) => {
                println!("burnin: arguments ok");
                0
            }
            Err(e) => {
                eprintln!("Error: {e:#}");
                EXIT_ERROR
            }
        };
    }
    if let Some(code) = host_command(&cli) {
        return code;
    }
    match &cli.command {
        Command::Chaos(args) => {
            // The supervisor runs the launcher itself: no MPI here.
            match with_metrics(&cli, "burnin", || chaos::supervisor::run(args)) {
                Ok(outcome) => outcome.exit_code(),
                Err(e) => {
                    eprintln!("Error: {e:#}");
                    EXIT_ERROR
                }
            }
        }
        Command::Train(_) => {
            // The training binary, with these arguments, before MPI starts.
            let e = match trainer::locate() {
                Ok(t) => format!("cannot start {}: {}", t.exe.display(), t.exec()),
                Err(e) => e,
            };
            if app::launcher_rank() == 0 {
                eprintln!("Error: burnin train: {e}");
            }
            EXIT_ERROR
        }
        _ => app::run_mpi(&cli, |world, dog| match &cli.command {
            Command::Probe(args) => probe::run(world, &cli.global, args),
            Command::Sweep(args) => sweep::run(world, &cli.global, args, dog),
            Command::Smoke(args) => smoke::run(world, &cli.global, args, dog),
            Command::Gpu(args) => health::run(world, &cli.global, args, dog),
            Command::Evidence(args) => evidence::run(world, &cli.global, args),
            Command::Replay(args) => replay::run(world, &cli.global, args, dog),
            _ => Err(anyhow::anyhow!(
                "this command runs on the launch host, not under MPI"
            )),
        }),
    }
}
