//! Which transports carried the sweep's traffic, per tier: NCCL's own account (its
//! INFO log) on the NCCL backend, Open MPI's (its BTL verbose output) on the MPI one.
//!
//! A busbw number says how fast; this says over what — "inter-node: NET/IB over
//! mlx5_0..mlx5_7 (GPUDirect RDMA)", or the silent fallback that makes a rented IB
//! fabric look like a slow one: "inter-node: NET/Socket over eth0".
//!
//! Shape, and why:
//! - [`prepare`] runs in `main` before MPI starts, while the process has one thread
//!   (setting the environment is only sound then). It asks NCCL for its INFO log in a
//!   file of this process (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH`,
//!   `NCCL_DEBUG_FILE=<out>/nccl-logs/<host>.<pid>.log`) unless the user set
//!   `NCCL_DEBUG` themselves, and Open MPI for its BTL choices
//!   (`OMPI_MCA_btl_base_verbose=40`, `OMPI_MCA_pml_base_verbose=10`), written not to
//!   stderr but to `<out>/mpi-logs/<host>.<pid>.log`: Open MPI sends all of its
//!   `opal_output` stderr output to the descriptor `OPAL_OUTPUT_STDERR_FD` names. A
//!   thread ([`start_forwarder`]) copies the lines of that file that are not verbose
//!   output (Open MPI's warnings and errors) on to the real stderr, so nothing the user
//!   would have seen is hidden.
//! - Verbose output, not `MPI_T` queries: control variables say what was asked for
//!   (`btl = self,vader,tcp`), not what was chosen per peer; the BML's lines do.
//! - After the sweep each rank parses its own files ([`collect`]: no shared
//!   filesystem needed), maps NCCL communicators to tiers (burnin creates them one at
//!   a time, so the n-th communicator in the log is the n-th it created) and node
//!   pairs to intra/inter-node, and rank 0 gathers and summarises ([`build_report`]).
//! - [`judge_nccl_fabric`] is the card criterion: inter-node NCCL traffic went over the
//!   InfiniBand/RoCE the topology declares, on enough adapters, on every host.
use crate::backend::BackendChoice;
use crate::backend::BackendKind;
use crate::kinds::TierKind;
use crate::mpi_log::{self, push_once, MpiLog};
use crate::nccl_log::{self, NcclLog, Transports};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Open MPI verbosity that prints the BML's per-peer choice and the TCP interfaces.
pub const BTL_VERBOSE: &str = "40";
/// Prints the PML selected (ob1 uses BTLs; ucx and cm do not).
pub const PML_VERBOSE: &str = "10";

/// Where one kind of log of this process goes.
#[derive(Clone, Debug, Default)]
struct LogFile {
    path: Option<PathBuf>,
    /// No --out: a file of the temp dir unlinked as soon as it was made (nothing is
    /// left behind however the process ends), read through `/proc/self/fd`.
    temporary: bool,
    /// Why nothing is captured, or how (e.g. the user's own NCCL_DEBUG_FILE).
    note: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Capture {
    mpi: Option<LogFile>,
    nccl: Option<LogFile>,
    /// Variables burnin set, left out of the provenance's environment.
    set: Vec<(String, String)>,
}

static CAPTURE: Mutex<Option<Capture>> = Mutex::new(None);

fn capture() -> Capture {
    CAPTURE
        .lock()
        .map(|c| c.clone().unwrap_or_default())
        .unwrap_or_default()
}

/// Whether `key=value` was set by burnin (not by the user), for provenance.
pub fn set_by_burnin(key: &str, value: &str) -> bool {
    capture().set.iter().any(|(k, v)| k == key && v == value)
}

/// NCCL expands `%h` and `%p` in NCCL_DEBUG_FILE; a literal `%` is `%%`.
fn escape_percent(p: &Path) -> String {
    p.display().to_string().replace('%', "%%")
}

/// NCCL's expansion of NCCL_DEBUG_FILE: `%h` hostname (up to its first dot), `%p`
/// pid, `%%` a percent sign.
pub fn expand_nccl_pattern(pattern: &str, host: &str, pid: u32) -> String {
    let short = host.split('.').next().unwrap_or(host);
    let mut out = String::new();
    let mut it = pattern.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('h') => out.push_str(short),
            Some('p') => out.push_str(&pid.to_string()),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Make this process's log file: `<dir>/<host>.<pid>.log`, or (no `dir`, or it cannot
/// be made) a temp file unlinked at once and named by its descriptor. The file is
/// created here or not at all, never through a symlink planted there (the temp dir is
/// shared). Returns the open file and where to read (and name) it; the error is a
/// note for the report.
fn open_log(
    dir: Option<PathBuf>,
    kind: &str,
    host: &str,
    pid: u32,
) -> Result<(std::fs::File, LogFile), String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let create = |path: &Path| {
        // a stale file of an earlier process with this pid goes first
        let _ = std::fs::remove_file(path);
        std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))
    };
    if let Some(d) = dir.filter(|d| std::fs::create_dir_all(d).is_ok()) {
        let path = d.join(format!("{host}.{pid}.log"));
        let file = create(&path)?;
        let log = LogFile {
            path: Some(path),
            temporary: false,
            note: None,
        };
        return Ok((file, log));
    }
    let path = std::env::temp_dir().join(format!("burnin-{kind}-{pid}.log"));
    let file = create(&path)?;
    let _ = std::fs::remove_file(&path);
    let log = LogFile {
        path: Some(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))),
        temporary: true,
        note: None,
    };
    Ok((file, log))
}

