//! The per-step check-in: how a survivor can say *which* rank is hung.
//!
//! A rank blocked in `MPI_Allreduce` cannot tell a hung peer from a slow one, nor which
//! peer it is: the collective gives no partial answer, and the watchdog can only say
//! "I waited N s in this all-reduce". So before each step's gradient exchange every
//! rank checks in with rank 0 by non-blocking point-to-point messages polled against a
//! deadline:
//!
//! - every other rank `MPI_Isend`s its step number to rank 0 and `MPI_Irecv`s a release;
//! - rank 0 posts one `MPI_Irecv` per rank and polls them with `MPI_Test`: the ranks
//!   whose message has not arrived by the deadline are exactly the missing ones. It
//!   names them (with their hosts, grouped by node, so a lost node or cut link reads
//!   as "every rank of node2"), writes the line to its events JSONL and ends the job;
//! - when all have arrived rank 0 releases everyone; a rank that is not released by a
//!   longer deadline ([`super::deadline::follower`]) says that rank 0 itself is
//!   missing — so a hung rank 0 is named too.
//!
//! Why not the alternatives: an `MPI_Ibarrier` (or a non-blocking all-gather) polled
//! with a deadline never hangs either, but its result is all-or-nothing — on expiry no
//! rank knows who did not arrive. Heartbeat files in the output directory need a
//! shared filesystem and still show a rank behind a cut link as alive (it keeps
//! writing, it just cannot talk). Watching stdout progress lines only works in the
//! supervisor. Point-to-point with rank 0 costs 2(n-1) eight-byte messages per step
//! (n−1 of them into rank 0), negligible next to a gradient all-reduce, and it runs on
//! a duplicated communicator, so it never matches another message.
//!
//! The check-in's `unsafe` is in this file (`CheckIn`'s rounds and the MPI calls they
//! make); its invariants are written there.
use crate::kinds::Node;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use std::ffi::c_void;
use std::time::{Duration, Instant};

const TAG_ARRIVE: i32 = 0x0c41;
const TAG_RELEASE: i32 = 0x0c42;

/// Why a check-in gave up.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    pub step: u64,
    pub waited: Duration,
    /// Ranks that did not arrive (rank 0's view), or `[0]` (a follower's view).
    pub missing: Vec<usize>,
    /// Whether this is rank 0's view (it knows who is missing).
    pub from_root: bool,
    /// Step each missing rank last checked in at (rank 0's view; None: never).
    pub last_seen: Vec<Option<u64>>,
}

/// The check-in of one rank over its own duplicate of the world communicator.
pub struct CheckIn {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    // Memory MPI reads or writes while a request is pending. When a check-in gives up,
    // requests stay pending (the process is about to end), so these live for the rest
    // of the process: leaked on purpose, a few bytes per rank, once.
    inbox: &'static mut [u64],
    outbox: &'static mut [u64],
    requests: &'static mut [ffi::MPI_Request],
    last_seen: Vec<Option<u64>>,
    broken: Option<Stall>,
}

impl CheckIn {
    /// Over `comm` (a duplicate of the world: no other message can match ours).
    pub fn new(comm: SimpleCommunicator) -> CheckIn {
        let size = comm.size() as usize;
        let rank = comm.rank() as usize;
        // SAFETY: reading rsmpi's extern constant, initialised by the C library.
        let null = unsafe { ffi::RSMPI_REQUEST_NULL };
        CheckIn {
            comm,
            rank,
            size,
            inbox: Box::leak(vec![0u64; size.max(1)].into_boxed_slice()),
            outbox: Box::leak(vec![0u64; size.max(1)].into_boxed_slice()),
            requests: Box::leak(vec![null; 2 * size.max(1)].into_boxed_slice()),
            last_seen: vec![None; size],
            broken: None,
        }
    }

