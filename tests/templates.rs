//! The cluster templates, run as a cluster would run them, with stand-ins for the
//! scheduler's commands that record what they were given.
mod common;

use common::run_bounded;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A stand-in program: appends its name, its arguments (each in brackets) and the
/// NCCL_IB_HCA it was given as one line to `log`, then exits 0.
fn recorder(path: &Path, log: &Path) {
    let script = format!(
        r#"#!/bin/sh
{{
  printf '%s' "$(basename "$0")"
  for a in "$@"; do printf ' [%s]' "$a"; done
  printf ' NCCL_IB_HCA=%s\n' "${{NCCL_IB_HCA-}}"
}} >>'{}'
"#,
        log.display()
    );
    std::fs::write(path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_slurm_template_passes_cpus_per_task_to_srun_keeps_comma_lists_and_ends_with_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.path().join("calls.log");
    recorder(&bin.join("srun"), &log);
    recorder(&bin.join("burnin"), &log);
    let sbatch = Path::new(env!("CARGO_MANIFEST_DIR")).join("launch/slurm.sbatch");
    let mut c = Command::new("bash");
    c.arg(&sbatch)
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("BURNIN", bin.join("burnin"))
        .env("SLURM_SUBMIT_DIR", dir.path())
        .env("SLURM_JOB_ID", "42")
        .env("SLURM_JOB_NUM_NODES", "2")
        .env("SLURM_GPUS_PER_NODE", "h200:8")
        .env("SLURM_CPUS_PER_TASK", "12")
        // what a user exports before `sbatch --export=ALL`
        .env("NCCL_IB_HCA", "mlx5_0,mlx5_1");
    let r = run_bounded(c, Duration::from_secs(30));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let calls = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    // evidence through srun, one task per node, then burnin run with an srun prefix
    assert!(
        lines[0].starts_with("srun [--mpi=pmix] [--ntasks-per-node=1] [--cpus-per-task=12]"),
        "{calls}"
    );
    assert!(
        lines[0].contains("[evidence]") && lines[0].contains("NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "{calls}"
    );
    let run = lines
        .iter()
        .find(|l| l.starts_with("burnin [run]"))
        .expect("burnin run");
    assert!(
        run.contains("[--card]") && run.contains("cards/hgx-h200-ib.toml]"),
        "{run}"
    );
    let launch = run
        .split("[--launch] [")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap();
    for want in [
        "srun",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--cpus-per-task=12",
        "--gpu-bind=none",
    ] {
        assert!(launch.split(' ').any(|w| w == want), "{want} in {launch}");
    }
    assert!(
        run.contains("NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "the comma list reaches burnin: {run}"
    );
    // every srun in the script passes --cpus-per-task; no --export list with a value
    let text = std::fs::read_to_string(&sbatch).unwrap();
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
}
