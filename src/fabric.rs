//! Fabric discovery for `burnin probe`: per node, the CPUs (sockets, NUMA nodes), the
//! NICs (`/sys/class/net`) and InfiniBand/RoCE ports (`/sys/class/infiniband`) with
//! rate, state and NUMA node, and the GPUs with their NVLinks and the GPU↔GPU link
//! matrix (as `nvidia-smi topo -m` shows it) through NVML, loaded at run time by
//! `nvml-wrapper`. Every piece is optional: what is not there is reported absent, with
//! the reason, never an error. [`compare`] lists where the nodes differ from a
//! topology file (missing GPU, NVLink down, a NIC at a lower rate, …).
use crate::topology::file::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

/// What one node has.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
pub struct NodeFabric {
    /// The node's CPUs: model, sockets, NUMA nodes.
    pub cpu: CpuInfo,
    /// Network interfaces other than loopback.
    pub nics: Vec<Nic>,
    /// InfiniBand / RoCE ports.
    pub ib_ports: Vec<IbPort>,
    /// The node's GPUs and NVLinks as NVML reports them.
    pub gpus: GpuFabric,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
pub struct CpuInfo {
    /// "model name" from /proc/cpuinfo.
    pub model: Option<String>,
    /// CPU sockets (distinct physical package ids of online CPUs), a count.
    pub sockets: usize,
    /// NUMA nodes in sysfs, a count.
    pub numa_nodes: usize,
    /// Online CPUs (hardware threads), a count.
    pub cpus_online: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Nic {
    /// Interface name ("eth0", "ib0").
    pub name: String,
    /// ethernet | infiniband | veth | bridge | tun | virtual
    pub kind: String,
    /// operstate: up, down, unknown, …
    pub state: String,
    /// Line rate in Mbit/s when the driver reports one.
    pub speed_mbit: Option<u64>,
    /// MTU, bytes.
    pub mtu: Option<u64>,
    /// NUMA node of its device (None: the platform does not say).
    pub numa_node: Option<i64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct IbPort {
    /// HCA name in sysfs ("mlx5_0").
    pub hca: String,
    /// Port number on the HCA.
    pub port: u32,
    /// ACTIVE, DOWN, INIT, … (without the number sysfs puts first).
    pub state: String,
    /// Physical state: LinkUp, Polling, Disabled, … (without the number).
    pub phys_state: Option<String>,
    /// Line rate, Gbit/s (sysfs `rate`).
    pub rate_gbit: Option<f64>,
    /// InfiniBand or Ethernet (RoCE).
    pub link_layer: String,
    /// NUMA node of the HCA (None: the platform does not say).
    pub numa_node: Option<i64>,
    /// Network interfaces of the HCA (RoCE, IPoIB).
    pub netdevs: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
pub struct GpuFabric {
    /// Why NVML gave nothing, when it did not.
    pub error: Option<String>,
    /// NVIDIA driver version.
    pub driver_version: Option<String>,
    /// NVML library version.
    pub nvml_version: Option<String>,
    /// Every GPU NVML lists, by index.
    pub gpus: Vec<NvmlGpu>,
    /// `nvidia-smi topo -m`'s GPU part: "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS".
    pub matrix: Vec<Vec<String>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
pub struct NvmlGpu {
    /// NVML device index.
    pub index: u32,
    /// Device name ("NVIDIA H200").
    pub name: String,
    /// Device UUID ("GPU-…").
    pub uuid: String,
    /// PCI bus id ("00000000:19:00.0").
    pub pci_bus_id: String,
    /// NUMA node of the device, when NVML says.
    pub numa_node: Option<u32>,
    /// Total device memory, bytes.
    pub memory_bytes: Option<u64>,
    /// NVLinks the device has (links NVML answers for, active or not).
    pub nvlinks: u32,
    /// NVLinks up, a count.
    pub nvlinks_active: u32,
    /// Active links: the remote end's PCI bus id and whether it is an NVSwitch.
    pub nvlink_remotes: Vec<NvlinkRemote>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NvlinkRemote {
    /// The local NVLink number.
    pub link: u32,
    /// PCI bus id of the remote end.
    pub pci_bus_id: String,
    /// The remote end is an NVSwitch.
    pub switch: bool,
}

/// Discover this node (the machine's own /sys and /proc, and NVML).
pub fn discover() -> NodeFabric {
    let mut f = discover_at(Path::new("/"));
    f.gpus = nvml::discover();
    f
}

/// The /sys and /proc part, under `root` (tests point it at a fixture tree).
pub fn discover_at(root: &Path) -> NodeFabric {
    NodeFabric {
        cpu: cpu_info(root),
        nics: nics(root),
        ib_ports: ib_ports(root),
        gpus: GpuFabric::default(),
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|a| natural(a));
    v
}

/// Sort key putting "eth10" after "eth9".
fn natural(s: &str) -> (String, u64, String) {
    let head: String = s.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let rest = &s[head.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n = digits.parse().unwrap_or(0);
    (head, n, rest[digits.len()..].to_string())
}

fn numa(path: &Path) -> Option<i64> {
    // -1: the platform does not say.
    read(path)?.parse::<i64>().ok().filter(|n| *n >= 0)
}

fn cpu_info(root: &Path) -> CpuInfo {
    let sys_cpu = root.join("sys/devices/system/cpu");
    let mut sockets = BTreeSet::new();
    let mut online = 0;
    for e in entries(&sys_cpu) {
        let Some(n) = e.strip_prefix("cpu") else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let dir = sys_cpu.join(&e);
        if read(&dir.join("online")).as_deref() == Some("0") {
            continue;
        }
        online += 1;
        if let Some(p) = read(&dir.join("topology/physical_package_id")) {
            sockets.insert(p);
        }
    }
    let numa_nodes = entries(&root.join("sys/devices/system/node"))
        .iter()
        .filter(|e| {
            e.strip_prefix("node")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    let model = read(&root.join("proc/cpuinfo")).and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    CpuInfo {
        model,
        sockets: sockets.len(),
        numa_nodes,
        cpus_online: online,
    }
}

fn nics(root: &Path) -> Vec<Nic> {
    let base = root.join("sys/class/net");
    entries(&base)
        .into_iter()
        .filter(|n| n != "lo")
        .filter_map(|name| {
            let d = base.join(&name);
            if !d.is_dir() {
                return None;
            }
            let has = |f: &str| d.join(f).exists();
            let ty = read(&d.join("type")).and_then(|t| t.parse::<u32>().ok());
            let kind = if has("bridge") {
                "bridge"
            } else if has("tun_flags") {
                "tun"
            } else if has("device") {
                if ty == Some(32) {
                    "infiniband"
                } else {
                    "ethernet"
                }
            } else if read(&d.join("iflink")) != read(&d.join("ifindex")) {
                // a virtual device whose link is another interface: a veth pair end
                "veth"
            } else {
                "virtual"
            };
            Some(Nic {
                kind: kind.into(),
                state: read(&d.join("operstate")).unwrap_or_else(|| "unknown".into()),
                // -1 or an error (EINVAL) when the link is down or the driver has no rate
                speed_mbit: read(&d.join("speed"))
                    .and_then(|s| s.parse::<i64>().ok())
                    .filter(|s| *s > 0)
                    .map(|s| s as u64),
                mtu: read(&d.join("mtu")).and_then(|s| s.parse().ok()),
                numa_node: numa(&d.join("device/numa_node")),
                name,
            })
        })
        .collect()
}

/// "4: ACTIVE" → "ACTIVE".
fn after_colon(s: String) -> String {
    s.split_once(':')
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or(s)
}

/// "400 Gb/sec (4X NDR)" → 400.
pub fn parse_ib_rate(s: &str) -> Option<f64> {
    s.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r >= 0.0)
}

fn ib_ports(root: &Path) -> Vec<IbPort> {
    let base = root.join("sys/class/infiniband");
    let mut v = Vec::new();
    for hca in entries(&base) {
        let d = base.join(&hca);
        let numa_node = numa(&d.join("device/numa_node"));
        let netdevs = entries(&d.join("device/net"));
        for port in entries(&d.join("ports")) {
            let Ok(n) = port.parse::<u32>() else {
                continue;
            };
            let p = d.join("ports").join(&port);
            v.push(IbPort {
                hca: hca.clone(),
                port: n,
                state: read(&p.join("state"))
                    .map(after_colon)
                    .unwrap_or_else(|| "unknown".into()),
                phys_state: read(&p.join("phys_state")).map(after_colon),
                rate_gbit: read(&p.join("rate")).and_then(|r| parse_ib_rate(&r)),
                link_layer: read(&p.join("link_layer")).unwrap_or_else(|| "InfiniBand".into()),
                numa_node,
                netdevs: netdevs.clone(),
            });
        }
    }
    v
}

/// "00000000:18:00.0" and "0000:18:00.0" compare equal.
pub fn normalize_bus_id(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

/// The GPU part of `nvidia-smi topo -m`: NV<n> for GPUs joined by n NVLinks (directly,
/// or both through NVSwitches: the smaller of their switch link counts), else the PCIe
/// relation `pcie(i, j)` ("PIX", "PXB", "PHB", "NODE", "SYS"; "?" when unknown).
pub fn link_matrix(
    gpus: &[NvmlGpu],
    pcie: impl Fn(usize, usize) -> Option<String>,
) -> Vec<Vec<String>> {
    let ids: Vec<String> = gpus
        .iter()
        .map(|g| normalize_bus_id(&g.pci_bus_id))
        .collect();
    let switch_links: Vec<usize> = gpus
        .iter()
        .map(|g| g.nvlink_remotes.iter().filter(|r| r.switch).count())
        .collect();
    (0..gpus.len())
        .map(|i| {
            (0..gpus.len())
                .map(|j| {
                    if i == j {
                        return "X".to_string();
                    }
                    let direct = gpus[i]
                        .nvlink_remotes
                        .iter()
                        .filter(|r| !r.switch && normalize_bus_id(&r.pci_bus_id) == ids[j])
                        .count();
                    let via_switch = switch_links[i].min(switch_links[j]);
                    if direct > 0 {
                        format!("NV{direct}")
                    } else if via_switch > 0 {
                        format!("NV{via_switch}")
                    } else {
                        pcie(i, j).unwrap_or_else(|| "?".into())
                    }
                })
                .collect()
        })
        .collect()
}

mod nvml {
    use super::{link_matrix, GpuFabric, NvlinkRemote, NvmlGpu};
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::Nvml;

    /// NVML's NVML_NVLINK_MAX_LINKS (nvml.h).
    const NVML_NVLINK_MAX_LINKS: u32 = 18;

    fn why(e: NvmlError) -> String {
        match e {
            NvmlError::LibloadingError(e) => {
                format!("NVML not loadable ({e}); no NVIDIA driver on this node")
            }
            NvmlError::DriverNotLoaded => "NVML: the NVIDIA kernel driver is not loaded".into(),
            e => format!("NVML: {e}"),
        }
    }

    fn level(l: TopologyLevel) -> &'static str {
        match l {
            TopologyLevel::Internal => "X",
            TopologyLevel::Single => "PIX",
            TopologyLevel::Multiple => "PXB",
            TopologyLevel::HostBridge => "PHB",
            TopologyLevel::Node => "NODE",
            TopologyLevel::System => "SYS",
        }
    }

    /// Whether NVLink `link` of `d` ends at an NVSwitch. Asked of NVML directly:
    /// nvml-wrapper 0.12's `NvLink::remote_device_type` has NVML write the type into a
    /// temporary and returns its initial value, so it always says "unknown" (found by
    /// the GPU twin: the NVSwitch matrix of an HGX board read as PCIe levels).
    fn remote_is_switch(nvml: &Nvml, d: &nvml_wrapper::Device, link: u32) -> bool {
        /// nvml.h: NVML_SUCCESS, NVML_NVLINK_DEVICE_TYPE_SWITCH.
        const SUCCESS: u32 = 0;
        const SWITCH: u32 = 2;
        let Ok(f) = nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() else {
            return false;
        };
        let mut kind: u32 = u32::MAX;
        // SAFETY: `f` is NVML's nvmlDeviceGetNvLinkRemoteDeviceType(device, link,
        // *type), resolved from the library `nvml` keeps loaded; the handle comes from
        // that library and is live while `d` is; NVML writes one c_uint through the
        // pointer, which is valid for the call.
        let rc = unsafe { f(d.handle(), link, &mut kind) };
        rc == SUCCESS && kind == SWITCH
    }

    pub fn discover() -> GpuFabric {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                return GpuFabric {
                    error: Some(why(e)),
                    ..Default::default()
                }
            }
        };
        let mut f = GpuFabric {
            driver_version: nvml.sys_driver_version().ok(),
            nvml_version: nvml.sys_nvml_version().ok(),
            ..Default::default()
        };
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                f.error = Some(why(e));
                return f;
            }
        };
        let mut devices = Vec::new();
        for index in 0..count {
            let d = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    f.error = Some(format!("GPU {index}: {}", why(e)));
                    continue;
                }
            };
            let mut g = NvmlGpu {
                index,
                name: d.name().unwrap_or_default(),
                uuid: d.uuid().unwrap_or_default(),
                pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                numa_node: d.numa_node_id().ok(),
                memory_bytes: d.memory_info().ok().map(|m| m.total),
                ..Default::default()
            };
            for link in 0..NVML_NVLINK_MAX_LINKS {
                let l = d.link_wrapper_for(link);
                match l.is_active() {
                    Ok(active) => {
                        g.nvlinks += 1;
                        if active {
                            g.nvlinks_active += 1;
                            if let Ok(p) = l.remote_pci_info() {
                                let switch = remote_is_switch(&nvml, &d, link);
                                g.nvlink_remotes.push(NvlinkRemote {
                                    link,
                                    pci_bus_id: p.bus_id,
                                    switch,
                                });
                            }
                        }
                    }
                    // NotSupported / InvalidArg: no such link (or no NVLink at all)
                    Err(_) => continue,
                }
            }
            f.gpus.push(g);
            devices.push(index);
        }
        let pcie = |i: usize, j: usize| -> Option<String> {
            let a = nvml.device_by_index(f.gpus[i].index).ok()?;
            let b = nvml.device_by_index(f.gpus[j].index).ok()?;
            a.topology_common_ancestor(b)
                .ok()
                .map(|l| level(l).to_string())
        };
        f.matrix = link_matrix(&f.gpus, pcie);
        f
    }
}

/// One node as the comparison sees it.
#[derive(Clone, Debug)]
pub struct NodeView<'a> {
    pub host: &'a str,
    pub ranks: usize,
    /// GPUs the CUDA driver shows (when NVML gave none).
    pub cuda_gpus: Vec<String>,
    pub fabric: Option<&'a NodeFabric>,
}

/// One node's view from per-rank rows (any row type): its host, rank count, and the
/// fabric and CUDA GPUs of the rank that discovered it (else its first rank).
pub fn views_by_node<'a, R>(
    rows: &'a [R],
    node: impl Fn(&R) -> usize,
    host: impl Fn(&'a R) -> &'a str,
    fabric: impl Fn(&'a R) -> Option<&'a NodeFabric>,
    cuda_gpus: impl Fn(&R) -> Vec<String>,
) -> Vec<NodeView<'a>> {
    let mut nodes: Vec<usize> = rows.iter().map(&node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
        .iter()
        .filter_map(|&n| {
            let mine: Vec<&R> = rows.iter().filter(|r| node(r) == n).collect();
            let lead = *mine.iter().find(|r| fabric(r).is_some()).or(mine.first())?;
            Some(NodeView {
                host: host(lead),
                ranks: mine.len(),
                cuda_gpus: cuda_gpus(lead),
                fabric: fabric(lead),
            })
        })
        .collect()
}

/// One way the machines differ from the topology file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Difference {
    /// The host, or "job".
    pub subject: String,
    /// gpu | nvlink | nic | nodes | ranks
    pub what: String,
    pub text: String,
}

fn nic_kind_matches(kind: &str, nic: &Nic) -> bool {
    match kind {
        // Slingshot's NICs are Ethernet interfaces named hsnN.
        "slingshot" | "cxi" => nic.name.starts_with("hsn"),
        "ethernet" => nic.kind == "ethernet",
        "veth" => nic.kind == "veth",
        "infiniband" => nic.kind == "infiniband",
        other => nic.kind == other,
    }
}

/// Where `nodes` differ from `topo`.
pub fn compare(topo: &Topology, nodes: &[NodeView]) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut diff = |subject: &str, what: &str, text: String| {
        out.push(Difference {
            subject: subject.to_string(),
            what: what.to_string(),
            text,
        })
    };
    if let Some(want) = topo.node.count {
        if nodes.len() != want {
            diff(
                "job",
                "nodes",
                format!(
                    "the job spans {} node(s); {} expects {want}",
                    nodes.len(),
                    topo.name
                ),
            );
        }
    }
    let want_ranks = topo.ranks_per_node();
    for n in nodes {
        if topo.node.ranks.is_some() && n.ranks != want_ranks {
            diff(
                n.host,
                "ranks",
                format!(
                    "{}: {} rank(s), {} expects {want_ranks}",
                    n.host, n.ranks, topo.name
                ),
            );
        }
        let Some(f) = n.fabric else {
            continue;
        };
        compare_gpus(topo, n, f, &mut diff);
        compare_nvlinks(topo, n.host, f, &mut diff);
        // NICs of the declared kind: count up, and each at the declared rate.
        if let Some(inter) = &topo.inter {
            compare_nics(n.host, &topo.name, inter, f, &mut diff);
        }
    }
    out
}

