//! Heartbeats: who is still there while everyone is blocked in a collective.
//!
//! The check-in (`checkin`) names a missing rank at a step boundary, but a fault can
//! also land in the middle of a step — a link cut while the gradient all-reduce is in
//! flight — and then every rank waits inside the collective, where only the watchdog
//! can end the wait and nothing says who is gone. So each rank runs one small thread
//! that exchanges an 8-byte heartbeat (its current step) with rank 0 every
//! [`PERIOD`] on a communicator of its own, with non-blocking point-to-point calls
//! (`MPI_THREAD_MULTIPLE`; without it there are no heartbeats and the lines say so).
//! Rank 0 knows when it last heard from every rank, the others when they last heard
//! from rank 0; a deadline line then adds "ranks 4, 5 (every rank of node2) silent
//! for 1.2 s: dead or cut off", and a rank that missed its check-in but is still
//! heard from is told apart as alive but not progressing (hung).
//!
//! The thread never blocks: it posts at most one send per peer at a time and tests
//! its receives every [`TICK`]. Its `unsafe` is in this file, with the invariants
//! next to it.
use crate::kinds::Node;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Heartbeat period.
pub const PERIOD: Duration = Duration::from_millis(200);
/// How often the thread looks at its requests.
pub const TICK: Duration = Duration::from_millis(25);
/// A rank not heard from this long is "silent".
pub const SILENT: Duration = Duration::from_millis(750);
/// A peer silent this long is reported at once (a line and an event), before any
/// deadline: the job is not ended for it, but whatever ends the job — a deadline,
/// the launcher losing a daemon — the ranks that went silent are on record.
pub const REPORT_AFTER: Duration = Duration::from_secs(2);
/// The last heartbeat of a rank that ends normally: its silence is not a failure.
const BYE: u64 = u64::MAX;

/// Called by the heartbeat thread with peers newly silent for [`REPORT_AFTER`], and
/// how long.
pub type OnSilent = Box<dyn Fn(&[usize], Duration) + Send>;

const TAG_UP: i32 = 0x0c51;
const TAG_DOWN: i32 = 0x0c52;

/// What rank 0 (or a follower, about rank 0) last heard.
struct Heard {
    started: Instant,
    /// Per peer: when last heard, and the step it reported.
    last: Vec<Option<(Instant, u64)>>,
    /// Peers that said goodbye (ended normally).
    done: Vec<bool>,
}

/// What this rank has heard, shareable with the watchdog thread.
#[derive(Clone)]
pub struct HeartbeatView {
    rank: usize,
    size: usize,
    running: bool,
    heard: Arc<Mutex<Heard>>,
}

/// The heartbeat of one rank.
pub struct Heartbeat {
    view: HeartbeatView,
    step: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    // Freed (MPI_Comm_free on drop) only after the thread has stopped using it.
    _comm: Option<SimpleCommunicator>,
}

/// A raw communicator handle moved to the heartbeat thread.
struct RawComm(ffi::MPI_Comm);
// SAFETY: an MPI communicator handle may be used from any thread when MPI runs with
// MPI_THREAD_MULTIPLE (checked before the thread starts); the owning
// SimpleCommunicator stays in `Heartbeat` and is freed only after the thread joined.
unsafe impl Send for RawComm {}

impl Heartbeat {
    /// Start over `comm` (a duplicate of the world). `thread_multiple`: whether MPI
    /// granted MPI_THREAD_MULTIPLE; without it this is a no-op heartbeat.
    pub fn start(
        comm: SimpleCommunicator,
        thread_multiple: bool,
        on_silent: OnSilent,
    ) -> Heartbeat {
        let rank = comm.rank() as usize;
        let size = comm.size() as usize;
        let heard = Arc::new(Mutex::new(Heard {
            started: Instant::now(),
            last: vec![None; size],
            done: vec![false; size],
        }));
        let step = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut hb = Heartbeat {
            view: HeartbeatView {
                rank,
                size,
                running: false,
                heard: Arc::clone(&heard),
            },
            step: Arc::clone(&step),
            stop: Arc::clone(&stop),
            thread: None,
            _comm: None,
        };
        if !thread_multiple || size < 2 {
            return hb;
        }
        let raw = RawComm(comm.as_raw());
        let spawned = std::thread::Builder::new()
            .name("burnin-heartbeat".into())
            .spawn(move || beat(raw, rank, size, heard, step, stop, on_silent));
        match spawned {
            Ok(h) => {
                hb.thread = Some(h);
                hb.view.running = true;
            }
            Err(e) => eprintln!("burnin: warning: no heartbeat thread ({e})"),
        }
        hb._comm = Some(comm);
        hb
    }

