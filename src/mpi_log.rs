//! Which Open MPI transports (BTLs) carried a rank's traffic: a parser of the
//! verbose output of Open MPI's BTL and PML frameworks.
//!
//! With `btl_base_verbose` at 40 and `pml_base_verbose` at 10, Open MPI 4.1 prints,
//! each line prefixed `[host:pid] `:
//! - the PML it selected: `select: component ob1 selected` (ucx and cm do not use
//!   BTLs; then no BTL line follows);
//! - the TCP BTL's interfaces: `btl:tcp: using ipv4 interface eth0`;
//! - for every peer the BML adds, the BTL(s) it will send over:
//!   `mca: bml: Using vader btl for send to [[11480,1],1] on node vm` (one line per
//!   BTL module: TCP over two interfaces gives two lines). Peers on the same node
//!   are added at `MPI_Init`; with the default `mpi_add_procs_cutoff` of 0, peers on
//!   other nodes when the rank first talks to them — so the lines name exactly the
//!   peers that carried traffic;
//! - TCP connections: `btl: tcp: attempting to connect() to [[11480,1],1] address
//!   10.0.0.2 on port 1024`, `btl:tcp: now connected to 10.0.0.2, process
//!   [[11480,1],0]`.
//!
//! The peer's last number (`[[jobid,1],vpid]`, or Open MPI 5's `[prterun-host-1@1,3]`)
//! is its rank in MPI_COMM_WORLD. Pure and tolerant: unknown lines are ignored.
use serde::{Deserialize, Serialize};

/// The BTLs one rank chose to send to one peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerBtl {
    /// World rank of the peer.
    pub peer: usize,
    /// The peer's node as Open MPI names it.
    pub node: String,
    /// BTL components, in the order printed, each once ("vader", "tcp").
    pub btls: Vec<String>,
    /// BTL modules (a TCP module per interface).
    pub modules: usize,
}

/// What one rank's verbose output says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MpiLog {
    pub pid: Option<u32>,
    /// The PML selected ("ob1", "ucx", "cm").
    pub pml: Option<String>,
    /// BTL components initialised ("tcp", "vader", "self").
    pub btls_ready: Vec<String>,
    /// Interfaces the TCP BTL uses ("eth0").
    pub tcp_interfaces: Vec<String>,
    /// Peers, by world rank.
    pub peers: Vec<PeerBtl>,
    /// TCP connections made or accepted: (peer world rank, remote address).
    pub tcp_connections: Vec<(usize, String)>,
    /// Lines read.
    pub lines: usize,
}

/// Split "[host:pid] message" into (pid, message).
fn split_prefix(line: &str) -> (Option<u32>, &str) {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some(end) = rest.find("] ") {
            let head = &rest[..end];
            if !head.starts_with('[') {
                let pid = head.rsplit(':').next().and_then(|p| p.parse().ok());
                return (pid, rest[end + 2..].trim());
            }
        }
    }
    (None, t.trim())
}

/// The world rank of a process name: `[[11480,1],3]` → 3, `[prterun-h-1@1,3]` → 3.
fn vpid(name: &str) -> Option<usize> {
    let end = name.rfind(']')?;
    let head = &name[..end];
    let comma = head.rfind(',')?;
    head[comma + 1..].trim().trim_end_matches(']').parse().ok()
}

/// Words of Open MPI's verbose output at the levels burnin sets: lines starting with
/// these (after the `[host:pid] ` prefix) are not error messages.
const VERBOSE: [&str; 10] = [
    "mca: base: ",
    "mca: bml: ",
    "select: ",
    "selected ",
    "check:select: ",
    "btl: tcp: ",
    "btl:tcp: ",
    "btl: vader",
    "btl:vader",
    "btl: self",
];

/// Whether a line is verbose output of the frameworks burnin turned up (anything else
/// Open MPI writes there — errors, warnings — goes on to the terminal).
pub fn is_verbose(line: &str) -> bool {
    let (pid, msg) = split_prefix(line);
    pid.is_some() && VERBOSE.iter().any(|v| msg.starts_with(v))
}

/// Append `s` unless it is empty or there already.
pub(crate) fn push_once(v: &mut Vec<String>, s: &str) {
    if !s.is_empty() && !v.iter().any(|x| x == s) {
        v.push(s.to_string());
    }
}