/// A node's GPUs against the topology: enough of them, each of the declared model.
fn compare_gpus(
    topo: &Topology,
    n: &NodeView,
    f: &NodeFabric,
    diff: &mut impl FnMut(&str, &str, String),
) {
    // GPUs: NVML's list, else what CUDA showed.
    let names: Vec<String> = if f.gpus.gpus.is_empty() {
        n.cuda_gpus.clone()
    } else {
        f.gpus.gpus.iter().map(|g| g.name.clone()).collect()
    };
    let want = topo.node.gpus;
    if want > 0 && names.len() < want {
        let why = if names.is_empty() {
            format!(" ({})", f.gpus.error.as_deref().unwrap_or("no GPU visible"))
        } else {
            String::new()
        };
        diff(
            n.host,
            "gpu",
            format!(
                "{}: {} GPU(s), {} expects {want} — missing GPU{why}",
                n.host,
                names.len(),
                topo.name
            ),
        );
    }
    if let Some(model) = &topo.node.gpu_model {
        for (i, name) in names.iter().enumerate() {
            if !name.contains(model.as_str()) {
                diff(
                    n.host,
                    "gpu",
                    format!(
                        "{}: GPU {i} is {name}, {} expects {model}",
                        n.host, topo.name
                    ),
                );
            }
        }
    }
}