/// `burnin sweep`: turn on the logs that say which transports carry the traffic.
/// Call before MPI starts, while this is the process's only thread; the logs go under
/// `out` (the sweep's `--out`) when given.
pub fn prepare(out: Option<&Path>, backend: BackendChoice) {
    let host = crate::world::hostname();
    let pid = std::process::id();
    let mut cap = Capture::default();
    let sub = |name: &str| out.map(|o| o.join(name));
    if backend != BackendChoice::Nccl {
        cap.mpi = Some(prepare_mpi(sub("mpi-logs"), &host, pid, &mut cap.set));
    }
    if backend != BackendChoice::Mpi {
        cap.nccl = Some(prepare_nccl(sub("nccl-logs"), &host, pid, &mut cap.set));
    }
    if let Ok(mut c) = CAPTURE.lock() {
        *c = Some(cap);
    }
}

fn set(key: &str, value: &str, set: &mut Vec<(String, String)>) {
    std::env::set_var(key, value);
    set.push((key.to_string(), value.to_string()));
}

fn prepare_mpi(
    dir: Option<PathBuf>,
    host: &str,
    pid: u32,
    vars: &mut Vec<(String, String)>,
) -> LogFile {
    for user in ["OMPI_MCA_btl_base_verbose", "OPAL_OUTPUT_STDERR_FD"] {
        if std::env::var_os(user).is_some() {
            return LogFile {
                note: Some(format!(
                    "Open MPI's transports not captured: {user} is set by the user"
                )),
                ..LogFile::default()
            };
        }
    }
    let (file, log) = match open_log(dir, "mpi", host, pid) {
        Ok(x) => x,
        Err(e) => {
            return LogFile {
                note: Some(format!("Open MPI's transports not captured: {e}")),
                ..LogFile::default()
            }
        }
    };
    use std::os::fd::IntoRawFd;
    let fd = file.into_raw_fd();
    // Inherited on purpose: a daemon Open MPI forks (a singleton's orted) inherits
    // OPAL_OUTPUT_STDERR_FD too and must find this file there, not whatever it opens
    // under that number. SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    set("OPAL_OUTPUT_STDERR_FD", &fd.to_string(), vars);
    set("OMPI_MCA_btl_base_verbose", BTL_VERBOSE, vars);
    if std::env::var_os("OMPI_MCA_pml_base_verbose").is_none() {
        set("OMPI_MCA_pml_base_verbose", PML_VERBOSE, vars);
    }
    log
}

fn prepare_nccl(
    dir: Option<PathBuf>,
    host: &str,
    pid: u32,
    vars: &mut Vec<(String, String)>,
) -> LogFile {
    if let Ok(level) = std::env::var("NCCL_DEBUG") {
        // The user's own logging wins; read their file if they named one.
        return match std::env::var("NCCL_DEBUG_FILE") {
            Ok(pattern) => LogFile {
                path: Some(PathBuf::from(expand_nccl_pattern(&pattern, host, pid))),
                temporary: false,
                note: Some(format!(
                    "NCCL_DEBUG={level} and NCCL_DEBUG_FILE set by the user: their files are read{}",
                    if level.eq_ignore_ascii_case("INFO") || level.eq_ignore_ascii_case("TRACE") {
                        ""
                    } else {
                        " (only INFO or TRACE logs say which transport was used)"
                    }
                )),
            },
            Err(_) => LogFile {
                note: Some(format!(
                    "NCCL's transports not captured: NCCL_DEBUG={level} is set by the user without NCCL_DEBUG_FILE (its log goes to stdout)"
                )),
                ..LogFile::default()
            },
        };
    }
    let (file, log) = match open_log(dir, "nccl", host, pid) {
        Ok(x) => x,
        Err(e) => {
            return LogFile {
                note: Some(format!("NCCL's transports not captured: {e}")),
                ..LogFile::default()
            }
        }
    };
    let Some(path) = log.path.clone() else {
        return log;
    };
    // NCCL opens the file by this name when it starts; a temporary one has no other
    // name, so its descriptor stays open for the process's life.
    if log.temporary {
        use std::os::fd::IntoRawFd;
        let _ = file.into_raw_fd();
    }
    set("NCCL_DEBUG", "INFO", vars);
    if std::env::var_os("NCCL_DEBUG_SUBSYS").is_none() {
        set("NCCL_DEBUG_SUBSYS", "INIT,NET,GRAPH", vars);
    }
    set("NCCL_DEBUG_FILE", &escape_percent(&path), vars);
    log
}

/// Copy the lines Open MPI writes into this process's capture file that are not the
/// verbose output burnin asked for on to stderr, as they come (every 100 ms). Call
/// once, after `prepare`; the thread lives as long as the process.
pub fn start_forwarder() {
    let Some(path) = capture().mpi.and_then(|m| m.path) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("burnin-mpi-log".into())
        .spawn(move || forward(&path));
}

