//! `burnin gpu`: the health of every GPU — copy matrix, memory bandwidth, a compute
//! burn with clocks and throttling watched, PCIe link and error counters before and
//! after — one rank per GPU under the launcher.
//!
//! Shape, and why:
//! - Every rank drives its own GPU (local rank modulo the GPUs it sees, as the other
//!   workloads do). Host↔device and device-local copies go one local rank at a time
//!   (all nodes at once), so a GPU's PCIe number is its own and not a share of the
//!   host's; then local rank 0 of each node, alone, copies between every GPU pair of
//!   its node; then every GPU burns at once, which is what heats a node.
//! - NVML watches the whole time (samples every `--sample-ms`, XID events), and the
//!   error counters are read before the first copy and after the last burn; `burnin
//!   run` reads them once more at the very end of the acceptance (`--counters-only`).
//! - Every rank makes the same MPI calls in the same order whatever happened on its
//!   GPU (a rank without one only takes part in the barriers), and the blocking parts
//!   run under the watchdog, so one sick GPU cannot hold the job.
//! - What is judged is pure (`results::gpu_analysis`): this command prints it with the
//!   default criteria; a card's `[gpu.criteria]` judges the same record in the report.
pub mod burn;
pub mod copy;
pub mod memtest;
pub mod sdc;

use crate::backend::nccl::device::Device;
use crate::config::GlobalArgs;
use crate::error::{Agreed, Outcome};
use crate::nvml;
use crate::results::gpu::{
    GpuHealth, GpuReport, GpuSettings, HostDcgm, NodeMatrix, Sample, SampleRecord,
};
use crate::units::Bytes;
use crate::watchdog::Watchdog;
use crate::world::World;
use anyhow::Result;
use mpi::collective::CommunicatorCollectives;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct GpuArgs {
    /// Compute burn per GPU: seconds, or with a unit (90s, 2m).
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = parse_seconds)]
    pub burn: f64,
    /// Bytes of each host↔device and device-local copy.
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub copy_bytes: Bytes,
    /// Bytes of each GPU pair's peer copy.
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub peer_bytes: Bytes,
    /// Timed repetitions of each copy (after one untimed warm-up).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub reps: u32,
    /// NVML sampling period, milliseconds (100 to 1000).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub sample_ms: u64,
    /// Also run DCGM's diagnostic (`dcgmi diag -r 1 -j`) on each node after the burn,
    /// where dcgmi is installed.
    #[arg(long)]
    pub dcgm_diag: bool,
    /// Judge every GPU of a model cards/floors/gpu-floors.toml has against its floors:
    /// device memory, FP32 burn and host copies each at least a fraction of NVIDIA's
    /// published peak, a miss named with the floor and its source.
    #[arg(long)]
    pub model_floors: bool,
    /// Only read every GPU's error counters (no copies, no burn): the end of an
    /// acceptance, compared with the counters the GPU phase read at its start.
    #[arg(long)]
    pub counters_only: bool,
    /// Device memory test after the burn (and the SDC rounds): passes of address,
    /// walking-one and random patterns, each with its inverse, over --memtest-share of
    /// the free memory for about TIME (one pass at least; 0: off).
    #[arg(long, value_name = "TIME", default_value = "0", value_parser = parse_seconds)]
    pub memtest: f64,
    /// Share of the free device memory the memory test covers (0.05 to 0.98).
    #[arg(long, value_name = "SHARE", default_value_t = 0.9)]
    pub memtest_share: f64,
    /// Topology file whose `[gpu]` numbers the default criteria compare with.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Silent data corruption: after the burn, rounds of a deterministic workload on
    /// every rank for TIME (the GPU hot; a round starts only while it is expected to
    /// end within TIME, the first always runs), each round's outputs hashed per kind
    /// and block and voted on across the ranks of one GPU (or CPU) model; 0: off.
    #[arg(long, value_name = "TIME", default_value = "0", value_parser = parse_seconds)]
    pub sdc: f64,
    /// At most N SDC rounds (whichever of --sdc and this ends first).
    #[arg(long, value_name = "N")]
    pub sdc_rounds: Option<u64>,
    /// Number of the first SDC round (a round's inputs are a function of its number:
    /// `--sdc-start R --sdc-rounds 1` computes round R again, on any GPU).
    #[arg(long, value_name = "ROUND", default_value_t = 0)]
    pub sdc_start: u64,
    /// Output bytes of each SDC kind per round.
    #[arg(long, value_name = "SIZE", default_value = "16M")]
    pub sdc_bytes: Bytes,
    /// Test only: RANK:ROUND:KIND:BLOCK flips one bit of that rank's output.
    #[arg(long, hide = true, value_name = "RANK:ROUND:KIND:BLOCK")]
    pub sdc_fault: Option<String>,
    /// Write gpu.json and samples.jsonl into DIR (rank 0 writes them).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The throttled share of the burn `burnin gpu` itself allows (the cards' value; a