/// A node's NVLinks against the topology (when its intra-node link is NVLink): every
/// GPU with its links up.
fn compare_nvlinks(
    topo: &Topology,
    host: &str,
    f: &NodeFabric,
    diff: &mut impl FnMut(&str, &str, String),
) {
    // NVLink: every GPU with its links up.
    let intra = topo.intra.as_ref();
    let nvlink = intra
        .and_then(|s| s.link.as_deref())
        .is_some_and(|l| l.starts_with("nvlink"));
    if nvlink && !f.gpus.gpus.is_empty() {
        let per_gpu = intra.and_then(|s| s.nvlinks_per_gpu);
        for g in &f.gpus.gpus {
            let need = per_gpu.unwrap_or(1);
            if g.nvlinks_active < need {
                diff(
                    host,
                    "nvlink",
                    format!(
                        "{}: GPU {} ({}) has {} of {} NVLinks active — NVLink down",
                        host,
                        g.index,
                        g.pci_bus_id,
                        g.nvlinks_active,
                        per_gpu.unwrap_or(g.nvlinks).max(g.nvlinks)
                    ),
                );
            }
        }
    }
}

fn compare_nics(
    host: &str,
    topo: &str,
    inter: &crate::topology::file::LinkSpec,
    f: &NodeFabric,
    diff: &mut impl FnMut(&str, &str, String),
) {
    let kind = inter.nic_kind.as_deref().unwrap_or("ethernet");
    let want_rate = inter.nic_rate_gbit;
    // (name, up, rate Gbit/s)
    let ports: Vec<(String, bool, Option<f64>)> = match kind {
        // EFA devices are verbs devices (rdmapNsM, link layer "Unspecified").
        "efa" => f
            .ib_ports
            .iter()
            .filter(|p| {
                p.hca.starts_with("rdmap")
                    || p.hca.starts_with("efa")
                    || p.link_layer.eq_ignore_ascii_case("Unspecified")
            })
            .map(|p| {
                (
                    format!("{}:{}", p.hca, p.port),
                    p.state == "ACTIVE",
                    p.rate_gbit,
                )
            })
            .collect(),
        "infiniband" | "roce" => {
            let layer = if kind == "infiniband" {
                "InfiniBand"
            } else {
                "Ethernet"
            };
            f.ib_ports
                .iter()
                .filter(|p| p.link_layer.eq_ignore_ascii_case(layer))
                .map(|p| {
                    (
                        format!("{}:{}", p.hca, p.port),
                        p.state == "ACTIVE",
                        p.rate_gbit,
                    )
                })
                .collect()
        }
        _ => f
            .nics
            .iter()
            .filter(|n| nic_kind_matches(kind, n))
            .map(|n| {
                (
                    n.name.clone(),
                    n.state == "up",
                    n.speed_mbit.map(|m| m as f64 / 1000.0),
                )
            })
            .collect(),
    };
    let up = ports.iter().filter(|p| p.1).count();
    if let Some(want) = inter.nics {
        if up < want {
            let down: Vec<&str> = ports
                .iter()
                .filter(|p| !p.1)
                .map(|p| p.0.as_str())
                .collect();
            let down = if down.is_empty() {
                String::new()
            } else {
                format!(" (down: {})", down.join(", "))
            };
            diff(
                host,
                "nic",
                format!("{host}: {up} {kind} NIC(s) up, {topo} expects {want}{down}"),
            );
        }
    }
    if let Some(want) = want_rate {
        for (name, is_up, rate) in &ports {
            if let (true, Some(r)) = (is_up, rate) {
                if *r + 1e-9 < want {
                    diff(
                        host,
                        "nic",
                        format!("{host}: {name} at {r} Gbit/s, {topo} expects {want} — NIC at a lower rate"),
                    );
                }
            }
        }
    }
}