fn forward(path: &Path) {
    use std::io::{Read, Write};
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut chunk) {
            Ok(0) | Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            Ok(n) => {
                pending.extend_from_slice(&chunk[..n]);
                while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=nl).collect();
                    let text = String::from_utf8_lossy(&line);
                    if !mpi_log::is_verbose(text.trim_end()) {
                        let _ = std::io::stderr().write_all(&line);
                    }
                }
            }
        }
    }
}

/// One NCCL communicator a rank created, in creation order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommRecord {
    pub tier: TierKind,
    pub group: usize,
    /// World ranks, in communicator-rank order.
    pub members: Vec<usize>,
}

/// One communicator's transports, as the rank that created it saw them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommTransport {
    pub tier: TierKind,
    pub group: usize,
    pub intra: Transports,
    pub inter: Transports,
    pub algorithms: Vec<String>,
}

/// What one rank's NCCL log says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankNccl {
    pub version: Option<String>,
    pub network: Option<String>,
    /// GPUDirect RDMA as NCCL reported it for its adapters.
    pub gdr_enabled: Option<bool>,
    pub nvls_available: Option<bool>,
    /// Per communicator (empty when they could not be matched to tiers).
    pub comms: Vec<CommTransport>,
    /// The whole file (every communicator), for the hosts' summary.
    pub intra: Transports,
    pub inter: Transports,
    pub warnings: Vec<String>,
    /// aws-ofi-nccl's provider ("efa", "cxi").
    #[serde(default)]
    pub ofi_provider: Option<String>,
}

/// What one rank's Open MPI output says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankMpi {
    pub pml: Option<String>,
    pub tcp_interfaces: Vec<String>,
    /// (peer world rank, BTLs used to send to it).
    pub peers: Vec<(usize, Vec<String>)>,
}

/// What one rank found in its own logs (gathered to rank 0).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankTransport {
    pub rank: usize,
    pub host: String,
    /// The file read, on this rank's node.
    pub file: Option<String>,
    /// Why nothing (or not everything) could be read.
    pub notes: Vec<String>,
    pub nccl: Option<RankNccl>,
    pub mpi: Option<RankMpi>,
}

/// The n-th communicator of the log is the n-th burnin created: check that each
/// pair agrees on size and rank. None when they do not line up.
fn align<'a>(
    log: &'a NcclLog,
    records: &[CommRecord],
    me: usize,
) -> Option<Vec<&'a nccl_log::CommLog>> {
    let comms: Vec<&nccl_log::CommLog> = log
        .comms
        .iter()
        .filter(|c| c.started || c.complete)
        .collect();
    if comms.len() != records.len() {
        return None;
    }
    for (c, r) in comms.iter().zip(records) {
        let my_pos = r.members.iter().position(|&m| m == me);
        let size_ok = c.nranks.map_or(true, |n| n == r.members.len());
        let rank_ok = c.rank.map_or(true, |k| Some(k) == my_pos);
        if !(size_ok && rank_ok) {
            return None;
        }
    }
    Some(comms)
}

/// Condense one NCCL log of world rank `me`: per communicator (matched to
/// `records`), classified by the node map.
pub fn rank_nccl(
    log: &NcclLog,
    records: &[CommRecord],
    me: usize,
    node_of: &[usize],
    notes: &mut Vec<String>,
) -> RankNccl {
    let mut out = RankNccl {
        version: log.version.clone(),
        network: log.network.clone(),
        gdr_enabled: log.gdr_enabled(),
        nvls_available: log.nvls_available,
        warnings: log.warnings.iter().take(3).cloned().collect(),
        ofi_provider: log.ofi_provider.clone(),
        ..RankNccl::default()
    };
    match align(log, records, me) {
        Some(comms) => {
            for (c, r) in comms.into_iter().zip(records) {
                let node = |i: usize| r.members.get(i).and_then(|w| node_of.get(*w));
                let same = |a: usize, b: usize| match (node(a), node(b)) {
                    (Some(x), Some(y)) => Some(x == y),
                    _ => None,
                };
                let mut ct = CommTransport {
                    tier: r.tier,
                    group: r.group,
                    algorithms: c.algorithms.clone(),
                    ..CommTransport::default()
                };
                nccl_log::classify(log, c, &same, &mut ct.intra, &mut ct.inter);
                out.intra.merge(&ct.intra);
                out.inter.merge(&ct.inter);
                out.comms.push(ct);
            }
        }
        None => {
            notes.push(format!(
                "rank {me}: the log's {} communicator(s) do not line up with the {} burnin created; transports reported per host only (its network connections counted as inter-node)",
                log.comms.len(),
                records.len()
            ));
            // Without the alignment the node map cannot place the log's ranks: its
            // network connections are counted as inter-node, as the note says.
            let summary = nccl_log::summarize(log);
            out.intra = summary.intra;
            out.inter = summary.inter;
            out.inter.merge(&summary.unknown);
        }
    }
    out
}

/// Condense one rank's Open MPI output.
pub fn rank_mpi(log: &MpiLog) -> RankMpi {
    RankMpi {
        pml: log.pml.clone(),
        tcp_interfaces: log.tcp_interfaces.clone(),
        peers: log.peers.iter().map(|p| (p.peer, p.btls.clone())).collect(),
    }
}

