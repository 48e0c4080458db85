//! `burnin smoke`: the first stage of an acceptance, in under a minute per node —
//! does every rank see its GPU, make a context, allocate memory, compute a matrix
//! product correctly, join a verified all_reduce, and write and read a file where the
//! checkpoints will go? One PASS/FAIL/SKIP line per check, printed by rank 0, naming
//! the rank and host of every failure; exit 1 on any FAIL.
//!
//! Shape, and why:
//! - Each check is local to its rank except the collective ones, and every rank makes
//!   the same MPI calls in the same order whatever its local results were (readiness
//!   is all-gathered before NCCL is touched), so a rank that failed early cannot leave
//!   the others blocked. Blocking GPU steps run under the watchdog.
//! - GPU mode or CPU mode is one decision for the whole job: `--backend nccl` means
//!   GPU checks (missing GPUs are FAILs, not errors: that is what smoke is for);
//!   `--backend mpi` means CPU; `auto` means GPU when any rank sees a GPU — a node
//!   without its GPUs in a GPU job must fail — else CPU, where the GPU checks are
//!   skipped with the driver's reason and the all_reduce goes through MPI.
//! - The matrix product uses small integers, so every result element has one exact
//!   value (also under TF32 or split-K accumulation): the check is equality, not a
//!   tolerance.
//! - Checking is pure ([`summarize`], [`render`]) and unit-tested; talking to CUDA,
//!   libtorch, MPI and the file system is in the `check_*` functions.
use crate::backend::{self, BackendKind, Bufs, Call, WaitCtx};
use crate::backend::{BackendChoice, BackendConfig};
use crate::collective::{self, Params, Pattern};
use crate::config::GlobalArgs;
use crate::error::Outcome;
use crate::kinds::{CollKind, Dtype, RedOp};
pub use crate::results::smoke::*;
use crate::units::Bytes;
use crate::watchdog::Watchdog;
use crate::world::World;
use anyhow::Result;
use mpi::topology::Communicator;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct SmokeArgs {
    /// Directory every rank writes and reads a test file in (the checkpoint storage the
    /// job will use; default: a `burnin-smoke` directory in the system's temp dir).
    #[arg(long, value_name = "DIR")]
    pub ckpt_dir: Option<PathBuf>,
    /// Also write every rank's results as JSON to FILE (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Longest any one smoke step may block (NCCL init included), whatever -T says.
const STEP_LIMIT: Duration = Duration::from_secs(30);
/// Bytes each rank writes and reads back in the checkpoint directory.
const FILE_BYTES: usize = 4 << 20;
/// Bytes each rank allocates and round-trips through GPU memory.
const GPU_BYTES: usize = 64 << 20;
/// Side of the square matrices multiplied.
pub const MATMUL_N: usize = 256;
/// Elements of the verified all_reduce (1 MiB of f32).
const ALL_REDUCE_ELEMS: usize = 1 << 18;

/// The checks, in the order they run and print.
pub const CHECKS: [&str; 7] = [
    "gpu",
    "context",
    "memory",
    "matmul",
    "comm-init",
    "all_reduce",
    "ckpt-dir",
];

fn pass(check: &str, detail: impl Into<String>, t: Instant) -> Check {
    Check {
        check: check.into(),
        status: Status::Pass,
        detail: detail.into(),
        seconds: t.elapsed().as_secs_f64(),
    }
}
fn fail(check: &str, detail: impl Into<String>, t: Instant) -> Check {
    Check {
        check: check.into(),
        status: Status::Fail,
        detail: detail.into(),
        seconds: t.elapsed().as_secs_f64(),
    }
}
fn skip(check: &str, detail: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        status: Status::Skip,
        detail: detail.into(),
        seconds: 0.0,
    }
}
fn from_result(check: &str, r: Result<String, String>, t: Instant) -> Check {
    match r {
        Ok(d) => pass(check, d, t),
        Err(e) => fail(check, e, t),
    }
}

