//! The options every command shares (`--backend`, `--nccl-lib`, `-T`), and the
//! backend configuration built from them once.
use crate::backend::{BackendChoice, BackendConfig};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug, Serialize, Clone)]
pub struct GlobalArgs {
    /// Communication backend: nccl (GPU buffers), mpi (host buffers), or auto (nccl
    /// when every rank has a usable GPU and NCCL, else mpi).
    #[arg(long, global = true, value_enum, default_value_t = BackendChoice::Auto, env = "BURNIN_BACKEND")]
    pub backend: BackendChoice,
    /// Path of the NCCL library to load (default: search pip's nvidia-nccl, the
    /// loader path and the usual system directories).
    #[arg(long, global = true, env = "BURNIN_NCCL_LIB", value_name = "PATH")]
    pub nccl_lib: Option<PathBuf>,
    /// Deadline in seconds for any single blocking step (a collective, a wait); on
    /// expiry the rank says what it was waiting for and ends the job. Default: 120 s;
    /// `train` derives its deadlines from the step times it observes instead
    /// (max(3 s, 10 x p99), 60 s at start-up).
    #[arg(short = 'T', long = "timeout", global = true, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Live metrics for the cluster's monitoring: a Prometheus text-format file
    /// (node_exporter's textfile collector), rewritten whole every --metrics-every by
    /// rank 0 (by the launch host's process for run and chaos). No socket is opened.
    #[arg(long, global = true, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// How often --metrics-file is rewritten: seconds, or with a unit (5s, 1m).
    #[arg(long, global = true, value_name = "TIME", default_value = "5s", value_parser = parse_every)]
    pub metrics_every: f64,
}

/// `--metrics-every`: a duration of at least 0.1 s.
fn parse_every(text: &str) -> Result<f64, String> {
    let s = crate::units::parse_seconds(text)?;
    if s < 0.1 {
        return Err(format!("'{text}' is shorter than 0.1 s"));
    }
    Ok(s)
}

/// The deadline when `-T` is not given (probe, sweep).
pub const DEFAULT_TIMEOUT_SECS: f64 = 120.0;

impl GlobalArgs {
    /// `-T`, or the default deadline.
    pub fn timeout_secs(&self) -> f64 {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS)
    }

    /// Start `--metrics-file`'s writer here, when given: `command` and this host
    /// label its `burnin_info`, `namespace` prefixes its own families.
    pub fn start_metrics(
        &self,
        namespace: &'static str,
        command: &str,
        rank: usize,
        ranks: usize,
    ) -> anyhow::Result<Option<crate::metrics::Writer>> {
        let Some(path) = &self.metrics_file else {
            return Ok(None);
        };
        let host = crate::world::hostname();
        let (rank, ranks) = (rank.to_string(), ranks.to_string());
        let info = [
            ("command", command),
            ("host", host.as_str()),
            ("rank", rank.as_str()),
            ("ranks", ranks.as_str()),
        ];
        let every = Duration::from_secs_f64(self.metrics_every);
        crate::metrics::start(path, every, namespace, &info).map(Some)
    }
}

impl GlobalArgs {
    /// What the backends need of these options: the choice, the NCCL library and the
    /// deadline of a single blocking step.
    pub fn backend_config(&self) -> BackendConfig {
        BackendConfig {
            choice: self.backend,
            nccl_lib: self.nccl_lib.clone(),
            deadline: Duration::from_secs_f64(self.timeout_secs().max(0.001)),
        }
    }
}
