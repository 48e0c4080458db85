//! The process toolkit of burnin's supervisors (`burnin run`, `burnin chaos`) and of
//! the ranks' signal handling (`interrupt`): signals to a process, a group or a whole
//! tree, and SIGINT/SIGTERM taken as a flag or by a thread ([`signals`]); a launcher
//! started in a process group of its own with its output read line by line, and
//! waited for under a deadline ([`launcher`]); the `/proc` view of processes, their
//! descendants and the child subreaper ([`tree`]); an mpirun on one node with no ssh
//! given Open MPI's local launcher ([`remote_shell`]). Linux only; a leaf: it uses nothing
//! else of burnin.
//!
//! Two teardown policies use it. `burnin run` ends a phase that passed its bound with
//! SIGTERM to the launcher's group and every descendant, a grace, then SIGKILL
//! ([`launcher::Launcher::wait_bounded`]). `burnin chaos` tracks every process of the
//! job by (pid, start time) and signals each one (`chaos::launch`): Open MPI puts every
//! rank in a process group of its own, so signals go to each pid, never only to the
//! launcher's group.
pub mod launcher;
pub mod remote_shell;
pub mod signals;
pub mod tree;

pub use launcher::{Bounded, Launcher, Sink};
pub use signals::{
    catch_stop, exit_now, signal, signal_group, signal_tree, stop_requested, take_stop_in_thread,
};
pub use tree::{
    alive, all, become_subreaper, descendant_pids, descendants, environ, parse_stat, reap_orphans,
    stat, Proc,
};

/// The burnin the phases and jobs of `burnin run` and `burnin chaos` start:
/// `BURNIN_EXE` when it names a file (the release tarball's `bin/burnin` wrapper sets
/// it to itself, so every rank picks its Open MPI again), else this executable.
pub fn self_exe() -> std::io::Result<std::path::PathBuf> {
    match std::env::var_os("BURNIN_EXE").map(std::path::PathBuf::from) {
        Some(p) if p.is_file() => Ok(p),
        _ => std::env::current_exe(),
    }
}
