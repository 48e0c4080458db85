//! PyTorch profiler traces: `torch.profiler`'s Chrome trace JSON (`export_chrome_trace`,
//! one file per rank), read for the collectives a job made and the steps it marked.
//!
//! - **Calls.** On NCCL, PyTorch records each collective as a `record_param_comms` event
//!   whose arguments say what it was: `Collective name`, `dtype`, `In msg nelems`,
//!   `Out msg nelems`, `Group size`, `Process Group Name`, `Process Group Ranks` (cut
//!   with "…" on large groups: then `Global rank start` and `Global rank stride`),
//!   `Src Rank`/`Dst Rank` for a send or a receive. A trace without them (gloo on CPUs
//!   records none) is read from the backend's own annotations, `gloo:all_reduce` and
//!   the like, with the input's type and dimensions (`record_shapes=True`): those name
//!   no process group, so the trace must have one (`distributedInfo.pg_config`). A
//!   rank's calls are in the order they started.
//! - **Time on the source.** The annotation's duration where it is the call's work (a
//!   gloo worker runs it); `record_param_comms` is the launch on the CPU, not the
//!   call, so an NCCL trace gives no source times from it.
//! - **Steps.** `ProfilerStep#N` (`prof.step()`) marks each recorded step: a call
//!   belongs to the step whose span holds its start. `burnin replay` replays the last
//!   step every rank recorded whole, instead of guessing the step from repetition.
//! - **The rank** is `distributedInfo.rank`, else the digits the file name ends in.
//!
//! The profiler records no reduction op and no root: sum and root 0, said per call.
use super::trace::TraceCall;
use super::trace::{fr_op, list, rank_of_file, torch_dtype, Op, RecordedStep, Trace};
use crate::kinds::{CollKind, Dtype, RedOp};
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether `text` looks like a profiler trace (a JSON object with `traceEvents`,
/// which may come after many `deviceProperties`: the whole text is looked at).
pub fn is_profiler(text: &str) -> bool {
    text.trim_start().starts_with('{') && text.contains("\"traceEvents\"")
}

/// A call as the trace gives it, before its group is placed.
struct Raw {
    ts: f64,
    op: Op,
    /// The group's name (None: the annotation names none).
    pg: Option<String>,
    /// Members, where the event lists them (global ranks).
    members: Option<Vec<usize>>,
    /// burnin's count (the whole message, nccl-tests' convention), before the group's
    /// size is known for all_gather from an annotation (then the per-rank count).
    count: usize,
    per_rank: bool,
    dtype: Dtype,
    dtype_note: Option<String>,
    /// A send's or receive's peer, a global rank.
    peer: Option<usize>,
    source_us: Option<f64>,
}

/// One rank's file, read.
struct RankFile {
    rank: usize,
    world: Option<usize>,
    groups: BTreeMap<String, Vec<usize>>,
    raw: Vec<Raw>,
    /// (step number, start, end) in the trace's µs.
    steps: Vec<(u64, f64, f64)>,
}

fn usize_list(v: &Value) -> Option<Vec<usize>> {
    match v {
        Value::String(s) => serde_json::from_str::<Vec<usize>>(s).ok(),
        other => serde_json::from_value::<Vec<usize>>(other.clone()).ok(),
    }
}

/// The profiler's type names: `record_param_comms` says "Float", "BFloat16"; the
/// shapes of an annotation say "float", "c10::BFloat16", "long int".
fn profiler_dtype(s: &str) -> Option<(Dtype, Option<&'static str>)> {
    torch_dtype(s).or_else(|| {
        let s = s.trim_start_matches("c10::");
        Some(match s {
            "float" => (Dtype::F32, None),
            "double" => (Dtype::F64, None),
            "Half" | "half" => (Dtype::F16, None),
            "BFloat16" => (Dtype::Bf16, None),
            "int" => (Dtype::I32, None),
            "unsigned char" => (Dtype::U8, None),
            "signed char" => (Dtype::U8, Some("int8 as u8")),
            "bool" => (Dtype::U8, Some("bool as u8")),
            "long int" | "long" | "int64_t" => (Dtype::F64, Some("int64 as f64")),
            s if s.starts_with("Float8") => (Dtype::U8, Some("fp8 as u8")),
            _ => return None,
        })
    })
}

fn as_usize(v: &Value) -> Option<usize> {
    v.as_u64()
        .map(|u| u as usize)
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// The members a `record_param_comms` event names: its list, or where the list was
/// cut ("[0, 1, …]"), start, stride and size.
fn param_members(a: &Value) -> Option<Vec<usize>> {
    if let Some(v) = usize_list(&a["Process Group Ranks"]) {
        if !v.is_empty() {
            return Some(v);
        }
    }
    let n = as_usize(&a["Group size"])?;
    let start = as_usize(&a["Global rank start"])?;
    let stride = as_usize(&a["Global rank stride"]).unwrap_or(1).max(1);
    Some((0..n).map(|i| start + i * stride).collect())
}

/// Elements of an annotation's first input ("Input Dims": [[9610]]; [[]] is a scalar).
fn first_input_elems(a: &Value) -> Option<usize> {
    let dims = a["Input Dims"].get(0)?.as_array()?;
    dims.iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .product::<Option<usize>>()
}

fn read_file(name: &str, text: &str, t: &mut Trace) -> Result<RankFile, String> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("{name}: not JSON ({e}); burnin reads the profiler's Chrome trace"))?;
    let events = v["traceEvents"]
        .as_array()
        .ok_or_else(|| format!("{name}: no \"traceEvents\" (not a profiler trace)"))?;
    let info = &v["distributedInfo"];
    let rank = as_usize(&info["rank"])
        .or_else(|| rank_of_file(name))
        .ok_or_else(|| {
            format!("{name}: no distributedInfo.rank, and the file name does not end in the rank")
        })?;
    let world = as_usize(&info["world_size"]);
    let mut groups = BTreeMap::new();
    for g in info["pg_config"].as_array().into_iter().flatten() {
        if let (Some(n), Some(r)) = (g["pg_name"].as_str(), usize_list(&g["ranks"])) {
            if !r.is_empty() {
                groups.insert(n.to_string(), r);
            }
        }
    }
    let mut params = Vec::new();
    let mut annotations = Vec::new();
    let mut steps = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let name = e["name"].as_str().unwrap_or_default();
        let ts = e["ts"].as_f64().unwrap_or(0.0);
        let dur = e["dur"].as_f64();
        if let Some(n) = name.strip_prefix("ProfilerStep#") {
            if let (Ok(n), Some(d)) = (n.parse::<u64>(), dur) {
                steps.push((n, ts, ts + d));
            }
            continue;
        }
        let a = &e["args"];
        if name == "record_param_comms" && e["cat"] != "kernel" {
            if let Some(c) = a["Collective name"].as_str() {
                params.push((ts, c.to_string(), a.clone()));
            }
            continue;
        }
        let backend = name.split(':').next().unwrap_or_default();
        if ["gloo", "nccl", "ucc", "mpi"].contains(&backend) && name.contains(':') {
            annotations.push((ts, dur, name.to_string(), a.clone()));
        }
    }
    let mut raw = raw_calls(rank, params, annotations, t);
    raw.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    steps.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(RankFile {
        rank,
        world,
        groups,
        raw,
        steps,
    })
}

