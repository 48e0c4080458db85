//! The training run, in the order it happens: validate, pick the device and the
//! backend, open the outputs, build the model, resume or start fresh, train (with
//! checkpoints), then check the replicas, read the last checkpoint back, measure the
//! raw storage, and report.
use super::checkpoint::{self, CkptCtx};
use super::ddp::Ddp;
use super::model::{hash_tensors, Model};
use super::optim::AdamW;
use anyhow::{bail, Context, Result};
use burnin::backend;
use burnin::chaos::victim::Hooks;
use burnin::config::GlobalArgs;
use burnin::error::{Agreed, Outcome};
use burnin::results::provenance::Provenance;
use burnin::results::{self, Jsonl};
use burnin::train::args::{self, DeviceChoice, TrainArgs, TrainPlan};
use burnin::train::data;
use burnin::train::report::CkptWrite;
use burnin::train::report::{
    self, Determinism, IoRate, RankStep, StepRecord, StorageReport, TrainReport,
};
use burnin::train::storage;
use burnin::watchdog::Watchdog;
use burnin::world::World;
use mpi::collective::CommunicatorCollectives;
use mpi::topology::Communicator;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tch::{Device, Tensor};

/// Keys of the random streams of the raw-file content and of the checkpoint padding.
const RAW_IO_STREAM: u64 = 0x5241_5749_4f00_0001;
const PAD_STREAM: u64 = 0x5041_4444_494e_4701;

/// An error every rank reached from the same data.
fn agreed(e: anyhow::Error) -> anyhow::Error {
    Agreed(format!("{e:#}")).into()
}

/// Fail as an agreed error naming the ranks that reported a problem.
fn agree_on_problems(world: &World, mine: Option<String>, what: &str) -> Result<()> {
    let all: Vec<Option<String>> = world.all_gather_json(&mine)?;
    let bad: Vec<(usize, &String)> = all
        .iter()
        .enumerate()
        .filter_map(|(r, p)| p.as_ref().map(|p| (r, p)))
        .collect();
    let Some(&(_, first)) = bad.first() else {
        return Ok(());
    };
    if bad.len() == world.size && bad.iter().all(|(_, p)| *p == first) {
        bail!(Agreed(format!("{what}: {first} (on every rank)")));
    }
    let shown: Vec<String> = bad
        .iter()
        .take(4)
        .map(|(r, p)| format!("{}: {p}", world.describe_rank(*r)))
        .collect();
    let more = if bad.len() > 4 {
        format!("; and {} more rank(s)", bad.len() - 4)
    } else {
        String::new()
    };
    bail!(Agreed(format!("{what}: {}{more}", shown.join("; "))))
}

/// Physical memory of this host in bytes (0 when unknown).
fn host_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration values.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        pages as u64 * size as u64
    } else {
        0
    }
}

/// CPU, or CUDA when every rank sees a GPU (auto) or must (cuda). A rank's GPU is
/// its local rank modulo the GPUs it sees: the one the NCCL backend picks too (so
/// the gradient buckets and NCCL share a device), and under a per-rank
/// CUDA_VISIBLE_DEVICES (`srun --gpus-per-task=1`) the only one it has.
fn choose_device(world: &World, choice: DeviceChoice) -> Result<Device> {
    let count = match choice {
        DeviceChoice::Cpu => 0,
        _ => tch::Cuda::device_count(),
    };
    let ok = count >= 1;
    let all: Vec<(bool, i64)> = world.all_gather_json(&(ok, count))?;
    let all_ok = all.iter().all(|(ok, _)| *ok);
    let gpu = || {
        Device::Cuda(burnin::backend::nccl::gpu_for(
            world.local_rank,
            count.max(1) as usize,
        ))
    };
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto if all_ok => Ok(gpu()),
        DeviceChoice::Auto => Ok(Device::Cpu),
        DeviceChoice::Cuda if all_ok => Ok(gpu()),
        DeviceChoice::Cuda => {
            let bad: Vec<String> = all
                .iter()
                .enumerate()
                .filter(|(_, (ok, _))| !ok)
                .take(8)
                .map(|(r, (_, n))| format!("{} sees {n} CUDA device(s)", world.describe_rank(r)))
                .collect();
            bail!(Agreed(format!(
                "--device cuda: {} (libtorch found no CUDA device there); use --device cpu",
                bad.join(", ")
            )))
        }
    }
}

