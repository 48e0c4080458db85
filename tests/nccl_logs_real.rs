//! burnin's NCCL log parser on real logs: `NCCL_DEBUG=INFO` output as people posted
//! it in public issue threads (tests/fixtures/nccl-logs-real/, each with its SOURCE
//! and an EXPECT.toml written by reading the log): CloudWatch and Ray prefixes, Open
//! MPI's --tag-output, MPICH's rank prefix, pdsh, lines that lost their "NCCL INFO",
//! several processes interleaved, 2.3–2.5-era `Ring` lines, EFA through aws-ofi-nccl,
//! Slingshot, RoCE through the IBext plugin. For each: the version, the hosts, every
//! transport of its connection lines, the network family and GPUDirect RDMA.
use burnin::nccl_log::{self, Via};
use std::collections::BTreeSet;
use std::path::Path;

fn fixtures() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-logs-real");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("log.txt").exists())
        .collect();
    v.sort();
    v
}

/// What one fixture's parse got wrong, in words (empty: right).
fn check(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("log.txt")).unwrap();
    let want: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("EXPECT.toml")).unwrap()).unwrap();
    let log = nccl_log::parse(&text);
    let mut wrong = Vec::new();
    let s = |k: &str| want.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let version = s("nccl_version");
    if !version.is_empty() && !log.version.as_deref().unwrap_or("").starts_with(version) {
        wrong.push(format!("version {:?}, want {version}", log.version));
    }
    let want_hosts: BTreeSet<String> = want
        .get("hosts")
        .and_then(|h| h.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|h| h.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let hosts: BTreeSet<String> = log.hosts.iter().cloned().collect();
    if !want_hosts.is_empty() && hosts != want_hosts {
        wrong.push(format!("hosts {hosts:?}, want {want_hosts:?}"));
    }
    let vias: BTreeSet<Via> = log
        .comms
        .iter()
        .flat_map(|c| c.links.iter().map(|l| l.via.clone()))
        .collect();
    for t in want
        .get("transports")
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str())
    {
        let v = Via::parse(t);
        if !vias.contains(&v) {
            wrong.push(format!("transport {t} not read ({} read)", vias.len()));
        }
    }
    let families: BTreeSet<&str> = vias
        .iter()
        .filter_map(|v| match v {
            Via::Net { net, .. } => Some(nccl_log::net_family(net)),
            _ => None,
        })
        .collect();
    let family = match s("net_family") {
        "ib" | "roce" => Some("IB"),
        "efa" | "cxi" => Some("Libfabric"),
        "socket" => Some("Socket"),
        _ => None,
    };
    if let Some(f) = family {
        if !vias.iter().any(|v| matches!(v, Via::Net { .. })) {
            // No network connection line: the NET device lines must say it.
            let named = log
                .net_devices
                .iter()
                .any(|d| nccl_log::net_family(&d.net) == f)
                || log.network.as_deref().map(nccl_log::net_family) == Some(f);
            if !named {
                wrong.push(format!("network family {f} not read"));
            }
        } else if !families.contains(f) {
            wrong.push(format!("network family {families:?}, want {f}"));
        }
    }
    if want.get("gdr").and_then(|g| g.as_bool()) == Some(true)
        && !vias.iter().any(|v| matches!(v, Via::Net { gdr: true, .. }))
    {
        wrong.push("no GPUDirect RDMA connection read".into());
    }
    wrong
}