/// Read profiler traces, one per rank: (file name, text).
pub fn parse_profiler(texts: &[(&str, &str)]) -> Result<Trace, String> {
    let mut t = Trace {
        format: "profiler".into(),
        ..Trace::default()
    };
    let mut files: BTreeMap<usize, RankFile> = BTreeMap::new();
    for (name, text) in texts {
        let f = read_file(name, text, &mut t)?;
        if files.contains_key(&f.rank) {
            return Err(format!("{name}: a second trace of rank {}", f.rank));
        }
        files.insert(f.rank, f);
    }
    let world = files
        .values()
        .filter_map(|f| f.world)
        .max()
        .unwrap_or(0)
        .max(files.keys().max().map_or(0, |m| m + 1));
    let missing: Vec<usize> = (0..world).filter(|r| !files.contains_key(r)).collect();
    if !missing.is_empty() {
        let have: Vec<usize> = files.keys().copied().collect();
        t.problem(format!(
            "traces of rank(s) {} but not of rank(s) {} of a job of {world}: every rank's file is needed",
            list(&have),
            list(&missing)
        ));
    }
    t.ranks = world;
    // The groups: the traces' pg_config, and each event's own list.
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for f in files.values() {
        for (n, r) in &f.groups {
            groups.entry(n.clone()).or_insert_with(|| r.clone());
        }
        for r in &f.raw {
            if let (Some(n), Some(m)) = (&r.pg, &r.members) {
                groups.entry(n.clone()).or_insert_with(|| m.clone());
            }
        }
    }
    let names: Vec<String> = groups.keys().cloned().collect();
    t.add_groups(&groups, |g| files.contains_key(&g), "trace");
    t.calls = vec![Vec::new(); world];
    t.recorded_steps = vec![Vec::new(); world];
    for (rank, f) in files {
        place_rank(&mut t, rank, f, &names);
    }
    if t.recorded_steps.iter().all(Vec::is_empty) {
        t.recorded_steps.clear();
    }
    Ok(t)
}

