//! A job's collectives, read from what the job wrote: NCCL's COLL log lines or PyTorch's
//! Flight Recorder JSON dumps. Pure and tolerant: an unknown line is skipped, a
//! malformed one is counted in the warnings, nothing panics.
//!
//! **NCCL COLL logs** (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL`), every shape NCCL
//! has printed since 2.18 (tests/fixtures/traces/README.md lists them with their
//! source lines): every call prints `<Name>: opCount <hex> sendbuff <p> recvbuff <p>
//! count <n> datatype <d> op <o> root <r> comm <ptr> [nranks=<n>] stream <p>`, and
//! every communicator an `Init COMPLETE` line: `[<function>] comm <ptr> rank <r> nranks
//! <n> cudaDev <d> … commId 0x<hash>`, or for a split from 2.23 `parent <ptr>
//! [splitCount|childCount <k>] color <c> key <k>` and no commId. A rank is the line
//! prefix's host and pid with the Init line's `cudaDev` (a process can drive several
//! GPUs); a communicator is its commId, or its parent's split of that colour, or —
//! without Init lines — the comm pointers of one size that made the same calls. A
//! rank's calls are in log order: opCount is no call number (NCCL advances it only for
//! launches with network work, so an intra-node communicator can print 0 throughout).
//! The counts are NCCL's: all_gather's `count` is each rank's send count,
//! reduce_scatter's each rank's receive count; a user reduction op (PreMulSum) is
//! replayed as sum and a 2.28 gather or scatter as its sends and receives, said.
//!
//! A trace that is not the whole job — ranks missing from a communicator, ranks that
//! disagree at the same call, calls that cannot be placed — says so in
//! [`Trace::problems`]; `burnin replay` refuses it unless told to replay the whole
//! communicators only.
//!
//! **Flight Recorder** (`TORCH_NCCL_TRACE_BUFFER_SIZE=N`, `TORCH_NCCL_ENABLE_TIMING=1`,
//! dumped as JSON, one file per rank whose name ends in the rank): `pg_config` names
//! each process group's global ranks, `entries` the calls with `profiling_name`
//! (`nccl:all_reduce`), `input_sizes`, `input_dtypes`, `output_sizes`, `state` and
//! `duration_ms`. It is the timed format burnin reads: it carries each call's GPU time
//! on the source cluster and the process groups by name, with no log scraping. Every
//! tensor of a coalesced call is a call; a send's or receive's peer is in its name
//! (`nccl:send 0->1`); an all_to_all with per-peer sizes is its sends and receives; a
//! gather's or scatter's root is the rank whose list is not empty. It records no root
//! for broadcast and reduce and no reduction op: root 0 and sum, said.
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
    /// What else burnin replays differently from the trace, said in the report ("a
    /// custom reduction op as sum", "gather as its sends and receives").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub red: RedOp,
    /// Root (broadcast, reduce) or peer (send, recv), a rank of the communicator.
    pub root: usize,
    /// The call's time on the source cluster, when the trace has it (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_us: Option<f64>,
    /// Launched in one NCCL group with the call before it on this rank (a collective
    /// on the same communicator): NCCL logs print one opCount for a group's calls,
    /// Flight Recorder one entry for a coalesced call's tensors. Replayed as one group.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grouped: bool,
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceComm {
    /// commId (NCCL) or process group name (Flight Recorder).
    pub id: String,
    /// Its global ranks in the trace, in the order of their rank in it.
    pub members: Vec<usize>,
    /// Why it is not whole: ranks missing, ranks that disagree (empty: whole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// A job's collectives: its communicators and every rank's calls in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Trace {
    /// "nccl-coll", "flight-recorder" or "profiler".
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
    /// What keeps the trace from being the whole job: calls that cannot be placed or
    /// replayed, and every communicator's problems (empty: whole).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// What `--allow-partial` left out of the replay (the problems of the trace it was
    /// cut from): NOT COMPARABLE in the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Per global rank, the steps the job itself marked (the profiler's
    /// `ProfilerStep#N`), in order (empty: the trace marks none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded_steps: Vec<Vec<RecordedStep>>,
}

/// A step as the job marked it: its number and its calls (a range of the rank's calls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordedStep {
    /// The job's step number (`ProfilerStep#N`).
    pub number: u64,
    /// Index of its first call in the rank's calls.
    pub first: usize,
    /// How many calls it holds.
    pub calls: usize,
}

impl Trace {
    pub(crate) fn warn(&mut self, w: String) {
        self.warnings_total += 1;
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(w);
        }
    }

    /// Each process group as a communicator, with the ranks whose `file` ("dump",
    /// "trace") is missing as its problem.
    pub(crate) fn add_groups(
        &mut self,
        groups: &BTreeMap<String, Vec<usize>>,
        have: impl Fn(usize) -> bool,
        file: &str,
    ) {
        for (id, members) in groups {
            let missing: Vec<usize> = members.iter().copied().filter(|g| !have(*g)).collect();
            let mut problems = Vec::new();
            if !missing.is_empty() {
                problems.push(format!(
                    "process group {id} of {} rank(s): no {file} of its rank(s) {}",
                    members.len(),
                    list(&missing)
                ));
            }
            for p in &problems {
                self.problem(p.clone());
            }
            self.comms.push(TraceComm {
                id: id.clone(),
                members: members.clone(),
                problems,
            });
        }
    }

    pub(crate) fn problem(&mut self, p: String) {
        if !self.problems.contains(&p) {
            self.problems.push(p);
        }
    }

    /// The trace without its communicators that are not whole and their calls, and
    /// what was left out (the trace's problems): what `--allow-partial` replays.
    pub fn whole_part(&self) -> Trace {
        let keep: Vec<bool> = self.comms.iter().map(|c| c.problems.is_empty()).collect();
        let mut index = vec![usize::MAX; self.comms.len()];
        let mut t = Trace {
            comms: Vec::new(),
            problems: Vec::new(),
            ..self.clone()
        };
        for (i, c) in self.comms.iter().enumerate() {
            if keep[i] {
                index[i] = t.comms.len();
                t.comms.push(c.clone());
            }
        }
        let kept = |c: &TraceCall| keep.get(c.comm).copied().unwrap_or(false);
        // A recorded step keeps its kept calls: its range counted in the kept ones.
        for (g, steps) in t.recorded_steps.iter_mut().enumerate() {
            let calls = self.calls.get(g).map(Vec::as_slice).unwrap_or_default();
            let before = |i: usize| {
                calls[..i.min(calls.len())]
                    .iter()
                    .filter(|c| kept(c))
                    .count()
            };
            for s in steps.iter_mut() {
                let (a, b) = (before(s.first), before(s.first + s.calls));
                s.first = a;
                s.calls = b - a;
            }
        }
        for calls in &mut t.calls {
            calls.retain(|c| kept(c));
            for c in calls.iter_mut() {
                c.comm = index[c.comm];
            }
        }
        t.left_out = self.problems.clone();
        t
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

/// The op of an NCCL call name, as NCCL prints it (`AllReduce`, `Bcast`, and since
/// 2.28 `Gather`, `Scatter`, `AlltoAll`).
fn nccl_name(name: &str) -> Option<RawOp> {
    let name = name.strip_prefix("nccl").unwrap_or(name);
    Some(match name {
        "AllReduce" => RawOp::Op(Op::Coll(CollKind::AllReduce)),
        "AllGather" => RawOp::Op(Op::Coll(CollKind::AllGather)),
        "ReduceScatter" => RawOp::Op(Op::Coll(CollKind::ReduceScatter)),
        "Broadcast" | "Bcast" => RawOp::Op(Op::Coll(CollKind::Broadcast)),
        "Reduce" => RawOp::Op(Op::Coll(CollKind::Reduce)),
        "AlltoAll" | "AllToAll" => RawOp::Op(Op::Coll(CollKind::AllToAll)),
        "Send" => RawOp::Op(Op::Send),
        "Recv" => RawOp::Op(Op::Recv),
        "Gather" => RawOp::Gather,
        "Scatter" => RawOp::Scatter,
        _ => return None,
    })
}

/// A COLL line's operation: one burnin replays as it is, or a rooted gather or
/// scatter, turned into sends and receives once the communicator's ranks are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RawOp {
    Op(Op),
    Gather,
    Scatter,
}

impl RawOp {
    fn name(self) -> &'static str {
        match self {
            RawOp::Op(o) => o.name(),
            RawOp::Gather => "gather",
            RawOp::Scatter => "scatter",
        }
    }
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

/// One rank as the log names it: host (or the file, when lines have no prefix), pid
/// and GPU.
type Who = (String, u32, u32);

/// One COLL line.
#[derive(Clone, Debug)]
struct RawCall {
    /// Where it was read ("file:line"), for messages.
    at: String,
    /// Its place in the log (files in order, then lines): a rank's calls in order.
    seq: usize,
    /// `[nranks=N]`.
    nranks: usize,
    /// NCCL's per-communicator launch counter (advanced only for launches with
    /// network work: an intra-node communicator can print 0 for every call).
    op_count: u64,
    op: RawOp,
    nccl_count: usize,
    dtype: u32,
    red: u32,
    root: usize,
}

