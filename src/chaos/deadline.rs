//! How long a training rank waits for a blocking step before it ends the job.
//!
//! A fixed deadline is either too long to catch a hang quickly or too short for a
//! slow start, so the default is derived from what this run has observed:
//!
//! - start-up and the first step (nothing observed yet): [`INIT_ALLOWANCE`] (60 s);
//! - a step's check-in, gradient all-reduce and timing gather: max([`FLOOR`],
//!   [`FACTOR`] × p99 of this rank's iteration times so far), the first (warm-up)
//!   iteration left out once there are others — but at most max([`CAP`], [`FACTOR`] ×
//!   the median): with few samples the p99 is the slowest step seen, and one stall of
//!   a loaded host (a 2 s step among 0.2 s ones) would otherwise stretch the deadline
//!   to 20 s and a hang would go unnamed that long. A step longer than ten medians
//!   *and* than [`CAP`] is taken for a hang;
//! - a checkpoint's barriers: max(60 s, 10 × the longest checkpoint so far);
//! - `-T SECS` replaces all of them with SECS.
//!
//! With a tiny model the floor dominates: a hung rank is named about [`FLOOR`]
//! after its peers reached the check-in (a hung rank 0 after [`follower`]`(FLOOR)`).
//! The brief's example was max(1 s, 10 x p99); 3 s is what this 2-core test bed
//! needs to never end a healthy job. Pure; unit-tested.
use std::time::Duration;

/// Deadline while nothing has been observed (MPI start-up, restore, first step).
pub const INIT_ALLOWANCE: Duration = Duration::from_secs(60);
/// Never less than this for a step. 1 s would name a hang sooner, but a 2-core host
/// running eight ranks and other builds stalls a healthy step for 2 s now and then
/// (seen in the soak), and a deadline that ends healthy jobs is worse than a slow one.
pub const FLOOR: Duration = Duration::from_secs(3);
/// Multiple of the p99 iteration time.
pub const FACTOR: f64 = 10.0;
/// The derived step deadline exceeds this only when ten median steps do: so a hung
/// rank is named within CAP, and a hung rank 0 within [`follower`]`(CAP)` = 10 s.
pub const CAP: Duration = Duration::from_secs(6);

/// The deadlines of one rank of a training run.
#[derive(Clone, Debug)]
pub struct Deadlines {
    fixed: Option<Duration>,
    iterations: Vec<f64>,
    longest_ckpt: f64,
}

impl Deadlines {
    /// `fixed`: the user's `-T`, if given.
    pub fn new(fixed: Option<Duration>) -> Deadlines {
        Deadlines {
            fixed,
            iterations: Vec::new(),
            longest_ckpt: 0.0,
        }
    }

    /// Whether the deadlines are derived (no `-T`).
    pub fn derived(&self) -> bool {
        self.fixed.is_none()
    }

    /// Record one training iteration's wall time (seconds).
    pub fn observe_iteration(&mut self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            self.iterations.push(seconds);
        }
    }

    /// Record one checkpoint's wall time (seconds).
    pub fn observe_checkpoint(&mut self, seconds: f64) {
        if seconds.is_finite() {
            self.longest_ckpt = self.longest_ckpt.max(seconds);
        }
    }

    /// For start-up, restore and other one-off collectives.
    pub fn init(&self) -> Duration {
        self.fixed.unwrap_or(INIT_ALLOWANCE)
    }

    /// For each blocking call of a training step.
    pub fn step(&self) -> Duration {
        if let Some(f) = self.fixed {
            return f;
        }
        let seen = match self.iterations.len() {
            0 => return INIT_ALLOWANCE,
            1 => &self.iterations[..],
            _ => &self.iterations[1..],
        };
        let p99 = Duration::from_secs_f64((FACTOR * quantile(seen, 0.99)).min(3600.0));
        let cap = CAP.max(Duration::from_secs_f64(
            (FACTOR * quantile(seen, 0.5)).min(3600.0),
        ));
        FLOOR.max(p99.min(cap))
    }

    /// For a checkpoint's barriers and gathers.
    pub fn checkpoint(&self) -> Duration {
        if let Some(f) = self.fixed {
            return f;
        }
        INIT_ALLOWANCE
            .max(Duration::from_secs_f64(FACTOR * self.longest_ckpt))
            .max(self.step())
    }
}

/// How long a rank other than rank 0 waits at a check-in whose rank-0 deadline is `d`:
/// longer, so that rank 0 — which knows who is missing — speaks first.
pub fn follower(d: Duration) -> Duration {
    d.mul_f64(1.5) + Duration::from_secs(1)
}

/// The q-quantile of `v` (nearest rank; 0 for an empty slice).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let idx = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[idx]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_seen_means_the_start_up_allowance() {
        let d = Deadlines::new(None);
        assert_eq!(d.step(), INIT_ALLOWANCE);
        assert_eq!(d.init(), INIT_ALLOWANCE);
        assert!(d.derived());
    }

    #[test]
    fn derived_from_the_p99_with_a_floor_and_without_the_warm_up() {
        let mut d = Deadlines::new(None);
        d.observe_iteration(3.0); // warm-up: alone, it is all there is
        assert_eq!(d.step(), Duration::from_secs(30));
        for _ in 0..150 {
            d.observe_iteration(0.02);
        }
        assert_eq!(d.step(), FLOOR);
        d.observe_iteration(0.5);
        assert_eq!(d.step(), FLOOR, "one outlier in 151 is beyond the p99");
        for _ in 0..5 {
            d.observe_iteration(0.5);
        }
        assert_eq!(d.step(), Duration::from_secs(5));
        assert!(FLOOR < CAP);
        // One stall of 2.2 s among 0.2 s steps: capped, not 22 s.
        let mut s = Deadlines::new(None);
        for _ in 0..18 {
            s.observe_iteration(0.2);
        }
        s.observe_iteration(2.2);
        assert_eq!(s.step(), CAP);
        // Slow steps (GPU-sized, 2 s median) keep their 10x.
        let mut g = Deadlines::new(None);
        for _ in 0..10 {
            g.observe_iteration(2.0);
        }
        assert_eq!(g.step(), Duration::from_secs(20));
        assert_eq!(follower(CAP), Duration::from_secs(10));
        assert_eq!(d.checkpoint(), INIT_ALLOWANCE);
        d.observe_checkpoint(9.0);
        assert_eq!(d.checkpoint(), Duration::from_secs(90));
    }

    #[test]
    fn minus_t_fixes_everything() {
        let mut d = Deadlines::new(Some(Duration::from_secs(7)));
        d.observe_iteration(0.01);
        d.observe_checkpoint(100.0);
        assert_eq!(d.step(), Duration::from_secs(7));
        assert_eq!(d.checkpoint(), Duration::from_secs(7));
        assert_eq!(d.init(), Duration::from_secs(7));
        assert!(!d.derived());
    }

    #[test]
    fn followers_wait_longer_and_quantiles_are_nearest_rank() {
        assert_eq!(follower(Duration::from_secs(2)), Duration::from_secs(4));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
