//! Acceptance runs and reports, end to end on the real binary: `burnin run` on the
//! simulated cluster (a node shaped down FAILs naming it, a healthy cluster PASSes),
//! `burnin compare` of the two, a run killed mid-sweep, crashing and hanging phases,
//! card errors, the report in headless Chromium, and golden files for the Markdown
//! and the JSON schema (`UPDATE_GOLDEN=1 cargo test --release --test report` rewrites
//! them after an intended change).
mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Tests that run MPI jobs, the simulated cluster or a browser share 2 cores: one at
/// a time, so a busy machine cannot make a healthy cluster look slow.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `burnin ARGS…` from the repository root, bounded.
fn burnin(args: &[&str], limit: Duration) -> Run {
    let mut c = Command::new(bin());
    c.args(args).current_dir(root());
    run_bounded(c, limit)
}

fn updating() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some()
}

/// Compare `got` with the golden file, or rewrite it under UPDATE_GOLDEN=1.
fn golden(path: &Path, got: &str) {
    if updating() {
        // Rewriting checks nothing: never in CI, where it would pass without comparing.
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "UPDATE_GOLDEN is set under CI: the golden files would not be compared"
        );
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (UPDATE_GOLDEN=1 cargo test --release --test report writes it)",
            path.display()
        )
    });
    if want != got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  golden: {:?}\n  output: {:?}\n(UPDATE_GOLDEN=1 rewrites it after an intended change)",
            path.display(),
            line + 1,
            want.lines().nth(line),
            got.lines().nth(line)
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

// ------------------------------------------------------------------ golden files

#[test]
fn markdown_reports_of_the_fixtures_match_their_golden_files() {
    for name in ["sim-shaped", "sim-healthy"] {
        let out = tempfile::tempdir().unwrap();
        let r = burnin(
            &["report", s(&fixture(name)), "--out", s(out.path())],
            Duration::from_secs(60),
        );
        assert_eq!(r.code, Some(0), "{}", r.all());
        assert_no_panic(&r);
        let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
        golden(&fixture("expected").join(format!("{name}.md")), &md);
    }
}

/// "path: type" for every field of a JSON value, arrays as `[]`, sorted.
fn outline(v: &Value, path: &str, out: &mut Vec<String>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let line = format!("{path}: {kind}");
    if !out.contains(&line) {
        out.push(line);
    }
    match v {
        Value::Array(a) => a.iter().for_each(|x| outline(x, &format!("{path}[]"), out)),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, x)| outline(x, &format!("{path}.{k}"), out)),
        _ => {}
    }
}

fn schema_of(v: &Value) -> String {
    let mut lines = Vec::new();
    outline(v, "$", &mut lines);
    lines.sort();
    lines.join("\n") + "\n"
}

/// The records burnin writes, read and written again by this build's types: a field
/// added, renamed or removed shows up here, and should come with a schema_version bump
/// (an old file that no longer parses fails here first).
#[test]
fn json_records_keep_their_schema() {
    use burnin::results::acceptance::AcceptanceRecord;
    use burnin::results::sweep::SweepReport;
    let h = fixture("sim-healthy");
    let acc: AcceptanceRecord = serde_json::from_value(read_json(&h.join("acceptance.json")))
        .expect("acceptance.json of the fixture parses with this build's types");
    assert_eq!(
        acc.schema_version,
        burnin::results::acceptance::SCHEMA_VERSION
    );
    let sweep: SweepReport = serde_json::from_value(read_json(&h.join("sweep/run.json")))
        .expect("sweep run.json parses");
    assert_eq!(sweep.schema_version, burnin::results::sweep::SCHEMA_VERSION);
    let mut text = String::new();
    text.push_str("# acceptance.json\n");
    text.push_str(&schema_of(&serde_json::to_value(&acc).unwrap()));
    text.push_str("# sweep/run.json\n");
    text.push_str(&schema_of(&serde_json::to_value(&sweep).unwrap()));
    let train: burnin::train::report::TrainReport =
        serde_json::from_value(read_json(&h.join("train/run.json")))
            .expect("train run.json parses");
    text.push_str("# train/run.json\n");
    text.push_str(&schema_of(&serde_json::to_value(&train).unwrap()));
    golden(&fixture("expected").join("schema.txt"), &text);
}