impl RawCall {
    /// What must be the same on every rank of a communicator (sends and receives
    /// differ by nature and are checked pairwise later).
    fn agreed(&self) -> Option<(RawOp, usize, u32, u32, usize)> {
        match self.op {
            RawOp::Op(Op::Send | Op::Recv) => None,
            op => Some((op, self.nccl_count, self.dtype, self.red, self.root)),
        }
    }

    fn describe(&self) -> String {
        const NAMES: [&str; 12] = [
            "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "fp32", "fp64", "bf16",
            "fp8 e4m3", "fp8 e5m2",
        ];
        let dt = NAMES
            .get(self.dtype as usize)
            .map_or_else(|| format!("datatype {}", self.dtype), |n| n.to_string());
        let rooted = matches!(
            self.op,
            RawOp::Op(Op::Coll(CollKind::Broadcast | CollKind::Reduce))
                | RawOp::Gather
                | RawOp::Scatter
        );
        format!(
            "{} of count {} {dt}{}{} (opCount {:#x}, {})",
            self.op.name(),
            self.nccl_count,
            match (self.op, nccl_op(self.red)) {
                (RawOp::Op(Op::Coll(k)), Some(o)) if k.reduces() => format!(" {}", o.name()),
                (RawOp::Op(Op::Coll(k)), None) if k.reduces() => format!(" op {}", self.red),
                _ => String::new(),
            },
            if rooted {
                format!(" root {}", self.root)
            } else {
                String::new()
            },
            self.op_count,
            self.at
        )
    }
}

/// One process's end of a communicator: from its Init COMPLETE line, or (no Init
/// line) from its first call.
#[derive(Clone, Debug)]
struct End {
    who: Who,
    nranks: usize,
    /// Its rank in the communicator (Init lines).
    rank: Option<usize>,
    /// commId (Init lines that carry one).
    id: Option<String>,
    /// The end it was split from, and the how-manieth split of that end it is.
    parent: Option<(usize, usize)>,
    color: Option<String>,
    calls: Vec<RawCall>,
}

/// An Init COMPLETE line of any NCCL since 2.18 (tests/fixtures/traces/README.md has
/// every shape): `[<function>] comm 0x.. rank R nranks N cudaDev D [nvmlDev X] busId B
/// [parent 0x.. [splitCount|childCount K] color C key K] [commId 0x..] - Init
/// COMPLETE`, the fields read by name.
struct InitLine {
    ptr: String,
    rank: usize,
    nranks: usize,
    dev: Option<u32>,
    id: Option<String>,
    parent: Option<String>,
    /// `splitCount` (2.24–2.28) or `childCount` (2.29+): which split of the parent.
    split_count: Option<usize>,
    color: Option<String>,
}

fn init_line(msg: &str) -> Option<InitLine> {
    if !msg.contains("Init COMPLETE") {
        return None;
    }
    let ptr = after(msg, "comm")?;
    if !ptr.starts_with("0x") {
        return None;
    }
    Some(InitLine {
        ptr: ptr.to_string(),
        rank: after(msg, "rank")?.parse().ok()?,
        nranks: after(msg, "nranks")
            .or_else(|| after(msg, "nRanks"))?
            .parse()
            .ok()?,
        dev: after(msg, "cudaDev").and_then(|d| d.parse().ok()),
        id: after(msg, "commId")
            .filter(|c| c.starts_with("0x"))
            .map(str::to_string),
        parent: after(msg, "parent")
            .filter(|p| p.starts_with("0x"))
            .map(str::to_string),
        split_count: after(msg, "splitCount")
            .or_else(|| after(msg, "childCount"))
            .and_then(|k| k.parse().ok()),
        color: after(msg, "color").map(str::to_string),
    })
}

