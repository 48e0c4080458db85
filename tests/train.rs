//! `burnin train`'s acceptance on the real binary under mpirun, with real libtorch:
//! bit-exact resume, SIGKILLs during checkpoint writes, refusals, the storage report.
mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests of this file share 2 cores: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const LIMIT: Duration = Duration::from_secs(180);

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

fn losses(run: &Value) -> Vec<f64> {
    run["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// Lines of burnin's own errors.
fn error_lines(r: &Run) -> Vec<String> {
    r.stderr
        .lines()
        .filter(|l| l.starts_with("Error"))
        .map(str::to_string)
        .collect()
}

/// The step a run says it resumed from.
fn resumed_from(stdout: &str) -> Option<u64> {
    stdout.lines().find_map(|l| {
        l.strip_prefix("# resumed from checkpoint step ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn resumed_run_matches_the_uninterrupted_run_bit_for_bit() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("A");
    let r = mpirun(
        4,
        &[
            "train",
            "--steps",
            "60",
            "--ckpt-every",
            "20",
            "--out",
            s(&a),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    let ra = run_json(&a);
    assert_eq!(jsonl(&a.join("steps.jsonl")).len(), 60);
    assert_eq!(ra["replicas_agree"], true);
    assert_eq!(ra["checkpoints"].as_array().unwrap().len(), 3);
    let la = losses(&ra);
    assert!(la[59] < la[0] - 1.0, "the model learns: {la:?}");

    // The report shows checkpoint write/read GB/s next to the raw speed, as a ratio.
    let st = &ra["storage"];
    for k in ["write_ratio", "read_ratio", "ckpt_write_gbps"] {
        assert!(st[k].as_f64().unwrap() > 0.0, "{k}: {st}");
    }
    for k in ["raw_write", "raw_read", "ckpt_read"] {
        assert!(st[k]["gbps"].as_f64().unwrap() > 0.0, "{k}: {st}");
    }
    assert!(r.stdout.contains("ratio ckpt/raw"), "{}", r.stdout);
    assert!(r.stdout.contains("raw file"), "{}", r.stdout);
    assert!(r.stdout.contains("step time p50 / p99"), "{}", r.stdout);

    // Same job stopped at 40, then resumed to 60 from its checkpoint.
    let ck = dir.path().join("ck");
    let b1 = dir.path().join("B1");
    let b2 = dir.path().join("B2");
    let common = ["--ckpt-every", "20", "--ckpt-dir", s(&ck)];
    let mut args = vec!["train", "--steps", "40", "--out", s(&b1)];
    args.extend(common);
    let r = mpirun(4, &args, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    // The resume is given another seed, learning rate and batch: the checkpoint's
    // own settings are carried over them (said on stderr), or the result would not be
    // the uninterrupted run's.
    let mut args = vec!["train", "--resume", "--steps", "60", "--out", s(&b2)];
    args.extend(common);
    args.extend(["--seed", "7", "--lr", "0.01", "--batch", "2"]);
    let r = mpirun(4, &args, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(resumed_from(&r.stdout), Some(40), "{}", r.stdout);
    assert!(
        r.stderr.contains(
            "resuming with the checkpoint's --seed 1 (this run: 7), --lr 0.003 (this run: \
             0.01), --batch 4 (this run: 2)"
        ),
        "{}",
        r.all()
    );
    let rb1 = run_json(&b1);
    let rb2 = run_json(&b2);
    assert_eq!(rb2["first_step"], 41);
    for (k, v) in [("seed", 1.0), ("lr", 0.003), ("batch", 4.0)] {
        assert_eq!(
            rb2["plan"][k].as_f64(),
            Some(v),
            "plan.{k}: {}",
            rb2["plan"]
        );
    }
    assert_eq!(rb2["resumed"]["step"], 40);
    assert!(rb2["resumed"]["restore_s"].as_f64().unwrap() > 0.0);
    let lb2 = losses(&rb2);
    assert_eq!(lb2.len(), 20);
    for (i, (x, y)) in la[40..].iter().zip(&lb2).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "loss of step {}", 41 + i);
    }
    assert_eq!(losses(&rb1)[..], la[..40]);
    assert_eq!(
        ra["final_weights_sha256"], rb2["final_weights_sha256"],
        "final weights"
    );
}

#[test]
fn bad_train_flags_are_one_line_and_exit_2() {
    let _s = serial();
    let r = mpirun(2, &["train", "--width", "30", "--ckpt-every", "0"], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_no_panic(&r);
    let e = error_lines(&r);
    assert_eq!(e.len(), 1, "{}", r.all());
    assert!(
        e[0].contains("--width: 30 is not a multiple of --heads 4"),
        "{}",
        e[0]
    );

    let r = mpirun(
        2,
        &["train", "--device", "cuda", "--ckpt-every", "0"],
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_no_panic(&r);
    let e = error_lines(&r);
    assert_eq!(e.len(), 1, "{}", r.all());
    assert!(e[0].contains("--device cuda"), "{}", e[0]);
}

#[test]
fn resume_refuses_another_world_size_model_or_a_corrupt_manifest() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let base = [
        "--ckpt-every",
        "1",
        "--ckpt-dir",
        s(&ck),
        "--log-every",
        "0",
    ];
    let mut args = vec!["train", "--steps", "3"];
    args.extend(base);
    let r = mpirun(2, &args, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());

    let refused = |np: usize, extra: &[&str], want: &[&str]| {
        let mut args = vec!["train", "--resume", "--steps", "5"];
        args.extend(base);
        args.extend(extra);
        let r = mpirun(np, &args, LIMIT);
        assert_eq!(r.code, Some(2), "{}", r.all());
        assert_no_panic(&r);
        let e = error_lines(&r);
        assert_eq!(e.len(), 1, "one line:\n{}", r.all());
        for w in want {
            assert!(e[0].contains(w), "'{w}' in {}", e[0]);
        }
        assert!(!r.stdout.contains("step      4"), "nothing trained");
    };
    refused(3, &[], &["written by 2 ranks", "this job has 3", "-np 2"]);
    refused(
        2,
        &["--width", "32"],
        &["another model", "--width 64 (this run: 32)"],
    );
    // Another preset is another model (its learning rate and batch would be carried).
    refused(
        2,
        &["--preset", "gpu-small"],
        &["another model", "--width 64 (this run: 512)"],
    );

    // A manifest changed after it was written (still valid JSON).
    let m = ck.join("step-000000003").join("manifest.json");
    let text = std::fs::read_to_string(&m).unwrap();
    let edited = text.replacen("\"lr\":0.003", "\"lr\":0.004", 1);
    assert_ne!(text, edited);
    std::fs::write(&m, edited).unwrap();
    refused(
        2,
        &[],
        &["step-000000003/manifest.json is corrupt", "checksum"],
    );
    // Garbage.
    std::fs::write(&m, b"\x00garbage").unwrap();
    refused(2, &[], &["is corrupt", "not a valid manifest", "Move"]);

    // Without --resume, a directory holding checkpoints is refused too.
    std::fs::remove_dir_all(ck.join("step-000000003")).unwrap();
    let mut args = vec!["train", "--steps", "5"];
    args.extend(base);
    let r = mpirun(2, &args, LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("already holds checkpoints"),
        "{}",
        r.all()
    );
}

#[test]
fn a_rank_dying_inside_a_checkpoint_leaves_it_torn_and_resume_skips_it() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("ref");
    let quick = [
        "--steps",
        "6",
        "--ckpt-every",
        "1",
        "--log-every",
        "0",
        "--ckpt-bytes",
        "1M",
    ];
    let mut args = vec!["train", "--out", s(&reference)];
    args.extend(quick);
    let r = mpirun(2, &args, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let want = run_json(&reference)["final_weights_sha256"].clone();

    for (i, die) in ["4:shard-tmp:1", "4:shard-done:1", "4:before-manifest"]
        .iter()
        .enumerate()
    {
        let ck = dir.path().join(format!("ck{i}"));
        let mut args = vec!["train", "--ckpt-dir", s(&ck), "--test-die", die];
        args.extend(quick);
        let r = mpirun(2, &args, LIMIT);
        assert_ne!(r.code, Some(0), "{die}: the rank died\n{}", r.all());
        let step4 = ck.join("step-000000004");
        assert!(step4.is_dir(), "{die}");
        assert!(!step4.join("manifest.json").exists(), "{die}: torn");

        let out = dir.path().join(format!("out{i}"));
        let mut args = vec!["train", "--resume", "--ckpt-dir", s(&ck), "--out", s(&out)];
        args.extend(quick);
        let r = mpirun(2, &args, LIMIT);
        assert_eq!(r.code, Some(0), "{die}\n{}", r.all());
        assert_no_panic(&r);
        assert_eq!(resumed_from(&r.stdout), Some(3), "{die}\n{}", r.all());
        assert!(
            r.stderr.contains("skipping checkpoint step 4") && r.stderr.contains("torn"),
            "{die}: says why\n{}",
            r.all()
        );
        let run = run_json(&out);
        assert_eq!(
            run["final_weights_sha256"], want,
            "{die}: same weights as uninterrupted"
        );
    }
}

// ---- SIGKILL at random moments while checkpoints are being written ----

/// SplitMix64, for the kill schedule (the seed is printed to reproduce a failure).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Direct children of `pid` (mpirun's ranks run in their own process groups, so
/// killing mpirun's group would leave them running).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rsplit_once(") ").map(|x| x.1) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(1).and_then(|x| x.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(") ").map(|x| &x.1[..1]),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}

fn sigkill(pid: u32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) on a pid of the job this test started.
    unsafe {
        kill(pid as i32, 9);
    }
}

/// Complete checkpoints in `root` checked independently of burnin: every manifest
/// present must match its shards (sizes and sha256). Returns the newest step.
fn newest_verified(root: &Path, world: usize) -> Option<u64> {
    let mut steps: Vec<(u64, PathBuf)> = std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e
                        .file_name()
                        .to_str()?
                        .strip_prefix("step-")?
                        .parse()
                        .ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    steps.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut newest = None;
    for (step, dir) in steps {
        let Ok(text) = std::fs::read(dir.join("manifest.json")) else {
            continue; // torn
        };
        let m: Value = serde_json::from_slice(&text)
            .unwrap_or_else(|e| panic!("{}: a manifest that does not parse: {e}", dir.display()));
        assert_eq!(m["step"], step);
        let shards = m["shards"].as_array().unwrap();
        assert_eq!(shards.len(), world, "{}", dir.display());
        for sh in shards {
            let f = dir.join(sh["file"].as_str().unwrap());
            let bytes = std::fs::read(&f).unwrap_or_else(|e| {
                panic!(
                    "{}: manifest present but {} unreadable: {e}",
                    dir.display(),
                    f.display()
                )
            });
            assert_eq!(
                bytes.len() as u64,
                sh["bytes"].as_u64().unwrap(),
                "{}",
                f.display()
            );
            assert_eq!(
                burnin::train::storage::sha256_hex(&bytes),
                sh["sha256"].as_str().unwrap(),
                "a torn shard behind a manifest: {}",
                f.display()
            );
        }
        newest.get_or_insert(step);
    }
    newest
}

/// Step directories without a manifest.
fn torn_dirs(root: &Path) -> usize {
    std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
                .filter(|e| !e.path().join("manifest.json").exists())
                .count()
        })
        .unwrap_or(0)
}

/// Newest step directory (complete or not).
fn newest_dir(root: &Path) -> Option<u64> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .max()
}

/// step -> loss from a (possibly killed) run's steps.jsonl; a cut last line is ignored.
fn step_losses(path: &Path) -> BTreeMap<u64, f64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
        .collect()
}

#[test]
fn sigkill_while_checkpointing_never_leaves_a_torn_checkpoint_to_resume() {
    let _s = serial();
    const KILLS: usize = 20;
    const NP: usize = 4;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    eprintln!("kill schedule seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let started = Instant::now();
    let mut seen: BTreeMap<u64, f64> = BTreeMap::new();
    let mut resumes: Vec<Option<u64>> = Vec::new();
    let mut torn_seen = 0;
    for attempt in 0..=KILLS {
        let last = attempt == KILLS;
        let expected = newest_verified(&ck, NP);
        let launch_newest = newest_dir(&ck).unwrap_or(0);
        torn_seen += torn_dirs(&ck);
        let out = dir.path().join(format!("out{attempt}"));
        let log = dir.path().join(format!("log{attempt}"));
        let steps = if last {
            (expected.unwrap_or(0) + 3).to_string()
        } else {
            "1000000".to_string()
        };
        let mut c = mpirun_cmd(NP);
        c.args([
            bin(),
            "train",
            "--resume",
            "--steps",
            &steps,
            "--ckpt-every",
            "1",
            "--keep",
            "2",
            "--ckpt-bytes",
            "8M",
            "--log-every",
            "0",
            "--ckpt-dir",
            s(&ck),
            "--out",
            s(&out),
        ]);
        let stdout = std::fs::File::create(&log).unwrap();
        let stderr = std::fs::File::create(log.with_extension("err")).unwrap();
        c.stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .stdin(Stdio::null());
        let mut child = c.spawn().unwrap();
        let mpirun_pid = child.id();
        let text = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        if last {
            let t = Instant::now();
            let status = loop {
                if let Some(st) = child.try_wait().unwrap() {
                    break Some(st);
                }
                if t.elapsed() > LIMIT {
                    for p in children(mpirun_pid) {
                        sigkill(p);
                    }
                    sigkill(mpirun_pid);
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let (o, e) = (text(&log), text(&log.with_extension("err")));
            assert_eq!(status.and_then(|s| s.code()), Some(0), "{o}\n{e}");
            assert!(!(o.clone() + &e).contains("panicked"), "{o}\n{e}");
            resumes.push(resumed_from(&o));
            assert_eq!(resumed_from(&o), expected, "final run\n{o}\n{e}");
        } else {
            // Wait for training to reach a new checkpoint, then kill at a random
            // moment of the following checkpoint-heavy steps.
            let t = Instant::now();
            let base = expected.unwrap_or(0).max(launch_newest);
            while t.elapsed() < Duration::from_secs(60)
                && newest_dir(&ck).unwrap_or(0) <= base
                && child.try_wait().unwrap().is_none()
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(rng.below(400)));
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "attempt {attempt} ended by itself ({st}) before the kill:\n{}\n{}",
                    text(&log),
                    text(&log.with_extension("err"))
                );
            }
            let ranks = children(mpirun_pid);
            if attempt % 2 == 0 {
                // The whole job at once (a node lost with everything on it).
                for &p in &ranks {
                    sigkill(p);
                }
                sigkill(mpirun_pid);
            } else if !ranks.is_empty() {
                // One rank; mpirun takes the rest down.
                sigkill(ranks[rng.below(ranks.len() as u64) as usize]);
            }
            let t = Instant::now();
            while child.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(10));
            }
            if child.try_wait().unwrap().is_none() {
                sigkill(mpirun_pid);
                let _ = child.wait();
            }
            for p in ranks {
                sigkill(p);
                let t = Instant::now();
                while alive(p) && t.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert!(!alive(p), "rank pid {p} outlived the kill");
            }
            let o = text(&log);
            let e = text(&log.with_extension("err"));
            assert!(!(o.clone() + &e).contains("panicked"), "{o}\n{e}");
            // The run (before it was killed) resumed from the newest verified one.
            let r = resumed_from(&o);
            if o.contains("# resumed") || o.contains("# nothing to resume") {
                assert_eq!(r, expected, "attempt {attempt}\n{o}\n{e}");
            }
            resumes.push(r);
        }
        // Steps done again after a restart give bit-identical losses.
        for (step, loss) in step_losses(&out.join("steps.jsonl")) {
            if let Some(prev) = seen.insert(step, loss) {
                assert_eq!(
                    prev.to_bits(),
                    loss.to_bits(),
                    "loss of step {step} differs after a restart"
                );
            }
        }
        assert!(started.elapsed() < Duration::from_secs(600), "bounded");
    }
    // Every checkpoint left behind still verifies.
    newest_verified(&ck, NP);
    let resumed: Vec<u64> = resumes.iter().flatten().copied().collect();
    eprintln!("resumed from steps {resumes:?}; torn checkpoints left by the kills: {torn_seen}");
    assert!(torn_seen > 0, "the kills hit checkpoint writes");
    assert!(
        resumed.len() >= KILLS / 2,
        "most attempts resumed from a checkpoint: {resumes:?}"
    );
}

/// Replicas that stop agreeing are named at the first check after it happens: one
/// of three changes a weight after step 5, checked every 2 steps, named at step 6
/// with its host (a majority of 3); with two replicas there is no majority and both
/// are named; a healthy run's checks all agree.
#[test]
fn a_replica_that_diverges_is_named_with_the_first_step_it_differs() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let run = |np: usize, name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = vec![
            "train",
            "--preset",
            "tiny",
            "--steps",
            "10",
            "--ckpt-every",
            "0",
            "--replica-check-every",
            "2",
            "--out",
            s(&out),
        ];
        args.extend_from_slice(extra);
        let r = mpirun(np, &args, LIMIT);
        assert_no_panic(&r);
        (r, run_json(&out))
    };
    let (r, j) = run(3, "three", &["--test-diverge", "1:5"]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    let d = &j["replica_divergence"];
    assert_eq!(
        (d["step"].as_u64(), d["majority"].as_bool()),
        (Some(6), Some(true)),
        "{j}"
    );
    assert_eq!(d["ranks"], serde_json::json!([1]), "{j}");
    let host = d["hosts"][0].as_str().unwrap();
    assert!(
        r.stdout.contains(&format!(
            "# replicas: step 6: rank 1 ({host}) disagree(s) with the weights of the other 2 replica(s)"
        )),
        "{}",
        r.all()
    );
    assert!(r.stdout.contains("replicas first differ"), "{}", r.all());
    assert_eq!(j["replicas_agree"], false);

    let (r, j) = run(2, "two", &["--test-diverge", "0:9"]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    // after step 9 the next check is the end of the run (step 10)
    let d = &j["replica_divergence"];
    assert_eq!(
        (d["step"].as_u64(), d["majority"].as_bool()),
        (Some(10), Some(false)),
        "{j}"
    );
    assert_eq!(d["ranks"], serde_json::json!([0, 1]), "{j}");

    let (r, j) = run(3, "healthy", &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(j.get("replica_divergence").is_none(), "{j}");
    assert_eq!(j["plan"]["replica_check_every"], 2, "{j}");
}
