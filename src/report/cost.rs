//! Cost per completed unit of work, from the card's prices and the measured times.
//!
//! DESIGN.md's rule: cost = billed components ÷ accepted outputs, each billed component
//! counted once. burnin bills by the hour: `rate = gpus × price_per_gpu_hour + Σ other
//! hourly components`. Every figure below is that rate times a measured duration, and
//! each duration is counted once — idle time inside a failure's recovery is already in
//! the recovery time and is not added again; redone work is the steps lost, at the
//! measured step time.
//!
//! - the acceptance itself: rate × its wall time;
//! - one TB all-reduced: rate ÷ TB per hour at the measured large-message algbw of
//!   all_reduce over the whole job (algbw = message bytes ÷ time, nccl-tests' unit);
//! - 1,000 training steps: rate × 1,000 × effective step time (mean step + checkpoint
//!   stalls spread over the steps);
//! - one failure: rate × (recovery time + steps lost × effective step time), the
//!   median over the chaos trials.
use super::data::RunData;
use crate::card::CostSpec;
use crate::kinds::{CollKind, TierKind};
use crate::stats::median;
use crate::units::Bytes;
use serde::{Deserialize, Serialize};

/// One priced unit of work.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CostLine {
    pub what: String,
    /// In the card's currency; None when the run did not measure what it needs.
    pub cost: Option<f64>,
    /// The formula with the run's numbers in it.
    pub formula: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CostReport {
    pub currency: String,
    /// Billed per hour of the reservation.
    pub hourly: f64,
    pub hourly_formula: String,
    pub lines: Vec<CostLine>,
}

/// "USD 12.34", with more digits for small amounts.
pub fn money(currency: &str, v: f64) -> String {
    let digits = if v.abs() >= 1.0 || v == 0.0 {
        2
    } else if v.abs() >= 0.01 {
        4
    } else {
        6
    };
    format!("{currency} {v:.digits$}")
}

fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// The run's wall time: the acceptance's start to its end (or to its last job's end,
/// for a run that was killed).
pub fn wall_seconds(data: &RunData) -> Option<f64> {
    let a = data.acceptance.as_ref()?;
    let end = a.finished_unix.or_else(|| {
        a.jobs
            .iter()
            .filter_map(|j| j.finished_unix)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    })?;
    Some(end - a.started_unix).filter(|s| *s >= 0.0)
}

/// The large-message all_reduce algbw over the whole job: the world tier's largest
/// size (GB/s), with the size.
pub fn world_allreduce_algbw(data: &RunData) -> Option<(f64, u64)> {
    let s = data.sweep.as_ref()?;
    let pts: Vec<_> = s
        .points
        .iter()
        .filter(|p| p.tier == TierKind::World && p.collective == CollKind::AllReduce)
        .collect();
    let largest = pts.iter().map(|p| p.bytes).max()?;
    let best = pts
        .iter()
        .filter(|p| p.bytes == largest)
        .map(|p| p.algbw_gbps)
        .fold(0.0, f64::max);
    (best > 0.0).then_some((best, largest))
}

/// Price the run's work. None when the card has no price.
pub fn compute(spec: &CostSpec, data: &RunData) -> CostReport {
    let cur = spec.currency.clone();
    let (hourly, hourly_formula) = hourly_rate(spec, data);
    let step = data.train.as_ref().and_then(|t| t.effective_step_s());
    let lines = vec![
        wall_line(&cur, hourly, data),
        allreduce_line(&cur, hourly, data),
        training_line(&cur, hourly, step, data),
        failure_line(&cur, hourly, step, data),
    ];
    CostReport {
        currency: cur,
        hourly,
        hourly_formula,
        lines,
    }
}

/// The billed rate per hour (GPUs × price + the other hourly components) and its
/// formula.
fn hourly_rate(spec: &CostSpec, data: &RunData) -> (f64, String) {
    let cur = &spec.currency;
    let (gpus, gpus_from) = match spec.gpus {
        Some(g) => (g, "billed GPUs from the card"),
        None => (data.world_size().unwrap_or(1), "one GPU per rank"),
    };
    let others: f64 = spec.other_per_hour.values().sum();
    let hourly = gpus as f64 * spec.price_per_gpu_hour + others;
    let mut hourly_formula = format!(
        "{gpus} GPUs ({gpus_from}) × {} per GPU-hour",
        money(cur, spec.price_per_gpu_hour)
    );
    for (k, v) in &spec.other_per_hour {
        hourly_formula.push_str(&format!(" + {k} {}", money(cur, *v)));
    }
    hourly_formula.push_str(&format!(" = {} per hour", money(cur, hourly)));
    (hourly, hourly_formula)
}

