//! `burnin gpu`'s NVML half on the GPU twin (tests/gpu-twin): the real binary under the
//! real mpirun, two ranks on a two-GPU twin, with the twin's NVML healthy or faulted by
//! `TWIN_NVML_HEALTH`. What is checked is the judging of what NVML says (throttle
//! reasons, PCIe link, error counters, XID events), never a timing: the pair-outlier
//! criterion, judged on the twin's copy times, may go either way.
mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The twin's NVML entry points a plain `burnin gpu` run calls for health.
const HEALTH_CALLS: &[&str] = &[
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
];

/// What one `burnin gpu` run on the twin left.
struct GpuRun {
    run: Run,
    report: Value,
    counts: std::collections::BTreeMap<String, u64>,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// Sum of the NVML twin's call counts in `dir`, per entry point.
fn nvml_counts(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut total = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !(name.starts_with("nvml.") && name.ends_with(".counts")) {
            continue;
        }
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            if let [f, n] = line.split_whitespace().collect::<Vec<_>>().as_slice() {
                *total.entry(f.to_string()).or_insert(0) += n.parse::<u64>().unwrap();
            }
        }
    }
    total
}

/// `mpirun -np 2 burnin gpu` (short) on a two-GPU twin with `health` as
/// TWIN_NVML_HEALTH.
fn gpu_run(health: &str) -> GpuRun {
    gpu_run_burning(health, "1s")
}

/// [`gpu_run`] with a burn of `burn`.
fn gpu_run_burning(health: &str, burn: &str) -> GpuRun {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let counts = dir.path().join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    let mut c = mpirun_cmd(2);
    twin().env(&mut c, &counts);
    c.env("TWIN_GPUS", "2").env("TWIN_NVML_HEALTH", health);
    c.arg(bin()).args([
        "gpu",
        "--burn",
        burn,
        "--copy-bytes",
        "64K",
        "--peer-bytes",
        "64K",
        "--reps",
        "1",
        "--sample-ms",
        "100",
        "--out",
        out.to_str().unwrap(),
    ]);
    let run = run_bounded(c, Duration::from_secs(120));
    assert_no_panic(&run);
    assert!(!run.timed_out, "timed out: {}", run.all());
    let report = serde_json::from_slice(
        &std::fs::read(out.join("gpu.json")).unwrap_or_else(|e| panic!("{e}: {}", run.all())),
    )
    .unwrap();
    let counts = nvml_counts(&counts);
    GpuRun {
        run,
        report,
        counts,
    }
}

/// The verdict table's row of the criterion described as `what`.
fn row<'a>(r: &'a Run, what: &str) -> &'a str {
    r.stdout
        .lines()
        .find(|l| l.starts_with("gpu ") && l.contains(what))
        .unwrap_or_else(|| panic!("no row '{what}': {}", r.all()))
}

const THROTTLE: &str = "share of the burn a GPU spent throttled";
const PCIE: &str = "every GPU's PCIe link under load";
const ERRORS: &str = "no new uncorrected ECC error";
/// The criterion judged on the peer copies' times (the twin's are a modelled 40 ms
/// each, so a healthy twin passes it).
const OUTLIER: &str = "no GPU pair's peer copy far below its node's median pair";

/// Every criterion PASSed and the run exited 0.
fn all_pass(r: &Run) {
    let rows: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("gpu ")).collect();
    assert!(rows.len() >= 5, "{}", r.all());
    for l in &rows {
        assert!(l.trim_end().ends_with("PASS"), "{l}: {}", r.all());
    }
    assert!(row(r, OUTLIER).trim_end().ends_with("PASS"), "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
}

/// The run failed (exit 1) and printed `line` (a criterion's detail line).
fn fails_with(r: &GpuRun, line: &str) {
    assert_eq!(r.run.code, Some(1), "{}", r.run.all());
    assert!(
        r.run.stdout.lines().any(|l| l.starts_with(line)),
        "no line starting '{line}': {}",
        r.run.all()
    );
}