/// One libtorch thread per rank; on CUDA, PyTorch's deterministic mode.
fn setup_determinism(device: Device) -> Result<Determinism> {
    tch::set_num_threads(1);
    let mut d = Determinism {
        torch_threads: tch::get_num_threads(),
        cuda_deterministic_requested: false,
        cuda_deterministic_enabled: None,
        cublas_workspace_config: None,
    };
    if device.is_cuda() {
        // Set before MPI started (main) unless the launcher exported one.
        d.cublas_workspace_config = std::env::var("CUBLAS_WORKSPACE_CONFIG").ok();
        d.cuda_deterministic_requested = true;
        d.cuda_deterministic_enabled = Some(super::det::set_deterministic(true)?);
    }
    Ok(d)
}

/// Open --out on rank 0 (steps.jsonl truncated unless resuming); an agreed error.
fn open_out(world: &World, plan: &TrainPlan) -> Result<Option<Jsonl>> {
    let mut file = None;
    let mut problem: Option<String> = None;
    if world.rank == 0 {
        if let Some(dir) = &plan.out {
            let opened = results::create_out_dir(dir, "--out").and_then(|_| {
                let p = dir.join("steps.jsonl");
                if !plan.resume {
                    let _ = std::fs::remove_file(&p);
                }
                let _ = std::fs::remove_file(dir.join("run.json"));
                Jsonl::open(&p)
            });
            match opened {
                Ok(j) => file = Some(j),
                Err(e) => problem = Some(format!("{e:#}")),
            }
        }
    }
    let problem: Option<String> = world.broadcast_json(Some(&problem))?;
    if let Some(p) = problem {
        bail!(Agreed(p));
    }
    Ok(file)
}

fn device_name(d: Device) -> String {
    if d.is_cuda() { "cuda" } else { "cpu" }.to_string()
}

/// Run `f` under the watchdog.
fn guarded<T>(dog: &Watchdog, what: &str, limit: Duration, f: impl FnOnce() -> T) -> T {
    let _g = dog.arm(what, limit);
    f()
}

fn weights_hash(model: &Model) -> Result<String> {
    hash_tensors(model.params.iter().map(|p| (p.name.as_str(), &p.tensor)))
}

/// What one step left on this rank.
struct StepOut {
    rank: RankStep,
}

fn train_step(
    model: &Model,
    opt: &mut AdamW,
    ddp: &mut Ddp,
    plan: &TrainPlan,
    data_seed: u64,
    step: u64,
    rank: usize,
) -> Result<StepOut> {
    let m = &plan.model;
    let t0 = Instant::now();
    let toks = data::batch_tokens(
        data_seed,
        step,
        rank as u64,
        plan.batch as usize,
        m.seq as usize,
        m.vocab as u64,
    );
    let toks = Tensor::f_from_slice(&toks)?
        .f_view([plan.batch, m.seq + 1])?
        .f_to_device(model.device)?;
    let loss = model.loss(&toks)?;
    loss.f_backward().context("backward pass")?;
    // Reading the loss waits for everything queued before it (backward included).
    let loss_v = loss.f_double_value(&[])?;
    let compute_s = t0.elapsed().as_secs_f64();
    let comm = ddp.average_gradients(model, step)?;
    let t1 = Instant::now();
    opt.step(model)?;
    model.zero_grads()?;
    if model.device.is_cuda() {
        // Wait for the queued update, so the step time is the step's.
        fence(model)?;
    }
    let optimizer_s = t1.elapsed().as_secs_f64();
    Ok(StepOut {
        rank: RankStep {
            loss: loss_v,
            step_s: t0.elapsed().as_secs_f64(),
            compute_s,
            comm_s: comm.total(),
            allreduce_s: comm.allreduce_s,
            optimizer_s,
            bucket_s: comm.bucket_s.clone(),
        },
    })
}

