//! Which path NCCL took: a parser of NCCL's INFO log (`NCCL_DEBUG=INFO`,
//! `NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH`), one file per process.
//!
//! NCCL never says in one place "inter-node traffic went over InfiniBand with
//! GPUDirect RDMA"; it says it line by line, in a format that changed over the years:
//! - the network it picked (`NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ...`,
//!   `NET/Socket : Using [0]eth0:10.0.0.1<0>`, `Using network IB`),
//! - GPUDirect RDMA per adapter (`GPU Direct RDMA Enabled for HCA 0 'mlx5_0'`),
//! - one line per channel and peer with the transport of that connection
//!   (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`,
//!   `Channel 02/0 : 3[3] -> 11[3] [send] via NET/IB/3/GDRDMA`, before 2.12 `Channel 00 :
//!   0[18000] -> 1[2a000] via P2P/IPC`, before 2.8 `Ring 00 : 15 -> 0 [receive] via
//!   NET/Socket/0`),
//! - communicator boundaries (`comm 0x... rank 0 nranks 16 ... commId 0x... - Init
//!   START` / `- Init COMPLETE`), NVLS and CollNet set-up, the graph search's path
//!   type (`Pattern 4, ..., type NVL/PIX`), and with `NCCL_DEBUG_SUBSYS=TUNING` the
//!   algorithm and protocol per call (`... Bytes -> Algo 1 proto 2 time ...`, or with
//!   names).
//!
//! [`parse`] reads all of that into an [`NcclLog`]; [`summarize`] condenses it into
//! the transports seen between ranks of one node and between nodes. Pure and
//! tolerant: an unknown line is ignored, a malformed one is skipped, nothing panics
//! (the `nccl_log` fuzz target holds it to that).
//!
//! Connections are attributed to communicators in log order: a connection line
//! belongs to the communicator whose `Init START` came last (NCCL 2.22+ connects
//! lazily, at the first collective, after `Init COMPLETE`); in logs without `Init
//! START` lines (before ~2.12) it belongs to the next `Init COMPLETE`. That holds for
//! burnin, which creates one communicator at a time per process.
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

/// Warnings kept per file (the first ones; the rest are counted).
const MAX_WARNINGS: usize = 20;

/// How a connection's data moves.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Via {
    /// GPU to GPU peer access (NVLink or PCIe): `P2P/CUMEM`, `P2P/IPC/read`,
    /// `P2P/direct pointer`.
    P2p { mode: String },
    /// Through host shared memory: `SHM/direct/direct`, old `direct shared memory`.
    Shm { mode: String },
    /// Through a network device: `NET/IB/0/GDRDMA`, `NET/Socket/1`,
    /// `NET/IBext_v8/3`, `NET/IB/2(5)/GDRDMA` (PXN: through GPU 5's adapter).
    Net {
        net: String,
        dev: usize,
        gdr: bool,
        /// PXN: the local GPU whose adapter carries it.
        proxy: Option<usize>,
        shared: bool,
    },
    /// Anything else NCCL printed after "via".
    Other { text: String },
}

impl Via {
    /// Parse the text after "via ".
    pub fn parse(text: &str) -> Via {
        let t = text.trim();
        if let Some(rest) = t.strip_prefix("P2P/") {
            return Via::P2p { mode: rest.into() };
        }
        if let Some(rest) = t.strip_prefix("SHM/") {
            return Via::Shm { mode: rest.into() };
        }
        if t == "direct shared memory" {
            return Via::Shm {
                mode: "direct".into(),
            };
        }
        if let Some(rest) = t.strip_prefix("NET/") {
            // "<net name, maybe with spaces or '/'>/<dev>[(proxy)][/GDRDMA][/Shared]"
            let parts: Vec<&str> = rest.split('/').collect();
            let dev_at = parts
                .iter()
                .enumerate()
                .skip(1)
                .find(|(_, p)| p.starts_with(|c: char| c.is_ascii_digit()))
                .map(|(i, _)| i);
            if let Some(i) = dev_at {
                let net = parts[..i].join("/");
                let d = parts[i];
                let digits: String = d.chars().take_while(|c| c.is_ascii_digit()).collect();
                let proxy = d
                    .find('(')
                    .and_then(|o| d.get(o + 1..))
                    .and_then(|r| r.split(')').next())
                    .and_then(|p| p.trim().parse().ok());
                if let Ok(dev) = digits.parse::<usize>() {
                    let flags = &parts[i + 1..];
                    return Via::Net {
                        net,
                        dev,
                        // "GDRDMA", 2.28's "GDRDMA(PCI)".
                        gdr: flags.iter().any(|f| f.starts_with("GDRDMA")),
                        proxy,
                        shared: flags.iter().any(|f| f.eq_ignore_ascii_case("Shared")),
                    };
                }
            }
        }
        Via::Other { text: t.into() }
    }

    /// Whether NCCL uses this only between nodes (a network device). P2P and SHM
    /// only exist inside a node; NCCL takes the network inside a node only when both
    /// are disabled, which the node map (when known) tells apart.
    pub fn is_network(&self) -> bool {
        matches!(self, Via::Net { .. })
    }
}

/// The family of a network NCCL names: `IB` (InfiniBand and RoCE through verbs,
/// also the IB-verbs plugins: SHARP's `IBext`, `IBext_v8`, "NCCL RDMA Plugin"),
/// `Libfabric` (aws-ofi-nccl: `AWS Libfabric`, `Libfabric`, `OFI`; EFA or
/// Slingshot's cxi, as its `Selected Provider` line says), `Socket`, or `plugin`
/// (any other network plugin).
pub fn net_family(net: &str) -> &'static str {
    let n = net.trim();
    let lower = n.to_ascii_lowercase();
    if lower == "socket" {
        "Socket"
    } else if lower.starts_with("ib") || lower.contains("rdma plugin") {
        "IB"
    } else if lower.contains("libfabric") || lower == "ofi" || lower.starts_with("ofi") {
        "Libfabric"
    } else {
        "plugin"
    }
}

/// One device of a `NET/<net> : Using [i]name...` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetDevice {
    /// The network's name as NCCL printed it ("IB", "Socket").
    pub net: String,
    pub index: usize,
    /// Adapter or interface: "mlx5_0", "eth0".
    pub name: String,
    /// The rest: port and link layer ("1/IB", "1/RoCE") or address ("10.0.0.1<0>").
    pub detail: String,
}

/// A `GPU Direct RDMA Enabled/Disabled for HCA ...` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GdrState {
    /// The network the line is about ("IB"; "Socket" lines are not kept).
    pub net: String,
    pub hca_index: Option<usize>,
    pub hca: Option<String>,
    pub enabled: bool,
}

/// One distinct connection of a communicator (channels counted, not listed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Link {
    /// Communicator ranks.
    pub from: usize,
    pub to: usize,
    /// "send" or "receive" (network connections), None otherwise.
    pub dir: Option<String>,
    pub via: Via,
    /// Channels (and connection indexes) using it.
    pub channels: u32,
}

