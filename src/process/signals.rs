//! Signals: to one process, to a process group, to a whole tree; and SIGINT/SIGTERM
//! taken either as a flag the supervisors poll ([`catch_stop`]) or by a thread of
//! their own ([`take_stop_in_thread`], for MPI ranks, whose main thread may be blocked
//! in a collective).
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM once [`catch_stop`] ran.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM set a flag ([`stop_requested`]) instead of ending the process: a
/// supervisor then ends its job, records what it has and stops. (Its jobs run in
/// process groups of their own, so a terminal's Ctrl-C does not reach them directly.)
pub fn catch_stop() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
}

/// Whether SIGINT or SIGTERM came since [`catch_stop`].
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn stop_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Block SIGINT/SIGTERM in the calling thread — and so in every thread started later —
/// and start a thread `name` that waits for them with `sigwait` and calls `on_signal`
/// with the signal that came. Where the mask cannot be set, or the thread cannot
/// start (the mask is then undone), the signals keep their default action.
pub fn take_stop_in_thread(name: &str, on_signal: impl FnOnce(libc::c_int) + Send + 'static) {
    let set = stop_set();
    // SAFETY: pthread_sigmask with a valid set on the calling thread.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: sigwait on a valid set with a valid out-pointer.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc != 0 {
                return;
            }
            on_signal(sig);
        });
    if spawned.is_err() {
        // SAFETY: undo the mask so the default action still ends the process.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

/// End the process at once with `code`: no unwinding, no destructors, no atexit
/// handlers (a thread blocked in MPI must not run MPI_Finalize, which would hang).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends the process without running anything of it.
    unsafe { libc::_exit(code) }
}

/// Send `sig` to `pid` (errors, e.g. already gone, are ignored).
pub fn signal(pid: u32, sig: i32) {
    if pid == 0 || pid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill(2) on one pid of a job this process started, found by the caller
    // a moment ago (in /proc, with its start time where a pid could be recycled).
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Send `sig` to the process group `pgid` (a child started in a group of its own:
/// its pid).
pub fn signal_group(pgid: u32, sig: i32) {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return;
    }
    // SAFETY: kill(2) on the process group of a child this process started in a
    // group of its own.
    unsafe {
        libc::kill(-(pgid as i32), sig);
    }
}

/// Send `sig` to a job: the process group of `pid` (started in a group of its own)
/// and every descendant of `pid`, found first (mpirun puts ranks in groups of their
/// own, so the group alone would miss them).
pub fn signal_tree(pid: u32, sig: i32) {
    let tree = super::tree::descendant_pids(pid);
    signal_group(pid, sig);
    for p in tree {
        signal(p, sig);
    }
}