/// The rest of a COLL line after `<Name>: opCount `.
fn coll_line(at: String, seq: usize, name: &str, rest: &str) -> Result<RawCall, String> {
    let word = name.split_whitespace().last().unwrap_or(name);
    let op = nccl_name(word).ok_or_else(|| format!("{at}: {word}: a call burnin does not know"))?;
    let field =
        |k: &str| after(rest, k).ok_or_else(|| format!("{at}: a {word} line without `{k}`"));
    let num = |k: &str| -> Result<usize, String> {
        let v = field(k)?;
        v.parse()
            .map_err(|_| format!("{at}: {word}: `{k} {v}` is not a number"))
    };
    Ok(RawCall {
        at: at.clone(),
        seq,
        op_count: hex(rest.split_whitespace().next())
            .ok_or_else(|| format!("{at}: {word}: opCount is not hexadecimal"))?,
        nranks: rest
            .split_once("[nranks=")
            .and_then(|x| x.1.split(']').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
        op,
        nccl_count: num("count")?,
        dtype: num("datatype")? as u32,
        red: num("op")? as u32,
        root: num("root")?,
    })
}

/// Read NCCL COLL logs: every file's lines, in order (one file per rank, or one
/// file with every rank's lines interleaved). The trace says what it could not place
/// in `problems` (and per communicator in [`TraceComm::problems`]): a trace that is
/// not whole is not replayed as if it were.
pub fn parse_nccl(texts: &[(&str, &str)]) -> Trace {
    let mut t = Trace {
        format: "nccl-coll".into(),
        ..Trace::default()
    };
    let mut ends: Vec<End> = Vec::new();
    // (host:pid or file, pointer) → its current end (a pointer can be reused after a
    // communicator is destroyed: the later Init line starts a new end).
    let mut live: HashMap<(String, String), usize> = HashMap::new();
    let mut seq = 0usize;
    for (name, text) in texts {
        // Lines without a host:pid:tid prefix belong to the file only when no line of
        // it has one (a log written by one process without NCCL's prefix).
        let prefixed = text.lines().any(|l| {
            l.rfind("NCCL INFO ")
                .is_some_and(|at| crate::nccl_log::parse_prefix(&l[..at]).host.is_some())
        });
        for (i, line) in text.lines().enumerate() {
            // The last "NCCL INFO" of the line: two processes' lines can be glued.
            let Some(at) = line.rfind("NCCL INFO ") else {
                continue;
            };
            let from = line[..at]
                .rfind("NCCL INFO ")
                .map_or(0, |p| p + "NCCL INFO ".len());
            let pre = crate::nccl_log::parse_prefix(&line[from..at]);
            let msg = line[at + "NCCL INFO ".len()..].trim();
            let (proc_key, host, pid) = match (&pre.host, pre.pid) {
                (Some(h), Some(p)) => (format!("{h}:{p}"), h.clone(), p),
                _ if !prefixed => (name.to_string(), name.to_string(), 0),
                _ => {
                    if msg.contains(": opCount ") || msg.contains("Init COMPLETE") {
                        t.warn(format!(
                            "{name}:{}: a line without NCCL's host:pid:tid prefix (glued to another?), skipped",
                            i + 1
                        ));
                    }
                    continue;
                }
            };
            seq += 1;
            if let Some(c) = init_line(msg) {
                // The same communicator's line twice (two functions print it).
                if let Some(&e) = live.get(&(proc_key.clone(), c.ptr.clone())) {
                    let x = &ends[e];
                    if x.calls.is_empty()
                        && x.rank == Some(c.rank)
                        && x.nranks == c.nranks
                        && x.id == c.id
                    {
                        continue;
                    }
                }
                // Which split of its parent: NCCL's own count where the line has it
                // (a rank that passed no colour prints no line), else the order.
                let parent = c.parent.as_ref().and_then(|p| {
                    let pe = *live.get(&(proc_key.clone(), p.clone()))?;
                    let k = c.split_count.unwrap_or_else(|| {
                        ends.iter()
                            .filter(|e| e.parent.is_some_and(|x| x.0 == pe))
                            .count()
                    });
                    Some((pe, k))
                });
                ends.push(End {
                    who: (host, pid, c.dev.or(pre.dev).unwrap_or(0)),
                    nranks: c.nranks,
                    rank: Some(c.rank),
                    id: c.id,
                    parent,
                    color: c.color,
                    calls: Vec::new(),
                });
                live.insert((proc_key, c.ptr), ends.len() - 1);
            } else if let Some((op, rest)) = msg.split_once(": opCount ") {
                let at = format!("{name}:{}", i + 1);
                let call = match coll_line(at, seq, op, rest) {
                    Ok(c) => c,
                    Err(e) if e.contains("does not know") => {
                        t.problem(format!("{e}: the trace holds calls burnin cannot replay"));
                        continue;
                    }
                    Err(e) => {
                        t.warn(format!("not a COLL line NCCL writes: {e}"));
                        continue;
                    }
                };
                let Some(ptr) = after(rest, "comm") else {
                    continue;
                };
                let key = (proc_key, ptr.to_string());
                let e = match live.get(&key) {
                    Some(&e) => e,
                    None => {
                        ends.push(End {
                            who: (host, pid, pre.dev.unwrap_or(0)),
                            nranks: call.nranks,
                            rank: None,
                            id: None,
                            parent: None,
                            color: None,
                            calls: Vec::new(),
                        });
                        live.insert(key, ends.len() - 1);
                        ends.len() - 1
                    }
                };
                ends[e].calls.push(call);
            }
        }
    }
    resolve(&mut t, ends);
    t
}

/// Where the collectives of two ends of one communicator first disagree: None when
/// they agree by position (logs from the start) or by NCCL's launch counter (logs
/// cut at different places), or share no launch to compare; else the two calls'
/// indices.
fn disagreement(a: &[RawCall], b: &[RawCall]) -> Option<(usize, usize)> {
    let ca: Vec<(usize, &RawCall)> = a
        .iter()
        .enumerate()
        .filter(|x| x.1.agreed().is_some())
        .collect();
    let cb: Vec<(usize, &RawCall)> = b
        .iter()
        .enumerate()
        .filter(|x| x.1.agreed().is_some())
        .collect();
    // By position among the collectives.
    ca.iter()
        .zip(&cb)
        .position(|(x, y)| x.1.agreed() != y.1.agreed())?;
    // By (opCount, k-th call with that opCount).
    let keyed = |c: &[(usize, &RawCall)]| {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        c.iter()
            .map(|(i, x)| {
                let k = seen.entry(x.op_count).or_insert(0);
                *k += 1;
                ((x.op_count, *k), (*i, x.agreed()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let (ka, kb) = (keyed(&ca), keyed(&cb));
    let bad = ka
        .iter()
        .find(|(k, v)| kb.get(*k).is_some_and(|w| w.1 != v.1))?;
    Some((bad.1 .0, kb[bad.0].0))
}

/// Communicators from the ends: by commId, splits by their parent, the rest by the
/// calls they made; global ranks from the largest communicator; each rank's calls in
/// log order; and what keeps the trace from being whole.
fn resolve(t: &mut Trace, ends: Vec<End>) {
    if ends.is_empty() {
        return;
    }
    let (groups, group_of) = group_ends(&ends);
    let global = global_ranks(t, &ends, &groups);
    let ranks = t.ranks;
    let (comm_rank, seq_calls) = comms_of(t, &ends, &groups, &global);
    t.calls = vec![Vec::new(); ranks];
    let moves: Vec<bool> = ends.iter().map(advances).collect();
    for (g, mut order) in seq_calls.into_iter().enumerate() {
        order.sort_unstable();
        let mut before: Option<(usize, usize)> = None;
        for (_, e, c) in order {
            let comm = group_of[e].unwrap_or(0);
            let r = &ends[e].calls[c];
            match to_calls(r, comm, &t.comms[comm].members, comm_rank[&e]) {
                Ok(mut calls) => {
                    let prev = before.filter(|b| *b == (e, c.wrapping_sub(1)));
                    let one_group =
                        prev.is_some_and(|(_, p)| moves[e] && same_launch(&ends[e].calls[p], r));
                    if let [x] = calls.as_mut_slice() {
                        x.grouped = one_group && matches!(x.op, Op::Coll(_));
                    }
                    t.calls[g].extend(calls);
                }
                Err(w) => t.problem(w),
            }
            before = Some((e, c));
        }
    }
}

/// Whether an end's opCount takes more than one value: then calls that share one were
/// launched together (one NCCL group; NCCL advances it once per launched plan).
fn advances(e: &End) -> bool {
    let mut ops = e
        .calls
        .iter()
        .filter(|c| c.agreed().is_some())
        .map(|c| c.op_count);
    ops.next().is_some_and(|first| ops.any(|o| o != first))
}

/// Two consecutive calls of one end launched in one NCCL group: both collectives NCCL
/// runs as one (not sends, receives, gathers or scatters) at the same opCount.
fn same_launch(a: &RawCall, b: &RawCall) -> bool {
    let coll = |c: &RawCall| matches!(c.op, RawOp::Op(Op::Coll(_)));
    coll(a) && coll(b) && a.op_count == b.op_count
}

/// The ends in communicators (end indices per group) and each end's group.
fn group_ends(ends: &[End]) -> (Vec<Vec<usize>>, Vec<Option<usize>>) {
    // Groups of end indices.
    let mut group_of: Vec<Option<usize>> = vec![None; ends.len()];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for (i, e) in ends.iter().enumerate() {
        if let Some(id) = &e.id {
            let g = *by_id
                .entry(format!("{id}/{}", e.nranks))
                .or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
            groups[g].push(i);
            group_of[i] = Some(g);
        }
    }
    // Splits without a commId: the same split of the same parent communicator (and
    // colour, where the line says it), as many rounds as splits nest.
    for _ in 0..8 {
        let mut by_split: BTreeMap<(usize, usize, String, usize), Vec<usize>> = BTreeMap::new();
        for (i, e) in ends.iter().enumerate() {
            if group_of[i].is_some() {
                continue;
            }
            let Some((p, k)) = e.parent else { continue };
            let Some(pg) = group_of[p] else { continue };
            by_split
                .entry((pg, k, e.color.clone().unwrap_or_default(), e.nranks))
                .or_default()
                .push(i);
        }
        if by_split.is_empty() {
            break;
        }
        for ((_, _, color, n), members) in by_split {
            // One group per colour; without a colour, as many as the ranks allow,
            // told apart by their calls.
            let parts = if color.is_empty() && members.len() > n {
                by_calls(ends, &members)
            } else {
                vec![members]
            };
            for m in parts {
                for &i in &m {
                    group_of[i] = Some(groups.len());
                }
                groups.push(m);
            }
        }
    }
    // The rest (no Init line, or one without commId): by their calls.
    let rest: Vec<usize> = (0..ends.len()).filter(|i| group_of[*i].is_none()).collect();
    let mut by_size: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in rest {
        by_size.entry(ends[i].nranks).or_default().push(i);
    }
    for (_, members) in by_size {
        for m in by_calls(ends, &members) {
            for &i in &m {
                group_of[i] = Some(groups.len());
            }
            groups.push(m);
        }
    }
    (groups, group_of)
}

/// Each rank's (host, pid, GPU) global rank: its rank in the largest communicator
/// the Init lines give (else the (host, pid, GPU) order, said); sets `t.ranks` and
/// `t.hosts`.
fn global_ranks(t: &mut Trace, ends: &[End], groups: &[Vec<usize>]) -> HashMap<Who, usize> {
    let init = ends.iter().any(|e| e.rank.is_some());
    // Ranks: (host, pid, GPU) of every end.
    let mut who: Vec<Who> = ends.iter().map(|e| e.who.clone()).collect();
    who.sort();
    who.dedup();
    let n_of = |g: &Vec<usize>| ends[g[0]].nranks;
    // The world: the largest communicator whose ranks the Init lines give.
    let world = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.iter().all(|&i| ends[i].rank.is_some()))
        .max_by_key(|(gi, g)| (n_of(g), std::cmp::Reverse(*gi)))
        .map(|(gi, _)| gi);
    let mut global: HashMap<Who, usize> = HashMap::new();
    let ranks = match world {
        Some(w) if init => {
            let n = n_of(&groups[w]);
            for &i in &groups[w] {
                if let Some(r) = ends[i].rank.filter(|r| *r < n) {
                    global.insert(ends[i].who.clone(), r);
                }
            }
            let mut next = n;
            for w2 in &who {
                if !global.contains_key(w2) {
                    t.problem(format!(
                        "{}:{} GPU {}: in none of the largest communicator's Init COMPLETE lines ({n} ranks): its place in the job is unknown",
                        w2.0, w2.1, w2.2
                    ));
                    global.insert(w2.clone(), next);
                    next += 1;
                }
            }
            next
        }
        _ => {
            t.warn(format!(
                "no Init COMPLETE lines: {} rank(s) taken in (host, pid, GPU) order; record with NCCL_DEBUG_SUBSYS=INIT,COLL for the job's own rank order",
                who.len()
            ));
            for (r, w2) in who.iter().enumerate() {
                global.insert(w2.clone(), r);
            }
            who.len()
        }
    };
    t.ranks = ranks;
    t.hosts = vec![None; ranks];
    for (w2, &g) in &global {
        t.hosts[g] = Some(w2.0.clone()).filter(|h| !h.is_empty());
    }
    global
}

/// The communicators into `t.comms`, each checked whole (every rank there, all making
/// the same collectives); each end's rank in its communicator, and per global rank its
/// calls as (log position, end, call).
type Placed = (HashMap<usize, usize>, Vec<Vec<(usize, usize, usize)>>);
fn comms_of(
    t: &mut Trace,
    ends: &[End],
    groups: &[Vec<usize>],
    global: &HashMap<Who, usize>,
) -> Placed {
    let ranks = t.ranks;
    let n_of = |g: &Vec<usize>| ends[g[0]].nranks;
    // The communicators, members in the order of their rank in it (or, without Init
    // lines, of their global rank).
    let mut comm_rank: HashMap<usize, usize> = HashMap::new(); // end → its rank in its comm
    let mut seq_calls: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); ranks]; // (seq, end, call)
    for (gi, g) in groups.iter().enumerate() {
        let n = n_of(g);
        let mut members: Vec<(usize, usize, usize)> = g
            .iter()
            .map(|&i| {
                let gr = global[&ends[i].who];
                (ends[i].rank.unwrap_or(gr), gr, i)
            })
            .collect();
        members.sort_unstable();
        let known = g.iter().all(|&i| ends[i].rank.is_some());
        let id = g
            .iter()
            .find_map(|&i| ends[i].id.clone())
            .map(|id| {
                if groups
                    .iter()
                    .filter(|h| {
                        h.iter()
                            .any(|&j| ends[j].id.as_deref() == Some(id.as_str()))
                    })
                    .count()
                    > 1
                {
                    format!("{id}/{n}")
                } else {
                    id
                }
            })
            .unwrap_or_else(|| format!("comm{gi}"));
        let mut problems = Vec::new();
        let present: Vec<usize> = members.iter().map(|m| m.1).collect();
        if members.len() < n || (known && members.iter().enumerate().any(|(k, m)| m.0 != k)) {
            let missing = if known {
                let have: Vec<usize> = members.iter().map(|m| m.0).collect();
                let miss: Vec<usize> = (0..n).filter(|r| !have.contains(r)).collect();
                format!("its rank(s) {} missing", list(&miss))
            } else {
                format!("{} rank(s) missing", n.saturating_sub(members.len()))
            };
            problems.push(format!(
                "communicator {id} of {n} rank(s): the trace holds {} of them (global rank(s) {}), {missing}",
                members.len(),
                list(&present)
            ));
        }
        if members.len() > n {
            problems.push(format!(
                "communicator {id} of {n} rank(s): {} ends in the trace",
                members.len()
            ));
        }
        // Every member must make the same collectives in the same order (each is
        // compared with the first member and with the one before it).
        'pairs: for k in 1..members.len() {
            for j in [0, k - 1] {
                let ((_, ga, ea), (_, gb, eb)) = (members[j], members[k]);
                if let Some((a, b)) = disagreement(&ends[ea].calls, &ends[eb].calls) {
                    problems.push(format!(
                        "communicator {id}: rank {ga} and rank {gb} disagree at the same call: {} against {} — ranks of one communicator that make different calls (collective, count, type, op or root) leave NCCL waiting for a call that never comes, a classic cause of NCCL hangs",
                        ends[ea].calls[a].describe(),
                        ends[eb].calls[b].describe()
                    ));
                    break 'pairs;
                }
            }
        }
        for (k, m) in members.iter().enumerate() {
            comm_rank.insert(m.2, if known { m.0 } else { k });
            for (c, call) in ends[m.2].calls.iter().enumerate() {
                seq_calls[m.1].push((call.seq, m.2, c));
            }
        }
        for p in &problems {
            t.problem(p.clone());
        }
        t.comms.push(TraceComm {
            id,
            members: present,
            problems,
        });
    }
    (comm_rank, seq_calls)
}

/// "0-3,5" of sorted ranks.
pub(crate) fn list(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i + 1 {
            format!("{}-{}", v[i], v[j])
        } else if j == i + 1 {
            format!("{},{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

/// Ends of one size (and split) that made the same calls, at most `nranks` to a
/// group and one per rank; incomplete groups that cannot all be one communicator
/// stay apart, those that can are joined (their disagreement is then named).
fn by_calls(ends: &[End], members: &[usize]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &i in members {
        let e = &ends[i];
        let fits = |g: &Vec<usize>| {
            g.len() < e.nranks
                && !g.iter().any(|&j| ends[j].who == e.who)
                && !g.iter().any(|&j| ends[j].rank.is_some() && ends[j].rank == e.rank)
                // The group's first and last ends stand for it (they agree with the
                // rest): a big job's log is not compared end by end.
                && [g[0], g[g.len() - 1]]
                    .iter()
                    .all(|&j| disagreement(&ends[j].calls, &e.calls).is_none())
                && [g[0], g[g.len() - 1]]
                    .iter()
                    .any(|&j| shares_call(&ends[j].calls, &e.calls))
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    // Incomplete groups that fit in one communicator together: one communicator
    // whose ranks disagree (named later), not two made-up ones.
    let n = members.first().map_or(0, |&i| ends[i].nranks);
    let incomplete: Vec<usize> = (0..groups.len()).filter(|&g| groups[g].len() < n).collect();
    let total: usize = incomplete.iter().map(|&g| groups[g].len()).sum();
    if incomplete.len() > 1 && total <= n {
        let mut joined: Vec<usize> = Vec::new();
        for &g in &incomplete {
            joined.extend(groups[g].iter().copied());
        }
        let distinct = {
            let mut w: Vec<&Who> = joined.iter().map(|&i| &ends[i].who).collect();
            w.sort();
            w.dedup();
            w.len() == joined.len()
        };
        if distinct {
            let mut out: Vec<Vec<usize>> = (0..groups.len())
                .filter(|g| !incomplete.contains(g))
                .map(|g| groups[g].clone())
                .collect();
            joined.sort_unstable();
            out.push(joined);
            return out;
        }
    }
    groups
}

/// Whether two ends share a collective they both made (same op, size, type), or
/// both made none (sends and receives only).
fn shares_call(a: &[RawCall], b: &[RawCall]) -> bool {
    let theirs: std::collections::HashSet<_> = b.iter().filter_map(RawCall::agreed).collect();
    a.iter()
        .filter_map(RawCall::agreed)
        .any(|x| theirs.contains(&x))
        || (theirs.is_empty() && a.iter().all(|c| c.agreed().is_none()))
}

/// A COLL line as burnin's calls on communicator `comm` (members: global ranks in the
/// order of their rank in it; `me`: this end's rank in it): NCCL's type, op and
/// per-rank count (all_gather: sent, reduce_scatter: received, alltoall: to each
/// peer) turned into burnin's (the whole buffer); a gather or scatter as the sends
/// and receives it is made of.
fn to_calls(
    r: &RawCall,
    comm: usize,
    members: &[usize],
    me: usize,
) -> Result<Vec<TraceCall>, String> {
    let Some((dtype, note)) = nccl_dtype(r.dtype) else {
        return Err(format!(
            "{}: {} with datatype {}: not a type NCCL had up to 2.28 (0-11), not replayed",
            r.at,
            r.op.name(),
            r.dtype
        ));
    };
    let (red, red_note) = match nccl_op(r.red) {
        Some(o) => (o, None),
        None => (
            RedOp::Sum,
            Some(format!(
                "reduction op {} (one made by ncclRedOpCreatePreMulSum: how PyTorch can average) replayed as sum (the same bytes)",
                r.red
            )),
        ),
    };
    let n = r.nranks.max(members.len()).max(1);
    let call = |op: Op, count: usize, root: usize, extra: Option<String>| TraceCall {
        comm,
        op,
        count,
        dtype,
        dtype_note: note.map(str::to_string),
        note: extra.or(red_note.clone()),
        red,
        root,
        source_us: None,
        grouped: false,
    };
    Ok(match r.op {
        RawOp::Op(
            op @ Op::Coll(CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll),
        ) => {
            vec![call(op, r.nccl_count * n, r.root, None)]
        }
        RawOp::Op(op) => vec![call(op, r.nccl_count, r.root, None)],
        RawOp::Gather | RawOp::Scatter => {
            let what = format!(
                "{} (NCCL 2.28) replayed as the sends and receives it is made of, root {}",
                r.op.name(),
                r.root
            );
            let root = r.root;
            let gather = r.op == RawOp::Gather;
            if me == root {
                (0..n)
                    .filter(|&p| p != root)
                    .map(|p| {
                        call(
                            if gather { Op::Recv } else { Op::Send },
                            r.nccl_count,
                            p,
                            Some(what.clone()),
                        )
                    })
                    .collect()
            } else {
                vec![call(
                    if gather { Op::Send } else { Op::Recv },
                    r.nccl_count,
                    root,
                    Some(what),
                )]
            }
        }
    })
}

/// PyTorch's dtype names (c10 ScalarType) as burnin replays them.
pub(crate) fn torch_dtype(s: &str) -> Option<(Dtype, Option<&'static str>)> {
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
                // A gloo dump's pg_config is one empty entry.
                Some(r) if r.is_empty() || pg.is_empty() => {}
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
        let have: Vec<usize> = per_rank.keys().copied().collect();
        let missing: Vec<usize> = (0..ranks).filter(|r| !per_rank.contains_key(r)).collect();
        t.problem(format!(
            "dumps of rank(s) {} but not of rank(s) {}: every rank's file is needed",
            list(&have),
            list(&missing)
        ));
    }
    t.ranks = ranks;
    infer_groups(&mut t, &mut groups, &per_rank);
    let names: Vec<String> = groups.keys().cloned().collect();
    t.add_groups(&groups, |g| per_rank.contains_key(&g), "dump");
    let mut items: Vec<Vec<FrItem>> = vec![Vec::new(); ranks];
    let mut in_flight = 0;
    for (rank, entries) in per_rank {
        for e in entries {
            // Completed, or retired by the process group (gloo leaves its entries
            // "scheduled" and retires them); the rest were in flight at the dump.
            let done = e["state"].as_str().map_or(true, |s| s == "completed")
                || e["retired"].as_bool() == Some(true);
            if !done {
                in_flight += 1;
                continue;
            }
            match fr_call(&e, rank, &names, &t.comms) {
                Ok(mut v) => items[rank].append(&mut v),
                Err(w) => t.problem(format!("rank {rank}: {w}")),
            }
        }
    }
    if in_flight > 0 {
        t.warn(format!(
            "{in_flight} call(s) still in flight when the dumps were taken (not completed, not retired): left out"
        ));
    }
    place_items(&mut t, items);
    Ok(t)
}

/// Process groups the entries name but pg_config does not list (gloo's dumps list
/// none): the ranks whose dumps name them, in rank order (new_group's order), said.
fn infer_groups(
    t: &mut Trace,
    groups: &mut BTreeMap<String, Vec<usize>>,
    per_rank: &BTreeMap<usize, Vec<serde_json::Value>>,
) {
    let mut seen: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (rank, entries) in per_rank {
        for e in entries {
            if let Some(pg) = entry_pg(e) {
                let v = seen.entry(pg).or_default();
                if !v.contains(rank) {
                    v.push(*rank);
                }
            }
        }
    }
    for (pg, mut members) in seen {
        if groups.contains_key(&pg) {
            continue;
        }
        members.sort_unstable();
        t.warn(format!(
            "process group {pg}: not in the dumps' pg_config (gloo lists none): taken as the rank(s) whose dumps name it, {}",
            list(&members)
        ));
        groups.insert(pg, members);
    }
}

/// Each rank's entries as calls on `t`: gathers and scatters as the sends and
/// receives they are made of, their root the rank whose list is not empty (the k-th
/// one on a group is the same call on every member).
fn place_items(t: &mut Trace, items: Vec<Vec<FrItem>>) {
    let ranks = t.ranks;
    // Gathers and scatters: the root is the rank that holds the list (the others'
    // is empty); the k-th one on a group is the same call on every member.
    let mut roots: HashMap<(usize, bool, usize), usize> = HashMap::new();
    for (g, its) in items.iter().enumerate() {
        let mut k: HashMap<(usize, bool), usize> = HashMap::new();
        for it in its {
            if let FrItem::Rooted {
                comm,
                gather,
                is_root,
                ..
            } = it
            {
                let n = k.entry((*comm, *gather)).or_insert(0);
                if *is_root {
                    if let Some(pos) = t.comms[*comm].members.iter().position(|m| *m == g) {
                        roots.insert((*comm, *gather, *n), pos);
                    }
                }
                *n += 1;
            }
        }
    }
    t.calls = vec![Vec::new(); ranks];
    for (g, its) in items.into_iter().enumerate() {
        let mut k: HashMap<(usize, bool), usize> = HashMap::new();
        for it in its {
            match it {
                FrItem::Call(c) => t.calls[g].push(c),
                FrItem::Rooted {
                    comm,
                    gather,
                    count,
                    dtype,
                    note,
                    is_root: _,
                    source_us,
                } => {
                    let n = k.entry((comm, gather)).or_insert(0);
                    let Some(&root) = roots.get(&(comm, gather, *n)) else {
                        t.problem(format!(
                            "rank {g}: its {}-th {} on process group {}: no rank's dump holds its root's list",
                            *n + 1,
                            if gather { "gather" } else { "scatter" },
                            t.comms[comm].id
                        ));
                        *n += 1;
                        continue;
                    };
                    *n += 1;
                    let members = t.comms[comm].members.clone();
                    let me = members.iter().position(|m| *m == g).unwrap_or(0);
                    let what = format!(
                        "{} replayed as the sends and receives it is made of (root: the rank whose list is not empty)",
                        if gather { "gather" } else { "scatter" }
                    );
                    let mk = |op: Op, peer: usize, share: f64| TraceCall {
                        comm,
                        op,
                        count,
                        dtype,
                        dtype_note: note.clone(),
                        note: Some(what.clone()),
                        red: RedOp::Sum,
                        root: peer,
                        source_us: source_us.map(|s| s * share),
                        grouped: false,
                    };
                    if me == root {
                        let peers: Vec<usize> = (0..members.len()).filter(|p| *p != root).collect();
                        let share = 1.0 / peers.len().max(1) as f64;
                        for p in peers {
                            t.calls[g].push(mk(if gather { Op::Recv } else { Op::Send }, p, share));
                        }
                    } else {
                        t.calls[g].push(mk(if gather { Op::Send } else { Op::Recv }, root, 1.0));
                    }
                }
            }
        }
    }
}

/// A Flight Recorder entry as burnin reads it: calls, or a gather/scatter whose root
/// the other ranks' dumps say.
#[derive(Clone, Debug)]
enum FrItem {
    Call(TraceCall),
    Rooted {
        comm: usize,
        gather: bool,
        count: usize,
        dtype: Dtype,
        note: Option<String>,
        is_root: bool,
        source_us: Option<f64>,
    },
}

/// One Flight Recorder entry as calls (none: not a call burnin replays, e.g. a
/// barrier, a "coalesced" marker or one that never completed): every tensor of its
/// size lists, its op (the profiling name's), a send's or receive's peer.
fn fr_call(
    e: &serde_json::Value,
    rank: usize,
    groups: &[String],
    comms: &[TraceComm],
) -> Result<Vec<FrItem>, String> {
    let name = e["profiling_name"].as_str().unwrap_or_default();
    let Some(op) = fr_op(name) else {
        return Ok(Vec::new());
    };
    let pg = entry_pg(e).unwrap_or_default();
    let comm = groups
        .iter()
        .position(|g| *g == pg)
        .ok_or_else(|| format!("{name}: process group {pg:?} is not in pg_config"))?;
    let members = &comms[comm].members;
    let n = members.len().max(1);
    let me = members.iter().position(|m| *m == rank);
    let (input, output) = (fr_sizes(e, "input_sizes"), fr_sizes(e, "output_sizes"));
    let dt = e["input_dtypes"][0]
        .as_str()
        .or(e["output_dtypes"][0].as_str())
        .unwrap_or("?");
    let (dtype, note) =
        torch_dtype(dt).ok_or_else(|| format!("{name}: dtype {dt} burnin has no stand-in for"))?;
    let source = e["duration_ms"].as_f64().map(|ms| ms * 1e3);
    let note = note.map(str::to_string);
    let base = n_base(name);
    let call = |op: Op, count: usize, root: usize, extra: Option<String>| TraceCall {
        comm,
        op,
        count,
        dtype,
        dtype_note: note.clone(),
        note: extra,
        red: RedOp::Sum,
        root,
        source_us: None,
        grouped: false,
    };
    const NO_OP: &str = "Flight Recorder records no reduction op: replayed as sum";
    let mut out: Vec<TraceCall> = match op {
        Op::Send | Op::Recv => {
            // "send 0->1": to group rank 1; "recv 1<-0": from group rank 0.
            let meta = name.split_whitespace().nth(1).unwrap_or_default();
            let peer = if op == Op::Send {
                meta.split_once("->").map(|x| x.1)
            } else {
                meta.split_once("<-").map(|x| x.1)
            }
            .and_then(|p| p.parse::<usize>().ok())
            .ok_or_else(|| format!("{name}: no peer (\"send A->B\", \"recv B<-A\")"))?;
            let count = input.iter().sum::<usize>().max(output.iter().sum());
            vec![call(op, count, peer, None)]
        }
        Op::Coll(CollKind::AllReduce) => input
            .iter()
            .map(|c| call(op, *c, 0, Some(NO_OP.into())))
            .collect(),
        Op::Coll(k @ (CollKind::Broadcast | CollKind::Reduce)) => {
            let tensors = if input.is_empty() { &output } else { &input };
            let why = format!(
                "Flight Recorder records no root{}: {} from root 0",
                if k == CollKind::Reduce {
                    " or reduction op"
                } else {
                    ""
                },
                k.name()
            );
            tensors
                .iter()
                .map(|c| call(op, *c, 0, Some(why.clone())))
                .collect()
        }
        Op::Coll(CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll) => {
            let me = me.ok_or_else(|| format!("{name}: rank {rank} is not in process group {pg}"));
            fr_lists(op, base, (&input, &output, n), me, &call)?
        }
        Op::Coll(_) => {
            let gather = base == "gather";
            if gather || base == "scatter" {
                let (is_root, count) = if gather {
                    (!output.is_empty(), input.first().copied().unwrap_or(0))
                } else {
                    (!input.is_empty(), output.first().copied().unwrap_or(0))
                };
                return Ok(vec![FrItem::Rooted {
                    comm,
                    gather,
                    count,
                    dtype,
                    note: note.clone(),
                    is_root,
                    source_us: source,
                }]);
            }
            return Ok(Vec::new());
        }
    };
    if out.is_empty() {
        return Err(format!("{name}: no input_sizes"));
    }
    // The entry's time over its calls, by their bytes.
    if let Some(s) = source {
        let total: usize = out.iter().map(|c| c.count).sum::<usize>().max(1);
        for c in &mut out {
            c.source_us = Some(s * c.count as f64 / total as f64);
        }
    }
    // A coalesced entry's collectives are one NCCL group (PyTorch's *_coalesced).
    if out.iter().all(|c| matches!(c.op, Op::Coll(_))) {
        for c in out.iter_mut().skip(1) {
            c.grouped = true;
        }
    }
    Ok(out.into_iter().map(FrItem::Call).collect())
}

/// The elements of each tensor in an entry's size list (`input_sizes`: [[4, 256],
/// [1024]] → [1024, 1024]).
fn fr_sizes(e: &serde_json::Value, key: &str) -> Vec<usize> {
    e[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.as_array()?
                .iter()
                .map(|d| d.as_u64().map(|x| x as usize))
                .product::<Option<usize>>()
        })
        .collect()
}

/// A list-shaped Flight Recorder entry as calls: all_gather's list of outputs (or
/// each tensor of a coalesced one), reduce_scatter's list of inputs (or each tensor),
/// all_to_all's per-peer list (even: one alltoall; uneven: a send and a receive per
/// peer, as NCCL runs all_to_all_v). `sizes`: (input, output elements per tensor,
/// group size); `me`: this rank's place in the group.
fn fr_lists(
    op: Op,
    base: &str,
    (input, output, n): (&[usize], &[usize], usize),
    me: Result<usize, String>,
    call: &dyn Fn(Op, usize, usize, Option<String>) -> TraceCall,
) -> Result<Vec<TraceCall>, String> {
    const NO_OP: &str = "Flight Recorder records no reduction op: replayed as sum";
    let mut out = Vec::new();
    match op {
        Op::Coll(CollKind::AllGather) if base == "all_gather" => {
            // A list of n outputs, one input: one all_gather of their sum.
            let total = if output.is_empty() {
                input.iter().sum::<usize>() * n
            } else {
                output.iter().sum()
            };
            out.push(call(op, total, 0, None));
        }
        Op::Coll(CollKind::AllGather) => {
            for (i, c) in input.iter().enumerate() {
                out.push(call(op, output.get(i).copied().unwrap_or(c * n), 0, None));
            }
        }
        Op::Coll(CollKind::ReduceScatter) if base == "reduce_scatter" => {
            let total = if input.is_empty() {
                output.iter().sum::<usize>() * n
            } else {
                input.iter().sum()
            };
            out.push(call(op, total, 0, Some(NO_OP.into())));
        }
        Op::Coll(CollKind::ReduceScatter) => {
            for c in input {
                out.push(call(op, *c, 0, Some(NO_OP.into())));
            }
        }
        _ => {
            let even = input.len() <= 1 || input.windows(2).all(|w| w[0] == w[1]);
            let out_even = output.len() <= 1 || output.windows(2).all(|w| w[0] == w[1]);
            if input.len() == n && n > 1 && !(even && out_even && input == output) {
                let me = me?;
                let v = "all_to_all with per-peer sizes replayed as one send and one receive per peer (how NCCL runs it)".to_string();
                for p in (0..n).filter(|p| *p != me) {
                    out.push(call(Op::Send, input[p], p, Some(v.clone())));
                    out.push(call(
                        Op::Recv,
                        output.get(p).copied().unwrap_or(input[p]),
                        p,
                        Some(v.clone()),
                    ));
                }
            } else {
                out.push(call(op, input.iter().sum(), 0, None));
            }
        }
    }
    Ok(out)
}

/// The process group an entry names (`process_group[0]`, or `pg_id`).
fn entry_pg(e: &serde_json::Value) -> Option<String> {
    e["process_group"][0]
        .as_str()
        .map(str::to_string)
        .or_else(|| e["pg_id"].as_u64().map(|p| p.to_string()))
}

/// The profiling name's operation without the backend, the leading '_' and the
/// peer ("nccl:_all_gather_base" → "all_gather_base").
fn n_base(name: &str) -> &str {
    name.rsplit(':')
        .next()
        .and_then(|n| n.split_whitespace().next())
        .unwrap_or_default()
        .trim_start_matches('_')
}

/// The op of a Flight Recorder `profiling_name` ("nccl:all_reduce",
/// "nccl:_allgather_base", "nccl:reduce_scatter_tensor_coalesced", "nccl:send 0->1",
/// "nccl:gather"); gathers and scatters as `Reduce`-less rooted calls handled by
/// [`fr_call`].
pub(crate) fn fr_op(name: &str) -> Option<Op> {
    let n = n_base(name);
    let l = n.to_ascii_lowercase();
    Some(
        if l.starts_with("all_reduce_barrier") || l == "barrier" || l == "coalesced" {
            return None;
        } else if l.starts_with("all_reduce") || l.starts_with("allreduce") {
            Op::Coll(CollKind::AllReduce)
        } else if l.starts_with("all_gather") || l.starts_with("allgather") {
            Op::Coll(CollKind::AllGather)
        } else if l.starts_with("reduce_scatter") {
            Op::Coll(CollKind::ReduceScatter)
        } else if l.starts_with("broadcast") {
            Op::Coll(CollKind::Broadcast)
        } else if l.starts_with("all_to_all") || l.starts_with("alltoall") {
            Op::Coll(CollKind::AllToAll)
        } else if l.starts_with("reduce") {
            Op::Coll(CollKind::Reduce)
        } else if l == "gather" || l == "scatter" {
            // Placeholder kind: fr_call turns them into sends and receives.
            Op::Coll(CollKind::SendRecv)
        } else if l == "send" {
            Op::Send
        } else if l == "recv" {
            Op::Recv
        } else {
            return None;
        },
    )
}

/// The calls of one step: the block that repeats back to back (at least twice) over
/// the longest stretch of the trace's end; None when nothing repeats. A step ending in
/// two small all_reduces (loss, gradient norm) repeats its last call twice, but the
/// whole step explains more of the trace; between a block and its multiples (as long
/// a stretch either way) the shorter one is the step. Calls are compared by
/// [`TraceCall::signature`]; the last 20,000 calls are looked at.
pub fn step_period(calls: &[TraceCall]) -> Option<usize> {
    step_range(calls).map(|r| r.1)
}

/// The last whole repetition of the step, counted from where the repeating stretch
/// starts (not from the end: a rank whose trace lost its last call, still in flight
/// when it was written, keeps the same step as the others, not a rotation of it):
/// (its first call, the step's length).
pub fn step_range(calls: &[TraceCall]) -> Option<(usize, usize)> {
    let skip = calls.len().saturating_sub(20_000);
    let sig: Vec<_> = calls[skip..].iter().map(TraceCall::signature).collect();
    let n = sig.len();
    let mut best: Option<(usize, usize)> = None; // (where the stretch starts, period)
    for p in 1..=n / 2 {
        // The stretch at the end where every call is the one p before it again.
        let mut start = n - p;
        while start > 0 && sig[start - 1] == sig[start - 1 + p] {
            start -= 1;
        }
        let explained = n - start;
        if explained < 2 * p {
            continue;
        }
        let better = match best {
            None => true,
            Some((s, q)) => explained > n - s || (explained == n - s && p % q != 0),
        };
        if better {
            best = Some((start, p));
        }
        // The whole window repeats: no longer block can explain more, nor (being
        // no multiple of it) as much.
        if start == 0 {
            break;
        }
    }
    let (start, p) = best?;
    let whole = (n - start) / p;
    Some((skip + start + (whole - 1) * p, p))
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
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!(t.ranks, 4);
        let mut ids: Vec<(&str, Vec<usize>)> = t
            .comms
            .iter()
            .map(|c| (c.id.as_str(), c.members.clone()))
            .collect();
        ids.sort();
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
        // 3 of 128 ranks: not the whole job, and no made-up mismatch between ranks
        // whose logs do not overlap.
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        assert!(
            t.problems[0].contains("of 128 rank(s): the trace holds 3 of them"),
            "{:?}",
            t.problems
        );
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
        // One communicator of 8 with 4 ranks in the log, whose rank 0 broadcasts 25.5 M
        // fp16 where rank 1 broadcasts 53 int64 at the same call: named, with why it
        // hangs — not split into two made-up communicators.
        let sizes: Vec<Vec<usize>> = t.comms.iter().map(|c| c.members.clone()).collect();
        assert_eq!(sizes, vec![vec![0, 1, 2, 3]], "{t:?}");
        let p = t.problems.join("\n");
        assert!(p.contains("of 8 rank(s): the trace holds 4 of them"), "{p}");
        assert!(
            p.contains(
                "rank 0 and rank 1 disagree at the same call: broadcast of count 25503912 fp16"
            ) && p.contains("against broadcast of count 53 int64")
                && p.contains("classic cause of NCCL hangs"),
            "{p}"
        );
    }

    /// One log per NCCL line shape since 2.18 (tests/fixtures/traces/README.md), all
    /// the same job: 4 ranks on two hosts, the world and its split by host.
    #[test]
    fn every_nccl_line_shape_since_2_18() {
        let dir = format!(
            "{}/tests/fixtures/traces/shapes",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut read = 0;
        for name in [
            "nccl-2.18.1.log",
            "nccl-2.18.3-2.20.log",
            "nccl-2.21-2.22.log",
            "nccl-2.23.log",
            "nccl-2.24-2.27.log",
            "nccl-2.28-timestamps.log",
            "nccl-2.29.log",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{name}")).unwrap();
            let t = parse_nccl(&[(name, &text)]);
            assert_eq!(t.problems, Vec::<String>::new(), "{name}");
            assert_eq!(t.warnings, Vec::<String>::new(), "{name}");
            assert_eq!(t.ranks, 4, "{name}");
            // Every call its own launch (opCount advances, or never moves): no group.
            assert!(t.calls.iter().flatten().all(|c| !c.grouped), "{name}");
            let hosts: Vec<Option<&str>> = t.hosts.iter().map(|h| h.as_deref()).collect();
            assert_eq!(
                hosts,
                [Some("nodeA"), Some("nodeA"), Some("nodeB"), Some("nodeB")],
                "{name}"
            );
            let mut comms: Vec<Vec<usize>> = t.comms.iter().map(|c| c.members.clone()).collect();
            comms.sort();
            assert_eq!(
                comms,
                vec![vec![0, 1], vec![0, 1, 2, 3], vec![2, 3]],
                "{name}"
            );
            let world = t.comms.iter().position(|c| c.members.len() == 4).unwrap();
            assert_eq!(t.comms[world].id, "0x8a3f6c2d9e1b4f70", "{name}");
            let new = name.contains("2.28");
            for (g, calls) in t.calls.iter().enumerate() {
                // A step: all_gather, reduce_scatter (split); all_reduce avg, [2.28:
                // alltoall, gather to world rank 2], two 1-element all_reduces (world).
                let gather = if !new {
                    0
                } else if g == 2 {
                    3
                } else {
                    1
                };
                let per = 5 + usize::from(new) + gather;
                assert_eq!(calls.len(), 3 * per, "{name} rank {g}");
                assert_eq!(step_period(calls), Some(per), "{name} rank {g}");
                let split = &t.comms[calls[0].comm];
                assert_eq!(split.members, if g < 2 { [0, 1] } else { [2, 3] }, "{name}");
                assert_eq!(
                    (calls[0].op, calls[0].count, calls[0].dtype),
                    (Op::Coll(CollKind::AllGather), 2048, Dtype::Bf16)
                );
                let ar = &calls[2];
                assert_eq!((ar.comm, ar.count, ar.dtype), (world, 262_144, Dtype::F32));
                if new {
                    // 2.28: a PreMulSum handle replayed as sum, said; alltoall of 4096
                    // a peer; the gather as its sends and receives.
                    assert_eq!(ar.red, RedOp::Sum);
                    assert!(ar.note.as_deref().unwrap().contains("PreMulSum"));
                    assert_eq!(
                        (calls[3].op, calls[3].count),
                        (Op::Coll(CollKind::AllToAll), 16_384)
                    );
                    let p2p: Vec<(Op, usize)> = calls[4..4 + gather]
                        .iter()
                        .map(|c| (c.op, c.root))
                        .collect();
                    if g == 2 {
                        assert_eq!(p2p, [(Op::Recv, 0), (Op::Recv, 1), (Op::Recv, 3)]);
                    } else {
                        assert_eq!(p2p, [(Op::Send, 2)]);
                    }
                } else {
                    assert_eq!((ar.red, ar.note.as_deref()), (RedOp::Avg, None));
                }
            }
            read += 1;
        }
        assert_eq!(read, 7);
    }

    /// One process driving two GPUs (ncclCommInitAll, JAX, TensorFlow): each GPU is a
    /// rank, placed by its Init line, whatever device the calling thread had current.
    #[test]
    fn a_process_with_several_gpus_is_several_ranks() {
        let path = format!(
            "{}/tests/fixtures/traces/shapes/nccl-2.23-one-process-two-gpus.log",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let t = parse_nccl(&[(&path, &text)]);
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!((t.ranks, t.comms.len()), (4, 1));
        assert_eq!(t.comms[0].members, [0, 1, 2, 3]);
        for calls in &t.calls {
            assert_eq!(calls.len(), 3);
            assert!(calls
                .iter()
                .all(|c| c.count == 65_536 && c.dtype == Dtype::F16));
        }
    }

    fn line(
        host: &str,
        pid: u32,
        name: &str,
        op_count: u64,
        count: usize,
        ptr: &str,
        n: usize,
    ) -> String {
        format!(
            "{host}:{pid}:{pid} [0] NCCL INFO {name}: opCount {op_count:x} sendbuff 0x7f00 recvbuff 0x7f00 count {count} datatype 7 op 0 root 0 comm {ptr} [nranks={n}] stream 0x5600\n"
        )
    }

    /// NCCL 2.27+ keeps opCount 0 on an intra-node communicator: calls are told apart
    /// by their order, not overwritten by their opCount.
    #[test]
    fn opcount_zero_for_every_call_keeps_every_call() {
        let mut s = String::new();
        for _ in 0..3 {
            for (name, count) in [
                ("AllReduce", 1024),
                ("AllGather", 512),
                ("AllReduce", 1),
                ("AllReduce", 1),
            ] {
                for (pid, ptr) in [(11, "0xa1"), (12, "0xb2")] {
                    s += &line("h", pid, name, 0, count, ptr, 2);
                }
            }
        }
        let t = parse_nccl(&[("pt.log", &s)]);
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!((t.ranks, t.comms.len()), (2, 1), "{t:?}");
        assert_eq!(t.comms[0].members, [0, 1]);
        for calls in &t.calls {
            let counts: Vec<usize> = calls.iter().map(|c| c.count).collect();
            // all_gather's 512 a rank is 1024 in burnin's convention.
            assert_eq!(counts, [1024, 1024, 1, 1].repeat(3));
            // The step is the four calls, not the last two 1-element all_reduces.
            assert_eq!(step_period(calls), Some(4));
        }
    }

    /// Calls NCCL launched as one group print one opCount, which advances between
    /// launches: a step of two groups (3 reduce_scatters, then 2 all_reduces) and a
    /// lone broadcast, over two hosts. A communicator whose opCount never moves (NCCL
    /// 2.27+, intra-node) tells no group.
    #[test]
    fn calls_that_share_an_opcount_are_one_group() {
        let mut s = String::new();
        let mut op = 0;
        for _ in 0..3 {
            for (name, count, next) in [
                ("ReduceScatter", 256, false),
                ("ReduceScatter", 512, false),
                ("ReduceScatter", 256, true),
                ("AllReduce", 1024, false),
                ("AllReduce", 2048, true),
                ("Broadcast", 64, true),
            ] {
                for (host, ptr) in [("a", "0xa1"), ("b", "0xb2")] {
                    s += &line(host, 11, name, op, count, ptr, 2);
                }
                op += u64::from(next);
            }
        }
        let t = parse_nccl(&[("g.log", &s)]);
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!((t.ranks, t.comms.len()), (2, 1), "{t:?}");
        for calls in &t.calls {
            let grouped: Vec<bool> = calls.iter().map(|c| c.grouped).collect();
            assert_eq!(grouped, [false, true, true, false, true, false].repeat(3));
            assert_eq!(step_period(calls), Some(6));
        }
        // The same calls at opCount 0 throughout: no group can be told.
        let flat = s
            .lines()
            .map(|l| {
                let (a, b) = l.split_once("opCount ").unwrap_or((l, ""));
                let rest = b.split_once(' ').map_or("", |x| x.1);
                format!("{a}opCount 0 {rest}\n")
            })
            .collect::<String>();
        let t = parse_nccl(&[("flat.log", &flat)]);
        assert_eq!(t.calls[0].len(), 18);
        assert!(t.calls.iter().flatten().all(|c| !c.grouped));
    }

    /// A rank whose dump lost its last call (still in flight when it was written: a
    /// real gloo job's dump did) keeps the same step as the others, not a rotation.
    #[test]
    fn a_rank_that_lost_its_last_call_keeps_the_same_step() {
        let mut s = String::new();
        for _ in 0..4 {
            for (name, count) in [
                ("AllReduce", 4096),
                ("AllGather", 256),
                ("Broadcast", 64),
                ("AllReduce", 1),
            ] {
                s += &line("h", 11, name, 0, count, "0xa1", 2);
            }
        }
        let t = parse_nccl(&[("one.log", &s)]);
        let calls = &t.calls[0];
        let (from, p) = step_range(calls).unwrap();
        let (from2, p2) = step_range(&calls[..calls.len() - 1]).unwrap();
        assert_eq!((p, p2), (4, 4));
        assert_eq!(calls[from..from + p], calls[from2..from2 + p2]);
        assert_eq!((from, from2), (12, 8));
    }

    /// Traces that are not the whole job say what is missing or wrong: never
    /// replayed as if whole.
    #[test]
    fn partial_and_mismatched_traces_are_not_whole() {
        // 2 of a communicator's 4 ranks, which disagree at opCount 6: one all_reduces,
        // the other all_gathers (the hang its thread was about).
        let mut s = String::new();
        s += &line("a", 1, "AllReduce", 5, 1024, "0x1", 4);
        s += &line("b", 2, "AllReduce", 5, 1024, "0x2", 4);
        s += &line("a", 1, "AllReduce", 6, 2048, "0x1", 4);
        s += &line("b", 2, "AllGather", 6, 512, "0x2", 4);
        let t = parse_nccl(&[("hang.log", &s)]);
        let p = t.problems.join("\n");
        assert!(
            p.contains(
                "of 4 rank(s): the trace holds 2 of them (global rank(s) 0,1), 2 rank(s) missing"
            ),
            "{p}"
        );
        assert!(
            p.contains("rank 0 and rank 1 disagree at the same call: all_reduce of count 2048 fp32 sum (opCount 0x6, hang.log:3) against all_gather of count 512 fp32 (opCount 0x6, hang.log:4)")
                && p.contains("classic cause of NCCL hangs"),
            "{p}"
        );
        assert_eq!(t.comms.len(), 1, "one communicator, not two made-up ones");
        // 1 of 32.
        let t = parse_nccl(&[("one.log", &line("a", 1, "AllReduce", 0, 64, "0x1", 32))]);
        assert!(
            t.problems[0].contains("of 32 rank(s): the trace holds 1 of them"),
            "{:?}",
            t.problems
        );
        // 1 of 4, with a modern Init line: the missing ranks by number.
        let init = "a:1:9 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0xabc - Init COMPLETE\n";
        let t = parse_nccl(&[(
            "init.log",
            &format!("{init}{}", line("a", 1, "AllReduce", 0, 64, "0x1", 4)),
        )]);
        assert_eq!(t.ranks, 4);
        assert!(
            t.problems[0].contains("its rank(s) 1-3 missing"),
            "{:?}",
            t.problems
        );
        // What --allow-partial replays of it: nothing, said.
        let w = t.whole_part();
        assert!(w.comms.is_empty() && w.calls.iter().all(Vec::is_empty));
        assert_eq!(w.left_out, t.problems);
        // A call NCCL 2.29 has and burnin does not replay: the trace is not whole.
        let t = parse_nccl(&[("rma.log", &line("a", 1, "PutSignal", 0, 64, "0x1", 1))]);
        assert!(
            t.problems[0].contains("PutSignal: a call burnin does not know"),
            "{:?}",
            t.problems
        );
    }

    /// Flight Recorder: every tensor of a coalesced call, a send's peer, an uneven
    /// all_to_all as its sends and receives, a gather's root from whose list is full.
    #[test]
    fn flight_recorder_entries_keep_sizes_peers_and_roots() {
        // all_to_all_v: rank r sends in[r][j] to j, which receives it as out[j][r].
        let a2a_in = [
            serde_json::json!([[10], [20]]),
            serde_json::json!([[11], [21]]),
        ];
        let a2a_out = [
            serde_json::json!([[10], [11]]),
            serde_json::json!([[20], [21]]),
        ];
        let dump = |rank: usize| {
            serde_json::json!({
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                "entries": [
                    {"process_group": ["0", "default_pg"], "profiling_name": "nccl:allreduce_coalesced",
                     "input_sizes": [[4, 256], [1024]], "input_dtypes": ["Float", "Float"],
                     "output_sizes": [[4, 256], [1024]], "output_dtypes": ["Float", "Float"],
                     "state": "completed", "duration_ms": 2.0},
                    {"process_group": ["0", "default_pg"],
                     "profiling_name": if rank == 0 { "nccl:send 0->1" } else { "nccl:recv 1<-0" },
                     "input_sizes": [[100]], "input_dtypes": ["BFloat16"],
                     "output_sizes": [[100]], "output_dtypes": ["BFloat16"], "state": "completed"},
                    {"process_group": ["0", "default_pg"], "profiling_name": "nccl:all_to_all",
                     "input_sizes": a2a_in[rank], "input_dtypes": ["Float", "Float"],
                     "output_sizes": a2a_out[rank], "output_dtypes": ["Float", "Float"],
                     "state": "completed"},
                    {"process_group": ["0", "default_pg"], "profiling_name": "nccl:gather",
                     "input_sizes": [[8]], "input_dtypes": ["Float"],
                     "output_sizes": if rank == 1 { serde_json::json!([[8], [8]]) } else { serde_json::json!([]) },
                     "output_dtypes": ["Float"], "state": "completed"},
                ]
            })
            .to_string()
        };
        let (a, b) = (dump(0), dump(1));
        let t = parse_flight_recorder(&[("fr/rank_0", &a), ("fr/rank_1", &b)]).unwrap();
        assert_eq!(t.problems, Vec::<String>::new());
        let show = |g: usize| -> Vec<(&'static str, usize, usize)> {
            t.calls[g]
                .iter()
                .map(|c| (c.op.name(), c.count, c.root))
                .collect()
        };
        assert_eq!(
            show(0),
            [
                ("all_reduce", 1024, 0),
                ("all_reduce", 1024, 0),
                ("send", 100, 1),
                ("send", 20, 1),
                ("recv", 11, 1),
                ("send", 8, 1),
            ]
        );
        assert_eq!(
            show(1),
            [
                ("all_reduce", 1024, 0),
                ("all_reduce", 1024, 0),
                ("recv", 100, 0),
                ("send", 11, 0),
                ("recv", 20, 0),
                ("recv", 8, 0),
            ]
        );
        // The coalesced entry's 2 ms over its two tensors, by bytes; its tensors are
        // one NCCL group, the sends and receives not.
        assert!((t.calls[0][0].source_us.unwrap() - 1000.0).abs() < 1e-9);
        for calls in &t.calls {
            let grouped: Vec<bool> = calls.iter().map(|c| c.grouped).collect();
            assert_eq!(grouped, [false, true, false, false, false, false]);
        }
    }

    /// A real Flight Recorder dump, recorded here from a torch.distributed job on
    /// gloo (tests/fixtures/traces/torch-gloo/record.py): gloo leaves its entries
    /// "scheduled" and retires them, lists no pg_config and no durations.
    #[test]
    fn a_real_gloo_flight_recorder_dump_reads_whole() {
        let dir = format!(
            "{}/tests/fixtures/traces/torch-gloo",
            env!("CARGO_MANIFEST_DIR")
        );
        let files: Vec<(String, String)> = (0..2)
            .map(|r| {
                let p = format!("{dir}/rank_{r}");
                let text = std::fs::read_to_string(&p).unwrap();
                (p, text)
            })
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let t = parse_flight_recorder(&refs).unwrap();
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!((t.ranks, t.comms.len()), (2, 1), "{t:?}");
        assert_eq!(t.comms[0].members, [0, 1]);
        assert!(
            t.warnings[0].contains("not in the dumps' pg_config"),
            "{:?}",
            t.warnings
        );
        for calls in &t.calls {
            assert_eq!(calls.len(), 36);
            assert_eq!(step_period(calls), Some(12));
            let step: Vec<(&str, usize)> =
                calls[..12].iter().map(|c| (c.op.name(), c.count)).collect();
            let mut want = vec![("all_reduce", 16_384); 8];
            want.extend([
                ("all_reduce", 6144),
                ("all_gather", 512),
                ("broadcast", 16_384),
                ("all_reduce", 1),
            ]);
            assert_eq!(step, want);
            assert!(calls.iter().all(|c| c.source_us.is_none()));
        }
    }

    #[test]
    fn types_ops_and_names_are_nccl_s() {
        assert_eq!(nccl_dtype(9), Some((Dtype::Bf16, None)));
        assert_eq!(nccl_dtype(4), Some((Dtype::F64, Some("int64 as f64"))));
        assert_eq!(nccl_dtype(12), None);
        assert_eq!(nccl_op(4), Some(RedOp::Avg));
        assert_eq!(nccl_op(5), None);
        assert_eq!(
            nccl_name("Bcast"),
            Some(RawOp::Op(Op::Coll(CollKind::Broadcast)))
        );
        assert_eq!(
            nccl_name("AlltoAll"),
            Some(RawOp::Op(Op::Coll(CollKind::AllToAll)))
        );
        assert_eq!(nccl_name("Gather"), Some(RawOp::Gather));
        assert_eq!(nccl_name("PutSignal"), None);
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
        // Rank 0's dump missing: not whole, said.
        let t1 = parse_flight_recorder(&[("fr/rank_1", &b)]).unwrap();
        let p = t1.problems.join("\n");
        assert!(
            p.contains("not of rank(s) 0") && p.contains("no dump of its rank(s) 0"),
            "{p}"
        );
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let e = parse_flight_recorder(&[("fr/rank_0", "{")]).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }
}
