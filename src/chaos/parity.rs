//! A finished run read back and compared with the uninterrupted reference: its
//! run.json, its steps' losses, and [`parity`] (losses bit for bit, final weights).
use super::report::Parity;
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;

pub(super) fn read_json(p: &Path) -> Result<Value> {
    let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", p.display()))
}

pub(super) fn losses(run: &Value) -> Vec<f64> {
    run["losses"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default()
}

/// Newest step recorded in a run's steps.jsonl.
pub(super) fn last_step(out: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(out.join("steps.jsonl")).ok()?;
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok()?["step"].as_u64())
}

/// step -> loss of a run's steps.jsonl.
fn step_losses(out: &Path) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(out.join("steps.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some((v["step"].as_u64()?, v["loss"].as_f64()?))
        })
        .collect()
}

/// Parity of a finished run (`run.json` in `out`) against the reference losses/sha.
pub(super) fn parity(
    run: &Value,
    ref_losses: &[f64],
    ref_sha: &str,
    before: Option<(&Path, u64)>,
) -> Parity {
    let mut p = Parity::default();
    let sha = run["final_weights_sha256"].as_str().unwrap_or("");
    p.weights_match = Some(!sha.is_empty() && sha == ref_sha);
    if p.weights_match == Some(false) {
        p.detail = Some(format!("final weights {sha} vs reference {ref_sha}"));
    }
    let first = run["first_step"].as_u64().unwrap_or(1).max(1);
    let l = losses(run);
    let mut ok = !l.is_empty() || run["steps_run"].as_u64() == Some(0);
    for (i, x) in l.iter().enumerate() {
        let step = first + i as u64;
        match ref_losses.get(step as usize - 1) {
            Some(r) if r.to_bits() == x.to_bits() => {}
            other => {
                ok = false;
                p.detail.get_or_insert(format!(
                    "loss of step {step}: {x} vs reference {}",
                    other
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "none".into())
                ));
                break;
            }
        }
    }
    p.losses_match = Some(ok);
    p.steps_compared = l.len();
    if let Some((dir, upto)) = before {
        let mut same = true;
        for (step, x) in step_losses(dir).into_iter().filter(|(s, _)| *s <= upto) {
            if ref_losses.get(step as usize - 1).map(|r| r.to_bits()) != Some(x.to_bits()) {
                same = false;
                p.detail
                    .get_or_insert(format!("loss of step {step} before the fault differs"));
                break;
            }
        }
        p.before_fault_match = Some(same);
    }
    p
}
