//! The bad-input corpus (tests/bad_inputs/cases.toml): every case gives its exit code
//! and a one-line error naming the flag, file or field — no panic, no hang, no
//! backtrace.
mod common;
use common::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

#[derive(Deserialize)]
struct Corpus {
    case: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default = "two")]
    np: usize,
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    #[serde(default)]
    setup: Option<String>,
    code: i32,
    expect: String,
}

fn two() -> usize {
    2
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn every_bad_input_gets_its_exit_code_and_message() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/bad_inputs/cases.toml"
    ))
    .unwrap();
    let corpus: Corpus = toml::from_str(&text).unwrap();
    assert!(
        corpus.case.len() >= 40,
        "the corpus has {} cases",
        corpus.case.len()
    );
    // Two cases at a time (each is a short mpirun that mostly waits): a worker takes
    // the next case until none is left; the failures are gathered and sorted.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(usize, Option<Option<String>>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(case) = corpus.case.get(i) else {
                            break;
                        };
                        mine.push((i, run_case(case)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let ran = results.iter().filter(|(_, r)| r.is_some()).count();
    let mut failures: Vec<(usize, String)> = results
        .into_iter()
        .filter_map(|(i, r)| r.flatten().map(|f| (i, f)))
        .collect();
    failures.sort();
    let failures: Vec<String> = failures.into_iter().map(|(_, f)| f).collect();
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Run one case: None when it cannot run here (said by [`skipped`]), else its
/// failure, if any.
fn run_case(case: &Case) -> Option<Option<String>> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    for (name, content) in &case.files {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    let mut mounted = false;
    if case.setup.as_deref() == Some("tmpfs") {
        if !is_root() {
            skipped(&format!("bad input {}: needs root for a tmpfs", case.name));
            return None;
        }
        let full = dir.path().join("full");
        std::fs::create_dir(&full).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "size=64k",
                "tmpfs",
                full.to_str().unwrap(),
            ])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            skipped(&format!(
                "bad input {}: cannot mount a tmpfs here",
                case.name
            ));
            return None;
        }
        mounted = true;
    }
    let args: Vec<String> = case.args.iter().map(|a| a.replace("{dir}", &d)).collect();
    let mut c = if case.np == 0 {
        Command::new(bin())
    } else {
        let mut c = mpirun_cmd(case.np);
        c.arg(bin());
        c
    };
    c.args(&args).envs(&case.env);
    let r = run_bounded(c, Duration::from_secs(90));
    if mounted {
        let _ = Command::new("umount").arg(dir.path().join("full")).status();
    }
    let all = r.all();
    let want = case.expect.replace("{dir}", &d);
    let mut problems = Vec::new();
    if r.timed_out {
        problems.push("timed out".to_string());
    }
    if r.code != Some(case.code) {
        problems.push(format!("exit {:?}, want {}", r.code, case.code));
    }
    if !all.contains(&want) {
        problems.push(format!("no '{want}' in the output"));
    }
    if all.contains("panicked") || all.contains("RUST_BACKTRACE") {
        problems.push("panicked".into());
    }
    Some((!problems.is_empty()).then(|| format!("{}: {}\n{all}", case.name, problems.join("; "))))
}