/// One communicator as the log shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CommLog {
    /// Pointer as printed ("0x55d0..."); "?" when the log never named it.
    pub comm: String,
    /// The host and process that logged its Init line (from the line's prefix).
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub pid: Option<u32>,
    pub comm_id: Option<String>,
    pub rank: Option<usize>,
    pub nranks: Option<usize>,
    pub cuda_dev: Option<u32>,
    pub bus_id: Option<String>,
    pub started: bool,
    pub complete: bool,
    pub links: Vec<Link>,
    /// The graph search's path types ("NVL/PIX": inside the node / to the NIC).
    pub graph_types: Vec<String>,
    pub coll_channels: Option<u32>,
    pub nvls_channels: Option<u32>,
    pub collnet_channels: Option<u32>,
    /// NVLS (NVLink SHARP) buffers were set up, or NVLS channels reported.
    pub nvls: bool,
    /// CollNet (network SHARP) was connected (`CollNet ... via COLLNET/...`,
    /// `Connected collnet + chain`).
    pub collnet: bool,
    /// "RING/SIMPLE", ... (only with NCCL_DEBUG_SUBSYS=TUNING).
    pub algorithms: Vec<String>,
}

/// Everything [`parse`] reads from one log file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclLog {
    /// "2.21.5+cuda12.4".
    pub version: Option<String>,
    /// From the line prefix `host:pid:tid [dev]`.
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub cuda_dev: Option<u32>,
    /// `Using network X`: "IB", "Socket", "IBext_v8", "AWS Libfabric".
    pub network: Option<String>,
    /// Devices of every `NET/<net> : Using ...` line.
    pub net_devices: Vec<NetDevice>,
    /// `NET/IB : No device found.`
    pub no_ib_device: bool,
    /// `NET/Plugin` lines naming what was loaded (or not).
    pub plugin: Vec<String>,
    /// aws-ofi-nccl's `Selected Provider is efa` (or `cxi`, Slingshot).
    #[serde(default)]
    pub ofi_provider: Option<String>,
    /// Every host named in a line's prefix, in order of first appearance (several
    /// when processes of several nodes were logged into one stream).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Ranks the lines place on a host: the rank of an Init line, the sending rank
    /// of a `[send]` network line and the receiving one of a `[receive]` line, both
    /// ends of a P2P or SHM line (inside the logger's node), each by the host of the
    /// line's prefix; a rank placed on two hosts (two communicators) is left out.
    #[serde(default)]
    pub rank_hosts: std::collections::BTreeMap<usize, String>,
    /// `Bootstrap : Using eth0:10.0.0.1<0>`.
    pub bootstrap: Option<String>,
    pub gdr: Vec<GdrState>,
    /// `NVLS multicast support is (not) available on dev N`.
    pub nvls_available: Option<bool>,
    pub comms: Vec<CommLog>,
    /// NCCL WARN lines (the first few).
    pub warnings: Vec<String>,
    pub warnings_total: usize,
    /// Lines read, and of them NCCL INFO lines.
    pub lines: usize,
    pub info_lines: usize,
}

/// `host:pid:tid [dev]` before "NCCL INFO".
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Prefix {
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
    pub(crate) tid: Option<u64>,
    pub(crate) dev: Option<u32>,
}

pub(crate) fn parse_prefix(pre: &str) -> Prefix {
    let mut p = Prefix::default();
    let mut head = pre.trim_end();
    if head.ends_with(']') {
        if let Some(open) = head.rfind('[') {
            p.dev = head
                .get(open + 1..head.len() - 1)
                .and_then(|d| d.trim().parse().ok());
            head = head[..open].trim_end();
        }
    }
    if let Some(tok) = head.split_whitespace().last() {
        let mut it = tok.rsplitn(3, ':');
        let tid = it.next();
        let pid = it.next();
        let host = it.next();
        if let (Some(host), Some(pid), Some(tid)) = (host, pid, tid) {
            if let (Ok(pid), Ok(tid)) = (pid.parse::<u32>(), tid.parse::<u64>()) {
                // A launcher's tag glued to the host: Open MPI's `[1,2]<stdout>:`,
                // torchrun's `[rank0]:` or `[default0]:`. Host names hold no ':'.
                let host = host.rsplit(':').next().unwrap_or(host);
                let host = host.trim_start_matches('[');
                // A collector's ISO-8601 time glued to it ("…-07:00ip-10-0-0-1"): the
                // ':' split left the time's last digits in front.
                let glued = tok.len() > 11
                    && tok.as_bytes()[4] == b'-'
                    && tok.as_bytes()[10] == b'T'
                    && tok[..4].bytes().all(|b| b.is_ascii_digit());
                let host = if glued {
                    host.trim_start_matches(|c: char| c.is_ascii_digit() || c == 'Z')
                } else {
                    host
                };
                if !host.is_empty() {
                    p.host = Some(host.to_string());
                    p.pid = Some(pid);
                    p.tid = Some(tid);
                }
            }
        }
    }
    p
}

/// The value after `key ` in a whitespace-separated message (`rank 3` → "3").
fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    let mut it = msg.split_whitespace();
    while let Some(t) = it.next() {
        if t == key {
            return it.next();
        }
    }
    None
}

fn num<T: std::str::FromStr>(s: Option<&str>) -> Option<T> {
    s.and_then(|v| v.trim_end_matches(',').parse().ok())
}

/// Algorithm ids of NCCL's `Algo N` tuning lines (stable since 2.17; 6 = PAT in 2.23).
fn algo_name(a: &str) -> String {
    match a {
        "0" => "TREE".into(),
        "1" => "RING".into(),
        "2" => "COLLNET_DIRECT".into(),
        "3" => "COLLNET_CHAIN".into(),
        "4" => "NVLS".into(),
        "5" => "NVLS_TREE".into(),
        "6" => "PAT".into(),
        other => other.to_ascii_uppercase(),
    }
}

fn proto_name(p: &str) -> String {
    match p {
        "0" => "LL".into(),
        "1" => "LL128".into(),
        "2" => "SIMPLE".into(),
        other => other.to_ascii_uppercase(),
    }
}

