//! Interruption at any point: Ctrl-C (SIGINT to mpirun, which hands the ranks SIGTERM)
//! at random moments of sweep, train and an acceptance run, [`ROUNDS`] times each (a
//! new seed every run, printed: the moments differ from run to run). Every time: the job ends
//! promptly, rank 0 says what was done, no process is left behind, every JSONL line
//! parses, run.json is complete or absent, and a checkpointed run still resumes.
mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// Interruptions per test.
const ROUNDS: usize = 10;

/// A small deterministic generator (the seed is printed, so a failure can be re-run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

fn seed() -> u64 {
    std::env::var("BURNIN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        })
}

/// Start `burnin ARGS` under mpirun, wait `after`, send SIGINT to mpirun, and check
/// the aftermath. Returns the run's combined output.
fn interrupt_once(np: usize, args: &[&str], after: Duration) -> Run {
    let mut c = mpirun_cmd(np);
    c.arg(bin()).args(args);
    interrupt(c, after, Duration::from_secs(20))
}

/// Start `c` in a process group of its own, wait `after`, SIGINT it (Ctrl-C), and
/// check it ends within `limit` leaving no process behind.
fn interrupt(mut c: std::process::Command, after: Duration, limit: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    c.process_group(0).stdin(std::process::Stdio::null());
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let pid = child.id();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (to, te) = (read(Box::new(out)), read(Box::new(err)));
    std::thread::sleep(after);
    let tree_before = descendants(pid);
    // SAFETY: SIGINT to our own child, like Ctrl-C on mpirun's terminal.
    unsafe { libc_kill(pid as i32, 2) };
    let start = Instant::now();
    let mut code = None;
    while start.elapsed() < limit {
        if let Some(st) = child.try_wait().unwrap() {
            code = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = code.is_some();
    if !ended {
        kill_group(&child, 9);
    }
    let _ = child.wait();
    let r = Run {
        code: code.and_then(|c| c.code()),
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
        timed_out: !ended,
    };
    assert!(
        ended,
        "{} did not end within {limit:?} of SIGINT:\n{}",
        c.get_program().to_string_lossy(),
        r.all()
    );
    // Nothing left: every process that was under mpirun is gone.
    std::thread::sleep(Duration::from_millis(300));
    let alive: Vec<u32> = tree_before
        .into_iter()
        .filter(|p| Path::new(&format!("/proc/{p}")).exists())
        .collect();
    let zombies_only = alive.iter().all(|p| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .map(|s| s.contains(") Z"))
            .unwrap_or(true)
    });
    assert!(
        zombies_only,
        "processes left after the interruption: {alive:?}\n{}",
        r.all()
    );
    r
}

fn check_results(dir: &Path, jsonl_name: &str) -> usize {
    let lines = jsonl(&dir.join(jsonl_name)).len();
    let run = dir.join("run.json");
    if run.exists() {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&run).unwrap()).expect("run.json is complete");
        assert!(v.get("schema_version").is_some());
    }
    lines
}

#[test]
fn ctrl_c_during_sweeps_leaves_whole_results_and_no_process() {
    let s = seed();
    eprintln!("seed {s} (BURNIN_TEST_SEED={s} re-runs this sequence)");
    let mut rng = Lcg(s);
    let dir = tempfile::tempdir().unwrap();
    let mut measuring = 0;
    let mut reported = 0;
    for i in 0..ROUNDS {
        let out = dir.path().join(format!("s{i}"));
        let args = [
            "sweep",
            "-c",
            "all",
            "-b",
            "1K",
            "-e",
            "16M",
            "-f",
            "4",
            "--budget",
            "0.2",
            "--out",
            out.to_str().unwrap(),
        ];
        let r = interrupt_once(2, &args, rng.millis(300, 4000));
        let points = if out.join("points.jsonl").exists() {
            check_results(&out, "points.jsonl")
        } else {
            0
        };
        // Once rank 0 is measuring, Ctrl-C must make it say what was done.
        if points > 0 && !out.join("run.json").exists() {
            measuring += 1;
            // mpirun SIGKILLs the ranks soon after it forwards the signal (and may end
            // before it forwards their stderr): rank 0's line is on stderr, in
            // interrupted.txt, or in both; wherever it is, it is whole.
            let note = std::fs::read_to_string(out.join("interrupted.txt")).unwrap_or_default();
            let at = format!("points in {}", out.join("points.jsonl").display());
            let mut said = false;
            for (what, text) in [("interrupted.txt", &note), ("stderr", &r.stderr)] {
                if text.contains("burnin: interrupted by") {
                    said = true;
                    assert!(
                        text.contains("burnin: interrupted by SIG") && text.contains(&at),
                        "a whole line naming the signal and the points ({what}):\n{text}\n{}",
                        r.all()
                    );
                }
            }
            reported += usize::from(said);
        }
        assert_no_panic(&r);
    }
    eprintln!(
        "{measuring} of {ROUNDS} interruptions came while measuring; rank 0 said so in {reported}"
    );
    assert!(
        measuring < 3 || reported > 0,
        "rank 0 never said it was interrupted in {measuring} interruptions while measuring"
    );
}

