//! Leaf/spine fabrics on the simulated cluster (`launch/sim-cluster up --fabric`):
//! an oversubscribed fabric on which
//! the pairs tier judged with `--fabric` names nothing, and names a slow node and a
//! slow uplink as what they are. Needs root and network namespaces (CI runs as root).
mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SIM: SimCluster = SimCluster {
    prefix: "bl-",
    subnet: "10.90.0",
};

/// The tests of this file share one cluster: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run_json(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("run.json")).expect("run.json")).expect("json")
}

fn fail_subjects(run: &serde_json::Value) -> Vec<String> {
    run["analysis"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "fail")
        .map(|f| f["subject"].as_str().unwrap().to_string())
        .collect()
}

fn pairs(fabric: &Path, extra: &[&str], out: &Path) -> serde_json::Value {
    let mut args = vec![
        "exec",
        "--",
        bin(),
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "2M",
        "-e",
        "2M",
        "--tiers",
        "pairs",
        "-w",
        "1",
        "-n",
        "6",
        "--placement",
        "out",
        "--no-transport",
        "--fabric",
        fabric.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let r = run_bounded(SIM.cmd(&args), Duration::from_secs(300));
    assert_no_panic(&r);
    assert!(matches!(r.code, Some(0) | Some(1)), "{}", r.all());
    let run = run_json(out);
    assert_eq!(
        r.code == Some(0),
        run["analysis"]["pass"] == true,
        "{}",
        r.all()
    );
    run
}

/// `--find-slow` on the fabric (the world tier only besides), its run.json's find_slow.
fn find_slow(fabric: &Path, extra: &[&str], out: &Path) -> serde_json::Value {
    let mut args = vec![
        "exec",
        "--",
        bin(),
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "2M",
        "-e",
        "2M",
        "--tiers",
        "world",
        "--find-slow",
        // On 2 cores the simulated links' rates follow the CPU: with the rest of the
        // suite running, healthy pairs inside a leaf read 0.74x of the best pair three
        // measurements in a row (0.0345 against 0.0464 GB/s), below the default 0.8.
        // The faults here read 0.25x (a node or an uplink at a quarter), judged at 0.5.
        "--outlier-fraction",
        "0.5",
        "-w",
        "1",
        "-n",
        "4",
        "--no-transport",
        "--fabric",
        fabric.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let r = run_bounded(SIM.cmd(&args), Duration::from_secs(300));
    assert_no_panic(&r);
    assert!(matches!(r.code, Some(0) | Some(1)), "{}", r.all());
    let run = run_json(out);
    assert!(run["find_slow"].is_object(), "{}", r.all());
    assert!(
        r.stdout.contains("inside each of 2 leaf switches"),
        "{}",
        r.stdout
    );
    // the verdict is the search's: PASS exactly when it named nothing
    assert_eq!(
        r.code == Some(0),
        named(&run["find_slow"]).is_empty(),
        "{}",
        r.all()
    );
    run["find_slow"].clone()
}

/// Nothing named by the search: no node, link, uplink or unresolved group.
fn named(f: &serde_json::Value) -> Vec<String> {
    let mut v = Vec::new();
    for key in ["slow_nodes", "slow_links", "unresolved", "slow_uplinks"] {
        if let Some(a) = f[key].as_array() {
            v.extend(a.iter().map(|x| format!("{key}: {x}")));
        }
    }
    v
}

/// The search in a few lines, what it named first (a failure's message leads with
/// what decided it; CI keeps only part of a long output).
fn brief(f: &serde_json::Value) -> String {
    let mut s = format!(
        "named {:?}; pairs cleared {} of {}\n",
        named(f),
        f["pairs_cleared"],
        f["pairs_total"]
    );
    for p in f["path"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  round {} {} {:.4} GB/s (node rate {:.4}) threshold {:.4}{}\n",
            p["round"],
            p["label"].as_str().unwrap_or("?"),
            p["busbw_gbps"].as_f64().unwrap_or(0.0),
            p["node_rate_gbps"].as_f64().unwrap_or(0.0),
            p["threshold_gbps"].as_f64().unwrap_or(0.0),
            if p["slow"] == true { " SLOW" } else { "" }
        ));
    }
    for key in ["notes", "class_sensitivity"] {
        if !f[key].is_null() {
            s.push_str(&format!("{key}: {}\n", f[key]));
        }
    }
    s
}