/// "[0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:..." → devices. A merged device
/// (NCCL_IB_MERGE_NICS, 2.20+: `[0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB}`) is one
/// device named "mlx5_0+mlx5_1".
fn parse_devices(net: &str, list: &str) -> Vec<NetDevice> {
    let list = list.split(';').next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = list;
    // Merged devices first, cut out of the list.
    let mut plain = String::new();
    while let Some(open) = rest.find("={") {
        let before = &rest[..open];
        let Some(lb) = before.rfind('[') else { break };
        plain.push_str(&before[..lb]);
        let index = before[lb + 1..].trim_end_matches(']').parse::<usize>().ok();
        let after = &rest[open + 2..];
        let close = after.find('}').unwrap_or(after.len());
        let names: Vec<String> = after[..close]
            .split(',')
            .filter_map(|m| {
                let m = m.trim();
                let m = m.find(']').map(|i| m[i + 1..].trim()).unwrap_or(m);
                m.split(':')
                    .next()
                    .filter(|n| !n.is_empty())
                    .map(String::from)
            })
            .collect();
        if let (Some(index), false) = (index, names.is_empty()) {
            out.push(NetDevice {
                net: net.to_string(),
                index,
                name: names.join("+"),
                detail: "merged".into(),
            });
        }
        rest = after.get(close + 1..).unwrap_or("");
    }
    plain.push_str(rest);
    for tok in plain.split_whitespace() {
        let Some(rest) = tok.strip_prefix('[') else {
            continue;
        };
        let Some(close) = rest.find(']') else {
            continue;
        };
        let Ok(index) = rest[..close].parse::<usize>() else {
            continue; // "[RO]"
        };
        let body = &rest[close + 1..];
        let (name, detail) = match body.find(':') {
            Some(c) => (&body[..c], &body[c + 1..]),
            None => match body.find('/') {
                Some(s) => (&body[..s], &body[s + 1..]),
                None => (body, ""),
            },
        };
        if name.is_empty() {
            continue;
        }
        out.push(NetDevice {
            net: net.to_string(),
            index,
            name: name.to_string(),
            detail: detail.to_string(),
        });
    }
    out
}

/// "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA" (also "Ring 00 : 15 -> 0
/// [receive] via NET/Socket/0") → (from, to, dir, via).
fn parse_channel(msg: &str) -> Option<LinkKey> {
    let via_at = msg.find(" via ")?;
    let head = &msg[..via_at];
    // Some builds print the communicator after the transport ("via P2P/IPC comm
    // 0x5609976f9470 nRanks 32").
    let mut via_text = &msg[via_at + 5..];
    if let Some(c) = via_text.find(" comm 0x") {
        via_text = &via_text[..c];
    }
    let via = Via::parse(via_text);
    let colon = head.find(':')?;
    let body = &head[colon + 1..];
    let arrow = body.find("->")?;
    let rank_of = |s: &str| -> Option<usize> {
        let t = s.trim();
        let t = t.split('[').next().unwrap_or(t).trim();
        t.parse().ok()
    };
    let from = rank_of(&body[..arrow])?;
    let after = &body[arrow + 2..];
    let mut dir = None;
    let mut to_text = after;
    for d in ["send", "receive"] {
        if let Some(i) = after.find(&format!("[{d}]")) {
            dir = Some(d.to_string());
            to_text = &after[..i];
        }
    }
    let to = rank_of(to_text)?;
    Some((from, to, dir, via))
}

/// "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, ..." →
/// (kind, count) pairs.
fn channel_counts(msg: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for part in msg.split(',') {
        let words: Vec<&str> = part.split_whitespace().collect();
        if words.len() >= 3 && words[2] == "channels" {
            if let Ok(n) = words[0].parse::<u32>() {
                out.push((words[1].to_string(), n));
            }
        }
    }
    out
}

/// A connection as parsed: (from, to, direction, transport).
type LinkKey = (usize, usize, Option<String>, Via);

/// Parser state: where connection lines go.
struct State {
    log: NcclLog,
    /// Whether any "Init START" line exists (decides attribution, see module header).
    has_start: bool,
    current: Option<usize>,
    /// The communicator each thread of each process is initialising.
    by_tid: HashMap<(Option<String>, Option<u32>, u64), usize>,
    /// Rank -> host as the lines place it (None: placed on two hosts).
    placed: HashMap<usize, Option<String>>,
    /// The communicator each process started last (a stream may interleave several
    /// processes' lines: each goes to its own process's communicator).
    by_proc: HashMap<(Option<String>, Option<u32>), usize>,
    /// Connections waiting for their "Init COMPLETE" (logs without START lines).
    pending: Vec<LinkKey>,
    pending_graph: Vec<String>,
    link_index: Vec<HashMap<LinkKey, usize>>,
}

impl State {
    /// `rank` is on `host` (a line of that host says so).
    fn place(&mut self, rank: usize, host: &Option<String>) {
        let Some(h) = host else { return };
        let e = self.placed.entry(rank).or_insert_with(|| Some(h.clone()));
        if e.as_ref().is_some_and(|x| x != h) {
            *e = None;
        }
    }

    fn new_comm(&mut self, comm: CommLog) -> usize {
        self.log.comms.push(comm);
        self.link_index.push(HashMap::new());
        self.log.comms.len() - 1
    }

    fn add_link(&mut self, ci: usize, l: LinkKey) {
        let (Some(comm), Some(index)) = (self.log.comms.get_mut(ci), self.link_index.get_mut(ci))
        else {
            return;
        };
        match index.get(&l) {
            Some(&i) => {
                if let Some(link) = comm.links.get_mut(i) {
                    link.channels = link.channels.saturating_add(1);
                }
            }
            None => {
                index.insert(l.clone(), comm.links.len());
                comm.links.push(Link {
                    from: l.0,
                    to: l.1,
                    dir: l.2,
                    via: l.3,
                    channels: 1,
                });
            }
        }
    }

    /// The communicator a line of thread `tid` is about.
    /// The thread's own communicator while its initialisation runs (several may
    /// initialise at once), else the one started last.
    fn target(&self, pre: &Prefix) -> Option<usize> {
        let initialising = pre
            .tid
            .and_then(|t| self.by_tid.get(&(pre.host.clone(), pre.pid, t)).copied())
            .filter(|&c| self.log.comms.get(c).is_some_and(|c| !c.complete));
        let process = || {
            pre.pid
                .and_then(|_| self.by_proc.get(&(pre.host.clone(), pre.pid)).copied())
        };
        initialising.or_else(process).or(self.current)
    }

    /// This line's communicator is now `ci` for its process (and the stream).
    fn set_current(&mut self, pre: &Prefix, ci: usize) {
        self.current = Some(ci);
        if pre.pid.is_some() {
            self.by_proc.insert((pre.host.clone(), pre.pid), ci);
        }
    }

    /// Where a comm-scoped fact goes; creates an anonymous communicator if none yet.
    fn comm_for(&mut self, pre: &Prefix) -> usize {
        match self.target(pre) {
            Some(c) => c,
            None => {
                let c = self.new_comm(CommLog {
                    comm: "?".into(),
                    ..CommLog::default()
                });
                self.current = Some(c);
                c
            }
        }
    }
}

