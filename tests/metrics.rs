//! `--metrics-file`: the real binary under the real mpirun writes a Prometheus
//! text-format file; the Prometheus project's Python client (`prometheus_client`, in
//! the project venv) parses every copy read while the job ran and the file it left.
//! What is checked is the format, the names' conventions, and that the values are the
//! ones burnin recorded (points.jsonl, steps.jsonl), never a speed.
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Prometheus' naming conventions, as burnin follows them: `burnin_` prefix, snake
/// case, base units, counters' samples end in `_total`, each family once.
fn follows_conventions(fams: &[Value]) {
    let mut seen = BTreeSet::new();
    for f in fams {
        let name = f["name"].as_str().unwrap();
        assert!(seen.insert(name.to_string()), "{name} twice");
        assert!(name.starts_with("burnin_"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}"
        );
        for bad in ["_ms", "_mhz", "_gbps", "_us"] {
            assert!(!name.ends_with(bad), "{name}: not a base unit");
        }
        let kind = f["type"].as_str().unwrap();
        assert!(kind == "gauge" || kind == "counter", "{name}: {kind}");
        for smp in f["samples"].as_array().unwrap() {
            let n = smp["name"].as_str().unwrap();
            if kind == "counter" {
                assert_eq!(n, format!("{name}_total"), "counter sample {n}");
            } else {
                assert_eq!(n, name);
            }
        }
    }
}