    /// What this rank hears.
    pub fn view(&self) -> &HeartbeatView {
        &self.view
    }

    /// This rank's current step, sent with its heartbeats.
    pub fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
    }

    /// Stop the thread (end of the run).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.thread.take() {
            let t = Instant::now();
            while !h.is_finished() && t.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            } else {
                // Never free a communicator a running thread may still use.
                std::mem::forget(self._comm.take());
            }
        }
    }
}

impl HeartbeatView {
    /// Whether heartbeats run.
    pub fn running(&self) -> bool {
        self.running
    }

    /// Peers this rank hears from (rank 0: all others; the others: rank 0) and how
    /// long ago each was last heard (None: never), with the step it reported.
    pub fn ages(&self) -> Vec<(usize, Option<Duration>, Option<u64>)> {
        let Ok(h) = self.heard.lock() else {
            return Vec::new();
        };
        let peers: Vec<usize> = if self.rank == 0 {
            (1..self.size).collect()
        } else {
            vec![0]
        };
        peers
            .into_iter()
            .filter(|&p| !h.done[p])
            .map(|p| match h.last[p] {
                Some((t, s)) => (p, Some(t.elapsed()), Some(s)),
                None => (p, None, None),
            })
            .collect()
    }

    /// Seconds since the heartbeat started (a peer never heard from is silent this
    /// long).
    fn running_for(&self) -> Duration {
        self.heard
            .lock()
            .map(|h| h.started.elapsed())
            .unwrap_or_default()
    }

    /// Whether `rank` was heard from within [`SILENT`] (None: not known here).
    pub fn alive(&self, rank: usize) -> Option<bool> {
        if !self.running {
            return None;
        }
        self.ages()
            .into_iter()
            .find(|(p, _, _)| *p == rank)
            .map(|(_, age, _)| age.is_some_and(|a| a < SILENT))
    }

    /// "heartbeats: ranks 4, 5 (every rank of node2) silent for >= 1.2 s (dead or cut
    /// off); the other 5 heard within 0.2 s" — for deadline lines.
    pub fn describe(&self, nodes: &[Node], node_of: &[usize]) -> String {
        if !self.running {
            return if self.size < 2 {
                String::new()
            } else {
                "no heartbeats (MPI did not grant MPI_THREAD_MULTIPLE)".into()
            };
        }
        let ages = self.ages();
        let up = self.running_for();
        let silent: Vec<(usize, Duration)> = ages
            .iter()
            .filter_map(|(p, a, _)| match a {
                Some(a) if *a < SILENT => None,
                Some(a) => Some((*p, *a)),
                None => Some((*p, up)),
            })
            .collect();
        let heard: Vec<Duration> = ages
            .iter()
            .filter_map(|(_, a, _)| a.filter(|a| *a < SILENT))
            .collect();
        let mut parts = Vec::new();
        if !silent.is_empty() {
            let ranks: Vec<usize> = silent.iter().map(|x| x.0).collect();
            let least = silent.iter().map(|x| x.1).min().unwrap_or_default();
            parts.push(format!(
                "{} silent for >= {:.1} s (dead or cut off)",
                super::checkin::describe_ranks(&ranks, nodes, node_of),
                least.as_secs_f64()
            ));
        }
        if !heard.is_empty() {
            let worst = heard.iter().max().copied().unwrap_or_default();
            parts.push(if self.rank == 0 {
                format!(
                    "{} other rank(s) heard within {:.1} s",
                    heard.len(),
                    worst.as_secs_f64()
                )
            } else {
                format!(
                    "rank 0 heard {:.1} s ago (it names the missing ranks)",
                    worst.as_secs_f64()
                )
            });
        }
        format!("heartbeats: {}", parts.join("; "))
    }

