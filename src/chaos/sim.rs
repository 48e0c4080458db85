//! The simulated cluster's link cut (`link-cut` faults): `sim-cluster cut|heal NODE`,
//! and a guard that heals the link whatever happens.
use super::events::unix_now;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Run `sim-cluster cut|heal NODE`.
pub(super) fn sim(sim: &Path, verb: &str, node: &str) -> Result<()> {
    let out = std::process::Command::new(sim)
        .args([verb, node])
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {} {verb} {node}", sim.display()))?;
    if !out.status.success() {
        bail!(
            "{} {verb} {node} failed: {}",
            sim.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Heals a cut link whatever happens.
pub(super) struct Cut<'a> {
    sim: &'a Path,
    node: String,
    healed: bool,
}

impl<'a> Cut<'a> {
    pub(super) fn new(sim: &'a Path, node: &str) -> Cut<'a> {
        Cut {
            sim,
            node: node.to_string(),
            healed: false,
        }
    }

    pub(super) fn heal(&mut self) -> Result<f64> {
        self.healed = true;
        sim(self.sim, "heal", &self.node)?;
        Ok(unix_now())
    }
}

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        if !self.healed {
            let _ = sim(self.sim, "heal", &self.node);
        }
    }
}