/// Read one NCCL log (one process's `NCCL_DEBUG_FILE`, or its stdout).
pub fn parse(text: &str) -> NcclLog {
    let has_start = text.contains("Init START");
    let mut st = State {
        log: NcclLog::default(),
        has_start,
        current: None,
        by_tid: HashMap::new(),
        by_proc: HashMap::new(),
        placed: HashMap::new(),
        pending: Vec::new(),
        pending_graph: Vec::new(),
        link_index: Vec::new(),
    };
    for raw in text.lines() {
        st.log.lines += 1;
        let line = raw.trim_end_matches('\r');
        if let Some(w) = line.find("NCCL WARN") {
            st.log.warnings_total += 1;
            if st.log.warnings.len() < MAX_WARNINGS {
                st.log.warnings.push(line[w + 9..].trim().to_string());
            }
            continue;
        }
        let (pre_text, msg) = match line.find("NCCL INFO") {
            Some(at) => (&line[..at], line[at + 9..].trim()),
            None => match stripped_message(line) {
                // A line whose "NCCL INFO" a logging program dropped.
                Some(at) => (&line[..at], line[at..].trim()),
                None => {
                    // The version banner is printed without the prefix by some
                    // versions, after a launcher's or log collector's own prefix.
                    if let Some(at) = line.find("NCCL version ") {
                        let before = &line[..at];
                        if (before.is_empty() || before.ends_with([' ', ':', '|', ']']))
                            && st.log.version.is_none()
                        {
                            st.log.version =
                                line[at + 13..].split_whitespace().next().map(String::from);
                        }
                    }
                    continue;
                }
            },
        };
        st.log.info_lines += 1;
        // A log collector's copy with the line repeated after " | ".
        let msg = match msg.find(" | ") {
            Some(bar) if msg[bar..].contains("NCCL INFO") => msg[..bar].trim_end(),
            _ => msg,
        };
        let pre = parse_prefix(pre_text);
        if let Some(h) = &pre.host {
            if !st.log.hosts.contains(h) {
                st.log.hosts.push(h.clone());
            }
        }
        if st.log.host.is_none() {
            st.log.host = pre.host.clone();
            st.log.pid = pre.pid;
        }
        if st.log.cuda_dev.is_none() {
            st.log.cuda_dev = pre.dev;
        }
        info_line(&mut st, &pre, msg);
    }
    st.log.rank_hosts = st
        .placed
        .iter()
        .filter_map(|(r, h)| h.clone().map(|h| (*r, h)))
        .collect();
    // Connections after the last COMPLETE of a START-less log: the last communicator.
    if !st.pending.is_empty() {
        let target = st.current.or_else(|| st.log.comms.len().checked_sub(1));
        let ci = match target {
            Some(c) => c,
            None => st.new_comm(CommLog {
                comm: "?".into(),
                ..CommLog::default()
            }),
        };
        for l in std::mem::take(&mut st.pending) {
            st.add_link(ci, l);
        }
    }
    st.log
}

/// Where an NCCL message starts in a line that lost its "NCCL INFO" (some logging
/// programs strip it): one of NCCL's own message shapes, at the start or after the
/// prefix (`host:pid:tid [dev] `), and only in a line that has the rest of the shape.
fn stripped_message(line: &str) -> Option<usize> {
    const SHAPES: [(&str, &[&str]); 8] = [
        ("Channel ", &[" via "]),
        ("Ring ", &[" via "]),
        (
            "NET/",
            &[" : Using ", "Selected Provider", " : No device found"],
        ),
        ("comm 0x", &["- Init "]),
        ("Using network ", &[]),
        ("GPU Direct RDMA ", &[" for HCA "]),
        ("NVLS multicast support is", &[]),
        ("Pattern ", &["nChannels", ", type "]),
    ];
    let starts = |at: usize| at == 0 || line[..at].ends_with([' ', ']', ':']);
    SHAPES
        .iter()
        .filter_map(|(start, needs)| {
            let at = line.find(start)?;
            let rest = &line[at..];
            (starts(at) && (needs.is_empty() || needs.iter().any(|n| rest.contains(n))))
                .then_some(at)
        })
        .min()
}

/// A parser of one family of INFO messages: given the message and its lowercase form,
/// it records what the line says and answers whether the line was of its family.
type InfoParser = fn(&mut State, &Prefix, &str, &str) -> bool;

/// The families of INFO messages, tried in this order; the first that claims a line
/// has it.
const INFO_FAMILIES: [InfoParser; 14] = [
    version_info,
    network_info,
    bootstrap_info,
    plugin_info,
    gdr_info,
    net_info,
    nvls_support_info,
    connection_info,
    init_info,
    pattern_info,
    channel_count_info,
    nvls_comm_info,
    collnet_info,
    algo_info,
];

fn info_line(st: &mut State, pre: &Prefix, msg: &str) {
    let lower = msg.to_ascii_lowercase();
    for family in INFO_FAMILIES {
        if family(st, pre, msg, &lower) {
            return;
        }
    }
}

/// "NCCL version 2.21.5+cuda12.4".
fn version_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    let Some(v) = msg.strip_prefix("NCCL version ") else {
        return false;
    };
    if st.log.version.is_none() {
        st.log.version = v.split_whitespace().next().map(String::from);
    }
    true
}

/// "Using network IB".
fn network_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    // (before 2.4: "Using internal Network IB")
    let Some(net) = msg
        .strip_prefix("Using network ")
        .or_else(|| msg.strip_prefix("Using internal Network "))
    else {
        return false;
    };
    st.log.network = Some(net.trim().to_string());
    true
}

/// "Bootstrap : Using eth0:10.0.0.1<0>".
fn bootstrap_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    if !msg.starts_with("Bootstrap") {
        return false;
    }
    if let Some(u) = msg.find("Using ") {
        st.log.bootstrap = Some(msg[u + 6..].trim().to_string());
    }
    true
}

/// "NET/Plugin: …" and "Plugin Path : …" (the first eight kept); aws-ofi-nccl's
/// "NET/OFI Selected Provider is efa (found 4 nics)".
fn plugin_info(st: &mut State, _: &Prefix, msg: &str, lower: &str) -> bool {
    if let Some(at) = lower.find("selected provider is ") {
        let p = &msg[at + "selected provider is ".len()..];
        let name: String = p
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == ';')
            .collect();
        if !name.is_empty() && st.log.ofi_provider.is_none() {
            st.log.ofi_provider = Some(name);
        }
        return true;
    }
    if !(msg.starts_with("NET/Plugin") || msg.starts_with("Plugin Path")) {
        return false;
    }
    if st.log.plugin.len() < 8 {
        st.log.plugin.push(msg.to_string());
    }
    true
}

/// "GPU Direct RDMA Enabled for HCA …" (or Disabled).
fn gdr_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    if !(msg.contains("GPU Direct RDMA") && (msg.contains("Enabled") || msg.contains("Disabled"))) {
        return false;
    }
    gdr_line(st, msg);
    true
}

