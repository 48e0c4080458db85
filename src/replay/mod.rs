//! `burnin replay --trace FILES…`: a job's own collectives, read from its NCCL COLL log
//! or Flight Recorder dumps ([`trace`]), replayed here on burnin's backend, step by
//! step, with checking; the step's communication time here, per collective, and
//! against the source cluster's where the trace has times.
//!
//! Each rank replays the calls its own rank made in the trace's last whole step (the
//! shortest block of calls that repeats back to back at its end, or `--step-calls`),
//! in the same order, on a communicator per trace communicator (the same global ranks,
//! ordered as in the trace). Calls are blocking, so calls of different communicators
//! run in the trace's order on each rank; a rank's consecutive sends and receives on
//! one communicator run as one group (one NCCL group, MPI requests waited for
//! together), each message checked against the sender's pattern for it; collectives
//! the job launched as one NCCL group ([`trace::TraceCall::grouped`]) run as one group
//! ([`Backend::run_colls`]).
//!
//! A trace of R ranks replays on k × R with `--grow` ([`scale`]): the job repeated k
//! times, its data-parallel groups grown over the copies, the rest repeated per copy.
pub mod profiler;
pub mod scale;
pub mod trace;

use crate::backend::{self, Backend, Bufs, Call, WaitCtx};
use crate::collective::pattern::Run;
use crate::collective::{self, P2p, Params, Pattern, Source};
use crate::config::GlobalArgs;
use crate::error::{Agreed, Outcome};
use crate::kinds::{Dtype, RedOp};
use crate::results::replay::{self as rec, CallKey, RankTimes, ReplayReport};
use crate::watchdog::Watchdog;
use crate::world::World;
use anyhow::{Context, Result};
use clap::Args;
use mpi::collective::CommunicatorCollectives;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use trace::{Op, Trace, TraceCall};

/// The trace formats burnin reads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Format {
    /// JSON with `traceEvents`: profiler; other JSON: Flight Recorder; anything
    /// else: NCCL COLL log.
    Auto,
    /// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL lines.
    Nccl,
    /// PyTorch Flight Recorder JSON dumps, one per rank.
    FlightRecorder,
    /// PyTorch profiler traces (Chrome trace JSON), one per rank.
    Profiler,
}

