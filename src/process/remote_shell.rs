//! One node needs no ssh: Open MPI 4.x's `mpirun` refuses to start, even for ranks on
//! its own node, when its rsh launcher finds neither `ssh` nor `rsh` on PATH (exit 243,
//! "plm_rsh_agent: ssh : rsh ... could not be found"), and CUDA base images often ship
//! without openssh-client. When burnin starts an `mpirun` that names no other host and
//! no launcher of its own, on a machine with no remote shell, it selects Open MPI's
//! `isolated` launcher (local ranks only) for it through `OMPI_MCA_plm`. Anything the
//! user chose (`OMPI_MCA_plm*` in the environment, `--mca plm…`, a host list) is left
//! alone, and so is every launcher that is not an mpirun (srun, sim-cluster, a
//! wrapper script).
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Arguments that put ranks on other hosts or pick the launcher: with any of them the
/// user's mpirun is left as it is.
const REMOTE_OR_PLM_ARGS: [&str; 8] = [
    "--hostfile",
    "-hostfile",
    "--machinefile",
    "-machinefile",
    "--host",
    "-host",
    "-H",
    "--launch-agent",
];

/// Whether a launch `argv` (program first) gets `OMPI_MCA_plm=isolated`: an Open MPI
/// mpirun (`mpirun`, `mpiexec`, `orterun` by file name) naming no other host and no
/// launcher, started where no remote shell exists and the environment picks none.
pub fn wants_isolated<S: AsRef<OsStr>>(
    argv: &[S],
    env_picks_plm: bool,
    remote_shell_on_path: bool,
) -> bool {
    let Some((prog, args)) = argv.split_first() else {
        return false;
    };
    let name = Path::new(prog.as_ref())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !matches!(name.as_str(), "mpirun" | "mpiexec" | "orterun") {
        return false;
    }
    if env_picks_plm || remote_shell_on_path {
        return false;
    }
    !args.iter().any(|a| {
        let a = a.as_ref().to_string_lossy();
        a.contains("plm")
            || REMOTE_OR_PLM_ARGS
                .iter()
                .any(|r| a == *r || a.starts_with(&format!("{r}=")))
    })
}

/// Whether `name` is an executable file in a folder of `path` (a PATH value).
fn on_path(name: &str, path: Option<&OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.map(|p| {
        std::env::split_paths(p).any(|d| {
            std::fs::metadata(d.join(name))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
    })
    .unwrap_or(false)
}

/// Set `OMPI_MCA_plm=isolated` on `cmd` when [`wants_isolated`] says so for it, with
/// the PATH and environment `cmd` will run with. Returns whether it did.
pub fn isolate_if_no_remote_shell(cmd: &mut Command) -> bool {
    let set: Vec<(String, Option<std::ffi::OsString>)> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(OsStr::to_os_string)))
        .collect();
    let var = |k: &str| -> Option<std::ffi::OsString> {
        match set.iter().find(|(n, _)| n == k) {
            Some((_, v)) => v.clone(),
            None => std::env::var_os(k),
        }
    };
    let env_picks_plm = var("OMPI_MCA_plm").is_some()
        || var("OMPI_MCA_plm_rsh_agent").is_some()
        || var("OMPI_MCA_orte_rsh_agent").is_some();
    let path = var("PATH");
    let remote_shell = on_path("ssh", path.as_deref()) || on_path("rsh", path.as_deref());
    let argv: Vec<&OsStr> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .collect();
    let isolate = wants_isolated(&argv, env_picks_plm, remote_shell);
    if isolate {
        cmd.env("OMPI_MCA_plm", "isolated");
    }
    isolate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_mpirun_without_ssh_gets_the_isolated_launcher() {
        assert!(wants_isolated(&["mpirun", "-np", "8"], false, false));
        assert!(wants_isolated(
            &["/opt/ompi/bin/mpiexec", "-n", "2"],
            false,
            false
        ));
    }

    #[test]
    fn a_remote_shell_or_a_users_choice_leaves_mpirun_alone() {
        assert!(!wants_isolated(&["mpirun", "-np", "8"], false, true));
        assert!(!wants_isolated(&["mpirun", "-np", "8"], true, false));
        assert!(!wants_isolated(
            &["mpirun", "--mca", "plm_rsh_agent", "x", "-np", "8"],
            false,
            false
        ));
        for h in ["--hostfile", "-H", "--host=a,b", "-machinefile"] {
            assert!(
                !wants_isolated(&["mpirun", h, "hosts"], false, false),
                "{h}"
            );
        }
    }

    #[test]
    fn launchers_that_are_not_mpirun_are_left_alone() {
        for p in [
            "srun",
            "launch/sim-cluster",
            "launch/mpirun-hostfile.sh",
            "bash",
        ] {
            assert!(!wants_isolated(&[p, "-n", "2"], false, false), "{p}");
        }
        assert!(!wants_isolated::<&str>(&[], false, false));
    }

    #[test]
    fn the_commands_own_path_and_environment_decide() {
        let empty = tempfile::tempdir().unwrap();
        let mut c = Command::new("mpirun");
        c.env("PATH", empty.path()).env_remove("OMPI_MCA_plm");
        c.env_remove("OMPI_MCA_plm_rsh_agent")
            .env_remove("OMPI_MCA_orte_rsh_agent");
        assert!(isolate_if_no_remote_shell(&mut c));
        assert!(c
            .get_envs()
            .any(|(k, v)| k == "OMPI_MCA_plm" && v == Some(OsStr::new("isolated"))));
        let with_ssh = tempfile::tempdir().unwrap();
        let ssh = with_ssh.path().join("ssh");
        std::fs::write(&ssh, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new("mpirun");
        c.env("PATH", with_ssh.path())
            .env_remove("OMPI_MCA_plm")
            .env_remove("OMPI_MCA_plm_rsh_agent")
            .env_remove("OMPI_MCA_orte_rsh_agent");
        assert!(!isolate_if_no_remote_shell(&mut c));
    }
}