/// "NET/IB : Using [0]mlx5_0:1/IB …" (the devices) and "NET/IB : No device found.".
fn net_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    let Some(rest) = msg.strip_prefix("NET/") else {
        return false;
    };
    let net: String = rest
        .chars()
        .take_while(|c| *c != ' ' && *c != ':')
        .collect();
    if rest.contains("No device found") && net_family(&net) == "IB" {
        st.log.no_ib_device = true;
        return true;
    }
    // (before 2.4, one device per line: "NET/IB: [0] mlx5_3:1/IB")
    let list = match rest.find("Using ") {
        Some(u) => Some(&rest[u + 6..]),
        None => rest[net.len()..]
            .trim_start_matches([' ', ':'])
            .starts_with('[')
            .then(|| rest[net.len()..].trim_start_matches([' ', ':'])),
    };
    if let Some(list) = list {
        let devs = parse_devices(&net, list);
        for d in devs {
            if !st.log.net_devices.contains(&d) {
                st.log.net_devices.push(d);
            }
        }
    }
    true
}

/// "NVLS multicast support is (not) available on dev 0".
fn nvls_support_info(st: &mut State, _: &Prefix, msg: &str, _: &str) -> bool {
    if !msg.starts_with("NVLS multicast support is") {
        return false;
    }
    st.log.nvls_available = Some(!msg.contains("not available"));
    true
}

/// "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC" and "Ring …" connection lines.
fn connection_info(st: &mut State, pre: &Prefix, msg: &str, _: &str) -> bool {
    if !((msg.starts_with("Channel ") || msg.starts_with("Ring ")) && msg.contains(" via ")) {
        return false;
    }
    if let Some(l) = parse_channel(msg) {
        match (&l.3, l.2.as_deref()) {
            (Via::Net { .. }, Some("send")) => st.place(l.0, &pre.host),
            (Via::Net { .. }, Some("receive")) => st.place(l.1, &pre.host),
            (Via::P2p { .. } | Via::Shm { .. }, _) => {
                st.place(l.0, &pre.host);
                st.place(l.1, &pre.host);
            }
            _ => {}
        }
        if st.has_start {
            let ci = st.comm_for(pre);
            st.add_link(ci, l);
        } else {
            st.pending.push(l);
        }
    }
    true
}

/// "… comm 0x… rank 0 nranks 2 … - Init START" and "… - Init COMPLETE".
fn init_info(st: &mut State, pre: &Prefix, msg: &str, _: &str) -> bool {
    if !(msg.contains("- Init START") || msg.contains("- Init COMPLETE")) {
        return false;
    }
    comm_line(st, pre, msg);
    true
}

/// "Pattern 4, crossNic 0, nChannels 2, …, type NVL/PIX, …": the graph's path type.
fn pattern_info(st: &mut State, pre: &Prefix, msg: &str, _: &str) -> bool {
    if !msg.starts_with("Pattern ") {
        return false;
    }
    if let Some(t) = field(msg, "type") {
        let t = t.trim_end_matches(',').to_string();
        if st.has_start {
            let ci = st.comm_for(pre);
            if let Some(c) = st.log.comms.get_mut(ci) {
                if !c.graph_types.contains(&t) {
                    c.graph_types.push(t);
                }
            }
        } else if !st.pending_graph.contains(&t) {
            st.pending_graph.push(t);
        }
    }
    true
}

/// "16 coll channels, 16 collnet channels, 0 nvls channels, …".
fn channel_count_info(st: &mut State, pre: &Prefix, msg: &str, lower: &str) -> bool {
    if !(lower.contains(" channels") && lower.contains("coll channels")) {
        return false;
    }
    let counts = channel_counts(msg);
    let ci = comm_for_fact(st, pre);
    if let Some(c) = st.log.comms.get_mut(ci) {
        for (kind, n) in counts {
            match kind.as_str() {
                "coll" => c.coll_channels = Some(n),
                "nvls" => {
                    c.nvls_channels = Some(n);
                    c.nvls |= n > 0;
                }
                // Not evidence of CollNet: 2.21-2.28 print the ring count here.
                "collnet" => c.collnet_channels = Some(n),
                _ => {}
            }
        }
    }
    true
}

/// "NVLS comm 0x…" and "Connected NVLS …": the communicator uses NVLS.
fn nvls_comm_info(st: &mut State, pre: &Prefix, msg: &str, lower: &str) -> bool {
    if !(msg.starts_with("NVLS comm ") || lower.starts_with("connected nvls")) {
        return false;
    }
    mark_comm(st, pre, |c| c.nvls = true);
    true
}

/// "Connected CollNet …", "CollNet chains …", "CollNet … via COLLNET": the
/// communicator uses CollNet.
fn collnet_info(st: &mut State, pre: &Prefix, msg: &str, lower: &str) -> bool {
    if !(lower.starts_with("connected collnet")
        || lower.starts_with("collnet chains")
        || lower.contains(" connected collnet")
        || (msg.starts_with("CollNet ") && msg.contains("via COLLNET")))
    {
        return false;
    }
    mark_comm(st, pre, |c| c.collnet = true);
    true
}

/// Set a fact on the communicator a line is about (see [`comm_for_fact`]).
fn mark_comm(st: &mut State, pre: &Prefix, set: impl FnOnce(&mut CommLog)) {
    let ci = comm_for_fact(st, pre);
    if let Some(c) = st.log.comms.get_mut(ci) {
        set(c);
    }
}

/// "… Bytes -> Algo 1 proto 2 time …" (NCCL_DEBUG_SUBSYS=TUNING): the algorithm and
/// protocol a call used.
fn algo_info(st: &mut State, pre: &Prefix, msg: &str, _: &str) -> bool {
    let Some(a) = msg.find("Bytes -> Algo ") else {
        return false;
    };
    let rest = &msg[a + 14..];
    let algo = rest.split_whitespace().next().unwrap_or("");
    let proto = field(rest, "proto").unwrap_or("");
    if !algo.is_empty() && !proto.is_empty() {
        let name = format!("{}/{}", algo_name(algo), proto_name(proto));
        let ci = comm_for_fact(st, pre);
        if let Some(c) = st.log.comms.get_mut(ci) {
            if !c.algorithms.contains(&name) {
                c.algorithms.push(name);
            }
        }
    }
    true
}

/// The communicator a per-communicator fact (channel counts, NVLS) belongs to: in
/// START-less logs the facts come before the COMPLETE line, like connections.
fn comm_for_fact(st: &mut State, pre: &Prefix) -> usize {
    if st.has_start {
        return st.comm_for(pre);
    }
    // A placeholder that the next COMPLETE line adopts.
    match st.log.comms.last() {
        Some(c) if !c.complete => st.log.comms.len() - 1,
        _ => st.new_comm(CommLog {
            comm: "?".into(),
            ..CommLog::default()
        }),
    }
}

