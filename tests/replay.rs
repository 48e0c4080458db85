//! `burnin replay` under mpirun on CPU ranks: a data + tensor parallel NCCL COLL trace
//! (4 ranks, 5 communicators) replayed step by step with checking; a Flight Recorder
//! dump with the source's times judged against `--max-slowdown`; bad traces refused
//! with exit 2 naming the flag.
mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The COLL and Init lines NCCL 2.21 writes for 4 ranks on 2 hosts: tensor parallel
/// inside a host (all_gather + reduce_scatter of bf16), data parallel across hosts
/// (all_reduce of f32), 3 steps after a set-up broadcast on the world. Each call is
/// its own launch: its communicator's opCount advances after it.
fn dp_tp_log(dir: &Path) -> std::path::PathBuf {
    let mut s = String::new();
    for (g, host) in ["gpu-a", "gpu-a", "gpu-b", "gpu-b"].into_iter().enumerate() {
        let pre = format!("{host}:{}:{} [{}]", 1000 + g, 2000 + g, g % 2);
        let comm = |p: &str, r: usize, n: usize, id: &str| {
            format!("{pre} NCCL INFO comm {p} rank {r} nranks {n} cudaDev {} nvmlDev {} busId 1b000 commId {id} - Init COMPLETE\n", g % 2, g % 2)
        };
        s += &comm("0x55aa0001", g, 4, "0x1111");
        s += &comm("0x55aa0002", g % 2, 2, if g < 2 { "0xa0" } else { "0xa1" });
        s += &comm(
            "0x55aa0003",
            g / 2,
            2,
            if g % 2 == 0 { "0xd0" } else { "0xd1" },
        );
        s += &format!("{pre} NCCL INFO Broadcast: opCount 0 sendbuff 0x7f0000 recvbuff 0x7f0000 count 4096 datatype 7 op 0 root 0 comm 0x55aa0001 [nranks=4] stream 0x5600\n");
        for step in 0..3 {
            for (ptr, name, count, dt, op) in [
                ("0x55aa0002", "AllGather", 65536, 9, 2 * step),
                ("0x55aa0002", "ReduceScatter", 65536, 9, 2 * step + 1),
                ("0x55aa0003", "AllReduce", 262_144, 7, step),
            ] {
                s += &format!("{pre} NCCL INFO {name}: opCount {op:x} sendbuff 0x7f0000 recvbuff 0x7f1000 count {count} datatype {dt} op 0 root 0 comm {ptr} [nranks=2] stream 0x5600\n");
            }
        }
    }
    let p = dir.join("dp_tp.log");
    std::fs::write(&p, s).unwrap();
    p
}

/// NCCL's COLL and Init lines for a pipeline of 2 stages × 2 data-parallel ranks on 2
/// hosts: stage 0 on gpu-a (ranks 0, 1), stage 1 on gpu-b (2, 3); pipeline groups
/// {0, 2} and {1, 3} across the hosts, data-parallel groups {0, 1} and {2, 3} inside
/// them. A step: stage 0 sends 256 KiB of activations and receives as much of
/// gradients, stage 1 the other way round, then a 1 MiB all_reduce per stage.
fn pipeline_log(dir: &Path) -> std::path::PathBuf {
    let mut s = String::new();
    for (g, host) in ["gpu-a", "gpu-a", "gpu-b", "gpu-b"].into_iter().enumerate() {
        let pre = format!("{host}:{}:{} [{}]", 3000 + g, 3100 + g, g % 2);
        let comm = |p: &str, r: usize, n: usize, id: &str| {
            format!("{pre} NCCL INFO comm {p} rank {r} nranks {n} cudaDev {} nvmlDev {} busId 1b000 commId {id} - Init COMPLETE\n", g % 2, g % 2)
        };
        s += &comm("0x66aa0001", g, 4, "0x2222");
        s += &comm(
            "0x66aa0002",
            g / 2,
            2,
            if g % 2 == 0 { "0xp0" } else { "0xp1" },
        );
        s += &comm("0x66aa0003", g % 2, 2, if g < 2 { "0xe0" } else { "0xe1" });
        let stage0 = g < 2;
        for step in 0..3u32 {
            let (first, second) = if stage0 {
                ("Send", "Recv")
            } else {
                ("Recv", "Send")
            };
            for (i, name) in [first, second].into_iter().enumerate() {
                s += &format!("{pre} NCCL INFO {name}: opCount {:x} sendbuff 0x7f0000 recvbuff 0x7f1000 count 131072 datatype 9 op 0 root {} comm 0x66aa0002 [nranks=2] stream 0x5600\n", 2 * step + i as u32, usize::from(stage0));
            }
            s += &format!("{pre} NCCL INFO AllReduce: opCount {step:x} sendbuff 0x7f0000 recvbuff 0x7f1000 count 262144 datatype 7 op 0 root 0 comm 0x66aa0003 [nranks=2] stream 0x5600\n");
        }
    }
    let p = dir.join("pipeline.log");
    std::fs::write(&p, s).unwrap();
    p
}