#[test]
fn unreadable_schema_versions_get_a_clear_error_and_compatible_files_load() {
    let cases: [(&str, Option<Value>, &str); 4] = [
        (
            "sweep/run.json",
            Some(Value::from(99)),
            "sweep schema_version 99 is newer than this burnin reads (1..=1)",
        ),
        (
            "sweep/run.json",
            Some(Value::from(0)),
            "sweep schema_version 0 is older than this burnin still reads",
        ),
        (
            "sweep/run.json",
            None,
            "no schema_version field: not a burnin sweep record",
        ),
        (
            "acceptance.json",
            Some(Value::from(7)),
            "acceptance schema_version 7 is newer",
        ),
    ];
    for (file, version, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("run");
        copy_dir(&fixture("sim-shaped"), &d);
        let p = d.join(file);
        let mut v = read_json(&p);
        match version {
            Some(n) => v["schema_version"] = n,
            None => {
                v.as_object_mut().unwrap().remove("schema_version");
            }
        }
        write_json(&p, &v);
        let r = burnin(&["report", s(&d)], Duration::from_secs(60));
        assert_eq!(r.code, Some(2), "{file} {want}: {}", r.all());
        assert!(r.stderr.contains(want), "{want}:\n{}", r.all());
        assert!(r.stderr.contains(file), "names the file:\n{}", r.all());
        assert_no_panic(&r);
    }
    // A newer writer that only added fields is still read.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("run");
    copy_dir(&fixture("sim-shaped"), &d);
    for file in ["sweep/run.json", "acceptance.json"] {
        let p = d.join(file);
        let mut v = read_json(&p);
        v["added_by_a_later_burnin"] = Value::from("ignored");
        write_json(&p, &v);
    }
    let r = burnin(&["report", s(&d)], Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(d.join("report.html").is_file());
}

// ------------------------------------------------------------------ HTML in a browser

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

fn headless(browser: &Path, profile: &Path, extra: &[&str], url: &str) -> Run {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(url);
    run_bounded(c, Duration::from_secs(120))
}

/// Distinct colours in a PNG (RGB or RGBA, 8 bits), up to `cap`.
fn colours(png_path: &Path, cap: usize) -> usize {
    let file = std::io::BufReader::new(std::fs::File::open(png_path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let mut seen = std::collections::HashSet::new();
    for p in buf[..info.buffer_size()].chunks(px) {
        seen.insert(p[..3].to_vec());
        if seen.len() >= cap {
            break;
        }
    }
    seen.len()
}

#[test]
fn html_report_renders_its_charts_in_headless_chromium() {
    let out = tempfile::tempdir().unwrap();
    let r = burnin(
        &["report", s(&fixture("sim-healthy")), "--out", s(out.path())],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let html_path = out.path().join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    for external in [
        "<script",
        "<link",
        "<img",
        "src=",
        "url(",
        "@import",
        "href=\"http",
    ] {
        assert!(
            !html.contains(external),
            "self-contained, but has {external}"
        );
    }
    let charts = html.matches("<figure").count();
    assert!(charts >= 8, "{charts} charts");
    let browser = require!(chromium().or_else(|| {
        skipped("chromium is not installed (launch/setup installs the Debian package `chromium`)");
        None
    }));
    let _s = serial();
    let url = format!("file://{}", html_path.display());
    let shot = out.path().join("shot.png");
    let r = headless(
        &browser,
        &out.path().join("profile"),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,2000",
        ],
        &url,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let n = colours(&shot, 50);
    assert!(n >= 20, "the screenshot has {n} colours: blank or unstyled");
    let r = headless(
        &browser,
        &out.path().join("profile2"),
        &["--dump-dom"],
        &url,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let dom = &r.stdout;
    assert!(
        dom.matches("<svg").count() >= charts,
        "every chart is in the DOM"
    );
    for want in [
        "<text",
        "all_reduce busbw, tier inter",
        "node pairs: all_reduce busbw at 16MiB",
        "training loss",
        "recovery per trial",
        "first_step +",
        "PASS — 19 of 19 criteria passed",
    ] {
        assert!(dom.contains(want), "rendered DOM lacks {want:?}");
    }
    // Console messages are logged as "CONSOLE(line)"; a page without script has none.
    let console: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE(") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console errors: {console:#?}");
}

// ------------------------------------------------------------------ the run itself

fn write_card(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("card.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn bad_cards_and_launchers_are_refused_with_the_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let card = write_card(
        dir.path(),
        "name = \"x\"\nlaunch = \"mpirun -np 2\"\n[sweep]\nmin_bytes = \"1K\"\nmax_bytes = \"1M\"\n[sweep.criteria]\nmin_fraction_of_expected = 2.0\n",
    );
    let r = burnin(&["run", "--card", s(&card)], Duration::from_secs(30));
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains(&format!(
            "{}:7: sweep.criteria.min_fraction_of_expected: 2 must be a fraction",
            card.display()
        )),
        "{}",
        r.all()
    );
    let card = write_card(dir.path(), "name = \"x\"\n[probe]\ntimeout = 3\n");
    let r = burnin(&["run", "--card", s(&card)], Duration::from_secs(30));
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains(":3:") && r.stderr.contains("unknown field `timeout`"),
        "{}",
        r.all()
    );
    let card = write_card(dir.path(), "name = \"x\"\n[probe]\n");
    let r = burnin(&["run", "--card", s(&card)], Duration::from_secs(30));
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("--launch:"), "{}", r.all());
    let r = burnin(
        &["run", "--card", s(&card), "--launch", "mpirun 'unclosed"],
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("unclosed quote"), "{}", r.all());
}

#[test]
fn a_crashing_or_hanging_phase_fails_its_criteria_and_the_report_is_still_written() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    // Every job exits 7 before burnin even starts: each phase "crashes".
    let card = write_card(
        dir.path(),
        "name = \"crash\"\nlaunch = \"sh -c 'echo Error: no cluster >&2; exit 7' sh\"\n[probe]\n[sweep]\nmin_bytes = \"1K\"\nmax_bytes = \"1K\"\n[train]\nsteps = 4\n",
    );
    let out = dir.path().join("crash");
    let r = burnin(
        &["run", "--card", s(&card), "--out", s(&out)],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_no_panic(&r);
    let acc = read_json(&out.join("acceptance.json"));
    let status: Vec<(&str, &str)> = acc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap(), j["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        status,
        [
            ("probe", "crashed"),
            ("sweep", "crashed"),
            ("train", "crashed"),
            ("train-part", "skipped"),
            ("train-resume", "skipped")
        ]
    );
    assert_eq!(acc["outcome"], "fail");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("crashed (exit 7): Error: no cluster"), "{md}");
    assert!(
        md.contains(
            "| sweep | every element of every checked result is right | no data | 0 wrong | FAIL |"
        ),
        "{md}"
    );
    assert!(
        r.stdout.lines().last().unwrap().ends_with("report.html"),
        "{}",
        r.stdout
    );
    // The verdict for CI dashboards: each criterion a case, the same counts, and the
    // JUnit file valid against the format's schema.
    let crit = acc["criteria"].as_array().unwrap();
    let of = |s: &str| crit.iter().filter(|c| c["status"] == s).count();
    let ctrf = read_json(&out.join("verdict.ctrf.json"));
    let sum = &ctrf["results"]["summary"];
    assert_eq!(
        (
            sum["tests"].as_u64(),
            sum["failed"].as_u64(),
            sum["skipped"].as_u64()
        ),
        (
            Some(crit.len() as u64),
            Some(of("fail") as u64),
            Some(of("not_run") as u64)
        ),
        "{ctrf:#}"
    );
    assert!(of("fail") > 0);
    let junit = out.join("verdict.junit.xml");
    let x = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(x.matches("<testcase ").count(), crit.len(), "{x}");
    assert_eq!(x.matches("<failure ").count(), of("fail"), "{x}");
    let v = Command::new("xmllint")
        .args([
            "--noout",
            "--schema",
            s(&root().join("tests/fixtures/ci/junit.xsd")),
        ])
        .arg(&junit)
        .output()
        .expect("xmllint (libxml2-utils, installed by launch/setup)");
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));

    // A job that hangs is ended at its bound, with its children.
    let card = write_card(
        dir.path(),
        "name = \"hang\"\nlaunch = \"sh -c 'sleep 300 & sleep 300' sh\"\n[probe]\ntimeout_s = 1\n",
    );
    let out = dir.path().join("hang");
    let t = Instant::now();
    let r = burnin(
        &["run", "--card", s(&card), "--out", s(&out)],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let acc = read_json(&out.join("acceptance.json"));
    assert_eq!(acc["jobs"][0]["status"], "timed_out");
    assert!(r.stdout.contains("timed out after 1 s"), "{}", r.stdout);
}

