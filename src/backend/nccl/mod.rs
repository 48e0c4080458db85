//! The NCCL backend: device buffers on this rank's GPU, NCCL collectives on one CUDA
//! stream, CUDA events around every call.
//!
//! Shape, and why:
//! - [`locate`] finds `libnccl.so.2` wherever pip, a distribution or a tarball put it,
//!   and [`library`] loads it by full path and resolves every NCCL function burnin
//!   calls into one table, once. cudarc's own NCCL loader misses pip's file name and
//!   panics when NCCL is absent; burnin must instead say what is missing and exit 2.
//! - [`device`] holds the CUDA side (context, stream, device memory, events) through
//!   cudarc's driver layer. `crate::gpu` has made sure libcuda is present first, which
//!   cudarc needs to not panic.
//! - [`backend`] is [`NcclBackend`]: communicators are created non-blocking, and every
//!   wait polls stream completion and `ncclCommGetAsyncError` against the deadline,
//!   then `ncclCommAbort`s with a message naming the collective, the size, this rank
//!   and how long it waited. A hang becomes an error instead of a stuck job.
//!
//! All of burnin's NCCL and CUDA `unsafe` lives in this module and `crate::gpu`, each
//! block with the invariant it relies on.
pub mod backend;
pub mod device;
pub mod kernels;
pub mod library;
pub mod locate;
pub mod sdc_kernels;

pub use backend::NcclBackend;
pub use device::DeviceBuffer;

use anyhow::{anyhow, Result};
use library::NcclLib;
use std::path::Path;
use std::sync::OnceLock;

/// The NCCL to use: the explicit one when named, else the first one the search of
/// this process's environment finds (searched once per process).
pub fn library(explicit: Option<&Path>) -> Result<&'static NcclLib> {
    match explicit {
        Some(p) => locate::explicit(p).map_err(|e| anyhow!(e)),
        None => {
            static FOUND: OnceLock<Result<&'static NcclLib, String>> = OnceLock::new();
            FOUND
                .get_or_init(|| locate::search(&locate::SearchRoots::from_env()))
                .clone()
                .map_err(|e| anyhow!(e))
        }
    }
}

/// NCCL's version and where it was loaded from: "2.28.9 (/path/to/libnccl.so.2)".
pub fn nccl_version(explicit: Option<&Path>) -> Result<String> {
    library(explicit).map(|lib| lib.describe())
}

/// Whether this rank can use NCCL on its GPU (`local_rank` picks the GPU): a working
/// CUDA driver as new as burnin's bindings, a GPU of its own, and a loadable NCCL.
/// The error is one line that says what to do.
pub fn usable(local_rank: usize, explicit: Option<&Path>) -> Result<()> {
    let count = crate::gpu::ready().map_err(|e| anyhow!(e))?;
    // Modulo, not "local rank < count": under `srun --gpus-per-task=1` (or any
    // per-rank CUDA_VISIBLE_DEVICES) every rank sees exactly one GPU, its own.
    crate::gpu::describe_device(gpu_for(local_rank, count)).map_err(|e| anyhow!(e))?;
    library(explicit).map(|_| ())
}

/// The GPU a rank uses: its local rank modulo the GPUs it can see.
pub fn gpu_for(local_rank: usize, count: usize) -> usize {
    local_rank % count.max(1)
}

#[cfg(test)]
mod tests {
    use super::locate::{search, site_packages_of, SearchRoots};
    use super::*;
    use std::path::PathBuf;