/// The acceptance itself: rate × its wall time.
fn wall_line(cur: &str, hourly: f64, data: &RunData) -> CostLine {
    let wall = wall_seconds(data);
    CostLine {
        what: "this acceptance run".into(),
        cost: wall.map(|s| hourly * s / 3600.0),
        formula: match wall {
            Some(s) => format!(
                "{} per hour × {} s wall time ÷ 3600",
                money(cur, hourly),
                num(s)
            ),
            None => "no acceptance record with start and end times".into(),
        },
    }
}

/// One TB all-reduced: rate ÷ TB per hour at the world tier's large-message algbw.
fn allreduce_line(cur: &str, hourly: f64, data: &RunData) -> CostLine {
    let ar = world_allreduce_algbw(data);
    CostLine {
        what: "1 TB all-reduced (whole job, large messages)".into(),
        cost: ar.map(|(gbps, _)| hourly / (gbps * 3.6)),
        formula: match ar {
            Some((gbps, bytes)) => format!(
                "{} per hour ÷ ({} GB/s algbw at {} × 3600 s ÷ 1000 GB/TB = {} TB per hour)",
                money(cur, hourly),
                num(gbps),
                Bytes(bytes),
                num(gbps * 3.6)
            ),
            None => "no all_reduce measured on the world tier".into(),
        },
    }
}

/// 1,000 training steps at the effective step time `step` (s).
fn training_line(cur: &str, hourly: f64, step: Option<f64>, data: &RunData) -> CostLine {
    let step_parts = data.train.as_ref().and_then(|t| {
        let mean = t.mean_step_s()?;
        let stall: f64 = t.checkpoints().iter().map(|c| c.stall_s).sum();
        let steps = t
            .run
            .as_ref()
            .map(|r| r.steps_run)
            .unwrap_or(t.steps.len() as u64);
        Some((mean, stall, steps))
    });
    CostLine {
        what: "1,000 training steps".into(),
        cost: step.map(|s| hourly * 1000.0 * s / 3600.0),
        formula: match (step, step_parts) {
            (Some(s), Some((mean, stall, steps))) => format!(
                "{} per hour × 1000 × {} s per step ÷ 3600 (mean step {} s + {} s checkpoint stalls ÷ {steps} steps)",
                money(cur, hourly),
                num(s),
                num(mean),
                num(stall)
            ),
            _ => "no training step measured".into(),
        },
    }
}

/// One failure: rate × (recovery + steps lost × `step` s), the median over the chaos
/// trials.
fn failure_line(cur: &str, hourly: f64, step: Option<f64>, data: &RunData) -> CostLine {
    let trials: Vec<(f64, f64)> = data
        .chaos
        .iter()
        .flat_map(|c| c.trials.iter())
        .filter_map(|t| Some((t.recovery_s?, t.steps_lost.unwrap_or(0.0))))
        .collect();
    // Without a measured step time the redone steps cannot be priced: the figure is
    // then the recovery alone, and the formula says so.
    let per_failure: Vec<f64> = trials
        .iter()
        .map(|(rec, lost)| rec + lost * step.unwrap_or(0.0))
        .collect();
    CostLine {
        what: "one failure (median over chaos trials)".into(),
        cost: (!per_failure.is_empty()).then(|| hourly * median(&per_failure) / 3600.0),
        formula: if per_failure.is_empty() {
            "no chaos trial with a recovery time".into()
        } else {
            failure_formula(cur, hourly, step, &trials)
        },
    }
}

/// The formula of [`failure_line`] for a non-empty list of (recovery s, steps lost).
fn failure_formula(cur: &str, hourly: f64, step: Option<f64>, trials: &[(f64, f64)]) -> String {
    let rec = median(&trials.iter().map(|t| t.0).collect::<Vec<_>>());
    let lost = median(&trials.iter().map(|t| t.1).collect::<Vec<_>>());
    match step {
        Some(step) => format!(
            "{} per hour × (recovery {} s + {} steps lost × {} s per step) ÷ 3600, median of {} trial(s) (medians shown)",
            money(cur, hourly),
            num(rec),
            num(lost),
            num(step),
            trials.len()
        ),
        None => format!(
            "{} per hour × recovery {} s ÷ 3600, median of {} trial(s); the {} steps lost are not priced: no training step time was measured",
            money(cur, hourly),
            num(rec),
            trials.len(),
            num(lost)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_keeps_small_amounts_readable() {
        assert_eq!(money("USD", 12.345), "USD 12.35");
        assert_eq!(money("USD", 0.0123), "USD 0.0123");
        assert_eq!(money("EUR", 0.000123), "EUR 0.000123");
        assert_eq!(money("USD", 0.0), "USD 0.00");
    }
}
