//! PyTorch's deterministic-algorithms mode through a few lines of C++
//! (`deterministic.cpp`, compiled by build.rs): tch has no switch for it.
//!
//! On CUDA, kernels with atomics (index_add, scatter_add backward, some cuBLAS paths)
//! make float sums depend on timing; with the mode on, PyTorch picks deterministic
//! kernels or fails loudly on an op that has none. cuBLAS additionally needs
//! `CUBLAS_WORKSPACE_CONFIG=:4096:8` (or `:16:8`) in the environment before its first
//! handle is made.
use anyhow::{bail, Result};

extern "C" {
    fn burnin_set_deterministic(on: bool) -> bool;
    fn burnin_deterministic_enabled() -> bool;
}

/// Turn PyTorch's deterministic-algorithms mode on or off; whether it is now on.
pub fn set_deterministic(on: bool) -> Result<bool> {
    // SAFETY: plain C functions of our own (deterministic.cpp) taking and returning
    // bool; they catch every C++ exception and touch only libtorch's global context.
    let ok = unsafe { burnin_set_deterministic(on) };
    if !ok {
        bail!(
            "libtorch refused to switch deterministic algorithms {}",
            if on { "on" } else { "off" }
        );
    }
    Ok(deterministic_enabled())
}

/// Whether PyTorch's deterministic-algorithms mode is on.
pub fn deterministic_enabled() -> bool {
    // SAFETY: as above; a read of libtorch's global context.
    unsafe { burnin_deterministic_enabled() }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_switch_reaches_libtorch() {
        assert!(super::set_deterministic(true).unwrap());
        assert!(super::deterministic_enabled());
        assert!(!super::set_deterministic(false).unwrap());
    }
}
