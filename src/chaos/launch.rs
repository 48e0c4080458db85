//! One launched job, supervised: the launcher (mpirun, `sim-cluster exec`, srun …) runs
//! as a child in its own process group, its stdout and stderr go line by line to files
//! in the trial folder and, stamped with the time they were read, to the supervisor;
//! every process of the job is tracked by (pid, start time), ranks by their MPI rank;
//! and the job is torn down like a good launcher does it: let the launcher
//! end the job by itself for a moment, then SIGTERM to every process of the tree, a
//! grace period, SIGKILL — and a check that nothing is left.
//!
//! A process belongs to the job when it descends from the launcher, or when it
//! descends from the supervisor (orphans are re-parented to it, see `process::tree`) and
//! carries the job's token in its environment (`BURNIN_CHAOS_JOB`, inherited by every
//! process the launcher starts on this host; `sim-cluster exec` passes `BURNIN_*` on).
use super::events::unix_now;
use crate::process::{self, stop_requested, Launcher};
pub use crate::results::chaos::Teardown;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A line the job printed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Line {
    /// Supervisor's clock when it was read.
    pub unix: f64,
    pub stderr: bool,
    pub text: String,
}

/// A process of the tree, as first seen.
#[derive(Clone, Debug)]
pub struct Seen {
    pub start: u64,
    pub comm: String,
    /// MPI rank, for burnin ranks.
    pub rank: Option<usize>,
    /// When it was found gone (supervisor's clock).
    pub gone: Option<f64>,
}

/// Describe an exit status.
pub fn describe_exit(st: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}

pub struct Job {
    launcher: Launcher,
    pub pid: u32,
    pub spawned_unix: f64,
    spawned: Instant,
    lines: Arc<Mutex<Vec<Line>>>,
    /// Every process ever seen under the supervisor while this job ran.
    pub seen: BTreeMap<u32, Seen>,
    /// The launcher's exit and when it was noticed.
    pub exit: Option<(ExitStatus, f64)>,
    last_scan: Option<Instant>,
    token: String,
    /// Processes under the supervisor found not to be the job's: (pid, start).
    foreign: HashSet<(u32, u64)>,
}

/// Environment variable that marks a job's processes.
pub const JOB_ENV: &str = "BURNIN_CHAOS_JOB";

fn has_token(pid: u32, token: &str) -> bool {
    let want = format!("{JOB_ENV}={token}");
    process::environ(pid).iter().any(|kv| kv == want.as_bytes())
}

/// A sink of the launcher's output: each line to `file` as read, and stamped with the
/// time it was read to `lines`.
fn sink(mut file: std::fs::File, stderr: bool, lines: Arc<Mutex<Vec<Line>>>) -> process::Sink {
    Box::new(move |buf: &[u8]| {
        let t = unix_now();
        let _ = file.write_all(buf);
        let _ = file.flush();
        let text = String::from_utf8_lossy(buf).trim_end().to_string();
        if let Ok(mut l) = lines.lock() {
            l.push(Line {
                unix: t,
                stderr,
                text,
            });
        }
        ControlFlow::Continue(())
    })
}

/// The MPI rank of a process, from its environment (None: not a rank or unreadable).
fn rank_of(pid: u32) -> Option<usize> {
    process::environ(pid).iter().find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        [
            "OMPI_COMM_WORLD_RANK=",
            "PMIX_RANK=",
            "PMI_RANK=",
            "SLURM_PROCID=",
        ]
        .iter()
        .find_map(|k| kv.strip_prefix(k)?.parse().ok())
    })
}