/// The map's headline numbers in a few lines (see [`brief`]).
fn map_brief(m: &serde_json::Value) -> String {
    let mut s = format!(
        "leaves ({}) {:?}; oversubscription {:.2}:1, bisection fraction {:.3}, injection {:.4} GB/s, cut {:.4} GB/s\n  cut pairs {}\n  inference: {}\n  differences {}; limits {}\n",
        m["leaves_from"],
        leaf_hosts(m),
        m["oversubscription"].as_f64().unwrap_or(0.0),
        m["bisection_fraction"].as_f64().unwrap_or(0.0),
        m["injection_gbps"].as_f64().unwrap_or(0.0),
        m["bisection_gbps"].as_f64().unwrap_or(0.0),
        m["bisection_pair_gbps"],
        m["inference"],
        m["differences"],
        m["limits"],
    );
    for l in m["leaves"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  {}: injection {:.4}, cross {:.4}\n",
            l["name"],
            l["injection_gbps"].as_f64().unwrap_or(0.0),
            l["cross_gbps"].as_f64().unwrap_or(0.0)
        ));
    }
    s
}

/// `dir/topology.conf`: two leaves of 4, listed interleaved (node0, node2, … on leaf1),
/// under one spine; one switch continued over two lines with `\`, as Slurm allows, so
/// that the simulator and burnin both read continued lines.
fn two_interleaved_leaves(dir: &Path) -> PathBuf {
    let conf = dir.join("topology.conf");
    std::fs::write(
        &conf,
        "# two leaves, nodes in rack order\nSwitchName=leaf1 Nodes=node[0,2,4,6]\n\
         SwitchName=leaf2 \\\n  Nodes=node[1,3,5,7]\nSwitchName=spine Switches=leaf[1-2]\n",
    )
    .unwrap();
    conf
}

fn status() -> String {
    run_bounded(SIM.cmd(&["status"]), Duration::from_secs(30)).all()
}