#[test]
fn a_healthy_twin_passes_throttle_pcie_and_errors_and_calls_every_health_entry_point() {
    let r = gpu_run("");
    all_pass(&r.run);
    for what in [THROTTLE, PCIE, ERRORS] {
        assert!(row(&r.run, what).ends_with("PASS"), "{}", r.run.all());
    }
    assert!(row(&r.run, ERRORS).contains("counters compared on 2, XIDs listened to on 2 of 2"));
    for g in r.report["gpus"].as_array().unwrap() {
        assert_eq!(g["xid_listening"], true, "{g}");
        assert_eq!(g["nvml_error"], Value::Null, "{g}");
        assert_eq!(g["pcie"]["gen"], 5, "{g}");
        assert_eq!(g["pcie"]["max_width"], 16, "{g}");
        assert!(g["throttle"]["samples"].as_u64().unwrap() >= 1, "{g}");
        assert_eq!(g["throttle"]["throttled_share"], 0.0, "{g}");
        let after = &g["counters_after"];
        assert_eq!(after["ecc_volatile_uncorrected"], 0, "{g}");
        assert_eq!(after["remapped_rows_failure"], false, "{g}");
        // Page retirement is pre-Ampere: an H100-like GPU does not report it.
        assert_eq!(after["retired_pages_dbe"], Value::Null, "{g}");
    }
    let never: Vec<&&str> = HEALTH_CALLS
        .iter()
        .filter(|f| r.counts.get(**f).copied().unwrap_or(0) == 0)
        .collect();
    assert!(never.is_empty(), "not called: {never:?} of {:?}", r.counts);
}

#[test]
fn a_gpu_in_hw_slowdown_fails_the_throttle_criterion_naming_it_and_its_host() {
    let r = gpu_run("gpu=1:throttle=hw_slowdown");
    fails_with(
        &r,
        &format!(
            "# gpu.throttle FAIL: {} GPU 1 throttled 100% of the burn (hw_slowdown 100%)",
            host()
        ),
    );
    assert!(row(&r.run, PCIE).ends_with("PASS"), "{}", r.run.all());
    assert!(row(&r.run, ERRORS).ends_with("PASS"), "{}", r.run.all());
}

#[test]
fn a_pcie_link_below_its_max_fails_naming_the_gpu_and_its_host() {
    let r = gpu_run("rank=0:gpu=0:pcie_gen=4,pcie_width=8");
    fails_with(
        &r,
        &format!(
            "# gpu.pcie FAIL: {} GPU 0 PCIe Gen4 x8 (GPU max Gen5 x16)",
            host()
        ),
    );
    assert!(row(&r.run, THROTTLE).ends_with("PASS"), "{}", r.run.all());
}

#[test]
fn a_new_uncorrected_ecc_error_fails_naming_the_gpu_and_its_host() {
    let r = gpu_run("gpu=1:ecc_uncorrected_after=2");
    fails_with(
        &r,
        &format!(
            "# gpu.errors FAIL: {} GPU 1: 2 new uncorrected ECC error(s)",
            host()
        ),
    );
    let g = &r.report["gpus"][1];
    assert_eq!(g["counters_before"]["ecc_volatile_uncorrected"], 0, "{g}");
    assert_eq!(g["counters_after"]["ecc_volatile_uncorrected"], 2, "{g}");
}

/// NVML's PCIe replay counter read before and after: 500 replays on GPU 1 during the
/// phase (more than DCGM's default of 80) fail it, naming the GPU and the count.
#[test]
fn pcie_replays_that_rise_during_the_phase_fail_naming_the_gpu() {
    let r = gpu_run("gpu=1:pcie_replays_after=500");
    fails_with(
        &r,
        &format!(
            "# gpu.errors FAIL: {} GPU 1: 500 PCIe replays (link retransmissions), more than 80",
            host()
        ),
    );
    let g = &r.report["gpus"][1];
    assert_eq!(g["counters_before"]["pcie_replays"], 0, "{g}");
    assert_eq!(g["counters_after"]["pcie_replays"], 500, "{g}");
    assert_eq!(r.report["gpus"][0]["counters_after"]["pcie_replays"], 0);
}

