//! Which path the traffic took: NCCL INFO logs of several versions
//! (tests/fixtures/nccl-logs) read into transports, the fabric criterion judged on
//! them, Open MPI 4.1.4's captured BTL lines, and a real sweep under mpirun.
mod common;
use burnin::mpi_log;
use burnin::nccl_log::{self, NcclLog, NcclLogSummary, Via};
use burnin::transport::{self, FabricStatus};
use common::*;
use std::path::PathBuf;
use std::time::Duration;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every log of a fixture folder, in file-name order.
fn logs(folder: &str) -> Vec<NcclLog> {
    let dir = fixtures().join("nccl-logs").join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}", dir.display());
    files
        .iter()
        .map(|f| nccl_log::parse(&std::fs::read_to_string(f).unwrap()))
        .collect()
}

fn one(folder: &str) -> (NcclLog, NcclLogSummary) {
    let mut l = logs(folder);
    assert_eq!(l.len(), 1, "{folder}");
    let log = l.remove(0);
    let s = nccl_log::summarize(&log);
    (log, s)
}

#[test]
fn nccl_2_18_inside_a_dgx_a100_goes_over_nvlink_p2p() {
    let (log, s) = one("nvlink-p2p-2.18");
    assert_eq!(s.version.as_deref(), Some("2.18.5+cuda12.2"));
    assert_eq!(s.host.as_deref(), Some("dgx-a100-07"));
    assert_eq!(s.pid, Some(41211));
    assert_eq!(s.network.as_deref(), Some("IB"));
    assert_eq!(s.net_devices.len(), 8);
    assert_eq!(s.nvls_available, Some(false));
    assert_eq!(log.comms.len(), 1);
    let c = &log.comms[0];
    assert_eq!((c.rank, c.nranks, c.complete), (Some(0), Some(8), true));
    assert_eq!(c.comm_id.as_deref(), Some("0x8f3e2a17c4d5b611"));
    // Ring and tree both use 0 -> 1 on channels 0-3: one link, 8 channel lines.
    assert_eq!(c.links.len(), 1);
    assert_eq!(c.links[0].channels, 8);
    assert_eq!(s.intra.p2p, vec!["IPC"]);
    assert_eq!(s.intra.paths, vec!["NVL"]);
    assert!(!s.intra.shm && !s.intra.nvls);
    assert!(s.inter.is_empty(), "{:?}", s.inter);
    assert_eq!(s.intra.describe(), "P2P/IPC over NVLink");
}

#[test]
fn nccl_2_18_without_peer_access_goes_through_host_shared_memory() {
    let (log, s) = one("shm-2.18");
    assert_eq!(s.version.as_deref(), Some("2.18.3+cuda12.2"));
    assert!(s.no_ib_device);
    assert_eq!(s.network.as_deref(), Some("Socket"));
    assert_eq!(log.comms[0].links.len(), 1);
    assert!(matches!(log.comms[0].links[0].via, Via::Shm { .. }));
    assert!(s.intra.shm && s.intra.p2p.is_empty());
    assert_eq!(s.intra.describe(), "SHM (host memory)");
    assert!(s.inter.is_empty());
}

#[test]
fn nccl_2_21_across_nodes_uses_every_hca_with_gpudirect_rdma() {
    let logs = logs("ib-gdr-2.21");
    assert_eq!(logs.len(), 4);
    for l in &logs {
        assert_eq!(l.version.as_deref(), Some("2.21.5+cuda12.4"));
        assert_eq!(l.gdr_enabled(), Some(true));
        assert_eq!(l.comms.len(), 1);
        assert_eq!(l.comms[0].nranks, Some(4));
    }
    let rep = transport::report_from_logs(&logs);
    assert_eq!(rep.hosts.len(), 2);
    for h in &rep.hosts {
        assert_eq!(h.logs, 2, "{}", h.host);
        assert_eq!(h.inter.ib_devices(), vec!["mlx5_0", "mlx5_1"], "{}", h.host);
        let ib = &h.inter.net[0];
        assert_eq!((ib.net.as_str(), ib.family.as_str()), ("IB", "IB"));
        assert!(ib.links > 0 && ib.gdr_links == ib.links, "{ib:?}");
        assert!(!h.inter.uses_socket());
        assert_eq!(h.intra.p2p, vec!["CUMEM"]);
        assert_eq!(
            h.inter.describe(),
            "NET/IB over mlx5_0, mlx5_1 (GPUDirect RDMA)"
        );
        assert_eq!(h.gdr_enabled, Some(true));
    }
    assert_eq!(rep.hosts[0].host, "hgx-b17");
    assert_eq!(rep.hosts[0].intra.describe(), "P2P/CUMEM over NVLink");
}