/// After the sweep, on every rank: read this process's log of the backend that ran
/// and condense it.
pub fn collect(
    kind: BackendKind,
    me: usize,
    host: &str,
    node_of: &[usize],
    records: &[CommRecord],
) -> RankTransport {
    let cap = capture();
    let mut out = RankTransport {
        rank: me,
        host: host.to_string(),
        ..RankTransport::default()
    };
    let file = match kind {
        BackendKind::Nccl => cap.nccl,
        BackendKind::Mpi => cap.mpi,
    };
    let Some(file) = file else {
        out.notes
            .push("transports not captured (burnin sweep --no-transport, or --backend names the other backend)".into());
        return out;
    };
    out.notes.extend(file.note.clone());
    let Some(path) = file.path else { return out };
    // a temporary file has no name worth reporting (it is unlinked)
    out.file = (!file.temporary).then(|| path.display().to_string());
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            out.notes
                .push(format!("rank {me}: cannot read {}: {e}", path.display()));
            return out;
        }
    };
    match kind {
        BackendKind::Nccl => {
            let log = nccl_log::parse(&text);
            if log.info_lines == 0 {
                out.notes.push(format!(
                    "rank {me}: {} holds no NCCL INFO line",
                    path.display()
                ));
            }
            out.nccl = Some(rank_nccl(&log, records, me, node_of, &mut out.notes));
        }
        BackendKind::Mpi => {
            let log = mpi_log::parse(&text, Some(std::process::id()));
            out.mpi = Some(rank_mpi(&log));
        }
    }
    out
}

/// After a sweep on the MPI backend: remove the (empty) NCCL log file burnin made in
/// `--out`, and its folder when nothing else is there. (Temporary files are unlinked
/// from the start; the user's own NCCL_DEBUG_FILE is never touched.)
pub fn tidy(kind: BackendKind) {
    if kind != BackendKind::Mpi {
        return;
    }
    if let Some(LogFile {
        path: Some(p),
        temporary: false,
        note: None,
    }) = capture().nccl
    {
        let _ = std::fs::remove_file(&p);
        if let Some(dir) = p.parent() {
            let _ = std::fs::remove_dir(dir); // only when empty
        }
    }
}

/// A tier's groups (world ranks), as planned.
#[derive(Clone, Debug, PartialEq)]
pub struct TierGroups {
    pub tier: TierKind,
    pub groups: Vec<Vec<usize>>,
}

/// One tier's transports, in words.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TierTransport {
    /// The topology tier.
    pub tier: TierKind,
    /// Between ranks of one node; None when the tier has no such pair.
    pub intra_node: Option<String>,
    /// Between nodes; None when the tier has no such pair.
    pub inter_node: Option<String>,
    /// NCCL's detail (NCCL backend only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_intra: Option<Transports>,
    /// NCCL's detail between nodes (NCCL backend only; None when the tier has no such
    /// pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_inter: Option<Transports>,
    /// NCCL algorithm/protocol pairs (with NCCL_DEBUG_SUBSYS=TUNING).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<String>,
}

/// One host's NCCL transports, all tiers together (what the fabric criterion judges).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostTransport {
    /// The host's name.
    pub host: String,
    /// Its ranks (world ranks).
    pub ranks: Vec<usize>,
    /// Ranks whose log was read.
    pub logs: usize,
    /// NCCL version, from the first log that names it ("2.21.5").
    pub version: Option<String>,
    /// NCCL's network, from the first log that names it (`Using network IB`).
    pub network: Option<String>,
    /// GPUDirect RDMA reported enabled (None: not reported, or the logs disagree).
    pub gdr_enabled: Option<bool>,
    /// NVLS multicast support reported available (None: not reported).
    pub nvls_available: Option<bool>,
    /// Transports between ranks of this node, over its logs.
    pub intra: Transports,
    /// Transports to other nodes, over its logs.
    pub inter: Transports,
    /// Network connections whose tier the logs cannot tell (logs read without a
    /// node map whose peers no log places on a host).
    #[serde(default)]
    pub unknown: Transports,
    /// aws-ofi-nccl's provider ("efa"; "cxi" on Slingshot), from the first log that
    /// names it.
    #[serde(default)]
    pub ofi_provider: Option<String>,
}