/// 8 nodes in two leaves of 4, listed interleaved (node0, node2, … on leaf1), 4:1
/// oversubscribed: the pairs tier on the fabric names nothing; a slow node is named as
/// the node; leaf2's uplink at a quarter of its rate is named as an uplink once the
/// oversubscription is declared (two leaves: every crossing pair crosses both uplinks).
#[test]
fn an_oversubscribed_leaf_spine_fabric_is_judged_by_what_it_allows() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = two_interleaved_leaves(dir.path());
    let c = conf.to_str().unwrap();
    let _down = require!(SIM.up_sized(
        8,
        1,
        &[
            "--rate",
            "400mbit",
            "--fabric",
            c,
            "--oversubscription",
            "4:1"
        ]
    ));
    let st = status();
    assert!(
        st.contains("leaf2 <-> spine: uplink 400mbit")
            && st.contains("nodes node1 node3 node5 node7"),
        "{st}"
    );

    // healthy, 4:1
    let out = dir.path().join("healthy");
    let run = pairs(&conf, &[], &out);
    assert!(
        fail_subjects(&run).is_empty(),
        "{:#}",
        run["analysis"]["findings"]
    );
    let classes = run["analysis"]["pair_classes"].as_array().unwrap();
    assert!(classes.len() >= 2, "{classes:#?}");
    assert_eq!(run["fabric"]["switches"].as_array().unwrap().len(), 3);
    // the cross-leaf pairs four to an uplink ran slower than the inside ones: the
    // fabric was there
    let inside = classes
        .iter()
        .find(|c| c["class"] == "inside one switch")
        .unwrap();
    let cross_min = classes
        .iter()
        .filter(|c| c["class"] != "inside one switch")
        .map(|c| c["median_gbps"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(
        cross_min < 0.75 * inside["median_gbps"].as_f64().unwrap(),
        "{classes:#?}"
    );

    // --find-slow on the same fabric: inside each leaf, then across; nothing named
    let f = find_slow(
        &conf,
        &["--oversubscription", "4"],
        &dir.path().join("fs-healthy"),
    );
    assert!(named(&f).is_empty(), "{}", brief(&f));
    assert_eq!(f["pairs_cleared"], f["pairs_total"], "{}", brief(&f));

    // node5's link at a quarter
    let r = run_bounded(
        SIM.cmd(&["shape", "node5=100mbit"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = pairs(&conf, &[], &dir.path().join("node5"));
    assert_eq!(
        fail_subjects(&run),
        ["node5"],
        "{:#}",
        run["analysis"]["findings"]
    );
    let r = run_bounded(
        SIM.cmd(&["shape", "node5=400mbit"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());

    // leaf2's uplink at a quarter of its 4:1 rate, declared
    let r = run_bounded(
        SIM.cmd(&["shape", "leaf2=100mbit"]),
        Duration::from_secs(30),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(status().contains("leaf2 <-> spine: uplink 100mbit"));
    let run = pairs(
        &conf,
        &["--oversubscription", "4"],
        &dir.path().join("uplink"),
    );
    let subjects = fail_subjects(&run);
    assert_eq!(
        subjects,
        ["leaf1↔spine leaf2↔spine"],
        "{:#}",
        run["analysis"]["findings"]
    );
    let text = run["analysis"]["findings"][0]["text"].as_str().unwrap();
    assert!(text.contains("cannot tell them apart"), "{text}");
    // the search names the two uplinks together, and no node
    let f = find_slow(
        &conf,
        &["--oversubscription", "4"],
        &dir.path().join("fs-uplink"),
    );
    assert_eq!(
        named(&f),
        [r#"slow_uplinks: ["leaf1↔spine","leaf2↔spine"]"#],
        "{}",
        brief(&f)
    );
}

/// The same two leaves at 2:1, one node pair's path inside leaf1 (node2+node4) at a
/// quarter of its rate: healthy first, the search names nothing and the map of the
/// declared leaves measures 2:1 within 20% (undeclared, it finds the two leaves and
/// 2:1 within 20%, or says one switch: never other leaves); then the pairs tier names that pair and
/// no node, and the search names it as a link, not a node and not an uplink.
#[test]
fn a_slow_pair_on_a_2_to_1_fabric_is_named_as_a_link() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = two_interleaved_leaves(dir.path());
    let c = conf.to_str().unwrap();
    let declared = ["--oversubscription", "2"];
    {
        let _down = require!(SIM.up_sized(
            8,
            1,
            &[
                "--rate",
                "400mbit",
                "--fabric",
                c,
                "--oversubscription",
                "2:1"
            ]
        ));
        let f = find_slow(&conf, &declared, &dir.path().join("fs-healthy"));
        assert!(named(&f).is_empty(), "{}", brief(&f));
        assert_eq!(f["pairs_cleared"], f["pairs_total"], "{}", brief(&f));
        // 1.83-1.94 measured here at 400 Mbit/s, three runs, quiet
        let m = map(
            &[&["--fabric", c][..], &declared].concat(),
            &dir.path().join("map"),
        );
        let r = m["oversubscription"].as_f64().unwrap();
        assert!((1.6..=2.4).contains(&r), "{}", map_brief(&m));
        assert!(
            m["differences"].as_array().unwrap().is_empty(),
            "{}",
            map_brief(&m)
        );
        // undeclared: at 2:1 only the rounds whose pairs all cross run slow, and
        // their pairs' two sides are the leaves; where a round's pairs did not
        // overlap the map says one switch (found in 12 of 14 runs here, 1.85-2.09:1).
        // Never other leaves.
        let m = map(&[], &dir.path().join("map-found"));
        assert_eq!(m["leaves_from"], "measured", "{}", map_brief(&m));
        let found = leaf_hosts(&m);
        if found.len() == 1 {
            assert!(
                m["inference"].as_str().unwrap().contains("one switch"),
                "{}",
                map_brief(&m)
            );
        } else {
            assert_eq!(
                found,
                [
                    ["node0", "node2", "node4", "node6"],
                    ["node1", "node3", "node5", "node7"]
                ],
                "{}",
                map_brief(&m)
            );
            let r = m["oversubscription"].as_f64().unwrap();
            assert!((1.6..=2.4).contains(&r), "{}", map_brief(&m));
        }
    }
    let _down = require!(SIM.up_sized(
        8,
        1,
        &[
            "--rate",
            "400mbit",
            "--fabric",
            c,
            "--oversubscription",
            "2:1",
            "--shape-pair",
            "node2+node4=100mbit"
        ]
    ));
    let run = pairs(&conf, &declared, &dir.path().join("pair"));
    assert_eq!(
        fail_subjects(&run),
        ["node2+node4"],
        "{:#}",
        run["analysis"]["findings"]
    );
    let f = find_slow(&conf, &declared, &dir.path().join("fs-pair"));
    assert_eq!(
        named(&f),
        [r#"slow_links: ["node2","node4"]"#],
        "{}",
        brief(&f)
    );
}

/// Healthy, at 1:1, 2:1 and 4:1 on the same two leaves of 4: the pairs tier and
/// `--find-slow` (the ratio declared) name nothing, three runs in a row each, then
/// three more beside a CPU hog (two busy loops). On 2 cores the simulated links'
/// rates follow the CPU: under the hog healthy pairs spread down to about half the best
/// (tests/find_slow.rs), so the hog's runs judge at 0.5, as `find_slow` here always
/// does; the quiet pairs tier keeps the default 0.8.
#[test]
fn healthy_fabrics_name_nothing_three_runs_in_a_row_quiet_and_beside_a_cpu_hog() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = two_interleaved_leaves(dir.path());
    let c = conf.to_str().unwrap();
    for ratio in ["1", "2", "4"] {
        let over = format!("{ratio}:1");
        let _down = require!(SIM.up_sized(
            8,
            1,
            &[
                "--rate",
                "400mbit",
                "--fabric",
                c,
                "--oversubscription",
                &over
            ]
        ));
        let declared = ["--oversubscription", ratio];
        for hog in [false, true] {
            let _hog = hog.then(CpuHog::start);
            let mut pairs_extra = declared.to_vec();
            if hog {
                pairs_extra.extend(["--outlier-fraction", "0.5"]);
            }
            for k in 0..3 {
                let what = format!("{over}, run {k}{}", if hog { ", CPU hog" } else { "" });
                let tag = format!("{ratio}-{hog}-{k}");
                let run = pairs(&conf, &pairs_extra, &dir.path().join(format!("p{tag}")));
                assert!(
                    fail_subjects(&run).is_empty(),
                    "{what}: {:#}",
                    run["analysis"]["findings"]
                );
                let f = find_slow(&conf, &declared, &dir.path().join(format!("f{tag}")));
                assert!(named(&f).is_empty(), "{what}: {}", brief(&f));
                assert_eq!(
                    f["pairs_cleared"],
                    f["pairs_total"],
                    "{what}: {}",
                    brief(&f)
                );
            }
        }
    }
}

/// A fabric that does not hold the job's hosts is a usage error before anything runs.
#[test]
fn a_fabric_without_the_jobs_hosts_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topology.conf");
    std::fs::write(&conf, "SwitchName=leaf1 Nodes=gpu[01-04]\n").unwrap();
    let r = run_bounded(
        {
            let mut c = mpirun_cmd(2);
            c.args([
                bin(),
                "sweep",
                "--backend",
                "mpi",
                "--tiers",
                "pairs",
                "-b",
                "64K",
                "-e",
                "64K",
                "--fabric",
                conf.to_str().unwrap(),
            ]);
            c
        },
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.all().contains("--fabric") && r.all().contains("no switch holds"),
        "{}",
        r.all()
    );
    let bad = dir.path().join("bad.conf");
    std::fs::write(&bad, "SwitchName=leaf1 Nodes=n[1-\n").unwrap();
    let r = run_bounded(
        {
            let mut c = mpirun_cmd(2);
            c.args([
                bin(),
                "sweep",
                "--backend",
                "mpi",
                "--fabric",
                bad.to_str().unwrap(),
            ]);
            c
        },
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.all().contains("bad.conf:1"), "{}", r.all());
    let _ = root();
}

/// `--fabric-map` on a sweep: its fabric_map.
fn map(extra: &[&str], out: &Path) -> serde_json::Value {
    let mut args = vec![
        "exec",
        "--",
        bin(),
        "sweep",
        "--backend",
        "mpi",
        "-c",
        "all_reduce",
        "-b",
        "2M",
        "-e",
        "2M",
        "--tiers",
        "world",
        "--fabric-map",
        "-w",
        "2",
        "-n",
        "6",
        "--no-transport",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let r = run_bounded(SIM.cmd(&args), Duration::from_secs(300));
    assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("# fabric map ("), "{}", r.stdout);
    run_json(out)["fabric_map"].clone()
}

fn leaf_hosts(m: &serde_json::Value) -> Vec<Vec<String>> {
    m["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_value(l["hosts"].clone()).unwrap())
        .collect()
}

/// The fabric map from measurements alone: two interleaved leaves of 4 at 4:1 are
/// found and their oversubscription measured; a declaration with two nodes swapped is
/// told apart from what the nodes answer; at 1:1 the nodes answer as one switch; and
/// `burnin compare` shows the two fabrics side by side.
#[test]
fn the_fabric_map_finds_the_leaves_and_two_fabrics_compare() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = two_interleaved_leaves(dir.path());
    let c = conf.to_str().unwrap();
    let _down = require!(SIM.up_sized(
        8,
        1,
        &[
            "--rate",
            "200mbit",
            "--fabric",
            c,
            "--oversubscription",
            "4"
        ]
    ));
    let four = dir.path().join("four");
    let m = map(&[], &four);
    assert_eq!(m["leaves_from"], "measured", "{}", map_brief(&m));
    assert_eq!(
        leaf_hosts(&m),
        [
            ["node0", "node2", "node4", "node6"],
            ["node1", "node3", "node5", "node7"]
        ],
        "{}",
        map_brief(&m)
    );
    // Within 20% of the shaped 4:1 (3.87-4.30 measured here, five runs, quiet).
    let r = m["oversubscription"].as_f64().unwrap();
    assert!((3.2..=4.8).contains(&r), "{}", map_brief(&m));
    let f = m["bisection_fraction"].as_f64().unwrap();
    assert!((0.2..=0.32).contains(&f), "{}", map_brief(&m));

    // node4 and node5 declared on each other's leaf
    let wrong = dir.path().join("wrong.conf");
    std::fs::write(
        &wrong,
        "SwitchName=leaf1 Nodes=node[0,2,5,6]\nSwitchName=leaf2 Nodes=node[1,3,4,7]\n\
         SwitchName=spine Switches=leaf[1-2]\n",
    )
    .unwrap();
    let m = map(
        &[
            "--fabric",
            wrong.to_str().unwrap(),
            "--oversubscription",
            "4",
        ],
        &dir.path().join("declared"),
    );
    assert_eq!(m["leaves_from"], "declared", "{}", map_brief(&m));
    let diffs = m["differences"].to_string();
    assert!(
        diffs.contains(
            "node5 answers as a member of leaf2 (with node1, node3, node7), declared leaf1"
        ) && diffs.contains("node4 answers as a member of leaf1"),
        "{}",
        map_brief(&m)
    );

    // the same nodes non-blocking
    assert!(SIM.start_sized(
        8,
        1,
        &[
            "--rate",
            "200mbit",
            "--fabric",
            c,
            "--oversubscription",
            "1"
        ]
    ));
    let one = dir.path().join("one");
    let m = map(&[], &one);
    assert_eq!(leaf_hosts(&m).len(), 1, "{}", map_brief(&m));
    assert!(
        m["inference"].as_str().unwrap().contains("one switch"),
        "{}",
        map_brief(&m)
    );
    // 1.01-1.20:1 quiet (1.20 where two of the four streamed cut pairs read the
    // slower of a pair's two rates in both runs): within 30%, not the 20% the 4:1
    // reading holds
    let r1 = m["oversubscription"].as_f64().unwrap();
    assert!((0.8..=1.3).contains(&r1), "{}", map_brief(&m));

    let r = run_bounded(
        {
            let mut c = std::process::Command::new(bin());
            c.args(["compare", one.to_str().unwrap(), four.to_str().unwrap()]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("## Fabric"), "{}", r.stdout);
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("| oversubscription (measured, :1) |"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(row.contains(&format!("| {r1:.1} |")), "{row}");
    assert!(
        r.stdout.contains("| leaves (map) | 1 | 2 |"),
        "{}",
        r.stdout
    );
}

/// One sweep of `colls` from 4 KiB to 64 MiB over node0 and node1 (default sampler, as
/// a user runs it): each collective's points in size order.
fn size_sweep(colls: &str, out: &Path) -> Vec<serde_json::Value> {
    let r = run_bounded(
        SIM.cmd(&[
            "exec",
            "--",
            bin(),
            "sweep",
            "--backend",
            "mpi",
            "-c",
            colls,
            "-b",
            "4K",
            "-e",
            "64M",
            "-f",
            "4",
            "--placement",
            "out",
            "--tiers",
            "world",
            "--no-transport",
            "--out",
            out.to_str().unwrap(),
        ]),
        Duration::from_secs(400),
    );
    assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let run = run_json(out);
    let pts = run["points"].as_array().unwrap().clone();
    assert_eq!(pts.len(), 8 * colls.split(',').count(), "{}", r.all());
    pts
}

/// Every point's bytes over its time (the mean, as nccl-tests reports) stays under the
/// link that carries it, from 4 KiB to 64 MiB; all_reduce's median too (a rooted
/// collective's median reads how the packets bunch, not the link: its root runs
/// ahead); broadcast holds the link's rate at 1 MiB and above.
fn assert_capped(pts: &[serde_json::Value], link_gbps: f64, what: &str) {
    let show = |p: &serde_json::Value| {
        format!(
            "{} {} B: median {:.4}, mean {:.4} GB/s",
            p["collective"], p["bytes"], p["busbw_gbps"], p["busbw_mean_gbps"]
        )
    };
    let all: Vec<String> = pts.iter().map(show).collect();
    for p in pts {
        let mean = p["busbw_mean_gbps"].as_f64().unwrap();
        assert!(
            mean > 0.0 && mean <= 1.1 * link_gbps,
            "{what}: {} over a {link_gbps} GB/s link\n{all:#?}",
            show(p)
        );
        if p["collective"] == "all_reduce" {
            let median = p["busbw_gbps"].as_f64().unwrap();
            assert!(median <= 1.1 * link_gbps, "{what}: {}\n{all:#?}", show(p));
        }
        if p["collective"] == "broadcast" && p["bytes"].as_u64().unwrap() >= 1 << 20 {
            assert!(mean >= 0.8 * link_gbps, "{what}: {}\n{all:#?}", show(p));
        }
    }
}

/// The simulated links hold their rate at every message size: a link's token bucket
/// (250 µs of its rate, at least two 32 KiB packets) does not let small messages pass
/// at the veth's own speed. Two nodes on two leaves: first the uplinks (500 Mbit/s)
/// carry the pair, then, the uplinks unshaped, the node links (1 Gbit/s).
#[test]
fn links_and_uplinks_hold_their_rate_from_4_kib_to_64_mib() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topology.conf");
    std::fs::write(
        &conf,
        "SwitchName=leaf1 Nodes=node0\nSwitchName=leaf2 Nodes=node1\n\
         SwitchName=spine Switches=leaf[1-2]\n",
    )
    .unwrap();
    let c = conf.to_str().unwrap();
    let _down = require!(SIM.up_sized(
        2,
        1,
        &[
            "--rate",
            "1gbit",
            "--fabric",
            c,
            "--uplink",
            "leaf1=500mbit",
            "--uplink",
            "leaf2=500mbit"
        ]
    ));
    let pts = size_sweep("all_reduce,broadcast", &dir.path().join("uplinks"));
    assert_capped(&pts, 0.0625, "the uplinks at 500 Mbit/s");

    for leaf in ["leaf1", "leaf2"] {
        let r = run_bounded(
            SIM.cmd(&["shape", &format!("{leaf}=none")]),
            Duration::from_secs(30),
        );
        assert_eq!(r.code, Some(0), "{}", r.all());
    }
    let st = status();
    assert!(st.contains("leaf1 <-> spine: uplink none"), "{st}");
    let pts = size_sweep("broadcast", &dir.path().join("links"));
    assert_capped(&pts, 0.125, "the node links at 1 Gbit/s");
}