    /// For a check-in that `missing` did not reach: which of them are alive but not
    /// progressing (heard within [`SILENT`]: hung) and which are silent (dead or cut
    /// off). Empty without heartbeats.
    pub fn classify(&self, missing: &[usize], nodes: &[Node], node_of: &[usize]) -> String {
        if !self.running {
            return String::new();
        }
        let ages = self.ages();
        let age = |r: usize| ages.iter().find(|(p, _, _)| *p == r).and_then(|x| x.1);
        let (alive, mut silent): (Vec<usize>, Vec<usize>) = missing
            .iter()
            .copied()
            .partition(|&r| age(r).is_some_and(|a| a < SILENT));
        // A link cut between two ranks' check-ins: one rank of the node arrived, the
        // other did not, and both have been silent since. Name them together.
        let arrived_then_silent: Vec<usize> = ages
            .iter()
            .filter(|(p, a, _)| !missing.contains(p) && !a.is_some_and(|a| a < SILENT))
            .map(|x| x.0)
            .collect();
        silent.extend(&arrived_then_silent);
        silent.sort_unstable();
        let mut parts = Vec::new();
        if !alive.is_empty() {
            parts.push(format!(
                "{} still sends heartbeats: alive but not progressing (hung)",
                super::checkin::describe_ranks(&alive, nodes, node_of)
            ));
        }
        if !silent.is_empty() {
            let least = silent
                .iter()
                .map(|&r| age(r).unwrap_or_else(|| self.running_for()))
                .min()
                .unwrap_or_default();
            let mut part = format!(
                "{} silent for >= {:.1} s: dead or cut off",
                super::checkin::describe_ranks(&silent, nodes, node_of),
                least.as_secs_f64()
            );
            if !arrived_then_silent.is_empty() {
                part.push_str(&format!(
                    " ({} checked in, then fell silent)",
                    super::checkin::describe_ranks(&arrived_then_silent, nodes, node_of)
                ));
            }
            parts.push(part);
        }
        parts.join("; ")
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The heartbeat thread: listen, send a beat every [`PERIOD`], report peers newly
/// silent, every [`TICK`]; on a normal end, say goodbye and release the requests.
fn beat(
    comm: RawComm,
    rank: usize,
    size: usize,
    heard: Arc<Mutex<Heard>>,
    step: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    on_silent: OnSilent,
) {
    let mut wire = Wire::open(comm.0, rank, size);
    let mut ears = Ears::new(size);
    let mut last_sent: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        wire.listen(&mut ears, &heard);
        if last_sent.is_none_or_elapsed(PERIOD) {
            last_sent = Some(Instant::now());
            wire.send_all(step.load(Ordering::Relaxed));
        }
        if let Some((ranks, least)) = ears.newly_silent(&wire.peers) {
            on_silent(&ranks, least);
        }
        std::thread::sleep(TICK);
    }
    wire.close();
}

/// What the heartbeat thread knows of its peers' silence.
struct Ears {
    started: Instant,
    heard_at: Vec<Option<Instant>>,
    /// Peers that said goodbye.
    done: Vec<bool>,
    /// Peers reported silent since last heard.
    reported: Vec<bool>,
}

impl Ears {
    fn new(size: usize) -> Ears {
        Ears {
            started: Instant::now(),
            heard_at: vec![None; size],
            done: vec![false; size],
            reported: vec![false; size],
        }
    }

