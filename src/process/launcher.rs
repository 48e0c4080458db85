//! A launcher (mpirun, `sim-cluster exec`, srun, a burnin phase …) run as a child in
//! a process group of its own, stdin from /dev/null, its stdout and stderr read line
//! by line by a thread each and handed to the caller's sinks; and, for `burnin run`,
//! waited for under a deadline ([`Launcher::wait_bounded`]).
use super::signals::signal_tree;
use std::io::{BufRead, BufReader, Read};
use std::ops::ControlFlow;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a sink is handed: one line as read, with its `\n` (the last one may have
/// none). `Break` stops reading that stream.
pub type Sink = Box<dyn FnMut(&[u8]) -> ControlFlow<()> + Send>;

/// A started launcher and the threads reading its output.
pub struct Launcher {
    child: Child,
    readers: Vec<JoinHandle<()>>,
}

/// How a launcher waited for under a deadline ended.
pub struct Bounded {
    pub status: ExitStatus,
    /// The deadline passed (the job was ended).
    pub timed_out: bool,
    /// A stop was requested (the job was ended).
    pub interrupted: bool,
}

fn reader(stream: impl Read + Send + 'static, mut sink: Sink) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if sink(&buf).is_break() {
                        break;
                    }
                }
            }
        }
    })
}

impl Launcher {
    /// Start `cmd` (program, arguments, environment set by the caller) in a process
    /// group of its own, its stdout lines to `out`, its stderr lines to `err`.
    /// An mpirun that stays on this node, on a machine without ssh, gets Open MPI's
    /// local launcher ([`super::remote_shell`]).
    pub fn spawn(mut cmd: Command, out: Sink, err: Sink) -> std::io::Result<Launcher> {
        super::remote_shell::isolate_if_no_remote_shell(&mut cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn()?;
        let mut readers = Vec::new();
        if let Some(s) = child.stdout.take() {
            readers.push(reader(s, out));
        }
        if let Some(s) = child.stderr.take() {
            readers.push(reader(s, err));
        }
        Ok(Launcher { child, readers })
    }

    /// The launcher's pid, which is also its process group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, once it exited (reaped then).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Wait for the output readers; they end when the last writer of the pipes is
    /// gone. `at_most`: give up on those still reading after that long.
    pub fn join_readers(&mut self, at_most: Option<Duration>) {
        for h in std::mem::take(&mut self.readers) {
            if let Some(limit) = at_most {
                let t = Instant::now();
                while !h.is_finished() && t.elapsed() < limit {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if !h.is_finished() {
                    continue;
                }
            }
            let _ = h.join();
        }
    }

    /// Wait for the launcher to exit, at most `limit` and until `stop()` says so;
    /// then SIGTERM to its group and every descendant, `grace`, SIGKILL. Whatever it
    /// left running (daemons that outlived it) is SIGKILLed too. Checked every 50 ms.
    pub fn wait_bounded(
        &mut self,
        limit: Duration,
        grace: Duration,
        stop: impl Fn() -> bool,
    ) -> std::io::Result<Bounded> {
        let start = Instant::now();
        let (mut timed_out, mut interrupted) = (false, false);
        let pid = self.pid();
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break st;
            }
            let expired = start.elapsed() > limit;
            let stopped = stop();
            if expired || stopped {
                timed_out = expired;
                interrupted = stopped;
                signal_tree(pid, libc::SIGTERM);
                let t = Instant::now();
                let st = loop {
                    if let Some(st) = self.child.try_wait()? {
                        break Some(st);
                    }
                    if t.elapsed() > grace {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                match st {
                    Some(st) => break st,
                    None => {
                        signal_tree(pid, libc::SIGKILL);
                        break self.child.wait()?;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        signal_tree(pid, libc::SIGKILL);
        Ok(Bounded {
            status,
            timed_out,
            interrupted,
        })
    }
}