/// A call burnin does not replay: a barrier or a coalescing marker moves no data and
/// is left out; anything else would leave the replay short of the job, so the trace
/// is not whole.
fn not_replayed(t: &mut Trace, rank: usize, name: &str) {
    let l = name.to_ascii_lowercase();
    if l.contains("barrier") || l.ends_with("coalesced") {
        return;
    }
    t.problem(format!(
        "rank {rank}: {name}: a call burnin does not replay (left out, the replay would be short of the job)"
    ));
}

/// A rank's calls: its `record_param_comms` events, or without them the backend's
/// annotations.
fn raw_calls(
    rank: usize,
    params: Vec<(f64, String, Value)>,
    annotations: Vec<(f64, Option<f64>, String, Value)>,
    t: &mut Trace,
) -> Vec<Raw> {
    let mut raw: Vec<Raw> = Vec::new();
    if !params.is_empty() {
        for (ts, coll, a) in params {
            let Some(op) = fr_op(&coll) else {
                not_replayed(t, rank, &coll);
                continue;
            };
            if op == Op::Coll(CollKind::SendRecv) {
                t.problem(format!(
                    "rank {rank}: {coll}: a gather or scatter, which burnin does not read from profiler traces"
                ));
                continue;
            }
            let dt = a["dtype"].as_str().unwrap_or("?");
            let Some((dtype, note)) = profiler_dtype(dt) else {
                t.problem(format!(
                    "rank {rank}: {coll}: dtype {dt} burnin has no stand-in for"
                ));
                continue;
            };
            let input = as_usize(&a["In msg nelems"]).unwrap_or(0);
            let output = as_usize(&a["Out msg nelems"]).unwrap_or(0);
            let count = match op {
                Op::Coll(CollKind::AllGather) => output.max(input),
                _ => input.max(output),
            };
            let peer = match op {
                Op::Send => as_usize(&a["Dst Rank"]),
                Op::Recv => as_usize(&a["Src Rank"]),
                _ => None,
            };
            raw.push(Raw {
                ts,
                op,
                pg: a["Process Group Name"].as_str().map(str::to_string),
                members: param_members(&a),
                count,
                per_rank: false,
                dtype,
                dtype_note: note.map(str::to_string),
                peer,
                source_us: None,
            });
        }
    } else {
        for (ts, dur, name, a) in annotations {
            let Some(op) = fr_op(&name) else {
                not_replayed(t, rank, &name);
                continue;
            };
            if matches!(op, Op::Send | Op::Recv | Op::Coll(CollKind::SendRecv)) {
                t.problem(format!(
                    "rank {rank}: {name}: the profiler's annotation names no peer or root"
                ));
                continue;
            }
            let dt = a["Input type"][0].as_str().unwrap_or("?");
            let Some((dtype, note)) = profiler_dtype(dt) else {
                t.problem(format!(
                    "rank {rank}: {name}: dtype {dt} burnin has no stand-in for"
                ));
                continue;
            };
            let Some(count) = first_input_elems(&a) else {
                t.problem(format!(
                    "rank {rank}: {name}: no input dimensions (record the trace with record_shapes=True)"
                ));
                continue;
            };
            raw.push(Raw {
                ts,
                op,
                pg: None,
                members: None,
                count,
                per_rank: op == Op::Coll(CollKind::AllGather),
                dtype,
                dtype_note: note.map(str::to_string),
                peer: None,
                source_us: dur,
            });
        }
    }
    raw
}

