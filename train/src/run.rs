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
    self, Determinism, IoRate, RankStep, RestoreRecord, StepRecord, StorageReport, TrainReport,
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
    let open = || {
        results::open_records(plan.out.as_deref(), |dir| {
            let p = dir.join("steps.jsonl");
            if !plan.resume {
                let _ = std::fs::remove_file(&p);
            }
            let _ = std::fs::remove_file(dir.join("run.json"));
            p
        })
    };
    Ok(world.on_rank0_agreed(open)?.flatten())
}

fn device_name(d: Device) -> String {
    if d.is_cuda() { "cuda" } else { "cpu" }.to_string()
}

/// Run `f` under the watchdog.
fn guarded<T>(dog: &Watchdog, what: &str, limit: Duration, f: impl FnOnce() -> T) -> T {
    let _g = dog.arm(what, limit);
    f()
}

/// `--test-diverge`: one weight of this replica changed after `step`, as a GPU that
/// computed one value of the update wrong would leave it.
fn diverge(model: &Model, step: u64) {
    if let Some(p) = model.params.first() {
        tch::no_grad(|| {
            let flat = p.tensor.view([-1]);
            let v = flat.double_value(&[0]);
            let mut e = flat.get(0);
            let _ = e.fill_(v * 1.5 + 1e-3);
        });
        eprintln!("burnin-train: step {step}: one weight of this replica changed (--test-diverge)");
    }
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
    let mut session = Session::start(world, global, args, dog)?;
    let mut progress = session.resume()?;
    session.train(&mut progress)?;
    session.finish(progress)
}

/// What the steps of a run share, from the set-up to the report. (Fields drop in
/// this order: the checkpoint context and the gradient exchange before the hooks.)
struct Session<'a> {
    world: &'a World,
    ctx: CkptCtx,
    ddp: Ddp,
    opt: AdamW,
    model: Model,
    provenance: Provenance,
    steps_file: Option<Jsonl>,
    determinism: Determinism,
    device: Device,
    hooks: Hooks,
    plan: TrainPlan,
    dog: Arc<Watchdog>,
    /// Whether the run writes or reads checkpoints.
    uses_ckpt: bool,
    tokens_per_step: u64,
    /// What a rank is doing when it waits in the gradient exchange (for the hooks).
    before_exchange: String,
}

/// What the step loop accumulates.
struct Progress {
    resumed: Option<RestoreRecord>,
    /// Steps completed before this run's first.
    start: u64,
    records: Vec<StepRecord>,
    checkpoints: Vec<CkptWrite>,
    problems: Vec<String>,
    shares: report::ShareSums,
    /// The first replica check at which the weights differed.
    divergence: Option<results::train::ReplicaDivergence>,
}

