//! launch/gpu-check's dry run, for the machines it will meet: every burnin command
//! line it prints for 1, 2 and 8 GPUs goes through burnin's own argument checks
//! (`BURNIN_CHECK_ARGS`), so a wrong flag fails here and not on a lent GPU machine.
mod common;

use common::{bin, run_bounded};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const STEPS: [&str; 11] = [
    "preflight",
    "nccl-tests-build",
    "evidence",
    "probe",
    "smoke",
    "nccl-correctness",
    "nccl-perf",
    "copy-bandwidth",
    "train-resume-parity",
    "chaos",
    "nccl-tests",
];

/// A kit folder as launch/gpu-kit lays it out, with an nccl-tests source marker, so
/// the dry run plans the build too.
fn kit(dir: &Path) -> std::path::PathBuf {
    let k = dir.join("kit");
    std::fs::create_dir_all(k.join("nccl-tests/src")).unwrap();
    std::fs::write(k.join("nccl-tests/src/Makefile"), "# marker\n").unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("launch/gpu-check");
    std::fs::copy(script, k.join("gpu-check")).unwrap();
    k
}

fn dry_run(kit: &Path, args: &[&str]) -> common::Run {
    let mut c = Command::new("bash");
    c.arg(kit.join("gpu-check")).arg("--dry-run").args(args);
    run_bounded(c, Duration::from_secs(60))
}

/// The command lines of a dry run: (step, words), from its `    + (<= N s) …` lines.
fn commands(stdout: &str) -> Vec<(String, Vec<String>)> {
    let mut step = String::new();
    let mut out = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix('[') {
            step = rest.split(']').next().unwrap_or("").to_string();
        } else if let Some(rest) = line.trim_start().strip_prefix("+ (<= ") {
            let cmd = rest.split_once(" s) ").map(|x| x.1).unwrap_or("");
            let words = shlex::split(cmd).unwrap_or_else(|| panic!("unquotable: {line}"));
            out.push((step.clone(), words));
        }
    }
    out
}

/// The rank count a command line starts burnin with: mpirun's -np, the -np inside a
/// chaos --launch, else 1.
fn ranks(words: &[String]) -> usize {
    let np = |w: &[String]| {
        w.iter()
            .position(|x| x == "-np")
            .and_then(|i| w.get(i + 1))
            .and_then(|n| n.parse().ok())
    };
    if let Some(n) = np(words) {
        return n;
    }
    if let Some(i) = words.iter().position(|w| w == "--launch") {
        let launch = shlex::split(&words[i + 1]).unwrap();
        return np(&launch).unwrap_or(1);
    }
    1
}

#[test]
fn every_burnin_command_of_the_dry_run_parses_for_1_2_and_8_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path());
    for gpus in [1usize, 2, 8] {
        let r = dry_run(&kit, &["--gpus", &gpus.to_string()]);
        assert_eq!(r.code, Some(0), "{}", r.all());
        assert!(
            r.stdout.contains(&format!("{gpus} GPU(s)"))
                && r.stdout.contains("no step starts after 300 s"),
            "{}",
            r.all()
        );
        for s in STEPS {
            assert!(
                r.stdout.contains(&format!("[{s}] (at most ")),
                "{s}: {}",
                r.all()
            );
        }
        let cmds = commands(&r.stdout);
        let burnin: Vec<&(String, Vec<String>)> = cmds
            .iter()
            .filter(|(_, w)| {
                // burnin itself, or under mpirun (not an argument of ldd, say)
                (w[0].ends_with("/bin/burnin") || w[0] == "mpirun")
                    && w.iter().any(|x| x.ends_with("/bin/burnin"))
            })
            .collect();
        let mut checked = 0;
        for (step, words) in &burnin {
            let at = words
                .iter()
                .position(|x| x.ends_with("/bin/burnin"))
                .unwrap();
            let args = &words[at + 1..];
            let n = ranks(words);
            if args.first().map(String::as_str) != Some("--version") {
                assert!(
                    n == gpus || (step == "evidence" && n == 1),
                    "{step} starts {n} ranks for {gpus} GPUs: {words:?}"
                );
            }
            let mut c = Command::new(bin());
            c.args(args).env("BURNIN_CHECK_ARGS", n.to_string());
            let out = run_bounded(c, Duration::from_secs(20));
            assert!(
                out.code == Some(0)
                    && (args[0] == "--version" || out.stdout.contains("burnin: arguments ok")),
                "[{step}] {words:?} for {gpus} GPU(s) does not parse: {}",
                out.all()
            );
            checked += 1;
        }
        // evidence + --version, probe, smoke, 2 sweeps, 3 trainings; chaos from 2 GPUs.
        let want = if gpus >= 2 { 10 } else { 9 };
        assert_eq!(checked, want, "{gpus} GPUs: {burnin:?}");
        let chaos: Vec<_> = burnin.iter().filter(|(s, _)| s == "chaos").collect();
        if gpus == 1 {
            assert!(
                chaos.is_empty() && r.stdout.contains("skipped: 1 GPU"),
                "{}",
                r.all()
            );
        } else {
            let w = &chaos[0].1;
            let launch = &w[w.iter().position(|x| x == "--launch").unwrap() + 1];
            assert!(launch.ends_with(&format!("-np {gpus}")), "{launch}");
            let dd = w.iter().position(|x| x == "--").unwrap();
            assert!(
                w[..dd].contains(&"--fault".to_string()),
                "fault flags are chaos's: {w:?}"
            );
        }
        // The nccl-tests build is planned before any timed step, with its time limit.
        let build = r.stdout.find("[nccl-tests-build]").unwrap();
        assert!(build < r.stdout.find("[nccl-perf]").unwrap());
        assert!(cmds
            .iter()
            .any(|(s, w)| s == "nccl-tests-build" && w[0] == "make"));
    }
}

#[test]
fn bad_gpu_check_arguments_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path());
    for (args, says) in [
        (&["--gpus", "0"][..], "--gpus '0' is not a GPU count"),
        (&["--budget", "five"][..], "--budget 'five' is not a number"),
        (&["--frobnicate"][..], "unknown argument '--frobnicate'"),
    ] {
        let r = dry_run(&kit, args);
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.all());
        assert!(r.stderr.contains(says), "{args:?}: {}", r.all());
    }
    // --gpus plans a dry run only; a real run counts its GPUs.
    let mut c = Command::new("bash");
    c.arg(kit.join("gpu-check"))
        .args(["--gpus", "2", "--out"])
        .arg(dir.path().join("o"));
    let r = run_bounded(c, Duration::from_secs(30));
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("--gpus is for --dry-run"), "{}", r.all());
}

/// A wrong flag is caught by the check the dry-run test relies on.
#[test]
fn the_argument_check_refuses_what_a_job_would_refuse() {
    for (ranks, args, says) in [
        ("2", &["sweep", "--frob"][..], "--frob"),
        (
            "3",
            &["sweep", "-c", "all_gather", "-b", "8", "-e", "16"][..],
            "cannot split evenly over 3",
        ),
        (
            "2",
            &["chaos", "--launch", "mpirun -np 2", "--", "--fault", "kill"][..],
            "--fault is chosen by burnin chaos",
        ),
        ("2", &["train", "--bucket", "3"][..], "--bucket"),
        ("x", &["probe"][..], "BURNIN_CHECK_ARGS"),
    ] {
        let mut c = Command::new(bin());
        c.args(args).env("BURNIN_CHECK_ARGS", ranks);
        let r = run_bounded(c, Duration::from_secs(20));
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.all());
        assert!(r.stderr.contains(says), "{args:?}: {}", r.all());
    }
}
