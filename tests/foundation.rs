//! The foundation's acceptance, on the real binary under the real mpirun.
mod common;
use common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn probe_on_four_ranks_prints_four_rows_and_the_same_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("probe.json");
    let r = mpirun(4, &["probe", "--json", json.to_str().unwrap()], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let rows: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .collect();
    assert_eq!(rows.len(), 4, "{}", r.stdout);
    let v: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v.len(), 4);
    for (i, (row, rec)) in rows.iter().zip(&v).enumerate() {
        assert_eq!(rec["rank"], i);
        assert_eq!(rec["local_rank"], i, "one node: local rank = rank");
        assert_eq!(rec["node"], 0);
        assert_eq!(rec["local_size"], 4);
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], i.to_string());
        assert_eq!(cells[1], rec["host"].as_str().unwrap());
        assert_eq!(cells[3], format!("{i}/4"));
        assert!(rec["mpi_version"].as_str().unwrap().contains("Open MPI"));
    }
}

#[test]
fn probe_discovers_the_fabric_and_compares_it_with_a_topology_file() {
    let dir = tempfile::tempdir().unwrap();
    let put = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // What this machine is: one node, two ranks, no GPU.
    let same = put(
        "same.toml",
        "name = 'here'\n[node]\ngpus = 0\nranks = 2\ncount = 1\n",
    );
    let json = dir.path().join("probe.json");
    let r = mpirun(
        2,
        &[
            "probe",
            "--topology",
            &same,
            "--json",
            json.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(
        r.stdout.contains("# topology here: the nodes match it"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("socket(s)") && r.stdout.contains("GPUs (NVML): absent"),
        "{}",
        r.stdout
    );
    let v: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(v[0]["fabric"]["cpu"]["cpus_online"].as_u64().unwrap() >= 1);
    assert!(v[0]["fabric"]["gpus"]["error"]
        .as_str()
        .unwrap()
        .contains("NVML"));
    assert!(v[1].get("fabric").is_none(), "one discovery per node");

    // An 8-GPU InfiniBand node pair: every difference is named, exit 1.
    let hgx = put(
        "hgx.toml",
        "name = 'hgx'\n[node]\ngpus = 8\ngpu_model = 'H200'\ncount = 2\n[intra]\nlink = 'nvlink4'\n[inter]\nnics = 8\nnic_kind = 'infiniband'\nnic_rate_gbit = 400\n",
    );
    let r = mpirun(2, &["probe", "--topology", &hgx], LIMIT);
    assert_eq!(r.code, Some(1), "{}", r.all());
    for want in [
        "# DIFF the job spans 1 node(s); hgx expects 2",
        "0 GPU(s), hgx expects 8 — missing GPU",
        "0 infiniband NIC(s) up, hgx expects 8",
        "# verdict: FAIL",
    ] {
        assert!(r.stdout.contains(want), "{want}\n{}", r.stdout);
    }

    // A broken file: exit 2, naming file, line and field, before anything runs.
    let bad = put("bad.toml", "name = 'b'\n[node]\ngpus = 'eight'\n");
    let r = mpirun(2, &["probe", "--topology", &bad], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(
        r.stderr.contains("bad.toml:3:") && r.stderr.contains("gpus"),
        "{}",
        r.all()
    );
}

#[test]
fn nccl_without_a_driver_is_one_clear_line_and_exit_2() {
    let r = mpirun(2, &["probe", "--backend", "nccl"], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_no_panic(&r);
    let ours: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("Error"))
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "exactly one error line from burnin:\n{}",
        r.all()
    );
    assert!(
        ours[0].contains("--backend nccl") && ours[0].contains("no CUDA driver"),
        "{}",
        ours[0]
    );
    assert!(
        ours[0].contains("--backend mpi"),
        "says what to do: {}",
        ours[0]
    );
}

#[test]
fn ranks_started_with_different_flags_refuse_and_name_the_difference() {
    let mut c = mpirun_cmd(1);
    c.args([bin(), "sweep", "-b", "1K", "-e", "1K", "-n", "2"]);
    c.args([
        ":",
        "-np",
        "1",
        bin(),
        "sweep",
        "-b",
        "2K",
        "-e",
        "2K",
        "-n",
        "2",
    ]);
    let r = run_bounded(c, LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_no_panic(&r);
    assert!(r.stderr.contains("different configurations"), "{}", r.all());
    assert!(r.stderr.contains("rank 1"), "{}", r.all());
    assert!(
        r.stderr.contains("min_bytes (rank 0: 1024, here: 2048)"),
        "{}",
        r.all()
    );
    assert!(
        !r.stdout.contains("all_reduce f32"),
        "nothing ran:\n{}",
        r.stdout
    );
}

#[test]
fn bad_flag_is_exit_2_naming_the_flag_once() {
    let r = mpirun(2, &["sweep", "-b", "12Q"], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert_eq!(r.stderr.matches("bad size '12Q'").count(), 1, "{}", r.all());
    let r = mpirun(2, &["sweep", "-b", "1M", "-e", "1K"], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.all());
    assert!(r.stderr.contains("-b/--min-bytes"), "{}", r.all());
    assert_no_panic(&r);
}

#[test]
fn single_process_without_mpirun_is_a_world_of_one() {
    let mut c = std::process::Command::new(bin());
    c.arg("probe");
    let r = run_bounded(c, LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.all());
    assert!(r.stdout.contains("0/1"), "{}", r.stdout);
}

/// The two binaries: `burnin` links no libtorch (it starts on a node without one);
/// `burnin-train` keeps libtorch_cuda.so NEEDED (or tch sees no CUDA), and neither
/// carries a library path of this build machine.
#[test]
fn only_the_training_binary_links_libtorch_and_neither_has_a_build_path() {
    let readelf = |p: &std::path::Path| {
        let out = std::process::Command::new("readelf")
            .arg("-d")
            .arg(p)
            .output()
            .expect("readelf (binutils)");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let core = readelf(std::path::Path::new(bin()));
    assert!(core.contains("[libmpi.so.40]"), "{core}");
    for lib in ["libtorch", "libc10"] {
        assert!(!core.contains(lib), "burnin needs {lib}: {core}");
    }
    let train = std::path::Path::new(bin()).with_file_name("burnin-train");
    let t = readelf(&train);
    assert!(
        t.contains("NEEDED") && t.contains("[libtorch_cuda.so]"),
        "{t}"
    );
    for text in [&core, &t] {
        assert!(
            !text.contains("RUNPATH") && !text.contains("RPATH"),
            "{text}"
        );
    }
}
