//! The NCCL backend's own edges on the GPU twin (tests/gpu-twin), through the library
//! rather than the binary: bounds of copies, event timing, grouped send/recv, a failed
//! `ncclGetUniqueId` shared with every rank, a GPU error under a copy, a hung call, and
//! how each communicator ends (destroyed in order, or aborted).
//!
//! Each case is two real ranks under mpirun: the parent test runs this test binary's
//! `rank_side` (ignored on its own) with `BURNIN_BACKEND_TWIN_CASE` naming the case,
//! and every rank prints `backend-twin: rank R: CASE ok` when all its checks passed.
mod common;

use burnin::backend::nccl::device::{Device, DeviceBuffer};
use burnin::backend::nccl::NcclBackend;
use burnin::backend::{
    Backend, BackendChoice, BackendConfig, Buffer, Bufs, Call, HostBuffer, WaitCtx,
};
use burnin::collective::pattern::{Pattern, Source};
use burnin::collective::{P2p, Params};
use burnin::kinds::{CollKind, Dtype, RedOp};
use common::*;
use mpi::collective::CommunicatorCollectives;
use mpi::topology::Communicator;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CASE: &str = "BURNIN_BACKEND_TWIN_CASE";

/// `mpirun -np 2` of this binary's `rank_side` for `case`, on the twin with `env`.
fn two_ranks(case: &str, env: &[(&str, &str)]) -> Run {
    let counts = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("backend-twin")
        .join(format!("{case}-{}", std::process::id()));
    std::fs::create_dir_all(&counts).unwrap();
    let mut c = mpirun_cmd(2);
    twin().env(&mut c, &counts);
    c.env(CASE, case).env("TWIN_GPUS", "2");
    for (k, v) in env {
        c.env(k, v);
    }
    c.arg(std::env::current_exe().unwrap()).args([
        "--exact",
        "rank_side",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    let r = run_bounded(c, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&counts);
    assert!(!r.timed_out, "{case}: timed out: {}", r.all());
    assert_no_panic(&r);
    assert_eq!(r.code, Some(0), "{case}: {}", r.all());
    for rank in 0..2 {
        let ok = format!("backend-twin: rank {rank}: {case} ok");
        assert!(r.stdout.contains(&ok), "{case}: no '{ok}': {}", r.all());
    }
    r
}

#[test]
fn copies_timing_groups_and_teardown_on_two_twin_ranks() {
    two_ranks("healthy", &[]);
}

#[test]
fn a_unique_id_that_rank_0_cannot_make_is_every_ranks_error() {
    // A node whose NCCL_SOCKET_IFNAME names no interface: NCCL's bootstrap fails. The
    // long list makes rank 0's reason longer than the 512 bytes it shares.
    let list = format!("=nosuch9,{}", "x".repeat(600));
    two_ranks("ifname", &[("NCCL_SOCKET_IFNAME", &list)]);
}

#[test]
fn an_ecc_error_under_a_copy_aborts_and_later_work_is_refused() {
    // Each rank's fourth host-to-device copy meets an uncorrectable ECC error: the
    // fill's and the check's tables are the first two, then two uploads.
    two_ranks("ecc", &[("TWIN_CUDA_ECC_COPY", "4")]);
}

#[test]
fn a_hung_call_ends_at_its_deadline_without_spinning_a_core() {
    two_ranks("hang", &[("TWIN_NCCL_HANG", "0:1,1:1")]);
}

#[test]
fn a_teardown_that_never_completes_is_aborted_at_its_limit() {
    two_ranks("finalize-hang", &[("TWIN_NCCL_FINALIZE_HANG", "0:1,1:1")]);
}

#[test]
fn a_collective_on_libtorchs_memory_waits_for_its_default_stream() {
    // Copies run 300 ms late: a collective that did not wait would read old memory.
    two_ranks("borrowed", &[("TWIN_COPY_MS", "300")]);
}

#[test]
fn a_send_that_fails_inside_a_group_fails_the_group() {
    // Rank 0's first group: its first send or receive fails; rank 1's group waits for it.
    two_ranks("p2p-error", &[("TWIN_NCCL_P2P_ERROR", "0:1")]);
}

#[test]
fn a_peers_abort_while_the_wait_is_descheduled_still_fails_the_group() {
    // The race a loaded machine showed: rank 1 read its communicator's state ("no
    // error"), was descheduled, and by the time it looked at its stream the group had
    // failed on rank 0's abort and drained; the wait took the idle stream for success.
    // Made on demand: every poll answers the state read 1 s before, and rank 0 fails
    // 1.5 s after rank 1 launched its group.
    two_ranks(
        "p2p-error-late",
        &[
            ("TWIN_NCCL_P2P_ERROR", "0:1"),
            ("TWIN_NCCL_POLL_LAG_MS", "1000"),
        ],
    );
}

// ------------------------------------------------------------------ the rank side

/// A twin library's test-only function, from the copy burnin loaded.
fn twin_fn(lib: &str, name: &str) -> *mut c_void {
    extern "C" {
        fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    }
    let (lib, sym) = (CString::new(lib).unwrap(), CString::new(name).unwrap());
    // SAFETY: RTLD_NOW | RTLD_NOLOAD (2 | 4) only finds a library already loaded.
    unsafe {
        let h = dlopen(lib.as_ptr(), 2 | 4);
        assert!(!h.is_null(), "{lib:?} is not loaded");
        let f = dlsym(h, sym.as_ptr());
        assert!(!f.is_null(), "the twin has no {name}");
        f
    }
}

/// How this process's twin communicators ended: (made, destroyed, aborted).
fn comm_ends() -> (u32, u32, u32) {
    let f = twin_fn(
        &std::env::var("BURNIN_NCCL_LIB").unwrap(),
        "burnin_twin_comm_ends",
    );
    // SAFETY: the signature of tests/gpu-twin/nccl.c's burnin_twin_comm_ends.
    let f: extern "C" fn(*mut u32, *mut u32, *mut u32) = unsafe { std::mem::transmute(f) };
    let (mut m, mut d, mut a) = (0, 0, 0);
    f(&mut m, &mut d, &mut a);
    (m, d, a)
}

/// Kernel modules loaded and not unloaded in this process.
fn live_modules() -> i32 {
    let f = twin_fn("libcuda.so.1", "burnin_twin_live_modules");
    // SAFETY: the signature of tests/gpu-twin/cuda.c's burnin_twin_live_modules.
    let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
    f()
}

/// Timing events created and not destroyed in this process.
fn live_events() -> i32 {
    let f = twin_fn("libcuda.so.1", "burnin_twin_live_events");
    // SAFETY: the signature of tests/gpu-twin/cuda.c's burnin_twin_live_events.
    let f: extern "C" fn() -> c_int = unsafe { std::mem::transmute(f) };
    f()
}

/// Fill a buffer and check it with the backend's kernels (which loads them).
fn fill_and_check(be: &NcclBackend, rank: usize) {
    let p = Params {
        n: 2,
        count: 1024,
        dtype: Dtype::F32,
        op: RedOp::Sum,
        root: 0,
    };
    let pat = Pattern::one(p, 0, 1024, Source::Plain { rank });
    let mut b = be.alloc(4096).unwrap();
    be.fill(&mut b, &pat).unwrap();
    assert_eq!(be.check(&b, &pat).unwrap().wrong, 0);
    assert_eq!(live_modules(), 1);
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: c_int, t: *mut Timespec) -> c_int;
    }
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: CLOCK_THREAD_CPUTIME_ID (3) into a valid timespec.
    assert_eq!(unsafe { clock_gettime(3, &mut t) }, 0);
    Duration::new(t.sec as u64, t.nsec as u32)
}

