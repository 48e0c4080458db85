//! The MPI world: bootstrap, node map, sub-communicators, and helpers to move small
//! serde values between ranks.
//!
//! Node identity comes from `MPI_Comm_split_type(SHARED)`: ranks that can share memory
//! are one node, whatever their hostnames say. Hostnames are all-gathered only to name
//! the nodes. Nodes are numbered by their lowest world rank, so with the usual
//! block mapping (ranks 0..K-1 on the first host) node i holds ranks iK..iK+K-1.
use crate::error::Agreed;
use crate::kinds::Node;
use anyhow::{anyhow, bail, Context, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use mpi::traits::Root;
use mpi::Threading;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The job as every rank sees it after bootstrap.
pub struct World {
    // Dropping the universe finalizes MPI, so it lives exactly as long as the World.
    _universe: Universe,
    pub comm: SimpleCommunicator,
    pub rank: usize,
    pub size: usize,
    pub host: String,
    /// Index of this rank's node in `nodes`.
    pub node: usize,
    /// This rank's position among the ranks of its node (picks the GPU).
    pub local_rank: usize,
    pub local_size: usize,
    pub nodes: Vec<Node>,
    /// Node index of every world rank.
    pub node_of: Vec<usize>,
    /// Whether MPI granted `MPI_THREAD_MULTIPLE` (the watchdog may then call MPI_Abort).
    pub thread_multiple: bool,
}

/// The running process's hostname.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates on success
    // and we bound the read by the buffer length anyway.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Build the node map from what every rank reported: (hostname, lowest world rank on
/// its shared-memory node, local rank). Pure, so it is unit-tested without MPI.
pub fn node_map(reports: &[(String, usize, usize)]) -> (Vec<Node>, Vec<usize>) {
    let mut leaders: Vec<usize> = reports.iter().map(|r| r.1).collect();
    leaders.sort_unstable();
    leaders.dedup();
    let mut nodes: Vec<Node> = leaders
        .iter()
        .enumerate()
        .map(|(index, &leader)| Node {
            index,
            host: reports[leader].0.clone(),
            ranks: Vec::new(),
        })
        .collect();
    let mut node_of = vec![0; reports.len()];
    let mut members: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
    for (rank, (_, leader, local)) in reports.iter().enumerate() {
        let idx = leaders.binary_search(leader).unwrap_or(0);
        node_of[rank] = idx;
        members[idx].push((*local, rank));
    }
    for (node, mut m) in nodes.iter_mut().zip(members) {
        m.sort_unstable();
        node.ranks = m.into_iter().map(|(_, r)| r).collect();
    }
    (nodes, node_of)
}

impl World {
    /// Initialise MPI (also works without mpirun: a singleton of one rank) and
    /// discover the node map.
    pub fn init() -> Result<World> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| anyhow!("MPI was already initialised"))?;
        let comm = universe.world();
        let rank = comm.rank() as usize;
        let size = comm.size() as usize;
        let host = hostname();
        let shared = comm.split_shared(comm.rank());
        let local_rank = shared.rank() as usize;
        let local_size = shared.size() as usize;
        // Lowest world rank on my shared-memory node = its leader.
        let mut leader = rank as i32;
        shared.broadcast_into_root0(&mut leader);
        let mut world = World {
            _universe: universe,
            comm,
            rank,
            size,
            host: host.clone(),
            node: 0,
            local_rank,
            local_size,
            nodes: Vec::new(),
            node_of: Vec::new(),
            thread_multiple: threading == Threading::Multiple,
        };
        let reports: Vec<(String, usize, usize)> =
            world.all_gather_json(&(host, leader as usize, local_rank))?;
        let (nodes, node_of) = node_map(&reports);
        world.node = node_of[rank];
        world.nodes = nodes;
        world.node_of = node_of;
        Ok(world)
    }

    /// Host of a world rank.
    pub fn host_of(&self, rank: usize) -> &str {
        &self.nodes[self.node_of[rank]].host
    }

    /// `rank R (host)` for messages.
    pub fn describe_rank(&self, rank: usize) -> String {
        format!("rank {rank} ({})", self.host_of(rank))
    }

    /// Every rank's bytes, in rank order, on every rank.
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        all_gather_bytes(&self.comm, mine)
    }

    /// Every rank's value, in rank order, on every rank.
    pub fn all_gather_json<T: Serialize + DeserializeOwned>(&self, mine: &T) -> Result<Vec<T>> {
        all_gather_json(&self.comm, mine)
    }

    /// Every rank's value on rank 0 (None elsewhere).
    pub fn gather_json<T: Serialize + DeserializeOwned>(&self, mine: &T) -> Result<Option<Vec<T>>> {
        let bytes = serde_json::to_vec(mine)?;
        let root = self.comm.process_at_rank(0);
        let len = bytes.len() as i32;
        if self.rank == 0 {
            let mut lens = vec![0i32; self.size];
            root.gather_into_root(&len, &mut lens[..]);
            let displs = displacements(&lens);
            let mut all = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
            {
                let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
                root.gather_varcount_into_root(&bytes[..], &mut part);
            }
            let mut out = Vec::with_capacity(self.size);
            for (r, (&d, &l)) in displs.iter().zip(&lens).enumerate() {
                let slice = &all[d as usize..(d + l) as usize];
                out.push(
                    serde_json::from_slice(slice)
                        .with_context(|| format!("decoding what rank {r} sent"))?,
                );
            }
            Ok(Some(out))
        } else {
            root.gather_into(&len);
            root.gather_varcount_into(&bytes[..]);
            Ok(None)
        }
    }

    /// Rank 0's value on every rank.
    pub fn broadcast_json<T: Serialize + DeserializeOwned>(&self, value: Option<&T>) -> Result<T> {
        let root = self.comm.process_at_rank(0);
        let mut bytes = match value {
            Some(v) if self.rank == 0 => serde_json::to_vec(v)?,
            _ => Vec::new(),
        };
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Rank 0 does `work` (e.g. opens `--out`); every rank then learns whether that
    /// worked, so a failure is one agreed error on every rank ([`Agreed`], rank 0's
    /// message). Rank 0's value on rank 0, None on the others.
    pub fn on_rank0_agreed<T>(&self, work: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
        let mut value = None;
        let mut problem: Option<String> = None;
        if self.rank == 0 {
            match work() {
                Ok(v) => value = Some(v),
                Err(e) => problem = Some(format!("{e:#}")),
            }
        }
        let problem: Option<String> = self.broadcast_json(Some(&problem))?;
        if let Some(p) = problem {
            bail!(Agreed(p));
        }
        Ok(value)
    }

    /// Every rank's `mine`, in rank order, on every rank; a gather that failed leaves
    /// one line saying so (for records such as the provenance, which must not fail a run).
    pub fn all_gather_text(&self, mine: &str) -> Vec<String> {
        self.all_gather_json(&mine.to_string())
            .unwrap_or_else(|e| vec![format!("(not gathered: {e:#})")])
    }

    /// Whether every rank passed `ok`; every rank learns which ranks did not.
    pub fn failed_ranks(&self, ok: bool) -> Vec<usize> {
        let mut flags = vec![0u8; self.size];
        self.comm.all_gather_into(&(ok as u8), &mut flags[..]);
        flags
            .iter()
            .enumerate()
            .filter(|(_, &f)| f == 0)
            .map(|(r, _)| r)
            .collect()
    }

    /// Refuse to start unless every rank was given the same configuration. The
    /// configuration is all-gathered as JSON and, on a mismatch, the message names the
    /// ranks and the fields that differ from rank 0's.
    pub fn agree_on_config(&self, config: &serde_json::Value) -> Result<()> {
        let all: Vec<serde_json::Value> = self.all_gather_json(config)?;
        match config_disagreement(&all, |r| self.describe_rank(r)) {
            None => Ok(()),
            Some(msg) => Err(Agreed(msg).into()),
        }
    }

    /// A communicator over the ranks that pass the same `color` (None: not a member).
    /// Collective over the world: every rank must call it.
    pub fn split(&self, color: Option<u32>, key: i32) -> Option<SimpleCommunicator> {
        let color = match color {
            Some(c) => Color::with_value(c as i32),
            None => Color::undefined(),
        };
        self.comm.split_by_color_with_key(color, key)
    }

    /// A barrier that waits without spinning (MPI_Ibarrier polled with short sleeps),
    /// for ranks that sit out a round while others measure: a spinning MPI barrier
    /// would steal the CPU the measuring ranks need on an oversubscribed host.
    pub fn quiet_barrier(&self) {
        let req = self.comm.immediate_barrier();
        let mut req = Some(req);
        while let Some(r) = req.take() {
            match r.test() {
                Ok(_) => {}
                Err(r) => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    req = Some(r);
                }
            }
        }
    }

    /// End the whole job now (every rank) with `code`.
    pub fn abort(&self, code: i32) -> ! {
        abort_world(code)
    }
}