    pub fn communicator(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Check in for `step`: returns how long this rank waited, or why it gave up
    /// after `deadline` (rank 0) / [`super::deadline::follower`]`(deadline)` (the
    /// others). After a stall the caller ends the job; a later call repeats the stall.
    pub fn check_in(&mut self, step: u64, deadline: Duration) -> Result<Duration, Stall> {
        if let Some(s) = &self.broken {
            return Err(s.clone());
        }
        if self.size < 2 {
            return Ok(Duration::ZERO);
        }
        let t0 = Instant::now();
        let mpi = Raw::new(self.comm.as_raw());
        let round = if self.rank == 0 {
            self.gather(&mpi, step, t0, deadline)
                .and_then(|()| self.release(&mpi, step, t0, deadline))
        } else {
            self.arrive(&mpi, step, t0, super::deadline::follower(deadline))
        };
        match round {
            Ok(()) => Ok(t0.elapsed()),
            Err(stall) => {
                self.broken = Some(stall.clone());
                Err(stall)
            }
        }
    }

    /// Rank 0: wait until every rank arrived, or name the ranks that did not.
    fn gather(&mut self, mpi: &Raw, step: u64, t0: Instant, limit: Duration) -> Result<(), Stall> {
        let n = self.size;
        let reqs = self.requests.as_mut_ptr();
        for r in 1..n {
            mpi.post(false, &mut self.inbox[r], r, TAG_ARRIVE, unsafe {
                reqs.add(r)
            });
        }
        let mut arrived = vec![false; n];
        arrived[0] = true;
        let mut poll = Poll::new();
        loop {
            for (r, got) in arrived.iter_mut().enumerate().skip(1) {
                // SAFETY: r < n <= requests.len() / 2.
                if !*got && mpi.test(unsafe { reqs.add(r) }) {
                    *got = true;
                    self.last_seen[r] = Some(self.inbox[r]);
                }
            }
            if arrived.iter().all(|&a| a) {
                return Ok(());
            }
            if t0.elapsed() >= limit {
                let missing: Vec<usize> = (0..n).filter(|&r| !arrived[r]).collect();
                return Err(Stall {
                    step,
                    waited: t0.elapsed(),
                    last_seen: missing.iter().map(|&r| self.last_seen[r]).collect(),
                    missing,
                    from_root: true,
                });
            }
            poll.wait();
        }
    }

    /// Rank 0, once all arrived: release every rank.
    fn release(&mut self, mpi: &Raw, step: u64, t0: Instant, limit: Duration) -> Result<(), Stall> {
        let n = self.size;
        let reqs = self.requests.as_mut_ptr();
        for r in 1..n {
            self.outbox[r] = step;
            mpi.post(true, &mut self.outbox[r], r, TAG_RELEASE, unsafe {
                reqs.add(n + r)
            });
        }
        let mut poll = Poll::new();
        loop {
            // An eager 8-byte send completes locally; bound it all the same.
            let pending = (1..n)
                .filter(|&r| !mpi.test(unsafe { reqs.add(n + r) }))
                .count();
            if pending == 0 {
                return Ok(());
            }
            if t0.elapsed() >= limit {
                return Err(Stall {
                    step,
                    waited: t0.elapsed(),
                    missing: Vec::new(),
                    from_root: true,
                    last_seen: Vec::new(),
                });
            }
            poll.wait();
        }
    }

    /// Every other rank: arrive at rank 0 and wait for its release.
    fn arrive(&mut self, mpi: &Raw, step: u64, t0: Instant, limit: Duration) -> Result<(), Stall> {
        let reqs = self.requests.as_mut_ptr();
        self.outbox[0] = step;
        mpi.post(true, &mut self.outbox[0], 0, TAG_ARRIVE, reqs);
        mpi.post(false, &mut self.inbox[0], 0, TAG_RELEASE, unsafe {
            reqs.add(1)
        });
        let (mut sent, mut released) = (false, false);
        let mut poll = Poll::new();
        loop {
            sent = sent || mpi.test(reqs);
            released = released || mpi.test(unsafe { reqs.add(1) });
            if sent && released {
                return Ok(());
            }
            if t0.elapsed() >= limit {
                return Err(Stall {
                    step,
                    waited: t0.elapsed(),
                    missing: vec![0],
                    from_root: false,
                    last_seen: vec![None],
                });
            }
            poll.wait();
        }
    }
}

/// The MPI calls of a check-in.
///
/// SAFETY (every MPI call of a check-in): each request slot is used for one operation
/// at a time — posted by a round, then only tested until it completes (MPI resets it
/// to MPI_REQUEST_NULL) or the check-in gives up, after which `broken` stops any
/// further use. The buffers handed to MPI are one u64 each inside `inbox` and
/// `outbox`, which are 'static (leaked) and not touched by Rust while their request is
/// pending: `outbox[r]` is written before its Isend is posted and `inbox[r]` is read
/// only after its request completed. Counts are 1 element of MPI_UINT64_T; ranks are
/// < size of `comm`, a live communicator owned by the `CheckIn`.
struct Raw {
    comm: ffi::MPI_Comm,
    u64_t: ffi::MPI_Datatype,
    ignore: *mut ffi::MPI_Status,
}

impl Raw {
    fn new(comm: ffi::MPI_Comm) -> Raw {
        // SAFETY: reading rsmpi's extern constants, initialised by the C library.
        let (u64_t, ignore) = unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_STATUS_IGNORE) };
        Raw {
            comm,
            u64_t,
            ignore,
        }
    }

    /// Post a send (`isend`) or a receive of the u64 at `buf` into slot `req`.
    fn post(&self, isend: bool, buf: *mut u64, peer: usize, tag: i32, req: *mut ffi::MPI_Request) {
        // SAFETY: see the type's comment.
        unsafe {
            if isend {
                ffi::MPI_Isend(
                    buf.cast::<c_void>().cast_const(),
                    1,
                    self.u64_t,
                    peer as i32,
                    tag,
                    self.comm,
                    req,
                );
            } else {
                ffi::MPI_Irecv(
                    buf.cast::<c_void>(),
                    1,
                    self.u64_t,
                    peer as i32,
                    tag,
                    self.comm,
                    req,
                );
            }
        }
    }

    /// Whether the request in slot `req` (of `requests`) completed.
    fn test(&self, req: *mut ffi::MPI_Request) -> bool {
        let mut flag: i32 = 0;
        // SAFETY: see the type's comment.
        unsafe {
            ffi::MPI_Test(req, &mut flag, self.ignore);
        }
        flag != 0
    }
}