/// One line per check: FAIL when any rank failed (naming up to four of them with
/// their hosts), SKIP when every rank skipped, else PASS with rank 0's detail.
pub fn summarize(ranks: &[RankSmoke]) -> Vec<Line> {
    let mut names: Vec<&str> = Vec::new();
    for r in ranks {
        for c in &r.checks {
            if !names.contains(&c.check.as_str()) {
                names.push(&c.check);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let of: Vec<(&RankSmoke, &Check)> = ranks
                .iter()
                .filter_map(|r| r.checks.iter().find(|c| c.check == name).map(|c| (r, c)))
                .collect();
            let passed = of.iter().filter(|(_, c)| c.status == Status::Pass).count();
            let failed: Vec<&(&RankSmoke, &Check)> = of
                .iter()
                .filter(|(_, c)| c.status == Status::Fail)
                .collect();
            let who = |r: &RankSmoke| format!("rank {} ({})", r.rank, r.host);
            let (status, detail) = if !failed.is_empty() {
                let mut parts: Vec<String> = failed
                    .iter()
                    .take(4)
                    .map(|(r, c)| format!("{}: {}", who(r), c.detail))
                    .collect();
                if failed.len() > 4 {
                    parts.push(format!("and {} more rank(s)", failed.len() - 4));
                }
                (Status::Fail, parts.join("; "))
            } else if passed == 0 {
                let d = of
                    .first()
                    .map(|(_, c)| c.detail.clone())
                    .unwrap_or_default();
                (Status::Skip, d)
            } else {
                let (r, c) = of
                    .iter()
                    .find(|(_, c)| c.status == Status::Pass)
                    .copied()
                    .unwrap_or(of[0]);
                let slowest = of
                    .iter()
                    .max_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds))
                    .map(|(r, c)| format!(" (slowest {} {:.2} s)", who(r), c.seconds))
                    .unwrap_or_default();
                let shown = if of.len() > 1 {
                    format!("{}: {}{slowest}", who(r), c.detail)
                } else {
                    c.detail.clone()
                };
                (Status::Pass, shown)
            };
            Line {
                check: name.to_string(),
                status,
                passed,
                ranks: of.len(),
                detail,
            }
        })
        .collect()
}

/// The lines as rank 0 prints them.
pub fn render(lines: &[Line]) -> String {
    let width = lines.iter().map(|l| l.check.len()).max().unwrap_or(5);
    let counts: Vec<String> = lines
        .iter()
        .map(|l| format!("{}/{}", l.passed, l.ranks))
        .collect();
    let cw = counts.iter().map(String::len).max().unwrap_or(3);
    lines
        .iter()
        .zip(&counts)
        .map(|(l, count)| {
            format!(
                "{}  {:<width$}  {:>cw$} ranks  {}\n",
                l.status.text(),
                l.check,
                count,
                l.detail
            )
        })
        .collect()
}

/// Whether this job runs the GPU checks; the reason when it does not.
fn decide_mode(world: &World, global: &GlobalArgs) -> Result<(bool, String)> {
    if global.backend == BackendChoice::Mpi {
        return Ok((false, "--backend mpi".into()));
    }
    let mine: Option<String> = crate::gpu::ready().err();
    let all: Vec<Option<String>> = world.all_gather_json(&mine)?;
    let any_gpu = all.iter().any(|p| p.is_none());
    if global.backend == BackendChoice::Nccl || any_gpu {
        return Ok((true, String::new()));
    }
    Ok((
        false,
        format!(
            "no GPU on any rank ({})",
            all[0].clone().unwrap_or_default()
        ),
    ))
}

/// `gpu`: the driver sees this rank's GPU.
fn check_gpu(local_rank: usize) -> Result<(usize, String), String> {
    let count = crate::gpu::ready()?;
    let index = backend::nccl::gpu_for(local_rank, count);
    let g = crate::gpu::describe_device(index)?;
    Ok((
        index,
        format!(
            "GPU {index} of {count}: {}, {}, PCI {}, {}",
            g.name,
            Bytes(g.memory_bytes),
            g.pci_bus_id,
            g.uuid
        ),
    ))
}