/// card's `[gpu.criteria]` judges the report with its own).
pub const MAX_THROTTLED_SHARE: f64 = 0.05;

pub use crate::units::parse_seconds;

/// The flags' own checks (also what `BURNIN_CHECK_ARGS` runs).
pub fn validate(args: &GpuArgs) -> Result<()> {
    let agreed = |m: String| Err(anyhow::Error::new(Agreed(m)));
    if !(100..=1000).contains(&args.sample_ms) {
        return agreed(format!(
            "--sample-ms: {} must be 100 to 1000",
            args.sample_ms
        ));
    }
    for (flag, b) in [
        ("--copy-bytes", args.copy_bytes),
        ("--peer-bytes", args.peer_bytes),
    ] {
        if b.get() < 4096 {
            return agreed(format!("{flag}: {b} is too small to time (at least 4K)"));
        }
    }
    if args.reps == 0 {
        return agreed("--reps: must be at least 1".into());
    }
    let b = args.sdc_bytes.get();
    if args.sdc > 0.0 && !(4096..=(4u64 << 30)).contains(&b) {
        return agreed(format!("--sdc-bytes: {} must be 4K to 4G", args.sdc_bytes));
    }
    if !(0.05..=0.98).contains(&args.memtest_share) {
        return agreed(format!(
            "--memtest-share: {} must be 0.05 to 0.98",
            args.memtest_share
        ));
    }
    if args.sdc_rounds == Some(0) {
        return agreed("--sdc-rounds: must be at least 1".into());
    }
    if let Some(f) = &args.sdc_fault {
        sdc::Fault::parse(f).map_err(|e| anyhow::Error::new(Agreed(format!("{e:#}"))))?;
    }
    Ok(())
}

/// What one rank measured, as rank 0 gathers it.
#[derive(serde::Serialize, serde::Deserialize)]
struct RankResult {
    gpu: GpuHealth,
    matrix: Option<NodeMatrix>,
    samples: Vec<Sample>,
    dcgm: Option<HostDcgm>,
    /// Rank 0's: the SDC rounds' report.
    #[serde(default)]
    sdc: Option<crate::results::sdc::SdcReport>,
}

/// `burnin gpu`.
pub fn run(world: &World, g: &GlobalArgs, args: &GpuArgs, dog: Arc<Watchdog>) -> Result<Outcome> {
    validate(args)?;
    let topology = match &args.topology {
        Some(p) => Some(crate::topology::file::Topology::load(p)?),
        None => None,
    };
    let out = world
        .on_rank0_agreed(|| {
            crate::results::open_records(args.out.as_deref(), |d| d.join("samples.jsonl"))
        })?
        .flatten();
    let started = SystemTime::now();
    let t0 = Instant::now();
    let limit =
        Duration::from_secs_f64(g.timeout_secs() + args.burn.max(args.sdc).max(args.memtest));
    let mine = measure_rank(world, args, &dog, limit);
    let all = world.gather_json(&mine)?;
    let Some(all) = all else {
        return Ok(Outcome::Pass);
    };
    let report = assemble(world, args, all.iter().collect(), started, t0);
    if let Some(mut jsonl) = out {
        for (r, rr) in all.iter().enumerate() {
            for s in &rr.samples {
                jsonl.append(&SampleRecord {
                    rank: r,
                    host: rr.gpu.host.clone(),
                    gpu: rr.gpu.gpu,
                    sample: s.clone(),
                })?;
            }
        }
        if let Some(dir) = &args.out {
            crate::results::write_json_atomic(&dir.join("gpu.json"), &report)?;
        }
    }
    let spec = crate::card::GpuCriteria {
        max_throttled_share: Some(MAX_THROTTLED_SHARE),
        model_floors: args.model_floors,
        ..Default::default()
    };
    let criteria = crate::results::gpu_analysis::judge(
        Ok(&report),
        None,
        &spec,
        topology.as_ref().and_then(|t| t.gpu.as_ref()),
    );
    print!("{}", render(&report, &criteria, args.counters_only));
    if let Some(dir) = &args.out {
        println!("# results: {}", dir.join("gpu.json").display());
    }
    Ok(Outcome::from_ok(crate::results::acceptance::passed(
        &criteria,
    )))
}

