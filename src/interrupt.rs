//! Ctrl-C and SIGTERM: end the whole job promptly and say what was done.
//!
//! SIGINT and SIGTERM are blocked in every thread (the mask is set before MPI and the
//! watchdog start threads, so they inherit it) and taken by one thread with
//! `sigwait`. That thread can act even while the main thread is blocked inside an MPI
//! collective: rank 0 prints one line with the workload's progress (what was measured
//! and where it is on disk), every rank exits at once with 128 + the signal, and the
//! launcher ends the ranks that remain. Results stay whole: JSONL records are single
//! appends and run.json is only ever renamed into place complete.
use std::sync::Mutex;

static PROGRESS: Mutex<String> = Mutex::new(String::new());
static NOTE_FILE: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);
static RANK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Describe what has been done so far ("sweep: 12 points measured; results in …").
pub fn set_progress(text: impl Into<String>) {
    if let Ok(mut p) = PROGRESS.lock() {
        *p = text.into();
    }
}

/// Where rank 0 also writes its line when interrupted (`<--out>/interrupted.txt`):
/// the launcher may end before it forwards the rank's stderr (mpirun SIGKILLs the
/// ranks soon after forwarding the signal), the results folder keeps the line.
pub fn set_note_file(path: std::path::PathBuf) {
    if let Ok(mut p) = NOTE_FILE.lock() {
        *p = Some(path);
    }
}

fn write_note(line: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = NOTE_FILE.lock().ok().and_then(|p| p.clone()) else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    if let Ok(mut f) = file {
        let _ = f.write_all(line.as_bytes());
    }
}

/// This process's world rank, once known (only rank 0 prints the summary).
pub fn set_rank(rank: usize) {
    RANK.store(rank, std::sync::atomic::Ordering::Relaxed);
}

/// Block SIGINT/SIGTERM in this (the main) thread — and so in every thread started
/// later — and start the thread that waits for them. Call first thing in `main`.
pub fn install() {
    // Where the signals cannot be taken they keep their default action: still an
    // exit, without a summary.
    crate::process::take_stop_in_thread("burnin-signals", |sig| {
        let name = if sig == libc::SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        if RANK.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            let progress = PROGRESS.lock().map(|p| p.clone()).unwrap_or_default();
            let what = if progress.is_empty() {
                "nothing measured yet".to_string()
            } else {
                progress
            };
            // One write(2): mpirun SIGKILLs ranks soon after forwarding the signal,
            // and eprintln! writes each piece of its format separately, so a kill
            // between pieces left "interrupted by " alone (seen in CI).
            let line = format!("burnin: interrupted by {name}: {what}\n");
            // SAFETY: write(2) of a valid buffer to fd 2.
            unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
            write_note(&line);
        }
        // The main thread may be blocked in MPI and must not run destructors
        // (MPI_Finalize would hang).
        crate::process::exit_now(128 + sig)
    });
}
