//! Stragglers: a rank that is alive and correct but slow holds every all-reduce
//! back, so every rank's *step* time rises alike and names nobody. What names it is
//! the time a rank spends before it reaches the gradient exchange — its own compute
//! (for burnin's `slow` fault, the sleep is part of it). Rank 0 sees every rank's
//! compute time each step (it gathers them for the step record); a rank whose median
//! over the last [`WINDOW`] steps is more than [`THRESHOLD`] times the median of the
//! other ranks' medians, [`STREAK`] steps in a row, is reported once, with that ratio
//! as its factor. The window, the threshold and the streak are what it takes on an
//! oversubscribed host, where a rank descheduled for a few steps looks 2x slow. Pure.
use crate::chaos::deadline::quantile;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Steps in the sliding window.
pub const WINDOW: usize = 8;
/// Ratio to the others' median above which a rank is a straggler.
pub const THRESHOLD: f64 = 2.0;
/// Consecutive steps above the threshold before it is reported.
pub const STREAK: usize = 3;

/// A straggler found at a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Straggler {
    pub rank: usize,
    /// Its median compute time over the window / the others' median.
    pub factor: f64,
    /// Its median compute time (seconds).
    pub its_s: f64,
    /// Median of the other ranks' median compute times (seconds).
    pub others_s: f64,
    /// Step at which it was found.
    pub step: u64,
}

/// Sliding windows of every rank's compute time.
#[derive(Clone, Debug, Default)]
pub struct Stragglers {
    windows: Vec<VecDeque<f64>>,
    reported: Vec<bool>,
    streak: Vec<usize>,
}

impl Stragglers {
    pub fn new(ranks: usize) -> Stragglers {
        Stragglers {
            windows: vec![VecDeque::with_capacity(WINDOW); ranks],
            reported: vec![false; ranks],
            streak: vec![0; ranks],
        }
    }

    /// Add one step's compute times (rank order); returns ranks newly found slow.
    pub fn observe(&mut self, step: u64, compute_s: &[f64]) -> Vec<Straggler> {
        if compute_s.len() != self.windows.len() || compute_s.len() < 2 {
            return Vec::new();
        }
        for (w, &c) in self.windows.iter_mut().zip(compute_s) {
            if w.len() == WINDOW {
                w.pop_front();
            }
            w.push_back(c);
        }
        if self.windows[0].len() < WINDOW {
            return Vec::new();
        }
        let medians: Vec<f64> = self
            .windows
            .iter()
            .map(|w| quantile(&w.iter().copied().collect::<Vec<_>>(), 0.5))
            .collect();
        let mut found = Vec::new();
        for (r, &m) in medians.iter().enumerate() {
            if self.reported[r] {
                continue;
            }
            let others: Vec<f64> = medians
                .iter()
                .enumerate()
                .filter(|(o, _)| *o != r)
                .map(|(_, &x)| x)
                .collect();
            let base = quantile(&others, 0.5);
            if base > 0.0 && m > THRESHOLD * base {
                self.streak[r] += 1;
            } else {
                self.streak[r] = 0;
            }
            if self.streak[r] >= STREAK {
                self.reported[r] = true;
                found.push(Straggler {
                    rank: r,
                    factor: m / base,
                    its_s: m,
                    others_s: base,
                    step,
                });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_three_times_slower_is_found_once_with_its_factor() {
        let mut s = Stragglers::new(4);
        let mut found = Vec::new();
        for step in 1..=20u64 {
            let slow = if step > 8 { 3.0 } else { 1.0 };
            let jitter = 1.0 + (step % 3) as f64 * 0.02;
            found.extend(s.observe(step, &[0.010 * jitter, 0.010, 0.011, 0.010 * slow]));
        }
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rank, 3);
        assert!(found[0].step >= 13 && found[0].step <= 16, "{found:?}");
        assert!((found[0].factor - 3.0).abs() < 0.2, "{found:?}");
    }

    #[test]
    fn a_few_slow_steps_are_not_a_straggler() {
        let mut s = Stragglers::new(4);
        for step in 1..=40u64 {
            // Rank 1 descheduled for four steps in a row.
            let r1 = if (20..24).contains(&step) { 0.05 } else { 0.01 };
            assert!(
                s.observe(step, &[0.01, r1, 0.01, 0.011]).is_empty(),
                "step {step}"
            );
        }
    }

    #[test]
    fn noise_is_not_a_straggler() {
        let mut s = Stragglers::new(8);
        for step in 1..=100u64 {
            let t: Vec<f64> = (0..8)
                .map(|r| 0.01 * (1.0 + ((step * 7 + r * 13) % 10) as f64 / 20.0))
                .collect();
            assert!(s.observe(step, &t).is_empty());
        }
        assert!(Stragglers::new(1).observe(1, &[1.0]).is_empty());
    }
}
