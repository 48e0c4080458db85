//! The wiring every MPI workload shares, for both binaries (`burnin` and the training
//! binary `burnin-train`): the environment set while the process has one thread, MPI
//! up, a watchdog, the ranks' agreement on the configuration, then the workload, and
//! its result as an exit code (0 pass, 1 a check failed, 2 an error; a rank's own
//! error ends the job so peers never wait for it).
use crate::cli::{Cli, Command};
use crate::error::{Agreed, Outcome, EXIT_ERROR};
use crate::watchdog::Watchdog;
use crate::world::World;
use crate::{interrupt, transport, world};
use std::sync::Arc;

/// Run `workload` on every rank of the MPI job this process belongs to.
pub fn run_mpi(
    cli: &Cli,
    workload: impl FnOnce(&World, Arc<Watchdog>) -> anyhow::Result<Outcome>,
) -> i32 {
    // Environment for the transport logs: while this is the only thread, before MPI.
    if let Command::Sweep(a) = &cli.command {
        if !a.no_transport {
            transport::prepare(a.out.as_deref(), cli.global.backend);
        }
    }
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
    let dog = Watchdog::start(who.clone(), world.thread_multiple);
    let mut metrics = None;
    let result = serde_json::to_value(cli)
        .map_err(anyhow::Error::from)
        .and_then(|cfg| world.agree_on_config(&cfg))
        .and_then(|_| start_metrics(&world, cli))
        .and_then(|m| {
            metrics = m;
            workload(&world, dog)
        });
    crate::metrics::phase("done");
    drop(metrics); // the last rewrite, before the exit code is known to anyone
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

/// The command's name as `burnin_info{command=...}` says it.
pub fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Probe(_) => "probe",
        Command::Sweep(_) => "sweep",
        Command::Train(_) => "train",
        Command::Chaos(_) => "chaos",
        Command::Smoke(_) => "smoke",
        Command::Gpu(_) => "gpu",
        Command::Evidence(_) => "evidence",
        Command::Run(_) => "run",
        Command::Report(_) => "report",
        Command::Compare(_) => "compare",
        Command::Replay(_) => "replay",
    }
}

/// `--metrics-file` on rank 0; every rank learns whether it could be written (an
/// agreed error naming the flag, before anything is measured).
fn start_metrics(world: &World, cli: &Cli) -> anyhow::Result<Option<crate::metrics::Writer>> {
    if cli.global.metrics_file.is_none() {
        return Ok(None);
    }
    let mut writer = None;
    let mut problem: Option<String> = None;
    if world.rank == 0 {
        let name = command_name(&cli.command);
        match cli.global.start_metrics("burnin", name, 0, world.size) {
            Ok(w) => writer = w,
            Err(e) => problem = Some(format!("{e:#}")),
        }
        crate::metrics::phase(name);
    }
    let problem: Option<String> = world.broadcast_json(Some(&problem))?;
    if let Some(p) = problem {
        anyhow::bail!(Agreed(p));
    }
    Ok(writer)
}

/// Clap's parse of this process's arguments, or the exit code after clap printed why
/// not (every rank parses the same bad flags: only the first one says so).
pub fn parse_cli() -> Result<Cli, i32> {
    use clap::Parser;
    Cli::try_parse().map_err(|e| {
        if launcher_rank() == 0 || !e.use_stderr() {
            let _ = e.print();
        }
        if e.use_stderr() {
            EXIT_ERROR
        } else {
            0
        }
    })
}

/// This process's rank as the launcher says, before MPI is up (for printing once).
pub fn launcher_rank() -> usize {
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