#[test]
fn an_xid_fails_naming_the_gpu_and_its_host() {
    let r = gpu_run("gpu=0:xid=79");
    fails_with(
        &r,
        &format!("# gpu.errors FAIL: {} GPU 0: XID 79 at ", host()),
    );
    let xids = r.report["gpus"][0]["xids"].as_array().unwrap();
    assert_eq!(xids.len(), 1, "{xids:?}");
    assert_eq!(xids[0]["xid"], 79);
    assert_eq!(r.report["gpus"][1]["xids"].as_array().unwrap().len(), 0);
}

/// A scripted timeline (`key=value@T`, T seconds after NVML's init): GPU 1 starts
/// throttling with its clock dropped, has a row remapped and raises XID 79 half-way
/// through a 3 s burn; GPU 0 stays well.
#[test]
fn a_gpu_that_turns_bad_half_way_through_the_burn_is_caught_and_named() {
    let r = gpu_run_burning(
        "gpu=1:throttle=hw_slowdown@1.5,sm_mhz=1200@1.5,rows_uncorrected_after=1@1.5,xid=79@1.5",
        "3s",
    );
    assert_eq!(r.run.code, Some(1), "{}", r.run.all());
    let gpus = r.report["gpus"].as_array().unwrap();
    let share = gpus[1]["throttle"]["throttled_share"].as_f64().unwrap();
    assert!(
        share > 0.1 && share < 0.9,
        "throttled only from mid-burn: {share}"
    );
    assert_eq!(gpus[0]["throttle"]["throttled_share"], 0.0);
    let line = |p: &str| {
        r.run
            .stdout
            .lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no '{p}': {}", r.run.all()))
            .to_string()
    };
    let t = line("# gpu.throttle FAIL: ");
    assert!(
        t.contains(&format!("{} GPU 1 throttled ", host())) && t.contains("(hw_slowdown "),
        "{t}"
    );
    let e = line("# gpu.errors FAIL: ");
    assert!(
        e.contains(&format!(
            "{} GPU 1: 1 row(s) newly remapped for uncorrected errors",
            host()
        )),
        "{e}"
    );
    assert!(e.contains(&format!("{} GPU 1: XID 79 at ", host())), "{e}");
    assert!(!e.contains("GPU 0"), "{e}");
}

#[test]
fn failed_nvml_sample_reads_are_counted_and_shown_not_dropped() {
    let r = gpu_run("rank=1:gpu=1:clock_errors=2");
    all_pass(&r.run);
    let note = format!(
        "{} GPU 1: 1 NVML sample(s) with a failed read (first: SM clock: ",
        host()
    );
    assert!(r.run.stdout.contains(&note), "{}", r.run.all());
    let gpus = r.report["gpus"].as_array().unwrap();
    assert_eq!(gpus[1]["sample_errors"], 1, "{}", r.report);
    assert_eq!(gpus[0]["sample_errors"], 0, "{}", r.report);
}

#[test]
fn a_driver_without_events_passes_but_says_xids_were_not_watched() {
    let r = gpu_run("gpu=all:events=unsupported");
    all_pass(&r.run);
    assert!(
        row(&r.run, ERRORS).contains("XIDs listened to on 0 of 2 GPUs"),
        "{}",
        r.run.all()
    );
    let note = format!(
        "{} GPU 1: XIDs not watched (XID events not watched: ",
        host()
    );
    assert!(r.run.stdout.contains(&note), "{}", r.run.all());
    for g in r.report["gpus"].as_array().unwrap() {
        assert_eq!(g["xid_listening"], false, "{g}");
        let why = g["nvml_error"].as_str().unwrap();
        assert!(why.contains("XID events not watched"), "{why}");
    }
}