/// Block until the device has finished the queued work (reads one element back).
fn fence(model: &Model) -> Result<()> {
    if let Some(p) = model.params.first() {
        p.tensor
            .f_detach()?
            .f_flatten(0, -1)?
            .f_double_value(&[0])?;
    }
    Ok(())
}

/// Every rank writes a plain file of `bytes` in the checkpoint directory, then reads it
/// back; aggregate rates. Collective.
fn raw_io(
    world: &World,
    dir: &Path,
    bytes: u64,
    dog: &Watchdog,
    limit: Duration,
) -> Result<(IoRate, IoRate)> {
    let path = dir.join(format!(".burnin-raw-io.rank-{:05}", world.rank));
    guarded(dog, "barrier before the raw write test", limit, || {
        world.comm.barrier()
    });
    let w = storage::raw_write(&path, bytes, data::mix(&[world.rank as u64, RAW_IO_STREAM]));
    let w_mine = w
        .as_ref()
        .map(|s| (bytes, *s))
        .map_err(|e| format!("{e:#}"));
    let ws: Vec<Result<(u64, f64), String>> = guarded(dog, "raw write test", limit, || {
        world.all_gather_json(&w_mine)
    })?;
    let r_mine = match w {
        Ok(_) => storage::raw_read(&path).map_err(|e| format!("{e:#}")),
        Err(_) => Err("write failed".into()),
    };
    let _ = std::fs::remove_file(&path);
    let rs: Vec<Result<(u64, f64), String>> = guarded(dog, "raw read test", limit, || {
        world.all_gather_json(&r_mine)
    })?;
    let collect = |v: Vec<Result<(u64, f64), String>>, what: &str| -> Result<Vec<(u64, f64)>> {
        v.into_iter()
            .enumerate()
            .map(|(r, x)| {
                x.map_err(|e| {
                    anyhow::Error::new(Agreed(format!("raw {what} test on rank {r}: {e}")))
                })
            })
            .collect()
    };
    Ok((
        IoRate::from_ranks(&collect(ws, "write")?),
        IoRate::from_ranks(&collect(rs, "read")?),
    ))
}