impl<'a> Session<'a> {
    /// Plan, chaos hooks, device, backend, outputs and model: everything before the
    /// first step.
    fn start(
        world: &'a World,
        global: &GlobalArgs,
        args: &TrainArgs,
        dog: Arc<Watchdog>,
    ) -> Result<Self> {
        let plan = args::plan(args, world.size).map_err(agreed)?;
        // Chaos hooks: events JSONL, clock offsets, derived deadlines, check-ins, faults.
        let fixed = global
            .timeout
            .map(|t| Duration::from_secs_f64(t.max(0.001)));
        let hooks = Hooks::start(
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
        let steps_file = open_out(world, &plan)?;
        let provenance = Provenance::new(
            &why,
            burnin::world::mpi_version(),
            world.size,
            world.nodes.clone(),
            world.all_gather_text(&be.describe()),
        );
        let uses_ckpt = plan.ckpt_every > 0 || plan.resume;
        check_ckpt_storage(world, &plan, uses_ckpt)?;
        let model = Model::new(plan.model, plan.seed, device)?;
        let opt = AdamW::new(&model, plan.lr)?;
        let ddp = Ddp::new(be, &model, plan.bucket_bytes, timeout)?;
        let before_exchange = format!(
            "before its gradient all-reduce: {} bucket(s), {} of f32 in all",
            ddp.bucket_count(),
            report::size(plan.model.parameters() * 4)
        );
        let tokens_per_step = world.size as u64 * plan.batch as u64 * plan.model.seq as u64;
        if world.rank == 0 {
            announce(world, &plan, device, &why, &ddp);
        }
        let ctx = CkptCtx {
            root: plan.ckpt_dir.clone(),
            pad: None,
            device_name: device_name(device),
            dog: dog.clone(),
            deadline: timeout,
            pending_removal: Vec::new(),
            last_shard: None,
        };
        Ok(Session {
            world,
            ctx,
            ddp,
            opt,
            model,
            provenance,
            steps_file,
            determinism,
            device,
            hooks,
            plan,
            dog,
            uses_ckpt,
            tokens_per_step,
            before_exchange,
        })
    }

    /// Resume from the newest checkpoint that verifies (--resume) or start fresh,
    /// continue the checkpoint's data stream, and make the checkpoint padding.
    fn resume(&mut self) -> Result<Progress> {
        burnin::metrics::phase("train restore");
        let (world, plan) = (self.world, &mut self.plan);
        let resumed = if plan.resume {
            // restore carries the checkpoint's seed, learning rate and batch into plan
            let t = Instant::now();
            let r = checkpoint::restore(&mut self.ctx, world, plan, &self.model, &mut self.opt)?;
            self.hooks.restored(
                r.as_ref().map(|r| r.step),
                r.as_ref()
                    .map(|r| r.restore_s)
                    .unwrap_or_else(|| t.elapsed().as_secs_f64()),
                r.as_ref().map(|r| r.skipped.clone()).unwrap_or_default(),
            );
            r
        } else {
            if plan.ckpt_every > 0 {
                checkpoint::prepare_fresh(&self.ctx, world)?;
            }
            None
        };
        let start = resumed.as_ref().map(|r| r.step).unwrap_or(0);
        self.tokens_per_step = world.size as u64 * plan.batch as u64 * plan.model.seq as u64;
        if world.rank == 0 {
            announce_resume(world, plan, resumed.as_ref());
        }
        if plan.ckpt_every > 0 {
            self.ctx.pad = checkpoint::make_pad(
                plan.ckpt_bytes,
                &self.model,
                data::mix(&[plan.seed, world.rank as u64, PAD_STREAM]),
            )?;
        }
        if start >= plan.steps && world.rank == 0 {
            println!(
                "# already at step {start} of --steps {}: nothing to train",
                plan.steps
            );
        }
        Ok(Progress {
            resumed,
            start,
            records: Vec::new(),
            checkpoints: Vec::new(),
            problems: Vec::new(),
            shares: report::ShareSums::default(),
            divergence: None,
        })
    }

    /// The step loop, from the step after `p.start` to --steps.
    fn train(&mut self, p: &mut Progress) -> Result<()> {
        burnin::metrics::phase("train steps");
        for step in p.start + 1..=self.plan.steps {
            self.step(step, p)?;
        }
        self.hooks.finished(self.plan.steps.max(p.start));
        Ok(())
    }

    /// One step on every rank: train, gather the timings on rank 0, checkpoint when
    /// due, record.
    fn step(&mut self, step: u64, p: &mut Progress) -> Result<()> {
        let world = self.world;
        let step_deadline = self.hooks.step_deadline();
        self.ddp.set_deadline(step_deadline);
        let pre = self.hooks.before_step(step, &self.before_exchange);
        let mut out = train_step(
            &self.model,
            &mut self.opt,
            &mut self.ddp,
            &self.plan,
            self.plan.seed,
            step,
            world.rank,
        )
        .with_context(|| format!("step {step}"))?;
        if self.plan.diverge == Some((world.rank, step)) {
            diverge(&self.model, step);
        }
        // The straggler's sleep is its compute; the check-in is waiting for peers.
        out.rank.compute_s += pre.slow_s;
        out.rank.comm_s += pre.checkin_s;
        out.rank.allreduce_s += pre.checkin_s;
        out.rank.step_s += pre.slow_s + pre.checkin_s;
        self.hooks.after_step(step, out.rank.compute_s);
        let gathered = guarded(
            &self.dog,
            &format!("gathering the timings of step {step}"),
            step_deadline,
            || world.gather_json(&out.rank),
        )?;
        if let Some(all) = &gathered {
            self.hooks
                .observe_ranks(step, &all.iter().map(|r| r.compute_s).collect::<Vec<_>>());
        }
        let mut record = gathered.map(|all| {
            p.shares.add(&all);
            StepRecord::from_ranks(step, &all, self.tokens_per_step)
        });
        if self.plan.checkpoint_due(step) {
            if let Some(c) = self.checkpoint(step)? {
                if let Some(r) = &mut record {
                    r.checkpoint = Some(c.clone());
                }
                p.checkpoints.push(c);
            }
        }
        if let Some(r) = record {
            self.record(step, r, p)?;
        }
        let every = self.plan.replica_check_every;
        if every > 0 && step % every == 0 && step < self.plan.steps && p.divergence.is_none() {
            let hashes = guarded(
                &self.dog,
                &format!("comparing the replicas' weights after step {step}"),
                step_deadline,
                || -> Result<Vec<String>> { world.all_gather_json(&weights_hash(&self.model)?) },
            )?;
            self.judge_replicas(step, &hashes, p);
        }
        self.hooks.end_of_step(step);
        Ok(())
    }

    /// Name the replicas whose weights differ from the majority after `step` (the
    /// first time only: a replica that diverged stays diverged).
    fn judge_replicas(&self, step: u64, hashes: &[String], p: &mut Progress) {
        let Some((ranks, majority)) = results::train::odd_replicas(hashes) else {
            return;
        };
        let who: Vec<String> = ranks
            .iter()
            .map(|r| format!("rank {r} ({})", self.world.host_of(*r)))
            .collect();
        let text = if majority {
            format!(
                "step {step}: {} disagree(s) with the weights of the other {} replica(s)",
                who.join(", "),
                hashes.len() - ranks.len()
            )
        } else {
            format!(
                "step {step}: the replicas' weights disagree, no majority among {}: {}",
                hashes.len(),
                who.join(", ")
            )
        };
        if self.world.rank == 0 {
            println!("# replicas: {text}");
        }
        p.problems.push(format!("replicas diverged at {text}"));
        p.divergence = Some(results::train::ReplicaDivergence {
            step,
            hosts: ranks
                .iter()
                .map(|r| self.world.host_of(*r).to_string())
                .collect(),
            ranks,
            majority,
        });
    }

    /// Write checkpoint `step` (collective); rank 0 says what it took.
    fn checkpoint(&mut self, step: u64) -> Result<Option<CkptWrite>> {
        let world = self.world;
        let sha = if world.rank == 0 {
            weights_hash(&self.model)?
        } else {
            String::new()
        };
        self.ctx.deadline = self.hooks.deadlines().checkpoint();
        let t = Instant::now();
        let saved = checkpoint::save(
            &mut self.ctx,
            world,
            &self.plan,
            &self.model,
            &self.opt,
            step,
            &sha,
        )?;
        self.hooks.checkpoint_took(t.elapsed().as_secs_f64());
        if let (Some(c), 0) = (&saved, world.rank) {
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
        Ok(saved)
    }

    /// Rank 0's record of one step: check the loss, log it, append it to steps.jsonl.
    fn record(&mut self, step: u64, r: StepRecord, p: &mut Progress) -> Result<()> {
        let plan = &self.plan;
        if !r.loss.is_finite() && p.problems.is_empty() {
            p.problems
                .push(format!("the loss is {} at step {step}", r.loss));
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
        if let Some(j) = &mut self.steps_file {
            j.append(&r)?;
        }
        burnin::metrics::train_step(&r);
        p.records.push(r);
        Ok(())
    }

    /// After the last step: check the replicas, measure the storage, and (rank 0)
    /// print and write the report.
    fn finish(self, mut p: Progress) -> Result<Outcome> {
        let timeout = self.hooks.deadlines().checkpoint();
        let final_sha = self.check_replicas(&mut p)?;
        let storage = if self.ctx.last_shard.is_some() && self.uses_ckpt {
            Some(self.measure_storage(&mut p, timeout)?)
        } else {
            None
        };
        if self.world.rank != 0 {
            return Ok(Outcome::Pass);
        }
        let outcome = Outcome::from_ok(p.problems.is_empty());
        let report = self.report(p, final_sha, storage, outcome);
        print!("\n{}", report::summary(&report));
        if let Some(dir) = &report.plan.out {
            results::write_json_atomic(&dir.join("run.json"), &report)?;
            println!("# results: {}", dir.join("run.json").display());
        }
        Ok(outcome)
    }

    /// Every rank must end with the same weights: this rank's hash and whether all
    /// agree (a problem names the ranks that differ from rank 0).
    fn check_replicas(&self, p: &mut Progress) -> Result<(String, bool)> {
        let world = self.world;
        let final_sha = weights_hash(&self.model)?;
        let all_sha: Vec<String> = world.all_gather_json(&final_sha)?;
        let replicas_agree = all_sha.iter().all(|s| *s == final_sha);
        if !replicas_agree {
            let differ: Vec<usize> = (0..world.size)
                .filter(|&r| all_sha[r] != all_sha[0])
                .collect();
            p.problems.push(format!(
                "ranks {differ:?} ended with other weights than rank 0"
            ));
            if p.divergence.is_none() {
                let last = self.plan.steps.max(p.start);
                self.judge_replicas(last, &all_sha, p);
            }
        }
        Ok((final_sha, replicas_agree))
    }

    /// Read the last checkpoint back, then the raw baseline of the same size
    /// (collective).
    fn measure_storage(&self, p: &mut Progress, timeout: Duration) -> Result<StorageReport> {
        burnin::metrics::phase("train storage");
        let world = self.world;
        let ckpt_read = self.read_back_last(p, timeout)?;
        let shard_bytes = self.ctx.last_shard.as_ref().map(|s| s.bytes).unwrap_or(0);
        let mut raw_bytes = 0u64;
        world.comm.all_reduce_into(
            &shard_bytes,
            &mut raw_bytes,
            mpi::collective::SystemOperation::max(),
        );
        let (raw_w, raw_r) = raw_io(
            world,
            &self.plan.ckpt_dir,
            raw_bytes.max(1),
            &self.dog,
            timeout,
        )?;
        let ckpt_write_gbps = if p.checkpoints.is_empty() {
            None
        } else {
            Some(burnin::stats::median(
                &p.checkpoints
                    .iter()
                    .map(|c| c.write_gbps)
                    .collect::<Vec<_>>(),
            ))
        };
        let ck_r = ckpt_read.as_ref().map(|x| x.gbps);
        Ok(StorageReport {
            dir: self.plan.ckpt_dir.clone(),
            shard_bytes,
            ckpt_write_gbps,
            write_ratio: report::ratio_of(ckpt_write_gbps, Some(raw_w.gbps)),
            read_ratio: report::ratio_of(ck_r, Some(raw_r.gbps)),
            ckpt_read,
            raw_write: Some(raw_w),
            raw_read: Some(raw_r),
            cache_note: "reads after fsync + posix_fadvise(DONTNEED), best effort".into(),
        })
    }

    /// Every rank reads its last shard back; the aggregate rate when every rank
    /// could, and a problem for each rank that could not or found it changed.
    fn read_back_last(&self, p: &mut Progress, timeout: Duration) -> Result<Option<IoRate>> {
        let world = self.world;
        guarded(
            &self.dog,
            "barrier before the checkpoint read-back",
            timeout,
            || world.comm.barrier(),
        );
        let last_step = p.records.last().map(|r| r.step).unwrap_or(p.start);
        let mine =
            checkpoint::read_back(&self.ctx, &self.model, last_step).map_err(|e| format!("{e:#}"));
        let all: Vec<std::result::Result<Option<checkpoint::ReadBack>, String>> =
            guarded(&self.dog, "checkpoint read-back", timeout, || {
                world.all_gather_json(&mine)
            })?;
        let mut per_rank = Vec::new();
        for (r, x) in all.iter().enumerate() {
            match x {
                Err(e) => p
                    .problems
                    .push(format!("reading back the last checkpoint on rank {r}: {e}")),
                Ok(None) => {}
                Ok(Some(rb)) => {
                    per_rank.push((rb.bytes, rb.seconds));
                    if let Some(pr) = &rb.problem {
                        p.problems.push(format!("rank {r}: {pr}"));
                    }
                }
            }
        }
        Ok((per_rank.len() == world.size).then(|| IoRate::from_ranks(&per_rank)))
    }

    /// Rank 0's report of the run. (It borrows the session: the backend and the hooks
    /// stay up until the report is written.)
    fn report(
        &self,
        p: Progress,
        (final_sha, replicas_agree): (String, bool),
        storage: Option<StorageReport>,
        outcome: Outcome,
    ) -> TrainReport {
        let Progress {
            resumed,
            start,
            records,
            checkpoints,
            problems,
            shares,
            divergence,
        } = p;
        let ddp = &self.ddp;
        let step_time = report::step_stats(&records);
        let shares = shares.fractions();
        let tokens_per_step = self.tokens_per_step;
        TrainReport {
            schema_version: report::SCHEMA_VERSION,
            kind: "train".into(),
            provenance: self.provenance.clone(),
            device: device_name(self.device),
            determinism: self.determinism.clone(),
            parameters: self.plan.model.parameters(),
            buckets: ddp.bucket_count(),
            bucket_bytes: ddp.bucket_bytes(),
            grad_path: Some(ddp.path()),
            allreduce: burnin::results::comm::bucket_comm(
                &ddp.bucket_bytes(),
                &records
                    .iter()
                    .map(|r| r.bucket_allreduce_s.clone())
                    .collect::<Vec<_>>(),
                &records
                    .iter()
                    .map(|r| r.bucket_own_s.clone())
                    .collect::<Vec<_>>(),
                self.world.size,
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
            storage,
            final_weights_sha256: final_sha,
            replicas_agree,
            replica_divergence: divergence,
            problems,
            outcome: if outcome == Outcome::Pass {
                "pass"
            } else {
                "fail"
            }
            .into(),
            finished_unix: burnin::watchdog::unix_seconds(std::time::SystemTime::now()),
            plan: self.plan.clone(),
        }
    }
}

/// The checkpoint directory must be creatable on every rank (when the run uses
/// checkpoints), and --ckpt-bytes of padding must fit well inside the host's memory.
fn check_ckpt_storage(world: &World, plan: &TrainPlan, uses_ckpt: bool) -> Result<()> {
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
    Ok(())
}

/// Rank 0's header: the world, the device, the backend and the model.
fn announce(world: &World, plan: &TrainPlan, device: Device, why: &str, ddp: &Ddp) {
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

/// Rank 0's line on what a --resume found (nothing without --resume).
fn announce_resume(world: &World, plan: &TrainPlan, resumed: Option<&RestoreRecord>) {
    if let Some(r) = resumed {
        println!(
            "# resumed from checkpoint step {} ({}): {} shard(s), {} verified (sha256) in {:.3} s",
            r.step,
            r.dir.display(),
            world.size,
            report::size(r.bytes),
            r.restore_s
        );
    } else if plan.resume {
        println!(
            "# nothing to resume from in {}: starting at step 1",
            plan.ckpt_dir.display()
        );
    }
}
