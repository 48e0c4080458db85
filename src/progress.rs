//! The live line where people wait: `burnin run` shows one per phase job, `burnin
//! chaos` one per run of the job (the reference, each trial), with a spinner, the
//! time spent and what is happening. Only on a terminal: when stderr is not one (a
//! pipe, a file, CI, the tests, `burnin chaos` under `burnin run`) nothing is drawn
//! and the output is the same as without it. Lines printed while it is shown go
//! through [`Live::suspend`], which clears it, prints, and draws it again.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether a live line is drawn: stderr is a terminal, and not one that cannot move
/// the cursor (`TERM=dumb`). Pure.
pub fn shown(stderr_is_terminal: bool, term: Option<&str>) -> bool {
    stderr_is_terminal && term != Some("dumb")
}

/// A live line on stderr, or nothing (see [`shown`]). Clones share the line.
#[derive(Clone)]
pub struct Live(Option<ProgressBar>);

impl Live {
    /// Draw `message` with a spinner and the time since now, when [`shown`].
    pub fn start(message: impl Into<String>) -> Live {
        let term = std::env::var("TERM").ok();
        if !shown(std::io::stderr().is_terminal(), term.as_deref()) {
            return Live::hidden();
        }
        // Cleared when the last clone goes, however the wait ended.
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
            .with_finish(ProgressFinish::AndClear);
        if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}") {
            bar.set_style(style);
        }
        bar.set_message(message.into());
        bar.enable_steady_tick(Duration::from_millis(200));
        Live(Some(bar))
    }

    /// No line at all.
    pub fn hidden() -> Live {
        Live(None)
    }

    /// Say what is happening now.
    pub fn set(&self, message: impl Into<String>) {
        if let Some(b) = &self.0 {
            b.set_message(message.into());
        }
    }

    /// Run `f` (which prints) with the line cleared, then draw it again.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Remove the line.
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_hidden_when_stderr_is_not_a_terminal() {
        assert!(!shown(false, None));
        assert!(!shown(false, Some("xterm-256color")));
        assert!(!shown(true, Some("dumb")));
        assert!(shown(true, Some("xterm-256color")));
        assert!(shown(true, None));
        // Under the test harness stderr is captured: nothing is drawn.
        let live = Live::hidden();
        assert_eq!(live.suspend(|| 7), 7);
        live.set("x");
        live.finish();
    }
}
