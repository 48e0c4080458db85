//! `burnin evidence`: what each host says about itself, captured as files a second
//! engineer can read later — `nvidia-smi -L / topo -m / -q`, `dcgmi discovery` and a
//! level-1 `dcgmi diag`, `ibstat`, `ibv_devinfo`, `ip -br link`, `lscpu`, `uname -a`,
//! `ompi_info --version`, and the NCCL_/UCX_/OMPI_/CUDA_ environment.
//!
//! Shape, and why:
//! - One process per host does the work (local rank 0 of each node), so eight ranks
//!   on a node do not run `nvidia-smi -q` eight times; the others only wait.
//! - Every tool is an argument vector run directly, never through a shell, with its
//!   own deadline; its stdout and stderr go straight into one file, so a chatty tool
//!   cannot block on a full pipe. A tool runs in a process group of its own, and on
//!   expiry that whole group is killed (helpers it started included).
//! - A missing tool is a fact to record, not an error: `index.json` lists each tool
//!   as ran / not installed / timed out / failed to start, with exit code, seconds,
//!   the program's path and the file. Only an unwritable output folder fails (exit 2).
//! - Tools run in parallel (they only read), so the slowest one sets the time.
//! - Invasive diagnostics (`dcgmi diag --run 3`) load the GPUs for minutes and run
//!   only with `--invasive`: whoever schedules the GPUs must agree first.
use crate::config::GlobalArgs;
use crate::error::{Agreed, Outcome};
pub use crate::results::evidence::*;
use crate::results::gpu::HostDcgm;
use crate::world::World;
use anyhow::{bail, Context, Result};
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct EvidenceArgs {
    /// Folder to write into: OUT/evidence/<host>/ gets one file per tool and index.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also run the invasive diagnostics (`dcgmi diag --run 3` instead of `--run 1`):
    /// they load the GPUs for minutes; coordinate with whoever schedules them and raise
    /// -T/--timeout accordingly.
    #[arg(long)]
    pub invasive: bool,
}

/// One tool to run: the file it writes and its argument vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// File name (without `.txt`) in the host's folder.
    pub file: &'static str,
    /// Program and arguments.
    pub argv: &'static [&'static str],
    /// Its own deadline (capped by -T/--timeout).
    pub timeout: Duration,
}

/// The tools, in the order of the index. `--invasive` swaps the level-1 DCGM
/// diagnostic for level 3.
pub fn tools(invasive: bool) -> Vec<Tool> {
    let t = |file, argv, secs| Tool {
        file,
        argv,
        timeout: Duration::from_secs(secs),
    };
    let diag = if invasive {
        t(
            "dcgmi-diag-3",
            &["dcgmi", "diag", "--run", "3", "-j"][..],
            1800,
        )
    } else {
        t(
            "dcgmi-diag-1",
            &["dcgmi", "diag", "--run", "1", "-j"][..],
            120,
        )
    };
    vec![
        t("nvidia-smi-L", &["nvidia-smi", "-L"], 30),
        t("nvidia-smi-topo-m", &["nvidia-smi", "topo", "-m"], 30),
        t("nvidia-smi-q", &["nvidia-smi", "-q"], 60),
        t(
            "dcgmi-discovery-list",
            &["dcgmi", "discovery", "--list"],
            30,
        ),
        diag,
        t("ibstat", &["ibstat"], 30),
        t("ibv_devinfo", &["ibv_devinfo"], 30),
        t("ip-br-link", &["ip", "-br", "link"], 10),
        t("lscpu", &["lscpu"], 10),
        t("uname-a", &["uname", "-a"], 10),
        t("ompi_info-version", &["ompi_info", "--version"], 30),
    ]
}

/// A host name made safe as a folder name (letters, digits, '.', '_', '-').
pub fn folder_name(host: &str) -> String {
    let s: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match s.trim_matches('.') {
        "" => "unknown-host".into(),
        t => t.to_string(),
    }
}

/// Directories searched for a program: PATH, then the sbin folders that ordinary
/// users' PATH often lacks (ibstat, ip).
pub fn search_dirs(path: Option<&OsStr>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for extra in ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        let extra = PathBuf::from(extra);
        if !dirs.contains(&extra) {
            dirs.push(extra);
        }
    }
    dirs.retain(|d| !d.as_os_str().is_empty());
    dirs
}

