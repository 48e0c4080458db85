//! A job's collectives, read from what the job wrote: NCCL's COLL log lines or PyTorch's
//! Flight Recorder JSON dumps. Pure and tolerant: an unknown line is skipped, a
//! malformed one is counted in the warnings, nothing panics.
//!
//! **NCCL COLL logs** (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL`): every call prints
//! `<Name>: opCount <hex> sendbuff <p> recvbuff <p> count <n> datatype <d> op <o> root
//! <r> comm <ptr> [nranks=<n>] stream <p>` (NCCL's `enqueue.cc`), and every
//! communicator `comm <ptr> rank <r> nranks <n> ... commId 0x<hash> - Init COMPLETE`
//! (`init.cc`). A process is its line prefix's `host:pid`; the communicator with the
//! most ranks gives each process its global rank; processes whose communicators share
//! a commId are one communicator, its members ordered by their rank in it. The counts
//! are NCCL's: all_gather's `count` is each rank's send count, reduce_scatter's each
//! rank's receive count.
//!
//! **Flight Recorder** (`TORCH_NCCL_TRACE_BUFFER_SIZE=N`, `TORCH_NCCL_ENABLE_TIMING=1`,
//! dumped as JSON, one file per rank whose name ends in the rank): `pg_config` names
//! each process group's global ranks, `entries` the calls with `profiling_name`
//! (`nccl:all_reduce`), `input_sizes`, `input_dtypes`, `output_sizes`, `state` and
//! `duration_ms`. It is the timed format burnin reads: it carries each call's GPU time
//! on the source cluster and the process groups by name, with no log scraping.
use crate::kinds::{CollKind, Dtype, RedOp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Warnings kept (the first ones; the rest are counted).
const MAX_WARNINGS: usize = 20;

/// What a call does: a collective burnin has, or one side of a point-to-point pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Coll(CollKind),
    /// ncclSend to `peer` (the comm rank in `root`).
    Send,
    /// ncclRecv from `peer`.
    Recv,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Coll(k) => k.name(),
            Op::Send => "send",
            Op::Recv => "recv",
        }
    }
}

/// One call of one rank, as the trace says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceCall {
    /// Index into [`Trace::comms`].
    pub comm: usize,
    pub op: Op,
    /// Elements of the message in burnin's (nccl-tests') convention: all_gather's and
    /// reduce_scatter's are the whole output / input, n × NCCL's per-rank count.
    pub count: usize,
    pub dtype: Dtype,
    /// The trace's type when burnin replays it as another of the same size
    /// ("int64 as f64").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype_note: Option<String>,
    pub red: RedOp,
    /// Root (broadcast, reduce) or peer (send, recv), a rank of the communicator.
    pub root: usize,
    /// The call's time on the source cluster, when the trace has it (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_us: Option<f64>,
}

impl TraceCall {
    /// Bytes of the message (burnin's convention).
    pub fn bytes(&self) -> u64 {
        (self.count * self.dtype.size()) as u64
    }
    /// The same call in another job: comm, op, count, type, reduction and root.
    pub fn signature(&self) -> (usize, Op, usize, Dtype, RedOp, usize) {
        (
            self.comm, self.op, self.count, self.dtype, self.red, self.root,
        )
    }
}

/// One communicator of the trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceComm {
    /// commId (NCCL) or process group name (Flight Recorder).
    pub id: String,
    /// Its global ranks, in the order of their rank in it.
    pub members: Vec<usize>,
}

/// A job's collectives: its communicators and every rank's calls in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trace {
    /// "nccl-coll" or "flight-recorder".
    pub format: String,
    /// Ranks of the job.
    pub ranks: usize,
    pub comms: Vec<TraceComm>,
    /// Per global rank, its calls in the order it made them.
    pub calls: Vec<Vec<TraceCall>>,
    /// Per global rank, the host its log lines name (NCCL logs; empty when the trace
    /// does not say, as in Flight Recorder dumps).
    #[serde(default)]
    pub hosts: Vec<Option<String>>,
    pub warnings: Vec<String>,
    pub warnings_total: usize,
}

impl Trace {
    fn warn(&mut self, w: String) {
        self.warnings_total += 1;
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(w);
        }
    }
}