/// Text lines describing a node's fabric, for the probe table's footer.
pub fn render_node(host: &str, f: &NodeFabric) -> String {
    let mut s = String::new();
    let c = &f.cpu;
    s.push_str(&format!(
        "# {host}: {} CPU(s) online, {} socket(s), {} NUMA node(s){}\n",
        c.cpus_online,
        c.sockets,
        c.numa_nodes,
        c.model
            .as_ref()
            .map(|m| format!(", {m}"))
            .unwrap_or_default()
    ));
    render_gpus(&f.gpus, &mut s);
    render_ports(f, &mut s);
    s
}

/// The GPU lines of [`render_node`]: each GPU NVML sees, then its topology matrix.
fn render_gpus(nvml: &GpuFabric, s: &mut String) {
    match (&nvml.error, nvml.gpus.is_empty()) {
        (Some(e), true) => s.push_str(&format!("#   GPUs (NVML): absent — {e}\n")),
        (_, true) => s.push_str("#   GPUs (NVML): none\n"),
        _ => {
            s.push_str(&format!(
                "#   GPUs (NVML {}, driver {}):\n",
                nvml.nvml_version.as_deref().unwrap_or("?"),
                nvml.driver_version.as_deref().unwrap_or("?")
            ));
            for g in &nvml.gpus {
                s.push_str(&format!(
                    "#     GPU{} {} {} NUMA {} NVLinks {}/{} active\n",
                    g.index,
                    g.name,
                    g.pci_bus_id,
                    g.numa_node
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "-".into()),
                    g.nvlinks_active,
                    g.nvlinks
                ));
            }
            let n = nvml.matrix.len();
            let mut header = vec![String::new()];
            header.extend((0..n).map(|i| format!("GPU{i}")));
            let body: Vec<Vec<String>> = nvml
                .matrix
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let mut r = vec![format!("GPU{i}")];
                    r.extend(row.iter().cloned());
                    r
                })
                .collect();
            let h: Vec<&str> = header.iter().map(String::as_str).collect();
            for line in crate::table::render(&h, &body).lines() {
                s.push_str(&format!("#     {line}\n"));
            }
        }
    }
}

