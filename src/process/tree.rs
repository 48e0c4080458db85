//! Processes as `/proc` describes them (Linux): one stat line parsed, every process,
//! the descendants of one, whether a (pid, start time) is still alive, a process's
//! environment; and the child subreaper flag with the reaping that goes with it.
//!
//! `burnin chaos` makes itself a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): a
//! process of the job whose parent dies is re-parented to the supervisor instead of
//! init, so "every descendant of the supervisor" is the whole job, orphans included,
//! and "the job is gone" can be checked rather than assumed. Processes are identified
//! by (pid, start time) so a recycled pid is never mistaken for a job process.
use std::collections::HashMap;

/// One process as `/proc/PID/stat` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    /// R, S, D, Z (zombie), X (dead), ...
    pub state: char,
    /// Executable name (at most 15 characters).
    pub comm: String,
    /// Start time in clock ticks since boot (with pid: a unique identity).
    pub start: u64,
}

impl Proc {
    /// Running or sleeping: not a zombie waiting to be reaped, not dead.
    pub fn live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parse a `/proc/PID/stat` line. `comm` may hold spaces and parentheses, so fields
/// are counted after its last ')'. Pure.
pub fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] = state (field 3), rest[1] = ppid (4), rest[19] = starttime (22).
    Some(Proc {
        pid,
        ppid: rest.get(1)?.parse().ok()?,
        state: rest.first()?.chars().next()?,
        comm,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// The process `pid` now (None: gone).
pub fn stat(pid: u32) -> Option<Proc> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process of the machine (of this pid namespace).
pub fn all() -> Vec<Proc> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// Every descendant of `root` among `procs` (not `root` itself). Pure.
pub fn descendants(root: u32, procs: &[Proc]) -> Vec<Proc> {
    let mut children: HashMap<u32, Vec<&Proc>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for c in children.get(&p).map(|v| v.as_slice()).unwrap_or(&[]) {
            if c.pid != root && !out.iter().any(|o: &Proc| o.pid == c.pid) {
                out.push((*c).clone());
                frontier.push(c.pid);
            }
        }
    }
    out
}

/// Every descendant of `pid` now, found through /proc's parent links.
pub fn descendant_pids(pid: u32) -> Vec<u32> {
    descendants(pid, &all()).iter().map(|p| p.pid).collect()
}

/// Whether the process identified by (pid, start) is still alive (not a zombie).
pub fn alive(pid: u32, start: u64) -> bool {
    stat(pid).is_some_and(|p| p.start == start && p.live())
}

/// The environment of `pid`, one `KEY=value` per entry (empty: gone or unreadable).
pub fn environ(pid: u32) -> Vec<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).map(<[u8]>::to_vec).collect())
        .unwrap_or_default()
}

/// Make this process the subreaper of its descendants. False when refused.
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// Reap the zombie children of this process among `job`: processes of a watched job
/// re-parented to us by the subreaper flag. Only those: a zombie child that is not the
/// job's belongs to someone else in this process (a `Command` whose handle is still
/// waiting for it) and reaping it would steal its exit status.
pub fn reap_orphans(job: &[(u32, u64)]) {
    let me = std::process::id();
    for p in all() {
        if p.ppid == me && !p.live() && job.contains(&(p.pid, p.start)) {
            let mut status = 0;
            // SAFETY: waitpid on a zombie child of ours, WNOHANG: returns at once.
            unsafe {
                libc::waitpid(p.pid as i32, &mut status, libc::WNOHANG);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_names() {
        let l = "1234 (my (odd) prog) S 1000 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10 18446744073709551615";
        let p = parse_stat(l).unwrap();
        assert_eq!((p.pid, p.ppid, p.state, p.start), (1234, 1000, 'S', 98765));
        assert_eq!(p.comm, "my (odd) prog");
        assert!(p.live());
        assert!(parse_stat("garbage").is_none());
        let z = parse_stat(&l.replace(") S ", ") Z ")).unwrap();
        assert!(!z.live());
    }

    #[test]
    fn descendants_follow_ppid_links() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            state: 'S',
            comm: "x".into(),
            start: 1,
        };
        let procs = vec![p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(13, 10), p(20, 1)];
        let mut d: Vec<u32> = descendants(10, &procs).iter().map(|x| x.pid).collect();
        d.sort_unstable();
        assert_eq!(d, vec![11, 12, 13]);
        let me = stat(std::process::id()).unwrap();
        assert!(me.live() && alive(me.pid, me.start));
        assert!(!alive(me.pid, me.start + 1));
    }

    #[test]
    fn only_the_jobs_zombies_are_reaped() {
        // A zombie child that is not the job's keeps its exit status for its owner.
        let mut other = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .unwrap();
        let pid = other.id();
        let t = std::time::Instant::now();
        while stat(pid).is_some_and(|p| p.live()) && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let z = stat(pid).unwrap();
        assert!(!z.live(), "{z:?}");
        reap_orphans(&[(pid, z.start + 1)]);
        assert_eq!(other.wait().unwrap().code(), Some(3));
        // The job's own zombie is reaped.
        let job = std::process::Command::new("true").spawn().unwrap();
        let pid = job.id();
        let t = std::time::Instant::now();
        while stat(pid).is_some_and(|p| p.live()) && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let z = stat(pid).unwrap();
        reap_orphans(&[(pid, z.start)]);
        assert!(stat(pid).is_none(), "still there: {:?}", stat(pid));
        drop(job);
    }
}