impl HostTransport {
    /// Add one rank's log: the first version and network named, GPUDirect RDMA when
    /// every log agrees, the transports of all.
    fn add(&mut self, n: &RankNccl) {
        self.logs += 1;
        self.version = self.version.take().or(n.version.clone());
        self.network = self.network.take().or(n.network.clone());
        self.gdr_enabled = match (self.logs, self.gdr_enabled, n.gdr_enabled) {
            (1, _, g) => g,
            (_, Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        };
        self.nvls_available = self.nvls_available.or(n.nvls_available);
        self.intra.merge(&n.intra);
        self.inter.merge(&n.inter);
        self.ofi_provider = self.ofi_provider.take().or(n.ofi_provider.clone());
    }
}

/// The run's transports (run.json's `transport`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TransportReport {
    /// "nccl" or "mpi".
    pub backend: String,
    /// Where it comes from, in words.
    pub source: String,
    /// Per tier, the transports its traffic used.
    pub tiers: Vec<TierTransport>,
    /// NCCL: per host.
    #[serde(default)]
    pub hosts: Vec<HostTransport>,
    /// MPI: PMLs selected (normally one).
    #[serde(default)]
    pub pml: Vec<String>,
    /// Logs missing, not parseable, user settings that took precedence.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Whether a tier has pairs of ranks on one node, and pairs on two: a group with two
/// members on one node has the first, a group spanning two nodes the second.
fn pair_kinds(t: &TierGroups, node_of: &[usize]) -> (bool, bool) {
    let mut same = false;
    let mut cross = false;
    for g in &t.groups {
        let mut nodes: Vec<usize> = g.iter().filter_map(|r| node_of.get(*r).copied()).collect();
        let known = nodes.len();
        nodes.sort_unstable();
        nodes.dedup();
        same |= nodes.len() < known;
        cross |= nodes.len() > 1;
    }
    (same, cross)
}

/// Rank 0: every rank's findings into per-tier lines (and, for NCCL, per host).
pub fn build_report(
    kind: BackendKind,
    ranks: &[RankTransport],
    node_of: &[usize],
    node_hosts: &[String],
    tiers: &[TierGroups],
) -> TransportReport {
    let mut rep = TransportReport {
        backend: kind.to_string(),
        ..TransportReport::default()
    };
    for r in ranks {
        for n in &r.notes {
            push_once(&mut rep.notes, n);
        }
    }
    match kind {
        BackendKind::Nccl => {
            rep.source = "NCCL INFO logs (NCCL_DEBUG=INFO, one file per rank)".into();
            // NCCL's own warnings now go to the files, not the terminal: name them.
            let warned: Vec<String> = ranks
                .iter()
                .filter_map(|r| {
                    let w = r.nccl.as_ref()?.warnings.first()?;
                    Some(format!("rank {} ({}): NCCL WARN {w}", r.rank, r.host))
                })
                .collect();
            let more = warned.len().saturating_sub(8);
            rep.notes.extend(warned.into_iter().take(8));
            if more > 0 {
                rep.notes.push(format!(
                    "NCCL warnings on {more} more rank(s), in their logs"
                ));
            }
            nccl_report(&mut rep, ranks, node_of, node_hosts, tiers);
        }
        BackendKind::Mpi => {
            rep.source = "Open MPI BTL selection (btl_base_verbose, one file per rank)".into();
            mpi_report(&mut rep, ranks, node_of, tiers);
        }
    }
    rep
}

fn nccl_report(
    rep: &mut TransportReport,
    ranks: &[RankTransport],
    node_of: &[usize],
    node_hosts: &[String],
    tiers: &[TierGroups],
) {
    for t in tiers {
        let (same, cross) = pair_kinds(t, node_of);
        let mut intra = Transports::default();
        let mut inter = Transports::default();
        let mut algorithms = Vec::new();
        for c in ranks
            .iter()
            .filter_map(|r| r.nccl.as_ref())
            .flat_map(|n| n.comms.iter())
            .filter(|c| c.tier == t.tier)
        {
            intra.merge(&c.intra);
            inter.merge(&c.inter);
            for a in &c.algorithms {
                push_once(&mut algorithms, a);
            }
        }
        rep.tiers.push(TierTransport {
            tier: t.tier,
            intra_node: same.then(|| intra.describe()),
            inter_node: cross.then(|| inter.describe()),
            nccl_intra: same.then_some(intra),
            nccl_inter: cross.then_some(inter),
            algorithms,
        });
    }
    for (node, host) in node_hosts.iter().enumerate() {
        let mut h = HostTransport {
            host: host.clone(),
            ..HostTransport::default()
        };
        for r in ranks.iter().filter(|r| node_of.get(r.rank) == Some(&node)) {
            h.ranks.push(r.rank);
            if let Some(n) = &r.nccl {
                h.add(n);
            }
        }
        rep.hosts.push(h);
    }
}

/// BTLs seen on one kind of path. Pairs that never talked directly (a ring's
/// non-neighbours on other nodes: Open MPI adds a remote peer at first contact) name
/// no BTL and are not counted.
#[derive(Default)]
struct BtlPaths {
    btls: Vec<String>,
    interfaces: Vec<String>,
}

impl BtlPaths {
    fn describe(&self) -> String {
        if self.btls.is_empty() {
            return "none seen".into();
        }
        let words: Vec<String> = self
            .btls
            .iter()
            .map(|b| mpi_log::btl_words(b, &self.interfaces))
            .collect();
        words.join(", ")
    }
}

fn mpi_report(
    rep: &mut TransportReport,
    ranks: &[RankTransport],
    node_of: &[usize],
    tiers: &[TierGroups],
) {
    let mut by_rank: Vec<Option<&RankMpi>> = Vec::new();
    for r in ranks {
        if by_rank.len() <= r.rank {
            by_rank.resize(r.rank + 1, None);
        }
        by_rank[r.rank] = r.mpi.as_ref();
    }
    for r in ranks.iter().filter_map(|r| r.mpi.as_ref()) {
        if let Some(p) = &r.pml {
            push_once(&mut rep.pml, p);
        }
    }
    if rep.pml.iter().any(|p| p != "ob1") {
        rep.notes.push(format!(
            "PML {}: it does not use Open MPI's BTLs, which are what this records",
            rep.pml.join(", ")
        ));
    }
    for t in tiers {
        let (same, cross) = pair_kinds(t, node_of);
        let mut intra = BtlPaths::default();
        let mut inter = BtlPaths::default();
        for g in &t.groups {
            let members: std::collections::HashSet<usize> = g.iter().copied().collect();
            for &a in g {
                let (Some(m), Some(na)) = (by_rank.get(a).copied().flatten(), node_of.get(a))
                else {
                    continue;
                };
                // The peers `a` sent to that are in its group (a world tier's group
                // is every rank: walk the peers, not the group).
                for (b, btls) in m
                    .peers
                    .iter()
                    .filter(|(b, _)| *b != a && members.contains(b))
                {
                    let Some(nb) = node_of.get(*b) else { continue };
                    let paths = if na == nb { &mut intra } else { &mut inter };
                    for btl in btls {
                        push_once(&mut paths.btls, btl);
                        if btl == "tcp" {
                            for i in &m.tcp_interfaces {
                                push_once(&mut paths.interfaces, i);
                            }
                        }
                    }
                }
            }
        }
        rep.tiers.push(TierTransport {
            tier: t.tier,
            intra_node: same.then(|| intra.describe()),
            inter_node: cross.then(|| inter.describe()),
            ..TierTransport::default()
        });
    }
}

/// A log file's own facts (version, network, GPUDirect RDMA, NVLS, provider), no
/// transports yet.
fn file_facts(log: &NcclLog) -> RankNccl {
    RankNccl {
        version: log.version.clone(),
        network: log.network.clone(),
        gdr_enabled: log.gdr_enabled(),
        nvls_available: log.nvls_available,
        ofi_provider: log.ofi_provider.clone(),
        ..RankNccl::default()
    }
}

/// A report from NCCL log files alone (no tiers: the files do not say which
/// communicator was which), one host per host name of the line prefixes (a file that
/// interleaves several processes gives each its own host). Which ranks share a node
/// comes from the logs themselves: every process's Init line names its rank of a
/// communicator (by commId) and its host; a network connection between ranks that no
/// log places is counted as of unknown tier, never guessed. For logs taken outside
/// burnin, and tests.
pub fn report_from_logs(logs: &[NcclLog]) -> TransportReport {
    let mut rep = TransportReport {
        backend: "nccl".into(),
        source: "NCCL INFO log files".into(),
        ..TransportReport::default()
    };
    // (commId, rank) -> host, over every file.
    let mut placed: HashMap<(String, usize), String> = HashMap::new();
    for log in logs {
        for c in &log.comms {
            if let (Some(id), Some(r), Some(h)) =
                (&c.comm_id, c.rank, c.host.as_ref().or(log.host.as_ref()))
            {
                placed.insert((id.clone(), r), h.clone());
            }
        }
    }
    fn host_entry<'a>(rep: &'a mut TransportReport, host: &str) -> &'a mut HostTransport {
        let at = match rep.hosts.iter().position(|h| h.host == host) {
            Some(p) => p,
            None => {
                rep.hosts.push(HostTransport {
                    host: host.to_string(),
                    ..HostTransport::default()
                });
                rep.hosts.len() - 1
            }
        };
        &mut rep.hosts[at]
    }
    for (i, log) in logs.iter().enumerate() {
        let file_host = log.host.clone().unwrap_or_else(|| "unknown host".into());
        // Each process of the file: its host's transports.
        let mut per_host: Vec<(String, RankNccl, Transports)> = Vec::new();
        for c in &log.comms {
            let host = c.host.clone().unwrap_or_else(|| file_host.clone());
            let k = match per_host.iter().position(|(h, _, _)| *h == host) {
                Some(k) => k,
                None => {
                    per_host.push((host.clone(), file_facts(log), Transports::default()));
                    per_host.len() - 1
                }
            };
            let from_lines = nccl_log::rank_hosts(log, c);
            let where_is = |r: usize| {
                c.comm_id
                    .as_ref()
                    .and_then(|id| placed.get(&(id.clone(), r)))
                    .or_else(|| from_lines.get(&r))
            };
            let same = |a: usize, b: usize| match (where_is(a), where_is(b)) {
                (Some(x), Some(y)) => Some(x == y),
                _ => None,
            };
            let (_, n, unknown) = &mut per_host[k];
            nccl_log::classify_known(log, c, &same, &mut n.intra, &mut n.inter, unknown);
        }
        if per_host.is_empty() {
            per_host.push((file_host.clone(), file_facts(log), Transports::default()));
        }
        for (host, n, unknown) in per_host {
            let h = host_entry(&mut rep, &host);
            h.ranks.push(i);
            h.add(&n);
            h.unknown.merge(&unknown);
        }
    }
    rep
}