#[test]
fn nccl_2_23_on_roce_without_peermem_has_no_gpudirect_rdma() {
    let logs = logs("roce-no-gdr-2.23");
    for l in &logs {
        assert_eq!(l.gdr_enabled(), Some(false));
        assert_eq!(l.net_devices[0].detail, "1/RoCE");
        // 2.22+ connects lazily: the connections follow Init COMPLETE and still
        // belong to the communicator.
        assert_eq!(l.comms.len(), 1);
        assert!(l.comms[0].complete);
        assert_eq!(l.comms[0].links.len(), 4, "{:?}", l.comms[0].links);
    }
    let rep = transport::report_from_logs(&logs);
    let h = &rep.hosts[0];
    assert_eq!(h.host, "l40s-n03");
    assert_eq!(h.gdr_enabled, Some(false));
    assert_eq!(h.inter.net[0].gdr_links, 0);
    assert_eq!(
        h.inter.describe(),
        "NET/IB over mlx5_0, mlx5_1 (no GPUDirect RDMA)"
    );
    assert!(h.intra.is_empty());
}

#[test]
fn nccl_2_21_without_ib_devices_falls_back_to_sockets() {
    let logs = logs("socket-fallback-2.21");
    let s = nccl_log::summarize(&logs[0]);
    assert!(s.no_ib_device);
    assert_eq!(s.network.as_deref(), Some("Socket"));
    // NCCL 2.19+ prints a GPUDirect line for sockets too; it means nothing there.
    assert!(s.gdr.is_empty(), "{:?}", s.gdr);
    // One process's file alone does not say where its peers are: its socket
    // connections are of unknown tier (the two hosts' files together place them).
    assert!(s.inter.is_empty(), "{:?}", s.inter);
    assert!(s.unknown.uses_socket());
    assert!(s.unknown.ib_devices().is_empty());
    assert_eq!(s.unknown.describe(), "NET/Socket over eth0");
    let rep = transport::report_from_logs(&logs);
    assert!(rep.hosts.iter().all(|h| h.inter.uses_socket()), "{rep:?}");
}

#[test]
fn nccl_2_26_on_an_h100_node_sets_up_nvls_and_names_the_algorithms() {
    let (log, s) = one("nvls-2.26");
    assert_eq!(s.version.as_deref(), Some("2.26.5+cuda12.8"));
    assert_eq!(s.nvls_available, Some(true));
    assert_eq!(log.comms.len(), 1);
    let c = &log.comms[0];
    assert_eq!(c.nvls_channels, Some(16));
    assert!(
        c.nvls && !c.collnet,
        "16 'collnet channels' are rings, not CollNet"
    );
    assert_eq!(c.links.len(), 1);
    assert_eq!(c.links[0].channels, 4);
    assert_eq!(c.algorithms, vec!["RING/LL", "NVLS/SIMPLE"]);
    assert_eq!(s.intra.describe(), "P2P/CUMEM over NVLink; NVLS");
    assert!(s.inter.is_empty());
}

#[test]
fn fabric_criterion_fails_on_the_socket_fallback_and_passes_on_infiniband() {
    // Socket fallback: fails, naming the host and the interface.
    let rep = transport::report_from_logs(&logs("socket-fallback-2.21"));
    let j = transport::judge_nccl_fabric(Some(&rep), Some(1), transport::Fabric::Ib);
    assert_eq!(j.status, FabricStatus::Fail, "{j:?}");
    assert!(
        j.measured.contains("gpu-a") && j.measured.contains("NET/Socket (eth0)"),
        "{j:?}"
    );
    assert!(j.detail.contains("gpu-b"), "{j:?}");
    // InfiniBand with GPUDirect RDMA on both HCAs of both hosts: passes.
    let rep = transport::report_from_logs(&logs("ib-gdr-2.21"));
    let j = transport::judge_nccl_fabric(Some(&rep), Some(2), transport::Fabric::Ib);
    assert_eq!(j.status, FabricStatus::Pass, "{j:?}");
    assert!(j.measured.contains("NET/IB on all 2 host(s)"), "{j:?}");
    // ... but not when the topology promised 8 HCAs per node.
    let j = transport::judge_nccl_fabric(Some(&rep), Some(8), transport::Fabric::Ib);
    assert_eq!(j.status, FabricStatus::Fail, "{j:?}");
    assert!(
        j.measured
            .contains("hgx-b17: 2 of 8 HCA(s) carried inter-node traffic (mlx5_0, mlx5_1)"),
        "{j:?}"
    );
    // RoCE without GPUDirect RDMA is still the RDMA fabric.
    let rep = transport::report_from_logs(&logs("roce-no-gdr-2.23"));
    assert_eq!(
        transport::judge_nccl_fabric(Some(&rep), Some(2), transport::Fabric::Ib).status,
        FabricStatus::Pass
    );
    // One node: nothing crosses nodes, nothing to judge.
    let rep = transport::report_from_logs(&logs("nvls-2.26"));
    assert_eq!(
        transport::judge_nccl_fabric(Some(&rep), Some(8), transport::Fabric::Ib).status,
        FabricStatus::NotApplicable
    );
}

