//! launch/gpu-check, for the machines it will meet: its dry run for 1, 2 and 8 GPUs
//! (the plan fits the budget; every burnin command line it prints goes through
//! burnin's own argument checks, `BURNIN_CHECK_ARGS`, so a wrong flag fails here and
//! not on a lent GPU machine), and real runs on a stand-in machine: a step the budget
//! cannot hold is `not run (budget)`, never a failure, and `--only` runs `burnin gpu`
//! (on the GPU twin) and the background nccl-tests build into the summary.
mod common;

use common::{bin, run_bounded, twin};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The steps, in order, each with a limit in the plan (the nccl-tests build runs in the
/// background and has none).
const STEPS: [&str; 12] = [
    "preflight",
    "evidence",
    "probe",
    "smoke",
    "gpu-health",
    "copy-bandwidth",
    "sdc",
    "nccl-correctness",
    "nccl-perf",
    "train-resume-parity",
    "chaos",
    "nccl-tests",
];

/// A kit folder as launch/gpu-kit lays it out, with an nccl-tests source marker, so
/// the dry run plans the build too.
fn kit(dir: &Path) -> PathBuf {
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

/// The plan of a dry run: (step, limit) from its `[step] (at most N s)` lines, and the
/// total its `[plan] N s of step limits` line states.
fn plan(stdout: &str) -> (Vec<(String, u64)>, u64) {
    let mut steps = Vec::new();
    let mut total = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("[plan] ") {
            total = rest.split(' ').next().and_then(|n| n.parse().ok());
        } else if let Some((name, rest)) = line
            .strip_prefix('[')
            .and_then(|l| l.split_once("] (at most "))
        {
            let n = rest.strip_suffix(" s)").and_then(|n| n.parse().ok());
            steps.push((name.to_string(), n.unwrap_or_else(|| panic!("{line}"))));
        }
    }
    (
        steps,
        total.unwrap_or_else(|| panic!("no [plan] line:\n{stdout}")),
    )
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
fn the_plan_fits_the_budget_and_every_burnin_command_parses_for_1_2_and_8_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path());
    for gpus in [1usize, 2, 8] {
        let r = dry_run(&kit, &["--gpus", &gpus.to_string()]);
        assert_eq!(r.code, Some(0), "{}", r.all());
        assert!(
            r.stdout.contains(&format!("{gpus} GPU(s)"))
                && r.stdout
                    .contains("what is left of the 340 s budget holds its whole limit"),
            "{}",
            r.all()
        );
        // Every step, in order, with a limit; together no more than the budget.
        let (limits, total) = plan(&r.stdout);
        let names: Vec<&str> = limits.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, STEPS, "{}", r.all());
        let sum: u64 = limits.iter().map(|(_, l)| l).sum();
        assert_eq!(sum, total, "{}", r.all());
        assert!(sum <= 340, "{gpus} GPUs: {sum} s of limits: {limits:?}");
        let limit = |s: &str| limits.iter().find(|(n, _)| n == s).unwrap().1;
        // One GPU has no chaos: its seconds go to burnin gpu's default 60 s burn.
        let burn = if gpus == 1 { 60 } else { 20 };
        assert_eq!(limit("gpu-health"), burn + 25);
        assert_eq!(limit("chaos") == 0, gpus == 1);
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
                // sdc: four ranks at least (one GPU shared by four ranks can vote)
                assert!(
                    n == gpus
                        || (step == "evidence" && n == 1)
                        || (step == "sdc" && n == gpus.max(4)),
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
        // evidence + --version, probe, smoke, gpu, 2 sdc, 2 sweeps, 3 trainings; chaos
        // from 2.
        let want = if gpus >= 2 { 13 } else { 12 };
        assert_eq!(checked, want, "{gpus} GPUs: {burnin:?}");
        // burnin gpu: the plan's burn, and its command's limit is the step's.
        let gpu: Vec<_> = burnin
            .iter()
            .filter(|(s, w)| s == "gpu-health" && w.contains(&"gpu".to_string()))
            .collect();
        assert_eq!(gpu.len(), 1, "{burnin:?}");
        let w = &gpu[0].1;
        let at = |flag: &str| &w[w.iter().position(|x| x == flag).unwrap() + 1];
        assert_eq!(at("--burn"), &format!("{burn}s"), "{w:?}");
        assert!(at("--out").ends_with("/gpu"), "{w:?}");
        assert!(
            r.stdout.contains(&format!("+ (<= {} s) mpirun", burn + 25)),
            "{}",
            r.all()
        );
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
        // The nccl-tests build: in the background from the end of preflight, outside
        // the plan's total, bounded by its own limit.
        let build = r
            .stdout
            .find("[nccl-tests-build] (in the background from here, at most 240 s")
            .unwrap_or_else(|| panic!("{}", r.all()));
        assert!(build > r.stdout.find("[preflight]").unwrap());
        assert!(build < r.stdout.find("[evidence]").unwrap());
        assert!(cmds.iter().any(|(s, w)| s == "nccl-tests-build"
            && w[..3] == ["nice", "-n", "19"]
            && w[3] == "make"));
    }
    // A longer burn is a longer step, and a plan over the budget says so.
    let r = dry_run(&kit, &["--gpus", "8", "--burn", "120"]);
    let (limits, total) = plan(&r.stdout);
    assert!(limits.contains(&("gpu-health".into(), 145)), "{limits:?}");
    assert!(
        r.stdout.contains(&format!("over it by {} s", total - 340)),
        "{}",
        r.all()
    );
}

