//! Deadlines on blocking steps.
//!
//! A blocked MPI collective cannot be cancelled from inside, so one watchdog thread
//! per process sleeps until the current deadline. A workload arms it (`arm` returns a
//! guard that disarms on drop) around each blocking batch; arming is a mutex and a
//! condvar notify, never inside a timed iteration. On expiry the watchdog prints one
//! line naming the rank, its host, what it waited for and for how long, hands the same
//! line to the registered sinks (the run's JSONL), and ends the job: `MPI_Abort` when
//! MPI granted `MPI_THREAD_MULTIPLE`, else `_exit(2)` — mpirun then kills the rest.
//! The survivors' lines together name the rank that is missing.
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

type Sink = Box<dyn Fn(&str) + Send + Sync>;
type Note = Box<dyn Fn() -> String + Send + Sync>;

struct Armed {
    what: String,
    since: Instant,
    since_wall: SystemTime,
    deadline: Instant,
    generation: u64,
}

#[derive(Default)]
struct State {
    armed: Option<Armed>,
    generation: u64,
}

pub struct Watchdog {
    who: String,
    state: Mutex<State>,
    wake: Condvar,
    sinks: Mutex<Vec<Sink>>,
    notes: Mutex<Vec<Note>>,
    abort_with_mpi: bool,
}

/// Disarms the watchdog when dropped.
pub struct Guard<'a> {
    dog: &'a Watchdog,
    generation: u64,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.dog.state.lock() {
            if s.armed.as_ref().map(|a| a.generation) == Some(self.generation) {
                s.armed = None;
            }
        }
    }
}

/// Seconds since the Unix epoch, for records that must line up across hosts.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Watchdog {
    /// Start the watchdog thread. `who` names this process in messages
    /// ("rank 3 (node1)").
    pub fn start(who: String, abort_with_mpi: bool) -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog {
            who,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            sinks: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            abort_with_mpi,
        });
        let d = Arc::clone(&dog);
        let spawned = std::thread::Builder::new()
            .name("burnin-watchdog".into())
            .spawn(move || d.watch());
        if let Err(e) = spawned {
            eprintln!("burnin: warning: no watchdog thread ({e}); a hang will not be ended");
        }
        dog
    }

    /// Also send the expiry line to `sink` (e.g. append it to the run's JSONL).
    pub fn add_sink(&self, sink: Sink) {
        if let Ok(mut s) = self.sinks.lock() {
            s.push(sink);
        }
    }

    /// Append what `note` says (when not empty) to every expiry line, e.g. which
    /// peers are still heard from.
    pub fn add_note(&self, note: Note) {
        if let Ok(mut n) = self.notes.lock() {
            n.push(note);
        }
    }

    /// Arm for `what` with `limit`; disarmed when the guard drops.
    pub fn arm(&self, what: &str, limit: Duration) -> Guard<'_> {
        let now = Instant::now();
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        s.generation += 1;
        let generation = s.generation;
        s.armed = Some(Armed {
            what: what.to_string(),
            since: now,
            since_wall: SystemTime::now(),
            deadline: now + limit,
            generation,
        });
        drop(s);
        self.wake.notify_one();
        Guard {
            dog: self,
            generation,
        }
    }

    fn watch(&self) {
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        loop {
            let wait = match &s.armed {
                None => Duration::from_secs(3600),
                Some(a) => {
                    let now = Instant::now();
                    if now >= a.deadline {
                        let mut line = expiry_line(&self.who, &a.what, now - a.since, a.since_wall);
                        drop(s);
                        if let Ok(notes) = self.notes.lock() {
                            for n in notes.iter() {
                                let text = n();
                                if !text.is_empty() {
                                    line.push_str("; ");
                                    line.push_str(&text);
                                }
                            }
                        }
                        self.expire(&line);
                    }
                    a.deadline - now
                }
            };
            s = match self.wake.wait_timeout(s, wait) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// End the job now with `line` (printed, handed to the sinks), as an expiry does:
    /// for deadlines a workload polls itself (the chaos check-in).
    pub fn end_job(&self, line: &str) -> ! {
        self.expire(line)
    }

    fn expire(&self, line: &str) -> ! {
        eprintln!("{line}");
        if let Ok(sinks) = self.sinks.lock() {
            for sink in sinks.iter() {
                sink(line);
            }
        }
        if self.abort_with_mpi {
            // MPI is initialised with MPI_THREAD_MULTIPLE (checked at start), so this
            // thread may call MPI_Abort while the main thread is blocked in MPI.
            crate::world::abort_world(crate::error::EXIT_ERROR);
        }
        // SAFETY: _exit ends the process at once without running destructors, which
        // is the intent: the main thread is stuck in a call that will never return.
        unsafe { libc::_exit(crate::error::EXIT_ERROR) }
    }
}

/// The one line a rank prints when its deadline passes.
pub fn expiry_line(who: &str, what: &str, waited: Duration, since: SystemTime) -> String {
    format!(
        "burnin: {who} waited {:.1} s in {what} (since unix time {:.3}) and gave up: a peer is \
         missing, hung or cut off; ending the job",
        waited.as_secs_f64(),
        unix_seconds(since)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_line_names_who_what_and_how_long() {
        let l = expiry_line(
            "rank 3 (node1)",
            "all_reduce 1MiB f32 sum",
            Duration::from_millis(5200),
            SystemTime::UNIX_EPOCH,
        );
        assert!(
            l.contains("rank 3 (node1) waited 5.2 s in all_reduce 1MiB f32 sum"),
            "{l}"
        );
    }

    #[test]
    fn guard_disarms() {
        let dog = Watchdog::start("test".into(), false);
        {
            let _g = dog.arm("nothing", Duration::from_secs(60));
            assert!(dog.state.lock().unwrap().armed.is_some());
        }
        assert!(dog.state.lock().unwrap().armed.is_none());
    }
}