/// One rank's calls placed on their groups, and its marked steps.
fn place_rank(t: &mut Trace, rank: usize, f: RankFile, names: &[String]) {
    let mut starts: Vec<f64> = Vec::new();
    for r in f.raw {
        let comm = match &r.pg {
            Some(n) => names.iter().position(|x| x == n),
            // An annotation names no group: the trace's only one.
            None if names.len() == 1 => Some(0),
            None => None,
        };
        let Some(comm) = comm else {
            t.problem(format!(
                "rank {rank}: a {} the trace places in no process group ({} groups known)",
                r.op.name(),
                names.len()
            ));
            continue;
        };
        let members = &t.comms[comm].members;
        let Some(_me) = members.iter().position(|m| *m == rank) else {
            t.problem(format!(
                "rank {rank}: a {} on process group {}, which does not list it",
                r.op.name(),
                t.comms[comm].id
            ));
            continue;
        };
        let root = match r.peer {
            Some(p) => match members.iter().position(|m| *m == p) {
                Some(i) => i,
                None => {
                    t.problem(format!(
                        "rank {rank}: a {} with rank {p}, not in process group {}",
                        r.op.name(),
                        t.comms[comm].id
                    ));
                    continue;
                }
            },
            None => 0,
        };
        let mut notes = Vec::new();
        if matches!(r.op, Op::Coll(k) if k.reduces()) {
            notes.push("the profiler records no reduction op: replayed as sum");
        }
        if matches!(
            r.op,
            Op::Coll(CollKind::Broadcast) | Op::Coll(CollKind::Reduce)
        ) {
            notes.push("the profiler records no root: from root 0");
        }
        let count = if r.per_rank {
            r.count * members.len()
        } else {
            r.count
        };
        starts.push(r.ts);
        t.calls[rank].push(TraceCall {
            comm,
            op: r.op,
            count,
            dtype: r.dtype,
            dtype_note: r.dtype_note,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
            red: RedOp::Sum,
            root,
            source_us: r.source_us,
            grouped: false,
        });
    }
    for (number, from, to) in f.steps {
        let first = starts.partition_point(|s| *s < from);
        let end = starts.partition_point(|s| *s < to);
        t.recorded_steps[rank].push(RecordedStep {
            number,
            first,
            calls: end - first,
        });
    }
}