/// How long `MPI_Abort` may take before the rank ends itself: Open MPI's abort tells
/// the local daemon and then calls exit(3), whose handlers can block on a lock another
/// thread holds; the launcher ends the job only once this process is gone (a run in
/// CI waited 90 s on an aborted rank that never exited).
pub const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// `MPI_Abort(MPI_COMM_WORLD, code)`, with a guard thread that `_exit`s with `code`
/// after [`ABORT_GRACE`] should the abort not end the process. Safe to call from any
/// thread once MPI is initialised with `MPI_THREAD_MULTIPLE`, or from the main thread.
pub fn abort_world(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let _ = std::thread::Builder::new()
        .name("burnin-abort".into())
        .spawn(move || {
            std::thread::sleep(ABORT_GRACE);
            // SAFETY: _exit ends the process without running handlers or destructors,
            // which is the intent: the abort is stuck in one of them.
            unsafe { libc::_exit(code) }
        });
    // SAFETY: MPI is initialised (a World exists, or the watchdog was started after it).
    unsafe {
        mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
    }
    // SAFETY: as above; MPI_Abort returned, which it should not.
    unsafe { libc::_exit(code) }
}

/// Broadcast from local rank 0 of `comm`.
trait BroadcastRoot0 {
    fn broadcast_into_root0(&self, v: &mut i32);
}
impl BroadcastRoot0 for SimpleCommunicator {
    fn broadcast_into_root0(&self, v: &mut i32) {
        self.process_at_rank(0).broadcast_into(v);
    }
}

