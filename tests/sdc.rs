//! `burnin gpu --sdc` on CPU ranks (no GPU): every rank computes the host kinds (fma,
//! memory, gemm, reduce) each round and the hashes are voted on across ranks of one
//! CPU model. Healthy ranks agree over 1,000 rounds; one flipped bit is named with its
//! rank, host, kind, round and block; a rerun of one round alone (`--sdc-start`) finds
//! it again.
mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

fn sdc(np: usize, dir: &std::path::Path, extra: &[&str]) -> (Run, Value) {
    let mut c = mpirun_cmd(np);
    c.arg(bin()).args([
        "gpu",
        "--sdc",
        "300s",
        "--sdc-bytes",
        "4K",
        "--out",
        dir.to_str().unwrap(),
    ]);
    c.args(extra);
    let r = run_bounded(c, Duration::from_secs(180));
    assert_no_panic(&r);
    assert!(!r.timed_out, "{}", r.all());
    let j: Value = serde_json::from_slice(&std::fs::read(dir.join("gpu.json")).unwrap()).unwrap();
    (r, j)
}

#[test]
fn cpu_ranks_agree_and_a_flipped_bit_is_named_with_its_host_kind_round_and_block() {
    let dir = tempfile::tempdir().unwrap();
    let (r, j) = sdc(4, &dir.path().join("healthy"), &["--sdc-rounds", "1000"]);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let s = &j["sdc"];
    assert_eq!(
        (s["rounds"].as_u64(), s["findings_total"].as_u64()),
        (Some(1000), Some(0)),
        "{s}"
    );
    assert_eq!(
        s["ranks"][0]["kinds"],
        serde_json::json!(["fma", "memory", "gemm", "reduce"]),
        "{s}"
    );
    assert!(
        s["ranks"][1]["model"].as_str().unwrap().starts_with("CPU "),
        "{s}"
    );
    // The GPU criteria are NOT RUN (no GPU), the vote is judged.
    assert!(
        r.stdout
            .contains("# burnin gpu: NOT RUN: no GPU on any of the 4 rank(s)"),
        "{}",
        r.all()
    );
    assert!(
        r.stdout
            .contains("0 disagreement(s) in 1000 round(s) of 4 voting rank(s)"),
        "{}",
        r.all()
    );

    let prom = dir.path().join("sdc.prom");
    let (r, j) = sdc(
        4,
        &dir.path().join("fault"),
        &[
            "--sdc-rounds",
            "500",
            "--sdc-fault",
            "3:400:reduce:2",
            "--metrics-file",
            prom.to_str().unwrap(),
        ],
    );
    // The metrics file: 500 rounds, rank 3 named once, the others 0.
    let fams = &prom_parse(std::slice::from_ref(&prom))[0];
    assert_eq!(prom_value(fams, "burnin_gpu_sdc_rounds_total"), 500.0);
    let per_rank = prom_samples(fams, "burnin_gpu_sdc_disagreements_total");
    assert_eq!(per_rank.len(), 4, "{per_rank:?}");
    for x in per_rank {
        let want = if x["labels"]["rank"] == "3" { 1.0 } else { 0.0 };
        assert_eq!(x["value"].as_f64(), Some(want), "{x}");
        assert_eq!(x["labels"]["gpu"], "cpu", "{x}");
    }
    assert_eq!(r.code, Some(1), "{}", r.all());
    let s = &j["sdc"];
    assert_eq!(s["findings_total"], 1, "{s}");
    let f = &s["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(400), Some("reduce"), Some(2)),
        "{s}"
    );
    assert_eq!(f["ranks"], serde_json::json!([3]), "{s}");
    let host = s["ranks"][3]["host"].as_str().unwrap();
    let line =
        format!("round 400 reduce block 2: {host} rank 3 (CPU) disagree(s) with the other 3 CPU ");
    assert!(r.stdout.contains(&line), "{line}: {}", r.all());
    assert!(r.stdout.contains("gpu.sdc FAIL"), "{}", r.all());

    // Round 400 again, alone: the same inputs, the same fault, the same finding; and
    // healthy it agrees.
    let (r, j) = sdc(
        3,
        &dir.path().join("again"),
        &[
            "--sdc-start",
            "400",
            "--sdc-rounds",
            "1",
            "--sdc-fault",
            "1:400:reduce:2",
        ],
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert_eq!(j["sdc"]["first_round"], 400);
    assert_eq!(j["sdc"]["findings"][0]["round"], 400);
    assert_eq!(j["sdc"]["findings"][0]["ranks"], serde_json::json!([1]));
    // Two ranks that differ: no majority, both named.
    let (r, j) = sdc(
        2,
        &dir.path().join("two"),
        &["--sdc-rounds", "2", "--sdc-fault", "1:1:gemm:0"],
    );
    assert_eq!(r.code, Some(1), "{}", r.all());
    let f = &j["sdc"]["findings"][0];
    assert_eq!(
        (f["ranks"].clone(), f["majority"].as_bool()),
        (serde_json::json!([0, 1]), Some(false)),
        "{j}"
    );
}

#[test]
fn bad_sdc_flags_name_the_flag_and_exit_2() {
    for (args, needle) in [
        (&["--sdc", "1s", "--sdc-bytes", "1K"][..], "--sdc-bytes"),
        (&["--sdc", "1s", "--sdc-rounds", "0"][..], "--sdc-rounds"),
        (
            &["--sdc", "1s", "--sdc-fault", "1:2:tensor:3"][..],
            "--sdc-fault",
        ),
    ] {
        let mut c = mpirun_cmd(1);
        c.arg(bin()).arg("gpu").args(args);
        let r = run_bounded(c, Duration::from_secs(60));
        assert_no_panic(&r);
        assert!(r.all().contains(needle), "{args:?}: {}", r.all());
        assert_eq!(r.code, Some(2), "{args:?}: {}", r.all());
    }
}

const SIM: SimCluster = SimCluster {
    prefix: "bd-",
    subnet: "10.87.0",
};

/// The same on the simulated cluster: 4 nodes (network namespaces, real mpirun across
/// them), one CPU rank each; a bit flipped on node 3's rank is named with its host.
#[test]
fn on_the_simulated_cluster_the_vote_names_the_host() {
    let _down = require!(SIM.up_sized(4, 1, &[]));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sim");
    let c = SIM.cmd(&[
        "exec",
        "--",
        bin(),
        "gpu",
        "--sdc",
        "120s",
        "--sdc-rounds",
        "200",
        "--sdc-bytes",
        "4K",
        "--sdc-fault",
        "2:150:fma:6",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r = run_bounded(c, Duration::from_secs(180));
    assert_no_panic(&r);
    assert!(!r.timed_out, "{}", r.all());
    assert_eq!(r.code, Some(1), "{}", r.all());
    let j: Value = serde_json::from_slice(&std::fs::read(out.join("gpu.json")).unwrap()).unwrap();
    let s = &j["sdc"];
    let hosts: Vec<&str> = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    // four hosts, one rank each
    let mut distinct = hosts.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{s}");
    assert_eq!(
        (s["rounds"].as_u64(), s["findings_total"].as_u64()),
        (Some(200), Some(1)),
        "{s}"
    );
    let f = &s["findings"][0];
    assert_eq!(
        (f["round"].as_u64(), f["kind"].as_str(), f["block"].as_u64()),
        (Some(150), Some("fma"), Some(6)),
        "{s}"
    );
    assert_eq!(f["ranks"], serde_json::json!([2]), "{s}");
    let line = format!(
        "round 150 fma block 6: {} rank 2 (CPU) disagree(s) with the other 3 ",
        hosts[2]
    );
    assert!(r.stdout.contains(&line), "{line}: {}", r.all());
}