/// The first executable file named `name` in `dirs`.
pub fn find_program(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter().map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// Run `program args…` with stdout and stderr into `out`, in a process group of its
/// own, for at most `timeout`. Returns (status, exit code, note).
pub fn run_tool(
    program: &Path,
    args: &[&str],
    out: &Path,
    timeout: Duration,
) -> (ToolStatus, Option<i32>, Option<String>) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let file = match File::create(out) {
        Ok(f) => f,
        Err(e) => {
            return (
                ToolStatus::FailedToStart,
                None,
                Some(format!("cannot create {}: {e}", out.display())),
            )
        }
    };
    let err = match file.try_clone() {
        Ok(f) => f,
        Err(e) => return (ToolStatus::FailedToStart, None, Some(e.to_string())),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (ToolStatus::FailedToStart, None, Some(e.to_string())),
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let note = st.signal().map(|s| format!("ended by signal {s}"));
                return (ToolStatus::Ran, st.code(), note);
            }
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                // Our own child leads its own process group: end the group (the
                // tool's helpers too), then reap the child.
                // SAFETY: kill(2) with a negative pid signals the process group whose
                // id is our child's pid; the child is not yet reaped, so the id
                // cannot have been reused.
                unsafe {
                    libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return (
                    ToolStatus::TimedOut,
                    None,
                    Some(format!("killed after {:.0} s", timeout.as_secs_f64())),
                );
            }
        }
    }
}

/// Variables mpirun and PMIx set for each process they start (job ids, session
/// folders, contact URIs): plumbing, not settings anyone chose, so left out.
pub fn is_launcher_plumbing(key: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "OMPI_MCA_orte_",
        "OMPI_MCA_ess",
        "OMPI_APP_CTX",
        "OMPI_FIRST_RANKS",
        "OMPI_COMM_",
        "PMIX_",
    ];
    const EXACT: [&str; 8] = [
        "OMPI_ARGV",
        "OMPI_COMMAND",
        "OMPI_NUM_APP_CTX",
        "OMPI_UNIVERSE_SIZE",
        "OMPI_MCA_initial_wdir",
        "OMPI_MCA_pmix",
        "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
        "OMPI_FILE_LOCATION",
    ];
    (PREFIXES.iter().any(|p| key.starts_with(p)) && !key.starts_with("PMIX_MCA_"))
        || EXACT.contains(&key)
}

/// The NCCL_/UCX_/OMPI_/CUDA_ (and burnin's other relevant) environment the user set,
/// one `KEY=VALUE` per line.
pub fn env_text() -> String {
    crate::results::provenance::relevant_env()
        .into_iter()
        .filter(|(k, _)| !is_launcher_plumbing(k))
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
}

/// Run every tool into `dir` (which must exist) and write `dir/index.json`.
pub fn collect(
    dir: &Path,
    host: &str,
    invasive: bool,
    cap: Duration,
    path_env: Option<&OsStr>,
) -> Result<HostIndex> {
    let started_unix = crate::watchdog::unix_seconds(std::time::SystemTime::now());
    let dirs = search_dirs(path_env);
    let list = tools(invasive);
    let mut entries: Vec<Entry> = std::thread::scope(|s| {
        let handles: Vec<_> = list
            .iter()
            .map(|t| {
                let dirs = &dirs;
                s.spawn(move || run_one(t, dir, dirs, cap))
            })
            .collect();
        handles
            .into_iter()
            .zip(&list)
            .map(|(h, t)| {
                h.join().unwrap_or_else(|_| Entry {
                    tool: t.argv.join(" "),
                    status: ToolStatus::FailedToStart,
                    exit_code: None,
                    file: None,
                    seconds: 0.0,
                    program: None,
                    note: Some("the thread running it panicked".into()),
                })
            })
            .collect()
    });
    let env_file = "environment.txt";
    std::fs::write(dir.join(env_file), env_text())
        .with_context(|| format!("cannot write {}", dir.join(env_file).display()))?;
    entries.push(Entry {
        tool: "environment (NCCL_* UCX_* OMPI_* CUDA_* …)".into(),
        status: ToolStatus::Ran,
        exit_code: Some(0),
        file: Some(env_file.into()),
        seconds: 0.0,
        program: None,
        note: None,
    });
    let dcgm_diag = diag_of(dir, host, &entries);
    let index = HostIndex {
        schema_version: SCHEMA_VERSION,
        host: host.to_string(),
        dir: dir.to_path_buf(),
        burnin_version: env!("CARGO_PKG_VERSION").to_string(),
        started_unix,
        invasive,
        entries,
        dcgm_diag,
    };
    crate::results::write_json_atomic(&dir.join("index.json"), &index)?;
    Ok(index)
}

/// The DCGM diagnostic's JSON, parsed (None when dcgmi is not installed).
fn diag_of(dir: &Path, host: &str, entries: &[Entry]) -> Option<HostDcgm> {
    let e = entries.iter().find(|e| e.tool.starts_with("dcgmi diag"))?;
    if e.status == ToolStatus::NotInstalled {
        return None;
    }
    let file = e.file.as_ref().map(|f| dir.join(f));
    Some(diag_from(
        host,
        file.as_deref(),
        e.exit_code,
        e.note.as_deref(),
    ))
}

