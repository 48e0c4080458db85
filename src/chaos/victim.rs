//! The training loop's chaos hooks: what `burnin train` calls at fixed points so that
//! a run can be the victim of a fault, never hangs, and leaves a timeline.
//!
//! - start (collective): open `OUT/events/rank-N.jsonl`, measure this rank's clock
//!   offset to rank 0 (`clock`), resolve the fault's victim ranks, route watchdog
//!   expiries into the events file;
//! - before each step: the `slow` victim's extra sleep, then the check-in
//!   (`checkin`) under the step deadline (`deadline`) — a missing rank is named and
//!   the job ended here;
//! - after each step: the iteration time feeds the deadlines; rank 0 looks for
//!   stragglers in every rank's compute time (`straggler`);
//! - end of each step: the victim injects its fault, after writing (and flushing) an
//!   `inject` event with its wall and monotonic clocks.
//!
//! Nothing here needs libtorch: the loop hands over plain numbers.
use super::checkin::{self, CheckIn};
use super::clock;
use super::deadline::{self, Deadlines};
use super::events::{EventLog, What};
use super::heartbeat::Heartbeat;
use super::straggler::Stragglers;
use crate::error::Agreed;
use crate::fault::{FaultKind, FaultPlan};
use crate::watchdog::Watchdog;
use crate::world::World;
use anyhow::{bail, Context, Result};
use mpi::topology::Communicator;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Steps of its own step time the `slow` fault's sleep is a multiple of.
pub const SLOW_WINDOW: usize = 8;

/// What happened before a step's own work (seconds).
#[derive(Clone, Copy, Debug, Default)]
pub struct PreStep {
    /// The `slow` victim's extra sleep.
    pub slow_s: f64,
    /// Waiting at the check-in for the other ranks.
    pub checkin_s: f64,
}

/// The hooks of one rank.
pub struct Hooks {
    rank: usize,
    who: String,
    nodes: Vec<crate::kinds::Node>,
    node_of: Vec<usize>,
    hosts: Vec<String>,
    events: Arc<EventLog>,
    dog: Arc<Watchdog>,
    deadlines: Deadlines,
    checkin: CheckIn,
    heartbeat: Heartbeat,
    stragglers: Option<Stragglers>,
    fault: Option<FaultPlan>,
    /// Ranks that inject the fault.
    victims: Vec<usize>,
    ckpt_root: PathBuf,
    /// This rank's time of each step (from before its check-in to after the step's
    /// work), the `slow` fault's sleep left out.
    own_step: Vec<f64>,
    /// The `slow` fault's factor, once injected.
    slow_factor: Option<f64>,
    /// The sleep before the step under way.
    slept: Duration,
    first_step_seen: bool,
    step_started: Option<Instant>,
}

/// World ranks that inject `plan` (all ranks of the node for node-loss).
pub fn victims(plan: &FaultPlan, world: &World) -> std::result::Result<Vec<usize>, String> {
    match &plan.kind {
        FaultKind::NodeLoss(name) => {
            let by_host = world.nodes.iter().find(|n| &n.host == name);
            let by_index = name
                .strip_prefix("node")
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| world.nodes.get(i));
            match by_host.or(by_index) {
                Some(n) => Ok(n.ranks.clone()),
                None => {
                    let hosts: Vec<&str> = world.nodes.iter().map(|n| n.host.as_str()).collect();
                    Err(format!(
                        "--fault node-loss:{name}: no node {name} in this job (nodes: {}; nodeI also names the I-th node)",
                        hosts.join(", ")
                    ))
                }
            }
        }
        _ => Ok(plan.rank.into_iter().collect()),
    }
}

/// The events file of this rank opened (collective: a rank that cannot open it stops
/// every rank, naming it), with the watchdog's lines logged to it.
fn open_events(
    world: &World,
    out: Option<&Path>,
    resume: bool,
    dog: &Watchdog,
) -> Result<Arc<EventLog>> {
    let opened = EventLog::open(out, world.rank, &world.host, resume);
    let problem = opened.as_ref().err().map(|e| format!("{e:#}"));
    let all: Vec<Option<String>> = world.all_gather_json(&problem)?;
    if let Some((r, p)) = all
        .iter()
        .enumerate()
        .find_map(|(r, p)| p.as_ref().map(|p| (r, p)))
    {
        bail!(Agreed(format!("{}: {p}", world.describe_rank(r))));
    }
    let events = Arc::new(opened?);
    let sink = Arc::clone(&events);
    dog.add_sink(Box::new(move |line: &str| {
        sink.log(What::Watchdog {
            line: line.to_string(),
        })
    }));
    Ok(events)
}