/// `context` and `memory`: a context on the GPU, then `GPU_BYTES` allocated, written,
/// read back, compared and freed.
fn check_context_and_memory(gpu: usize, dog: &Watchdog) -> (Check, Check) {
    use cudarc::driver::CudaContext;
    let t = Instant::now();
    let _guard = dog.arm(
        &format!("smoke: creating a CUDA context on GPU {gpu}"),
        STEP_LIMIT,
    );
    let ctx = match CudaContext::new(gpu) {
        Ok(c) => c,
        Err(e) => {
            let why = crate::gpu::driver_error_text(e);
            return (
                fail("context", format!("cuCtxCreate on GPU {gpu}: {why}"), t),
                skip("memory", "no context"),
            );
        }
    };
    let info = ctx
        .mem_get_info()
        .map(|(free, total)| format!(", {} free of {}", Bytes(free as u64), Bytes(total as u64)))
        .unwrap_or_default();
    let context = pass(
        "context",
        format!(
            "context on GPU {gpu} in {:.2} s{info}",
            t.elapsed().as_secs_f64()
        ),
        t,
    );
    let t = Instant::now();
    let memory = (|| -> Result<String, String> {
        let err = |doing: &str, e| format!("{doing}: {}", crate::gpu::driver_error_text(e));
        let stream = ctx.default_stream();
        let host: Vec<u8> = (0..GPU_BYTES)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let dev = stream.clone_htod(&host).map_err(|e| {
            err(
                &format!("allocating and filling {}", Bytes(GPU_BYTES as u64)),
                e,
            )
        })?;
        let back = stream
            .clone_dtoh(&dev)
            .map_err(|e| err("copying back to the host", e))?;
        drop(dev);
        stream.synchronize().map_err(|e| err("freeing", e))?;
        match back.iter().zip(&host).position(|(a, b)| a != b) {
            None => Ok(format!(
                "{} allocated, written, read back identical, freed",
                Bytes(GPU_BYTES as u64)
            )),
            Some(i) => Err(format!(
                "{} round trip differs at byte {i}",
                Bytes(GPU_BYTES as u64)
            )),
        }
    })();
    (context, from_result("memory", memory, t))
}

/// Element (i, j) of the test matrices: small integers, so products are exact.
pub fn mat_a(i: usize, j: usize) -> i64 {
    ((i * 7 + j * 3) % 9) as i64 - 4
}
pub fn mat_b(i: usize, j: usize) -> i64 {
    ((i * 5 + j * 11 + 1) % 7) as i64 - 3
}

/// The exact product of the test matrices (n × n, row-major).
pub fn reference_product(n: usize) -> Vec<i64> {
    let mut c = vec![0i64; n * n];
    for i in 0..n {
        for k in 0..n {
            let a = mat_a(i, k);
            for j in 0..n {
                c[i * n + j] += a * mat_b(k, j);
            }
        }
    }
    c
}

/// Positions where `got` differs from `want`: (count, first index).
pub fn product_errors(got: &[f32], want: &[i64]) -> (usize, Option<usize>) {
    let mut wrong = 0;
    let mut first = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if *g as f64 != *w as f64 {
            wrong += 1;
            first.get_or_insert(i);
        }
    }
    if got.len() != want.len() {
        wrong += got.len().abs_diff(want.len());
        first.get_or_insert(got.len().min(want.len()));
    }
    (wrong, first)
}

/// `matmul`: the product through libtorch, by the training binary in a child process
/// (burnin has no libtorch of its own): `cuda:N` on a GPU rank, else `cpu`. SKIP with
/// the reason when there is no training binary or libtorch, or libtorch sees no CUDA.
fn check_matmul(gpu: Option<usize>) -> Check {
    let t = Instant::now();
    let trainer = match crate::trainer::locate() {
        Ok(t) => t,
        Err(e) => return skip("matmul", format!("no libtorch here: {e}")),
    };
    let device = gpu.map_or("cpu".to_string(), |g| format!("cuda:{g}"));
    let r: Result<crate::trainer::MatmulResult, String> =
        trainer.ask(&["--matmul-check", &device], STEP_LIMIT);
    match r {
        Ok(m) if m.status == "skip" => skip("matmul", m.detail),
        Ok(m) => from_result(
            "matmul",
            if m.status == "pass" {
                Ok(m.detail)
            } else {
                Err(m.detail)
            },
            t,
        ),
        Err(e) => fail("matmul", e, t),
    }
}

/// `ckpt-dir`: write, fsync, read back and compare a file, then remove it.
pub fn check_storage(dir: &Path, name: &str) -> Result<String, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    let path = dir.join(name);
    let data: Vec<u8> = (0..FILE_BYTES)
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8 ^ name.len() as u8)
        .collect();
    let t = Instant::now();
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&data)?;
        f.sync_all()
    })();
    let write_s = t.elapsed().as_secs_f64();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    let t = Instant::now();
    let mut back = Vec::with_capacity(FILE_BYTES);
    let read = std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut back));
    let read_s = t.elapsed().as_secs_f64();
    let removed = std::fs::remove_file(&path);
    if let Err(e) = read {
        return Err(format!("cannot read back {}: {e}", path.display()));
    }
    if back != data {
        return Err(format!(
            "{} read back differs from what was written",
            path.display()
        ));
    }
    if let Err(e) = removed {
        return Err(format!("cannot remove {}: {e}", path.display()));
    }
    let rate = |s: f64| {
        if s > 0.0 {
            format!("{:.2} GB/s", FILE_BYTES as f64 / s / 1e9)
        } else {
            "-".into()
        }
    };
    Ok(format!(
        "{} written (fsync) at {}, read back identical at {} (page cache), in {}",
        Bytes(FILE_BYTES as u64),
        rate(write_s),
        rate(read_s),
        dir.display()
    ))
}