    /// Once one peer is silent for REPORT_AFTER, report it with every other peer
    /// silent for SILENT already (a cut node's ranks together, not one by one): the
    /// ranks and the least silence among them, marked reported.
    fn newly_silent(&mut self, peers: &[usize]) -> Option<(Vec<usize>, Duration)> {
        let silent: Vec<(usize, Duration)> = peers
            .iter()
            .filter(|&&p| !self.done[p] && !self.reported[p])
            .map(|&p| (p, self.heard_at[p].unwrap_or(self.started).elapsed()))
            .filter(|(_, age)| *age >= SILENT)
            .collect();
        if !silent.iter().any(|(_, age)| *age >= REPORT_AFTER) {
            return None;
        }
        let ranks: Vec<usize> = silent.iter().map(|x| x.0).collect();
        for &p in &ranks {
            self.reported[p] = true;
        }
        let least = silent.iter().map(|x| x.1).min().unwrap_or_default();
        Some((ranks, least))
    }
}

/// The heartbeat thread's messages: its peers (rank 0: every other rank; the others:
/// rank 0), and the buffers and requests MPI uses while a request is pending — leaked,
/// so they outlive any request left pending when the thread stops (a peer that is
/// gone).
///
/// SAFETY (every MPI call of this type): MPI runs with MPI_THREAD_MULTIPLE; `comm` is
/// a live communicator used by the heartbeat thread only (its owner frees it only
/// after this thread ended). Each request slot holds one operation at a time: a slot
/// is posted only when it is MPI_REQUEST_NULL (never posted, or completed: MPI_Test
/// resets it). Buffers are one u64 of the leaked `inbox`/`outbox`; `outbox[p]` is
/// written only while its send slot is null, `inbox[p]` read only after its receive
/// completed. Peers are ranks of `comm`.
struct Wire {
    comm: ffi::MPI_Comm,
    u64_t: ffi::MPI_Datatype,
    null: ffi::MPI_Request,
    ignore: *mut ffi::MPI_Status,
    peers: Vec<usize>,
    tag_in: i32,
    tag_out: i32,
    inbox: &'static mut [u64],
    outbox: &'static mut [u64],
    rreq: &'static mut [ffi::MPI_Request],
    sreq: &'static mut [ffi::MPI_Request],
}

impl Wire {
    /// The peers' buffers, with a receive posted from each.
    fn open(comm: ffi::MPI_Comm, rank: usize, size: usize) -> Wire {
        // SAFETY: reading rsmpi's extern constants, initialised by the C library.
        let (u64_t, null, ignore) = unsafe {
            (
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_REQUEST_NULL,
                ffi::RSMPI_STATUS_IGNORE,
            )
        };
        let peers: Vec<usize> = if rank == 0 {
            (1..size).collect()
        } else {
            vec![0]
        };
        let (tag_in, tag_out) = if rank == 0 {
            (TAG_UP, TAG_DOWN)
        } else {
            (TAG_DOWN, TAG_UP)
        };
        let mut w = Wire {
            comm,
            u64_t,
            null,
            ignore,
            peers,
            tag_in,
            tag_out,
            inbox: Box::leak(vec![0u64; size].into_boxed_slice()),
            outbox: Box::leak(vec![0u64; size].into_boxed_slice()),
            rreq: Box::leak(vec![null; size].into_boxed_slice()),
            sreq: Box::leak(vec![null; size].into_boxed_slice()),
        };
        for i in 0..w.peers.len() {
            w.post_recv(w.peers[i]);
        }
        w
    }

    /// Whether the request completed (then MPI reset it to MPI_REQUEST_NULL).
    fn test(ignore: *mut ffi::MPI_Status, req: &mut ffi::MPI_Request) -> bool {
        let mut flag = 0;
        // SAFETY: see the type's comment.
        unsafe {
            ffi::MPI_Test(req, &mut flag, ignore);
        }
        flag != 0
    }

    fn post_recv(&mut self, p: usize) {
        let buf: &mut u64 = &mut self.inbox[p];
        // SAFETY: see the type's comment; `rreq[p]` is null here.
        unsafe {
            ffi::MPI_Irecv(
                (buf as *mut u64).cast::<c_void>(),
                1,
                self.u64_t,
                p as i32,
                self.tag_in,
                self.comm,
                &mut self.rreq[p],
            );
        }
    }

    fn post_send(&mut self, p: usize, value: u64) {
        self.outbox[p] = value;
        let buf: &u64 = &self.outbox[p];
        // SAFETY: see the type's comment; `sreq[p]` is null here.
        unsafe {
            ffi::MPI_Isend(
                (buf as *const u64).cast::<c_void>(),
                1,
                self.u64_t,
                p as i32,
                self.tag_out,
                self.comm,
                &mut self.sreq[p],
            );
        }
    }

    /// Take what arrived (noted in `ears` and `heard`, a receive posted again unless
    /// it was a goodbye), and let finished sends go.
    fn listen(&mut self, ears: &mut Ears, heard: &Mutex<Heard>) {
        for i in 0..self.peers.len() {
            let p = self.peers[i];
            if self.rreq[p] != self.null && Wire::test(self.ignore, &mut self.rreq[p]) {
                let now = Instant::now();
                ears.heard_at[p] = Some(now);
                ears.reported[p] = false;
                ears.done[p] = self.inbox[p] == BYE;
                if let Ok(mut h) = heard.lock() {
                    h.last[p] = Some((now, self.inbox[p]));
                    h.done[p] = ears.done[p];
                }
                if !ears.done[p] {
                    self.post_recv(p);
                }
            }
            if self.sreq[p] != self.null {
                Wire::test(self.ignore, &mut self.sreq[p]);
            }
        }
    }