#[test]
fn open_mpi_4_1_4_captured_lines_name_each_peers_btl() {
    let text =
        std::fs::read_to_string(fixtures().join("mpi-logs/ompi-4.1.4-vader-rank0.log")).unwrap();
    let log = mpi_log::parse(&text, Some(21352));
    assert_eq!(log.pml.as_deref(), Some("ob1"));
    assert_eq!(log.btls_ready, vec!["tcp", "vader", "self"]);
    assert_eq!(log.tcp_interfaces, vec!["eth0"]);
    let peers: Vec<(usize, Vec<String>)> =
        log.peers.iter().map(|p| (p.peer, p.btls.clone())).collect();
    assert_eq!(
        peers,
        vec![
            (0, vec!["self".to_string()]),
            (1, vec!["vader".to_string()])
        ]
    );
    assert_eq!(log.peers[1].node, "vm");
    // Every line of that file is verbose output: none goes on to the terminal.
    assert!(text.lines().all(mpi_log::is_verbose));

    let text =
        std::fs::read_to_string(fixtures().join("mpi-logs/ompi-4.1.4-tcp-rank0.log")).unwrap();
    let log = mpi_log::parse(&text, None);
    assert_eq!(log.pid, Some(21947));
    assert_eq!(log.peers[1].btls, vec!["tcp"]);
    assert_eq!(log.tcp_connections, vec![(1, "192.0.2.2".to_string())]);
    assert!(text.lines().all(mpi_log::is_verbose));
}