#[test]
fn every_real_log_reads_as_its_expectation_says() {
    let all = fixtures();
    assert!(all.len() >= 20, "{} fixtures", all.len());
    let mut failures = Vec::new();
    for d in &all {
        let w = check(d);
        if !w.is_empty() {
            failures.push(format!(
                "{}: {}",
                d.file_name().unwrap().to_string_lossy(),
                w.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// The fabric criterion on written two-host logs (`tests/fixtures/nccl-logs/
/// written-two-host/`, in the real logs' line shapes) against a topology's nic_kind.
fn judge(set: &str, kind: &str) -> burnin::transport::FabricJudgement {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-logs/written-two-host");
    let logs: Vec<_> = ["a", "b"]
        .iter()
        .map(|h| {
            nccl_log::parse(&std::fs::read_to_string(dir.join(format!("{set}-{h}.log"))).unwrap())
        })
        .collect();
    let rep = burnin::transport::report_from_logs(&logs);
    burnin::transport::judge_nccl_fabric(
        Some(&rep),
        Some(2),
        burnin::transport::Fabric::from_nic_kind(Some(kind)),
    )
}

#[test]
fn efa_and_an_ib_verbs_plugin_pass_as_what_the_topology_declares_and_fail_as_the_other() {
    use burnin::transport::FabricStatus::{Fail, Pass};
    let j = judge("efa-p5", "efa");
    assert_eq!(j.status, Pass, "{j:?}");
    assert!(
        j.measured
            .contains("NET/AWS Libfabric (provider efa) on all 2 host(s), ≥ 2 EFA device(s) each"),
        "{j:?}"
    );
    let j = judge("efa-p5", "infiniband");
    assert_eq!(j.status, Fail, "{j:?}");
    assert!(
        j.measured.contains("over NET/AWS Libfabric, provider efa"),
        "{j:?}"
    );
    // Not declared: any RDMA fabric passes, the socket fallback never.
    assert_eq!(judge("efa-p5", "ethernet").status, Pass);
    let j = judge("ibext", "infiniband");
    assert_eq!(j.status, Pass, "{j:?}");
    assert!(
        j.measured
            .contains("NET/IB on all 2 host(s), ≥ 2 HCA(s) each"),
        "{j:?}"
    );
    let j = judge("ibext", "efa");
    assert_eq!(j.status, Fail, "{j:?}");
    assert!(j.measured.contains("over NET/IBext_v8"), "{j:?}");
    assert_eq!(judge("ibext", "roce").status, Pass);
    // Slingshot is Libfabric too, but another provider.
    assert_eq!(judge("efa-p5", "slingshot").status, Fail);
}

#[test]
fn a_log_alone_places_ranks_only_as_its_lines_say() {
    // One host's excerpt of a two-node EFA job: its network connections lead to ranks
    // no line places, so their tier is unknown (never guessed as inter-node).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-logs-real");
    let log = nccl_log::parse(
        &std::fs::read_to_string(dir.join("efa-cloudwatch-table-pxn/log.txt")).unwrap(),
    );
    let s = nccl_log::summarize(&log);
    assert!(s.unknown.links > 0, "{s:?}");
    assert_eq!(s.inter.links, 0, "{s:?}");
    assert!(s.intra.p2p.contains(&"CUMEM".to_string()), "{s:?}");
    // The written pair: rank 0 on p5-a, rank 8 on p5-b by their Init lines; the send
    // 0 -> 8 is inter-node once both logs are read.
    let w = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-logs/written-two-host");
    let a = nccl_log::parse(&std::fs::read_to_string(w.join("efa-p5-a.log")).unwrap());
    assert_eq!(a.ofi_provider.as_deref(), Some("efa"));
    assert_eq!(a.rank_hosts.get(&0).map(String::as_str), Some("p5-a"));
    let rep = burnin::transport::report_from_logs(&[a]);
    // Alone, p5-a's send to rank 8 has no placed peer: unknown, not inter.
    assert_eq!(rep.hosts[0].inter.links, 0, "{rep:?}");
    assert!(rep.hosts[0].unknown.links > 0, "{rep:?}");
}

#[test]
fn launcher_prefixed_merged_streams_read_as_the_two_logs_apart() {
    // Written (none found in public threads): the two ibext logs merged line by line
    // under srun --label, torchrun's [rankN]: and kubectl logs --prefix --timestamps.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-logs");
    let read = |p: &str| nccl_log::parse(&std::fs::read_to_string(root.join(p)).unwrap());
    let apart = burnin::transport::report_from_logs(&[
        read("written-two-host/ibext-a.log"),
        read("written-two-host/ibext-b.log"),
    ]);
    assert_eq!(apart.hosts.len(), 2, "{apart:?}");
    for name in [
        "srun-label.log",
        "torchrun-rank.log",
        "kubectl-prefix-timestamps.log",
    ] {
        let log = read(&format!("written-launcher-prefixes/{name}"));
        assert_eq!(log.hosts, ["ib-a", "ib-b"], "{name}");
        assert_eq!(
            log.rank_hosts.get(&0).map(String::as_str),
            Some("ib-a"),
            "{name}"
        );
        assert_eq!(
            log.rank_hosts.get(&8).map(String::as_str),
            Some("ib-b"),
            "{name}"
        );
        let merged = burnin::transport::report_from_logs(&[log]);
        // Everything but `ranks` (which log file: one here, two apart).
        let strip = |hs: &[burnin::transport::HostTransport]| {
            let mut hs = hs.to_vec();
            hs.iter_mut().for_each(|h| h.ranks.clear());
            hs
        };
        assert_eq!(strip(&merged.hosts), strip(&apart.hosts), "{name}");
        assert_eq!(merged.hosts[1].inter.links, 2, "{name}");
        let j = burnin::transport::judge_nccl_fabric(
            Some(&merged),
            Some(2),
            burnin::transport::Fabric::from_nic_kind(Some("infiniband")),
        );
        assert_eq!(
            j.status,
            burnin::transport::FabricStatus::Pass,
            "{name}: {j:?}"
        );
    }
}
