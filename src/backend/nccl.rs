//! The NCCL backend (device buffers through cudarc). Placeholder until the real
//! implementation lands: it reports NCCL as unavailable.
use anyhow::{bail, Result};

/// Device memory owned by the NCCL backend.
pub struct DeviceBuffer {
    len: usize,
}

impl DeviceBuffer {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Whether NCCL can be loaded, and its version.
pub fn nccl_version(_explicit: Option<&std::path::Path>) -> Result<String> {
    bail!("NCCL support is not built yet")
}

/// Whether this rank can use NCCL on its GPU (`local_rank` picks the GPU).
pub fn usable(_local_rank: usize, explicit: Option<&std::path::Path>) -> Result<()> {
    let inv = crate::gpu::inventory();
    if let Some(e) = inv.error {
        bail!("{e}");
    }
    nccl_version(explicit).map(|_| ())
}

/// Placeholder NCCL backend.
pub struct NcclBackend;

impl NcclBackend {
    pub fn new(
        _comm: mpi::topology::SimpleCommunicator,
        _local_rank: usize,
        _global: &crate::cli::GlobalArgs,
        _watchdog: std::sync::Arc<crate::watchdog::Watchdog>,
    ) -> Result<NcclBackend> {
        bail!("NCCL backend not built yet")
    }
}

impl super::Backend for NcclBackend {
    fn kind(&self) -> super::BackendKind {
        super::BackendKind::Nccl
    }
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn control(&self) -> &mpi::topology::SimpleCommunicator {
        unimplemented!()
    }
    fn supports(&self, _d: super::Dtype, _o: Option<super::RedOp>) -> bool {
        false
    }
    fn alloc(&self, _b: usize) -> Result<super::Buffer> {
        bail!("x")
    }
    fn upload(&self, _b: &mut super::Buffer, _s: &[u8]) -> Result<()> {
        bail!("x")
    }
    fn download(&self, _b: &super::Buffer, _d: &mut [u8]) -> Result<()> {
        bail!("x")
    }
    fn reduce_scatter_in_place_offset(&self, c: usize) -> usize {
        c
    }
    fn run_timed(
        &self,
        _c: &super::Call,
        _b: super::Bufs<'_>,
        _i: usize,
        _x: &super::WaitCtx,
    ) -> Result<Vec<f64>> {
        bail!("x")
    }
    fn describe(&self) -> String {
        String::new()
    }
}
