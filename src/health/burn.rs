//! The compute burn: fused multiply-adds on every SM for a fixed time, results checked
//! against the host's own `f32::mul_add` chain.
//!
//! Not in this build yet: [`burn`] measures nothing and returns None, so the burn's
//! criteria (TFLOP/s, spread, throttling under load) are NOT RUN with that reason
//! rather than judged on numbers that were never measured.
use crate::backend::nccl::device::Device;
use crate::results::gpu::Burn;
use std::sync::Arc;
use std::time::Duration;

/// Burn `dev` for `duration` (None: this build has no burn kernel).
pub fn burn(dev: &Arc<Device>, duration: Duration) -> Option<Burn> {
    let _ = (dev, duration);
    None
}