/// A diagnostic's result from the file its JSON went to.
fn diag_from(host: &str, file: Option<&Path>, code: Option<i32>, note: Option<&str>) -> HostDcgm {
    let text = file
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default();
    let what = format!("dcgmi diag on {host}");
    match crate::dcgm::parse(&text, &what) {
        Ok(d) => HostDcgm {
            host: host.into(),
            diag: Some(d),
            error: None,
        },
        Err(e) => {
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            HostDcgm {
                host: host.into(),
                diag: None,
                error: Some(format!(
                    "{what} gave no diagnostic (exit {}{}): {e:#}; its output begins: {}",
                    code.map_or("-".into(), |c| c.to_string()),
                    note.map(|n| format!(", {n}")).unwrap_or_default(),
                    first.chars().take(200).collect::<String>()
                )),
            }
        }
    }
}

/// Run `dcgmi diag -r LEVEL -j` on this host, bounded by `timeout`, and parse it.
pub fn dcgm_diag(host: &str, level: u8, timeout: Duration) -> HostDcgm {
    let dirs = search_dirs(std::env::var_os("PATH").as_deref());
    let Some(program) = find_program("dcgmi", &dirs) else {
        return HostDcgm {
            host: host.into(),
            diag: None,
            error: Some(format!(
                "dcgmi is not installed on {host} (DCGM's diagnostic not run)"
            )),
        };
    };
    let file = std::env::temp_dir().join(format!("burnin-dcgm-{}.json", std::process::id()));
    let level = level.to_string();
    let (status, code, note) = run_tool(&program, &["diag", "-r", &level, "-j"], &file, timeout);
    let mut r = diag_from(host, Some(&file), code, note.as_deref());
    if status == ToolStatus::TimedOut && r.diag.is_none() {
        r.error = Some(format!(
            "dcgmi diag -r {level} on {host} did not finish in {:.0} s",
            timeout.as_secs_f64()
        ));
    }
    let _ = std::fs::remove_file(&file);
    r
}

fn run_one(t: &Tool, dir: &Path, dirs: &[PathBuf], cap: Duration) -> Entry {
    let tool = t.argv.join(" ");
    let Some(program) = find_program(t.argv[0], dirs) else {
        return Entry {
            tool,
            status: ToolStatus::NotInstalled,
            exit_code: None,
            file: None,
            seconds: 0.0,
            program: None,
            note: Some(format!("{} is not on PATH", t.argv[0])),
        };
    };
    let file = format!("{}.txt", t.file);
    let start = Instant::now();
    let (status, exit_code, note) =
        run_tool(&program, &t.argv[1..], &dir.join(&file), t.timeout.min(cap));
    Entry {
        tool,
        status,
        exit_code,
        file: (status != ToolStatus::FailedToStart).then_some(file),
        seconds: start.elapsed().as_secs_f64(),
        program: Some(program.display().to_string()),
        note,
    }
}

/// The table rank 0 prints.
pub fn render(indexes: &[HostIndex]) -> String {
    let header = ["host", "tool", "status", "exit", "seconds", "file"];
    let body: Vec<Vec<String>> = indexes
        .iter()
        .flat_map(|h| {
            h.entries.iter().map(move |e| {
                vec![
                    h.host.clone(),
                    e.tool.clone(),
                    e.status.text().to_string(),
                    e.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "-".into()),
                    if e.status == ToolStatus::NotInstalled {
                        "-".into()
                    } else {
                        format!("{:.2}", e.seconds)
                    },
                    e.file
                        .as_ref()
                        .map(|f| h.dir.join(f).display().to_string())
                        .unwrap_or_else(|| "-".into()),
                ]
            })
        })
        .collect();
    crate::table::render(&header, &body)
}