/// The job's record from every rank's result.
fn assemble(
    world: &World,
    args: &GpuArgs,
    all: Vec<&RankResult>,
    started: SystemTime,
    t0: Instant,
) -> GpuReport {
    let gpus: Vec<GpuHealth> = all.iter().map(|r| r.gpu.clone()).collect();
    let sdc = all.first().and_then(|r| r.sdc.clone()).map(|mut s| {
        let samples: Vec<Vec<Sample>> = all.iter().map(|r| r.samples.clone()).collect();
        sdc::annotate(&mut s, &samples);
        s
    });
    let no_gpu = gpus.iter().all(|g| g.error.is_some());
    let error = no_gpu.then(|| {
        format!(
            "no GPU on any of the {} rank(s): {}",
            world.size,
            gpus.first()
                .and_then(|g| g.error.clone())
                .unwrap_or_default()
        )
    });
    GpuReport {
        schema_version: crate::results::gpu::SCHEMA_VERSION,
        kind: "gpu".into(),
        started: crate::results::utc_text(crate::watchdog::unix_seconds(started)),
        seconds: t0.elapsed().as_secs_f64(),
        settings: GpuSettings {
            copy_bytes: args.copy_bytes.get(),
            peer_bytes: args.peer_bytes.get(),
            reps: args.reps,
            burn_s: if args.counters_only { 0.0 } else { args.burn },
            sample_ms: args.sample_ms,
        },
        gpus,
        nodes: all.iter().filter_map(|r| r.matrix.clone()).collect(),
        dcgm: all.iter().filter_map(|r| r.dcgm.clone()).collect(),
        error,
        sdc,
    }
}

/// This rank's GPU: open it (or say why not) and its NVML handle.
struct Mine {
    dev: Option<Arc<Device>>,
    count: usize,
    nvml: Option<nvml::NvmlGpu>,
    health: GpuHealth,
}

fn open_mine(world: &World) -> Mine {
    let mut health = GpuHealth {
        rank: world.rank,
        host: world.host.clone(),
        local_rank: world.local_rank,
        ..GpuHealth::default()
    };
    let count = match crate::gpu::ready() {
        Ok(n) => n,
        Err(e) => {
            health.error = Some(e);
            return Mine {
                dev: None,
                count: 0,
                nvml: None,
                health,
            };
        }
    };
    let ordinal = crate::backend::nccl::gpu_for(world.local_rank, count);
    health.gpu = ordinal;
    let dev = match Device::open(ordinal) {
        Ok(d) => Some(Arc::new(d)),
        Err(e) => {
            health.error = Some(format!("{e:#}"));
            None
        }
    };
    let mut nvml = None;
    if let Some(d) = &dev {
        health.name = d.info.name.clone();
        health.uuid = d.info.uuid.clone();
        health.pci_bus_id = d.info.pci_bus_id.clone();
        match nvml::NvmlGpu::open(&d.info.pci_bus_id) {
            Ok(n) => nvml = Some(n),
            Err(e) => health.nvml_error = Some(e),
        }
    }
    Mine {
        dev,
        count,
        nvml,
        health,
    }
}

