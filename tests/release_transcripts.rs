//! The release checks' transcripts cannot go stale. `launch/release-check` runs the
//! checks that need root, chroots and minutes (the tarball on Debian 11/12/13 roots,
//! MPICH, the container images) and commits their transcripts under `results/`; each
//! transcript's first line names the commit it tested. This test fails when a file
//! that a transcript covers differs now from that commit (its content or its mode): the
//! transcript no longer shows what the files now do, and `launch/release-check` must
//! be run again. A change undone later leaves the files as tested, and the transcript
//! holds. A transcript
//! made on a tree with uncommitted changes names no commit it tested, and fails too.
//!
//! The roads' tests (the Slurm template under a real slurmctld, mpirun over ssh
//! between simulated nodes, one node without ssh) also run in CI on every change; their
//! transcript is kept so that results/ shows each road with the commit it ran on. The
//! MPIJob manifest is checked by launch/lint on every change, gpu-check's plan by
//! tests/gpu_check.rs.
use std::path::Path;
use std::process::Command;

/// Each committed transcript and the files whose change makes it stale.
const COVERED: &[(&str, &[&str])] = &[
    (
        "results/package/latest.txt",
        &[
            "launch/package",
            "launch/package-test",
            "launch/mpi-bundle",
            "launch/release",
            "launch/debian-root",
            "Cargo.lock",
        ],
    ),
    (
        "results/roads/latest.txt",
        &[
            "launch/slurm.sbatch",
            "launch/mpirun-hostfile.sh",
            "launch/sim-ssh",
            "launch/sim-slurm",
            "launch/sim-cluster",
        ],
    ),
    (
        "results/image/cu130.txt",
        &["launch/Containerfile", "launch/image", "Cargo.lock"],
    ),
    (
        "results/image/cu126-notorch.txt",
        &["launch/Containerfile", "launch/image", "Cargo.lock"],
    ),
    (
        "results/image/across-nodes-cu130.txt",
        &[
            "launch/Containerfile",
            "launch/image",
            "launch/sim-ssh",
            "launch/k8s-mpijob.yaml",
            "Cargo.lock",
        ],
    ),
    (
        "results/package/gpu-kit.txt",
        &["launch/gpu-kit", "launch/mpi-bundle", "Cargo.lock"],
    ),
];

fn git(args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit a transcript's first line names: the hex word after "commit" or
/// "git rev" (7 to 40 digits).
fn tested_commit(first_line: &str) -> Option<String> {
    let words: Vec<&str> = first_line.split_whitespace().collect();
    words.windows(2).find_map(|w| {
        let marker = w[0].eq_ignore_ascii_case("commit") || w[0].eq_ignore_ascii_case("rev");
        let sha = w[1].trim_end_matches([',', ';', ':', ')']);
        let sha = sha.split('+').next().unwrap_or(sha);
        (marker && (7..=40).contains(&sha.len()) && sha.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| sha.to_string())
    })
}

#[test]
fn the_tested_commit_is_read_from_a_transcripts_first_line() {
    assert_eq!(
        tested_commit("# launch/package-test of burnin commit 0123abcd, 2026-12-03"),
        Some("0123abcd".into())
    );
    assert_eq!(
        tested_commit("# launch/mpich-check, 2026-12-02T01:51:31Z, burnin git rev a5c5751"),
        Some("a5c5751".into())
    );
    assert_eq!(
        tested_commit("# image of commit 89abcdef+uncommitted:"),
        Some("89abcdef".into())
    );
    assert_eq!(tested_commit("# launch/soak 600 — no commit here"), None);
}

#[test]
fn no_release_transcript_is_older_than_the_files_it_covers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A clone without history (a tarball of the tree) cannot tell: say so and check
    // what can be checked (the transcripts exist and name a commit).
    let history = git(&["rev-parse", "--verify", "HEAD"]).is_ok()
        && git(&["rev-parse", "--is-shallow-repository"]).as_deref() == Ok("false");
    let mut stale = Vec::new();
    for (transcript, covers) in COVERED {
        let text = std::fs::read_to_string(root.join(transcript))
            .unwrap_or_else(|e| panic!("{transcript}: {e} (run launch/release-check)"));
        // The header: the leading comment lines (a transcript may name the commit on
        // its second line, after the command).
        let header: Vec<&str> = text
            .lines()
            .take(3)
            .take_while(|l| l.starts_with('#'))
            .collect();
        let sha = header
            .iter()
            .find_map(|l| tested_commit(l))
            .unwrap_or_else(|| {
                panic!("{transcript}: its header names no tested commit: {header:?}")
            });
        assert!(
            !header.iter().any(|l| l.contains("uncommitted")),
            "{transcript}: made on a tree with uncommitted changes, so no commit shows what it tested: {header:?}"
        );
        assert!(
            text.lines().any(|l| l.contains("PASS")),
            "{transcript}: the transcript does not end in a PASS"
        );
        if !history {
            eprintln!("{transcript}: no git history here; tested commit {sha} not compared");
            continue;
        }
        git(&["cat-file", "-e", &format!("{sha}^{{commit}}")]).unwrap_or_else(|e| {
            panic!("{transcript}: tested commit {sha} is not in this history: {e}")
        });
        let range = format!("{sha}..HEAD");
        let changed = git(&[&["diff", "--name-only", &range, "--"][..], covers].concat())
            .unwrap_or_else(|e| panic!("{transcript}: {e}"));
        if !changed.is_empty() {
            let mut args = vec!["log", "--format=%h %s", &range, "--"];
            args.extend(changed.lines());
            let later = git(&args).unwrap_or_default();
            stale.push(format!(
                "{transcript} tested {sha}, but {} changed since, in:\n  {}",
                changed.replace('\n', ", "),
                later.replace('\n', "\n  ")
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "stale release transcripts (run launch/release-check as root and commit its output):\n{}",
        stale.join("\n")
    );
}