impl Job {
    /// Start `argv` with its output going to `stdout_path` / `stderr_path`.
    pub fn spawn(argv: &[String], stdout_path: &Path, stderr_path: &Path) -> Result<Job> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| anyhow::anyhow!("--launch: empty command"))?;
        let out = std::fs::File::create(stdout_path)
            .with_context(|| format!("cannot create {}", stdout_path.display()))?;
        let err = std::fs::File::create(stderr_path)
            .with_context(|| format!("cannot create {}", stderr_path.display()))?;
        static JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let token = format!(
            "{}-{}",
            std::process::id(),
            JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut c = Command::new(prog);
        c.args(args).env(JOB_ENV, &token);
        let spawned_unix = unix_now();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let launcher = Launcher::spawn(
            c,
            sink(out, false, Arc::clone(&lines)),
            sink(err, true, Arc::clone(&lines)),
        )
        .with_context(|| format!("--launch: cannot start '{prog}'"))?;
        Ok(Job {
            pid: launcher.pid(),
            launcher,
            spawned_unix,
            spawned: Instant::now(),
            lines,
            seen: BTreeMap::new(),
            exit: None,
            last_scan: None,
            token,
            foreign: HashSet::new(),
        })
    }

    /// Reap the job's processes re-parented to this supervisor (not the launcher: its
    /// `Child` handle waits for it).
    fn reap_orphans(&self) {
        let job: Vec<(u32, u64)> = self
            .seen
            .iter()
            .filter(|(pid, _)| **pid != self.pid)
            .map(|(pid, s)| (*pid, s.start))
            .collect();
        process::reap_orphans(&job);
    }

    /// Add the job's processes not seen yet to `seen`.
    fn scan(&mut self) {
        let me = std::process::id();
        let procs = process::all();
        let under_launcher: HashSet<u32> = process::descendants(self.pid, &procs)
            .iter()
            .map(|p| p.pid)
            .collect();
        for p in process::descendants(me, &procs) {
            if !p.live() || self.foreign.contains(&(p.pid, p.start)) {
                continue;
            }
            if let Some(known) = self.seen.get_mut(&p.pid).filter(|s| s.start == p.start) {
                // Seen between fork and exec: the name (and rank) come with the exec.
                if known.comm != p.comm {
                    known.comm = p.comm.clone();
                    if p.comm == "burnin" {
                        known.rank = rank_of(p.pid);
                    }
                }
                continue;
            }
            let member = p.pid == self.pid
                || under_launcher.contains(&p.pid)
                || has_token(p.pid, &self.token);
            if !member {
                self.foreign.insert((p.pid, p.start));
                continue;
            }
            let rank = if p.comm == "burnin" {
                rank_of(p.pid)
            } else {
                None
            };
            self.seen.insert(
                p.pid,
                Seen {
                    start: p.start,
                    comm: p.comm.clone(),
                    rank,
                    gone: None,
                },
            );
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.spawned.elapsed()
    }

    /// Lines printed so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Look at the job: the launcher's exit, the tree (a full /proc scan at most every
    /// `scan_every`; known processes every call). Returns processes found gone now.
    pub fn poll(&mut self, scan_every: Duration) -> Vec<(u32, Seen)> {
        if self.exit.is_none() {
            if let Ok(Some(st)) = self.launcher.try_wait() {
                self.exit = Some((st, unix_now()));
            }
        }
        let now = unix_now();
        let scan = self.last_scan.is_none_or_elapsed(scan_every);
        if scan {
            self.last_scan = Some(Instant::now());
            self.scan();
            self.reap_orphans();
        }
        let mut gone = Vec::new();
        for (pid, s) in self.seen.iter_mut() {
            if s.gone.is_none() && !process::alive(*pid, s.start) {
                s.gone = Some(now);
                gone.push((*pid, s.clone()));
            }
        }
        gone
    }

    /// Processes of the job alive now (launcher included while it runs), after a
    /// fresh scan.
    pub fn live(&mut self) -> Vec<(u32, String)> {
        self.scan();
        self.seen
            .iter()
            .filter(|(pid, s)| process::alive(**pid, s.start))
            .map(|(pid, s)| (*pid, s.comm.clone()))
            .collect()
    }

    fn signal_all(&mut self, sig: i32) {
        if self.exit.is_none() {
            process::signal(self.pid, sig);
        }
        for (pid, _) in self.live() {
            process::signal(pid, sig);
        }
    }

    /// Wait until `done` or `limit`, polling.
    fn wait_until(&mut self, limit: Duration, done: impl Fn(&mut Job) -> bool) -> bool {
        let t = Instant::now();
        loop {
            self.poll(Duration::from_millis(100));
            if done(self) {
                return true;
            }
            if t.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// End the job: `wait` for the launcher to end it by itself, then SIGTERM to every
    /// process, `grace`, SIGKILL; then the same for anything the launcher left behind;
    /// then check that the tree is empty.
    pub fn teardown(&mut self, wait: Duration, grace: Duration) -> Teardown {
        let began = unix_now();
        let mut how = "launcher ended the job itself".to_string();
        let exited = |j: &mut Job| j.exit.is_some();
        if !self.wait_until(wait, exited) {
            how = "SIGTERM".into();
            self.signal_all(libc::SIGTERM);
            if !self.wait_until(grace, |j| j.exit.is_some() && j.live().is_empty()) {
                how = "SIGKILL".into();
                self.signal_all(libc::SIGKILL);
                self.wait_until(Duration::from_secs(10), exited);
            }
        }
        // Whatever outlives the launcher by a grace period was left behind by it.
        self.wait_until(grace, |j| j.live().is_empty());
        let left: Vec<(u32, String)> = self.live();
        let left_behind: Vec<String> = left.iter().map(|(p, c)| format!("{p} {c}")).collect();
        if !left.is_empty() {
            for (p, _) in &left {
                process::signal(*p, libc::SIGTERM);
            }
            if !self.wait_until(grace, |j| j.live().is_empty()) {
                for (p, _) in self.live() {
                    process::signal(p, libc::SIGKILL);
                }
                self.wait_until(Duration::from_secs(10), |j| j.live().is_empty());
            }
        }
        self.reap_orphans();
        let tree_empty = self.exit.is_some() && self.live().is_empty();
        // The readers end when the last writer of the pipes is gone; don't wait long.
        self.launcher.join_readers(Some(Duration::from_secs(2)));
        Teardown {
            how,
            launcher_exit: self
                .exit
                .as_ref()
                .map(|(s, _)| describe_exit(s))
                .unwrap_or_else(|| "still running".into()),
            left_behind,
            tree_empty,
            began_unix: began,
            done_unix: unix_now(),
        }
    }
}

/// `Option<Instant>`: never set, or set longer ago than `d`.
trait Elapsed {
    fn is_none_or_elapsed(&self, d: Duration) -> bool;
}
impl Elapsed for Option<Instant> {
    fn is_none_or_elapsed(&self, d: Duration) -> bool {
        match self {
            None => true,
            Some(t) => t.elapsed() >= d,
        }
    }
}

/// Whether a job output line is a sign of failure: burnin's own deadline lines and
/// errors, and what Open MPI (ORTE) and PMIx-based launchers print when a rank dies,
/// aborts or a daemon is lost. burnin's chaos, straggler and warning lines are not.
pub fn is_failure_line(text: &str) -> bool {
    const NOT: [&str; 4] = [
        "burnin: chaos:",
        "burnin: straggler:",
        "burnin: warning:",
        "setpgid",
    ];
    if NOT.iter().any(|n| text.contains(n)) {
        return false;
    }
    const SIGNS: [&str; 16] = [
        " waited ",
        "Error",
        "error",
        "ERROR",
        "MPI_ABORT",
        "mpirun noticed",
        "mpirun has exited",
        "prterun",
        "lost communication",
        "exited on signal",
        "terminated",
        "Connection reset",
        "readv failed",
        "Broken pipe",
        "did not arrive",
        "killed",
    ];
    SIGNS.iter().any(|s| text.contains(s))
}

/// How often the watch loop looks (output lines and known processes); the full
/// process-tree scan and the events files are read every [`SLOW_POLL`].
pub(super) const POLL: Duration = Duration::from_millis(20);
pub(super) const SLOW_POLL: Duration = Duration::from_millis(100);

/// What a finished (or torn down) run left.
pub(super) struct Ran {
    pub(super) job: Job,
    pub(super) teardown: Teardown,
    pub(super) timed_out: bool,
    pub(super) interrupted: bool,
}

/// Run to the end (bounded by `limit`), then check that nothing is left.
pub(super) fn run_to_end(
    argv: &[String],
    dir: &Path,
    name: &str,
    limit: Duration,
    grace: Duration,
) -> Result<Ran> {
    let mut job = Job::spawn(
        argv,
        &dir.join(format!("{name}.stdout")),
        &dir.join(format!("{name}.stderr")),
    )?;
    let mut timed_out = false;
    let mut interrupted = false;
    while job.exit.is_none() {
        job.poll(SLOW_POLL);
        if job.elapsed() > limit {
            timed_out = true;
            break;
        }
        if stop_requested() {
            interrupted = true;
            break;
        }
        std::thread::sleep(POLL);
    }
    let teardown = job.teardown(Duration::ZERO, grace);
    Ok(Ran {
        job,
        teardown,
        timed_out,
        interrupted,
    })
}

/// The last lines of a run's stderr, for a problem message.
/// Why a run failed, from its output: burnin's own deadline and error lines first
/// (they say who and where), else the last `n` lines of stderr.
pub(super) fn tail(lines: &[Line], n: usize) -> String {
    let own: Vec<&str> = lines
        .iter()
        .map(|l| l.text.trim())
        .filter(|t| {
            t.starts_with("Error") || (t.starts_with("burnin: rank ") && t.contains(" waited "))
        })
        .take(2)
        .collect();
    if !own.is_empty() {
        return own.join(" | ");
    }
    let l: Vec<&str> = lines
        .iter()
        .filter(|l| l.stderr && !l.text.trim().is_empty())
        .map(|l| l.text.as_str())
        .collect();
    l[l.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_are_recognised() {
        for l in [
            "burnin: rank 0 (node0) waited 1.0 s at the check-in of step 13 (...): rank 2 (node1) did not arrive",
            "mpirun noticed that process rank 3 with PID 0 on node node1 exited on signal 9 (Killed).",
            "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
            "Error on rank 2 (vm): step 4: something",
            "ORTE has lost communication with a remote daemon.",
        ] {
            assert!(is_failure_line(l), "{l}");
        }
        for l in [
            "burnin: chaos: rank 2 (vm) injects kill at the end of step 12: SIGKILL to itself",
            "step     10/30  loss 5.0627  step 29.33 ms",
            "[head:01234] [[1,0],0] plm:rsh: Warning: setpgid(1,2) failed in parent with errno=Permission denied(13)",
            "burnin: straggler: rank 3 (node1) computes 2.9x slower",
        ] {
            assert!(!is_failure_line(l), "{l}");
        }
    }

    #[test]
    fn a_job_is_watched_and_torn_down_without_leftovers() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // A "launcher" that starts a child in another process group (as mpirun does
        // with ranks), prints, and never ends by itself.
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = [
            "sh",
            "-c",
            "setsid sleep 300 & echo started; echo oops: error >&2; sleep 300",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        process::become_subreaper();
        let mut job = Job::spawn(&argv, &dir.path().join("o"), &dir.path().join("e")).unwrap();
        let t = Instant::now();
        let sleeps = |j: &Job| j.seen.values().filter(|s| s.comm == "sleep").count();
        while (job.lines().len() < 2 || sleeps(&job) < 2) && t.elapsed() < Duration::from_secs(10) {
            job.poll(Duration::ZERO);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            job.seen.values().filter(|s| s.comm == "sleep").count() >= 2,
            "{:?}",
            job.seen
        );
        let lines = job.lines();
        assert!(
            lines.iter().any(|l| l.stderr && is_failure_line(&l.text)),
            "{lines:?}"
        );
        let td = job.teardown(Duration::from_millis(200), Duration::from_secs(2));
        assert_eq!(td.how, "SIGTERM", "{td:?}");
        assert!(td.tree_empty, "{td:?}");
        assert!(job.live().is_empty());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("o")).unwrap(),
            "started\n"
        );
    }
}