fn f32_bytes(v: impl Iterator<Item = f32>) -> Vec<u8> {
    v.flat_map(|x| x.to_le_bytes()).collect()
}

fn ctx(what: &str, deadline: Duration) -> WaitCtx {
    WaitCtx {
        what: what.into(),
        deadline,
        barrier: false,
    }
}

fn all_reduce(count: usize) -> Call {
    Call {
        kind: CollKind::AllReduce,
        dtype: Dtype::F32,
        op: RedOp::Sum,
        root: 0,
        count,
        in_place: false,
    }
}

fn err_text<T>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
#[ignore = "one rank of a case: run by this file's other tests under mpirun"]
fn rank_side() {
    let case = std::env::var(CASE).expect("run by the tests of tests/backend_twin.rs");
    let world = burnin::world::World::init().unwrap();
    let rank = world.rank;
    let cfg = BackendConfig {
        choice: BackendChoice::Nccl,
        nccl_lib: std::env::var_os("BURNIN_NCCL_LIB").map(Into::into),
        deadline: Duration::from_secs(match case.as_str() {
            "hang" | "finalize-hang" => 2,
            _ => 20,
        }),
    };
    let dog = burnin::watchdog::Watchdog::start(format!("backend twin rank {rank}"), false);
    let open = || NcclBackend::new(world.comm.duplicate(), world.local_rank, &cfg, dog.clone());
    match case.as_str() {
        "healthy" => {
            healthy(open().unwrap(), rank);
            // Its kernels were unloaded and its events destroyed with it.
            assert_eq!((live_modules(), live_events()), (0, 0), "rank {rank}");
            // A communicator that ran work ends by finalize and destroy, and so does one
            // that ran none (NCCL's finalize may answer ncclSuccess at once).
            assert_eq!(comm_ends(), (1, 1, 0), "rank {rank}");
            drop(open().unwrap());
            assert_eq!(comm_ends(), (2, 2, 0), "rank {rank}");
        }
        "ifname" => {
            let e = err_text(open());
            // Every rank tells rank 0's reason, not only that it failed, cut at the 512
            // bytes rank 0 shares.
            for want in [
                "ncclGetUniqueId failed on group rank 0: ncclInvalidUsage",
                "Bootstrap : no socket interface found (NCCL_SOCKET_IFNAME==nosuch9,xxxxx",
            ] {
                assert!(e.contains(want), "rank {rank}: no '{want}' in: {e}");
            }
            let reason = e.split("group rank 0: ").nth(1).unwrap();
            let xs = reason.matches('x').count();
            assert!(
                reason.len() >= 512 && (300..600).contains(&xs),
                "rank {rank}: not cut at 512 bytes: {e}"
            );
            assert_eq!(comm_ends(), (0, 0, 0), "no communicator was made");
        }
        "ecc" => {
            let be = open().unwrap();
            fill_and_check(&be, rank);
            let mut b = be.alloc(4096).unwrap();
            be.upload(&mut b, &[1; 4096]).unwrap();
            // The copy is queued and fails when it runs: only the wait after it sees it.
            let e = err_text(be.upload(&mut b, &[2; 4096]));
            assert!(
                e.contains("copying 4KiB to GPU") && e.contains("uncorrectable ECC error"),
                "rank {rank}: {e}"
            );
            assert!(e.contains("the NCCL communicator was aborted"), "{e}");
            let e = err_text(be.upload(&mut b, &[3; 16]));
            assert!(
                e.contains(
                    "copying to the GPU: the NCCL communicator of this group was aborted earlier"
                ),
                "rank {rank}: {e}"
            );
            drop(b);
            drop(be);
            assert_eq!(comm_ends(), (1, 0, 1), "aborted once, never destroyed");
            // A GPU in error may still run its kernels: they are left loaded.
            assert_eq!(live_modules(), 1, "rank {rank}");
        }
        "hang" => {
            let be = open().unwrap();
            let n = 1024;
            let send = be.alloc(n * 4).unwrap();
            let mut recv = be.alloc(n * 4).unwrap();
            let (wall, cpu) = (Instant::now(), thread_cpu());
            let e = err_text(be.run_timed(
                &all_reduce(n),
                Bufs::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                1,
                &ctx("hung all_reduce", Duration::from_secs(2)),
            ));
            let (wall, cpu) = (wall.elapsed(), thread_cpu() - cpu);
            assert!(
                e.contains("hung all_reduce: not complete within the 2 s deadline")
                    && e.contains("the NCCL communicator was aborted"),
                "rank {rank}: {e}"
            );
            assert!(wall >= Duration::from_secs(2), "{wall:?}");
            // Waiting polls with a back-off: a hung peer must not cost a core (a bound,
            // not the back-off's edges: those are the unit test of `pause`).
            assert!(
                cpu < wall / 4,
                "rank {rank}: the wait used {cpu:?} of CPU in {wall:?}"
            );
            drop((send, recv, be));
            assert_eq!(comm_ends(), (1, 0, 1), "the hung communicator is aborted");
        }
        "borrowed" => {
            let be = open().unwrap();
            let n = 1024;
            // libtorch's memory: allocated by the driver, not by burnin (whose buffers
            // are cleared on its own stream).
            // SAFETY: the backend made its GPU's context current on this thread.
            let at = unsafe { cudarc::driver::result::malloc_sync(n * 4) }.unwrap();
            // What libtorch hands over: its tensor's address, 8-byte aligned.
            for bad in [0, at as usize + 4] {
                // SAFETY: refused before any use (null or misaligned).
                let e = err_text(unsafe { be.borrow(bad, 64) });
                assert!(e.contains("null or not 8-byte aligned"), "{e}");
            }
            // SAFETY: `at` is this backend's GPU memory and outlives `send`.
            let send = unsafe { be.borrow(at as usize, n * 4) }.unwrap();
            let mut recv = be.alloc(n * 4).unwrap();
            // libtorch writes the tensor on the context's default stream.
            let input = f32_bytes((0..n).map(|i| ((rank + 1) * i) as f32));
            // SAFETY: `at` holds n * 4 bytes; the staged copy lands on the default stream.
            unsafe { cudarc::driver::result::memcpy_htod_async(at, &input, std::ptr::null_mut()) }
                .unwrap();
            be.run_timed(
                &all_reduce(n),
                Bufs::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                1,
                &ctx("all_reduce of a tensor", Duration::from_secs(20)),
            )
            .unwrap();
            let mut out = vec![0u8; n * 4];
            be.download(&recv, &mut out).unwrap();
            assert!(
                out == f32_bytes((0..n).map(|i| (3 * i) as f32)),
                "rank {rank}: the all_reduce did not wait for the tensor's copy"
            );
            drop((send, recv, be));
            // SAFETY: allocated above; nothing uses it any more.
            unsafe { cudarc::driver::result::free_sync(at) }.unwrap();
            assert_eq!(comm_ends(), (1, 1, 0));
        }
        "finalize-hang" => {
            let be = open().unwrap();
            let send = be.alloc(64).unwrap();
            let mut recv = be.alloc(64).unwrap();
            be.run_timed(
                &all_reduce(16),
                Bufs::OutOfPlace {
                    send: &send,
                    recv: &mut recv,
                },
                1,
                &ctx("all_reduce", Duration::from_secs(20)),
            )
            .unwrap();
            drop((send, recv));
            // Teardown waits for the finalize at most the deadline (2 s here, 10 s at
            // most), then aborts instead of hanging the job's end.
            let t = Instant::now();
            drop(be);
            let t = t.elapsed();
            assert!(
                t >= Duration::from_secs(2) && t < Duration::from_secs(10),
                "{t:?}"
            );
            assert_eq!(comm_ends(), (1, 0, 1), "rank {rank}");
        }
        "p2p-error" | "p2p-error-late" => {
            let be = open().unwrap();
            if case == "p2p-error-late" {
                // Rank 0 fails its group and aborts 1.5 s after rank 1 launched its
                // own: inside the second of rank 1's stale polls (TWIN_NCCL_POLL_LAG_MS
                // = 1000), after it read "no error" and before its stream drains.
                world.comm.barrier();
                if rank == 0 {
                    std::thread::sleep(Duration::from_millis(1500));
                }
            }
            let send = be.alloc(64).unwrap();
            let mut recv = be.alloc(64).unwrap();
            let peer = 1 - rank;
            let ops = [
                P2p::Send {
                    peer,
                    at: 0,
                    count: 64,
                },
                P2p::Recv {
                    peer,
                    at: 0,
                    count: 64,
                },
            ];
            let e = err_text(be.run_group(
                &ops,
                &send,
                &mut recv,
                &ctx("exchange", Duration::from_secs(20)),
            ));
            if rank == 0 {
                assert!(
                    e.contains("exchange: NCCL reported ncclSystemError")
                        && e.contains("injected failure of the group's first nccl"),
                    "{e}"
                );
            } else {
                // Its peer's abort ends its wait.
                assert!(e.contains("exchange: NCCL reported ncclRemoteError"), "{e}");
            }
            drop((send, recv, be));
            assert_eq!(comm_ends(), (1, 0, 1));
        }
        other => panic!("unknown case {other}"),
    }
    println!("backend-twin: rank {rank}: {case} ok");
}