/// The InfiniBand/RoCE port and NIC lines of [`render_node`].
fn render_ports(f: &NodeFabric, s: &mut String) {
    if f.ib_ports.is_empty() {
        s.push_str("#   InfiniBand/RoCE: absent (no /sys/class/infiniband)\n");
    }
    for p in &f.ib_ports {
        s.push_str(&format!(
            "#   {}:{} {} {} {} NUMA {}{}\n",
            p.hca,
            p.port,
            p.link_layer,
            p.state,
            p.rate_gbit
                .map(|r| format!("{r} Gb/s"))
                .unwrap_or_else(|| "rate ?".into()),
            p.numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
            if p.netdevs.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.netdevs.join(","))
            }
        ));
    }
    for nic in &f.nics {
        s.push_str(&format!(
            "#   {} {} {} {} MTU {} NUMA {}\n",
            nic.name,
            nic.kind,
            nic.state,
            nic.speed_mbit
                .map(|m| format!("{m} Mb/s"))
                .unwrap_or_else(|| "rate ?".into()),
            nic.mtu.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            nic.numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into())
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{text}\n")).unwrap();
    }

    /// A DGX-like node in miniature: 2 sockets, 2 NUMA nodes, 2 IB ports (one at a
    /// lower rate, one down), a RoCE port, an Ethernet NIC, a bridge and a veth.
    fn fixture() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for (cpu, pkg) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            put(
                r,
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                &pkg.to_string(),
            );
        }
        put(r, "sys/devices/system/cpu/cpu3/online", "0");
        put(r, "sys/devices/system/cpu/possible", "0-3");
        put(r, "sys/devices/system/node/node0/cpulist", "0-1");
        put(r, "sys/devices/system/node/node1/cpulist", "2-3");
        put(r, "sys/devices/system/node/online", "0-1");
        put(
            r,
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n",
        );
        for (hca, rate, state, numa, layer) in [
            (
                "mlx5_0",
                "400 Gb/sec (4X NDR)",
                "4: ACTIVE",
                "0",
                "InfiniBand",
            ),
            (
                "mlx5_1",
                "200 Gb/sec (4X HDR)",
                "4: ACTIVE",
                "1",
                "InfiniBand",
            ),
            (
                "mlx5_2",
                "400 Gb/sec (4X NDR)",
                "1: DOWN",
                "1",
                "InfiniBand",
            ),
            (
                "mlx5_3",
                "100 Gb/sec (4X EDR)",
                "4: ACTIVE",
                "0",
                "Ethernet",
            ),
        ] {
            let p = format!("sys/class/infiniband/{hca}/ports/1");
            put(r, &format!("{p}/rate"), rate);
            put(r, &format!("{p}/state"), state);
            put(r, &format!("{p}/phys_state"), "5: LinkUp");
            put(r, &format!("{p}/link_layer"), layer);
            put(
                r,
                &format!("sys/class/infiniband/{hca}/device/numa_node"),
                numa,
            );
        }
        put(
            r,
            "sys/class/infiniband/mlx5_3/device/net/ens1f0/ifindex",
            "7",
        );
        for (nic, extra) in [
            ("eth0", "device"),
            ("br0", "bridge"),
            ("veth1", ""),
            ("lo", ""),
        ] {
            put(r, &format!("sys/class/net/{nic}/operstate"), "up");
            put(r, &format!("sys/class/net/{nic}/mtu"), "1500");
            put(r, &format!("sys/class/net/{nic}/ifindex"), "5");
            put(
                r,
                &format!("sys/class/net/{nic}/iflink"),
                if nic == "veth1" { "6" } else { "5" },
            );
            put(r, &format!("sys/class/net/{nic}/type"), "1");
            if !extra.is_empty() {
                fs::create_dir_all(r.join(format!("sys/class/net/{nic}/{extra}"))).unwrap();
            }
        }
        put(r, "sys/class/net/eth0/speed", "100000");
        put(r, "sys/class/net/eth0/device/numa_node", "1");
        put(r, "sys/class/net/veth1/speed", "10000");
        put(r, "sys/class/net/br0/speed", "-1");
        t
    }

    #[test]
    fn sysfs_tree_is_read_into_cpus_nics_and_ib_ports() {
        let t = fixture();
        let f = discover_at(t.path());
        assert_eq!(
            f.cpu,
            CpuInfo {
                model: Some("Intel(R) Xeon(R) Platinum 8480C".into()),
                sockets: 2,
                numa_nodes: 2,
                cpus_online: 3
            }
        );
        let kinds: Vec<(&str, &str, Option<u64>)> = f
            .nics
            .iter()
            .map(|n| (n.name.as_str(), n.kind.as_str(), n.speed_mbit))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("br0", "bridge", None),
                ("eth0", "ethernet", Some(100000)),
                ("veth1", "veth", Some(10000))
            ]
        );
        assert_eq!(f.nics[1].numa_node, Some(1));
        assert_eq!(f.ib_ports.len(), 4);
        assert_eq!(f.ib_ports[0].state, "ACTIVE");
        assert_eq!(f.ib_ports[0].rate_gbit, Some(400.0));
        assert_eq!(f.ib_ports[2].state, "DOWN");
        assert_eq!(f.ib_ports[3].link_layer, "Ethernet");
        assert_eq!(f.ib_ports[3].netdevs, vec!["ens1f0".to_string()]);
        // and it prints
        let text = render_node("node0", &f);
        assert!(
            text.contains("mlx5_1:1 InfiniBand ACTIVE 200 Gb/s NUMA 1"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_machine_is_absent_not_an_error() {
        let t = tempfile::tempdir().unwrap();
        let f = discover_at(t.path());
        assert_eq!(f, NodeFabric::default());
        assert!(render_node("h", &f).contains("InfiniBand/RoCE: absent"));
    }

    #[test]
    fn ib_rates_parse() {
        assert_eq!(parse_ib_rate("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(parse_ib_rate("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(parse_ib_rate("garbage"), None);
        assert_eq!(parse_ib_rate(""), None);
    }

    fn gpu(i: u32, bus: &str, remotes: Vec<(&str, bool)>) -> NvmlGpu {
        NvmlGpu {
            index: i,
            name: "NVIDIA H200".into(),
            pci_bus_id: bus.into(),
            nvlinks: remotes.len() as u32,
            nvlinks_active: remotes.len() as u32,
            nvlink_remotes: remotes
                .into_iter()
                .enumerate()
                .map(|(l, (b, s))| NvlinkRemote {
                    link: l as u32,
                    pci_bus_id: b.into(),
                    switch: s,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn link_matrix_reads_like_nvidia_smi_topo() {
        // GPU0-GPU1 with 2 direct links; GPU2 without NVLink.
        let gpus = vec![
            gpu(
                0,
                "00000000:18:00.0",
                vec![("0000:2A:00.0", false), ("00000000:2a:00.0", false)],
            ),
            gpu(
                1,
                "00000000:2A:00.0",
                vec![("00000000:18:00.0", false), ("00000000:18:00.0", false)],
            ),
            gpu(2, "00000000:9A:00.0", vec![]),
        ];
        let m = link_matrix(&gpus, |i, j| {
            Some(if i.max(j) == 2 { "SYS" } else { "PXB" }.into())
        });
        assert_eq!(
            m,
            vec![
                vec!["X", "NV2", "SYS"],
                vec!["NV2", "X", "SYS"],
                vec!["SYS", "SYS", "X"]
            ]
        );
        // NVSwitch: 18 links each to switches → NV18 everywhere; one GPU with 16 up → NV16.
        let sw = |n: usize| vec![("0000:05:00.0", true); n];
        let gpus = vec![
            gpu(0, "0:1:0.0", sw(18)),
            gpu(1, "0:2:0.0", sw(18)),
            gpu(2, "0:3:0.0", sw(16)),
        ];
        let m = link_matrix(&gpus, |_, _| None);
        assert_eq!(m[0][1], "NV18");
        assert_eq!(m[0][2], "NV16");
        assert_eq!(m[2][1], "NV16");
    }

    fn topo(text: &str) -> Topology {
        Topology::parse(text, "t.toml").unwrap()
    }

    #[test]
    fn differences_name_missing_gpu_nvlink_down_and_slow_nic() {
        let t = topo(
            "name='hgx'\n[node]\ngpus=2\ngpu_model='H200'\nranks=2\ncount=2\n[intra]\nlink='nvlink4'\nnvlinks_per_gpu=18\n[inter]\nnics=3\nnic_kind='infiniband'\nnic_rate_gbit=400\n",
        );
        let dir = fixture();
        let mut good = discover_at(dir.path());
        good.gpus.gpus = vec![
            gpu(0, "0:1:0.0", vec![("0:5:0.0", true); 18]),
            gpu(1, "0:2:0.0", vec![("0:5:0.0", true); 18]),
        ];
        let mut bad = good.clone();
        bad.gpus.gpus[1].nvlinks_active = 16;
        bad.gpus.gpus[1].nvlinks = 18;
        let mut one_gpu = good.clone();
        one_gpu.gpus.gpus.truncate(1);
        let view = |host: &'static str, f: &'static NodeFabric| NodeView {
            host,
            ranks: 2,
            cuda_gpus: vec![],
            fabric: Some(f),
        };
        let (good, bad, one_gpu) = (
            Box::leak(Box::new(good)),
            Box::leak(Box::new(bad)),
            Box::leak(Box::new(one_gpu)),
        );
        let d = compare(
            &t,
            &[
                view("node0", good),
                view("node1", bad),
                view("node2", one_gpu),
            ],
        );
        let texts: Vec<&str> = d.iter().map(|d| d.text.as_str()).collect();
        let has = |s: &str| texts.iter().any(|t| t.contains(s));
        assert!(has("the job spans 3 node(s); hgx expects 2"), "{texts:#?}");
        assert!(
            has("node1: GPU 1 (0:2:0.0) has 16 of 18 NVLinks active — NVLink down"),
            "{texts:#?}"
        );
        assert!(
            has("node2: 1 GPU(s), hgx expects 2 — missing GPU"),
            "{texts:#?}"
        );
        // the fixture has 2 IB ports up (one at 200), one down
        assert!(
            has("node0: 2 infiniband NIC(s) up, hgx expects 3 (down: mlx5_2:1)"),
            "{texts:#?}"
        );
        assert!(
            has("node0: mlx5_1:1 at 200 Gbit/s, hgx expects 400 — NIC at a lower rate"),
            "{texts:#?}"
        );
        assert!(!has("node0: GPU"), "{texts:#?}");
    }

    #[test]
    fn a_matching_node_has_no_differences_and_no_gpu_is_explained() {
        let t = topo("name='sim'\n[node]\ngpus=0\nranks=2\n[inter]\nnics=1\nnic_kind='veth'\nnic_rate_gbit=2\n");
        let dir = fixture();
        let f = discover_at(dir.path());
        let v = NodeView {
            host: "node0",
            ranks: 2,
            cuda_gpus: vec![],
            fabric: Some(&f),
        };
        assert_eq!(compare(&t, std::slice::from_ref(&v)), vec![]);
        let t = topo("name='gpu'\n[node]\ngpus=8\n");
        let mut f2 = f.clone();
        f2.gpus.error = Some("NVML not loadable".into());
        let v = NodeView {
            fabric: Some(&f2),
            ..v
        };
        let d = compare(&t, &[v]);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].text
                .contains("0 GPU(s), gpu expects 8 — missing GPU (NVML not loadable)"),
            "{}",
            d[0].text
        );
    }

    #[test]
    fn efa_devices_are_the_verbs_ports_of_an_efa_topology() {
        // A p5-class node: EFA adapters are verbs devices rdmapNsM, link layer
        // "Unspecified"; the node here has two of the four the topology asks.
        let t = topo("name='p5'\n[node]\ngpus=0\n[inter]\nnics=4\nnic_kind='efa'\n");
        let dir = fixture();
        let mut f = discover_at(dir.path());
        f.ib_ports = ["rdmap79s0", "rdmap80s0"]
            .iter()
            .map(|h| IbPort {
                hca: h.to_string(),
                port: 1,
                state: "ACTIVE".into(),
                phys_state: None,
                rate_gbit: Some(100.0),
                link_layer: "Unspecified".into(),
                netdevs: Vec::new(),
                numa_node: None,
            })
            .collect();
        let v = NodeView {
            host: "node0",
            ranks: 1,
            cuda_gpus: vec![],
            fabric: Some(&f),
        };
        let d = compare(&t, std::slice::from_ref(&v));
        assert!(
            d.iter()
                .any(|x| x.what == "nic" && x.text.contains('2') && x.text.contains('4')),
            "{d:#?}"
        );
        let t = topo("name='p5'\n[node]\ngpus=0\n[inter]\nnics=2\nnic_kind='efa'\n");
        assert!(compare(&t, &[v]).iter().all(|x| x.what != "nic"));
    }
}