#[test]
fn bad_gpu_check_arguments_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let kit = kit(dir.path());
    for (args, says) in [
        (&["--gpus", "0"][..], "--gpus '0' is not a GPU count"),
        (&["--budget", "five"][..], "--budget 'five' is not a number"),
        (
            &["--burn", "0"][..],
            "--burn '0' is not a number of seconds",
        ),
        (&["--only", "smoke,burn"][..], "--only 'burn' is not a step"),
        (
            &["--sdc-bytes", "4MB"][..],
            "--sdc-bytes '4MB' is not a size",
        ),
        (&["--budget"][..], "--budget needs a value"),
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
        ("1", &["gpu", "--sample-ms", "50"][..], "--sample-ms"),
        ("1", &["gpu", "--copy-bytes", "1K"][..], "--copy-bytes"),
        ("x", &["probe"][..], "BURNIN_CHECK_ARGS"),
    ] {
        let mut c = Command::new(bin());
        c.args(args).env("BURNIN_CHECK_ARGS", ranks);
        let r = run_bounded(c, Duration::from_secs(20));
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.all());
        assert!(r.stderr.contains(says), "{args:?}: {}", r.all());
    }
}

// ------------------------------------------------------------ real runs, stand-in machine

/// A machine for real runs of gpu-check without a GPU: a kit whose burnin is this
/// build's (burnin-train too, as a binary that loads: no libtorch is on the loader
/// path here), a python `torch` that answers preflight's questions at once (version
/// 2.11.0, one CUDA device) and can run nothing, and an nvidia-smi that lists one GPU
/// with 512 MiB free.
/// `nccl_tests`: the kit carries an nccl-tests "source" whose Makefile writes two
/// scripts in place of all_reduce_perf and all_gather_perf, and an nvcc is on PATH.
struct StandIn {
    _dir: tempfile::TempDir,
    kit: PathBuf,
    out: PathBuf,
}

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn stand_in(torch_imports: bool, nccl_tests: bool) -> StandIn {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kit = d.join("kit");
    std::fs::create_dir_all(kit.join("bin")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("launch/gpu-check"),
        kit.join("gpu-check"),
    )
    .unwrap();
    std::os::unix::fs::symlink(bin(), kit.join("bin/burnin")).unwrap();
    std::os::unix::fs::symlink(bin(), kit.join("bin/burnin-train")).unwrap();
    std::fs::write(
        kit.join("MANIFEST.txt"),
        "# burnin GPU kit (stand-in)\nminimum glibc: 2.17\n",
    )
    .unwrap();
    let sbin = d.join("stand-in/bin");
    let spy = d.join("stand-in/py");
    std::fs::write(
        kit.join("env.sh"),
        format!(
            "export PATH=\"{}:$PATH\"\nexport PYTHONPATH=\"{}\"\n",
            sbin.display(),
            spy.display()
        ),
    )
    .unwrap();
    write_exec(
        &sbin.join("nvidia-smi"),
        "#!/bin/sh\ncase \"$*\" in\n  -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)' ;;\n  *memory.free*) echo 512 ;;\n  *) echo 'stand-in nvidia-smi' ;;\nesac\n",
    );
    std::fs::create_dir_all(spy.join("torch")).unwrap();
    std::fs::write(
        spy.join("torch/__init__.py"),
        if torch_imports {
            "__version__ = \"2.11.0\"\n\nclass cuda:\n    @staticmethod\n    def device_count():\n        return 1\n\nclass version:\n    cuda = \"13.0\"\n"
        } else {
            "raise ImportError(\"stand-in: no torch here\")\n"
        },
    )
    .unwrap();
    if nccl_tests {
        write_exec(&sbin.join("nvcc"), "#!/bin/sh\necho stand-in nvcc\n");
        std::fs::create_dir_all(kit.join("nccl-tests/src")).unwrap();
        std::fs::write(
            kit.join("nccl-tests/src/Makefile"),
            "$(BUILDDIR)/%_perf:\n\tmkdir -p $(BUILDDIR)\n\tprintf '#!/bin/sh\\necho \"# stand-in %s_perf $$*\"\\n' $* >$@\n\tchmod +x $@\n",
        )
        .unwrap();
    }
    let out = d.join("out");
    StandIn {
        _dir: dir,
        kit,
        out,
    }
}

