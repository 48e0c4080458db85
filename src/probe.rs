//! `burnin probe`: what every rank sees — host, node, local rank, CPUs, MPI, the CUDA
//! driver and GPUs, NCCL, libtorch — gathered to rank 0, printed as one table and
//! optionally written as JSON.
use crate::backend::nccl;
use crate::config::GlobalArgs;
use crate::error::Outcome;
use crate::fabric;
use crate::gpu;
pub use crate::results::probe::RankProbe;
use crate::world::World;
use anyhow::Result;

#[derive(clap::Args, Debug, serde::Serialize)]
pub struct ProbeArgs {
    /// Also write the per-rank table as JSON to FILE (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Compare the nodes with this topology file (GPUs, NVLinks, NICs, node and rank
    /// counts); any difference makes the probe exit 1.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<std::path::PathBuf>,
}

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// libtorch's version and whether it sees CUDA, as the training binary reports them
/// (burnin has no libtorch of its own); None where there is none.
fn torch_info() -> (Option<String>, Option<bool>) {
    match crate::trainer::torch_info() {
        Ok(t) => (Some(t.version), Some(t.cuda_devices > 0)),
        Err(_) => (None, None),
    }
}

/// Probe this rank.
pub fn probe_rank(world: &World, global: &GlobalArgs) -> RankProbe {
    let (nccl_version, nccl_error) = match nccl::nccl_version(global.nccl_lib.as_deref()) {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let (libtorch_version, torch_cuda) = torch_info();
    RankProbe {
        rank: world.rank,
        host: world.host.clone(),
        node: world.node,
        local_rank: world.local_rank,
        local_size: world.local_size,
        cpus: cpus(),
        mpi_version: crate::world::mpi_version(),
        cuda: gpu::inventory(),
        nccl_version,
        nccl_error,
        libtorch_version,
        torch_cuda,
        fabric: (world.local_rank == 0).then(fabric::discover),
    }
}

/// Where the probed nodes differ from `topo`.
pub fn differences(
    rows: &[RankProbe],
    topo: &crate::topology::file::Topology,
) -> Vec<fabric::Difference> {
    let views = fabric::views_by_node(
        rows,
        |r| r.node,
        |r| r.host.as_str(),
        |r| r.fabric.as_ref(),
        |r| r.cuda.gpus.iter().map(|g| g.name.clone()).collect(),
    );
    fabric::compare(topo, &views)
}

/// The table rank 0 prints.
pub fn render_table(rows: &[RankProbe]) -> String {
    let header = [
        "rank",
        "host",
        "node",
        "local",
        "cpus",
        "gpu",
        "driver",
        "nccl",
        "libtorch",
        "torch-cuda",
        "mpi",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let gpu = r
                .cuda
                .gpus
                .get(r.local_rank)
                .map(|g| format!("{} ({})", g.name, g.pci_bus_id))
                .unwrap_or_else(|| "-".into());
            vec![
                r.rank.to_string(),
                r.host.clone(),
                r.node.to_string(),
                format!("{}/{}", r.local_rank, r.local_size),
                r.cpus.to_string(),
                gpu,
                r.cuda.driver_version.clone().unwrap_or_else(|| "-".into()),
                r.nccl_version.clone().unwrap_or_else(|| "-".into()),
                r.libtorch_version.clone().unwrap_or_else(|| "-".into()),
                match r.torch_cuda {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "-".into(),
                },
                r.mpi_version.clone(),
            ]
        })
        .collect();
    crate::table::render(&header, &body)
}

/// `burnin probe`.
pub fn run(world: &World, global: &GlobalArgs, args: &ProbeArgs) -> Result<Outcome> {
    // A bad topology file is refused (exit 2) before anything is measured.
    let topo = crate::topology::file::Topology::load_shared(world, args.topology.as_deref())?;
    // With --backend nccl, a rank that cannot use NCCL is an error (exit 2) here too.
    let (_, why) = crate::backend::resolve(world, &global.backend_config())?;
    let mine = probe_rank(world, global);
    let all = world.gather_json(&mine)?;
    if let Some(rows) = all {
        print!("{}", render_table(&rows));
        println!("# backend: {why}");
        let no_gpu: Vec<usize> = rows
            .iter()
            .filter(|r| r.cuda.gpus.is_empty())
            .map(|r| r.rank)
            .collect();
        if !no_gpu.is_empty() && no_gpu.len() == rows.len() {
            let why = rows[0].cuda.error.clone().unwrap_or_default();
            println!("# no GPU on any rank: {why}");
        }
        for r in rows.iter().filter(|r| r.fabric.is_some()) {
            if let Some(f) = &r.fabric {
                print!("{}", fabric::render_node(&r.host, f));
            }
        }
        if let Some(path) = &args.json {
            crate::results::write_json_atomic(path, &rows)?;
            println!("# wrote {}", path.display());
        }
        if let Some(t) = &topo {
            let d = differences(&rows, t);
            if d.is_empty() {
                println!("# topology {}: the nodes match it", t.name);
            } else {
                println!("# topology {}: {} difference(s)", t.name, d.len());
                for x in &d {
                    println!("# DIFF {}", x.text);
                }
                println!("# verdict: FAIL");
                return Ok(Outcome::Fail);
            }
        }
    }
    Ok(Outcome::Pass)
}