/// The fault's victim ranks; rank 0 prints the fault and logs its plan.
fn announce_fault(
    world: &World,
    fault: Option<&FaultPlan>,
    events: &Arc<EventLog>,
) -> Result<Vec<usize>> {
    let victims = match fault {
        None => Vec::new(),
        Some(p) => victims(p, world).map_err(Agreed)?,
    };
    if let (Some(p), 0) = (fault, world.rank) {
        let description = p.describe();
        println!("# chaos: fault {description}");
        let _ = std::io::stdout().flush();
        events.log(What::FaultPlan {
            fault: p.kind.name(),
            ranks: victims.clone(),
            step: p.step,
            slow_factor: p.slow_factor,
            description,
        });
    }
    Ok(victims)
}

/// The heartbeat over a duplicate of the world: a silent rank is logged and printed,
/// and the watchdog's notes say who was heard last.
fn start_heartbeat(world: &World, events: &Arc<EventLog>, dog: &Watchdog) -> Heartbeat {
    let on_silent = {
        let (nodes, node_of) = (world.nodes.clone(), world.node_of.clone());
        let who = world.describe_rank(world.rank);
        let events = Arc::clone(events);
        Box::new(move |ranks: &[usize], age: Duration| {
            let line = format!(
                "burnin: {who} has heard no heartbeat from {} for {:.1} s: dead, frozen or cut off",
                checkin::describe_ranks(ranks, &nodes, &node_of),
                age.as_secs_f64()
            );
            eprintln!("{line}");
            events.log(What::Silent {
                ranks: ranks.to_vec(),
                line,
            });
        })
    };
    let heartbeat = Heartbeat::start(world.comm.duplicate(), world.thread_multiple, on_silent);
    let view = heartbeat.view().clone();
    let (nodes, node_of) = (world.nodes.clone(), world.node_of.clone());
    dog.add_note(Box::new(move || view.describe(&nodes, &node_of)));
    heartbeat
}

impl Hooks {
    /// Set up (collective: every rank calls it, at the start of the run).
    pub fn start(
        world: &World,
        fault: Option<FaultPlan>,
        out: Option<&Path>,
        ckpt_root: &Path,
        fixed_deadline: Option<Duration>,
        resume: bool,
        dog: Arc<Watchdog>,
    ) -> Result<Hooks> {
        let deadlines = Deadlines::new(fixed_deadline);
        let events = open_events(world, out, resume, &dog)?;
        let comm = world.comm.duplicate();
        // Offsets only matter to the events file (the same --out on every rank).
        let (offset, rtt) = if out.is_some() {
            let _g = dog.arm(
                "measuring clock offsets to rank 0 (ping-pong)",
                deadlines.init(),
            );
            clock::measure(&comm)
        } else {
            (0.0, 0.0)
        };
        events.set_offset(offset);
        events.log(What::Start {
            world_size: world.size,
            clock_rtt_s: rtt,
            resume,
        });
        let victims = announce_fault(world, fault.as_ref(), &events)?;
        let heartbeat = start_heartbeat(world, &events, &dog);
        Ok(Hooks {
            rank: world.rank,
            who: world.describe_rank(world.rank),
            nodes: world.nodes.clone(),
            node_of: world.node_of.clone(),
            hosts: (0..world.size)
                .map(|r| world.host_of(r).to_string())
                .collect(),
            events,
            dog,
            deadlines,
            checkin: CheckIn::new(comm),
            heartbeat,
            stragglers: (world.rank == 0).then(|| Stragglers::new(world.size)),
            fault,
            victims,
            ckpt_root: ckpt_root.to_path_buf(),
            own_step: Vec::new(),
            slow_factor: None,
            slept: Duration::ZERO,
            first_step_seen: false,
            step_started: None,
        })
    }

    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// Deadline of this rank's blocking calls within a step: the derived one on rank
    /// 0, longer elsewhere ([`deadline::follower`]) so that when a peer goes missing
    /// mid-step rank 0 — which hears every rank's heartbeat — speaks first and names it.
    pub fn step_deadline(&self) -> Duration {
        let d = self.deadlines.step();
        if self.rank == 0 {
            d
        } else {
            deadline::follower(d)
        }
    }

    /// The resume's outcome (rank 0 records it).
    pub fn restored(&self, step: Option<u64>, restore_s: f64, skipped: Vec<String>) {
        if self.rank == 0 {
            self.events.log(What::Restored {
                step,
                restore_s,
                skipped,
            });
        }
    }