#[test]
fn a_soak_keeps_each_gpus_temperature_clock_and_throttle_on_its_timeline_and_in_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    let prom = dir.path().join("soak.prom");
    let counts = dir.path().join("counts");
    std::fs::create_dir_all(&counts).unwrap();
    let mut c = mpirun_cmd(2);
    twin().env(&mut c, &counts);
    // GPU 0 (rank 0's, the one rank 0's metrics file shows) hot and in HW slowdown
    // for the whole soak.
    c.env("TWIN_GPUS", "2").env(
        "TWIN_NVML_HEALTH",
        "gpu=0:throttle=hw_slowdown,temp_c=91,sm_mhz=1200",
    );
    c.arg(bin()).args([
        "--metrics-file",
        prom.to_str().unwrap(),
        "--metrics-every",
        "0.2",
        "sweep",
        "--backend",
        "nccl",
        "-c",
        "all_reduce",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "2",
        "-w",
        "1",
        "--tiers",
        "world",
        "--duration",
        "4s",
        // The twin's times are not measurements: a drift bound no loaded runner
        // reaches keeps the verdict on what NVML said.
        "--max-drift",
        "0.01",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r = run_bounded(c, Duration::from_secs(120));
    assert_no_panic(&r);
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run: Value = serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    let soak = &run["soak"];
    assert!(soak.get("gpu_note").is_none(), "{soak}");
    let gpus = soak["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{soak}");
    for (rank, g) in gpus.iter().enumerate() {
        assert_eq!(g["rank"], rank);
        assert_eq!(g["host"], host());
        assert!(g["error"].is_null(), "{g}");
        let n = g["unix"].as_array().unwrap().len();
        // 1 s apart over 4 s, plus the first at the start.
        assert!(n >= 3, "{g}");
        for k in ["temp_c", "sm_mhz", "throttled"] {
            assert_eq!(g[k].as_array().unwrap().len(), n, "{k}: {g}");
        }
        let (temp, sm, share) = if rank == 0 {
            (91, 1200, 1.0)
        } else {
            (45, 1980, 0.0)
        };
        assert!(g["temp_c"].as_array().unwrap().iter().all(|t| t == temp));
        assert_eq!(g["temp_c_max"], temp);
        assert_eq!(g["sm_mhz_min"], sm);
        assert_eq!(g["throttled_share"].as_f64(), Some(share), "{g}");
        assert_eq!(g["first_throttled_unix"].is_number(), rank == 0, "{g}");
    }
    // The points' times and the samples' share one clock.
    let first_point = run["points"][0]["unix"].as_f64().unwrap();
    let first_sample = gpus[0]["unix"][0].as_f64().unwrap();
    assert!((first_point - first_sample).abs() < 10.0);

    // The metrics file (rank 0's): its GPU as NVML last read it.
    let fams = &prom_parse(&[prom])[0];
    let temps: Vec<(String, f64)> = prom_samples(fams, "burnin_gpu_temperature_celsius")
        .iter()
        .map(|x| {
            assert_eq!(x["labels"]["host"], host().as_str());
            (
                x["labels"]["gpu"].as_str().unwrap().to_string(),
                x["value"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(temps, vec![("0".to_string(), 91.0)]);
    let clocks: Vec<f64> = prom_samples(fams, "burnin_gpu_sm_clock_hertz")
        .iter()
        .map(|x| x["value"].as_f64().unwrap())
        .collect();
    assert_eq!(clocks, vec![1.2e9], "{fams:?}");

    // The report: the GPU table and both charts.
    let rep = run_bounded(
        {
            let mut c = std::process::Command::new(bin());
            c.args(["report", out.to_str().unwrap()]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(rep.code, Some(0), "{}", rep.all());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("GPUs over the soak (NVML, every rank's GPU): 2 sampled, 1 throttled"),
        "{md}"
    );
    // The throttled GPU's row first: 100% throttled.
    let row = md
        .lines()
        .find(|l| l.starts_with(&format!("| {} | ", host())))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        row.starts_with(&format!("| {} | 0 |", host())) && row.contains("| 91 | 1200 | 100% |"),
        "{row}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for title in [
        "GPU temperature over the soak",
        "GPU SM clock over the soak",
    ] {
        assert!(html.contains(title), "no chart '{title}'");
    }
}