fn healthy(be: NcclBackend, rank: usize) {
    assert_eq!((be.rank(), be.size()), (rank, 2));
    // The GPU's PCI bus id, as the inventory reads it ("0000:18:00.0").
    let inv = burnin::gpu::inventory();
    let id = be.pci_bus_id().unwrap();
    assert_eq!(id, inv.gpus[rank].pci_bus_id, "rank {rank}");
    assert!(be.describe().ends_with(&format!("(PCI {id})")));
    fill_and_check(&be, rank);

    // Copies: within, exactly, and past the buffer (refused, both ways).
    let mut b = be.alloc(64).unwrap();
    let data: Vec<u8> = (0..64u8).map(|i| i ^ rank as u8).collect();
    be.upload(&mut b, &data[..16]).unwrap();
    be.upload(&mut b, &data).unwrap();
    let mut back = vec![0u8; 64];
    be.download(&b, &mut back).unwrap();
    assert_eq!(back, data);
    let mut head = vec![0u8; 16];
    be.download(&b, &mut head).unwrap();
    assert_eq!(head, data[..16]);
    let e = err_text(be.upload(&mut b, &[0; 65]));
    assert!(
        e.contains("upload of 65 bytes into a 64-byte buffer"),
        "{e}"
    );
    let e = err_text(be.download(&b, &mut [0; 65]));
    assert!(
        e.contains("download of 65 bytes from a 64-byte buffer"),
        "{e}"
    );
    // Only this backend's GPU memory: not another GPU's, not the host's.
    let other = Arc::new(Device::open(1 - rank).unwrap());
    let mut theirs = Buffer::Device(DeviceBuffer::alloc(&other, 64).unwrap());
    let e = err_text(be.upload(&mut theirs, &data));
    assert!(
        e.contains("the nccl backend was given another GPU's buffer"),
        "{e}"
    );
    let mut host = Buffer::Host(HostBuffer::new(64).unwrap());
    let e = err_text(be.upload(&mut host, &data));
    assert!(
        e.contains("the nccl backend was given a host buffer"),
        "{e}"
    );
    drop((theirs, other));

    // Timed all_reduce: the right sum, each time between its events and within the wall.
    let n = 1 << 16;
    let input = f32_bytes((0..n).map(|i| (i % 1000) as f32));
    let mut send = be.alloc(n * 4).unwrap();
    let mut recv = be.alloc(n * 4).unwrap();
    be.upload(&mut send, &input).unwrap();
    let wall = Instant::now();
    let times = be
        .run_timed(
            &all_reduce(n),
            Bufs::OutOfPlace {
                send: &send,
                recv: &mut recv,
            },
            3,
            &ctx("all_reduce", Duration::from_secs(20)),
        )
        .unwrap();
    let wall = wall.elapsed().as_secs_f64();
    assert_eq!(times.len(), 3);
    for t in &times {
        assert!(*t > 0.0 && *t <= wall, "{times:?} in {wall} s");
    }
    assert!(times.iter().sum::<f64>() <= wall, "{times:?} in {wall} s");
    let mut out = vec![0u8; n * 4];
    be.download(&recv, &mut out).unwrap();
    assert_eq!(out, f32_bytes((0..n).map(|i| 2.0 * (i % 1000) as f32)));
    // Two events an iteration and one to order after libtorch, reused and grown.
    assert_eq!(live_events(), 7);
    let times = be
        .run_timed(
            &all_reduce(n),
            Bufs::OutOfPlace {
                send: &send,
                recv: &mut recv,
            },
            5,
            &ctx("all_reduce", Duration::from_secs(20)),
        )
        .unwrap();
    assert_eq!((times.len(), live_events()), (5, 11));

    // Grouped send/recv (a replay's group): each rank gets the other's bytes, twice.
    let peer = 1 - rank;
    let mine: Vec<u8> = (0..4096u32).map(|i| (i * 7 + rank as u32) as u8).collect();
    let theirs: Vec<u8> = (0..4096u32).map(|i| (i * 7 + peer as u32) as u8).collect();
    let mut s = be.alloc(4096).unwrap();
    let mut r = be.alloc(8192).unwrap();
    be.upload(&mut s, &mine).unwrap();
    for round in 0..2 {
        let ops = [
            P2p::Send {
                peer,
                at: 0,
                count: 4096,
            },
            P2p::Recv {
                peer,
                at: round * 4096,
                count: 4096,
            },
        ];
        let wall = Instant::now();
        let t = be
            .run_group(&ops, &s, &mut r, &ctx("exchange", Duration::from_secs(20)))
            .unwrap();
        let wall = wall.elapsed().as_secs_f64();
        assert!(t > 0.0 && t <= wall, "round {round}: {t} s in {wall} s");
    }
    let mut got = vec![0u8; 8192];
    be.download(&r, &mut got).unwrap();
    assert_eq!(got[..4096], theirs[..]);
    assert_eq!(got[4096..], theirs[..]);
    assert!(matches!(r, Buffer::Device(_)));
    drop((b, send, recv, s, r, be));
}