impl StandIn {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> (common::Run, Value) {
        let mut c = Command::new("bash");
        c.arg(self.kit.join("gpu-check"))
            .arg("--out")
            .arg(&self.out)
            .args(args)
            .env("BURNIN_NCCL_LIB", "/nonexistent/libnccl.so.2")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl", "self,vader,tcp")
            .env("OMPI_MCA_btl_tcp_if_include", "lo")
            .env("OMPI_MCA_oob_tcp_if_include", "lo");
        for (k, v) in env {
            c.env(k, v);
        }
        if env.iter().any(|(k, _)| *k == "TWIN_GPUS") {
            let counts = self.out.with_file_name("twin-counts");
            std::fs::create_dir_all(&counts).unwrap();
            twin().env(&mut c, &counts);
        }
        let r = run_bounded(c, Duration::from_secs(120));
        common::assert_no_panic(&r);
        assert!(!r.timed_out, "{}", r.all());
        let summary = std::fs::read(self.out.join("summary.json"))
            .unwrap_or_else(|e| panic!("no summary.json ({e}): {}", r.all()));
        (r, serde_json::from_slice(&summary).unwrap())
    }
}

fn step<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {summary}"))
}

/// `--budget 31` holds preflight's 30 s but not gpu-health's 85 s (one GPU: a 60 s
/// burn): gpu-health and every selected step after it are `not run (budget)`, which
/// is no failure: exit 0 when what ran passed, 1 when it did not.
#[test]
fn steps_the_budget_cannot_hold_are_not_run_and_do_not_fail_the_run() {
    let args = [
        "--budget",
        "31",
        "--only",
        "gpu-health,train-resume-parity,nccl-tests",
    ];
    let m = stand_in(true, false);
    let (r, summary) = m.run(&args, &[]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_eq!(step(&summary, "preflight")["status"], "pass", "{summary}");
    assert_eq!(step(&summary, "nccl-tests-build")["status"], "skip");
    for s in ["gpu-health", "train-resume-parity", "nccl-tests"] {
        assert_eq!(
            step(&summary, s)["status"],
            "not run (budget)",
            "{s}: {summary}"
        );
    }
    for s in ["evidence", "smoke", "chaos"] {
        assert_eq!(step(&summary, s)["note"], "not selected (--only)", "{s}");
    }
    let first = step(&summary, "gpu-health")["note"].as_str().unwrap();
    assert!(
        first.starts_with("needs 85 s, ") && first.ends_with(" s of the 31 s budget left"),
        "{first}"
    );
    assert_eq!(
        step(&summary, "nccl-tests")["note"],
        "the budget stopped the run at gpu-health"
    );
    assert_eq!(summary["outcome"], "pass", "{summary}");
    assert_eq!(summary["budget"]["seconds"], 31);
    assert_eq!(summary["budget"]["plan_seconds"], 30 + 85 + 50 + 20);
    assert_eq!(summary["budget"]["not_run"].as_array().unwrap().len(), 3);
    let md = std::fs::read_to_string(m.out.join("summary.md")).unwrap();
    assert!(
        md.contains("**PASS**")
            && md.contains("(3 step(s) not run: the budget)")
            && md.contains(
                "| train-resume-parity | not run (budget) | 0.0 | the budget stopped the run at gpu-health |"
            ),
        "{md}"
    );
    assert!(
        r.stdout
            .contains("[gpu-health] not run (budget): needs 85 s"),
        "{}",
        r.all()
    );
    assert!(m.out.join("results.tar.gz").is_file());

    // A step that ran and failed still fails the run.
    let m = stand_in(false, false);
    let (r, summary) = m.run(&args, &[]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(step(&summary, "preflight")["status"], "fail", "{summary}");
    assert!(step(&summary, "preflight")["note"]
        .as_str()
        .unwrap()
        .contains("python3 cannot import torch"));
    assert_eq!(step(&summary, "gpu-health")["status"], "not run (budget)");
    assert_eq!(summary["outcome"], "fail");
}

/// `--only gpu-health,nccl-tests` on one twin GPU: `burnin gpu` runs with the copies
/// sized to the stand-in's 512 MiB free (64 MiB) and the burn asked for, and the
/// summary carries its numbers and verdicts; the nccl-tests build runs in the
/// background and the nccl-tests step waits for it and runs what it built.
#[test]
fn only_gpu_health_and_nccl_tests_run_burnin_gpu_and_the_background_build() {
    let m = stand_in(true, true);
    let (r, summary) = m.run(
        &["--only", "gpu-health,nccl-tests", "--burn", "2"],
        &[("TWIN_GPUS", "1")],
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    for (s, status) in [
        ("preflight", "pass"),
        ("gpu-health", "pass"),
        ("nccl-tests-build", "pass"),
        ("nccl-tests", "pass"),
        ("smoke", "skip"),
        ("chaos", "skip"),
    ] {
        assert_eq!(step(&summary, s)["status"], status, "{s}: {summary}");
    }
    assert_eq!(step(&summary, "smoke")["note"], "not selected (--only)");
    assert!(step(&summary, "nccl-tests-build")["note"]
        .as_str()
        .unwrap()
        .starts_with("built in the background"));
    // preflight 30 + gpu-health (2 + 25) + nccl-tests 20
    assert_eq!(summary["budget"]["plan_seconds"], 77, "{summary}");
    let h = &summary["gpu_health"];
    assert!(
        h["burnin_verdict"].as_str().unwrap().starts_with("PASS"),
        "{h}"
    );
    assert_eq!(h["burn_s"], 2.0);
    assert_eq!(h["copy_bytes"], 64 << 20);
    let g = &h["gpus"][0];
    assert_eq!(g["name"], "burnin-twin GPU 0", "{g}");
    for k in [
        "h2d_gbps",
        "d2h_gbps",
        "d2d_gbps",
        "memory_gbps",
        "burn_tflops",
    ] {
        assert!(g[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {g}");
    }
    assert_eq!(g["copies_verified"], true);
    assert_eq!(g["burn_wrong"], 0);
    assert!(g["throttle_samples"].as_u64().unwrap() > 0, "{g}");
    assert_eq!(g["pcie"]["gen"], 5);
    assert_eq!(h["throttling"]["verdict"], "ok");
    assert_eq!(h["xids"]["verdict"], "none (listened on every GPU)");
    assert!(
        h["criteria"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["criterion"]
                .as_str()
                .unwrap()
                .starts_with("share of the burn")
                && c["verdict"] == "PASS"),
        "{h}"
    );
    let md = std::fs::read_to_string(m.out.join("summary.md")).unwrap();
    assert!(
        md.contains("GPU health (burnin gpu, 2 s burn): PASS")
            && md
                .lines()
                .any(|l| l.contains(" GPU 0 | ") && l.contains("Gen5 x16")),
        "{md}"
    );
    assert!(
        md.contains("Throttling (limit 0.05 of the burn): ok"),
        "{md}"
    );
    // The stand-in binaries the background build made, run by the nccl-tests step.
    assert!(
        r.stdout.contains("# stand-in all_gather_perf -b"),
        "{}",
        r.all()
    );
}