/// Polling pace: a few quick tests, then sleeps growing to 1 ms, so waiting ranks
/// leave the CPU to the ranks still computing (oversubscribed hosts).
struct Poll(u32);

impl Poll {
    fn new() -> Poll {
        Poll(0)
    }
    fn wait(&mut self) {
        self.0 += 1;
        match self.0 {
            0..=20 => std::hint::spin_loop(),
            n => std::thread::sleep(Duration::from_micros(
                (25u64 << ((n - 20).min(6))).min(1000),
            )),
        }
    }
}

/// "rank 5 (node2)", "ranks 4, 5 (every rank of node2)", grouped by node, at most 8
/// groups. Pure.
pub fn describe_ranks(ranks: &[usize], nodes: &[Node], node_of: &[usize]) -> String {
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &r in ranks {
        let node = node_of.get(r).copied().unwrap_or(usize::MAX);
        match groups.iter_mut().find(|(n, _)| *n == node) {
            Some((_, v)) => v.push(r),
            None => groups.push((node, vec![r])),
        }
    }
    let host = |n: usize| {
        nodes
            .get(n)
            .map(|x| x.host.as_str())
            .unwrap_or("unknown host")
    };
    let mut parts: Vec<String> = Vec::new();
    for (node, rs) in groups.iter().take(8) {
        let whole = nodes.get(*node).is_some_and(|x| x.ranks.len() == rs.len());
        if rs.len() > 1 && whole {
            let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
            parts.push(format!(
                "ranks {} (every rank of {})",
                list.join(", "),
                host(*node)
            ));
        } else {
            parts.extend(rs.iter().map(|r| format!("rank {r} ({})", host(*node))));
        }
    }
    if groups.len() > 8 {
        parts.push(format!("and ranks on {} more nodes", groups.len() - 8));
    }
    parts.join(", ")
}