/// The report as `# ` lines for the sweep's stdout.
pub fn render_lines(rep: &TransportReport) -> String {
    let mut s = format!("#\n# transports per tier (from {})\n", rep.source);
    for t in &rep.tiers {
        let mut parts = Vec::new();
        if let Some(i) = &t.intra_node {
            parts.push(format!("intra-node: {i}"));
        }
        if let Some(i) = &t.inter_node {
            parts.push(format!("inter-node: {i}"));
        }
        if parts.is_empty() {
            parts.push("a single rank per group: no transport".into());
        }
        s.push_str(&format!("#   {:<6} {}\n", t.tier, parts.join("; ")));
    }
    for n in &rep.notes {
        s.push_str(&format!("# note: {n}\n"));
    }
    s
}

/// The verdict of the fabric criterion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FabricStatus {
    Pass,
    Fail,
    /// Nothing to judge (MPI backend, no NCCL logs, one node).
    NotApplicable,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricJudgement {
    pub status: FabricStatus,
    pub measured: String,
    pub detail: String,
}

/// The RDMA fabric a topology declares between nodes (`[inter] nic_kind`), as the
/// fabric criterion judges NCCL's network against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// InfiniBand or RoCE through verbs: `NET/IB` (or an IB-verbs plugin: `IBext`).
    Ib,
    /// AWS EFA through aws-ofi-nccl: `NET/AWS Libfabric` (or `OFI`), provider efa.
    Efa,
    /// HPE Slingshot through aws-ofi-nccl, provider cxi.
    Slingshot,
    /// Not declared: any RDMA fabric (IB or Libfabric), never the socket fallback.
    AnyRdma,
}