#[test]
fn a_launcher_that_crashes_after_the_job_finished_is_judged_from_the_results() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    // The launcher runs the job, then dies by SIGSEGV (as mpirun's teardown can,
    // open-mpi/ompi#13650); a second one dies before the job starts.
    for (name, launch, status, verdict) in [
        (
            "after",
            "sh -c '\\\"$@\\\"; kill -SEGV $$' sh",
            "launcher_crashed",
            "pass",
        ),
        ("before", "sh -c 'kill -SEGV $$' sh", "crashed", "fail"),
    ] {
        let card = write_card(
            dir.path(),
            &format!("name = \"{name}\"\nlaunch = \"{launch}\"\n[probe]\n"),
        );
        let out = dir.path().join(name);
        let r = burnin(
            &["run", "--card", s(&card), "--out", s(&out)],
            Duration::from_secs(60),
        );
        assert_no_panic(&r);
        let acc = read_json(&out.join("acceptance.json"));
        assert_eq!(acc["jobs"][0]["status"], status, "{}", r.all());
        assert_eq!(acc["jobs"][0]["signal"], 11, "{}", r.all());
        assert_eq!(acc["outcome"], verdict, "{}", r.all());
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("killed by signal 11"), "{md}");
        if name == "after" {
            assert_eq!(r.code, Some(0), "{}", r.all());
            assert!(
                r.stdout.contains(
                    "finished its results, then the launcher crashed (killed by signal 11)"
                ),
                "{}",
                r.stdout
            );
        }
    }
}