/// `burnin evidence`.
pub fn run(world: &World, global: &GlobalArgs, args: &EvidenceArgs) -> Result<Outcome> {
    let cap = Duration::from_secs_f64(global.timeout_secs().max(1.0));
    let mine: Option<std::result::Result<HostIndex, String>> = (world.local_rank == 0).then(|| {
        let dir = args.out.join("evidence").join(folder_name(&world.host));
        crate::results::create_out_dir(&dir, "--out")
            .and_then(|_| {
                collect(
                    &dir,
                    &world.host,
                    args.invasive,
                    cap,
                    std::env::var_os("PATH").as_deref(),
                )
            })
            .map_err(|e| format!("{}: {e:#}", world.describe_rank(world.rank)))
    });
    // The others wait without spinning while each host's first rank works.
    world.quiet_barrier();
    let all = world.all_gather_json(&mine)?;
    let problems: Vec<&String> = all
        .iter()
        .flatten()
        .filter_map(|r| r.as_ref().err())
        .collect();
    if !problems.is_empty() {
        let shown: Vec<&str> = problems.iter().take(4).map(|s| s.as_str()).collect();
        bail!(Agreed(format!("evidence: {}", shown.join("; "))));
    }
    if world.rank == 0 {
        let indexes: Vec<HostIndex> = all.into_iter().flatten().filter_map(|r| r.ok()).collect();
        print!("{}", render(&indexes));
        let missing: Vec<String> = indexes
            .iter()
            .flat_map(|h| &h.entries)
            .filter(|e| e.status == ToolStatus::NotInstalled)
            .map(|e| e.tool.split(' ').next().unwrap_or("").to_string())
            .fold(Vec::new(), |mut v, t| {
                if !v.contains(&t) {
                    v.push(t);
                }
                v
            });
        if !missing.is_empty() {
            println!("# not installed: {}", missing.join(", "));
        }
        println!(
            "# evidence of {} host(s) in {}",
            indexes.len(),
            args.out.join("evidence").display()
        );
    }
    Ok(Outcome::Pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_become_safe_folder_names() {
        assert_eq!(folder_name("gpu-node-07.cluster"), "gpu-node-07.cluster");
        assert_eq!(folder_name("a/b c"), "a_b_c");
        assert_eq!(folder_name(".."), "unknown-host");
        assert_eq!(folder_name(""), "unknown-host");
    }

    #[test]
    fn launcher_plumbing_is_told_from_settings() {
        for k in [
            "OMPI_MCA_orte_hnp_uri",
            "OMPI_MCA_ess_base_jobid",
            "PMIX_RANK",
            "OMPI_ARGV",
        ] {
            assert!(is_launcher_plumbing(k), "{k}");
        }
        for k in [
            "OMPI_MCA_btl_tcp_if_include",
            "OMPI_MCA_pml",
            "NCCL_IB_HCA",
            "UCX_NET_DEVICES",
            "PMIX_MCA_psec",
            "CUDA_VISIBLE_DEVICES",
        ] {
            assert!(!is_launcher_plumbing(k), "{k}");
        }
    }

    #[test]
    fn invasive_swaps_the_diag_level_and_nothing_else() {
        let a = tools(false);
        let b = tools(true);
        assert_eq!(a.len(), b.len());
        let diff: Vec<(&Tool, &Tool)> = a.iter().zip(&b).filter(|(x, y)| x != y).collect();
        assert_eq!(diff.len(), 1);
        assert_eq!(diff[0].0.argv, ["dcgmi", "diag", "--run", "1", "-j"]);
        assert_eq!(diff[0].1.argv, ["dcgmi", "diag", "--run", "3", "-j"]);
        // File names are unique and safe.
        let mut files: Vec<&str> = a.iter().map(|t| t.file).collect();
        files.sort_unstable();
        files.dedup();
        assert_eq!(files.len(), a.len());
        assert!(files.iter().all(|f| folder_name(f) == *f));
    }

    #[test]
    fn programs_are_found_on_the_given_path_only() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("fake-tool");
        std::fs::write(&prog, "#!/bin/sh\necho hi\n").unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        assert_eq!(find_program("fake-tool", &dirs), None, "not executable yet");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_program("fake-tool", &dirs), Some(prog));
        assert_eq!(find_program("no-such-tool-burnin", &dirs), None);
        let d = search_dirs(Some(OsStr::new("/x:/y")));
        assert_eq!(&d[..2], &[PathBuf::from("/x"), PathBuf::from("/y")]);
        assert!(d.contains(&PathBuf::from("/usr/sbin")));
    }

    #[test]
    fn a_tool_past_its_deadline_is_killed_with_its_children() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.txt");
        let t = Instant::now();
        // The shell starts a child sleep; killing only the shell would leave it.
        let (status, code, note) = run_tool(
            Path::new("/bin/sh"),
            &["-c", "echo started; sleep 30; echo never"],
            &out,
            Duration::from_millis(300),
        );
        assert_eq!(status, ToolStatus::TimedOut);
        assert_eq!(code, None);
        assert!(note.unwrap().contains("killed"));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "started\n");
    }

    #[test]
    fn exit_codes_and_both_streams_are_kept() {
        let _serial = crate::CHILD_PROCESS_TESTS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.txt");
        let (status, code, _) = run_tool(
            Path::new("/bin/sh"),
            &["-c", "echo out; echo err >&2; exit 3"],
            &out,
            Duration::from_secs(10),
        );
        assert_eq!((status, code), (ToolStatus::Ran, Some(3)));
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("out") && text.contains("err"), "{text}");
    }
}