impl Fabric {
    /// From a topology's `nic_kind` (None or a non-RDMA kind: any RDMA fabric).
    pub fn from_nic_kind(kind: Option<&str>) -> Fabric {
        match kind.map(str::to_ascii_lowercase).as_deref() {
            Some("infiniband" | "ib" | "roce") => Fabric::Ib,
            Some("efa") => Fabric::Efa,
            Some("slingshot" | "cxi") => Fabric::Slingshot,
            _ => Fabric::AnyRdma,
        }
    }

    /// How it shows in NCCL's log, for the criterion's wording.
    pub fn shown(self) -> &'static str {
        match self {
            Fabric::Ib => "NET/IB",
            Fabric::Efa => "NET/AWS Libfabric (provider efa)",
            Fabric::Slingshot => "NET/AWS Libfabric (provider cxi)",
            Fabric::AnyRdma => "NET/IB or NET/AWS Libfabric",
        }
    }

    /// Adapters: HCAs or EFA/cxi devices.
    fn adapters(self) -> &'static str {
        match self {
            Fabric::Ib => "HCA(s)",
            Fabric::Efa => "EFA device(s)",
            Fabric::Slingshot => "cxi device(s)",
            Fabric::AnyRdma => "RDMA adapter(s)",
        }
    }

    /// Whether a network of `family` with aws-ofi-nccl `provider` is this fabric.
    fn accepts(self, family: &str, provider: Option<&str>) -> bool {
        let prov = |want: &str| provider.map_or(true, |p| p.to_ascii_lowercase().starts_with(want));
        match self {
            Fabric::Ib => family == "IB",
            Fabric::Efa => family == "Libfabric" && prov("efa"),
            Fabric::Slingshot => family == "Libfabric" && prov("cxi"),
            Fabric::AnyRdma => family == "IB" || family == "Libfabric",
        }
    }
}

/// One host's problems with the fabric, and how many adapters of it carried its
/// inter-node traffic (None: no log or no inter-node connection, itself a problem).
fn host_problems(
    h: &HostTransport,
    fabric: Fabric,
    nics: Option<usize>,
) -> (Vec<String>, Option<usize>) {
    let mut problems = Vec::new();
    if h.logs == 0 {
        return (vec![format!("{}: no NCCL log read", h.host)], None);
    }
    if h.inter.links == 0 {
        return (
            vec![format!("{}: no inter-node connection in its logs", h.host)],
            None,
        );
    }
    let provider = h.ofi_provider.as_deref();
    for u in h
        .inter
        .net
        .iter()
        .filter(|u| !fabric.accepts(&u.family, provider))
    {
        let prov = match (u.family.as_str(), provider) {
            ("Libfabric", Some(p)) => format!(", provider {p}"),
            _ => String::new(),
        };
        problems.push(format!(
            "{}: inter-node traffic over NET/{}{prov} ({}), not {}",
            h.host,
            u.net,
            u.devices.join(", "),
            fabric.shown()
        ));
    }
    let mut used: Vec<String> = Vec::new();
    for u in h
        .inter
        .net
        .iter()
        .filter(|u| fabric.accepts(&u.family, provider))
    {
        for d in &u.devices {
            if !used.contains(d) {
                used.push(d.clone());
            }
        }
    }
    used.sort();
    if let Some(want) = nics {
        if used.len() < want {
            problems.push(format!(
                "{}: {} of {want} {} carried inter-node traffic ({})",
                h.host,
                used.len(),
                fabric.adapters(),
                if used.is_empty() {
                    "none".into()
                } else {
                    used.join(", ")
                }
            ));
        }
    }
    (problems, Some(used.len()))
}

