//! One node with no ssh: Open MPI 4.x's mpirun refuses to start even local ranks
//! when neither ssh nor rsh is on PATH (exit 243), and CUDA base images often lack
//! openssh-client. `burnin run` gives a local mpirun Open MPI's isolated launcher
//! there (src/process/remote_shell.rs). Tested with ssh hidden in a private mount
//! namespace (bind-mounted /dev/null, not executable), so the machine's own ssh is
//! never touched.
mod common;

use common::run_bounded;
use std::process::Command;
use std::time::Duration;

/// `script` in bash, in a private mount namespace where /usr/bin/ssh (and rsh, where
/// there is one) is /dev/null.
fn without_ssh(script: &str) -> Command {
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "bash", "-euc"])
        .arg(format!(
            "for p in /usr/bin/ssh /usr/bin/rsh /bin/ssh /bin/rsh; do \
           if [ -e \"$p\" ] && [ ! -L \"$p\" ]; then mount --bind /dev/null \"$p\"; fi; done; \
         ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; {script}"
        ));
    c.env_remove("OMPI_MCA_plm")
        .env_remove("OMPI_MCA_plm_rsh_agent")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

#[test]
fn burnin_run_with_a_local_mpirun_works_on_a_node_without_ssh() {
    // The premise: here, a plain mpirun fails as on a bare CUDA image.
    let plain = run_bounded(
        without_ssh("exec mpirun --oversubscribe -np 1 true"),
        Duration::from_secs(60),
    );
    assert_eq!(
        plain.code,
        Some(243),
        "mpirun without ssh should abort with 243: {}",
        plain.all()
    );
    assert!(plain.all().contains("plm_rsh_agent"), "{}", plain.all());

    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("one-node.toml");
    std::fs::write(
        &card,
        r#"name = "one-node-no-ssh"
description = "one node, two ranks, a local mpirun, no ssh on PATH"
launch = "mpirun --oversubscribe --bind-to none -np 2"
backend = "mpi"
step_timeout_s = 60
[probe]
timeout_s = 60
[probe.criteria]
nodes = 1
ranks_per_node = 2
[sweep]
collectives = ["all_reduce"]
tiers = ["world"]
min_bytes = "64K"
max_bytes = "256K"
budget_s = 0.1
timeout_s = 120
[sweep.criteria]
zero_wrong = true
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let r = run_bounded(
        without_ssh(&format!(
            "exec {} run --card {} --out {}",
            common::bin(),
            card.display(),
            out.display()
        )),
        Duration::from_secs(300),
    );
    common::assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{}", r.all());
    let acc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("acceptance.json")).unwrap())
            .unwrap();
    assert_eq!(acc["outcome"], "pass", "{}", r.all());
    // The probe criterion saw both ranks on this one node, started by the local launcher.
    let ran = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "probe.ran")
        .expect("a probe.ran criterion");
    assert_eq!(ran["status"], "pass");
    assert!(
        ran["measured"]
            .as_str()
            .unwrap()
            .starts_with("2 rank(s) on 1 node"),
        "{ran}"
    );
    let sweep = acc["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["phase"] == "sweep")
        .count();
    assert!(sweep > 0, "no sweep criterion judged: {acc}");
}