/// Everything this rank measures, in the same collective order on every rank.
fn measure_rank(world: &World, args: &GpuArgs, dog: &Watchdog, limit: Duration) -> RankResult {
    let mut m = open_mine(world);
    m.health.counters_before = read_counters(&m.nvml, &mut m.health.nvml_error);
    if args.counters_only {
        m.health.counters_after = m.health.counters_before.clone();
        return RankResult {
            gpu: m.health,
            matrix: None,
            samples: Vec::new(),
            dcgm: None,
            sdc: None,
        };
    }
    if let Some(n) = &m.nvml {
        let (gen, width) = n.pcie_max();
        m.health.pcie = Some(crate::results::gpu::PcieLink {
            max_gen: gen,
            max_width: width,
            ..Default::default()
        });
    }
    let stage = nvml::Stage::new("idle", m.nvml.as_ref());
    let period = Duration::from_millis(args.sample_ms);
    let watched = nvml::watch(period, &stage, || work(world, args, dog, limit, &m, &stage));
    let (copies, matrix, burn, sdc, memtest) = watched.value;
    m.health.copies = copies;
    m.health.burn = burn;
    m.health.memtest = memtest;
    m.health.xids = watched.xids;
    m.health.xid_listening = watched.xid_listening;
    if let Some(e) = watched.error {
        note(&mut m.health.nvml_error, e);
    }
    if let Some(p) = &m.health.pcie {
        m.health.pcie = Some(nvml::pcie_link(&watched.samples, p.max_gen, p.max_width));
    }
    m.health.throttle = Some(nvml::summarize_throttle(&watched.samples)).filter(|t| t.samples > 0);
    let failed: Vec<&Sample> = watched
        .samples
        .iter()
        .filter(|s| !s.errors.is_empty())
        .collect();
    m.health.sample_errors = failed.len() as u32;
    m.health.sample_error = failed.first().map(|s| s.errors.join("; "));
    let dcgm = (args.dcgm_diag && world.local_rank == 0).then(|| {
        let _g = dog.arm(
            "DCGM's diagnostic (dcgmi diag -r 1)",
            limit.max(Duration::from_secs(600)),
        );
        crate::evidence::dcgm_diag(&world.host, 1, Duration::from_secs(600))
    });
    m.health.counters_after = read_counters(&m.nvml, &mut m.health.nvml_error);
    RankResult {
        gpu: m.health,
        matrix,
        samples: watched.samples,
        dcgm,
        sdc,
    }
}

/// The error counters of this rank's GPU now; what NVML failed to give is added to
/// `nvml_error` (the judge then sees the missing counters, not "no new errors").
fn read_counters(
    gpu: &Option<nvml::NvmlGpu>,
    nvml_error: &mut Option<String>,
) -> Option<crate::results::gpu::ErrorCounters> {
    let (c, why) = gpu.as_ref()?.counters();
    if let Some(w) = why {
        note(nvml_error, w);
    }
    Some(c)
}

/// `more` added to what `nvml_error` already says.
fn note(nvml_error: &mut Option<String>, more: String) {
    *nvml_error = Some(match nvml_error.take() {
        Some(e) => format!("{e}; {more}"),
        None => more,
    });
}

type Work = (
    crate::results::gpu::GpuCopies,
    Option<NodeMatrix>,
    Option<crate::results::gpu::Burn>,
    Option<crate::results::sdc::SdcReport>,
    Option<crate::results::gpu::MemTest>,
);