/// Whether inter-node NCCL traffic went over the fabric the topology declares
/// (`fabric`: NET/IB for InfiniBand/RoCE, aws-ofi-nccl's Libfabric for EFA or
/// Slingshot; never NET/Socket) on at least `nics` distinct adapters of every host.
/// Pure: the report of run.json and the topology's `[inter] nics` and `nic_kind`.
pub fn judge_nccl_fabric(
    rep: Option<&TransportReport>,
    nics: Option<usize>,
    fabric: Fabric,
) -> FabricJudgement {
    let na = |why: &str| FabricJudgement {
        status: FabricStatus::NotApplicable,
        measured: "-".into(),
        detail: why.to_string(),
    };
    let Some(rep) = rep else {
        return na("no transport record in the sweep's run.json");
    };
    if rep.backend != "nccl" {
        return na(&format!(
            "not applicable: the sweep ran on the {} backend (no NCCL logs)",
            rep.backend
        ));
    }
    let with_logs: Vec<&HostTransport> = rep.hosts.iter().filter(|h| h.logs > 0).collect();
    if with_logs.is_empty() {
        let why = rep
            .notes
            .first()
            .cloned()
            .unwrap_or_else(|| "no NCCL log was read".into());
        return na(&format!("no NCCL logs: {why}"));
    }
    if rep.hosts.len() < 2 || with_logs.iter().all(|h| h.inter.links == 0) {
        return na(
            "the sweep made no inter-node NCCL connection (one node, or no tier across nodes)",
        );
    }
    // aws-ofi-nccl shows NCCL its own devices (on p5, one per GPU striped over four
    // EFA adapters), not the adapters the topology counts: no count for Libfabric.
    let nics = match fabric {
        Fabric::Efa | Fabric::Slingshot => None,
        _ => nics,
    };
    let mut problems = Vec::new();
    let mut counts = Vec::new();
    for h in &rep.hosts {
        let (p, count) = host_problems(h, fabric, nics);
        problems.extend(p);
        counts.extend(count);
    }
    let min = counts.iter().copied().min().unwrap_or(0);
    if problems.is_empty() {
        FabricJudgement {
            status: FabricStatus::Pass,
            measured: format!(
                "{} on all {} host(s), ≥ {min} {} each",
                fabric.shown(),
                rep.hosts.len(),
                fabric.adapters()
            ),
            detail: String::new(),
        }
    } else {
        FabricJudgement {
            status: FabricStatus::Fail,
            measured: problems[0].clone(),
            detail: if problems.len() > 1 {
                format!("also: {}", problems[1..].join("; "))
            } else {
                String::new()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_file_patterns_expand_like_nccl() {
        assert_eq!(
            expand_nccl_pattern("/x/nccl.%h.%p.log", "gpu01.cluster.local", 42),
            "/x/nccl.gpu01.42.log"
        );
        assert_eq!(expand_nccl_pattern("a%%b%q%", "h", 1), "a%b%q%");
        assert_eq!(escape_percent(Path::new("/r/50%/x")), "/r/50%%/x");
    }

    fn rank(r: usize, peers: &[(usize, &str)]) -> RankTransport {
        RankTransport {
            rank: r,
            host: "h".into(),
            mpi: Some(RankMpi {
                pml: Some("ob1".into()),
                tcp_interfaces: vec!["eth0".into()],
                peers: peers
                    .iter()
                    .map(|(p, b)| (*p, vec![b.to_string()]))
                    .collect(),
            }),
            ..RankTransport::default()
        }
    }

    #[test]
    fn mpi_tiers_split_pairs_by_node() {
        // Two nodes of two ranks: 0,1 on node 0; 2,3 on node 1.
        let node_of = [0, 0, 1, 1];
        let ranks = vec![
            rank(0, &[(1, "vader"), (2, "tcp"), (3, "tcp")]),
            rank(1, &[(0, "vader"), (3, "tcp")]),
            rank(2, &[(3, "vader"), (0, "tcp")]),
            rank(3, &[(2, "vader"), (1, "tcp"), (0, "tcp")]),
        ];
        let tiers = vec![
            TierGroups {
                tier: TierKind::World,
                groups: vec![vec![0, 1, 2, 3]],
            },
            TierGroups {
                tier: TierKind::Intra,
                groups: vec![vec![0, 1], vec![2, 3]],
            },
            TierGroups {
                tier: TierKind::Inter,
                groups: vec![vec![0, 2], vec![1, 3]],
            },
        ];
        let rep = build_report(BackendKind::Mpi, &ranks, &node_of, &[], &tiers);
        assert_eq!(rep.pml, vec!["ob1"]);
        let world = &rep.tiers[0];
        assert_eq!(world.intra_node.as_deref(), Some("shared memory (vader)"));
        assert_eq!(world.inter_node.as_deref(), Some("tcp over eth0"));
        assert_eq!(rep.tiers[1].inter_node, None);
        assert_eq!(rep.tiers[2].intra_node, None);
        assert_eq!(rep.tiers[2].inter_node.as_deref(), Some("tcp over eth0"));
        let text = render_lines(&rep);
        assert!(
            text.contains("intra  intra-node: shared memory (vader)"),
            "{text}"
        );
    }

    #[test]
    fn fabric_is_not_judged_without_nccl_logs() {
        let j = judge_nccl_fabric(None, Some(8), Fabric::Ib);
        assert_eq!(j.status, FabricStatus::NotApplicable);
        let rep = TransportReport {
            backend: "mpi".into(),
            ..TransportReport::default()
        };
        let j = judge_nccl_fabric(Some(&rep), Some(8), Fabric::Ib);
        assert_eq!(j.status, FabricStatus::NotApplicable);
        assert!(j.detail.contains("mpi backend"), "{j:?}");
    }
}