/// The one line a rank prints when its check-in gives up. Pure.
pub fn stall_line(
    who: &str,
    stall: &Stall,
    before: &str,
    nodes: &[Node],
    node_of: &[usize],
) -> String {
    let waited = stall.waited.as_secs_f64();
    if stall.from_root && stall.missing.is_empty() {
        return format!(
            "burnin: {who} waited {waited:.1} s at the check-in of step {} ({before}) for its releases to be sent; ending the job",
            stall.step
        );
    }
    if stall.from_root {
        let seen: Vec<String> = stall
            .missing
            .iter()
            .zip(&stall.last_seen)
            .map(|(r, s)| match s {
                Some(s) => format!("rank {r} at step {s}"),
                None => format!("rank {r} never"),
            })
            .collect();
        format!(
            "burnin: {who} waited {waited:.1} s at the check-in of step {} ({before}): {} did not arrive (last checked in: {}): hung, dead or cut off; ending the job",
            stall.step,
            describe_ranks(&stall.missing, nodes, node_of),
            seen.join(", ")
        )
    } else {
        format!(
            "burnin: {who} waited {waited:.1} s at the check-in of step {} ({before}): {} did not confirm that every rank arrived: it is hung, dead or cut off (when alive, it names the missing ranks); ending the job",
            stall.step,
            describe_ranks(&[0], nodes, node_of)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> (Vec<Node>, Vec<usize>) {
        let nodes: Vec<Node> = (0..4)
            .map(|i| Node {
                index: i,
                host: format!("node{i}"),
                ranks: vec![2 * i, 2 * i + 1],
            })
            .collect();
        (nodes, vec![0, 0, 1, 1, 2, 2, 3, 3])
    }

    #[test]
    fn missing_ranks_are_named_with_their_hosts_and_whole_nodes() {
        let (nodes, node_of) = cluster();
        assert_eq!(describe_ranks(&[5], &nodes, &node_of), "rank 5 (node2)");
        assert_eq!(
            describe_ranks(&[4, 5], &nodes, &node_of),
            "ranks 4, 5 (every rank of node2)"
        );
        assert_eq!(
            describe_ranks(&[3, 4, 5], &nodes, &node_of),
            "rank 3 (node1), ranks 4, 5 (every rank of node2)"
        );
    }

    #[test]
    fn stall_lines_name_who_waited_where_and_who_is_missing() {
        let (nodes, node_of) = cluster();
        let s = Stall {
            step: 17,
            waited: Duration::from_millis(1040),
            missing: vec![5],
            from_root: true,
            last_seen: vec![Some(16)],
        };
        let l = stall_line(
            "rank 0 (node0)",
            &s,
            "before the gradient all-reduce",
            &nodes,
            &node_of,
        );
        assert!(
            l.starts_with("burnin: rank 0 (node0) waited 1.0 s at the check-in of step 17"),
            "{l}"
        );
        assert!(
            l.contains("rank 5 (node2) did not arrive (last checked in: rank 5 at step 16)"),
            "{l}"
        );
        let f = Stall {
            missing: vec![0],
            from_root: false,
            last_seen: vec![None],
            ..s
        };
        let l = stall_line("rank 3 (node1)", &f, "x", &nodes, &node_of);
        assert!(l.contains("rank 0 (node0) did not confirm"), "{l}");
        assert!(!l.contains('\n'));
    }
}
