//! The sweep's acceptance on the real binary under mpirun.
mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn all_seven_collectives_on_four_ranks_are_correct_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let r = mpirun(
        4,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-c",
            "all",
            "-b",
            "1K",
            "-e",
            "16M",
            "-f",
            "4",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    for name in [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
    ] {
        assert!(
            r.stdout.contains(&format!("# {name} f32")),
            "table for {name}:\n{}",
            r.stdout
        );
    }
    assert!(
        r.stdout.contains("# Out of bounds values : 0 OK"),
        "{}",
        r.stdout
    );
    let points = jsonl(&out.join("points.jsonl"));
    // 7 collectives × 8 sizes × 2 placements
    assert_eq!(points.len(), 7 * 8 * 2);
    for p in &points {
        assert_eq!(p["wrong"], 0, "{p}");
        assert!(p["busbw_gbps"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["iterations"].as_u64().unwrap() >= 10, "{p}");
        assert_eq!(p["members"].as_array().unwrap().len(), 4);
    }
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["schema_version"], 1);
    assert_eq!(run["points"].as_array().unwrap().len(), points.len());
    assert_eq!(run["wrong_total"], 0);
    assert_eq!(run["provenance"]["world_size"], 4);
    assert!(run["provenance"]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "sweep"));
    assert!(run["provenance"]["mpi_version"]
        .as_str()
        .unwrap()
        .contains("Open MPI"));
    // busbw = algbw × factor for every point (n = 4).
    for p in run["points"].as_array().unwrap() {
        let f = match p["collective"].as_str().unwrap() {
            "all_reduce" => 1.5,
            "all_gather" | "reduce_scatter" | "alltoall" => 0.75,
            _ => 1.0,
        };
        let (alg, bus) = (
            p["algbw_gbps"].as_f64().unwrap(),
            p["busbw_gbps"].as_f64().unwrap(),
        );
        assert!((bus - alg * f).abs() <= 1e-9 * bus.max(1.0), "{p}");
    }
}

/// What the GPU twin's NCCL scenarios run, on the MPI backend: every collective, type
/// (of the four MPI has) and op, in and out of place, at 3 ranks (odd: integer averages truncate, the
/// reduce_scatter's chunks are uneven in bytes) and 4 (MPI picks other algorithms at a
/// power of two), each point checked element by element. The MPI backend computes
/// avg itself (MPI has no average) and runs in place through MPI_IN_PLACE or a copy:
/// each of those paths is a place for a bug that only some op, type or placement shows.
#[test]
fn every_collective_type_and_op_in_and_out_of_place_is_right_on_the_mpi_backend() {
    for n in [3usize, 4] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("sweep");
        let r = mpirun(
            n,
            &[
                "sweep",
                "--backend",
                "mpi",
                "--tiers",
                "world",
                "-c",
                "all",
                "-d",
                "all",
                "-o",
                "all",
                "-b",
                "3K",
                "-e",
                "96K",
                "-f",
                "32",
                "-n",
                "2",
                "-w",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
            Duration::from_secs(300),
        );
        assert_eq!(r.code, Some(0), "{n} ranks: {}", r.all());
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
        let points = run["points"].as_array().unwrap();
        // 3 reducing collectives × 5 ops + 4 others, × 4 types (`-d all` is every type
        // the MPI backend has: MPI has no f16/bf16) × 2 sizes × 2 placements
        assert_eq!(
            points.len(),
            (3 * 5 + 4) * 4 * 2 * 2,
            "{n} ranks: {}",
            r.all()
        );
        let mut seen = std::collections::BTreeSet::new();
        for p in points {
            assert_eq!(p["wrong"], 0, "{n} ranks: {p}");
            assert_eq!(p["members"].as_array().unwrap().len(), n, "{p}");
            seen.insert((
                p["collective"].to_string(),
                p["dtype"].to_string(),
                p["op"].to_string(),
                p["in_place"].to_string(),
            ));
        }
        assert_eq!(
            seen.len(),
            (3 * 5 + 4) * 4 * 2,
            "every combination once a size"
        );
        let types: std::collections::BTreeSet<&str> =
            points.iter().filter_map(|p| p["dtype"].as_str()).collect();
        assert_eq!(types, ["f32", "f64", "i32", "u8"].into(), "{n} ranks");
        assert_eq!(run["wrong_total"], 0);
    }
}

#[test]
fn a_corrupted_rank_gives_wrong_elements_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad");
    let r = mpirun(
        4,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-c",
            "all_reduce",
            "-b",
            "4K",
            "-e",
            "4K",
            "-n",
            "5",
            "--corrupt-rank",
            "2",
            "--corrupt-at",
            "last",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(r.stdout.contains("FAILED"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("# WRONG: all_reduce 4KiB f32: rank 2 first at element 1023"),
        "{}",
        r.stdout
    );
    let points = jsonl(&out.join("points.jsonl"));
    assert!(points.iter().all(|p| p["wrong"].as_u64().unwrap() > 0));
}

#[test]
fn a_sweep_killed_halfway_leaves_whole_jsonl_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed");
    let mut c = mpirun_cmd(2);
    c.args([
        bin(),
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all",
        "-b",
        "1K",
        "-e",
        "64M",
        "-f",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    use std::os::unix::process::CommandExt;
    c.process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let points = out.join("points.jsonl");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if std::fs::read_to_string(&points)
            .map(|t| t.lines().count())
            .unwrap_or(0)
            >= 6
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kill_group(&child, 9);
    let _ = child.wait();
    let lines = jsonl(&points);
    assert!(lines.len() >= 6, "measured something before the kill");
    assert!(
        !out.join("run.json").exists(),
        "run.json is written only when the sweep completes"
    );
}

/// `--timing osu` (a barrier after every timed iteration) runs every collective to
/// the same checked results and says in run.json which method timed it.
#[test]
fn osu_timing_checks_every_collective_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let r = mpirun(
        3,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-c",
            "all",
            "-b",
            "3K",
            "-e",
            "48K",
            "-f",
            "4",
            "-n",
            "7",
            "-w",
            "2",
            "--timing",
            "osu",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["plan"]["timing"], "osu");
    let points = run["points"].as_array().unwrap();
    // 7 collectives × 3 sizes × 2 placements.
    assert_eq!(points.len(), 42, "{}", r.all());
    for p in points {
        assert_eq!(p["iterations"], 7, "{p}");
        assert_eq!(p["wrong"], 0, "{p}");
    }
}