/// NCCL's `ncclDataType_t` as burnin replays it: the type, and a note when it is
/// another type of the same size.
pub fn nccl_dtype(d: u32) -> Option<(Dtype, Option<&'static str>)> {
    Some(match d {
        0 => (Dtype::U8, Some("int8 as u8")),
        1 => (Dtype::U8, None),
        2 => (Dtype::I32, None),
        3 => (Dtype::I32, Some("uint32 as i32")),
        4 => (Dtype::F64, Some("int64 as f64")),
        5 => (Dtype::F64, Some("uint64 as f64")),
        6 => (Dtype::F16, None),
        7 => (Dtype::F32, None),
        8 => (Dtype::F64, None),
        9 => (Dtype::Bf16, None),
        10 => (Dtype::U8, Some("fp8 e4m3 as u8")),
        11 => (Dtype::U8, Some("fp8 e5m2 as u8")),
        _ => return None,
    })
}

/// NCCL's `ncclRedOp_t` (0 sum, 1 prod, 2 max, 3 min, 4 avg).
pub fn nccl_op(o: u32) -> Option<RedOp> {
    Some(match o {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        _ => return None,
    })
}

/// The op of an NCCL call name, as `opName` prints it.
fn nccl_name(name: &str) -> Option<Op> {
    Some(match name {
        "AllReduce" => Op::Coll(CollKind::AllReduce),
        "AllGather" => Op::Coll(CollKind::AllGather),
        "ReduceScatter" => Op::Coll(CollKind::ReduceScatter),
        "Broadcast" | "Bcast" => Op::Coll(CollKind::Broadcast),
        "Reduce" => Op::Coll(CollKind::Reduce),
        "AlltoAll" | "AllToAll" => Op::Coll(CollKind::AllToAll),
        "Send" => Op::Send,
        "Recv" => Op::Recv,
        _ => return None,
    })
}

/// The value after `key ` in an NCCL message ("count 42" → "42").
fn after<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    let mut words = msg.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next();
        }
    }
    None
}

fn hex(s: Option<&str>) -> Option<u64> {
    u64::from_str_radix(s?.trim_start_matches("0x"), 16).ok()
}

/// One COLL line before the communicators are known: the process, the comm pointer.
struct RawCall {
    process: usize,
    /// host, pid and GPU of the line's prefix (the rank, when no Init line says).
    who: (String, u32, u32),
    comm_ptr: String,
    /// `[nranks=N]`.
    nranks: usize,
    /// NCCL's per-communicator call counter.
    op_count: u64,
    op: Op,
    nccl_count: usize,
    dtype: u32,
    red: u32,
    root: usize,
}

/// A communicator as one process logged it.
struct RawComm {
    rank: usize,
    nranks: usize,
    comm_id: Option<String>,
}

/// Read NCCL COLL logs: every file's lines, in order (one file per rank, or one
/// file with every rank's lines interleaved).
pub fn parse_nccl(texts: &[(&str, &str)]) -> Trace {
    let mut t = Trace {
        format: "nccl-coll".into(),
        ..Trace::default()
    };
    let mut processes: Vec<String> = Vec::new();
    let mut proc_hosts: Vec<Option<String>> = Vec::new();
    let mut comms: HashMap<(usize, String), RawComm> = HashMap::new();
    let mut raw: Vec<RawCall> = Vec::new();
    for (name, text) in texts {
        for (i, line) in text.lines().enumerate() {
            // The last "NCCL INFO" of the line: two processes' lines can be glued.
            let Some(at) = line.rfind("NCCL INFO ") else {
                continue;
            };
            let from = line[..at]
                .rfind("NCCL INFO ")
                .map_or(0, |p| p + "NCCL INFO ".len());
            let pre = crate::nccl_log::parse_prefix(&line[from..at]);
            let key = match (&pre.host, pre.pid) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                _ => name.to_string(),
            };
            let process = match processes.iter().position(|p| *p == key) {
                Some(p) => p,
                None => {
                    processes.push(key);
                    proc_hosts.push(pre.host.clone());
                    processes.len() - 1
                }
            };
            let msg = line[at + "NCCL INFO ".len()..].trim();
            if let Some(c) = comm_line(msg) {
                comms.insert((process, c.0), c.1);
            } else if let Some((name, rest)) = msg.split_once(": opCount ") {
                let who = (
                    pre.host.clone().unwrap_or_default(),
                    pre.pid.unwrap_or(0),
                    pre.dev.unwrap_or(0),
                );
                match coll_line(process, who, name, rest) {
                    Some(c) => raw.push(c),
                    None => t.warn(format!(
                        "{name}:{}: not a COLL line NCCL writes: {msg}",
                        i + 1
                    )),
                }
            }
        }
    }
    resolve(&mut t, &proc_hosts, &comms, raw);
    t
}

/// `comm 0x.. rank R nranks N ... [commId 0x..] - Init COMPLETE`: (pointer, comm).
fn comm_line(msg: &str) -> Option<(String, RawComm)> {
    if !msg.starts_with("comm 0x") || !msg.contains("Init COMPLETE") {
        return None;
    }
    Some((
        after(msg, "comm")?.to_string(),
        RawComm {
            rank: after(msg, "rank")?.parse().ok()?,
            nranks: after(msg, "nranks")?.parse().ok()?,
            comm_id: after(msg, "commId").map(str::to_string),
        },
    ))
}