    /// Before step `step`'s work: the straggler's sleep, then the check-in. Never
    /// returns when the check-in gives up: the job is ended with a line naming the
    /// missing ranks. `before` says what the check-in precedes, for that line.
    pub fn before_step(&mut self, step: u64, before: &str) -> PreStep {
        self.step_started = Some(Instant::now());
        self.heartbeat.set_step(step);
        let mut pre = PreStep::default();
        self.slept = self
            .slow_factor
            .map_or(Duration::ZERO, |f| self.slow_sleep(f));
        if !self.slept.is_zero() {
            std::thread::sleep(self.slept);
            pre.slow_s = self.slept.as_secs_f64();
        }
        let limit = self.deadlines.step();
        match self.checkin.check_in(step, limit) {
            Ok(waited) => pre.checkin_s = waited.as_secs_f64(),
            Err(stall) => {
                let mut line =
                    checkin::stall_line(&self.who, &stall, before, &self.nodes, &self.node_of);
                let hb = self
                    .heartbeat
                    .view()
                    .classify(&stall.missing, &self.nodes, &self.node_of);
                if !hb.is_empty() {
                    line.push_str("; heartbeats: ");
                    line.push_str(&hb);
                }
                self.events.log(What::CheckinTimeout {
                    step,
                    waited_s: stall.waited.as_secs_f64(),
                    missing: stall.missing.clone(),
                    line: line.clone(),
                });
                self.dog.end_job(&line)
            }
        }
        pre
    }

    /// The `slow` fault's sleep before a step: (factor − 1) × this rank's median step
    /// time, its sleep left out, over its last [`SLOW_WINDOW`] steps (the first,
    /// warm-up step left out once there are others), so its steps take `factor` times
    /// as long. The step, not the rank's own compute: every rank's step is the same
    /// length (the all-reduce joins them), while one rank's compute on a busy host
    /// depends on when it runs — on 8 ranks sharing 2 cores a rank woken from its sleep
    /// computes nearly alone, and a sleep of (factor − 1) × that own compute read as
    /// 0.4x to 1.6x the factor against the other ranks (a x3 fault as low as 2.0, and
    /// one trial of six never named). Tracking the recent steps keeps it `factor`
    /// times as the machine's load changes.
    fn slow_sleep(&self, factor: f64) -> Duration {
        let seen = match self.own_step.len() {
            0 | 1 => &self.own_step[..],
            n => &self.own_step[1.max(n.saturating_sub(SLOW_WINDOW))..],
        };
        let base = deadline::quantile(seen, 0.5);
        Duration::from_secs_f64((base * (factor - 1.0)).max(0.0))
    }

    /// After step `step` on this rank: the whole iteration's time feeds the deadlines,
    /// and less the fault's sleep the slow fault's baseline (its compute time, the
    /// sleep included, where the iteration was not timed).
    pub fn after_step(&mut self, step: u64, compute_s: f64) {
        let slept = self.slept.as_secs_f64();
        let step_s = match self.step_started.take() {
            Some(t) => {
                let it = t.elapsed().as_secs_f64();
                self.deadlines.observe_iteration(it);
                it
            }
            None => compute_s,
        };
        self.own_step.push((step_s - slept).max(0.0));
        if !self.first_step_seen {
            self.first_step_seen = true;
            if self.rank == 0 {
                self.events.log(What::FirstStep { step });
            }
        }
    }

    /// Rank 0, every step: every rank's compute time, in rank order.
    pub fn observe_ranks(&mut self, step: u64, compute_s: &[f64]) {
        let Some(s) = &mut self.stragglers else {
            return;
        };
        for f in s.observe(step, compute_s) {
            let host = self.hosts.get(f.rank).cloned().unwrap_or_default();
            let line = format!(
                "burnin: straggler: rank {} ({host}) computes {:.2}x slower than the other ranks (median {:.1} ms vs {:.1} ms over the last {} steps, at step {step}); every all-reduce waits for it",
                f.rank,
                f.factor,
                f.its_s * 1e3,
                f.others_s * 1e3,
                super::straggler::WINDOW
            );
            eprintln!("{line}");
            self.events.log(What::Straggler {
                step,
                straggler: f.rank,
                straggler_host: host,
                factor: f.factor,
                its_s: f.its_s,
                others_s: f.others_s,
                line,
            });
        }
    }

    /// A checkpoint took `seconds` (feeds the checkpoint deadline).
    pub fn checkpoint_took(&mut self, seconds: f64) {
        self.deadlines.observe_checkpoint(seconds);
    }

