//! burnin as a library: the binary's modules, public so integration tests and benches
//! can use the pure parts (parsers, the collective table, statistics, reports).
pub mod acceptance;
pub mod app;
pub mod argcheck;
pub mod backend;
pub mod card;
pub mod chaos;
pub mod cli;
pub mod collective;
pub mod config;
pub mod dcgm;
pub mod error;
pub mod evidence;
pub mod fabric;
pub mod fault;
pub mod gpu;
pub mod health;
pub mod interrupt;
pub mod kinds;
pub mod metrics;
pub mod mpi_log;
pub mod nccl_log;
pub mod nvml;
pub mod probe;
pub mod process;
pub mod progress;
pub mod replay;
pub mod report;
pub mod results;
pub mod smoke;
pub mod stats;
pub mod sweep;
pub mod table;
pub mod topology;
pub mod train;
pub mod trainer;
pub mod transport;
pub mod units;
pub mod watchdog;
pub mod world;

/// Lib tests that spawn child processes take this lock: the chaos supervisor's tests
/// reap orphaned zombies of the (whole) test process, which would otherwise steal the
/// exit status of another test's child. In the binary only one workload runs.
#[cfg(test)]
pub(crate) static CHILD_PROCESS_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