#[derive(Args, Debug, Serialize, Clone)]
pub struct ReplayArgs {
    /// The job's trace: NCCL logs (one per rank or one for all) or Flight Recorder
    /// JSON dumps (one per rank, file names ending in the rank); a folder stands for
    /// every file in it.
    #[arg(long = "trace", num_args = 1.., required = true, value_name = "FILE")]
    pub trace: Vec<PathBuf>,
    /// The trace's format.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    pub format: Format,
    /// Steps to time after the warm-up.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub steps: u32,
    /// Steps to run first without timing.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Calls of one step, per rank (default: found from the repeating pattern at the
    /// end of each rank's calls).
    #[arg(long = "step-calls", value_name = "N")]
    pub step_calls: Option<usize>,
    /// Check every result of one step (1) or not (0).
    #[arg(long = "check", default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,
    /// Replay a trace that is not the whole job (ranks missing from a communicator,
    /// ranks that disagree, calls that cannot be placed): its whole communicators
    /// only, the rest NOT COMPARABLE in the verdict. Without it such a trace is
    /// refused (exit 2) naming what is missing.
    #[arg(long = "allow-partial")]
    pub allow_partial: bool,
    /// Fail when a step takes more than this many times the source's communication
    /// time (needs a trace with times).
    #[arg(long = "max-slowdown", value_name = "X")]
    pub max_slowdown: Option<f64>,
    /// The source's times from a replay.json of the same trace made there (another
    /// cluster, or this one before a change): the "there" of here / there.
    #[arg(long, value_name = "REPLAY_JSON")]
    pub baseline: Option<PathBuf>,
    /// How the trace's communicators scale when this job has k times the trace's
    /// ranks: `auto` (those that span hosts in the trace, and the world, grow over
    /// the k copies of the job; those inside a host repeat per copy) or the ids of
    /// the communicators that grow, comma-separated.
    #[arg(long, value_name = "auto|ID,ID")]
    pub grow: Option<String>,
    /// Where each of the trace's ranks runs when the job's launcher did not place
    /// them contiguously: job rank of trace rank 0, 1, … (after `--grow`), e.g.
    /// `0,2,1,3`.
    #[arg(long = "rank-map", value_name = "R0,R1,…")]
    pub rank_map: Option<String>,
    /// Directory for replay.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `--baseline`: an earlier replay.json (of the same trace).
fn load_baseline(p: &std::path::Path) -> Result<ReplayReport, String> {
    let text = std::fs::read(p).map_err(|e| format!("--baseline: {}: {e}", p.display()))?;
    serde_json::from_slice(&text)
        .map_err(|e| format!("--baseline: {}: not a replay.json ({e})", p.display()))
}

/// The trace's files: each given file, and every file of a given folder (name order,
/// hidden ones left out).
fn files(given: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in given {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let rd = std::fs::read_dir(p).map_err(|e| format!("--trace: {}: {e}", p.display()))?;
        let mut inside: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file())
            .filter(|f| {
                !f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        if inside.is_empty() {
            return Err(format!("--trace: {}: an empty folder", p.display()));
        }
        inside.sort();
        out.extend(inside);
    }
    Ok(out)
}

/// Read the trace files on this rank (rank 0 does; the others get it broadcast).
pub fn load(args: &ReplayArgs) -> Result<Trace, String> {
    let mut texts = Vec::new();
    for p in &files(&args.trace)? {
        let t = std::fs::read_to_string(p).map_err(|e| format!("--trace: {}: {e}", p.display()))?;
        texts.push((p.display().to_string(), t));
    }
    let refs: Vec<(&str, &str)> = texts
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let json = refs.iter().all(|(_, t)| t.trim_start().starts_with('{'));
    let profiler = json && refs.iter().all(|(_, t)| profiler::is_profiler(t));
    let t = match (args.format, json) {
        (Format::Profiler, _) => {
            profiler::parse_profiler(&refs).map_err(|e| format!("--trace: {e}"))?
        }
        (Format::Auto, true) if profiler => {
            profiler::parse_profiler(&refs).map_err(|e| format!("--trace: {e}"))?
        }
        (Format::FlightRecorder, _) | (Format::Auto, true) => {
            trace::parse_flight_recorder(&refs).map_err(|e| format!("--trace: {e}"))?
        }
        _ => trace::parse_nccl(&refs),
    };
    let t = if t.problems.is_empty() {
        t
    } else if args.allow_partial {
        t.whole_part()
    } else {
        return Err(not_whole(&t));
    };
    if t.calls.iter().all(Vec::is_empty) {
        let why = t
            .left_out
            .first()
            .or(t.warnings.first())
            .cloned()
            .unwrap_or_else(|| "no collective calls found".into());
        return Err(format!("--trace: nothing to replay: {why}"));
    }
    Ok(t)
}

/// Why a trace that is not the whole job is refused: each problem on a line.
pub fn not_whole(t: &Trace) -> String {
    let shown: Vec<String> = t
        .problems
        .iter()
        .take(12)
        .map(|p| format!("  - {p}"))
        .collect();
    let more = t.problems.len().saturating_sub(shown.len());
    format!(
        "--trace: the trace is not the whole job, and a replay of part of it would be judged as if it were:\n{}{}\n(pass --allow-partial to replay its whole communicators only; the rest is then NOT COMPARABLE)",
        shown.join("\n"),
        if more > 0 { format!("\n  - and {more} more") } else { String::new() }
    )
}

/// Each rank's step: the last `step_calls` calls; else the last step the job marked
/// on every rank (the profiler's `ProfilerStep#N`); else the repeating block at the
/// end.
pub fn steps_of(t: &Trace, step_calls: Option<usize>) -> Vec<Vec<TraceCall>> {
    let marked = step_calls
        .is_none()
        .then(|| profiler::common_step(t))
        .flatten();
    t.calls
        .iter()
        .enumerate()
        .map(|(g, calls)| {
            let recorded = marked.and_then(|n| {
                t.recorded_steps
                    .get(g)?
                    .iter()
                    .find(|s| s.number == n)
                    .map(|s| (s.first, s.calls))
            });
            let (from, p) = match (step_calls, recorded) {
                (Some(p), _) => (calls.len().saturating_sub(p), p),
                (None, Some(r)) => r,
                (None, None) => trace::step_range(calls).unwrap_or((0, calls.len())),
            };
            calls[from.min(calls.len())..(from + p).min(calls.len())].to_vec()
        })
        .collect()
}

/// Every member of a communicator must make the same calls on it in a step, and each
/// rank's sends to another must be that rank's receives from it, message for message;
/// Err names the first communicator where they differ.
pub fn consistent(t: &Trace, steps: &[Vec<TraceCall>]) -> Result<(), String> {
    p2p_pairs(t, steps)?;
    for (c, comm) in t.comms.iter().enumerate() {
        let on = |g: usize| -> Vec<_> {
            steps[g]
                .iter()
                .filter(|x| x.comm == c && matches!(x.op, Op::Coll(_)))
                .map(|x| (x.op, x.count, x.dtype, x.red, x.root))
                .collect()
        };
        let Some(&first) = comm.members.first() else {
            continue;
        };
        let want = on(first);
        if let Some(&g) = comm.members.iter().find(|&&g| on(g) != want) {
            let theirs = on(g);
            let at = want.iter().zip(&theirs).position(|(a, b)| a != b);
            let what = match at {
                Some(i) => format!(
                    ", the {}-th differs: {} of {} {} against {} of {} {}",
                    i + 1,
                    want[i].0.name(),
                    want[i].1,
                    want[i].2,
                    theirs[i].0.name(),
                    theirs[i].1,
                    theirs[i].2
                ),
                None => String::new(),
            };
            return Err(format!(
                "communicator {}: rank {first} makes {} collective(s) a step on it, rank {g} {}{what} (or others): pass --step-calls, or a trace of whole steps",
                comm.id,
                want.len(),
                theirs.len()
            ));
        }
    }
    Ok(())
}

/// Per communicator, the bytes each rank sends to each other in a step must be what
/// that one receives from it, in order.
fn p2p_pairs(t: &Trace, steps: &[Vec<TraceCall>]) -> Result<(), String> {
    use std::collections::BTreeMap;
    // (comm, from, to) → message sizes, as sent and as received (global ranks).
    let mut sent: BTreeMap<(usize, usize, usize), Vec<u64>> = BTreeMap::new();
    let mut got: BTreeMap<(usize, usize, usize), Vec<u64>> = BTreeMap::new();
    for (g, step) in steps.iter().enumerate() {
        for x in step {
            let Some(&peer) = t.comms.get(x.comm).and_then(|c| c.members.get(x.root)) else {
                if !matches!(x.op, Op::Coll(_)) {
                    return Err(format!(
                        "communicator {}: rank {g}'s {} names peer {}, not one of its {} rank(s)",
                        t.comms.get(x.comm).map_or("?", |c| c.id.as_str()),
                        x.op.name(),
                        x.root,
                        t.comms.get(x.comm).map_or(0, |c| c.members.len())
                    ));
                }
                continue;
            };
            match x.op {
                Op::Send => sent.entry((x.comm, g, peer)).or_default().push(x.bytes()),
                Op::Recv => got.entry((x.comm, peer, g)).or_default().push(x.bytes()),
                Op::Coll(_) => {}
            }
        }
    }
    for key in sent.keys().chain(got.keys()) {
        let (a, b) = (sent.get(key), got.get(key));
        if a != b {
            let (c, from, to) = *key;
            return Err(format!(
                "communicator {}: rank {from} sends {} message(s) a step to rank {to} ({:?} bytes), which receives {} from it ({:?}): pass --step-calls, or a trace of whole steps",
                t.comms[c].id,
                a.map_or(0, Vec::len),
                a.cloned().unwrap_or_default(),
                b.map_or(0, Vec::len),
                b.cloned().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// What one replayed item of a step runs.
enum Work {
    /// A collective: the call, its parameters and its input.
    Coll {
        call: Call,
        p: Params,
        input: Pattern,
    },
    /// Collectives NCCL launched as one group (one opCount, one coalesced entry),
    /// each on its own buffers: run as one group.
    Colls(Vec<Member>),
    /// A rank's consecutive sends and receives on one communicator, run as one group
    /// (bytes): what it sends, and what it must receive.
    Group {
        ops: Vec<P2p>,
        sent: Pattern,
        expected: Pattern,
    },
}

/// One collective of a group: the call, its parameters, its input and its buffers.
struct Member {
    call: Call,
    p: Params,
    input: Pattern,
    send: backend::Buffer,
    recv: backend::Buffer,
}

/// A step's replay items, as ranges of its calls: a rank's consecutive sends and
/// receives on one communicator (one group), collectives NCCL launched as one group
/// ([`TraceCall::grouped`]), or one collective.
pub fn items(step: &[TraceCall]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < step.len() {
        let x = &step[i];
        let coll = |y: &TraceCall| matches!(y.op, Op::Coll(_));
        let more = step[i + 1..]
            .iter()
            .take_while(|y| {
                y.comm == x.comm
                    && if coll(x) {
                        y.grouped && coll(y)
                    } else {
                        !coll(y)
                    }
            })
            .count();
        out.push(i..i + 1 + more);
        i += 1 + more;
    }
    out
}

/// One replayed item on this rank: its communicator's backend, the work, buffers, its
/// key and its description.
struct Prepared {
    be: usize,
    work: Work,
    send: backend::Buffer,
    recv: backend::Buffer,
    key: usize,
    what: String,
}

pub fn run(
    world: &World,
    global: &GlobalArgs,
    args: &ReplayArgs,
    dog: Arc<Watchdog>,
) -> Result<Outcome> {
    let agreed = |s: String| anyhow::Error::new(Agreed(s));
    let loaded: Result<Trace, String> = if world.rank == 0 {
        load(args)
    } else {
        Err(String::new())
    };
    let t = world.broadcast_json(Some(&loaded))?.map_err(agreed)?;
    let baseline = match (&args.baseline, world.rank) {
        (Some(p), 0) => Some(load_baseline(p)),
        _ => None,
    };
    let bad: Option<String> = baseline.as_ref().and_then(|b| b.as_ref().err().cloned());
    if let Some(e) = world.broadcast_json(Some(&bad))? {
        return Err(agreed(e));
    }
    let baseline = baseline.and_then(Result::ok);
    let mut notes = Vec::new();
    let (t, steps, scaled_from) = scaled(t, args, world.size, &mut notes).map_err(agreed)?;
    consistent(&t, &steps).map_err(agreed)?;
    let cfg = global.backend_config();
    let (kind, why) = backend::resolve(world, &cfg)?;
    // One backend per trace communicator this rank's step uses; every rank takes
    // part in every split, in the trace's order.
    let used: Vec<bool> = (0..t.comms.len())
        .map(|c| steps.iter().flatten().any(|x| x.comm == c))
        .collect();
    let mut bes: Vec<(usize, Box<dyn Backend>)> = Vec::new();
    for (c, comm) in t.comms.iter().enumerate().filter(|(c, _)| used[*c]) {
        let me = comm.members.iter().position(|&g| g == world.rank);
        let sub = world.split(me.map(|_| 0), me.unwrap_or(0) as i32);
        if let Some(sub) = sub {
            bes.push((c, backend::build(kind, sub, world, &cfg, dog.clone())?));
        }
    }
    let p2p = steps[world.rank]
        .iter()
        .filter(|x| !matches!(x.op, Op::Coll(_)))
        .count();
    let p2p_all: Vec<usize> = world.all_gather_json(&p2p)?;
    if p2p_all.iter().any(|n| *n > 0) {
        notes.push(format!(
            "send/recv: {} call(s) a step over all ranks, each rank's consecutive ones on a communicator run as one group (one NCCL group, or MPI requests waited for together), groups blocking in the trace's order",
            p2p_all.iter().sum::<usize>()
        ));
    }
    let grouped = steps
        .iter()
        .flat_map(|s| items(s).into_iter().map(move |r| &s[r]))
        .filter(|run| run.len() > 1 && matches!(run[0].op, Op::Coll(_)))
        .count();
    if grouped > 0 {
        notes.push(format!(
            "{grouped} group(s) of collectives the job launched together (one NCCL group: one opCount in its log, or one coalesced entry) over all ranks' step, each timed as one row: {}",
            if kind == backend::BackendKind::Nccl {
                "one ncclGroupStart/ncclGroupEnd each"
            } else {
                "their calls one after another on this backend (MPI has no group of collectives: the sum of their times, where NCCL may run them as one launch)"
            }
        ));
    }
    let (keys, mut prepared) = prepare(world, &t, &steps[world.rank], &bes, &mut notes)?;
    let ctx = |what: String| WaitCtx {
        what,
        deadline: cfg.deadline,
        barrier: false,
    };
    let (wrong, wrong_calls) = if args.check == 1 {
        check_step(&bes, &mut prepared, &keys, &ctx)?
    } else {
        (0, Vec::new())
    };
    let mine = time_steps(world, args, &bes, &mut prepared, &ctx)?;
    let all: Vec<RankTimes> = world.all_gather_json(&mine)?;
    let wrongs: Vec<(u64, Vec<String>)> = world.all_gather_json(&(wrong, wrong_calls))?;
    let keys_all: Vec<Vec<CallKey>> = world.all_gather_json(&keys)?;
    drop(bes);
    if world.rank != 0 {
        return Ok(Outcome::Pass);
    }
    let report = finish(
        args,
        (&t, scaled_from),
        &steps,
        why,
        notes,
        keys_all,
        all,
        wrongs,
        baseline.as_ref(),
    );
    print_report(&report);
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("--out: {}", dir.display()))?;
        let path = dir.join("replay.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.pass {
        Outcome::Pass
    } else {
        Outcome::Fail
    })
}

/// The trace to replay, each rank's step, and the trace's own ranks when scaled.
type Steps = (Trace, Vec<Vec<TraceCall>>, Option<usize>);

/// Each rank's step, from the trace or (`--grow`) the trace scaled to this job's
/// ranks; and the trace's own rank count when it was scaled.
fn scaled(
    t: Trace,
    args: &ReplayArgs,
    ranks: usize,
    notes: &mut Vec<String>,
) -> Result<Steps, String> {
    let steps = steps_of(&t, args.step_calls);
    let (mut t, mut steps, from) = if t.ranks == ranks {
        (t, steps, None)
    } else {
        let Some(grow) = &args.grow else {
            return Err(format!(
                "--trace: the trace is of {} rank(s), this job has {ranks}: run it with -np {}, or pass --grow auto (or the ids of the communicators that grow) to replay it on k times its ranks",
                t.ranks, t.ranks
            ));
        };
        let g = scale::Grow::parse(grow)?;
        let s = scale::scale(&t, &steps, ranks, &g)?;
        notes.extend(s.notes);
        (s.trace, s.steps, Some(t.ranks))
    };
    if let Some(text) = &args.rank_map {
        let map = scale::parse_rank_map(text, ranks)?;
        scale::place(&mut t, &mut steps, &map);
        notes.push(format!(
            "ranks placed by --rank-map: trace rank i on rank {text}[i]"
        ));
    }
    Ok((t, steps, from))
}

/// This rank's calls as backend calls with their buffers, filled with their input;
/// and the keys describing them (in order of first use).
fn prepare(
    world: &World,
    t: &Trace,
    step: &[TraceCall],
    bes: &[(usize, Box<dyn Backend>)],
    notes: &mut Vec<String>,
) -> Result<(Vec<CallKey>, Vec<Prepared>)> {
    let mut keys: Vec<CallKey> = Vec::new();
    let mut out = Vec::new();
    let mut seq = P2pSeq::default();
    for range in items(step) {
        let run = &step[range];
        let x = &run[0];
        let Some(bi) = bes.iter().position(|(c, _)| *c == x.comm) else {
            anyhow::bail!("rank is not in communicator {}", t.comms[x.comm].id);
        };
        let be = &*bes[bi].1;
        for y in run {
            if let Some(note) = &y.note {
                note_once(notes, note.clone());
            }
        }
        if !matches!(x.op, Op::Coll(_)) {
            let (key, g) = prepare_group(world, t, run, bi, be, &mut seq)?;
            out.push(Prepared {
                key: key_index(&mut keys, key),
                ..g
            });
            continue;
        }
        let mut members = Vec::new();
        let mut key: Option<CallKey> = None;
        for y in run {
            let (k, m) = prepare_coll(world, t, y, be, notes)?;
            key = Some(match key {
                None => k,
                Some(first) => CallKey {
                    bytes: first.bytes + k.bytes,
                    ..first
                },
            });
            members.push(m);
        }
        let Some(mut key) = key else { continue };
        let (what, work, send, recv) = if members.len() == 1 {
            let m = members.remove(0);
            let work = Work::Coll {
                call: m.call,
                p: m.p,
                input: m.input,
            };
            (m.call.describe(), work, m.send, m.recv)
        } else {
            key.group_of = members.len();
            let what = format!(
                "a group of {} collectives ({}) on communicator {}",
                members.len(),
                members
                    .iter()
                    .map(|m| m.call.describe())
                    .collect::<Vec<_>>()
                    .join(", "),
                t.comms[x.comm].id
            );
            (what, Work::Colls(members), be.alloc(1)?, be.alloc(1)?)
        };
        out.push(Prepared {
            be: bi,
            what,
            work,
            send,
            recv,
            key: key_index(&mut keys, key),
        });
    }
    Ok((keys, out))
}

/// One collective: its call in a type the backend has, its buffers filled with its
/// input, and its key.
fn prepare_coll(
    world: &World,
    t: &Trace,
    x: &TraceCall,
    be: &dyn Backend,
    notes: &mut Vec<String>,
) -> Result<(CallKey, Member)> {
    let Op::Coll(kind) = x.op else {
        anyhow::bail!("a {} is not a collective", x.op.name());
    };
    let n = be.size();
    let red = kind.reduces().then_some(x.red);
    let (mut dtype, mut count, mut op) = (x.dtype, x.count, x.red);
    if let Some(note) = &x.dtype_note {
        note_once(notes, format!("{note} (the same bytes)"));
    }
    if !be.supports(dtype, red) {
        // The same bytes in a type the backend has (timing, not the arithmetic).
        note_once(
            notes,
            format!(
                "{dtype} {} as u8 on this backend (the same bytes)",
                op.name()
            ),
        );
        count *= dtype.size();
        dtype = Dtype::U8;
        op = RedOp::Sum;
    }
    let p = Params {
        n,
        count,
        dtype,
        op,
        root: x.root.min(n - 1),
    };
    let call = Call {
        kind,
        dtype,
        op,
        root: p.root,
        count,
        in_place: false,
    };
    let coll = collective::get(kind);
    let layout = coll.layout(&p);
    let es = dtype.size();
    let mut send = be.alloc(layout.send.max(1) * es)?;
    let recv = be.alloc(layout.recv.max(1) * es)?;
    let input = coll.input(&p, be.rank());
    be.fill(&mut send, &input)?;
    let key = CallKey {
        comm: t.comms[x.comm].id.clone(),
        ranks: n,
        tier: tier_of(world, &t.comms[x.comm].members),
        collective: kind,
        dtype: x.dtype,
        op: red,
        bytes: x.bytes(),
        source_us: None,
        source_last_us: None,
        group_of: 0,
    };
    let m = Member {
        call,
        p,
        input,
        send,
        recv,
    };
    Ok((key, m))
}

fn key_index(keys: &mut Vec<CallKey>, key: CallKey) -> usize {
    match keys.iter().position(|k| *k == key) {
        Some(k) => k,
        None => {
            keys.push(key);
            keys.len() - 1
        }
    }
}

/// How many messages each (communicator, sender, receiver) has had so far: the k-th
/// message between two ranks carries the k-th pattern on both sides.
#[derive(Default)]
struct P2pSeq(std::collections::HashMap<(usize, usize, usize), usize>);

impl P2pSeq {
    /// The pattern index of the next message from `from` to `to` on `comm`.
    fn next(&mut self, comm: usize, from: usize, to: usize) -> usize {
        let k = self.0.entry((comm, from, to)).or_insert(0);
        *k += 1;
        37 * *k + 7 * to
    }
}

/// A rank's consecutive sends and receives on one communicator as one group: the
/// transfers in bytes (sends packed in one buffer, receives in another), what it
/// sends and what it must receive (the sender's pattern of that message), its key.
fn prepare_group(
    world: &World,
    t: &Trace,
    run: &[TraceCall],
    bi: usize,
    be: &dyn Backend,
    seq: &mut P2pSeq,
) -> Result<(CallKey, Prepared)> {
    let (n, me, comm) = (be.size(), be.rank(), run[0].comm);
    let (mut ops, mut sends, mut recvs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut s_off, mut r_off) = (0usize, 0usize);
    for y in run {
        let (peer, bytes) = (y.root, y.bytes() as usize);
        if peer >= n || peer == me {
            anyhow::bail!(
                "trace: a {} with peer {peer} on communicator {} of {n} rank(s), from its rank {me}",
                y.op.name(),
                t.comms[comm].id
            );
        }
        if matches!(y.op, Op::Send) {
            let index = seq.next(comm, me, peer);
            sends.push(Run::new(s_off, bytes, Source::Plain { rank: me }, index));
            ops.push(P2p::Send {
                peer,
                at: s_off,
                count: bytes,
            });
            s_off += bytes;
        } else {
            let index = seq.next(comm, peer, me);
            recvs.push(Run::new(r_off, bytes, Source::Plain { rank: peer }, index));
            ops.push(P2p::Recv {
                peer,
                at: r_off,
                count: bytes,
            });
            r_off += bytes;
        }
    }
    let p = Params {
        n,
        count: s_off.max(r_off),
        dtype: Dtype::U8,
        op: RedOp::Sum,
        root: 0,
    };
    let (sent, expected) = (Pattern::new(p, sends), Pattern::new(p, recvs));
    let mut send = be.alloc(s_off.max(1))?;
    be.fill(&mut send, &sent)?;
    let recv = be.alloc(r_off.max(1))?;
    let key = CallKey {
        comm: t.comms[comm].id.clone(),
        ranks: n,
        tier: tier_of(world, &t.comms[comm].members),
        collective: crate::kinds::CollKind::SendRecv,
        dtype: Dtype::U8,
        op: None,
        bytes: s_off.max(r_off) as u64,
        source_us: None,
        source_last_us: None,
        group_of: 0,
    };
    let what = format!(
        "a group of {} send(s) and {} receive(s) ({} B out, {} B in) on communicator {}",
        sent.runs.len(),
        expected.runs.len(),
        s_off,
        r_off,
        t.comms[comm].id
    );
    let g = Prepared {
        be: bi,
        work: Work::Group {
            ops,
            sent,
            expected,
        },
        send,
        recv,
        key: 0,
        what,
    };
    Ok((key, g))
}

/// "intra-node" when the ranks share a host, else "inter-node (N hosts)".
fn tier_of(world: &World, members: &[usize]) -> String {
    let mut nodes: Vec<usize> = members
        .iter()
        .filter_map(|g| world.node_of.get(*g).copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.len() <= 1 {
        "intra-node".into()
    } else {
        format!("inter-node ({} hosts)", nodes.len())
    }
}

fn note_once(notes: &mut Vec<String>, n: String) {
    if !notes.contains(&n) {
        notes.push(n);
    }
}

type Ctx<'a> = &'a dyn Fn(String) -> WaitCtx;

/// The checked step: every call once, its output compared; (wrong elements, the
/// calls that had some).
fn check_step(
    bes: &[(usize, Box<dyn Backend>)],
    prepared: &mut [Prepared],
    keys: &[CallKey],
    ctx: Ctx,
) -> Result<(u64, Vec<String>)> {
    let (mut wrong, mut calls) = (0u64, Vec::new());
    for x in prepared {
        let be = &*bes[x.be].1;
        let w = check_one(be, x, &ctx(format!("checking {}", x.what)))?;
        if w > 0 {
            wrong += w;
            calls.push(format!("{} on {}", x.what, keys[x.key].comm));
        }
    }
    Ok((wrong, calls))
}

/// Warm-up, then the timed steps, each started by a barrier of the world: this
/// rank's step times and each call's.
fn time_steps(
    world: &World,
    args: &ReplayArgs,
    bes: &[(usize, Box<dyn Backend>)],
    prepared: &mut [Prepared],
    ctx: Ctx,
) -> Result<RankTimes> {
    let mut mine = RankTimes {
        step_s: Vec::new(),
        calls: prepared.iter().map(|x| (x.key, Vec::new())).collect(),
    };
    // Each call's deadline message, made once: the step's clock runs over the calls.
    let whats: Vec<WaitCtx> = prepared
        .iter()
        .map(|x| ctx(format!("a replayed step: {}", x.what)))
        .collect();
    for s in 0..args.warmup + args.steps {
        world.comm.barrier();
        let t0 = Instant::now();
        for (i, x) in prepared.iter_mut().enumerate() {
            let be = &*bes[x.be].1;
            let d = match &mut x.work {
                Work::Coll { call, .. } => {
                    let bufs = Bufs::OutOfPlace {
                        send: &x.send,
                        recv: &mut x.recv,
                    };
                    be.run_timed(call, bufs, 1, &whats[i])?
                        .first()
                        .copied()
                        .unwrap_or(0.0)
                }
                Work::Group { ops, .. } => be.run_group(ops, &x.send, &mut x.recv, &whats[i])?,
                Work::Colls(members) => be.run_colls(&mut member_bufs(members), &whats[i])?,
            };
            if s >= args.warmup {
                mine.calls[i].1.push(d);
            }
        }
        if s >= args.warmup {
            mine.step_s.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok(mine)
}

/// A group's calls with their buffers, as [`Backend::run_colls`] takes them.
fn member_bufs(members: &mut [Member]) -> Vec<(&Call, &backend::Buffer, &mut backend::Buffer)> {
    members
        .iter_mut()
        .map(
            |Member {
                 call, send, recv, ..
             }| (&*call, &*send, recv),
        )
        .collect()
}

/// One call on its input into a poisoned output, compared with the expected result:
/// wrong elements.
fn check_one(be: &dyn Backend, x: &mut Prepared, ctx: &WaitCtx) -> Result<u64> {
    let (call, p, input) = match &mut x.work {
        Work::Coll { call, p, input } => (&*call, &*p, &*input),
        Work::Colls(members) => {
            for m in members.iter_mut() {
                let recv_elems = collective::get(m.call.kind).layout(&m.p).recv;
                let poison = Pattern::one(m.p, 0, recv_elems, Source::Poison);
                be.fill(&mut m.recv, &poison)?;
                be.fill(&mut m.send, &m.input)?;
            }
            be.run_colls(&mut member_bufs(members), ctx)?;
            let mut wrong = 0;
            for m in members.iter() {
                let expected = collective::get(m.call.kind).expected(&m.p, be.rank(), false, 0);
                wrong += be.check(&m.recv, &expected)?.wrong;
            }
            return Ok(wrong);
        }
        Work::Group {
            ops,
            sent,
            expected,
        } => {
            let end = expected.end();
            be.fill(&mut x.send, sent)?;
            if end > 0 {
                let poison = Pattern::one(expected.params, 0, end, Source::Poison);
                be.fill(&mut x.recv, &poison)?;
            }
            be.run_group(ops, &x.send, &mut x.recv, ctx)?;
            return Ok(if end > 0 {
                be.check(&x.recv, expected)?.wrong
            } else {
                0
            });
        }
    };
    let coll = collective::get(call.kind);
    let recv_elems = coll.layout(p).recv;
    let poison = Pattern::one(*p, 0, recv_elems, Source::Poison);
    be.fill(&mut x.recv, &poison)?;
    be.fill(&mut x.send, input)?;
    be.run_timed(
        call,
        Bufs::OutOfPlace {
            send: &x.send,
            recv: &mut x.recv,
        },
        1,
        ctx,
    )?;
    let expected = coll.expected(p, be.rank(), false, 0);
    Ok(be.check(&x.recv, &expected)?.wrong)
}

/// rank 0: the record from every rank's keys and times.
#[allow(clippy::too_many_arguments)]
fn finish(
    args: &ReplayArgs,
    (t, scaled_from): (&Trace, Option<usize>),
    steps: &[Vec<TraceCall>],
    backend: String,
    notes: Vec<String>,
    keys_all: Vec<Vec<CallKey>>,
    all: Vec<RankTimes>,
    wrongs: Vec<(u64, Vec<String>)>,
    baseline: Option<&ReplayReport>,
) -> ReplayReport {
    // One key list for all ranks: each rank's keys mapped into it.
    let mut keys: Vec<CallKey> = Vec::new();
    let mut ranks = Vec::new();
    for (mine, mut times) in keys_all.into_iter().zip(all) {
        for c in &mut times.calls {
            let k = &mine[c.0];
            c.0 = match keys.iter().position(|x| x == k) {
                Some(i) => i,
                None => {
                    keys.push(k.clone());
                    keys.len() - 1
                }
            };
        }
        ranks.push(times);
    }
    // The source's median time per key (over ranks and calls), and its step: the
    // slowest rank's sum of its step's source times.
    for k in &mut keys {
        let mut v: Vec<f64> = steps
            .iter()
            .flat_map(|s| items(s).into_iter().map(move |r| &s[r]))
            .filter(|run| {
                let x = &run[0];
                t.comms[x.comm].id == k.comm && matches!(x.op, Op::Coll(c) if c == k.collective)
            })
            .filter(|run| {
                let bytes: u64 = run.iter().map(TraceCall::bytes).sum();
                let group_of = if run.len() > 1 { run.len() } else { 0 };
                bytes == k.bytes && run[0].dtype == k.dtype && group_of == k.group_of
            })
            .filter_map(|run| run.iter().map(|x| x.source_us).sum::<Option<f64>>())
            .collect();
        v.retain(|s| s.is_finite());
        k.source_us = (!v.is_empty()).then(|| crate::stats::median(&v));
    }
    let source_step_us = steps
        .iter()
        .map(|s| {
            s.iter()
                .filter(|x| matches!(x.op, Op::Coll(_)))
                .map(|x| x.source_us)
                .sum::<Option<f64>>()
        })
        .collect::<Option<Vec<f64>>>()
        .and_then(|v| v.into_iter().reduce(f64::max))
        .filter(|s| *s > 0.0);
    let mut notes = notes;
    let mut source_step_us = source_step_us;
    if let Some(b) = baseline {
        source_step_us = apply_baseline(b, args, &mut keys, &mut notes);
    }
    let (step, calls) = rec::analyze(&keys, &ranks);
    let (timeline_rank, timeline) = rec::timeline(&keys, &ranks);
    let wrong: u64 = wrongs.iter().map(|w| w.0).sum();
    let mut wrong_calls: Vec<String> = wrongs
        .iter()
        .enumerate()
        .flat_map(|(r, w)| w.1.iter().map(move |c| format!("rank {r}: {c}")))
        .collect();
    wrong_calls.truncate(20);
    let mut r = ReplayReport {
        schema_version: rec::SCHEMA_VERSION,
        trace_format: t.format.clone(),
        trace_files: args.trace.iter().map(|p| p.display().to_string()).collect(),
        ranks: t.ranks,
        scaled_from,
        comms: t
            .comms
            .iter()
            .map(|c| (c.id.clone(), c.members.clone()))
            .collect(),
        warmup_steps: args.warmup,
        steps: args.steps,
        calls_per_step: steps.iter().map(Vec::len).collect(),
        notes: notes
            .into_iter()
            .chain(t.warnings.iter().map(|w| format!("trace: {w}")))
            .collect(),
        backend,
        step,
        calls_sum_us: calls.iter().map(|c| c.last_us * c.per_step as f64).sum(),
        source_step_us,
        slowdown: source_step_us.map(|s| step.p50_us / s),
        calls,
        timeline_rank,
        timeline,
        wrong: (args.check == 1).then_some(wrong),
        wrong_calls,
        max_slowdown: args.max_slowdown,
        not_comparable: t.left_out.clone(),
        pass: true,
        status: String::new(),
        verdict: String::new(),
    };
    (r.pass, r.status, r.verdict) = rec::judge(&r);
    r
}

/// The baseline's times as the source's, call by call; its step median (the source's
/// step).
fn apply_baseline(
    b: &ReplayReport,
    args: &ReplayArgs,
    keys: &mut [CallKey],
    notes: &mut Vec<String>,
) -> Option<f64> {
    for k in keys {
        let same = b.calls.iter().find(|c| {
            c.comm == k.comm
                && c.collective == k.collective
                && c.bytes == k.bytes
                && c.dtype == k.dtype
                && c.group_of == k.group_of
        });
        k.source_us = same.map(|c| c.time_us);
        k.source_last_us = same.map(|c| c.last_us).filter(|t| *t > 0.0);
    }
    let from = args.baseline.as_ref().map(|p| p.display().to_string());
    notes.push(format!(
        "source times from --baseline {} (its {} step(s) on backend {})",
        from.unwrap_or_default(),
        b.steps,
        b.backend
    ));
    Some(b.step.p50_us).filter(|s| *s > 0.0)
}

fn print_report(r: &ReplayReport) {
    println!(
        "# burnin replay: {} trace of {} ranks, {} communicator(s), backend {}; {} step(s) after {} warm-up",
        r.trace_format,
        r.ranks,
        r.comms.len(),
        r.backend,
        r.steps,
        r.warmup_steps
    );
    for n in &r.notes {
        println!("# note: {n}");
    }
    println!(
        "# step communication time: median {:.1} us, p99 {:.1} us; its calls at their medians {:.1} us{}",
        r.step.p50_us,
        r.step.p99_us,
        r.calls_sum_us,
        match (r.source_step_us, r.slowdown) {
            (Some(s), Some(x)) => format!(" (source {s:.1} us: {x:.2}x)"),
            _ => String::new(),
        }
    );
    println!(
        "{:>12} {:>6} {:>20} {:>15} {:>10} {:>6} {:>5} {:>11} {:>9} {:>6} {:>10} {:>7}",
        "comm",
        "ranks",
        "tier",
        "collective",
        "bytes",
        "type",
        "calls",
        "time(us)",
        "busbw",
        "share",
        "source(us)",
        "x"
    );
    for c in &r.calls {
        println!(
            "{:>12} {:>6} {:>20} {:>15} {:>10} {:>6} {:>5} {:>11.1} {:>9.3} {:>5.1}% {:>10} {:>7}",
            c.comm,
            c.ranks,
            c.tier,
            c.label(),
            crate::units::Bytes(c.bytes).to_string(),
            c.dtype.to_string(),
            c.per_step,
            c.time_us,
            c.busbw_gbps,
            c.share * 100.0,
            c.source_us
                .map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "-".into()),
            c.slowdown
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "-".into()),
        );
    }
    if let Some(w) = r.wrong {
        println!("# checked: {w} wrong element(s)");
    }
    println!("# replay: {} — {}", r.status, r.verdict);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::CollKind;

    fn call(comm: usize, count: usize) -> TraceCall {
        TraceCall {
            comm,
            op: Op::Coll(CollKind::AllReduce),
            count,
            dtype: Dtype::F32,
            dtype_note: None,
            note: None,
            red: RedOp::Sum,
            root: 0,
            source_us: None,
            grouped: false,
        }
    }

    #[test]
    fn steps_are_the_repeating_block_and_members_must_agree() {
        let t = Trace {
            format: "nccl-coll".into(),
            ranks: 2,
            comms: vec![trace::TraceComm {
                id: "w".into(),
                members: vec![0, 1],
                problems: Vec::new(),
            }],
            // a set-up call, then three steps of two calls
            calls: vec![
                vec![
                    call(0, 1),
                    call(0, 8),
                    call(0, 64),
                    call(0, 8),
                    call(0, 64),
                    call(0, 8),
                    call(0, 64),
                ],
                vec![
                    call(0, 1),
                    call(0, 8),
                    call(0, 64),
                    call(0, 8),
                    call(0, 64),
                    call(0, 8),
                    call(0, 64),
                ],
            ],
            ..Trace::default()
        };
        let s = steps_of(&t, None);
        assert_eq!(
            s[0].iter().map(|c| c.count).collect::<Vec<_>>(),
            vec![8, 64]
        );
        assert!(consistent(&t, &s).is_ok());
        assert_eq!(steps_of(&t, Some(3))[1].len(), 3);
        let mut u = t.clone();
        u.calls[1].push(call(0, 64));
        let e = consistent(&u, &steps_of(&u, None)).unwrap_err();
        assert!(
            e.contains("communicator w: rank 0 makes 2") && e.contains("--step-calls"),
            "{e}"
        );
    }

    /// A step's items: sends and receives on one communicator together, a group of
    /// collectives together, anything else alone.
    #[test]
    fn a_step_is_cut_into_groups_of_sends_and_receives_groups_of_collectives_and_calls() {
        let g = |c: TraceCall| TraceCall { grouped: true, ..c };
        let step = vec![
            call(0, 8),
            g(call(0, 8)),
            g(call(0, 16)),
            g(call(1, 4)),
            p2p(0, Op::Send, 1, 4),
            p2p(0, Op::Recv, 1, 4),
            p2p(1, Op::Send, 1, 4),
            call(0, 2),
            g(p2p(0, Op::Send, 1, 4)),
            g(call(0, 2)),
        ];
        assert_eq!(
            items(&step),
            vec![0..3, 3..4, 4..6, 6..7, 7..8, 8..9, 9..10]
        );
    }

    fn p2p(comm: usize, op: Op, peer: usize, count: usize) -> TraceCall {
        TraceCall {
            op,
            root: peer,
            ..call(comm, count)
        }
    }

    #[test]
    fn each_send_must_be_its_peers_receive_message_for_message() {
        let comms = vec![trace::TraceComm {
            id: "pp".into(),
            members: vec![2, 0],
            problems: Vec::new(),
        }];
        // Rank 2 (comm rank 0) sends 100 then receives 50; rank 0 the other way.
        let steps = vec![
            vec![p2p(0, Op::Recv, 0, 100), p2p(0, Op::Send, 0, 50)],
            vec![],
            vec![p2p(0, Op::Send, 1, 100), p2p(0, Op::Recv, 1, 50)],
        ];
        let t = Trace {
            ranks: 3,
            comms,
            ..Trace::default()
        };
        assert_eq!(consistent(&t, &steps), Ok(()));
        let mut bad = steps.clone();
        bad[0][1].count = 51;
        let e = consistent(&t, &bad).unwrap_err();
        assert!(
            e.contains("communicator pp: rank 0 sends 1 message(s) a step to rank 2 ([204] bytes), which receives 1 from it ([200])"),
            "{e}"
        );
        bad[0].pop();
        let e = consistent(&t, &bad).unwrap_err();
        assert!(e.contains("rank 0 sends 0 message(s)"), "{e}");
        let mut off = steps;
        off[2][0].root = 5;
        let e = consistent(&t, &off).unwrap_err();
        assert!(
            e.contains("rank 2's send names peer 5, not one of its 2 rank(s)"),
            "{e}"
        );
    }
}
