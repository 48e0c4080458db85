//! The cluster templates, run as a cluster would run them, with stand-ins for the
//! scheduler's commands that record what they were given.
mod common;

use common::run_bounded;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A stand-in program: appends its name, its arguments (each in brackets) and the
/// NCCL_IB_HCA and SLURM_PMIX_FENCE it was given as one line to `log`, then exits 0.
fn recorder(path: &Path, log: &Path) {
    let script = format!(
        r#"#!/bin/sh
{{
  printf '%s' "$(basename "$0")"
  for a in "$@"; do printf ' [%s]' "$a"; done
  printf ' NCCL_IB_HCA=%s SLURM_PMIX_FENCE=%s\n' "${{NCCL_IB_HCA-}}" "${{SLURM_PMIX_FENCE-}}"
}} >>'{}'
"#,
        log.display()
    );
    script_at(path, &script);
}

fn script_at(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// launch/slurm.sbatch run as Slurm runs a batch script, in a folder with stand-ins
/// for srun and burnin (recorders) and for squeue and scontrol (which print
/// `squeue_out` / `scontrol_out`), with the job's environment `env`.
struct Sbatch {
    dir: tempfile::TempDir,
    run: common::Run,
    calls: Vec<String>,
}

impl Sbatch {
    fn bin(&self) -> std::path::PathBuf {
        self.dir.path().join("bin")
    }

    /// The recorded srun lines.
    fn sruns(&self) -> Vec<&String> {
        self.calls
            .iter()
            .filter(|l| l.starts_with("srun "))
            .collect()
    }

    /// The `--launch` prefix burnin run was given, split as burnin splits it.
    fn launch(&self) -> Vec<String> {
        let run = self
            .calls
            .iter()
            .find(|l| l.starts_with("burnin [run]"))
            .unwrap_or_else(|| panic!("no burnin run: {:?}\n{}", self.calls, self.run.all()));
        let text = run
            .split("[--launch] [")
            .nth(1)
            .unwrap()
            .split("] [--out]")
            .next()
            .unwrap();
        burnin::card::split_launch(text).unwrap()
    }
}

fn sbatch(env: &[(&str, &str)], squeue_out: &str, scontrol_out: &str) -> Sbatch {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.path().join("calls.log");
    recorder(&bin.join("srun"), &log);
    recorder(&bin.join("burnin"), &log);
    script_at(
        &bin.join("squeue"),
        &format!("#!/bin/sh\nprintf '%s\\n' '{squeue_out}'\n"),
    );
    script_at(
        &bin.join("scontrol"),
        &format!("#!/bin/sh\nprintf '%s\\n' '{scontrol_out}'\n"),
    );
    // the release's layout: cards/ beside the submit folder's bin/
    let cards = dir.path().join("cards");
    std::fs::create_dir_all(&cards).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(
        root.join("cards/hgx-h200-ib.toml"),
        cards.join("hgx-h200-ib.toml"),
    )
    .unwrap();
    let mut c = Command::new("bash");
    c.arg(root.join("launch/slurm.sbatch"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("BURNIN", bin.join("burnin"))
        .env("SLURM_SUBMIT_DIR", dir.path())
        .env("SLURM_JOB_ID", "42")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("SLURM_NTASKS_PER_NODE", "8")
        .env("SLURM_TASKS_PER_NODE", "8(x2)");
    for (k, v) in env {
        c.env(k, v);
    }
    let run = run_bounded(c, Duration::from_secs(30));
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    Sbatch { dir, run, calls }
}

fn has(words: &[String], want: &str) -> bool {
    words.iter().any(|w| w == want)
}

#[test]
fn the_slurm_template_passes_cpus_per_task_to_srun_keeps_comma_lists_and_ends_with_a_verdict() {
    let s = sbatch(
        &[
            ("SLURM_GPUS_PER_NODE", "h200:8"),
            ("SLURM_CPUS_PER_TASK", "12"),
            // what a user exports before `sbatch --export=ALL`
            ("NCCL_IB_HCA", "mlx5_0,mlx5_1"),
        ],
        "5:30:00",
        "",
    );
    assert_eq!(s.run.code, Some(0), "{}", s.run.all());
    assert!(
        s.run
            .stdout
            .contains("8 GPU(s) per node (SLURM_GPUS_PER_NODE=h200:8)"),
        "{}",
        s.run.all()
    );
    assert!(!s.run.all().contains("warning"), "{}", s.run.all());
    // evidence through srun, one task on each of the 2 nodes, then burnin run
    let ev = &s.calls[0];
    assert!(
        ev.starts_with(
            "srun [--mpi=pmix] [--nodes=2] [--ntasks=2] [--ntasks-per-node=1] [--cpus-per-task=12]"
        ),
        "{:?}",
        s.calls
    );
    assert!(
        ev.contains("[evidence]") && ev.contains("NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "{ev}"
    );
    assert!(ev.contains("SLURM_PMIX_FENCE=ring"), "{ev}");
    let run = s
        .calls
        .iter()
        .find(|l| l.starts_with("burnin [run]"))
        .expect("burnin run");
    assert!(
        run.contains("[--card]") && run.contains("cards/hgx-h200-ib.toml]"),
        "{run}"
    );
    let launch = s.launch();
    assert_eq!(launch[0], "srun");
    for want in [
        "--mpi=pmix",
        "--nodes=2",
        "--ntasks=16",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--cpus-per-task=12",
        "--gpu-bind=none",
        "--kill-on-bad-exit=1",
    ] {
        assert!(has(&launch, want), "{want} in {launch:?}");
    }
    // no rank binary of its own without a container: burnin run's own path follows
    assert!(!has(&launch, "sh"), "{launch:?}");
    assert!(
        run.contains("NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "the comma list reaches burnin: {run}"
    );
    let sbatch = Path::new(env!("CARGO_MANIFEST_DIR")).join("launch/slurm.sbatch");
    let text = std::fs::read_to_string(&sbatch).unwrap();
    // every srun in the script passes --cpus-per-task; no --export list with a value
    for l in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if l.contains("srun ") {
            assert!(l.contains("--cpus-per-task="), "{l}");
        }
    }
    // the command lines and the sbatch examples in the header
    for l in text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') || l.contains("sbatch "))
    {
        if let Some(rest) = l.split("--export=").nth(1) {
            let value = rest.split_whitespace().next().unwrap_or("");
            assert!(value == "ALL" || value == "NONE", "--export={value}: {l}");
        }
    }
    // whole nodes with all their memory, no GPU count assumed, and a time limit that
    // covers the default card's bounds (19,500 s: see the next test)
    for want in [
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
        "#SBATCH --time=05:30:00",
    ] {
        assert!(text.lines().any(|l| l == want), "{want}");
    }
    assert!(!text.contains("#SBATCH --gpus"), "no GPU count is assumed");
    assert!(!text.contains("#SBATCH --gres"), "no GPU count is assumed");
}

#[test]
fn the_slurm_template_warns_when_the_time_limit_is_shorter_than_the_cards_bounds() {
    // cards/hgx-h200-ib.toml: probe 300 + gpu 900 (+ 300 for the counters after) +
    // sweep 3600 + train 3 x 3600 (run, part, resume) + chaos 3600 = 19,500 s
    let s = sbatch(&[("SLURM_GPUS_PER_NODE", "8")], "1:00:00", "");
    assert_eq!(s.run.code, Some(0), "{}", s.run.all());
    let warn: Vec<&str> = s
        .run
        .stdout
        .lines()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(warn.len(), 1, "{}", s.run.all());
    assert!(
        warn[0].contains("time limit 1:00:00 is shorter than the card's phase bounds 5:25:00")
            && warn[0].contains("--time=5:30:00"),
        "{}",
        warn[0]
    );
    // a day and more, as squeue writes it: no warning
    let s = sbatch(&[("SLURM_GPUS_PER_NODE", "8")], "1-00:00:00", "");
    assert!(!s.run.stdout.contains("warning"), "{}", s.run.all());
}

#[test]
fn the_slurm_template_takes_the_gpu_count_from_gres_allocations() {
    // --gres=gpu:4: no SLURM_GPUS_PER_NODE; the batch step's GPUs say 4
    let s = sbatch(
        &[("SLURM_GPUS_ON_NODE", "4"), ("SLURM_JOB_GPUS", "0,1,2,3")],
        "",
        "",
    );
    assert_eq!(s.run.code, Some(0), "{}", s.run.all());
    assert!(
        s.run
            .stdout
            .contains("4 GPU(s) per node (SLURM_GPUS_ON_NODE)"),
        "{}",
        s.run.all()
    );
    let launch = s.launch();
    for want in ["--ntasks=8", "--ntasks-per-node=4", "--gpus-per-node=4"] {
        assert!(has(&launch, want), "{want} in {launch:?}");
    }
    // only the GPU ids
    let s = sbatch(&[("SLURM_JOB_GPUS", "0,1,2,3,4,5")], "", "");
    assert!(
        s.run.stdout.contains("6 GPU(s) per node"),
        "{}",
        s.run.all()
    );
    assert!(has(&s.launch(), "--gpus-per-node=6"), "{:?}", s.launch());
    // nothing in the environment: the job's TresPerNode, as scontrol shows it
    let s = sbatch(
        &[],
        "",
        "JobId=42 JobName=burnin TresPerNode=gres:gpu:h100:2 NumNodes=2",
    );
    assert!(
        s.run
            .stdout
            .contains("2 GPU(s) per node (TresPerNode=gres:gpu:h100:2)"),
        "{}",
        s.run.all()
    );
    assert!(has(&s.launch(), "--gpus-per-node=2"), "{:?}", s.launch());
}

#[test]
fn the_slurm_template_says_when_it_finds_no_gpu_count_and_runs_the_tasks_per_node() {
    let s = sbatch(
        &[
            ("SLURM_NTASKS_PER_NODE", ""),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ],
        "",
        "JobId=42 JobName=burnin NumNodes=2",
    );
    assert_eq!(s.run.code, Some(0), "{}", s.run.all());
    let said: Vec<&str> = s
        .run
        .stdout
        .lines()
        .filter(|l| l.contains("no GPU count"))
        .collect();
    assert_eq!(said.len(), 1, "{}", s.run.all());
    assert!(
        said[0].contains("2 task(s) per node, without GPU flags"),
        "{}",
        said[0]
    );
    let launch = s.launch();
    assert!(has(&launch, "--ntasks=4") && has(&launch, "--ntasks-per-node=2"));
    for srun in s.sruns() {
        assert!(!srun.contains("--gpu"), "no GPU flag: {srun}");
    }
    assert!(!launch.iter().any(|w| w.contains("--gpu")), "{launch:?}");
}

#[test]
fn the_slurm_template_puts_the_container_on_every_srun_and_runs_the_images_burnin() {
    // the release unpacked in a shared folder, mounted at its own path
    let base = tempfile::tempdir().unwrap();
    let card = shared_release(base.path());
    let shared = base.path().display().to_string();
    let out = format!("{shared}/results/run1");
    let mounts = format!("{shared}:{shared},/data:/data:ro");
    let s = sbatch(
        &[
            ("SLURM_GPUS_PER_NODE", "8"),
            ("CONTAINER_IMAGE", "nvcr.io#nvidia/burnin:0.1.0"),
            ("CONTAINER_MOUNTS", &mounts),
            ("OUT", &out),
            ("CARD", &card),
        ],
        "",
        "",
    );
    assert_eq!(s.run.code, Some(0), "{}", s.run.all());
    let image = "[--container-image=nvcr.io#nvidia/burnin:0.1.0]";
    let mount = format!("[--container-mounts={mounts}]");
    let sruns = s.sruns();
    assert_eq!(sruns.len(), 1, "evidence is the script's only own srun");
    // the evidence step: in the image, its burnin
    let ev = sruns[0];
    assert!(ev.contains(image) && ev.contains(&mount), "{ev}");
    assert!(
        ev.contains("[sh] [-c] [exec /opt/burnin/bin/burnin \"$@\"]") && ev.contains("[evidence]"),
        "{ev}"
    );
    // every phase: the prefix carries the image, the mounts and the rank's binary
    let launch = s.launch();
    assert!(has(&launch, &image[1..image.len() - 1]), "{launch:?}");
    assert!(has(&launch, &mount[1..mount.len() - 1]), "{launch:?}");
    let n = launch.len();
    assert_eq!(
        launch[n - 3..],
        ["sh", "-c", "exec /opt/burnin/bin/burnin \"$@\""],
        "{launch:?}"
    );
    // burnin run stays on the host: the script starts its own burnin for it
    assert!(s.calls.iter().any(|l| l.starts_with("burnin [run]")));

    // What a rank runs: the prefix's words after srun's options, then what burnin run
    // appends (its own path, the phase): BURNIN_RANK's binary gets the phase.
    let rank_log = s.dir.path().join("rank.log");
    let rank = s.bin().join("rank-burnin");
    recorder(&rank, &rank_log);
    let s2 = sbatch(
        &[
            ("SLURM_GPUS_PER_NODE", "8"),
            ("CONTAINER_IMAGE", "burnin.sqsh"),
            ("CONTAINER_MOUNTS", &mounts),
            ("OUT", &out),
            ("CARD", &card),
            ("BURNIN_RANK", rank.to_str().unwrap()),
        ],
        "",
        "",
    );
    assert_eq!(s2.run.code, Some(0), "{}", s2.run.all());
    let launch = s2.launch();
    let sh = launch.iter().position(|w| w == "sh").unwrap();
    let mut c = Command::new(&launch[sh]);
    c.args(&launch[sh + 1..])
        .arg("/host/bin/burnin")
        .args(["probe", "--json", "x"]);
    let r = run_bounded(c, Duration::from_secs(10));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let ran = std::fs::read_to_string(&rank_log).unwrap();
    assert!(
        ran.starts_with("rank-burnin [probe] [--json] [x]"),
        "the rank's burnin, not the host's: {ran}"
    );
}

/// cards/hgx-h200-ib.toml and its topology under `dir` as the release lays them out;
/// the card's path.
fn shared_release(dir: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["cards/hgx-h200-ib.toml", "topologies/hgx-h200-ib.toml"] {
        let to = dir.join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(f), to).unwrap();
    }
    dir.join("cards/hgx-h200-ib.toml").display().to_string()
}

#[test]
fn the_slurm_template_refuses_bad_container_and_card_settings_in_one_line() {
    // results in a mounted folder, the card's topology in one that is not
    let base = tempfile::tempdir().unwrap();
    let results = tempfile::tempdir().unwrap();
    let card = shared_release(base.path());
    let topo = base.path().join("topologies/hgx-h200-ib.toml");
    let (r, out) = (results.path().display(), results.path().join("run"));
    let only_results = format!("{r}:{r}");
    let out = out.display().to_string();
    let topo_line = format!("CONTAINER_MOUNTS: {} is not mounted", topo.display());
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                ("CONTAINER_IMAGE", "img"),
                ("CONTAINER_MOUNTS", &only_results),
                ("OUT", &out),
                ("CARD", &card),
            ],
            &topo_line,
        ),
        (
            &[("CONTAINER_MOUNTS", "/shared:/shared")],
            "CONTAINER_MOUNTS is set but CONTAINER_IMAGE is not",
        ),
        (
            &[
                ("CONTAINER_IMAGE", "img"),
                ("CONTAINER_MOUNTS", "/data:/data"),
            ],
            "/results/",
        ),
        (
            &[("CARD", "/nonexistent/card.toml")],
            "CARD: /nonexistent/card.toml is not a file",
        ),
        (
            &[("SLURM_JOB_NUM_NODES", "")],
            "SLURM_JOB_NUM_NODES is not set",
        ),
    ];
    for (env, want) in cases {
        let mut e = vec![("SLURM_GPUS_PER_NODE", "8")];
        e.extend_from_slice(env);
        let s = sbatch(&e, "", "");
        assert_eq!(s.run.code, Some(2), "{want}: {}", s.run.all());
        let err: Vec<&str> = s.run.stderr.lines().collect();
        assert_eq!(err.len(), 1, "{want}: {}", s.run.all());
        assert!(err[0].contains(want), "{want}: {}", err[0]);
        assert!(s.sruns().is_empty(), "nothing ran: {:?}", s.calls);
    }
}
