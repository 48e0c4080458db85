//! Per-rank event records: `OUT/events/rank-NNNNN.jsonl`, one line per event, each
//! written whole and flushed as it happens (a SIGKILL right after leaves it on disk).
//!
//! Every rank writes its own file because the rank that sees something — the victim
//! injecting its fault, a survivor whose deadline passes — need not be rank 0, and a
//! rank about to die cannot wait for a gather. Each line carries the rank's wall
//! clock (`unix`), its monotonic clock (`mono`, comparable on one host) and its clock
//! offset to rank 0 (`offset_s`, measured at start, see `clock`), so `unix -
//! offset_s` puts every event on rank 0's clock.
use crate::results::Jsonl;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Version of the events JSONL schema.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of an events file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub schema_version: u32,
    /// World rank that wrote it.
    pub rank: usize,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its wall clock, seconds since the Unix epoch.
    pub unix: f64,
    /// Its CLOCK_MONOTONIC, seconds (comparable between processes of one host).
    pub mono: f64,
    /// Its clock minus rank 0's, seconds (0 on rank 0 and before the measurement).
    pub offset_s: f64,
    #[serde(flatten)]
    pub what: What,
}

impl Event {
    /// The event's time on rank 0's clock.
    pub fn unix0(&self) -> f64 {
        self.unix - self.offset_s
    }
}

/// What happened.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum What {
    /// MPI is up and the clocks are measured.
    Start {
        world_size: usize,
        /// Round trip of the ping-pong sample the offset came from.
        clock_rtt_s: f64,
        resume: bool,
    },
    /// The resolved fault (rank 0).
    FaultPlan {
        fault: String,
        /// Ranks that will inject it.
        ranks: Vec<usize>,
        step: u64,
        slow_factor: f64,
        description: String,
    },
    /// The checkpoint restored (rank 0); None: nothing to resume from.
    Restored {
        step: Option<u64>,
        restore_s: f64,
        /// Checkpoints skipped, with why.
        skipped: Vec<String>,
    },
    /// The first step of this run completed (rank 0).
    FirstStep { step: u64 },
    /// This rank injects its fault now (written and flushed before acting).
    Inject {
        fault: String,
        step: u64,
        detail: String,
    },
    /// Rank 0 (or a rank waiting for rank 0) gave up at a step's check-in.
    CheckinTimeout {
        step: u64,
        waited_s: f64,
        /// Ranks that did not arrive.
        missing: Vec<usize>,
        line: String,
    },
    /// The watchdog ended the job.
    Watchdog { line: String },
    /// Peers this rank has not heard a heartbeat from for a while (not an end yet).
    Silent { ranks: Vec<usize>, line: String },
    /// Rank 0 found a straggler.
    Straggler {
        step: u64,
        straggler: usize,
        straggler_host: String,
        factor: f64,
        its_s: f64,
        others_s: f64,
        line: String,
    },
    /// The run reached its end (every rank).
    Finished { last_step: u64 },
}

/// Where a run's event files are.
pub fn dir(out: &Path) -> PathBuf {
    out.join("events")
}

pub fn file_name(rank: usize) -> String {
    format!("rank-{rank:05}.jsonl")
}

/// CLOCK_MONOTONIC in seconds.
pub fn mono_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall clock in unix seconds.
pub fn unix_now() -> f64 {
    crate::watchdog::unix_seconds(std::time::SystemTime::now())
}

/// This rank's events file (a no-op without `--out`).
pub struct EventLog {
    file: Mutex<Option<Jsonl>>,
    rank: usize,
    host: String,
    pid: u32,
    offset_s: Mutex<f64>,
}

impl EventLog {
    /// Open `OUT/events/rank-NNNNN.jsonl` (None: no file), emptied first unless
    /// `append` (a resumed run into the same --out continues its file).
    pub fn open(out: Option<&Path>, rank: usize, host: &str, append: bool) -> Result<EventLog> {
        let file = match out {
            None => None,
            Some(out) => {
                let d = dir(out);
                std::fs::create_dir_all(&d)
                    .map_err(|e| anyhow::anyhow!("--out: cannot create {}: {e}", d.display()))?;
                let path = d.join(file_name(rank));
                if !append {
                    let _ = std::fs::remove_file(&path);
                }
                Some(Jsonl::open(&path)?)
            }
        };
        Ok(EventLog {
            file: Mutex::new(file),
            rank,
            host: host.to_string(),
            pid: std::process::id(),
            offset_s: Mutex::new(0.0),
        })
    }

    pub fn set_offset(&self, offset_s: f64) {
        if let Ok(mut o) = self.offset_s.lock() {
            *o = offset_s;
        }
    }

    pub fn offset(&self) -> f64 {
        self.offset_s.lock().map(|o| *o).unwrap_or(0.0)
    }

    /// Append `what` now (best effort: a full disk must not end the training).
    pub fn log(&self, what: What) {
        let event = Event {
            schema_version: SCHEMA_VERSION,
            rank: self.rank,
            host: self.host.clone(),
            pid: self.pid,
            unix: unix_now(),
            mono: mono_now(),
            offset_s: self.offset(),
            what,
        };
        let mut guard = match self.file.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(f) = guard.as_mut() {
            if let Err(e) = f.append(&event) {
                eprintln!("burnin: warning: {e:#}");
            }
        }
    }
}

/// Every event of a run's event files, in file (rank) order then line order. Lines
/// that do not parse (a write cut by a kill) are skipped.
pub fn read_all(out: &Path) -> Vec<Event> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir(out))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Event>(l).ok()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_cut_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(Some(dir.path()), 3, "node1", false).unwrap();
        log.set_offset(0.25);
        log.log(What::Inject {
            fault: "kill".into(),
            step: 7,
            detail: "SIGKILL".into(),
        });
        log.log(What::Restored {
            step: None,
            restore_s: 0.1,
            skipped: vec![],
        });
        let path = super::dir(dir.path()).join(file_name(3));
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"event\":\"inject\""), "{text}");
        text.push_str("{\"schema_version\":1,\"rank\":3,\"ho");
        std::fs::write(&path, text).unwrap();
        let all = read_all(dir.path());
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].rank, 3);
        assert_eq!(all[0].host, "node1");
        assert!((all[0].unix0() - (all[0].unix - 0.25)).abs() < 1e-9);
        assert!(matches!(all[0].what, What::Inject { step: 7, .. }));
        assert!(matches!(all[1].what, What::Restored { step: None, .. }));
        assert!(mono_now() > 0.0);
    }
}