/// The tests of this file one at a time: the simulated cluster's timings must not
/// share the 2 cores with another replay.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn replay(np: usize, args: &[&str]) -> Run {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    let r = mpirun(np, &all, Duration::from_secs(180));
    assert_no_panic(&r);
    assert!(!r.timed_out, "{}", r.all());
    r
}

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

#[test]
fn a_data_and_tensor_parallel_trace_replays_step_by_step_with_checking() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dp_tp_log(dir.path());
    let out = dir.path().join("out");
    let r = replay(
        4,
        &[
            "--trace",
            log.to_str().unwrap(),
            "--steps",
            "5",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["trace_format"], "nccl-coll");
    assert_eq!(j["ranks"], 4);
    // The step is the last repetition: 3 calls on each rank (the set-up broadcast is
    // not part of it), each checked.
    assert_eq!(j["calls_per_step"], serde_json::json!([3, 3, 3, 3]), "{j}");
    assert_eq!(j["wrong"], 0, "{j}");
    assert_eq!(j["steps"], 5);
    let calls = j["calls"].as_array().unwrap();
    assert_eq!(
        calls.len(),
        6,
        "2 TP + 2 DP communicators × their calls: {j}"
    );
    let dp: Vec<&Value> = calls
        .iter()
        .filter(|c| c["collective"] == "all_reduce")
        .collect();
    assert_eq!(dp.len(), 2);
    for c in &dp {
        assert_eq!(
            (
                c["bytes"].as_u64(),
                c["ranks"].as_u64(),
                c["dtype"].as_str()
            ),
            (Some(1 << 20), Some(2), Some("f32")),
            "{c}"
        );
        assert!(
            c["time_us"].as_f64().unwrap() > 0.0 && c["busbw_gbps"].as_f64().unwrap() > 0.0,
            "{c}"
        );
    }
    let comms: Vec<&str> = dp.iter().map(|c| c["comm"].as_str().unwrap()).collect();
    assert!(
        comms.contains(&"0xd0") && comms.contains(&"0xd1"),
        "{comms:?}"
    );
    // all_gather of 65536 bf16 a rank: 256 KiB over the 2 ranks, bf16 replayed as u8
    // on the mpi backend, said once.
    let ag = calls
        .iter()
        .find(|c| c["collective"] == "all_gather")
        .unwrap();
    assert_eq!(
        (ag["bytes"].as_u64(), ag["dtype"].as_str()),
        (Some(256 << 10), Some("bf16")),
        "{ag}"
    );
    assert!(
        j["notes"]
            .to_string()
            .contains("bf16 sum as u8 on this backend"),
        "{j}"
    );
    // The step's time is at least its slowest call's.
    let step = j["step"]["p50_us"].as_f64().unwrap();
    let slowest = calls
        .iter()
        .map(|c| c["time_us"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        step >= slowest * 0.99,
        "step {step} us, slowest call {slowest} us"
    );
    assert!(
        r.stdout.contains("# replay: PASS — no max_slowdown asked"),
        "{}",
        r.all()
    );
}

/// Flight Recorder dumps of 2 ranks (`fr_rank_0`, `fr_rank_1` in `dir`), 4 steps of a
/// 4 MiB f32 all_reduce on the default process group, each taking `ms` on the source.
fn fr_dumps(dir: &Path, ms: f64) -> Vec<String> {
    let mut files = Vec::new();
    for rank in 0..2 {
        let dump = serde_json::json!({
            "version": "2.4",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "entries": (0..4).map(|i| serde_json::json!({
                "record_id": i, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1,
                "profiling_name": "nccl:all_reduce",
                "input_sizes": [[1024, 1024]], "input_dtypes": ["Float"],
                "output_sizes": [[1024, 1024]], "output_dtypes": ["Float"],
                "state": "completed", "duration_ms": ms,
            })).collect::<Vec<_>>(),
        });
        let p = dir.join(format!("fr_rank_{rank}"));
        std::fs::write(&p, dump.to_string()).unwrap();
        files.push(p.to_str().unwrap().to_string());
    }
    files
}

#[test]
fn flight_recorder_times_are_the_source_and_max_slowdown_judges_the_step() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    // A 4 MiB f32 all_reduce that took 1 µs on the "source": no network does that.
    let files = fr_dumps(dir.path(), 0.001);
    let out = dir.path().join("out");
    let mut args = vec!["--trace", &files[0], &files[1]];
    args.extend([
        "--steps",
        "3",
        "--max-slowdown",
        "1.5",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r = replay(2, &args);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["trace_format"], "flight-recorder");
    assert!(
        (j["source_step_us"].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{j}"
    );
    assert!(j["slowdown"].as_f64().unwrap() > 1.5, "{j}");
    let v = j["verdict"].as_str().unwrap();
    assert!(
        v.contains("the source's communication time (max 1.5)")
            && v.contains("all_reduce 4MiB on 0 (2 ranks, intra-node)"),
        "{v}"
    );
    assert_eq!(j["pass"], false);
}

#[test]
fn bad_traces_are_refused_naming_the_flag() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dp_tp_log(dir.path());
    // A 4-rank trace on 2 ranks.
    let r = replay(2, &["--trace", log.to_str().unwrap()]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("--trace: the trace is of 4 rank(s), this job has 2: run it with -np 4, or pass --grow auto"),
        "{}",
        r.all()
    );
    // A file that is not there, named.
    let r = replay(2, &["--trace", "/nonexistent/trace.log"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("--trace: /nonexistent/trace.log: "),
        "{}",
        r.all()
    );
    // A file with no collective in it.
    let empty = dir.path().join("empty.log");
    std::fs::write(
        &empty,
        "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n",
    )
    .unwrap();
    let r = replay(2, &["--trace", empty.to_str().unwrap()]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("--trace: nothing to replay"),
        "{}",
        r.all()
    );
}

/// The two rank files of a real job's trace under tests/fixtures/traces/`folder`
/// (`rank_0<suffix>`, `rank_1<suffix>`).
fn real_trace(folder: &str, suffix: &str) -> (String, String) {
    let fx = format!(
        "{}/tests/fixtures/traces/{folder}",
        env!("CARGO_MANIFEST_DIR")
    );
    (
        format!("{fx}/rank_0{suffix}"),
        format!("{fx}/rank_1{suffix}"),
    )
}

/// A real job's trace: PyTorch's Flight Recorder dumps of a torch.distributed job on
/// gloo recorded on this machine (tests/fixtures/traces/torch-gloo), replayed on 2
/// ranks, every result checked, PASS (a whole trace, nothing asked beyond it).
#[test]
fn a_real_torch_gloo_flight_recorder_trace_replays_checked() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let (r0, r1) = real_trace("torch-gloo", "");
    let out = dir.path().join("out");
    let r = replay(
        2,
        &[
            "--trace",
            &r0,
            &r1,
            "--steps",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["status"], "PASS", "{j}");
    assert_eq!(j["wrong"], 0, "{j}");
    assert_eq!(j["calls_per_step"], serde_json::json!([12, 12]), "{j}");
    let notes = j["notes"].to_string();
    assert!(notes.contains("Flight Recorder records no root"), "{notes}");
    // Asked to judge a slowdown without source times: NOT RUN, not PASS.
    let r = replay(
        2,
        &[
            "--trace",
            &r0,
            &r1,
            "--steps",
            "2",
            "--max-slowdown",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["status"], "NOT RUN", "{j}");
    assert!(
        j["verdict"].as_str().unwrap().contains("no source times"),
        "{j}"
    );
}

/// A real job's profiler trace: the same gloo job recorded with torch.profiler
/// (tests/fixtures/traces/torch-profiler), its steps marked by `ProfilerStep#N`: the
/// replay takes the last step every rank marked (12 calls), checks every result, and
/// has the source's call times (the gloo workers' annotations) to judge a slowdown
/// against; one rank's file alone is refused (exit 2), never replayed.
#[test]
fn a_real_torch_profiler_trace_replays_its_marked_step() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let (r0, r1) = real_trace("torch-profiler", ".json");
    let out = dir.path().join("out");
    let r = replay(
        2,
        &[
            "--trace",
            &r0,
            &r1,
            "--steps",
            "3",
            "--max-slowdown",
            "1000",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["trace_format"], "profiler", "{j}");
    assert_eq!(j["status"], "PASS", "{j}");
    assert_eq!(j["wrong"], 0, "{j}");
    assert_eq!(j["calls_per_step"], serde_json::json!([12, 12]), "{j}");
    assert!(j["source_step_us"].as_f64().is_some_and(|s| s > 0.0), "{j}");
    assert!(
        j["notes"]
            .to_string()
            .contains("the profiler records no root"),
        "{j}"
    );
    let r = replay(2, &["--trace", &r0, "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("not of rank(s) 1 of a job of 2"),
        "{}",
        r.all()
    );
}

/// The data + tensor parallel trace without rank 3's lines (a log collected from 3 of
/// the 4 processes): refused with exit 2 naming each communicator that misses it and
/// why that matters; with `--allow-partial` the whole communicators are replayed and
/// the verdict is NOT COMPARABLE, never PASS.
#[test]
fn a_trace_that_is_not_the_whole_job_is_refused_or_not_comparable() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dp_tp_log(dir.path());
    let text = std::fs::read_to_string(&log).unwrap();
    let three: String = text
        .lines()
        .filter(|l| !l.starts_with("gpu-b:1003:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let part = dir.path().join("three.log");
    std::fs::write(&part, three).unwrap();
    let r = replay(4, &["--trace", part.to_str().unwrap()]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    for want in [
        "--trace: the trace is not the whole job",
        "communicator 0x1111 of 4 rank(s): the trace holds 3 of them (global rank(s) 0-2), its rank(s) 3 missing",
        "communicator 0xa1 of 2 rank(s): the trace holds 1 of them",
        "--allow-partial",
    ] {
        assert!(r.stderr.contains(want), "{want}\n{}", r.all());
    }
    let out = dir.path().join("out");
    let r = replay(
        4,
        &[
            "--trace",
            part.to_str().unwrap(),
            "--allow-partial",
            "--steps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["status"], "NOT COMPARABLE", "{j}");
    assert_eq!(j["wrong"], 0, "{j}");
    // What was replayed: tp0 {0,1} and dp0 {0,2}, the whole ones.
    let mut comms: Vec<String> = j["comms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[0].as_str().unwrap().to_string())
        .collect();
    comms.sort();
    assert_eq!(comms, ["0xa0", "0xd0"], "{j}");
    let nc = j["not_comparable"].to_string();
    assert!(
        nc.contains("0x1111") && nc.contains("0xd1") && nc.contains("0xa1"),
        "{nc}"
    );
    assert!(r.stdout.contains("# replay: NOT COMPARABLE"), "{}", r.all());
}

/// The 4-rank data + tensor parallel trace replayed on 8 ranks with `--grow auto`: the
/// data-parallel groups (across the trace's hosts) grow over the two copies of the
/// job, the tensor-parallel ones (inside a host) repeat per copy; every result checked.
/// Without `--grow`, or with an id the trace lacks, refused naming the flag.
#[test]
fn a_trace_of_4_ranks_replays_on_8_with_its_data_parallel_groups_grown() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dp_tp_log(dir.path());
    let out = dir.path().join("out");
    let args = [
        "--trace",
        log.to_str().unwrap(),
        "--grow",
        "auto",
        "--steps",
        "3",
        "--out",
        out.to_str().unwrap(),
    ];
    let r = replay(8, &args);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["ranks"], 8);
    assert_eq!(j["scaled_from"], 4);
    assert_eq!(j["wrong"], 0, "{j}");
    assert_eq!(j["calls_per_step"], serde_json::json!(vec![3; 8]), "{j}");
    let members = |id: &str| -> Value {
        j["comms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c[0] == id)
            .unwrap_or_else(|| panic!("no communicator {id}: {j}"))[1]
            .clone()
    };
    assert_eq!(members("0xd0"), serde_json::json!([0, 2, 4, 6]));
    assert_eq!(members("0xd1"), serde_json::json!([1, 3, 5, 7]));
    assert_eq!(members("0xa0"), serde_json::json!([0, 1]));
    assert_eq!(members("0xa0#1"), serde_json::json!([4, 5]));
    assert_eq!(members("0xa1#1"), serde_json::json!([6, 7]));
    // The grown all_reduce keeps its 1 MiB on 4 ranks; 4 TP communicators × 2 calls.
    let calls = j["calls"].as_array().unwrap();
    let ar: Vec<&Value> = calls
        .iter()
        .filter(|c| c["collective"] == "all_reduce")
        .collect();
    assert_eq!(ar.len(), 2, "{j}");
    assert!(
        ar.iter().all(|c| c["ranks"] == 4 && c["bytes"] == 1 << 20),
        "{j}"
    );
    assert_eq!(calls.len(), 10, "{j}");
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("scaled from the trace's 4 rank(s) to 8")
            && notes.contains("0xd0 (2 → 4 ranks)"),
        "{notes}"
    );
    // The timeline: the longest rank's step, its 3 calls back to back.
    let tl = j["timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 3, "{j}");
    let end0 = tl[0]["start_us"].as_f64().unwrap() + tl[0]["time_us"].as_f64().unwrap();
    assert!(
        (tl[1]["start_us"].as_f64().unwrap() - end0).abs() < 1e-6,
        "{j}"
    );

    // Placed otherwise: the second copy's ranks interleaved with the first's.
    let placed = dir.path().join("placed");
    let r = replay(
        8,
        &[
            "--trace",
            log.to_str().unwrap(),
            "--grow",
            "auto",
            "--rank-map",
            "0,2,4,6,1,3,5,7",
            "--steps",
            "2",
            "--out",
            placed.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let p = read(&placed.join("replay.json"));
    assert_eq!(p["wrong"], 0, "{p}");
    let comm = |id: &str| -> Value {
        p["comms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c[0] == id)
            .unwrap()[1]
            .clone()
    };
    assert_eq!(comm("0xa0#1"), serde_json::json!([1, 3]), "{p}");
    assert_eq!(comm("0xd0"), serde_json::json!([0, 4, 1, 5]), "{p}");
    let r = replay(
        4,
        &["--trace", log.to_str().unwrap(), "--rank-map", "0,1,2"],
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("--rank-map: 3 rank(s) given, the replay has 4"),
        "{}",
        r.all()
    );

    let r = replay(8, &["--trace", log.to_str().unwrap(), "--grow", "0xd0,pp"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("--grow: the trace has no communicator 'pp'"),
        "{}",
        r.all()
    );
    let r = replay(6, &["--trace", log.to_str().unwrap(), "--grow", "auto"]);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr
            .contains("6 rank(s), not a multiple of the trace's 4"),
        "{}",
        r.all()
    );
}

/// `burnin run` with a card that names a trace (a folder of Flight Recorder dumps):
/// the replay phase runs after nothing else, its two criteria are judged — PASS when
/// the source took 50 ms a call, FAIL naming the call when it took 1 µs — and the
/// report has the replay section with its timeline.
#[test]
fn a_card_that_names_a_trace_runs_the_replay_phase_and_judges_its_criteria() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    for (name, ms, code, status) in [
        ("slow-source", 50.0, 0, "pass"),
        ("fast-source", 0.001, 1, "fail"),
    ] {
        let case = dir.path().join(name);
        let traces = case.join("trace");
        std::fs::create_dir_all(&traces).unwrap();
        fr_dumps(&traces, ms);
        let card = case.join("card.toml");
        std::fs::write(
            &card,
            format!(
                "name = \"{name}\"\nlaunch = \"mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2\"\nbackend = \"mpi\"\n[replay]\ntrace = [\"trace\"]\nsteps = 5\n[replay.criteria]\nmax_slowdown = 2.0\n"
            ),
        )
        .unwrap();
        let out = case.join("out");
        let mut c = std::process::Command::new(bin());
        c.args([
            "run",
            "--card",
            card.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
        let r = run_bounded(c, Duration::from_secs(180));
        assert_no_panic(&r);
        assert_eq!(r.code, Some(code), "{name}: {}", r.all());
        let acc = read(&out.join("acceptance.json"));
        assert_eq!(
            acc["phases_selected"],
            serde_json::json!(["replay"]),
            "{acc}"
        );
        let job = &acc["jobs"][0];
        assert_eq!(job["name"], "replay", "{acc}");
        let argv = job["argv"].to_string();
        assert!(
            argv.contains(&traces.display().to_string()) && argv.contains("--max-slowdown"),
            "{argv}"
        );
        let crit = |id: &str| -> Value {
            acc["criteria"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["id"] == id)
                .unwrap_or_else(|| panic!("no {id}: {acc}"))
                .clone()
        };
        assert_eq!(crit("replay.zero_wrong")["status"], "pass", "{acc}");
        let slow = crit("replay.max_slowdown");
        assert_eq!(slow["status"], status, "{slow}");
        if status == "fail" {
            assert!(
                slow["detail"]
                    .as_str()
                    .unwrap()
                    .contains("all_reduce 4MiB on 0 (2 ranks, intra-node)"),
                "{slow}"
            );
        }
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(
            md.contains("## Replay of the job's trace")
                && md.contains("| 0 | 2 | intra-node | all_reduce | 4.0 MiB"),
            "{md}"
        );
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(
            html.contains("A replayed step on rank"),
            "no timeline chart"
        );
    }
    // The two runs side by side: the replayed step of each.
    let (a, b) = (
        dir.path().join("slow-source/out"),
        dir.path().join("fast-source/out"),
    );
    let mut c = std::process::Command::new(bin());
    c.args(["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let r = run_bounded(c, Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("| replay: step communication p50 (µs) |"))
        .unwrap_or_else(|| panic!("no replay row: {}", r.stdout));
    assert!(row.ends_with("× |"), "{row}");
}

/// A pipeline's sends and receives replayed as groups, each message checked against
/// the sender's pattern; on 8 ranks (`--grow auto`) the pipeline groups grow across
/// the copies and each send still reaches its own copy's stage.
#[test]
fn a_pipeline_trace_replays_its_sends_and_receives_checked() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = pipeline_log(dir.path());
    for (np, grow) in [(4, None), (8, Some("auto"))] {
        let out = dir.path().join(format!("out{np}"));
        let mut args = vec![
            "--trace",
            log.to_str().unwrap(),
            "--steps",
            "3",
            "--out",
            out.to_str().unwrap(),
        ];
        if let Some(g) = grow {
            args.extend(["--grow", g]);
        }
        let r = replay(np, &args);
        assert_eq!(r.code, Some(0), "{}", r.all());
        let j = read(&out.join("replay.json"));
        assert_eq!(j["wrong"], 0, "{j}");
        assert_eq!(j["calls_per_step"], serde_json::json!(vec![3; np]), "{j}");
        let calls = j["calls"].as_array().unwrap();
        let groups: Vec<&Value> = calls
            .iter()
            .filter(|c| c["collective"] == "sendrecv")
            .collect();
        assert_eq!(groups.len(), 2, "one group per pipeline communicator: {j}");
        assert!(
            groups
                .iter()
                .all(|c| c["bytes"] == 256 << 10 && c["ranks"] == np / 2),
            "{j}"
        );
        let notes = j["notes"].to_string();
        assert!(
            notes.contains(&format!("send/recv: {} call(s) a step", 2 * np)),
            "{notes}"
        );
    }
}

/// Calls NCCL launched as one group print one opCount (2 ranks on 2 hosts, NCCL 2.21):
/// a step of two f32 all_reduces in one group (DDP's coalesced buckets) and a lone
/// broadcast. The group replays as one row, its two results checked, said in the notes
/// (on MPI its calls run one after another).
#[test]
fn collectives_launched_as_one_nccl_group_replay_as_one_group() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    for (g, host) in ["gpu-a", "gpu-b"].into_iter().enumerate() {
        let pre = format!("{host}:{}:{} [0]", 5000 + g, 5100 + g);
        log += &format!("{pre} NCCL INFO comm 0x77aa0001 rank {g} nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x3333 - Init COMPLETE\n");
        for step in 0..4u32 {
            for (name, count, op) in [
                ("AllReduce", 65_536, 2 * step),
                ("AllReduce", 16_384, 2 * step),
                ("Broadcast", 4096, 2 * step + 1),
            ] {
                log += &format!("{pre} NCCL INFO {name}: opCount {op:x} sendbuff 0x7f0000 recvbuff 0x7f1000 count {count} datatype 7 op 0 root 0 comm 0x77aa0001 [nranks=2] stream 0x5600\n");
            }
        }
    }
    let trace = dir.path().join("grouped.log");
    std::fs::write(&trace, log).unwrap();
    let out = dir.path().join("out");
    let r = replay(
        2,
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--steps",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["calls_per_step"], serde_json::json!([3, 3]), "{j}");
    assert_eq!(j["wrong"], 0, "{j}");
    let calls = j["calls"].as_array().unwrap();
    let shown: Vec<(String, u64, u64)> = calls
        .iter()
        .map(|c| {
            (
                c["collective"].as_str().unwrap_or_default().to_string(),
                c["bytes"].as_u64().unwrap_or(0),
                c["group_of"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        shown.contains(&("all_reduce".into(), (65_536 + 16_384) * 4, 2))
            && shown.contains(&("broadcast".into(), 4096 * 4, 0))
            && shown.len() == 2,
        "{shown:?}"
    );
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("2 group(s) of collectives the job launched together")
            && notes.contains("one after another on this backend"),
        "{notes}"
    );
    assert!(r.stdout.contains("all_reduce group of 2"), "{}", r.all());
}

const SIM: SimCluster = SimCluster {
    prefix: "bp-",
    subnet: "10.89.0",
};

/// NCCL COLL lines (with Init lines) for `ranks` ranks in one world communicator,
/// `steps` steps of one f32 avg all_reduce per gradient bucket: what NCCL prints for
/// burnin train's exchange.
fn training_trace(
    dir: &Path,
    ranks: usize,
    bucket_bytes: &[u64],
    steps: usize,
) -> std::path::PathBuf {
    let mut s = String::new();
    for g in 0..ranks {
        let pre = format!("node{g}:{}:{} [0]", 4000 + g, 4100 + g);
        s += &format!("{pre} NCCL INFO comm 0x5600aa rank {g} nranks {ranks} cudaDev 0 nvmlDev 0 busId 1b000 commId 0x7a11 - Init COMPLETE\n");
        let mut op = 0;
        for _ in 0..steps {
            for b in bucket_bytes {
                s += &format!(
                    "{pre} NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f00 recvbuff 0x7f00 count {} datatype 7 op 4 root 0 comm 0x5600aa [nranks={ranks}] stream 0x5601\n",
                    b / 4
                );
                op += 1;
            }
        }
    }
    let p = dir.join("train-trace.log");
    std::fs::write(&p, s).unwrap();
    p
}

fn on_sim(args: &[&str], limit: Duration) -> Run {
    let mut all = vec!["exec", "--", bin()];
    all.extend_from_slice(args);
    let r = run_bounded(SIM.cmd(&all), limit);
    assert_no_panic(&r);
    assert!(!r.timed_out, "{}", r.all());
    r
}

/// On the simulated cluster: burnin train's own gradient all-reduce (2 nodes × 1 rank),
/// written as the COLL trace NCCL would print for it, is replayed call for call (its
/// bucket sizes, average op, one inter-node communicator, every element right); then
/// (2 nodes × 2 ranks, 2 Gbit/s links) the data + tensor parallel trace, replayed
/// healthy as the baseline and again with node1's link shaped to a tenth, fails
/// naming the inter-node all_reduce as the call that adds most time. How close the replay's step comes to the training's own measured
/// all-reduce time is a speed claim, measured by `benches/replay-fidelity` (training
/// and replay alternated), not asserted here: on this 2-core machine the training's
/// compute and another process's load move it by more than any bound a test could hold.
#[test]
fn on_the_simulated_cluster_a_training_trace_replays_call_for_call_and_a_slow_link_is_named() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let down = require!(SIM.up_sized(2, 1, &[]));
    let train = dir.path().join("train");
    let r = on_sim(
        &[
            "train",
            "--steps",
            "10",
            "--ckpt-every",
            "0",
            "--bucket",
            "64K",
            "--log-every",
            "0",
            "--out",
            train.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = read(&train.join("run.json"));
    let buckets: Vec<u64> = run["bucket_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert!(buckets.len() >= 2, "{run}");
    let trace = training_trace(dir.path(), 2, &buckets, 3);
    let out = dir.path().join("replay-train");
    let r = on_sim(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--steps",
            "20",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let j = read(&out.join("replay.json"));
    assert_eq!(j["wrong"], 0, "{j}");
    assert_eq!(j["steps"], 20, "{j}");
    // One step is the training's buckets, one all_reduce each, on one 2-rank
    // inter-node communicator, in the training's order.
    assert_eq!(
        j["calls_per_step"],
        serde_json::json!(vec![buckets.len(); 2]),
        "{j}"
    );
    assert_eq!(j["comms"], serde_json::json!([["0x7a11", [0, 1]]]), "{j}");
    let timeline: Vec<u64> = j["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(timeline, buckets, "{j}");
    for c in j["calls"].as_array().unwrap() {
        assert_eq!(c["collective"], "all_reduce", "{c}");
        assert_eq!(c["op"], "avg", "{c}");
        assert_eq!(c["tier"], "inter-node (2 hosts)", "{c}");
    }
    let per_step: u64 = j["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["per_step"].as_u64().unwrap())
        .sum();
    assert_eq!(per_step as usize, buckets.len(), "{j}");
    // A step is its calls end to end, so its median is near the sum of the calls'
    // medians — near, not above: medians of skewed times do not add (a shaped
    // link's token-bucket ticks make a call's time two-valued; under a CPU hog 9
    // calls of median 8.0 ms made steps of median 64.0 ms, 0.89 of their sum). A
    // step counted as one call, or calls counted twice, falls outside by far.
    let predicted_us = j["calls_sum_us"].as_f64().unwrap();
    assert!(predicted_us > 0.0, "{j}");
    let p50 = j["step"]["p50_us"].as_f64().unwrap();
    assert!(
        (0.6 * predicted_us..=1.6 * predicted_us).contains(&p50),
        "{p50} against {predicted_us}: {j}"
    );

    drop(down);

    // The DP + TP trace on 2 nodes x 2 ranks: healthy (the baseline), then node1 at a
    // tenth of the rate. A tenth, not a quarter: under two busy loops (launch/test
    // --hog) the healthy 2 Gbit/s all_reduce is itself CPU-bound (about 24 ms against
    // the link's 8 ms), so a quarter-rate link read only 2.0-2.7x on the all_reduce and
    // 1.4-2.1x on the step (one run of three under 1.5: a PASS); at a tenth the link
    // stays the bottleneck.
    let _down = require!(SIM.up_sized(2, 2, &["--rate", "2gbit"]));
    let log = dp_tp_log(dir.path());
    let healthy = dir.path().join("healthy");
    let r = on_sim(
        &[
            "replay",
            "--trace",
            log.to_str().unwrap(),
            "--steps",
            "20",
            "--out",
            healthy.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let h = read(&healthy.join("replay.json"));
    let tiers: Vec<(&str, &str)> = h["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["collective"].as_str().unwrap(),
                c["tier"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        tiers
            .iter()
            .all(|(c, t)| (*c == "all_reduce") == t.starts_with("inter-node")),
        "{tiers:?}"
    );
    let shaped = run_bounded(
        SIM.cmd(&["shape", "node1=200mbit"]),
        Duration::from_secs(60),
    );
    assert_eq!(shaped.code, Some(0), "{}", shaped.all());
    let slow = dir.path().join("slow");
    let base = healthy.join("replay.json");
    let r = on_sim(
        &[
            "replay",
            "--trace",
            log.to_str().unwrap(),
            "--steps",
            "20",
            "--baseline",
            base.to_str().unwrap(),
            "--max-slowdown",
            "1.5",
            "--out",
            slow.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    let j = read(&slow.join("replay.json"));
    eprintln!("{}", j["verdict"]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let v = j["verdict"].as_str().unwrap();
    assert!(
        v.contains("most of it: all_reduce 1MiB on 0xd") && v.contains("inter-node (2 hosts)"),
        "{v}"
    );
    // The inter-node all_reduce's own cost (its last-arriving rank's time) slows by
    // about the link's factor on a quiet host, by more than 2x under a CPU hog (the
    // healthy baseline is CPU-bound there). The intra-node calls are
    // printed, not judged: on this VM's 2 cores the 4 ranks share CPUs, and ranks
    // spinning in the slowed all_reduce take cycles from the intra-node calls too.
    let slowdown = |inter: bool| {
        j["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["tier"].as_str().unwrap().starts_with("inter") == inter)
            .map(|c| c["slowdown"].as_f64().unwrap())
            .collect::<Vec<f64>>()
    };
    let (inter, intra) = (slowdown(true), slowdown(false));
    eprintln!(
        "step {}x; slowdowns: inter-node {inter:?}, intra-node {intra:?}",
        j["slowdown"]
    );
    assert_eq!(inter.len(), 2, "{j}");
    assert!(
        inter.iter().all(|x| *x > 2.0),
        "inter {inter:?}, intra {intra:?}: {j}"
    );
}