pub fn run(
    world: &World,
    global: &GlobalArgs,
    args: &TrainArgs,
    dog: Arc<Watchdog>,
) -> Result<Outcome> {
    let mut plan = args::plan(args, world.size).map_err(agreed)?;
    // Chaos hooks: events JSONL, clock offsets, derived deadlines, check-ins, faults.
    let fixed = global
        .timeout
        .map(|t| Duration::from_secs_f64(t.max(0.001)));
    let mut hooks = Hooks::start(
        world,
        plan.fault.clone(),
        plan.out.as_deref(),
        &plan.ckpt_dir,
        fixed,
        plan.resume,
        dog.clone(),
    )?;
    let timeout = hooks.deadlines().init();
    let device = choose_device(world, plan.device)?;
    let determinism = setup_determinism(device)?;
    let (kind, why) = backend::resolve(world, &global.backend_config())?;
    let be = backend::build(
        kind,
        world.comm.duplicate(),
        world,
        &global.backend_config(),
        dog.clone(),
    )?;
    let mut steps_file = open_out(world, &plan)?;
    let provenance = Provenance::collect(world, &why, &be.describe());
    let uses_ckpt = plan.ckpt_every > 0 || plan.resume;
    if uses_ckpt {
        let mine = std::fs::create_dir_all(&plan.ckpt_dir)
            .err()
            .map(|e| format!("cannot create {}: {e}", plan.ckpt_dir.display()));
        agree_on_problems(world, mine, "--ckpt-dir")?;
    }
    if let Some(pad) = plan.ckpt_bytes {
        // The padding lives in memory and tch copies every tensor once more to write
        // it: keep the node's ranks well inside the host's memory.
        let need = pad
            .saturating_mul(2)
            .saturating_mul(world.local_size as u64);
        let have = host_memory();
        let mine = (have > 0 && need > have / 2).then(|| {
            format!(
                "{} per shard needs about {} of memory on a host with {} ranks, more than half of its {}",
                report::size(pad),
                report::size(need),
                world.local_size,
                report::size(have)
            )
        });
        agree_on_problems(world, mine, "--ckpt-bytes")?;
    }
    let model = Model::new(plan.model, plan.seed, device)?;
    let mut opt = AdamW::new(&model, plan.lr)?;
    let mut ddp = Ddp::new(be, &model, plan.bucket_bytes, timeout)?;
    let before_exchange = format!(
        "before its gradient all-reduce: {} bucket(s), {} of f32 in all",
        ddp.bucket_count(),
        report::size(plan.model.parameters() * 4)
    );
    let tokens_per_step = world.size as u64 * plan.batch as u64 * plan.model.seq as u64;
    if world.rank == 0 {
        println!(
            "# burnin train: {} ranks on {} nodes, device {}, backend {why}",
            world.size,
            world.nodes.len(),
            device_name(device),
        );
        println!(
            "# model: {} ({:.2} M parameters, {} gradient bucket(s) of up to {}); batch {} x {} tokens per rank, lr {}",
            plan.model.describe(),
            plan.model.parameters() as f64 / 1e6,
            ddp.bucket_count(),
            report::size(plan.bucket_bytes),
            plan.batch,
            plan.model.seq,
            plan.lr
        );
        let _ = std::io::stdout().flush();
    }
    let mut ctx = CkptCtx {
        root: plan.ckpt_dir.clone(),
        pad: None,
        device_name: device_name(device),
        dog: dog.clone(),
        deadline: timeout,
        pending_removal: Vec::new(),
        last_shard: None,
    };
    let resumed = if plan.resume {
        let t = Instant::now();
        let r = checkpoint::restore(&mut ctx, world, &plan, &model, &mut opt)?;
        hooks.restored(
            r.as_ref().map(|r| r.step),
            r.as_ref()
                .map(|r| r.restore_s)
                .unwrap_or_else(|| t.elapsed().as_secs_f64()),
            r.as_ref().map(|r| r.skipped.clone()).unwrap_or_default(),
        );
        r
    } else {
        if plan.ckpt_every > 0 {
            checkpoint::prepare_fresh(&ctx, world)?;
        }
        None
    };
    let start = resumed.as_ref().map(|r| r.step).unwrap_or(0);
    if let Some(r) = &resumed {
        // Continue the checkpoint's data stream.
        plan.seed = r.seed;
        if world.rank == 0 {
            println!(
                "# resumed from checkpoint step {} ({}): {} shard(s), {} verified (sha256) in {:.3} s",
                r.step,
                r.dir.display(),
                world.size,
                report::size(r.bytes),
                r.restore_s
            );
        }
    } else if plan.resume && world.rank == 0 {
        println!(
            "# nothing to resume from in {}: starting at step 1",
            plan.ckpt_dir.display()
        );
    }
    if plan.ckpt_every > 0 {
        ctx.pad = checkpoint::make_pad(
            plan.ckpt_bytes,
            &model,
            data::mix(&[plan.seed, world.rank as u64, PAD_STREAM]),
        )?;
    }
    if start >= plan.steps && world.rank == 0 {
        println!(
            "# already at step {start} of --steps {}: nothing to train",
            plan.steps
        );
    }
    let mut records: Vec<StepRecord> = Vec::new();
    let mut checkpoints: Vec<CkptWrite> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut shares = report::ShareSums::default();
    for step in start + 1..=plan.steps {
        let step_deadline = hooks.step_deadline();
        ddp.set_deadline(step_deadline);
        let pre = hooks.before_step(step, &before_exchange);
        let mut out = train_step(
            &model, &mut opt, &mut ddp, &plan, plan.seed, step, world.rank,
        )
        .with_context(|| format!("step {step}"))?;
        // The straggler's sleep is its compute; the check-in is waiting for peers.
        out.rank.compute_s += pre.slow_s;
        out.rank.comm_s += pre.checkin_s;
        out.rank.allreduce_s += pre.checkin_s;
        out.rank.step_s += pre.slow_s + pre.checkin_s;
        hooks.after_step(step, out.rank.compute_s);
        let gathered = guarded(
            &dog,
            &format!("gathering the timings of step {step}"),
            step_deadline,
            || world.gather_json(&out.rank),
        )?;
        if let Some(all) = &gathered {
            hooks.observe_ranks(step, &all.iter().map(|r| r.compute_s).collect::<Vec<_>>());
        }
        let mut record = gathered.map(|all| {
            shares.add(&all);
            StepRecord::from_ranks(step, &all, tokens_per_step)
        });
        if plan.checkpoint_due(step) {
            let sha = if world.rank == 0 {
                weights_hash(&model)?
            } else {
                String::new()
            };
            ctx.deadline = hooks.deadlines().checkpoint();
            let t = Instant::now();
            let saved = checkpoint::save(&mut ctx, world, &plan, &model, &opt, step, &sha)?;
            hooks.checkpoint_took(t.elapsed().as_secs_f64());
            if let Some(c) = saved {
                if world.rank == 0 {
                    println!(
                        "# checkpoint step {step}: {} x {} in {:.3} s ({:.3} GB/s), stall {:.3} s{}",
                        world.size,
                        report::size(c.bytes / world.size as u64),
                        c.write_s,
                        c.write_gbps,
                        c.stall_s,
                        if c.pruned.is_empty() {
                            String::new()
                        } else {
                            format!(", pruned steps {:?}", c.pruned)
                        }
                    );
                }
                if let Some(r) = &mut record {
                    r.checkpoint = Some(c.clone());
                }
                checkpoints.push(c);
            }
        }
        if let Some(r) = record {
            if !r.loss.is_finite() && problems.is_empty() {
                problems.push(format!("the loss is {} at step {step}", r.loss));
            }
            if plan.log_every > 0 && (step % plan.log_every == 0 || step == plan.steps) {
                println!(
                    "step {step:>6}/{}  loss {:.4}  step {:.2} ms  (compute {:.2}, grad exchange {:.2}, optimizer {:.2})",
                    plan.steps,
                    r.loss,
                    r.step_s * 1e3,
                    r.compute_s * 1e3,
                    r.comm_s * 1e3,
                    r.optimizer_s * 1e3
                );
                let _ = std::io::stdout().flush();
            }
            if let Some(j) = &mut steps_file {
                j.append(&r)?;
            }
            records.push(r);
        }
        hooks.end_of_step(step);
    }
    hooks.finished(plan.steps.max(start));
    let timeout = hooks.deadlines().checkpoint();

    // Replicas: every rank must end with the same weights.
    let final_sha = weights_hash(&model)?;
    let all_sha: Vec<String> = world.all_gather_json(&final_sha)?;
    let replicas_agree = all_sha.iter().all(|s| *s == final_sha);
    if !replicas_agree {
        let differ: Vec<usize> = (0..world.size)
            .filter(|&r| all_sha[r] != all_sha[0])
            .collect();
        problems.push(format!(
            "ranks {differ:?} ended with other weights than rank 0"
        ));
    }

    // Storage: read the last checkpoint back, then the raw baseline of the same size.
    let mut storage_report = None;
    if ctx.last_shard.is_some() && uses_ckpt {
        guarded(
            &dog,
            "barrier before the checkpoint read-back",
            timeout,
            || world.comm.barrier(),
        );
        let last_step = records.last().map(|r| r.step).unwrap_or(start);
        let mine = checkpoint::read_back(&ctx, &model, last_step).map_err(|e| format!("{e:#}"));
        let all: Vec<std::result::Result<Option<checkpoint::ReadBack>, String>> =
            guarded(&dog, "checkpoint read-back", timeout, || {
                world.all_gather_json(&mine)
            })?;
        let mut per_rank = Vec::new();
        for (r, x) in all.iter().enumerate() {
            match x {
                Err(e) => {
                    problems.push(format!("reading back the last checkpoint on rank {r}: {e}"))
                }
                Ok(None) => {}
                Ok(Some(rb)) => {
                    per_rank.push((rb.bytes, rb.seconds));
                    if let Some(p) = &rb.problem {
                        problems.push(format!("rank {r}: {p}"));
                    }
                }
            }
        }
        let ckpt_read = (per_rank.len() == world.size).then(|| IoRate::from_ranks(&per_rank));
        let shard_bytes = ctx.last_shard.as_ref().map(|s| s.bytes).unwrap_or(0);
        let mut raw_bytes = 0u64;
        world.comm.all_reduce_into(
            &shard_bytes,
            &mut raw_bytes,
            mpi::collective::SystemOperation::max(),
        );
        let (raw_w, raw_r) = raw_io(world, &plan.ckpt_dir, raw_bytes.max(1), &dog, timeout)?;
        let ckpt_write_gbps = if checkpoints.is_empty() {
            None
        } else {
            Some(burnin::stats::median(
                &checkpoints.iter().map(|c| c.write_gbps).collect::<Vec<_>>(),
            ))
        };
        let ck_r = ckpt_read.as_ref().map(|x| x.gbps);
        storage_report = Some(StorageReport {
            dir: plan.ckpt_dir.clone(),
            shard_bytes,
            ckpt_write_gbps,
            write_ratio: report::ratio_of(ckpt_write_gbps, Some(raw_w.gbps)),
            read_ratio: report::ratio_of(ck_r, Some(raw_r.gbps)),
            ckpt_read,
            raw_write: Some(raw_w),
            raw_read: Some(raw_r),
            cache_note: "reads after fsync + posix_fadvise(DONTNEED), best effort".into(),
        });
    }
    if world.rank != 0 {
        return Ok(Outcome::Pass);
    }
    let step_time = report::step_stats(&records);
    let shares = shares.fractions();
    let outcome = Outcome::from_ok(problems.is_empty());
    let report = TrainReport {
        schema_version: report::SCHEMA_VERSION,
        kind: "train".into(),
        provenance,
        device: device_name(device),
        determinism,
        parameters: plan.model.parameters(),
        buckets: ddp.bucket_count(),
        bucket_bytes: ddp.bucket_bytes(),
        grad_path: Some(ddp.path()),
        allreduce: burnin::results::comm::bucket_comm(
            &ddp.bucket_bytes(),
            &records
                .iter()
                .map(|r| r.bucket_allreduce_s.clone())
                .collect::<Vec<_>>(),
            world.size,
        ),
        tokens_per_step,
        resumed,
        first_step: start + 1,
        last_step: records.last().map(|r| r.step).unwrap_or(start),
        steps_run: records.len() as u64,
        tokens_per_s: if step_time.p50_us > 0.0 {
            tokens_per_step as f64 / (step_time.p50_us / 1e6)
        } else {
            0.0
        },
        step_time,
        compute_fraction: shares[0],
        comm_fraction: shares[1],
        allreduce_fraction: shares[2],
        optimizer_fraction: shares[3],
        losses: records.iter().map(|r| r.loss).collect(),
        checkpoints,
        storage: storage_report,
        final_weights_sha256: final_sha,
        replicas_agree,
        problems,
        outcome: if outcome == Outcome::Pass {
            "pass"
        } else {
            "fail"
        }
        .into(),
        finished_unix: burnin::watchdog::unix_seconds(std::time::SystemTime::now()),
        plan,
    };
    print!("\n{}", report::summary(&report));
    if let Some(dir) = &report.plan.out {
        results::write_json_atomic(&dir.join("run.json"), &report)?;
        println!("# results: {}", dir.join("run.json").display());
    }
    Ok(outcome)
}