/// The launcher prefix for local ranks on this machine (as tests/common's mpirun).
const LOCAL_LAUNCH: &str = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4";

fn local_env(c: &mut Command) {
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo");
}

/// Start `c` in its own process group; SIGKILL its whole tree once `file` has at
/// least `lines` lines (or after `limit`).
fn kill_when(mut c: Command, file: &Path, lines: usize, limit: Duration) {
    use std::os::unix::process::CommandExt;
    c.process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let t = Instant::now();
    while t.elapsed() < limit {
        let n = std::fs::read_to_string(file)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if n >= lines {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    kill_group(&child, 9);
    let _ = child.wait();
}

#[test]
fn report_of_a_run_killed_mid_sweep_renders_what_was_measured_and_marks_the_rest_missing() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let card = write_card(
        dir.path(),
        &format!(
            "name = \"killed\"\nlaunch = \"{LOCAL_LAUNCH}\"\nbackend = \"mpi\"\n[probe]\n[sweep]\ncollectives = [\"all_reduce\", \"all_gather\"]\nmin_bytes = \"1K\"\nmax_bytes = \"16M\"\nbudget_s = 0.5\n[train]\nsteps = 4\n"
        ),
    );
    let out = dir.path().join("run");
    let mut c = Command::new(bin());
    c.args(["run", "-q", "--card", s(&card), "--out", s(&out)])
        .current_dir(root());
    local_env(&mut c);
    kill_when(
        c,
        &out.join("sweep/points.jsonl"),
        6,
        Duration::from_secs(120),
    );
    assert!(
        !out.join("sweep/run.json").exists(),
        "killed before the sweep ended"
    );
    let measured = jsonl(&out.join("sweep/points.jsonl")).len();
    assert!(measured >= 6);
    let r = burnin(&["report", s(&out)], Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for want in [
        "never finished (the run was killed)",
        "**The sweep did not finish** (no run.json)",
        "| sweep | the sweep measured every planned size and tier |",
        "| 1KiB | ",
        "| 16MiB | missing |",
        "### Missing",
        "tier world all_gather: ",
        "| train | training runs to its last step: finite loss, replicas agree | - | 4 steps, no problem | NOT RUN |",
    ] {
        assert!(md.contains(want), "report lacks {want:?}:\n{md}");
    }
    // What was measured is there: the first size has a number, not "missing".
    let first = md.lines().find(|l| l.starts_with("| 1KiB | ")).unwrap();
    assert!(
        first
            .split('|')
            .nth(2)
            .unwrap()
            .trim()
            .parse::<f64>()
            .is_ok(),
        "{first}"
    );
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("class=\"missing\""));

    // The same for a bare `burnin sweep --out` folder killed half-way.
    let bare = dir.path().join("bare");
    let mut c = mpirun_cmd(4);
    c.arg(bin()).args([
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "1K",
        "-e",
        "16M",
        "--budget",
        "0.5",
        "--out",
        s(&bare),
    ]);
    kill_when(c, &bare.join("points.jsonl"), 4, Duration::from_secs(120));
    let r = burnin(&["report", s(&bare)], Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let md = std::fs::read_to_string(bare.join("report.md")).unwrap();
    assert!(md.contains("No acceptance card"), "{md}");
    assert!(md.contains("**The sweep did not finish**"), "{md}");
    assert!(
        md.contains("no run.json — the sweep did not finish"),
        "{md}"
    );
}

// ------------------------------------------------------------------ simulated cluster

const SIM: SimCluster = SimCluster {
    prefix: "br-",
    subnet: "10.80.0",
};

fn run_card(out: &Path, extra: &[&str], limit: Duration) -> Run {
    let mut c = Command::new(bin());
    c.args(["run", "--card", "cards/sim-4node.toml", "--out", s(out)])
        .args(extra)
        .env("BURNIN_SIM_PREFIX", SIM.prefix)
        .current_dir(root());
    run_bounded(c, limit)
}

// One test, in sequence: the cluster is a shared resource of this machine.
#[test]
fn sim_cluster_acceptance_fails_naming_node3_passes_when_healthy_and_compares() {
    let _s = serial();
    let _down = require!(SIM.up(&["--rate", "2gbit", "--shape", "node3=500mbit"]));
    let dir = tempfile::tempdir().unwrap();

    // 1. node3 at a quarter of the others' rate: FAIL naming node3, exit 1.
    let shaped = dir.path().join("shaped");
    let r = run_card(
        &shaped,
        &["--phases", "probe,sweep"],
        Duration::from_secs(600),
    );
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_no_panic(&r);
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("no slow node or link"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        row.contains("outlier: node3") && row.trim_end().ends_with("FAIL"),
        "{row}"
    );
    assert!(r.stdout.contains("# verdict: FAIL"), "{}", r.stdout);
    let md = std::fs::read_to_string(shaped.join("report.md")).unwrap();
    assert!(md.contains("node3 (outlier)"), "{md}");
    assert!(md.contains("suspect node3's link"), "{md}");
    assert!(shaped.join("report.html").is_file());
    // The next job's files leave node3 out and say why; the other three stay.
    let good = std::fs::read_to_string(shaped.join("hosts.good")).unwrap();
    let kept: Vec<&str> = good
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut sorted = kept.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["node0", "node1", "node2"], "{good}");
    assert!(
        good.lines().skip(1).all(|l| l.ends_with(" slots=2")),
        "{good}"
    );
    let next = std::fs::read_to_string(shaped.join("next-job.txt")).unwrap();
    assert!(
        next.contains("sbatch --exclude=node3\n") && next.contains("# node3 is out: node3:"),
        "{next}"
    );
    assert!(
        md.contains("## Next job") && md.contains("node3 is out"),
        "{md}"
    );

    // 2. The same cluster without the shaping, every phase: PASS, exit 0.
    assert!(SIM.start(&["--rate", "2gbit"]));
    let healthy = dir.path().join("healthy");
    let r = run_card(&healthy, &[], Duration::from_secs(900));
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("# verdict: PASS"), "{}", r.stdout);
    let acc = read_json(&healthy.join("acceptance.json"));
    assert_eq!(acc["outcome"], "pass");
    for job in [
        "probe",
        "sweep",
        "replay",
        "train",
        "train-part",
        "train-resume",
    ] {
        let j = acc["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == job)
            .unwrap_or_else(|| panic!("job {job}"));
        assert_eq!(j["status"], "passed", "{job}: {j}");
    }
    let fabric = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "probe.fabric")
        .unwrap_or_else(|| panic!("probe.fabric criterion: {acc}"));
    assert_eq!(fabric["status"], "pass", "{fabric}");
    // No GPU on the simulated cluster: the GPU phase ran, found none, and its
    // criteria are NOT RUN with the driver's reason (not a failure) — but the SDC
    // vote, which the 8 CPU ranks run with the host's workloads.
    let sdc = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gpu.sdc")
        .unwrap_or_else(|| panic!("gpu.sdc criterion: {acc}"));
    assert_eq!(sdc["status"], "pass", "{sdc}");
    assert!(
        sdc["measured"]
            .as_str()
            .unwrap()
            .contains(" of 8 voting rank(s); CPU ranks only"),
        "{sdc}"
    );
    let gpu: Vec<&Value> = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["phase"] == "gpu" && c["id"] != "gpu.sdc")
        .collect();
    assert!(!gpu.is_empty(), "{acc}");
    for c in gpu {
        assert_eq!(c["status"], "not_run", "{c}");
        assert!(
            c["detail"]
                .as_str()
                .unwrap()
                .contains("no GPU on any of the 8 rank(s)"),
            "{c}"
        );
    }
    // The card's 2-node data + tensor parallel trace replayed on the 4 nodes: the
    // data-parallel all_reduce grown across the 4 hosts (one rank each: the sweep's
    // inter tier, shown beside it), the tensor-parallel calls inside each node.
    let zw = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "replay.zero_wrong")
        .unwrap_or_else(|| panic!("replay.zero_wrong criterion: {acc}"));
    assert_eq!(zw["status"], "pass", "{zw}");
    let rp = read_json(&healthy.join("replay/replay.json"));
    assert_eq!(rp["scaled_from"], 4, "{rp}");
    for c in rp["calls"].as_array().unwrap() {
        let want = if c["collective"] == "all_reduce" {
            "inter-node (4 hosts)"
        } else {
            "intra-node"
        };
        assert_eq!(c["tier"], want, "{c}");
    }
    assert!(
        !healthy.join("train/ckpt").exists(),
        "checkpoints are removed once judged"
    );
    let md = std::fs::read_to_string(healthy.join("report.md")).unwrap();
    assert!(
        md.contains("resumed at step 10: weights and 10 loss(es) identical"),
        "{md}"
    );
    assert!(md.contains("| 1,000 training steps | USD "), "{md}");
    let ar = md
        .lines()
        .find(|l| l.contains("| inter-node (4 hosts) | all_reduce | 1.0 MiB"))
        .unwrap_or_else(|| panic!("no replayed all_reduce row: {md}"));
    assert!(
        ar.contains("(inter 1.0 MiB)"),
        "the sweep's busbw beside it: {ar}"
    );

    // 3. Side by side: the inter-node tier's ratio and the criteria that flipped.
    let r = burnin(
        &["compare", s(&shaped), s(&healthy)],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let inter = r
        .stdout
        .lines()
        .find(|l| l.starts_with("| inter | all_reduce | 16MiB |"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    let ratio: f64 = inter
        .split('|')
        .nth(6)
        .unwrap()
        .trim()
        .trim_end_matches('×')
        .parse()
        .unwrap();
    assert!(
        ratio > 2.0,
        "healthy inter tier well above the shaped one: {inter}"
    );
    let flipped = r
        .stdout
        .lines()
        .find(|l| l.contains("`sweep.no_outlier`"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(flipped.contains("| FAIL | PASS |"), "{flipped}");
    let cmp = dir.path().join("cmp");
    let r = burnin(
        &["compare", s(&shaped), s(&healthy), "--out", s(&cmp)],
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(std::fs::read_to_string(cmp.join("compare.html"))
        .unwrap()
        .contains("<svg"));
}