fn gdr_line(st: &mut State, msg: &str) {
    let net = msg
        .strip_prefix("NET/")
        .map(|r| r.chars().take_while(|c| *c != ' ' && *c != ':').collect())
        .unwrap_or_else(|| "IB".to_string());
    if net_family(&net) == "Socket" {
        return; // NCCL 2.19+ prints it for sockets too; meaningless there
    }
    let enabled = msg.contains("Enabled");
    let after = msg.find("HCA ").map(|i| &msg[i + 4..]).unwrap_or("");
    // "for GPU 1a000 / HCA 1a000 (distance ...)" names the adapter by a hex id.
    let hca_index = if msg.contains("for GPU") {
        None
    } else {
        after
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
    };
    let hca = after
        .find('\'')
        .and_then(|o| after.get(o + 1..))
        .and_then(|r| r.split('\'').next())
        .filter(|n| !n.is_empty())
        .map(String::from);
    let g = GdrState {
        net,
        hca_index,
        hca,
        enabled,
    };
    if !st.log.gdr.contains(&g) {
        st.log.gdr.push(g);
    }
}

fn comm_line(st: &mut State, pre: &Prefix, msg: &str) {
    let comm = field(msg, "comm").unwrap_or("?").to_string();
    let comm_id = field(msg, "commId").map(String::from);
    if let Some(r) = num(field(msg, "rank")) {
        st.place(r, &pre.host);
    }
    let fill = |c: &mut CommLog| {
        c.rank = num(field(msg, "rank")).or(c.rank);
        c.nranks = num(field(msg, "nranks"))
            .or(num(field(msg, "nRanks")))
            .or(c.nranks);
        c.cuda_dev = num(field(msg, "cudaDev")).or(c.cuda_dev);
        c.bus_id = field(msg, "busId").map(String::from).or(c.bus_id.take());
        if c.comm_id.is_none() {
            c.comm_id = field(msg, "commId").map(String::from);
        }
        if c.pid.is_none() {
            c.host = pre.host.clone();
            c.pid = pre.pid;
        }
    };
    // (two processes' communicators may even share a pointer value)
    let same = |c: &CommLog| {
        c.comm == comm
            && match (&c.comm_id, &comm_id) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
            && match (c.pid, pre.pid) {
                (Some(a), Some(b)) => a == b && c.host == pre.host,
                _ => true,
            }
    };
    if msg.contains("- Init START") {
        let mut c = CommLog {
            comm: comm.clone(),
            started: true,
            ..CommLog::default()
        };
        fill(&mut c);
        // Facts logged before the START line of the first communicator.
        let placeholder = st
            .log
            .comms
            .last()
            .is_some_and(|l| l.comm == "?" && !l.started && !l.complete);
        let ci = if placeholder {
            let i = st.log.comms.len() - 1;
            if let Some(slot) = st.log.comms.get_mut(i) {
                slot.comm = c.comm;
                slot.started = true;
                fill(slot);
            }
            i
        } else {
            st.new_comm(c)
        };
        st.set_current(pre, ci);
        if let Some(t) = pre.tid {
            st.by_tid.insert((pre.host.clone(), pre.pid, t), ci);
        }
        return;
    }
    // COMPLETE.
    let found = st
        .log
        .comms
        .iter()
        .rposition(|c| c.started && !c.complete && same(c))
        .or_else(|| {
            st.log
                .comms
                .iter()
                .rposition(|c| c.comm == "?" && !c.started && !c.complete)
        });
    let ci = match found {
        Some(i) => i,
        None => st.new_comm(CommLog::default()),
    };
    if let Some(c) = st.log.comms.get_mut(ci) {
        c.comm = comm;
        c.complete = true;
        fill(c);
        for t in std::mem::take(&mut st.pending_graph) {
            if !c.graph_types.contains(&t) {
                c.graph_types.push(t);
            }
        }
    }
    for l in std::mem::take(&mut st.pending) {
        st.add_link(ci, l);
    }
    st.set_current(pre, ci);
}

/// How one network carried connections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetUse {
    /// NCCL's name ("IB", "Socket", "IBext_v8").
    pub net: String,
    /// "IB", "Socket" or "plugin" ([`net_family`]).
    pub family: String,
    /// Adapters or interfaces used ("mlx5_0", "eth0"), sorted.
    pub devices: Vec<String>,
    /// Distinct connections, and of them those with GPUDirect RDMA.
    pub links: u64,
    /// Of `links`, those with GPUDirect RDMA, a count.
    pub gdr_links: u64,
}

/// The transports seen on one kind of path (inside nodes or between them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Transports {
    /// P2P modes ("CUMEM", "IPC/read", "direct pointer"), sorted.
    pub p2p: Vec<String>,
    /// Path types of the graph search inside a node ("NVL", "PIX", "SYS"), sorted.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Some connection went through shared memory (SHM).
    pub shm: bool,
    /// The network transports used, one per NCCL network name.
    pub net: Vec<NetUse>,
    /// A communicator used NVLS (NVLink SHARP).
    pub nvls: bool,
    /// A communicator used CollNet.
    pub collnet: bool,
    /// Transports NCCL named that burnin does not know.
    pub other: Vec<String>,
    /// Distinct connections counted.
    pub links: u64,
}

fn insert_sorted(v: &mut Vec<String>, s: &str) {
    if let Err(i) = v.binary_search_by(|x| x.as_str().cmp(s)) {
        v.insert(i, s.to_string());
    }
}

impl Transports {
    /// Count one connection; `device` names a network device by (net, index).
    pub fn add(&mut self, via: &Via, device: &dyn Fn(&str, usize) -> String) {
        self.links += 1;
        match via {
            Via::P2p { mode } => {
                let base = mode.split('/').next().unwrap_or(mode).to_string();
                insert_sorted(&mut self.p2p, &base);
            }
            Via::Shm { .. } => self.shm = true,
            Via::Net { net, dev, gdr, .. } => {
                let name = device(net, *dev);
                let u = match self.net.iter().position(|u| &u.net == net) {
                    Some(i) => &mut self.net[i],
                    None => {
                        self.net.push(NetUse {
                            net: net.clone(),
                            family: net_family(net).to_string(),
                            ..NetUse::default()
                        });
                        let last = self.net.len() - 1;
                        &mut self.net[last]
                    }
                };
                u.links += 1;
                if *gdr {
                    u.gdr_links += 1;
                }
                insert_sorted(&mut u.devices, &name);
            }
            Via::Other { text } => insert_sorted(&mut self.other, text),
        }
    }