/// The rest of a COLL line after `<Name>: opCount `.
fn coll_line(process: usize, who: (String, u32, u32), name: &str, rest: &str) -> Option<RawCall> {
    let op = nccl_name(name.split_whitespace().last()?)?;
    let op_count = hex(rest.split_whitespace().next())?;
    Some(RawCall {
        process,
        who,
        op_count,
        comm_ptr: after(rest, "comm")?.to_string(),
        nranks: after(rest, "[nranks=")
            .or_else(|| rest.split_once("[nranks=").map(|x| x.1))
            .and_then(|v| v.trim_end_matches(']').split(']').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        op,
        nccl_count: after(rest, "count")?.parse().ok()?,
        dtype: after(rest, "datatype")?.parse().ok()?,
        red: after(rest, "op")?.parse().ok()?,
        root: after(rest, "root")?.parse().ok()?,
    })
}

/// Global ranks from the largest communicator, communicators by commId, then each
/// call placed on its rank and communicator.
fn resolve(
    t: &mut Trace,
    proc_hosts: &[Option<String>],
    comms: &HashMap<(usize, String), RawComm>,
    raw: Vec<RawCall>,
) {
    if comms.is_empty() && !raw.is_empty() {
        return without_init(t, raw);
    }
    let processes = proc_hosts.len();
    // Each process's rank in the communicator with the most ranks.
    let world = comms.values().map(|c| c.nranks).max().unwrap_or(0);
    let mut global: Vec<Option<usize>> = vec![None; processes];
    let mut world_ids: Vec<&str> = comms
        .values()
        .filter(|c| c.nranks == world)
        .filter_map(|c| c.comm_id.as_deref())
        .collect();
    world_ids.sort_unstable();
    let world_id = world_ids.first().copied();
    for ((p, _), c) in comms {
        if c.nranks == world && (world_id.is_none() || c.comm_id.as_deref() == world_id) {
            global[*p] = Some(c.rank);
        }
    }
    if world == 0 || global.iter().any(|g| g.map_or(true, |g| g >= world)) || world != processes {
        t.warn(format!(
            "{processes} process(es) logged calls but the largest communicator's Init COMPLETE lines name {world} rank(s): \
             record with NCCL_DEBUG_SUBSYS=INIT,COLL, one line prefix (host:pid) per process"
        ));
        return;
    }
    t.ranks = world;
    t.hosts = vec![None; world];
    for (p, g) in global.iter().enumerate() {
        if let Some(g) = g {
            t.hosts[*g] = proc_hosts[p].clone();
        }
    }
    // Communicators by commId (or, without one, by pointer and size on one process).
    let mut by_id: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
    for ((p, ptr), c) in comms {
        let id = c
            .comm_id
            .clone()
            .unwrap_or_else(|| format!("{ptr}@{}", global[*p].unwrap_or(0)));
        by_id
            .entry(id)
            .or_default()
            .push((c.rank, global[*p].unwrap_or(0)));
    }
    let mut index: HashMap<String, usize> = HashMap::new();
    for (id, mut members) in by_id {
        members.sort_unstable();
        index.insert(id.clone(), t.comms.len());
        t.comms.push(TraceComm {
            id,
            members: members.into_iter().map(|(_, g)| g).collect(),
        });
    }
    t.calls = vec![Vec::new(); world];
    for r in raw {
        let Some(c) = comms.get(&(r.process, r.comm_ptr.clone())) else {
            t.warn(format!(
                "a call on comm {} that no Init COMPLETE line of its process names",
                r.comm_ptr
            ));
            continue;
        };
        let g = global[r.process].unwrap_or(0);
        let id = c
            .comm_id
            .clone()
            .unwrap_or_else(|| format!("{}@{g}", r.comm_ptr));
        let Some(&comm) = index.get(&id) else {
            continue;
        };
        match to_call(&r, comm, c.nranks) {
            Ok(call) => t.calls[g].push(call),
            Err(w) => t.warn(w),
        }
    }
}

/// A COLL line as a call on communicator `comm` of `nranks` ranks: NCCL's type, op and
/// per-rank count (all_gather: sent, reduce_scatter: received, alltoall: to each peer)
/// turned into burnin's (the whole buffer).
fn to_call(r: &RawCall, comm: usize, nranks: usize) -> Result<TraceCall, String> {
    let (Some((dtype, note)), Some(red)) = (nccl_dtype(r.dtype), nccl_op(r.red)) else {
        return Err(format!(
            "a call with datatype {} op {}: not NCCL's",
            r.dtype, r.red
        ));
    };
    let count = match r.op {
        Op::Coll(CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll) => {
            r.nccl_count * nranks
        }
        _ => r.nccl_count,
    };
    Ok(TraceCall {
        comm,
        op: r.op,
        count,
        dtype,
        dtype_note: note.map(str::to_string),
        red,
        root: r.root,
        source_us: None,
    })
}

/// A COLL log without Init lines (a log cut to its COLL lines, or NCCL_DEBUG_SUBSYS=COLL
/// alone): each (host, pid, GPU) of a prefix is a rank, in that order; each comm
/// pointer one rank's end of a communicator of the line's `[nranks=N]`; the ends of
/// one size that make the same calls form one communicator, N at a time in rank
/// order. Said in a warning: the real rank order needs the Init lines.
fn without_init(t: &mut Trace, raw: Vec<RawCall>) {
    let mut who: Vec<(String, u32, u32)> = raw.iter().map(|r| r.who.clone()).collect();
    who.sort();
    who.dedup();
    let rank_of = |w: &(String, u32, u32)| who.binary_search(w).unwrap_or(0);
    // Each end (rank, pointer): its size and its calls by opCount.
    type Calls = BTreeMap<u64, (Op, usize, u32, u32)>;
    let mut ends: BTreeMap<(usize, String), (usize, Calls)> = BTreeMap::new();
    for r in &raw {
        let e = ends
            .entry((rank_of(&r.who), r.comm_ptr.clone()))
            .or_insert((r.nranks, Calls::new()));
        e.1.insert(r.op_count, (r.op, r.nccl_count, r.dtype, r.red));
    }
    t.warn(format!(
        "no Init COMPLETE lines: {} rank(s) taken in (host, pid, GPU) order; record with NCCL_DEBUG_SUBSYS=INIT,COLL for the job's own rank order",
        who.len()
    ));
    // Group ends of one size that made the same call at every opCount both logged
    // (a log may start or end mid-step), at most N to a group.
    let mut comm_of: HashMap<(usize, String), usize> = HashMap::new();
    type Group = (usize, Vec<(usize, String)>, Calls);
    let mut groups: Vec<Group> = Vec::new();
    for (end, (n, calls)) in &ends {
        let fits = |g: &Group| {
            let common: Vec<_> = calls.keys().filter(|k| g.2.contains_key(k)).collect();
            g.0 == *n
                && g.1.len() < *n
                && !g.1.iter().any(|(r, _)| *r == end.0)
                && !common.is_empty()
                && common.iter().all(|k| g.2.get(k) == calls.get(k))
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some(g) => {
                g.1.push(end.clone());
                g.2.extend(calls.iter().map(|(k, v)| (*k, *v)));
            }
            None => groups.push((*n, vec![end.clone()], calls.clone())),
        }
    }
    // Groups joined through a later end (a, then b without a common opCount, then c
    // sharing one with each): merge while two still agree.
    let agree = |a: &Group, b: &Group| {
        let common: Vec<_> = a.2.keys().filter(|k| b.2.contains_key(k)).collect();
        a.0 == b.0
            && a.1.len() + b.1.len() <= a.0
            && !a.1.iter().any(|x| b.1.iter().any(|y| x.0 == y.0))
            && !common.is_empty()
            && common.iter().all(|k| a.2.get(k) == b.2.get(k))
    };
    while let Some((i, j)) = (0..groups.len())
        .flat_map(|i| (i + 1..groups.len()).map(move |j| (i, j)))
        .find(|&(i, j)| agree(&groups[i], &groups[j]))
    {
        let b = groups.remove(j);
        groups[i].1.extend(b.1);
        groups[i].1.sort();
        groups[i].2.extend(b.2);
    }
    for (i, (n, members, _)) in groups.iter().enumerate() {
        if members.len() != *n {
            t.warn(format!(
                "a communicator of {n} rank(s) with {} rank(s) in the log: the log holds part of the job",
                members.len()
            ));
        }
        for m in members {
            comm_of.insert(m.clone(), i);
        }
        t.comms.push(TraceComm {
            id: format!("comm{i}"),
            members: members.iter().map(|m| m.0).collect(),
        });
    }
    t.ranks = who.len();
    t.hosts = who
        .iter()
        .map(|w| Some(w.0.clone()).filter(|h| !h.is_empty()))
        .collect();
    t.calls = vec![Vec::new(); who.len()];
    for r in raw {
        let g = rank_of(&r.who);
        let Some(&comm) = comm_of.get(&(g, r.comm_ptr.clone())) else {
            continue;
        };
        match to_call(&r, comm, r.nranks) {
            Ok(call) => t.calls[g].push(call),
            Err(w) => t.warn(w),
        }
    }
}

/// PyTorch's dtype names (c10 ScalarType) as burnin replays them.
fn torch_dtype(s: &str) -> Option<(Dtype, Option<&'static str>)> {
    Some(match s {
        "Float" => (Dtype::F32, None),
        "Double" => (Dtype::F64, None),
        "Half" => (Dtype::F16, None),
        "BFloat16" => (Dtype::Bf16, None),
        "Int" => (Dtype::I32, None),
        "Byte" => (Dtype::U8, None),
        "Char" => (Dtype::U8, Some("int8 as u8")),
        "Bool" => (Dtype::U8, Some("bool as u8")),
        "Long" => (Dtype::F64, Some("int64 as f64")),
        s if s.starts_with("Float8") => (Dtype::U8, Some("fp8 as u8")),
        _ => return None,
    })
}

/// The op of a Flight Recorder `profiling_name` ("nccl:all_reduce",
/// "nccl:_allgather_base", "nccl:reduce_scatter_tensor_coalesced", "nccl:send 0->1").
fn fr_op(name: &str) -> Option<Op> {
    let n = name.rsplit(':').next()?.split_whitespace().next()?;
    let n = n.trim_start_matches('_');
    Some(
        if n.starts_with("all_reduce") || n.starts_with("allreduce") {
            Op::Coll(CollKind::AllReduce)
        } else if n.starts_with("all_gather") || n.starts_with("allgather") {
            Op::Coll(CollKind::AllGather)
        } else if n.starts_with("reduce_scatter") {
            Op::Coll(CollKind::ReduceScatter)
        } else if n.starts_with("broadcast") {
            Op::Coll(CollKind::Broadcast)
        } else if n.starts_with("all_to_all") || n.starts_with("alltoall") {
            Op::Coll(CollKind::AllToAll)
        } else if n.starts_with("reduce") {
            Op::Coll(CollKind::Reduce)
        } else if n == "send" {
            Op::Send
        } else if n == "recv" {
            Op::Recv
        } else {
            return None;
        },
    )
}

/// The global rank a Flight Recorder dump belongs to: the digits its file name ends
/// in (PyTorch writes `<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`).
pub fn rank_of_file(name: &str) -> Option<usize> {
    let stem = name.rsplit('/').next()?;
    let stem = stem.strip_suffix(".json").unwrap_or(stem);
    let digits: String = stem
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// Read Flight Recorder JSON dumps, one per rank: (file name, text).
pub fn parse_flight_recorder(texts: &[(&str, &str)]) -> Result<Trace, String> {
    let mut t = Trace {
        format: "flight-recorder".into(),
        ..Trace::default()
    };
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut per_rank: BTreeMap<usize, Vec<serde_json::Value>> = BTreeMap::new();
    for (name, text) in texts {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("{name}: not JSON ({e}); burnin reads the JSON dump"))?;
        let rank = rank_of_file(name).ok_or_else(|| {
            format!("{name}: the file name does not end in its rank (PyTorch names dumps <prefix><rank>)")
        })?;
        for (pg, cfg) in v["pg_config"].as_object().into_iter().flatten() {
            let ranks = match &cfg["ranks"] {
                serde_json::Value::String(s) => serde_json::from_str::<Vec<usize>>(s).ok(),
                other => serde_json::from_value::<Vec<usize>>(other.clone()).ok(),
            };
            match ranks {
                Some(r) => {
                    groups.insert(pg.clone(), r);
                }
                None => t.warn(format!("{name}: process group {pg}: no list of ranks")),
            }
        }
        let entries = v["entries"].as_array().ok_or_else(|| {
            format!("{name}: no \"entries\" (was the dump made with collectives?)")
        })?;
        per_rank.insert(rank, entries.clone());
    }
    let ranks = per_rank.keys().max().map_or(0, |m| m + 1);
    if per_rank.len() != ranks {
        return Err(format!(
            "dumps of {} rank(s) but the highest rank is {}: give every rank's file",
            per_rank.len(),
            ranks.saturating_sub(1)
        ));
    }
    t.ranks = ranks;
    let names: Vec<String> = groups.keys().cloned().collect();
    for (id, members) in &groups {
        t.comms.push(TraceComm {
            id: id.clone(),
            members: members.clone(),
        });
    }
    t.calls = vec![Vec::new(); ranks];
    for (rank, entries) in per_rank {
        for e in entries {
            match fr_call(&e, &names, &t.comms) {
                Ok(Some(c)) => t.calls[rank].push(c),
                Ok(None) => {}
                Err(w) => t.warn(format!("rank {rank}: {w}")),
            }
        }
    }
    Ok(t)
}

/// One Flight Recorder entry as a call (None: not a call burnin replays, e.g. a
/// barrier or one that never completed).
fn fr_call(
    e: &serde_json::Value,
    groups: &[String],
    comms: &[TraceComm],
) -> Result<Option<TraceCall>, String> {
    let name = e["profiling_name"].as_str().unwrap_or_default();
    let Some(op) = fr_op(name) else {
        return Ok(None);
    };
    if e["state"].as_str().is_some_and(|s| s != "completed") {
        return Ok(None);
    }
    let pg = e["process_group"][0]
        .as_str()
        .map(str::to_string)
        .or_else(|| e["pg_id"].as_u64().map(|p| p.to_string()))
        .unwrap_or_default();
    let comm = groups
        .iter()
        .position(|g| *g == pg)
        .ok_or_else(|| format!("{name}: process group {pg:?} is not in pg_config"))?;
    let n = comms[comm].members.len();
    let elems = |k: &str| -> Option<usize> {
        let dims = e[k].get(0)?.as_array()?;
        dims.iter()
            .map(|d| d.as_u64().map(|x| x as usize))
            .product()
    };
    let (input, output) = (elems("input_sizes"), elems("output_sizes"));
    let dt = e["input_dtypes"][0]
        .as_str()
        .or(e["output_dtypes"][0].as_str())
        .unwrap_or("?");
    let (dtype, note) =
        torch_dtype(dt).ok_or_else(|| format!("{name}: dtype {dt} burnin has no stand-in for"))?;
    let count = match op {
        Op::Coll(CollKind::AllGather) => output.or(input.map(|i| i * n)),
        Op::Coll(CollKind::ReduceScatter) => input.or(output.map(|o| o * n)),
        _ => input.or(output),
    }
    .ok_or_else(|| format!("{name}: no input_sizes"))?;
    Ok(Some(TraceCall {
        comm,
        op,
        count,
        dtype,
        dtype_note: note.map(str::to_string),
        red: RedOp::Sum,
        root: 0,
        source_us: e["duration_ms"].as_f64().map(|ms| ms * 1e3),
    }))
}

/// The calls of one step: the shortest block of `calls` that repeats back to back at
/// its end (at least twice), and where the last whole repetition starts; None when
/// nothing repeats. Calls are compared by [`TraceCall::signature`].
pub fn step_period(calls: &[TraceCall]) -> Option<usize> {
    let sig: Vec<_> = calls.iter().map(TraceCall::signature).collect();
    let n = sig.len();
    (1..=n / 2).find(|&p| (n - 2 * p..n - p).all(|i| sig[i] == sig[i + p]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four ranks on two nodes, data parallel across nodes (comms 0xd0/0xd1 of two
    /// ranks) and tensor parallel inside them (0xa0/0xa1), plus the world; lines as
    /// NCCL 2.21 writes them, with Open MPI's --tag-output prefix on some.
    fn dp_tp_log() -> String {
        let mut s = String::new();
        for (g, host) in ["gpu-a", "gpu-a", "gpu-b", "gpu-b"].into_iter().enumerate() {
            let pre = format!("{host}:{}:{} [{}]", 1000 + g, 2000 + g, g % 2);
            let tag = if g == 3 { "[1,3]<stdout>:" } else { "" };
            let comm = |p: &str, r: usize, n: usize, id: &str| {
                format!("{tag}{pre} NCCL INFO comm {p} rank {r} nranks {n} cudaDev {} nvmlDev {} busId 1b000 commId {id} - Init COMPLETE\n", g % 2, g % 2)
            };
            s += &comm("0x55aa0001", g, 4, "0xworld");
            s += &comm(
                "0x55aa0002",
                g % 2,
                2,
                if g < 2 { "0xtp0" } else { "0xtp1" },
            );
            s += &comm(
                "0x55aa0003",
                g / 2,
                2,
                if g % 2 == 0 { "0xdp0" } else { "0xdp1" },
            );
            for step in 0..3 {
                for (ptr, name, count, dt) in [
                    ("0x55aa0002", "AllGather", 1024, 9),
                    ("0x55aa0002", "ReduceScatter", 1024, 9),
                    ("0x55aa0003", "AllReduce", 262_144, 7),
                ] {
                    s += &format!(
                        "{tag}{pre} NCCL INFO {name}: opCount {:x} sendbuff 0x7f0000 recvbuff 0x7f1000 count {count} datatype {dt} op 0 root 0 comm {ptr} [nranks=2] stream 0x5600\n",
                        step
                    );
                }
            }
        }
        s
    }

    #[test]
    fn nccl_coll_lines_give_communicators_and_sequences() {
        let text = dp_tp_log();
        let t = parse_nccl(&[("all.log", &text)]);
        assert_eq!(t.warnings, Vec::<String>::new());
        assert_eq!(t.ranks, 4);
        let ids: Vec<(&str, Vec<usize>)> = t
            .comms
            .iter()
            .map(|c| (c.id.as_str(), c.members.clone()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("0xdp0", vec![0, 2]),
                ("0xdp1", vec![1, 3]),
                ("0xtp0", vec![0, 1]),
                ("0xtp1", vec![2, 3]),
                ("0xworld", vec![0, 1, 2, 3]),
            ]
        );
        for (g, calls) in t.calls.iter().enumerate() {
            assert_eq!(calls.len(), 9, "rank {g}");
            // all_gather's count is the whole output: 2 ranks × 1024 bf16
            assert_eq!(
                (calls[0].op, calls[0].count, calls[0].dtype),
                (Op::Coll(CollKind::AllGather), 2048, Dtype::Bf16)
            );
            assert!(t.comms[calls[0].comm].members.contains(&g));
            assert_eq!(calls[2].op, Op::Coll(CollKind::AllReduce));
            assert_eq!(calls[2].bytes(), 1 << 20);
            assert_eq!(step_period(calls), Some(3));
        }
        assert_eq!(t.comms[t.calls[3][2].comm].id, "0xdp1");
    }

    fn fixture(name: &str) -> Trace {
        let path = format!(
            "{}/tests/fixtures/traces/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        parse_nccl(&[(&path, &text)])
    }

    /// Real logs from public threads (tests/fixtures/traces/README.md), without Init
    /// lines: ranks in (host, pid, GPU) order, ends of a communicator matched by size
    /// and calls, said in a warning.
    #[test]
    fn real_coll_logs_from_public_threads() {
        // TensorFlow, one process with two GPUs: two ranks, one 2-rank communicator,
        // four all_reduce calls on GPU 1 and three on GPU 0 (the log was cut).
        let t = fixture("nccl-issue-203.log");
        assert_eq!((t.ranks, t.comms.len()), (2, 1), "{t:?}");
        assert_eq!(t.comms[0].members, vec![0, 1]);
        assert!(
            t.warnings[0].contains("NCCL_DEBUG_SUBSYS=INIT,COLL"),
            "{:?}",
            t.warnings
        );
        let counts = |g: usize| t.calls[g].iter().map(|c| c.count).collect::<Vec<_>>();
        assert_eq!(counts(0), vec![64, 237_184, 386_560]);
        assert_eq!(counts(1), vec![64, 237_184, 386_560, 8192]);
        assert!(t.calls[1]
            .iter()
            .all(|c| c.op == Op::Coll(CollKind::AllReduce) && c.dtype == Dtype::F32));

        // torchtitan tensor parallel: all_gather / reduce_scatter of 2,097,152 f32 a
        // rank (16 MiB over the 2 ranks in burnin's convention), then scalar all_reduces.
        let t = fixture("torchtitan-issue-1369.log");
        assert_eq!((t.ranks, t.comms.len()), (2, 1), "{t:?}");
        let ops = |g: usize| {
            t.calls[g]
                .iter()
                .map(|c| (c.op.name(), c.bytes()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ops(0),
            vec![
                ("reduce_scatter", 16 << 20),
                ("all_gather", 16 << 20),
                ("all_reduce", 4),
                ("all_reduce", 4)
            ]
        );
        assert_eq!(ops(1)[0], ("all_gather", 16 << 20));

        // Ray Train: the worker's tag before NCCL's prefix; 3 of 128 ranks, one
        // communicator (their opCounts 139d/139e agree), rank order by host.
        let t = fixture("nccl-issue-1193.log");
        assert_eq!((t.ranks, t.comms.len()), (3, 1), "{t:?}");
        assert_eq!(
            t.calls.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 1, 2],
            "{t:?}"
        );
        assert_eq!(t.calls[2][1].count, 7_066_572);

        // DDP broadcasts on 8 GPUs, the thread's hang: two processes' lines glued
        // into one (the later one is the call), one line that lost its prefix
        // (skipped), and rank 0's opCount 0 a 25,503,912-element fp16 broadcast where
        // the others' opCount 0 is 53 int64: 4 ranks of the 8 in the log, which do not
        // make one communicator — said, not guessed.
        let t = fixture("nccl-issue-147.log");
        assert_eq!(t.ranks, 4, "{t:?}");
        let b: Vec<(usize, usize, Dtype)> = t
            .calls
            .iter()
            .enumerate()
            .flat_map(|(g, c)| c.iter().map(move |c| (g, c.count, c.dtype)))
            .collect();
        // ranks by pid: 32615 [0], 32617 [1], 32625 [5], 32629 [7]
        assert!(b.contains(&(0, 25_503_912, Dtype::F16)), "{b:?}");
        assert_eq!(t.calls[1].len(), 2, "pid 32617: two broadcasts");
        assert!(t
            .calls
            .iter()
            .flatten()
            .any(|c| c.dtype_note.as_deref() == Some("int64 as f64")));
        assert!(t
            .calls
            .iter()
            .flatten()
            .all(|c| c.op == Op::Coll(CollKind::Broadcast)));
        let sizes: Vec<Vec<usize>> = t.comms.iter().map(|c| c.members.clone()).collect();
        assert_eq!(sizes, vec![vec![0], vec![1, 2, 3]], "{t:?}");
        assert!(
            t.warnings
                .iter()
                .any(|w| w.contains("communicator of 8 rank(s) with 3 rank(s)")),
            "{:?}",
            t.warnings
        );
    }

    #[test]
    fn types_ops_and_names_are_nccl_s() {
        assert_eq!(nccl_dtype(9), Some((Dtype::Bf16, None)));
        assert_eq!(nccl_dtype(4), Some((Dtype::F64, Some("int64 as f64"))));
        assert_eq!(nccl_dtype(12), None);
        assert_eq!(nccl_op(4), Some(RedOp::Avg));
        assert_eq!(nccl_op(5), None);
        assert_eq!(nccl_name("Bcast"), Some(Op::Coll(CollKind::Broadcast)));
        assert_eq!(
            fr_op("nccl:_allgather_base"),
            Some(Op::Coll(CollKind::AllGather))
        );
        assert_eq!(
            fr_op("nccl:reduce_scatter_tensor_coalesced"),
            Some(Op::Coll(CollKind::ReduceScatter))
        );
        assert_eq!(fr_op("nccl:send 0->1"), Some(Op::Send));
        assert_eq!(fr_op("nccl:barrier"), None);
        assert_eq!(rank_of_file("/tmp/fr/rank_12"), Some(12));
        assert_eq!(rank_of_file("nccl_trace_rank_3.json"), Some(3));
        assert_eq!(rank_of_file("trace"), None);
    }

    #[test]
    fn flight_recorder_dumps_give_groups_sizes_and_times() {
        let dump = |rank: usize| {
            serde_json::json!({
                "version": "2.4",
                "pg_config": {
                    "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                },
                "entries": [
                    {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
                     "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
                     "profiling_name": "nccl:all_reduce", "time_created_ns": 1,
                     "input_sizes": [[1024, 256]], "input_dtypes": ["Float"],
                     "output_sizes": [[1024, 256]], "output_dtypes": ["Float"],
                     "state": "completed", "duration_ms": 0.25 + rank as f64 * 0.01,
                     "is_p2p": false, "retired": true, "timeout_ms": 600000},
                    {"record_id": 1, "pg_id": 0, "process_group": ["0", "default_pg"],
                     "profiling_name": "nccl:_allgather_base",
                     "input_sizes": [[512]], "input_dtypes": ["BFloat16"],
                     "output_sizes": [[1024]], "output_dtypes": ["BFloat16"],
                     "state": "completed", "duration_ms": null},
                    {"record_id": 2, "pg_id": 0, "process_group": ["0", "default_pg"],
                     "profiling_name": "nccl:barrier", "input_sizes": [[1]],
                     "input_dtypes": ["Float"], "state": "completed"},
                ]
            })
            .to_string()
        };
        let (a, b) = (dump(0), dump(1));
        let t = parse_flight_recorder(&[("fr/rank_0", &a), ("fr/rank_1", &b)]).unwrap();
        assert_eq!((t.ranks, t.comms.len()), (2, 1));
        assert_eq!(t.comms[0].members, vec![0, 1]);
        assert_eq!(t.calls[1].len(), 2, "the barrier is not replayed");
        let c = &t.calls[1][0];
        assert_eq!(
            (c.op, c.count, c.dtype),
            (Op::Coll(CollKind::AllReduce), 262_144, Dtype::F32)
        );
        assert!((c.source_us.unwrap() - 260.0).abs() < 1e-9);
        assert_eq!((t.calls[0][1].count, t.calls[0][1].source_us), (1024, None));
        let e = parse_flight_recorder(&[("fr/rank_1", &b)]).unwrap_err();
        assert!(e.contains("highest rank is 1"), "{e}");
        let e = parse_flight_recorder(&[("fr/rank_0", "{")]).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }
}