    /// The venv whose pip nvidia-nccl the tests load (the project's dev venv by
    /// default; `BURNIN_TEST_VENV` to point elsewhere).
    fn test_venv() -> Option<PathBuf> {
        let venv = std::env::var_os("BURNIN_TEST_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.venv")));
        let has_nccl = site_packages_of(&venv)
            .iter()
            .any(|sp| sp.join(locate::PIP_LIB).is_file());
        if has_nccl {
            Some(venv)
        } else {
            eprintln!(
                "skipped: no pip nvidia-nccl under {} (set BURNIN_TEST_VENV)",
                venv.display()
            );
            None
        }
    }

    fn only(roots: SearchRoots) -> SearchRoots {
        SearchRoots {
            by_name: false,
            python: None,
            ldconfig: false,
            ..roots
        }
    }

    #[test]
    fn finds_pip_nccl_under_a_virtual_env() {
        let Some(venv) = test_venv() else { return };
        let lib = search(&only(SearchRoots {
            prefixes: vec![venv.clone()],
            ..SearchRoots::default()
        }))
        .unwrap();
        assert!(
            lib.path.ends_with("nvidia/nccl/lib/libnccl.so.2"),
            "{lib:?}"
        );
        assert!(lib.path.starts_with(&venv), "{lib:?}");
        assert_eq!((lib.version.major, lib.version.minor), (2, 28), "{lib:?}");
    }

    #[test]
    fn finds_pip_nccl_in_a_site_packages_dir() {
        let Some(venv) = test_venv() else { return };
        let sp = site_packages_of(&venv);
        let lib = search(&only(SearchRoots {
            site_packages: sp,
            ..SearchRoots::default()
        }))
        .unwrap();
        assert!(lib.path.ends_with("libnccl.so.2"), "{lib:?}");
    }

    #[test]
    fn finds_pip_nccl_through_the_venvs_python() {
        let Some(venv) = test_venv() else { return };
        let python = venv.join("bin/python3");
        if !python.exists() {
            eprintln!("skipped: no {}", python.display());
            return;
        }
        let roots = SearchRoots {
            python: Some(python),
            ..only(SearchRoots::default())
        };
        let lib = search(&roots).unwrap();
        assert!(
            lib.path.ends_with("nvidia/nccl/lib/libnccl.so.2"),
            "{lib:?}"
        );
    }

    #[test]
    fn nccl_version_names_version_and_file() {
        let Some(venv) = test_venv() else { return };
        let file = site_packages_of(&venv)
            .into_iter()
            .map(|sp| sp.join(locate::PIP_LIB))
            .find(|f| f.is_file())
            .unwrap();
        let v = nccl_version(Some(&file)).unwrap();
        assert!(v.starts_with("2.28."), "{v}");
        assert!(v.ends_with(&format!("({})", file.display())), "{v}");
        // The directory works as well as the file.
        let dir = file.parent().unwrap();
        assert_eq!(nccl_version(Some(dir)).unwrap(), v);
    }

    /// The resolved table works for what needs no GPU: error strings, and the
    /// unique id (host-side bootstrap), so the ABI of those entries is right.
    #[test]
    fn loaded_table_answers_without_a_gpu() {
        let Some(venv) = test_venv() else { return };
        let lib = search(&only(SearchRoots {
            prefixes: vec![venv],
            ..SearchRoots::default()
        }))
        .unwrap();
        assert!(
            lib.explain(6).starts_with("ncclRemoteError ("),
            "{}",
            lib.explain(6)
        );
        assert!(!lib.error_string(library::NCCL_SUCCESS).is_empty());
        let mut id = library::UniqueId {
            internal: [0; library::UNIQUE_ID_BYTES],
        };
        // SAFETY: writes one ncclUniqueId through a valid pointer; needs no GPU.
        let rc = unsafe { (lib.get_unique_id)(&mut id) };
        assert_eq!(rc, library::NCCL_SUCCESS, "{}", lib.explain(rc));
        assert!(id.internal.iter().any(|b| *b != 0));
    }

    #[test]
    fn explicit_bogus_path_is_an_error_naming_it() {
        let e = format!(
            "{:#}",
            nccl_version(Some(Path::new("/nonexistent/dir/libnccl.so.2"))).unwrap_err()
        );
        assert!(
            e.contains("/nonexistent/dir/libnccl.so.2") && e.contains("--nccl-lib"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let e = format!("{:#}", nccl_version(Some(Path::new("/tmp"))).unwrap_err());
        assert!(e.contains("/tmp holds no libnccl.so.2"), "{e}");
    }

    /// Without a CUDA driver (this dev box, CI) `usable` must fail in one line that
    /// says so, and not panic in cudarc.
    #[test]
    fn usable_without_a_driver_says_so() {
        let inv = crate::gpu::inventory();
        if inv.error.is_none() {
            eprintln!("a usable GPU is present: {inv:?}");
            return;
        }
        let e = format!("{:#}", usable(0, None).unwrap_err());
        assert_eq!(Some(&e), inv.error.as_ref());
        assert!(!e.contains('\n'));
    }
}

/// Tests that need a real GPU, a CUDA 13 driver and NCCL (name it with
/// `BURNIN_NCCL_LIB` or let the search find it). They run in one process as a
/// singleton MPI world of one rank, so everything that talks to MPI is in one test.
#[cfg(test)]
mod gpu_tests {
    use super::*;
    use crate::backend::{Backend, Buffer, Bufs, Call, WaitCtx};
    use crate::kinds::{CollKind, Dtype, RedOp};
    use crate::results::sweep::{Plan, Sampling};
    use crate::stats::Combine;
    use crate::sweep::{self, GroupInfo};
    use clap::Parser;
    use mpi::topology::Communicator;
    use std::time::Duration;

    #[test]
    #[ignore = "needs a GPU and cargo: cargo test --release --lib -- --ignored (launch/gpu-check covers the same through the binary)"]
    fn inventory_lists_gpus_like_nvidia_smi() {
        let inv = crate::gpu::inventory();
        assert_eq!(inv.error, None, "{inv:?}");
        assert!(!inv.gpus.is_empty());
        let v = inv.driver_version.clone().unwrap();
        assert!(v.split('.').count() == 2, "{v}");
        for (i, g) in inv.gpus.iter().enumerate() {
            assert_eq!(g.index, i);
            assert!(!g.name.is_empty() && g.memory_bytes > 0, "{g:?}");
            assert!(g.uuid.starts_with("GPU-") && g.uuid.len() == 40, "{g:?}");
            // "0000:18:00.0"
            assert!(
                g.pci_bus_id.len() >= 12 && g.pci_bus_id.contains(':'),
                "{g:?}"
            );
        }
        usable(0, None).unwrap();
        let v = nccl_version(None).unwrap();
        assert!(v.starts_with("2."), "{v}");
    }

    fn f32_bytes(v: impl Iterator<Item = f32>) -> Vec<u8> {
        v.flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    #[ignore = "needs a GPU and cargo: cargo test --release --lib -- --ignored (launch/gpu-check covers the same through the binary)"]
    fn collectives_on_one_gpu_are_correct() {
        let world = crate::world::World::init().unwrap();
        let cfg = crate::cli::Cli::parse_from(["burnin", "probe"])
            .global
            .backend_config();
        let dog = crate::watchdog::Watchdog::start("gpu test".into(), false);
        let be = NcclBackend::new(world.comm.duplicate(), world.local_rank, &cfg, dog).unwrap();
        assert_eq!((be.rank(), be.size()), (0, 1));
        let d = be.describe();
        assert!(
            d.starts_with("NCCL 2.") && d.contains(" on GPU 0 ") && d.contains("(PCI "),
            "{d}"
        );

        // all_reduce sum of f32 on one rank: the input comes back, timed by events.
        let n = 1 << 20;
        let input = f32_bytes((0..n).map(|i| (i % 1000) as f32));
        let mut send = be.alloc(n * 4).unwrap();
        let mut recv = be.alloc(n * 4).unwrap();
        assert!(matches!(send, Buffer::Device(_)) && send.len() == n * 4);
        be.upload(&mut send, &input).unwrap();
        let call = Call {
            kind: CollKind::AllReduce,
            dtype: Dtype::F32,
            op: RedOp::Sum,
            root: 0,
            count: n,
            in_place: false,
        };
        let ctx = WaitCtx {
            what: "all_reduce 4MiB f32 sum (gpu test)".into(),
            deadline: Duration::from_secs(60),
            barrier: false,
        };
        let times = be
            .run_timed(
                &call,
                Bufs::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                5,
                &ctx,
            )
            .unwrap();
        assert_eq!(times.len(), 5);
        assert!(times.iter().all(|t| *t > 0.0 && *t < 1.0), "{times:?}");
        let mut out = vec![0u8; n * 4];
        be.download(&recv, &mut out).unwrap();
        assert!(out == input, "all_reduce on one rank changed the data");
        // Zero iterations is a no-op; a short buffer is refused, not overrun.
        let none = be
            .run_timed(&call, Bufs::InPlace(&mut recv), 0, &ctx)
            .unwrap();
        assert!(none.is_empty());
        let mut small = be.alloc(16).unwrap();
        let e = be
            .run_timed(&call, Bufs::InPlace(&mut small), 1, &ctx)
            .unwrap_err();
        assert!(format!("{e:#}").contains("buffer has"), "{e:#}");

        // Every collective, type, op and placement through the sweep's own checked
        // path (the collective table computes the expected values).
        let plan = Plan {
            collectives: CollKind::ALL.to_vec(),
            dtypes: Dtype::ALL.to_vec(),
            ops: RedOp::ALL.to_vec(),
            sizes: vec![8192, 1 << 20],
            placements: vec![false, true],
            root: 0,
            check: true,
            combine: Combine::Max,
            sampling: Sampling::Fixed {
                warmup: 1,
                iters: 3,
            },
            timing: Default::default(),
        };
        let group = GroupInfo {
            tier: crate::kinds::TierKind::World,
            group: 0,
            label: "world".into(),
            members: vec![0],
            hosts: vec![world.host.clone()],
        };
        let mut bad = Vec::new();
        for &kind in &plan.collectives {
            let ops = if kind.reduces() {
                plan.ops.clone()
            } else {
                vec![RedOp::Sum]
            };
            for &dtype in &plan.dtypes {
                for &op in &ops {
                    for &size in &plan.sizes {
                        for &in_place in &plan.placements {
                            let p = sweep::measure(
                                &be,
                                &plan,
                                kind,
                                dtype,
                                op,
                                size,
                                in_place,
                                &group,
                                Duration::from_secs(60),
                                sweep::Hooks::default(),
                            )
                            .unwrap();
                            assert_eq!(p.iterations, 3);
                            assert!(p.time.p50_us > 0.0, "{kind} {dtype} {op:?} {size}");
                            if p.wrong != Some(0) {
                                bad.push(format!(
                                    "{kind} {dtype} {op:?} {size} in_place={in_place}: {:?}",
                                    p.wrong
                                ));
                            }
                        }
                    }
                }
            }
        }
        assert!(bad.is_empty(), "wrong results:\n{}", bad.join("\n"));
        drop(send);
        drop(recv);
        drop(small);
        drop(be);
    }
}