/// Every rank's reason for not taking part in the collective ("rank r (host): why"),
/// learnt by all before anyone starts NCCL; empty when all are ready.
fn not_ready_ranks(world: &World, ready: Result<(), String>) -> Result<Vec<String>> {
    let all: Vec<Option<String>> = world.all_gather_json(&ready.err())?;
    Ok(all
        .iter()
        .enumerate()
        .filter_map(|(r, p)| {
            p.as_ref()
                .map(|p| format!("{}: {p}", world.describe_rank(r)))
        })
        .collect())
}

/// One timed all_reduce of [`ALL_REDUCE_ELEMS`] f32 over the world on `be`, every
/// element checked against the collective table; the pass line's detail.
fn all_reduce_once(be: &dyn backend::Backend, world: &World, kind: BackendKind) -> Result<String> {
    let coll = collective::get(CollKind::AllReduce);
    let p = Params {
        n: world.size,
        count: ALL_REDUCE_ELEMS,
        dtype: Dtype::F32,
        op: RedOp::Sum,
        root: 0,
    };
    let l = coll.layout(&p);
    let es = p.dtype.size();
    let mut send = be.alloc(l.send * es)?;
    let mut recv = be.alloc(l.recv * es)?;
    be.fill(&mut send, &coll.input(&p, world.rank))?;
    be.fill(
        &mut recv,
        &Pattern::one(p, 0, l.recv, collective::Source::Poison),
    )?;
    let call = Call {
        kind: CollKind::AllReduce,
        dtype: p.dtype,
        op: p.op,
        root: 0,
        count: p.count,
        in_place: false,
    };
    let ctx = WaitCtx {
        what: format!("smoke: {} over {} ranks", call.describe(), world.size),
        deadline: STEP_LIMIT,
        barrier: false,
    };
    let times = be.run_timed(
        &call,
        Bufs::OutOfPlace {
            send: &send,
            recv: &mut recv,
        },
        1,
        &ctx,
    )?;
    let m = be.check(&recv, &coll.expected(&p, world.rank, false, 0))?;
    if m.wrong > 0 {
        anyhow::bail!(
            "{} wrong element(s) of {}, first at {}",
            m.wrong,
            p.count,
            m.first.unwrap_or(0)
        );
    }
    Ok(format!(
        "{} f32 sum over {} ranks ({kind}) in {:.1} us, every element correct",
        Bytes((p.count * es) as u64),
        world.size,
        times.first().copied().unwrap_or(0.0) * 1e6
    ))
}

/// `comm-init` and `all_reduce`: build the backend over the world, then one
/// all_reduce whose every element is checked against the collective table.
fn check_collective(
    world: &World,
    cfg: &BackendConfig,
    kind: BackendKind,
    ready: Result<(), String>,
    dog: Arc<Watchdog>,
) -> Result<(Check, Check)> {
    let t = Instant::now();
    // Everyone learns who cannot take part before anyone starts NCCL.
    let not_ready = not_ready_ranks(world, ready)?;
    if !not_ready.is_empty() {
        let why = format!("not attempted: {}", not_ready.join("; "));
        return Ok((
            fail("comm-init", why.clone(), t),
            fail("all_reduce", why, t),
        ));
    }
    let short = cfg.at_most(STEP_LIMIT);
    let built = backend::build(kind, world.comm.duplicate(), world, &short, dog);
    let init = match &built {
        Ok(be) => pass("comm-init", be.describe(), t),
        Err(e) => fail("comm-init", format!("{e:#}"), t),
    };
    let all_ok: Vec<bool> = world.all_gather_json(&built.is_ok())?;
    let Ok(be) = built else {
        return Ok((
            init,
            fail("all_reduce", "not attempted: no communicator", t),
        ));
    };
    if all_ok.iter().any(|ok| !ok) {
        let bad: Vec<String> = (0..world.size)
            .filter(|&r| !all_ok[r])
            .map(|r| world.describe_rank(r))
            .collect();
        let why = format!("not attempted: comm-init failed on {}", bad.join(", "));
        return Ok((init, fail("all_reduce", why, t)));
    }
    let t = Instant::now();
    let result = all_reduce_once(be.as_ref(), world, kind);
    let reduce = from_result("all_reduce", result.map_err(|e| format!("{e:#}")), t);
    Ok((init, reduce))
}