    /// Send `step` to every peer whose previous beat has gone.
    fn send_all(&mut self, step: u64) {
        for i in 0..self.peers.len() {
            let p = self.peers[i];
            if self.sreq[p] == self.null {
                self.post_send(p, step);
            }
        }
    }

    /// A normal end: say goodbye (so that peers do not report this rank silent), then
    /// leave nothing MPI could still write into: cancel the receives, let the sends
    /// finish (eager, 8 bytes) on their own.
    fn close(mut self) {
        let t = Instant::now();
        let half_s = Duration::from_millis(500);
        for i in 0..self.peers.len() {
            let p = self.peers[i];
            while self.sreq[p] != self.null
                && !Wire::test(self.ignore, &mut self.sreq[p])
                && t.elapsed() < half_s
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.sreq[p] == self.null {
                self.post_send(p, BYE);
            }
        }
        let (null, ignore) = (self.null, self.ignore);
        while self
            .peers
            .iter()
            .any(|&p| self.sreq[p] != null && !Wire::test(ignore, &mut self.sreq[p]))
            && t.elapsed() < half_s
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        for &p in &self.peers {
            // SAFETY: see the type's comment; each slot is freed once.
            if self.rreq[p] != null {
                unsafe {
                    ffi::MPI_Cancel(&mut self.rreq[p]);
                    ffi::MPI_Request_free(&mut self.rreq[p]);
                }
            }
            if self.sreq[p] != null {
                unsafe {
                    ffi::MPI_Request_free(&mut self.sreq[p]);
                }
            }
        }
    }
}

trait Elapsed {
    fn is_none_or_elapsed(&self, d: Duration) -> bool;
}
impl Elapsed for Option<Instant> {
    fn is_none_or_elapsed(&self, d: Duration) -> bool {
        self.map_or(true, |t| t.elapsed() >= d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(last_heard_ms_ago: &[Option<u64>]) -> HeartbeatView {
        let now = Instant::now();
        let size = last_heard_ms_ago.len();
        let last = last_heard_ms_ago
            .iter()
            .map(|a| a.map(|ms| (now - Duration::from_millis(ms), 7)))
            .collect();
        HeartbeatView {
            rank: 0,
            size,
            running: true,
            heard: Arc::new(Mutex::new(Heard {
                started: now - Duration::from_secs(30),
                last,
                done: vec![false; size],
            })),
        }
    }

    fn cluster() -> (Vec<Node>, Vec<usize>) {
        let nodes = (0..3)
            .map(|i| Node {
                index: i,
                host: format!("node{i}"),
                ranks: vec![2 * i, 2 * i + 1],
            })
            .collect();
        (nodes, vec![0, 0, 1, 1, 2, 2])
    }

    #[test]
    fn a_cut_node_is_named_whole_even_when_one_of_its_ranks_checked_in_first() {
        let (nodes, node_of) = cluster();
        // rank 4 checked in, then the link of node2 was cut before rank 5 did.
        let v = view(&[
            Some(0),
            Some(100),
            Some(100),
            Some(100),
            Some(2900),
            Some(3200),
        ]);
        let line = v.classify(&[5], &nodes, &node_of);
        assert!(
            line.starts_with("ranks 4, 5 (every rank of node2) silent for >= 2.9 s"),
            "{line}"
        );
        assert!(
            line.ends_with("(rank 4 (node2) checked in, then fell silent)"),
            "{line}"
        );
    }

    #[test]
    fn a_hung_rank_is_alive_and_a_dead_one_silent() {
        let (nodes, node_of) = cluster();
        let v = view(&[
            Some(0),
            Some(100),
            Some(100),
            Some(100),
            Some(100),
            Some(100),
        ]);
        assert_eq!(
            v.classify(&[3], &nodes, &node_of),
            "rank 3 (node1) still sends heartbeats: alive but not progressing (hung)"
        );
        let v = view(&[
            Some(0),
            Some(100),
            Some(100),
            Some(100),
            Some(100),
            Some(3000),
        ]);
        assert_eq!(
            v.classify(&[5], &nodes, &node_of),
            "rank 5 (node2) silent for >= 3.0 s: dead or cut off"
        );
    }
}