/// Both ranks on this one host: rank 0 reaches rank 1 through shared memory.
#[test]
fn a_sweep_under_mpirun_records_shared_memory_between_ranks_of_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let r = mpirun(
        2,
        &[
            "sweep",
            "--backend",
            "mpi",
            "-c",
            "all_reduce",
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "8",
            "-n",
            "5",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert_no_panic(&r);
    assert!(
        r.stdout
            .contains("#   world  intra-node: shared memory (vader)"),
        "{}",
        r.stdout
    );
    // Open MPI's verbose output went to the files, not to the terminal.
    assert!(!r.stderr.contains("mca: bml"), "{}", r.stderr);
    let files: Vec<PathBuf> = std::fs::read_dir(out.join("mpi-logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        !out.join("nccl-logs").exists(),
        "no NCCL ran: no empty NCCL log folder"
    );
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    let t = &run["transport"];
    assert_eq!(t["backend"], "mpi", "{t}");
    assert_eq!(t["pml"][0], "ob1", "{t}");
    assert_eq!(t["tiers"][0]["tier"], "world", "{t}");
    assert_eq!(t["tiers"][0]["intra_node"], "shared memory (vader)", "{t}");
    assert!(t["tiers"][0]["inter_node"].is_null(), "{t}");
    // What burnin set for itself is not recorded as the user's environment.
    let env = run["provenance"]["env"].to_string();
    assert!(!env.contains("btl_base_verbose"), "{env}");
    // The report shows the transports; judged against an InfiniBand topology, the
    // fabric criterion is not applicable to an MPI run...
    let r = common::run_bounded(
        {
            let mut c = std::process::Command::new(bin());
            c.args(["report", out.to_str().unwrap()]);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("### Transports"), "{md}");
    assert!(md.contains("| world | shared memory (vader) | - |"), "{md}");
    assert!(
        !md.contains("RDMA fabric"),
        "no IB topology, no criterion:\n{md}"
    );
    let topo = burnin::topology::file::Topology::load(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("topologies/hgx-h200-ib.toml"),
    )
    .unwrap();
    let mut run = run;
    run["topology"] = serde_json::to_value(&topo).unwrap();
    let judged = dir.path().join("judged");
    std::fs::create_dir_all(&judged).unwrap();
    let report = |run: &serde_json::Value| -> String {
        std::fs::write(judged.join("run.json"), serde_json::to_vec(run).unwrap()).unwrap();
        let mut c = std::process::Command::new(bin());
        c.args(["report", judged.to_str().unwrap()]);
        let r = common::run_bounded(c, Duration::from_secs(60));
        assert_eq!(r.code, Some(0), "{}", r.all());
        std::fs::read_to_string(judged.join("report.md")).unwrap()
    };
    let md = report(&run);
    let row = md
        .lines()
        .find(|l| l.contains("RDMA fabric"))
        .unwrap_or_else(|| panic!("no fabric criterion:\n{md}"));
    assert!(row.contains("NOT RUN"), "{row}");
    assert!(
        md.contains(
            "`sweep.nccl_transport` (NOT RUN): not applicable: the sweep ran on the mpi backend"
        ),
        "{md}"
    );
    // ... and fails, naming the host, on NCCL logs that fell back to sockets.
    let socket = transport::report_from_logs(&logs("socket-fallback-2.21"));
    run["transport"] = serde_json::to_value(&socket).unwrap();
    let md = report(&run);
    let row = md.lines().find(|l| l.contains("RDMA fabric")).unwrap();
    assert!(
        row.contains("FAIL") && row.contains("gpu-a: inter-node traffic over NET/Socket"),
        "{row}"
    );
    assert!(
        md.contains("| gpu-a | 1 of 1 | 2.21.5+cuda12.4 | Socket | NET/Socket over eth0 | - | - |"),
        "{md}"
    );
    // --no-transport: nothing captured, nothing recorded.
    let out2 = dir.path().join("quiet");
    let r = mpirun(
        2,
        &[
            "sweep",
            "--backend",
            "mpi",
            "--no-transport",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "2",
            "--out",
            out2.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(!out2.join("mpi-logs").exists());
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out2.join("run.json")).unwrap()).unwrap();
    assert!(run.get("transport").is_none(), "{run}");
}

/// The wiring of an NCCL sweep without a GPU: the four ranks' logs of the IB fixture
/// as if burnin had created one world communicator on each, tied to the tier by
/// creation order and split into intra/inter-node by the node map.
#[test]
fn nccl_logs_become_per_tier_transports_through_the_node_map() {
    use burnin::backend::BackendKind;
    use burnin::transport::{CommRecord, RankTransport, TierGroups};
    let node_of = [0, 0, 1, 1];
    let hosts = ["hgx-b17".to_string(), "hgx-b18".to_string()];
    let world = vec![CommRecord {
        tier: burnin::kinds::TierKind::World,
        group: 0,
        members: vec![0, 1, 2, 3],
    }];
    let ranks: Vec<RankTransport> = logs("ib-gdr-2.21")
        .iter()
        .enumerate()
        .map(|(rank, log)| {
            let mut notes = Vec::new();
            let n = transport::rank_nccl(log, &world, rank, &node_of, &mut notes);
            assert!(notes.is_empty(), "{notes:?}");
            assert_eq!(n.comms.len(), 1);
            RankTransport {
                rank,
                host: hosts[node_of[rank]].clone(),
                nccl: Some(n),
                ..RankTransport::default()
            }
        })
        .collect();
    let tiers = vec![TierGroups {
        tier: burnin::kinds::TierKind::World,
        groups: vec![vec![0, 1, 2, 3]],
    }];
    let rep = transport::build_report(BackendKind::Nccl, &ranks, &node_of, &hosts, &tiers);
    assert_eq!(rep.backend, "nccl");
    let w = &rep.tiers[0];
    assert_eq!(w.intra_node.as_deref(), Some("P2P/CUMEM over NVLink"));
    assert_eq!(
        w.inter_node.as_deref(),
        Some("NET/IB over mlx5_0, mlx5_1 (GPUDirect RDMA)")
    );
    assert_eq!(rep.hosts.len(), 2);
    assert_eq!(rep.hosts[1].ranks, vec![2, 3]);
    assert_eq!(
        transport::judge_nccl_fabric(Some(&rep), Some(2), transport::Fabric::Ib).status,
        FabricStatus::Pass
    );
    let text = transport::render_lines(&rep);
    assert!(
        text.contains("#   world  intra-node: P2P/CUMEM over NVLink; inter-node: NET/IB over mlx5_0, mlx5_1 (GPUDirect RDMA)"),
        "{text}"
    );
    // A log that does not line up with what burnin created (here: two
    // communicators recorded, one in the log) is reported per host only.
    let two = vec![world[0].clone(), world[0].clone()];
    let mut notes = Vec::new();
    let log = &logs("ib-gdr-2.21")[1];
    let n = transport::rank_nccl(log, &two, 1, &node_of, &mut notes);
    assert!(n.comms.is_empty());
    assert_eq!(n.inter.ib_devices(), vec!["mlx5_1"]);
    assert!(notes[0].contains("do not line up"), "{notes:?}");
}