/// GPU mode's `gpu`, `context` and `memory` checks of this rank's GPU, pushed onto
/// `checks`; the GPU's index when it has one, and whether this rank can take part in
/// the NCCL collective (the reason when not).
fn check_local_gpu(
    world: &World,
    global: &GlobalArgs,
    dog: &Arc<Watchdog>,
    checks: &mut Vec<Check>,
) -> (Option<usize>, Result<(), String>) {
    let mut gpu_index = None;
    let mut ready: Result<(), String> = Ok(());
    let t = Instant::now();
    match check_gpu(world.local_rank) {
        Ok((index, detail)) => {
            gpu_index = Some(index);
            checks.push(pass("gpu", detail, t));
            let (ctx, mem) = check_context_and_memory(index, dog);
            if ctx.status != Status::Pass || mem.status != Status::Pass {
                ready = Err(format!(
                    "its GPU failed the {} check",
                    if ctx.status != Status::Pass {
                        "context"
                    } else {
                        "memory"
                    }
                ));
            }
            checks.push(ctx);
            checks.push(mem);
        }
        Err(e) => {
            ready = Err(format!("no usable GPU: {e}"));
            checks.push(fail("gpu", e, t));
            checks.push(skip("context", "no GPU"));
            checks.push(skip("memory", "no GPU"));
        }
    }
    if ready.is_ok() {
        if let Err(e) = backend::nccl::library(global.nccl_lib.as_deref()) {
            ready = Err(format!("{e:#}"));
        }
    }
    (gpu_index, ready)
}

/// `ckpt-dir`: write, read back and remove a file of this rank's in the checkpoint
/// directory (`--ckpt-dir`, or [`default_dir`]).
fn check_ckpt_dir(world: &World, args: &SmokeArgs) -> Check {
    let dir = args.ckpt_dir.clone().unwrap_or_else(default_dir);
    let t = Instant::now();
    let name = format!(
        ".burnin-smoke-{}-rank{}-{}",
        crate::evidence::folder_name(&world.host),
        world.rank,
        std::process::id()
    );
    from_result("ckpt-dir", check_storage(&dir, &name), t)
}