/// The copies in turns, the peer matrix by local rank 0, the burn on every GPU at
/// once; a barrier after each so the stages do not overlap.
fn work(
    world: &World,
    args: &GpuArgs,
    dog: &Watchdog,
    limit: Duration,
    m: &Mine,
    stage: &nvml::Stage,
) -> Work {
    let phase_t0 = Instant::now();
    let turns = world.nodes.iter().map(|n| n.ranks.len()).max().unwrap_or(1);
    let mut copies = Default::default();
    stage.set("copy");
    for turn in 0..turns {
        let _g = dog.arm(&format!("the host and device copies (turn {turn})"), limit);
        if world.local_rank == turn {
            if let Some(d) = &m.dev {
                copies = copy::host_and_local(d, args.copy_bytes.as_usize(), args.reps);
            }
        }
        world.comm.barrier();
    }
    let matrix = {
        let _g = dog.arm("the GPU pairs' peer copies", limit);
        let mx = (world.local_rank == 0)
            .then(|| peer_matrix(world, args, m))
            .flatten();
        world.comm.barrier();
        mx
    };
    stage.set("burn");
    let burn = {
        let _g = dog.arm("the compute burn", limit);
        let b = m
            .dev
            .as_ref()
            .and_then(|d| burn::burn(d, Duration::from_secs_f64(args.burn)));
        stage.set("idle");
        world.comm.barrier();
        b
    };
    let sdc = (args.sdc > 0.0).then(|| {
        stage.set("sdc");
        let _g = dog.arm("the SDC rounds", limit);
        let plan = sdc::Plan {
            seconds: args.sdc,
            max_rounds: args.sdc_rounds,
            first_round: args.sdc_start,
            bytes: args.sdc_bytes.as_usize() / 4 * 4,
            // validated before the phase began
            fault: args
                .sdc_fault
                .as_deref()
                .and_then(|f| sdc::Fault::parse(f).ok()),
        };
        let me = crate::results::sdc::SdcRank {
            rank: world.rank,
            host: world.host.clone(),
            gpu: m.dev.as_ref().map(|d| d.ordinal()),
            pci_bus_id: m.health.pci_bus_id.clone(),
            uuid: m.health.uuid.clone(),
            model: match &m.dev {
                Some(_) => m.health.name.clone(),
                None => sdc::cpu_model(),
            },
            kinds: Vec::new(),
            disagreements: 0,
            host_check: None,
            host_checks: Vec::new(),
            gpu_lost: None,
            rounds_lost: 0,
        };
        let r = sdc::rounds(world, &plan, me, m.dev.as_ref(), phase_t0);
        stage.set("idle");
        r
    });
    let memtest = (args.memtest > 0.0).then(|| {
        stage.set("memtest");
        let _g = dog.arm("the memory test", limit);
        let t = m
            .dev
            .as_ref()
            .and_then(|d| memtest::memtest(d, args.memtest, args.memtest_share, m.nvml.as_ref()));
        stage.set("idle");
        world.comm.barrier();
        t
    });
    (copies, matrix, burn, sdc.flatten(), memtest.flatten())
}

/// Local rank 0's matrix over every GPU it sees (None with one GPU).
fn peer_matrix(world: &World, args: &GpuArgs, m: &Mine) -> Option<NodeMatrix> {
    let mine = m.dev.as_ref()?;
    if m.count < 2 {
        return None;
    }
    let mut devs = Vec::new();
    let mut error = None;
    for ordinal in 0..m.count {
        if ordinal == mine.ordinal() {
            devs.push(Arc::clone(mine));
            continue;
        }
        match Device::open(ordinal) {
            Ok(d) => devs.push(Arc::new(d)),
            Err(e) => {
                error = Some(format!("GPU {ordinal}: {e:#}"));
            }
        }
    }
    let pairs = copy::peer_matrix(&devs, args.peer_bytes.as_usize(), args.reps);
    Some(NodeMatrix {
        host: world.host.clone(),
        rank: world.rank,
        gpus: devs.iter().map(|d| d.ordinal()).collect(),
        pairs,
        error,
    })
}

/// The per-GPU table (the report's) and one verdict line per criterion, as rank 0
/// prints them; `counters_only` prints the error criteria alone.
fn render(
    r: &GpuReport,
    criteria: &[crate::results::acceptance::Criterion],
    counters_only: bool,
) -> String {
    let mut s = String::new();
    if let Some(x) = &r.sdc {
        s.push_str(&sdc::summary(x));
        s.push('\n');
    }
    if let Some(e) = &r.error {
        s.push_str(&format!("# burnin gpu: NOT RUN: {e}\n"));
        let sdc: Vec<_> = criteria
            .iter()
            .filter(|c| c.id == "gpu.sdc")
            .cloned()
            .collect();
        if !sdc.is_empty() {
            s.push_str(&crate::report::verdict_text(&sdc));
            for c in sdc.iter().filter(|c| !c.detail.is_empty()) {
                s.push_str(&format!("# {} {}: {}\n", c.id, c.status.label(), c.detail));
            }
        }
        return s;
    }
    if !counters_only {
        let (header, rows) = crate::report::gpu::per_gpu_rows(&r.gpus);
        s.push_str(&crate::table::render(&header, &rows));
    }
    let shown: Vec<crate::results::acceptance::Criterion> = criteria
        .iter()
        .filter(|c| !counters_only || c.id == "gpu.errors" || c.id == "gpu.measured")
        .cloned()
        .collect();
    s.push_str(&crate::report::verdict_text(&shown));
    for c in shown.iter().filter(|c| !c.detail.is_empty()) {
        s.push_str(&format!("# {} {}: {}\n", c.id, c.status.label(), c.detail));
    }
    s
}