/// The step every rank with calls recorded whole, the latest: its number.
pub fn common_step(t: &Trace) -> Option<u64> {
    let with_calls: Vec<usize> = (0..t.calls.len())
        .filter(|g| !t.calls[*g].is_empty())
        .collect();
    let first = *with_calls.first()?;
    t.recorded_steps
        .get(first)?
        .iter()
        .rev()
        .filter(|s| s.calls > 0)
        .map(|s| s.number)
        .find(|n| {
            with_calls.iter().all(|g| {
                t.recorded_steps
                    .get(*g)
                    .is_some_and(|v| v.iter().any(|s| s.number == *n && s.calls > 0))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/traces/torch-profiler");
        (0..2)
            .map(|r| {
                let p = dir.join(format!("rank_{r}.json"));
                (
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
    }

    /// A real profiler trace (torch 2.11, gloo, two processes): 12 calls a step,
    /// steps 2-4 marked, each call's count and type as the job made it.
    #[test]
    fn a_real_gloo_profiler_trace_reads_whole_with_its_steps() {
        let texts = fixture();
        assert!(is_profiler(&texts[0].1));
        let refs: Vec<(&str, &str)> = texts
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let t = parse_profiler(&refs).unwrap();
        assert_eq!(t.problems, Vec::<String>::new());
        assert_eq!((t.ranks, t.comms.len()), (2, 1));
        assert_eq!(t.comms[0].members, [0, 1]);
        for g in 0..2 {
            let steps = &t.recorded_steps[g];
            let marks: Vec<(u64, usize)> = steps.iter().map(|s| (s.number, s.calls)).collect();
            assert_eq!(marks, [(2, 12), (3, 12), (4, 12)], "rank {g}");
            let s = &steps[2];
            let step = &t.calls[g][s.first..s.first + s.calls];
            let shape: Vec<(&str, usize)> = step.iter().map(|c| (c.op.name(), c.count)).collect();
            let mut want = vec![("all_reduce", 16384); 8];
            want.extend([
                ("all_reduce", 6144),
                ("all_gather", 512),
                ("broadcast", 16384),
                ("all_reduce", 1),
            ]);
            assert_eq!(shape, want, "rank {g}");
            assert!(step
                .iter()
                .all(|c| c.dtype == Dtype::F32 && c.source_us.is_some()));
            assert_eq!(
                step[10].note.as_deref(),
                Some("the profiler records no root: from root 0")
            );
        }
        assert_eq!(common_step(&t), Some(4));
    }

    /// Eight GPUs' `deviceProperties` can push `traceEvents` far from the start; a
    /// Flight Recorder dump has none.
    #[test]
    fn a_trace_is_known_by_its_trace_events_wherever_they_are() {
        let props = vec![r#"{"id":0,"name":"NVIDIA H200","totalGlobalMem":150754820096}"#; 200];
        let text = format!(
            r#"{{"schemaVersion":1,"deviceProperties":[{}],"traceEvents":[]}}"#,
            props.join(",")
        );
        assert!(text.len() > 10_000 && is_profiler(&text));
        assert!(!is_profiler(
            r#"{"version":"2.4","pg_config":{},"entries":[]}"#
        ));
    }

    /// One rank's trace of two: the job is not whole, said by rank.
    #[test]
    fn a_missing_rank_is_a_problem_never_a_replay() {
        let texts = fixture();
        let t = parse_profiler(&[(texts[0].0.as_str(), texts[0].1.as_str())]).unwrap();
        assert!(
            t.problems
                .iter()
                .any(|p| p.contains("not of rank(s) 1 of a job of 2")),
            "{:?}",
            t.problems
        );
        assert!(t
            .problems
            .iter()
            .any(|p| p.contains("process group 0 of 2 rank(s): no trace of its rank(s) 1")));
    }

    /// NCCL's record_param_comms events: two groups, the members from the list or from
    /// start and stride, all_gather's whole output, a send's peer, the kernel's copy
    /// of the event left out.
    #[test]
    fn record_param_comms_events_give_groups_counts_and_peers() {
        let ev = |ts: u32, coll: &str, pg: &str, ranks: &str, inn: u64, out: u64, extra: &str| {
            format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":{ts},"dur":5,"args":{{"Collective name":"{coll}","dtype":"BFloat16","In msg nelems":{inn},"Out msg nelems":{out},"Group size":2,"Process Group Name":"{pg}","Process Group Ranks":"{ranks}","Global rank start":0,"Global rank stride":2{extra}}}}}"#
            )
        };
        let text = |rank: usize, pg1: &str| {
            let evs = [
                ev(10, "allreduce", "0", "[0, 1, 2, 3]", 1024, 1024, ""),
                ev(20, "_allgather_base", pg1, "[0, 2, ...]", 64, 128, ""),
                ev(30, "send", pg1, "[0, 2, ...]", 8, 8, r#","Dst Rank":2"#),
                r#"{"ph":"X","cat":"kernel","name":"record_param_comms","ts":11,"dur":50,"args":{"Collective name":"allreduce"}}"#.to_string(),
                r#"{"ph":"X","cat":"user_annotation","name":"ProfilerStep#7","ts":5,"dur":100}"#.to_string(),
            ];
            format!(
                r#"{{"distributedInfo":{{"rank":{rank},"world_size":4}},"traceEvents":[{}]}}"#,
                evs.join(",")
            )
        };
        let texts: Vec<String> = (0..4)
            .map(|r| text(r, if r % 2 == 0 { "1" } else { "2" }))
            .collect();
        let refs: Vec<(&str, &str)> = texts.iter().map(|s| ("t.json", s.as_str())).collect();
        let t = parse_profiler(&refs).unwrap();
        let comms: Vec<(&str, Vec<usize>)> = t
            .comms
            .iter()
            .map(|c| (c.id.as_str(), c.members.clone()))
            .collect();
        assert_eq!(
            comms,
            [
                ("0", vec![0, 1, 2, 3]),
                ("1", vec![0, 2]),
                ("2", vec![0, 2])
            ]
        );
        let c = &t.calls[0];
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!(
            (c[0].op, c[0].count, c[0].dtype),
            (Op::Coll(CollKind::AllReduce), 1024, Dtype::Bf16)
        );
        assert_eq!((c[1].op, c[1].count), (Op::Coll(CollKind::AllGather), 128));
        assert_eq!((c[2].op, c[2].root), (Op::Send, 1));
        assert!(c.iter().all(|c| c.source_us.is_none()));
        assert_eq!(
            t.recorded_steps[0],
            [RecordedStep {
                number: 7,
                first: 0,
                calls: 3
            }]
        );
        // Rank 1 names group 2 as [0, 2]: it is not listed there.
        assert!(
            t.problems
                .iter()
                .any(|p| p
                    .contains("rank 1: a all_gather on process group 2, which does not list it")),
            "{:?}",
            t.problems
        );
    }
}