/// Read one rank's captured output; with `pid`, lines of other processes (a launcher
/// daemon writing to the same file) are skipped.
pub fn parse(text: &str, pid: Option<u32>) -> MpiLog {
    let mut log = MpiLog {
        pid,
        ..MpiLog::default()
    };
    for raw in text.lines() {
        log.lines += 1;
        let (line_pid, msg) = split_prefix(raw);
        if pid.is_some() && line_pid.is_some() && line_pid != pid {
            continue;
        }
        if log.pid.is_none() {
            log.pid = line_pid;
        }
        if let Some(rest) = msg.strip_prefix("mca: bml: Using ") {
            // "vader btl for send to [[11480,1],1] on node vm"
            let btl = rest.split_whitespace().next().unwrap_or("");
            let (Some(to), Some(on)) = (rest.find(" to "), rest.find(" on node ")) else {
                continue;
            };
            if to + 4 > on {
                continue;
            }
            let Some(peer) = vpid(&rest[to + 4..on]) else {
                continue;
            };
            let node = rest[on + 9..].trim();
            match log.peers.iter_mut().find(|p| p.peer == peer) {
                Some(p) => {
                    push_once(&mut p.btls, btl);
                    p.modules += 1;
                }
                None => log.peers.push(PeerBtl {
                    peer,
                    node: node.to_string(),
                    btls: vec![btl.to_string()],
                    modules: 1,
                }),
            }
        } else if let Some(rest) = msg.strip_prefix("select: component ") {
            if let Some(name) = rest.strip_suffix(" selected") {
                log.pml = Some(name.trim().to_string());
            }
        } else if let Some(rest) = msg.strip_prefix("select: init of component ") {
            if let Some(name) = rest.strip_suffix(" returned success") {
                push_once(&mut log.btls_ready, name.trim());
            }
        } else if let Some(rest) = msg.strip_prefix("btl:tcp: using ") {
            // "ipv4 interface eth0"
            if let Some(i) = rest.find("interface ") {
                push_once(&mut log.tcp_interfaces, rest[i + 10..].trim());
            }
        } else if let Some(rest) = msg.strip_prefix("btl: tcp: attempting to connect() to ") {
            // "[[11480,1],1] address 10.0.0.2 on port 1024"
            let peer = rest.split_whitespace().next().and_then(vpid);
            let addr = rest
                .find("address ")
                .and_then(|i| rest[i + 8..].split_whitespace().next());
            if let (Some(peer), Some(addr)) = (peer, addr) {
                let c = (peer, addr.to_string());
                if !log.tcp_connections.contains(&c) {
                    log.tcp_connections.push(c);
                }
            }
        } else if let Some(rest) = msg.strip_prefix("btl:tcp: now connected to ") {
            // "10.0.0.2, process [[24403,1],0]"
            let addr = rest.split(',').next().unwrap_or("").trim();
            let peer = rest.find("process ").and_then(|i| vpid(&rest[i + 8..]));
            if let (Some(peer), false) = (peer, addr.is_empty()) {
                let c = (peer, addr.to_string());
                if !log.tcp_connections.contains(&c) {
                    log.tcp_connections.push(c);
                }
            }
        }
    }
    log.peers.sort_by_key(|p| p.peer);
    log
}

/// Words for a BTL in a report line.
pub fn btl_words(btl: &str, tcp_interfaces: &[String]) -> String {
    match btl {
        "vader" | "sm" => format!("shared memory ({btl})"),
        "smcuda" => "shared memory with CUDA IPC (smcuda)".into(),
        "tcp" if !tcp_interfaces.is_empty() => format!("tcp over {}", tcp_interfaces.join(", ")),
        "tcp" => "tcp".into(),
        "openib" => "InfiniBand verbs (openib)".into(),
        "uct" => "UCX transports (uct)".into(),
        "ofi" => "libfabric (ofi)".into(),
        "usnic" => "Cisco usNIC (usnic)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_process_names() {
        assert_eq!(
            split_prefix("[vm:16427] select: x"),
            (Some(16427), "select: x")
        );
        assert_eq!(split_prefix("no prefix"), (None, "no prefix"));
        assert_eq!(vpid("[[11480,1],3]"), Some(3));
        assert_eq!(vpid("[prterun-h-1@1,12]"), Some(12));
        assert_eq!(vpid("[[x]"), None);
        assert!(is_verbose(
            "[vm:1] mca: bml: Using vader btl for send to [[1,1],1] on node vm"
        ));
        assert!(!is_verbose(
            "[vm:1] [[1,1],0][btl_tcp_endpoint.c:626] connect() failed"
        ));
        assert!(!is_verbose("mca: base: without a prefix is the user's"));
    }

    #[test]
    fn tcp_peers_and_connections() {
        let log = parse(
            "[h:7] select: component ob1 selected\n\
             [h:7] btl:tcp: using ipv4 interface eth0\n\
             [h:7] btl:tcp: using ipv6 interface eth0\n\
             [h:7] mca: bml: Using self btl for send to [[5,1],0] on node h\n\
             [h:7] mca: bml: Using tcp btl for send to [[5,1],2] on node n1\n\
             [h:7] mca: bml: Using tcp btl for send to [[5,1],2] on node n1\n\
             [h:9] mca: bml: Using vader btl for send to [[5,1],3] on node h\n\
             [h:7] btl: tcp: attempting to connect() to [[5,1],2] address 10.0.0.2 on port 1024\n\
             [h:7] btl:tcp: now connected to 10.0.0.2, process [[5,1],2]\n",
            Some(7),
        );
        assert_eq!(log.pml.as_deref(), Some("ob1"));
        assert_eq!(log.tcp_interfaces, vec!["eth0"]);
        assert_eq!(log.peers.len(), 2, "{log:?}");
        assert_eq!(log.peers[1].btls, vec!["tcp"]);
        assert_eq!(log.peers[1].modules, 2);
        assert_eq!(log.tcp_connections, vec![(2, "10.0.0.2".to_string())]);
    }

    #[test]
    fn garbage_is_ignored() {
        for s in [
            "[",
            "[]",
            "[a:b] mca: bml: Using",
            "[a:1] mca: bml: Using x btl for send to  on node ",
            "[a:1] mca: bml: Using x btl on node  for send to [[1,1],2]",
            "[a:1] btl: tcp: attempting to connect() to ",
            "[a:1] btl:tcp: now connected to , process [[1,1],ä]",
        ] {
            let _ = parse(s, None);
            let _ = is_verbose(s);
        }
    }
}