    /// Add everything of `o`.
    pub fn merge(&mut self, o: &Transports) {
        for p in &o.p2p {
            insert_sorted(&mut self.p2p, p);
        }
        for p in &o.paths {
            insert_sorted(&mut self.paths, p);
        }
        self.shm |= o.shm;
        self.nvls |= o.nvls;
        self.collnet |= o.collnet;
        for x in &o.other {
            insert_sorted(&mut self.other, x);
        }
        self.links += o.links;
        for u in &o.net {
            match self.net.iter_mut().find(|m| m.net == u.net) {
                Some(m) => {
                    m.links += u.links;
                    m.gdr_links += u.gdr_links;
                    for d in &u.devices {
                        insert_sorted(&mut m.devices, d);
                    }
                }
                None => self.net.push(u.clone()),
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.links == 0 && !self.nvls && !self.collnet
    }

    /// Whether any connection went over sockets.
    pub fn uses_socket(&self) -> bool {
        self.net.iter().any(|u| u.family == "Socket" && u.links > 0)
    }

    /// Distinct InfiniBand/RoCE adapters used.
    pub fn ib_devices(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for u in self.net.iter().filter(|u| u.family == "IB") {
            for d in &u.devices {
                insert_sorted(&mut v, d);
            }
        }
        v
    }

    /// One line: "P2P/CUMEM over NVLink, NVLS" or "NET/IB over mlx5_0, mlx5_1
    /// (GPUDirect RDMA)" or "NET/Socket over eth0".
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.p2p.is_empty() {
            let over = match self.paths.as_slice() {
                [] => String::new(),
                [p] if p == "NVL" => " over NVLink".into(),
                [p] if p == "C2C" => " over C2C".into(),
                ps if ps.iter().all(|p| p == "NVL" || p == "NVB") => " over NVLink".into(),
                ps => format!(" over PCIe ({})", ps.join(", ")),
            };
            parts.push(format!(
                "P2P/{}{over}",
                self.p2p
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join("+")
            ));
        }
        if self.shm {
            parts.push("SHM (host memory)".into());
        }
        for u in &self.net {
            let gdr = match (u.family.as_str(), u.gdr_links, u.links) {
                ("Socket", _, _) => String::new(),
                (_, 0, _) => " (no GPUDirect RDMA)".into(),
                (_, g, l) if g == l => " (GPUDirect RDMA)".into(),
                (_, g, l) => format!(" (GPUDirect RDMA on {g} of {l} connections)"),
            };
            parts.push(format!("NET/{} over {}{gdr}", u.net, u.devices.join(", ")));
        }
        if self.nvls {
            parts.push("NVLS".into());
        }
        if self.collnet {
            parts.push("CollNet".into());
        }
        for o in &self.other {
            parts.push(o.clone());
        }
        if parts.is_empty() {
            "none seen".into()
        } else {
            parts.join("; ")
        }
    }
}

impl NcclLog {
    /// The adapter or interface name of network device `dev` of `net`
    /// ("mlx5_3"), from the `NET/... : Using` lines; "IB/3" when unknown.
    pub fn device_name(&self, net: &str, dev: usize) -> String {
        let exact = self
            .net_devices
            .iter()
            .find(|d| d.net == net && d.index == dev);
        let family = net_family(net);
        exact
            .or_else(|| {
                self.net_devices
                    .iter()
                    .find(|d| net_family(&d.net) == family && d.index == dev)
            })
            .map(|d| d.name.clone())
            .unwrap_or_else(|| format!("{net}/{dev}"))
    }

    /// Whether GPUDirect RDMA was reported enabled for the adapters it names: Some(true)
    /// when every such line says Enabled, Some(false) when every one says Disabled.
    pub fn gdr_enabled(&self) -> Option<bool> {
        let ib: Vec<&GdrState> = self
            .gdr
            .iter()
            .filter(|g| net_family(&g.net) != "Socket")
            .collect();
        if ib.is_empty() {
            None
        } else if ib.iter().all(|g| g.enabled) {
            Some(true)
        } else if ib.iter().all(|g| !g.enabled) {
            Some(false)
        } else {
            None
        }
    }
}

/// What a log says, condensed: the transports between ranks of one node (`intra`)
/// and between nodes (`inter`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclLogSummary {
    pub version: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub network: Option<String>,
    pub net_devices: Vec<NetDevice>,
    pub no_ib_device: bool,
    pub gdr: Vec<GdrState>,
    pub nvls_available: Option<bool>,
    pub comms: usize,
    pub intra: Transports,
    pub inter: Transports,
    /// Network connections whose two ranks the log does not place on hosts: intra-
    /// or inter-node cannot be told from the log alone (NCCL takes the network inside
    /// a node too when P2P and SHM are off).
    #[serde(default)]
    pub unknown: Transports,
    /// aws-ofi-nccl's provider ("efa", "cxi").
    #[serde(default)]
    pub ofi_provider: Option<String>,
    /// Hosts named in the lines' prefixes.
    #[serde(default)]
    pub hosts: Vec<String>,
    pub algorithms: Vec<String>,
    pub warnings: Vec<String>,
}

/// Add one communicator's connections to `intra`/`inter`; `same_node(from, to)` says
/// whether two communicator ranks share a node (None: unknown, then network
/// connections count as inter-node and the rest as intra-node). For callers with a
/// node map; [`classify_known`] keeps the unknown apart.
pub fn classify(
    log: &NcclLog,
    comm: &CommLog,
    same_node: &dyn Fn(usize, usize) -> Option<bool>,
    intra: &mut Transports,
    inter: &mut Transports,
) {
    let mut unknown = Transports::default();
    classify_known(log, comm, same_node, intra, inter, &mut unknown);
    inter.merge(&unknown);
}

/// The host of each rank of `comm` that the log's Init lines place: every process
/// in the stream that logged a communicator with the same commId names its rank and
/// host in its line prefix (one process with several GPUs: all on its host).
pub fn rank_hosts(log: &NcclLog, comm: &CommLog) -> HashMap<usize, String> {
    let mut m: HashMap<usize, String> = log
        .rank_hosts
        .iter()
        .map(|(r, h)| (*r, h.clone()))
        .collect();
    let peers = log.comms.iter().filter(|c| {
        std::ptr::eq(*c, comm) || (comm.comm_id.is_some() && c.comm_id == comm.comm_id)
    });
    for c in peers {
        if let (Some(r), Some(h)) = (c.rank, c.host.as_ref().or(log.host.as_ref())) {
            m.insert(r, h.clone());
        }
    }
    m
}

/// [`classify`] from facts only: `same_node`, else the hosts the log places the two
/// ranks on ([`rank_hosts`]); P2P and SHM are inside a node by nature; a network
/// connection between ranks neither places goes to `unknown`, never guessed.
pub fn classify_known(
    log: &NcclLog,
    comm: &CommLog,
    same_node: &dyn Fn(usize, usize) -> Option<bool>,
    intra: &mut Transports,
    inter: &mut Transports,
    unknown: &mut Transports,
) {
    let device = |net: &str, dev: usize| log.device_name(net, dev);
    let hosts = rank_hosts(log, comm);
    let mut any_intra = false;
    for l in &comm.links {
        let from_log = match (hosts.get(&l.from), hosts.get(&l.to)) {
            (Some(a), Some(b)) => Some(a == b),
            _ => None,
        };
        let local = same_node(l.from, l.to)
            .or(from_log)
            .or((!l.via.is_network()).then_some(true));
        match local {
            Some(true) => {
                any_intra = true;
                intra.add(&l.via, &device);
            }
            Some(false) => inter.add(&l.via, &device),
            None => unknown.add(&l.via, &device),
        }
    }
    if comm.nvls {
        // NVLink SHARP works through the node's NVSwitches.
        intra.nvls = true;
    }
    if comm.collnet {
        // CollNet (SHARP) reduces in the network switches.
        inter.collnet = true;
    }
    if any_intra || comm.nvls {
        for t in &comm.graph_types {
            if let Some(first) = t.split('/').next().filter(|s| !s.is_empty()) {
                insert_sorted(&mut intra.paths, first);
            }
        }
    }
}

