//! `burnin smoke` and `burnin evidence` through the real binary under the real mpirun.
//! This machine has no GPU: smoke runs its CPU checks (the GPU ones are skipped with
//! the driver's reason) and evidence records nvidia-smi, dcgmi and ibstat as not
//! installed.
mod common;

use common::{assert_no_panic, mpirun, run_bounded};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

fn check_line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no line for {check}:\n{stdout}"))
}

#[test]
fn smoke_on_four_cpu_ranks_passes_with_one_line_per_check() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("smoke.json");
    let ckpt = dir.path().join("ckpt");
    let r = mpirun(
        4,
        &[
            "smoke",
            "--ckpt-dir",
            ckpt.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    for check in burnin::smoke::CHECKS {
        let line = check_line(&r.stdout, check);
        assert!(!line.starts_with("FAIL"), "{line}\n{}", r.all());
    }
    for check in ["all_reduce", "comm-init", "ckpt-dir"] {
        let line = check_line(&r.stdout, check);
        assert!(line.starts_with("PASS") && line.contains("4/4"), "{line}");
    }
    assert!(check_line(&r.stdout, "all_reduce").contains("every element correct"));
    assert!(
        check_line(&r.stdout, "gpu").starts_with("SKIP"),
        "{}",
        r.stdout
    );
    assert!(
        check_line(&r.stdout, "matmul").starts_with("PASS"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("# verdict: PASS"), "{}", r.stdout);
    // Printed once (rank 0), not four times.
    assert_eq!(
        r.stdout.matches("# burnin smoke:").count(),
        1,
        "{}",
        r.stdout
    );
    // The test files were removed again.
    assert_eq!(std::fs::read_dir(&ckpt).unwrap().count(), 0);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["outcome"], "pass");
    assert_eq!(report["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(
        report["lines"].as_array().unwrap().len(),
        burnin::smoke::CHECKS.len()
    );
}

#[test]
fn smoke_with_an_unwritable_checkpoint_dir_fails_with_the_reason() {
    let r = mpirun(
        2,
        &["smoke", "--ckpt-dir", "/proc/burnin-smoke-nope/ckpt"],
        LIMIT,
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_no_panic(&r);
    let line = check_line(&r.stdout, "ckpt-dir");
    assert!(line.starts_with("FAIL") && line.contains("0/2"), "{line}");
    assert!(
        line.contains("cannot create directory /proc/burnin-smoke-nope/ckpt")
            && line.contains("rank 0 (")
            && line.contains("rank 1 ("),
        "{line}"
    );
    // The reason the OS gave is there too.
    assert!(line.contains("(os error"), "{line}");
    // The other checks are unaffected.
    assert!(
        check_line(&r.stdout, "all_reduce").starts_with("PASS"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("# verdict: FAIL"), "{}", r.stdout);
}

#[test]
fn smoke_without_mpirun_is_one_rank() {
    let mut c = std::process::Command::new(common::bin());
    c.args(["smoke", "--backend", "mpi"]);
    let r = run_bounded(c, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        check_line(&r.stdout, "gpu").contains("--backend mpi"),
        "{}",
        r.stdout
    );
}

/// Whether `name` can be run here (the same search burnin does).
fn installed(name: &str) -> bool {
    let dirs = burnin::evidence::search_dirs(std::env::var_os("PATH").as_deref());
    burnin::evidence::find_program(name, &dirs).is_some()
}

#[test]
fn evidence_writes_files_for_tools_present_and_notes_the_missing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let r = mpirun(
        2,
        &["evidence", "--out", dir.path().to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    // Two ranks on one host: one folder, written once.
    let hosts: Vec<_> = std::fs::read_dir(dir.path().join("evidence"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let host_dir = hosts[0].path();
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(host_dir.join("index.json")).unwrap())
            .unwrap();
    let entries = index["entries"].as_array().unwrap();
    let entry = |tool: &str| -> &Value {
        entries
            .iter()
            .find(|e| e["tool"] == tool)
            .unwrap_or_else(|| panic!("no {tool} in {index:#}"))
    };
    // Present on this machine (launch/setup installs them): ran, exit 0, a file.
    for (tool, file) in [
        ("ip -br link", "ip-br-link.txt"),
        ("lscpu", "lscpu.txt"),
        ("uname -a", "uname-a.txt"),
        ("ompi_info --version", "ompi_info-version.txt"),
    ] {
        let e = entry(tool);
        assert_eq!(e["status"], "ran", "{e}");
        assert_eq!(e["exit_code"], 0, "{e}");
        assert_eq!(e["file"], file, "{e}");
        let text = std::fs::read_to_string(host_dir.join(file)).unwrap();
        assert!(!text.trim().is_empty(), "{tool} wrote nothing");
    }
    assert!(std::fs::read_to_string(host_dir.join("uname-a.txt"))
        .unwrap()
        .contains("Linux"));
    // Absent here: recorded, not fatal.
    for (tool, program) in [
        ("nvidia-smi -L", "nvidia-smi"),
        ("nvidia-smi -q", "nvidia-smi"),
        ("dcgmi discovery --list", "dcgmi"),
        ("dcgmi diag --run 1 -j", "dcgmi"),
        ("ibstat", "ibstat"),
    ] {
        if installed(program) {
            eprintln!("{program} is installed here: not checking its absence");
            continue;
        }
        let e = entry(tool);
        assert_eq!(e["status"], "not_installed", "{e}");
        assert_eq!(e["file"], Value::Null, "{e}");
        assert!(r.stdout.contains(tool) && r.stdout.contains("not installed"));
    }
    assert!(host_dir.join("environment.txt").is_file());
    // The table is printed once.
    assert_eq!(
        r.stdout.matches("# evidence of 1 host(s)").count(),
        1,
        "{}",
        r.stdout
    );
}

#[test]
fn evidence_into_an_unwritable_folder_is_one_error_line() {
    let r = mpirun(
        2,
        &["evidence", "--out", "/proc/burnin-evidence-nope"],
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_no_panic(&r);
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("Error"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.all());
    assert!(
        errors[0].contains("/proc/burnin-evidence-nope"),
        "{}",
        errors[0]
    );
    assert!(!Path::new("/proc/burnin-evidence-nope").exists());
}