/// Rank 0's end of `burnin smoke`: the table and verdict on stdout, and the JSON
/// report when `--json` names a file.
fn print_and_write(
    world: &World,
    args: &SmokeArgs,
    mode: String,
    lines: Vec<Line>,
    ranks: Vec<RankSmoke>,
    ok: bool,
    started: Instant,
) -> Result<()> {
    println!(
        "# burnin smoke: {} ranks on {} node(s), mode {mode}",
        world.size,
        world.nodes.len()
    );
    print!("{}", render(&lines));
    println!(
        "# verdict: {} in {:.1} s",
        if ok { "PASS" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let report = SmokeReport {
            mode,
            lines,
            ranks,
            outcome: if ok { "pass" } else { "fail" }.into(),
        };
        crate::results::write_json_atomic(path, &report)?;
        println!("# wrote {}", path.display());
    }
    Ok(())
}

/// `burnin smoke`.
pub fn run(
    world: &World,
    global: &GlobalArgs,
    args: &SmokeArgs,
    dog: Arc<Watchdog>,
) -> Result<Outcome> {
    let started = Instant::now();
    let (gpu_mode, why_cpu) = decide_mode(world, global)?;
    let mut checks: Vec<Check> = Vec::new();
    let (gpu_index, ready) = if gpu_mode {
        check_local_gpu(world, global, &dog, &mut checks)
    } else {
        for c in ["gpu", "context", "memory"] {
            checks.push(skip(c, format!("CPU mode: {why_cpu}")));
        }
        (None, Ok(()))
    };
    let matmul = if gpu_mode && gpu_index.is_none() {
        skip("matmul", "no GPU")
    } else {
        check_matmul(gpu_index)
    };
    checks.push(matmul);
    let kind = if gpu_mode {
        BackendKind::Nccl
    } else {
        BackendKind::Mpi
    };
    let (init, reduce) =
        check_collective(world, &global.backend_config(), kind, ready, dog.clone())?;
    checks.push(init);
    checks.push(reduce);
    checks.push(check_ckpt_dir(world, args));

    let mine = RankSmoke {
        rank: world.rank,
        host: world.host.clone(),
        local_rank: world.local_rank,
        checks,
    };
    let all: Vec<RankSmoke> = world.all_gather_json(&mine)?;
    let lines = summarize(&all);
    let ok = lines.iter().all(|l| l.status != Status::Fail);
    if world.rank == 0 {
        let mode = if gpu_mode {
            "GPU (NCCL)".to_string()
        } else {
            format!("CPU (MPI): {why_cpu}")
        };
        print_and_write(world, args, mode, lines, all, ok, started)?;
    }
    Ok(Outcome::from_ok(ok))
}

/// The default checkpoint directory smoke writes into.
pub fn default_dir() -> PathBuf {
    std::env::temp_dir().join("burnin-smoke")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: usize, host: &str, checks: &[(&str, Status, &str, f64)]) -> RankSmoke {
        RankSmoke {
            rank,
            host: host.into(),
            local_rank: rank,
            checks: checks
                .iter()
                .map(|(c, s, d, t)| Check {
                    check: c.to_string(),
                    status: *s,
                    detail: d.to_string(),
                    seconds: *t,
                })
                .collect(),
        }
    }

    #[test]
    fn a_failure_on_any_rank_fails_the_line_and_names_rank_and_host() {
        let all = vec![
            rank(
                0,
                "a",
                &[
                    ("gpu", Status::Pass, "H200", 0.1),
                    ("ckpt-dir", Status::Pass, "ok", 0.2),
                ],
            ),
            rank(
                1,
                "b",
                &[
                    ("gpu", Status::Pass, "H200", 0.3),
                    ("ckpt-dir", Status::Fail, "cannot create /x: denied", 0.0),
                ],
            ),
        ];
        let lines = summarize(&all);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].status, Status::Pass);
        assert_eq!((lines[0].passed, lines[0].ranks), (2, 2));
        assert!(
            lines[0].detail.contains("slowest rank 1 (b)"),
            "{}",
            lines[0].detail
        );
        assert_eq!(lines[1].status, Status::Fail);
        assert_eq!(lines[1].passed, 1);
        assert_eq!(lines[1].detail, "rank 1 (b): cannot create /x: denied");
        let text = render(&lines);
        assert!(
            text.lines().nth(1).unwrap().starts_with("FAIL  ckpt-dir"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn all_skipped_is_skip_and_many_failures_are_counted() {
        let all: Vec<RankSmoke> = (0..6)
            .map(|r| {
                rank(
                    r,
                    "h",
                    &[
                        ("gpu", Status::Skip, "CPU mode", 0.0),
                        ("x", Status::Fail, "bad", 0.0),
                    ],
                )
            })
            .collect();
        let lines = summarize(&all);
        assert_eq!(lines[0].status, Status::Skip);
        assert_eq!(lines[0].detail, "CPU mode");
        assert_eq!(lines[1].status, Status::Fail);
        assert!(
            lines[1].detail.ends_with("and 2 more rank(s)"),
            "{}",
            lines[1].detail
        );
    }

    #[test]
    fn the_reference_product_is_exact_and_errors_are_found() {
        let n = 3;
        let c = reference_product(n);
        // Spot-check one element by hand.
        let want: i64 = (0..n).map(|k| mat_a(1, k) * mat_b(k, 2)).sum();
        assert_eq!(c[n + 2], want);
        let got: Vec<f32> = c.iter().map(|&x| x as f32).collect();
        assert_eq!(product_errors(&got, &c), (0, None));
        let mut bad = got.clone();
        bad[4] += 1.0;
        assert_eq!(product_errors(&bad, &c), (1, Some(4)));
        // The full-size product stays exact in f32 (|values| well below 2^24).
        let big = reference_product(MATMUL_N);
        assert!(big.iter().all(|v| v.unsigned_abs() < 1 << 24));
    }

    #[test]
    fn storage_check_round_trips_and_names_an_unwritable_dir() {
        let dir = tempfile::tempdir().unwrap();
        let ok = check_storage(dir.path(), "f").unwrap();
        assert!(ok.contains("read back identical"), "{ok}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "file removed"
        );
        let e = check_storage(Path::new("/proc/burnin-smoke-nope"), "f").unwrap_err();
        assert!(e.contains("/proc/burnin-smoke-nope"), "{e}");
    }
}