/// Run `c` while copying `file` every 50 ms (each distinct content once); what the
/// run left, and the copies taken while it ran.
fn run_watching(c: Command, file: &Path, copies: &Path, limit: Duration) -> (Run, Vec<PathBuf>) {
    let t = std::thread::spawn(move || run_bounded(c, limit));
    let start = Instant::now();
    let mut taken: Vec<PathBuf> = Vec::new();
    let mut last = String::new();
    while !t.is_finished() && start.elapsed() < limit + Duration::from_secs(5) {
        if let Ok(text) = std::fs::read_to_string(file) {
            if text != last && !t.is_finished() {
                let p = copies.join(format!("copy-{:03}.prom", taken.len()));
                std::fs::write(&p, &text).unwrap();
                taken.push(p);
                last = text;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (t.join().unwrap(), taken)
}

#[test]
fn a_sweep_writes_a_file_prometheus_parses_mid_run_and_at_the_end_with_the_recorded_values() {
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("burnin.prom");
    let copies = dir.path().join("copies");
    std::fs::create_dir_all(&copies).unwrap();
    let out = dir.path().join("out");
    let mut c = mpirun_cmd(2);
    c.arg(bin()).args([
        "--metrics-file",
        s(&prom),
        "--metrics-every",
        "0.2",
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce,all_gather",
        "-b",
        "1K",
        "-e",
        "64M",
        "-f",
        "2",
        "-n",
        "50",
        "-w",
        "2",
        "--out",
        s(&out),
    ]);
    let (r, taken) = run_watching(c, &prom, &copies, Duration::from_secs(240));
    assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let points = jsonl(&out.join("points.jsonl"));
    assert!(points.len() >= 20, "{}", points.len());

    // Every copy read while the job ran parses, and some show it part-way.
    assert!(taken.len() >= 2, "copies while running: {}", taken.len());
    let mid = prom_parse(&taken);
    let mut part_way = 0;
    for fams in &mid {
        follows_conventions(fams);
        assert_eq!(prom_samples(fams, "burnin_info").len(), 1, "{fams:?}");
        let done: f64 = prom_samples(fams, "burnin_sweep_points_total")
            .iter()
            .map(|s| s["value"].as_f64().unwrap())
            .sum();
        if done > 0.0 && done < points.len() as f64 {
            part_way += 1;
        }
    }
    assert!(part_way >= 1, "no copy taken part-way through the sweep");

    // The file it left: the whole sweep, value for value.
    let fams = &prom_parse(std::slice::from_ref(&prom))[0];
    follows_conventions(fams);
    let info = prom_samples(fams, "burnin_info");
    assert_eq!(info[0]["labels"]["command"], "sweep", "{info:?}");
    assert_eq!(info[0]["labels"]["rank"], "0");
    assert_eq!(info[0]["labels"]["ranks"], "2");
    assert_eq!(info[0]["value"], 1.0);
    let phase = prom_samples(fams, "burnin_phase_info");
    assert_eq!(phase.len(), 1, "one phase now: {phase:?}");
    assert_eq!(phase[0]["labels"]["phase"], "done");
    let total: f64 = prom_samples(fams, "burnin_sweep_points_total")
        .iter()
        .map(|s| s["value"].as_f64().unwrap())
        .sum();
    assert_eq!(total, points.len() as f64);
    assert_eq!(prom_value(fams, "burnin_wrong_elements_total"), 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let updated = prom_value(fams, "burnin_updated_timestamp_seconds");
    assert!((now - updated).abs() < 300.0, "{updated} vs {now}");
    let busbw = prom_samples(fams, "burnin_busbw_gigabytes_per_second");
    let mut keys = BTreeSet::new();
    for p in points.iter().rev() {
        let key = (
            p["tier"].as_str().unwrap().to_string(),
            p["label"].as_str().unwrap().to_string(),
            p["collective"].as_str().unwrap().to_string(),
            p["dtype"].as_str().unwrap().to_string(),
            p["op"].as_str().unwrap_or("none").to_string(),
        );
        if !keys.insert(key.clone()) {
            continue; // an earlier size of a series already seen
        }
        let m: Vec<&&Value> = busbw
            .iter()
            .filter(|s| {
                let l = &s["labels"];
                l["tier"] == key.0.as_str()
                    && l["group"] == key.1.as_str()
                    && l["collective"] == key.2.as_str()
                    && l["dtype"] == key.3.as_str()
                    && l["op"] == key.4.as_str()
            })
            .collect();
        assert_eq!(m.len(), 1, "{key:?} in {busbw:?}");
        assert_eq!(m[0]["value"].as_f64(), p["busbw_gbps"].as_f64(), "{key:?}");
        let size: Vec<&Value> = prom_samples(fams, "burnin_message_size_bytes")
            .into_iter()
            .filter(|s| s["labels"] == m[0]["labels"])
            .collect();
        assert_eq!(size[0]["value"].as_f64(), p["bytes"].as_f64(), "{key:?}");
    }
    assert_eq!(
        busbw.len(),
        keys.len(),
        "one series per tier/group/collective/type/op"
    );
    assert!(keys.iter().any(|k| k.2 == "all_gather"), "{keys:?}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn training_reports_its_latest_step_and_checkpoint_rate() {
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("train.prom");
    let out = dir.path().join("out");
    let r = mpirun(
        2,
        &[
            "--metrics-file",
            s(&prom),
            "--metrics-every",
            "0.5",
            "train",
            "--steps",
            "12",
            "--ckpt-every",
            "6",
            "--out",
            s(&out),
        ],
        Duration::from_secs(240),
    );
    assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let steps = jsonl(&out.join("steps.jsonl"));
    let last = steps.last().unwrap();
    let fams = &prom_parse(&[prom])[0];
    follows_conventions(fams);
    assert_eq!(
        prom_samples(fams, "burnin_info")[0]["labels"]["command"],
        "train"
    );
    assert_eq!(prom_value(fams, "burnin_train_step"), 12.0);
    assert_eq!(
        prom_value(fams, "burnin_train_steps_total"),
        steps.len() as f64
    );
    assert_eq!(
        prom_value(fams, "burnin_train_loss"),
        last["loss"].as_f64().unwrap()
    );
    assert_eq!(
        prom_value(fams, "burnin_train_step_seconds"),
        last["step_s"].as_f64().unwrap()
    );
    assert_eq!(prom_value(fams, "burnin_checkpoints_written_total"), 2.0);
    assert!(prom_value(fams, "burnin_checkpoint_write_gigabytes_per_second") > 0.0);
}

#[test]
fn a_metrics_file_in_a_missing_folder_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("no-such-folder/burnin.prom");
    let out = dir.path().join("out");
    let r = mpirun(
        2,
        &[
            "--metrics-file",
            s(&prom),
            "sweep",
            "--backend",
            "mpi",
            "-b",
            "1K",
            "-e",
            "1K",
            "--out",
            s(&out),
        ],
        Duration::from_secs(60),
    );
    assert_no_panic(&r);
    assert_eq!(r.code, Some(2), "{}", r.all());
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("Error"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.all());
    assert!(errors[0].contains("--metrics-file: folder "), "{}", r.all());
    assert!(!out.join("points.jsonl").exists(), "nothing measured");
}

#[test]
fn an_acceptance_run_writes_its_own_families_and_the_running_jobs_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("card.toml");
    std::fs::write(
        &card,
        "name = \"metrics\"\nlaunch = \"mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2\"\nbackend = \"mpi\"\n[probe]\n[sweep]\nmin_bytes = \"1K\"\nmax_bytes = \"64K\"\ncollectives = [\"all_reduce\"]\n",
    )
    .unwrap();
    let prom = dir.path().join("acceptance.prom");
    let out = dir.path().join("out");
    let mut c = mpirun_cmd(1); // for its environment only
    let env: Vec<(String, String)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.into(), v?.to_str()?.into())))
        .collect();
    c = Command::new(bin());
    c.envs(env).args([
        "--metrics-file",
        s(&prom),
        "--metrics-every",
        "0.2",
        "run",
        "-q",
        "--card",
        s(&card),
        "--out",
        s(&out),
    ]);
    let r = run_bounded(c, Duration::from_secs(240));
    assert_no_panic(&r);
    assert!(r.code == Some(0) || r.code == Some(1), "{}", r.all());
    let acc: Value =
        serde_json::from_slice(&std::fs::read(out.join("acceptance.json")).unwrap()).unwrap();
    let fams = &prom_parse(&[prom, out.join("metrics/sweep.prom")]);
    let (merged, sweep) = (&fams[0], &fams[1]);
    follows_conventions(merged);
    let info = prom_samples(merged, "burnin_acceptance_info");
    assert_eq!(info[0]["labels"]["command"], "run", "{info:?}");
    for phase in ["probe", "sweep"] {
        let jobs: Vec<&Value> = prom_samples(merged, "burnin_acceptance_jobs_total")
            .into_iter()
            .filter(|s| s["labels"]["phase"] == phase)
            .collect();
        assert_eq!(jobs.len(), 1, "{phase}: {merged:?}");
        assert_eq!(jobs[0]["labels"]["status"], "passed", "{}", r.all());
    }
    let passed = prom_value(merged, "burnin_acceptance_passed");
    assert_eq!(passed == 1.0, acc["outcome"] == "pass", "{acc}");
    // The last job's file, copied in whole after the run's own families.
    assert_eq!(
        prom_samples(merged, "burnin_info")[0]["labels"]["command"],
        "sweep"
    );
    assert_eq!(
        prom_samples(merged, "burnin_busbw_gigabytes_per_second"),
        prom_samples(sweep, "burnin_busbw_gigabytes_per_second")
    );
    let argv = acc["jobs"][1]["argv"].as_array().unwrap();
    assert!(argv.iter().any(|a| a == "--metrics-file"), "{argv:?}");
}