fn displacements(lens: &[i32]) -> Vec<i32> {
    lens.iter()
        .scan(0i32, |acc, &l| {
            let d = *acc;
            *acc += l;
            Some(d)
        })
        .collect()
}

/// Every member's bytes, in rank order, on every member of `comm`.
pub fn all_gather_bytes<C: Communicator>(comm: &C, mine: &[u8]) -> Vec<Vec<u8>> {
    let n = comm.size() as usize;
    let mut lens = vec![0i32; n];
    comm.all_gather_into(&(mine.len() as i32), &mut lens[..]);
    let displs = displacements(&lens);
    let mut all = vec![0u8; lens.iter().map(|&l| l as usize).sum()];
    {
        let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
        comm.all_gather_varcount_into(mine, &mut part);
    }
    displs
        .iter()
        .zip(&lens)
        .map(|(&d, &l)| all[d as usize..(d + l) as usize].to_vec())
        .collect()
}

/// Every member's value, in rank order, on every member of `comm`.
pub fn all_gather_json<C: Communicator, T: Serialize + DeserializeOwned>(
    comm: &C,
    mine: &T,
) -> Result<Vec<T>> {
    let bytes = serde_json::to_vec(mine)?;
    all_gather_bytes(comm, &bytes)
        .iter()
        .enumerate()
        .map(|(r, b)| {
            serde_json::from_slice(b).with_context(|| format!("decoding what rank {r} sent"))
        })
        .collect()
}

/// None when all configurations equal rank 0's; else a message naming each
/// disagreeing rank and the fields (dotted paths) where it differs.
pub fn config_disagreement(
    all: &[serde_json::Value],
    name: impl Fn(usize) -> String,
) -> Option<String> {
    let first = all.first()?;
    let mut parts = Vec::new();
    for (r, cfg) in all.iter().enumerate().skip(1) {
        if cfg == first {
            continue;
        }
        let mut diffs = Vec::new();
        diff_values("", first, cfg, &mut diffs);
        let shown: Vec<String> = diffs.iter().take(4).cloned().collect();
        parts.push(format!(
            "{} differs from rank 0 in {}",
            name(r),
            shown.join(", ")
        ));
    }
    if parts.is_empty() {
        None
    } else {
        Some(format!(
            "ranks were started with different configurations (give every rank the same flags): {}",
            parts.join("; ")
        ))
    }
}

fn diff_values(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let null = Value::Null;
                diff_values(
                    &p,
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("{path} (rank 0: {a}, here: {b})")),
        _ => {}
    }
}

/// Fail unless `cond`, as an error every rank reaches together.
pub fn ensure_agreed(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        bail!(Agreed(msg()))
    }
}

/// The MPI library's name and version, one line (Open MPI's first line up to its
/// first comma; whitespace runs, such as MPICH's tab, become one space).
pub fn mpi_version() -> String {
    let text = mpi::environment::library_version().unwrap_or_default();
    let first = text.lines().next().unwrap_or("");
    let first = first.split(',').next().unwrap_or("");
    first.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn node_map_groups_by_shared_memory_leader() {
        let reports = vec![
            ("a".to_string(), 0, 0),
            ("a".to_string(), 0, 1),
            ("b".to_string(), 2, 0),
            ("b".to_string(), 2, 1),
        ];
        let (nodes, node_of) = node_map(&reports);
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].host, "b");
        assert_eq!(nodes[1].ranks, vec![2, 3]);
        assert_eq!(node_of, vec![0, 0, 1, 1]);
    }

    #[test]
    fn node_map_orders_members_by_local_rank() {
        // Round-robin mapping: ranks 0,2 on host a, 1,3 on host b.
        let reports = vec![
            ("a".to_string(), 0, 0),
            ("b".to_string(), 1, 0),
            ("a".to_string(), 0, 1),
            ("b".to_string(), 1, 1),
        ];
        let (nodes, node_of) = node_map(&reports);
        assert_eq!(nodes[0].ranks, vec![0, 2]);
        assert_eq!(nodes[1].ranks, vec![1, 3]);
        assert_eq!(node_of, vec![0, 1, 0, 1]);
    }

    #[test]
    fn disagreement_names_rank_and_field() {
        let a = json!({"command": {"Sweep": {"min_bytes": 1024, "op": "sum"}}});
        let b = json!({"command": {"Sweep": {"min_bytes": 2048, "op": "sum"}}});
        assert!(config_disagreement(&[a.clone(), a.clone()], |r| r.to_string()).is_none());
        let msg = config_disagreement(&[a.clone(), a, b], |r| format!("rank {r}")).unwrap();
        assert!(msg.contains("rank 2 differs"), "{msg}");
        assert!(
            msg.contains("command.Sweep.min_bytes (rank 0: 1024, here: 2048)"),
            "{msg}"
        );
        assert!(!msg.contains("rank 1 differs"), "{msg}");
    }
}