#[test]
fn ctrl_c_during_training_never_tears_a_checkpoint() {
    let s = seed() ^ 0x5eed;
    eprintln!("seed {s}");
    let mut rng = Lcg(s);
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let out = dir.path().join("out");
    for i in 0..ROUNDS {
        let mut args = vec![
            "train",
            "--steps",
            "400",
            "--ckpt-every",
            "3",
            "--ckpt-bytes",
            "2M",
            "--ckpt-dir",
            ck.to_str().unwrap(),
        ];
        let o = out.join(format!("t{i}"));
        args.extend(["--out", o.to_str().unwrap()]);
        if i > 0 {
            args.push("--resume");
        }
        let r = interrupt_once(2, &args, rng.millis(1500, 5000));
        assert_no_panic(&r);
        assert!(
            !r.all().contains("torn") || r.all().contains("skipp"),
            "a torn checkpoint is only ever skipped:\n{}",
            r.all()
        );
        if o.join("steps.jsonl").exists() {
            check_results(&o, "steps.jsonl");
        }
    }
    // After its interruptions the run still resumes from a verified checkpoint and ends.
    let o = out.join("final");
    let r = mpirun(
        2,
        &[
            "train",
            "--steps",
            "12",
            "--ckpt-every",
            "3",
            "--ckpt-dir",
            ck.to_str().unwrap(),
            "--resume",
            "--out",
            o.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert!(
        r.code == Some(0) || r.all().contains("already"),
        "resume after the interruptions:\n{}",
        r.all()
    );
}

/// Every JSONL file under `dir` parses line by line; every JSON file is whole.
fn check_tree(dir: &Path) -> usize {
    let mut files = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files += check_tree(&p);
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            jsonl(&p);
            files += 1;
        } else if p.extension().is_some_and(|x| x == "json") {
            let bytes = std::fs::read(&p).unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .unwrap_or_else(|e| panic!("{} is torn: {e}", p.display()));
            files += 1;
        }
    }
    files
}

#[test]
fn ctrl_c_during_acceptance_runs_ends_every_phase_and_reports_what_was_measured() {
    let s = seed() ^ 0xacce;
    eprintln!("seed {s} (BURNIN_TEST_SEED re-runs this sequence)");
    let mut rng = Lcg(s);
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("card.toml");
    std::fs::write(
        &card,
        "name = \"interrupted\"\nlaunch = \"mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2\"\nbackend = \"mpi\"\n[probe]\n[sweep]\ncollectives = [\"all_reduce\", \"all_gather\"]\nmin_bytes = \"1K\"\nmax_bytes = \"4M\"\nbudget_s = 0.2\n[train]\nsteps = 30\nckpt_every = 5\n",
    )
    .unwrap();
    let mut reported = 0;
    for i in 0..ROUNDS {
        let out = dir.path().join(format!("r{i}"));
        let mut c = std::process::Command::new(bin());
        c.args(["run", "-q", "--card"])
            .arg(&card)
            .arg("--out")
            .arg(&out)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl", "self,vader,tcp")
            .env("OMPI_MCA_btl_tcp_if_include", "lo")
            .env("OMPI_MCA_oob_tcp_if_include", "lo");
        // SIGINT anywhere from start-up to the training phase; the run's children get
        // SIGTERM, then the report is rendered from what is on disk.
        let r = interrupt(c, rng.millis(200, 12000), Duration::from_secs(60));
        assert_no_panic(&r);
        assert!(
            matches!(r.code, Some(0) | Some(1) | Some(2)) || r.code.is_none(),
            "{:?}\n{}",
            r.code,
            r.all()
        );
        check_tree(&out);
        if out.join("acceptance.json").exists() {
            // Whatever was measured renders; nothing that was measured is lost.
            let rep = run_bounded(
                {
                    let mut c = std::process::Command::new(bin());
                    c.arg("report").arg(&out);
                    c
                },
                Duration::from_secs(60),
            );
            assert!(matches!(rep.code, Some(0) | Some(1)), "{}", rep.all());
            assert_no_panic(&rep);
            assert!(out.join("report.md").is_file());
            if r.all()
                .contains("interrupted; the report shows what was measured")
            {
                reported += 1;
            }
        }
    }
    eprintln!("{reported} of {ROUNDS} interruptions came mid-run and were reported");
    assert!(
        reported > 0,
        "no interruption landed while the run was measuring"
    );
}