/// The whole file condensed: a connection is intra- or inter-node as the log's own
/// facts say ([`classify_known`]), else of unknown tier.
pub fn summarize(log: &NcclLog) -> NcclLogSummary {
    let mut intra = Transports::default();
    let mut inter = Transports::default();
    let mut unknown = Transports::default();
    let mut algorithms: BTreeSet<String> = BTreeSet::new();
    for c in &log.comms {
        classify_known(log, c, &|_, _| None, &mut intra, &mut inter, &mut unknown);
        algorithms.extend(c.algorithms.iter().cloned());
    }
    NcclLogSummary {
        version: log.version.clone(),
        host: log.host.clone(),
        pid: log.pid,
        network: log.network.clone(),
        net_devices: log.net_devices.clone(),
        no_ib_device: log.no_ib_device,
        gdr: log.gdr.clone(),
        nvls_available: log.nvls_available,
        comms: log.comms.len(),
        intra,
        inter,
        unknown,
        ofi_provider: log.ofi_provider.clone(),
        hosts: log.hosts.clone(),
        algorithms: algorithms.into_iter().collect(),
        warnings: log.warnings.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn via_forms() {
        assert_eq!(
            Via::parse("NET/IB/3/GDRDMA"),
            Via::Net {
                net: "IB".into(),
                dev: 3,
                gdr: true,
                proxy: None,
                shared: false
            }
        );
        assert_eq!(
            Via::parse("NET/IB/2(5)/GDRDMA/Shared"),
            Via::Net {
                net: "IB".into(),
                dev: 2,
                gdr: true,
                proxy: Some(5),
                shared: true
            }
        );
        assert_eq!(
            Via::parse("NET/AWS Libfabric/1/GDRDMA"),
            Via::Net {
                net: "AWS Libfabric".into(),
                dev: 1,
                gdr: true,
                proxy: None,
                shared: false
            }
        );
        assert!(matches!(
            Via::parse("NET/Socket/0"),
            Via::Net { gdr: false, .. }
        ));
        assert_eq!(
            Via::parse("P2P/CUMEM/read"),
            Via::P2p {
                mode: "CUMEM/read".into()
            }
        );
        assert!(matches!(
            Via::parse("direct shared memory"),
            Via::Shm { .. }
        ));
        assert!(matches!(Via::parse("NET/"), Via::Other { .. }));
        assert!(matches!(Via::parse("NET/IB/x"), Via::Other { .. }));
    }

    #[test]
    fn prefixes_and_channel_lines() {
        let p = parse_prefix("gpu-node-01:1234:1299 [3] ");
        assert_eq!(p.host.as_deref(), Some("gpu-node-01"));
        assert_eq!((p.pid, p.tid, p.dev), (Some(1234), Some(1299), Some(3)));
        let p = parse_prefix("[0] h100-worker-1:497888:497888 [0]");
        assert_eq!(p.host.as_deref(), Some("h100-worker-1"));
        assert_eq!(parse_prefix("garbage"), Prefix::default());
        let (f, t, d, v) =
            parse_channel("Channel 01/0 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA")
                .unwrap();
        assert_eq!((f, t, d.as_deref()), (2, 0, Some("receive")));
        assert!(matches!(
            v,
            Via::Net {
                dev: 5,
                gdr: true,
                ..
            }
        ));
        let (f, t, d, _) = parse_channel("Ring 00 : 15 -> 0 [receive] via NET/Socket/0").unwrap();
        assert_eq!((f, t, d.as_deref()), (15, 0, Some("receive")));
        assert!(parse_channel("Channel 00 :    0   1   2   3").is_none());
        assert!(parse_channel("Channel 00 : x -> 1 via P2P/IPC").is_none());
    }

    #[test]
    fn devices_of_using_lines() {
        let d = parse_devices(
            "IB",
            "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        );
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[1].name.as_str(), d[1].detail.as_str()),
            ("mlx5_1", "1/RoCE")
        );
        let d = parse_devices(
            "IB",
            "[0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB} [1]mlx5_2:1/IB [RO]",
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!((d[0].index, d[0].name.as_str()), (0, "mlx5_0+mlx5_1"));
        assert_eq!((d[1].index, d[1].name.as_str()), (1, "mlx5_2"));
        let d = parse_devices("Socket", "[0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>");
        assert_eq!(d[1].name, "eth1");
        assert!(parse_devices("IB", "[x]y [3] []").is_empty());
    }

    #[test]
    fn connections_after_init_complete_belong_to_the_last_started_comm() {
        // NCCL 2.22+ connects lazily: channel lines come after Init COMPLETE.
        let log = parse(
            "h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init START\n\
             h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init COMPLETE\n\
             h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
             h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM\n\
             h:1:3 [0] NCCL INFO comm 0xb rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2 - Init START\n\
             h:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/IB/0/GDRDMA\n",
        );
        assert_eq!(log.comms.len(), 2);
        assert_eq!(log.comms[0].links.len(), 1);
        assert_eq!(log.comms[0].links[0].channels, 2);
        assert_eq!(log.comms[1].nranks, Some(4));
        assert!(matches!(log.comms[1].links[0].via, Via::Net { .. }));
    }

    #[test]
    fn without_start_lines_connections_belong_to_the_next_complete() {
        let log = parse(
            "h:1:2 [0] NCCL INFO Channel 00 : 0[18000] -> 1[2a000] via P2P/IPC\n\
             h:1:2 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE\n\
             h:1:3 [0] NCCL INFO Channel 00 : 0[18000] -> 1[18000] [send] via NET/Socket/0\n\
             h:1:3 [0] NCCL INFO comm 0xb rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE\n",
        );
        assert_eq!(log.comms.len(), 2);
        assert!(matches!(log.comms[0].links[0].via, Via::P2p { .. }));
        assert!(matches!(log.comms[1].links[0].via, Via::Net { .. }));
    }

    #[test]
    fn anything_goes_without_panicking() {
        for s in [
            "",
            "NCCL INFO",
            "NCCL INFO Channel",
            "NCCL INFO Channel : -> via",
            "NCCL INFO NET/",
            "NCCL INFO NET/IB : Using [",
            "NCCL INFO GPU Direct RDMA Enabled for HCA '",
            "NCCL INFO comm - Init COMPLETE",
            "NCCL INFO 5 Bytes -> Algo ",
            "ä:ö:ü [ NCCL INFO Channel 0 : 1 -> 2 via NET/ä/1",
            "NCCL WARN",
            "NCCL version",
            ":::: []] NCCL INFO coll channels, x nvls channels",
        ] {
            let log = parse(s);
            let _ = summarize(&log);
        }
    }
}