    /// The end of step `step` (after its checkpoint): the victim injects its fault.
    pub fn end_of_step(&mut self, step: u64) {
        let Some(plan) = self.fault.clone() else {
            return;
        };
        if plan.step != step || !self.victims.contains(&self.rank) {
            return;
        }
        let say = |detail: &str, events: &EventLog| {
            events.log(What::Inject {
                fault: plan.kind.name(),
                step,
                detail: detail.to_string(),
            });
            eprintln!(
                "burnin: chaos: {} injects {} at the end of step {step}: {detail}",
                self.who, plan.kind
            );
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().flush();
        };
        match &plan.kind {
            FaultKind::Kill | FaultKind::NodeLoss(_) => {
                say(
                    &format!("SIGKILL to itself (pid {})", std::process::id()),
                    &self.events,
                );
                kill_self()
            }
            FaultKind::Exit => {
                say(
                    &format!(
                        "exits with code {} without MPI_Finalize",
                        crate::fault::FAULT_EXIT_CODE
                    ),
                    &self.events,
                );
                // SAFETY: _exit ends the process at once; nothing needs to run after.
                unsafe { libc::_exit(crate::fault::FAULT_EXIT_CODE) }
            }
            FaultKind::Hang => {
                say(
                    "stops making progress (sleeps forever, stays alive)",
                    &self.events,
                );
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            FaultKind::Slow => {
                let extra = self.slow_sleep(plan.slow_factor);
                self.slow_factor = Some(plan.slow_factor);
                say(
                    &format!(
                        "from now on each step sleeps {:.1} ms more ({} - 1 times its median step \
                         time of its last {SLOW_WINDOW} steps: {:.1} ms now)",
                        extra.as_secs_f64() * 1e3,
                        plan.slow_factor,
                        extra.as_secs_f64() * 1e3 / (plan.slow_factor - 1.0)
                    ),
                    &self.events,
                );
            }
            FaultKind::CorruptCkpt => {
                let detail = match corrupt_newest_shard(&self.ckpt_root, self.rank) {
                    Ok((s, f)) => format!(
                        "damaged {} (checkpoint step {s}), then SIGKILL to itself",
                        f.display()
                    ),
                    Err(e) => format!("found nothing to damage ({e:#}); SIGKILL to itself"),
                };
                say(&detail, &self.events);
                kill_self()
            }
            FaultKind::LinkCut(_) => {}
        }
    }

    /// The run reached its end.
    pub fn finished(&self, last_step: u64) {
        self.events.log(What::Finished { last_step });
    }
}

fn kill_self() -> ! {
    // SAFETY: kill(2) on our own pid with SIGKILL; nothing to uphold.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `train::checkpoint`'s names, repeated here so chaos builds without libtorch
/// (a unit test pins them to the originals).
pub fn step_dir_step(name: &str) -> Option<u64> {
    let d = name.strip_prefix("step-")?;
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    d.parse().ok()
}

pub fn shard_file(rank: usize) -> String {
    format!("rank-{rank:05}.safetensors")
}

/// Damage this rank's shard of the newest complete checkpoint under `root` (flip
/// 64 bytes in its middle, fsync): its sha256 no longer matches the manifest.
/// Returns the checkpoint's step and the file.
pub fn corrupt_newest_shard(root: &Path, rank: usize) -> Result<(u64, PathBuf)> {
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(root).with_context(|| format!("cannot list {}", root.display()))? {
        let e = e?;
        let Some(step) = e.file_name().to_str().and_then(step_dir_step) else {
            continue;
        };
        let shard = e.path().join(shard_file(rank));
        let newer = match &best {
            Some(b) => step > b.0,
            None => true,
        };
        if newer && e.path().join("manifest.json").is_file() && shard.is_file() {
            best = Some((step, shard));
        }
    }
    let (step, path) =
        best.ok_or_else(|| anyhow::anyhow!("no complete checkpoint in {}", root.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len();
    let at = len / 2;
    let n = 64.min(len - at) as usize;
    let mut buf = vec![0u8; n];
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(&mut buf)?;
    for b in &mut buf {
        *b ^= 0x5a;
    }
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&buf)?;
    f.sync_all()?;
    Ok((step, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_hits_the_newest_complete_checkpoint_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (step, complete) in [(10u64, true), (20, true), (30, false)] {
            let d = root.join(format!("step-{step:09}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(shard_file(1)), vec![7u8; 1000]).unwrap();
            if complete {
                std::fs::write(d.join("manifest.json"), b"{}").unwrap();
            }
        }
        let (step, path) = corrupt_newest_shard(root, 1).unwrap();
        assert_eq!(step, 20);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 1000);
        assert_eq!(bytes.iter().filter(|&&b| b != 7).count(), 64);
        let older = std::fs::read(root.join("step-000000010").join(shard_file(1))).unwrap();
        assert!(older.iter().all(|&b| b == 7));
        assert!(corrupt_newest_shard(root, 2).is_err());
    }
}
