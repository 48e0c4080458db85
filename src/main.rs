//! burnin: acceptance tests for rented multi-node GPU reservations.
//!
//! `main` is wiring only: parse the command line, start the MPI world, prove every
//! rank got the same configuration, dispatch to the workload, map the result to an
//! exit code (0 pass, 1 a check failed, 2 an error).
use burnin::{
    acceptance, argcheck, chaos, cli, error, evidence, interrupt, probe, report, smoke, sweep,
    train, transport, watchdog, world,
};

use clap::Parser;
use cli::{Cli, Command};
use error::{Agreed, Outcome, EXIT_ERROR};
use std::process::ExitCode;

/// This process's rank as the launcher says, before MPI is up (for printing once).
fn launcher_rank() -> usize {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(0)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Every rank parses the same bad flags: let only the first one say so.
            if launcher_rank() == 0 || !e.use_stderr() {
                let _ = e.print();
            }
            return ExitCode::from(if e.use_stderr() { EXIT_ERROR as u8 } else { 0 });
        }
    };
    ExitCode::from(run(cli) as u8)
}

/// The commands that run on the launch host and never start MPI: the acceptance
/// supervisor and the exporters. None for the MPI workloads.
fn host_command(cli: &Cli) -> Option<i32> {
    let result = match &cli.command {
        Command::Run(args) => acceptance::run(args),
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
    if let Command::Chaos(args) = &cli.command {
        // The supervisor runs the launcher itself: no MPI here.
        return match chaos::supervisor::run(args) {
            Ok(outcome) => outcome.exit_code(),
            Err(e) => {
                eprintln!("Error: {e:#}");
                EXIT_ERROR
            }
        };
    }
    // Environment for the transport logs: while this is the only thread, before MPI.
    transport::prepare(&cli);
    if matches!(cli.command, Command::Train(_) | Command::Smoke(_))
        && std::env::var_os("CUBLAS_WORKSPACE_CONFIG").is_none()
    {
        // cuBLAS reads it at its first handle (deterministic GEMMs on CUDA); setting
        // it later, once MPI's threads run, would be a data race on the environment.
        std::env::set_var("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    }
    // Before MPI starts threads, so they inherit the signal mask (see interrupt.rs).
    interrupt::install();
    transport::start_forwarder();
    let world = match world::World::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("Error: cannot start MPI: {e:#}");
            return EXIT_ERROR;
        }
    };
    interrupt::set_rank(world.rank);
    let who = world.describe_rank(world.rank);
    let dog = watchdog::Watchdog::start(who.clone(), world.thread_multiple);
    let result = (|| -> anyhow::Result<Outcome> {
        world.agree_on_config(&serde_json::to_value(&cli)?)?;
        match &cli.command {
            Command::Probe(args) => probe::run(&world, &cli.global, args),
            Command::Sweep(args) => sweep::run(&world, &cli.global, args, dog.clone()),
            Command::Train(args) => train::run(&world, &cli.global, args, dog.clone()),
            Command::Chaos(_) => Err(anyhow::anyhow!(
                "burnin chaos is the supervisor: run it on the launch host, not under mpirun"
            )),
            Command::Smoke(args) => smoke::run(&world, &cli.global, args, dog.clone()),
            Command::Evidence(args) => evidence::run(&world, &cli.global, args),
            Command::Run(_) | Command::Report(_) | Command::Compare(_) => Err(anyhow::anyhow!(
                "this command runs on the launch host, not under MPI"
            )),
        }
    })();
    match result {
        Ok(outcome) => outcome.exit_code(),
        Err(e) if e.downcast_ref::<Agreed>().is_some() => {
            if world.rank == 0 {
                eprintln!("Error: {e:#}");
            }
            EXIT_ERROR
        }
        Err(e) => {
            eprintln!("Error on {who}: {e:#}");
            if world.size > 1 {
                // Peers may be blocked in a collective waiting for us: end the job.
                world.abort(EXIT_ERROR);
            }
            EXIT_ERROR
        }
    }
}
