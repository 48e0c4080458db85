//! Topology files: what a reservation should look like and deliver (TOML in
//! `topologies/`). Errors name the file, the line and the field.
//!
//! ```toml
//! name = "hgx-h200-ib"
//! description = "8x H200 SXM per node, NVLink 4, 8x 400G InfiniBand"
//!
//! [node]
//! gpus = 8                    # GPUs per node (0 for CPU-only simulations)
//! gpu_model = "H200"          # substring of the CUDA device name
//! ranks = 8                   # ranks per node the sweep expects (default: gpus)
//!
//! [intra]                     # inside a node
//! link = "nvlink4"            # nvlink3 | nvlink4 | nvlink5 | pcie | shm
//! nvlinks_per_gpu = 18        # optional
//! all_reduce_busbw_gbps = 460 # expected busbw at large sizes, GB/s
//! all_gather_busbw_gbps = 360
//! outlier_fraction = 0.8      # optional: this tier's own (else [acceptance]'s)
//!
//! [inter]                     # between nodes
//! nics = 8                    # NICs per node
//! nic_kind = "infiniband"     # infiniband | roce | efa | slingshot | ethernet | veth
//! nic_rate_gbit = 400         # per NIC, Gbit/s
//! all_reduce_busbw_gbps = 46  # expected busbw at large sizes across nodes, GB/s
//! all_gather_busbw_gbps = 46
//!
//! [acceptance]
//! min_fraction = 0.9          # a tier below this fraction of its expectation fails
//! outlier_fraction = 0.8      # a group below this fraction of its tier's median is an outlier
//! large_message = "64M"       # busbw is judged at sizes >= this (the largest swept if none)
//! ```
use crate::kinds::CollKind;
use crate::units::Bytes;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Short name of the reservation type ("hgx-h200-ib").
    pub name: String,
    /// Free text ("8x H200 SXM per node, NVLink 4, 8x 400G InfiniBand").
    #[serde(default)]
    pub description: String,
    /// What one node holds.
    pub node: NodeSpec,
    /// The link inside a node and the busbw it should deliver.
    #[serde(default)]
    pub intra: Option<LinkSpec>,
    /// The link between nodes and the busbw it should deliver.
    #[serde(default)]
    pub inter: Option<LinkSpec>,
    /// Explicit expectation for node-pair groups (all ranks of two nodes); derived
    /// from `inter` and `intra` when absent (see [`Topology::expectation`]).
    #[serde(default)]
    pub pairs: Option<LinkSpec>,
    /// Explicit expectation for the whole world across nodes; derived when absent.
    #[serde(default)]
    pub world: Option<LinkSpec>,
    /// How far below the expectations a tier or group may fall.
    #[serde(default)]
    pub acceptance: Acceptance,
    /// What each GPU should deliver on its own (the GPU health phase's expectations).
    #[serde(default)]
    pub gpu: Option<GpuSpec>,
}

/// A GPU's published numbers, for `burnin gpu`'s criteria that are fractions of them.
/// Each is the vendor's peak figure (cite it in the file's comments); what a copy or a
/// kernel achieves is some fraction of it, which the card's floors allow for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Peak memory bandwidth (HBM or GDDR), GB/s: reads plus writes.
    #[serde(default)]
    pub memory_gbps: Option<f64>,
    /// Peak FP32 (non-tensor) rate, TFLOP/s, at the boost clock.
    #[serde(default)]
    pub fp32_tflops: Option<f64>,
    /// PCIe generation the GPU's link should run at.
    #[serde(default)]
    pub pcie_gen: Option<u32>,
    /// PCIe link width, lanes.
    #[serde(default)]
    pub pcie_width: Option<u32>,
    /// Host↔device line rate per direction, GB/s (PCIe Gen5 x16: 64; Gen4 x16: 32).
    #[serde(default)]
    pub host_copy_gbps: Option<f64>,
    /// GPU-to-GPU peer copy rate per direction over NVLink, GB/s (None: PCIe peers).
    #[serde(default)]
    pub peer_gbps: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// GPUs per node (0 for a CPU-only simulation).
    pub gpus: usize,
    /// Substring of the CUDA device name ("H100", "H200", "L40S").
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// GPU memory per GPU in GiB (optional).
    #[serde(default)]
    pub gpu_memory_gib: Option<f64>,
    /// Ranks per node the sweep expects (default: gpus, or 1).
    #[serde(default)]
    pub ranks: Option<usize>,
    /// Node count of the reservation (optional: any count when absent).
    #[serde(default)]
    pub count: Option<usize>,
}

/// A tier's link and the busbw it should deliver.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// nvlink3 | nvlink4 | nvlink5 | pcie | shm (intra); infiniband | roce | efa | slingshot | ethernet | veth (inter).
    #[serde(default)]
    pub link: Option<String>,
    /// NVLinks per GPU (intra; optional).
    #[serde(default)]
    pub nvlinks_per_gpu: Option<u32>,
    /// NICs per node (inter).
    #[serde(default)]
    pub nics: Option<usize>,
    /// infiniband, roce, efa, slingshot, ethernet or veth (inter): the fabric criterion
    /// judges NCCL's network against it.
    #[serde(default)]
    pub nic_kind: Option<String>,
    /// Per-NIC line rate, Gbit/s.
    #[serde(default)]
    pub nic_rate_gbit: Option<f64>,
    /// Expected all_reduce busbw at large sizes, GB/s.
    #[serde(default)]
    pub all_reduce_busbw_gbps: Option<f64>,
    /// Expected all_gather busbw at large sizes, GB/s.
    #[serde(default)]
    pub all_gather_busbw_gbps: Option<f64>,
    /// Expected reduce_scatter busbw at large sizes, GB/s (default: all_gather's).
    #[serde(default)]
    pub reduce_scatter_busbw_gbps: Option<f64>,
    /// Expected alltoall busbw at large sizes, GB/s.
    #[serde(default)]
    pub alltoall_busbw_gbps: Option<f64>,
    /// This tier's own outlier fraction (instead of `[acceptance] outlier_fraction`),
    /// for a tier whose groups are known to spread more (e.g. CPU-bound shared memory).
    #[serde(default)]
    pub outlier_fraction: Option<f64>,
}

impl LinkSpec {
    /// Expected busbw for a collective, when the file gives one.
    pub fn expected(&self, kind: CollKind) -> Option<f64> {
        match kind {
            CollKind::AllReduce => self.all_reduce_busbw_gbps,
            CollKind::AllGather => self.all_gather_busbw_gbps,
            CollKind::ReduceScatter => self
                .reduce_scatter_busbw_gbps
                .or(self.all_gather_busbw_gbps),
            CollKind::AllToAll => self.alltoall_busbw_gbps,
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// A tier whose slowest group is below this fraction of its expectation fails
    /// (default 0.9).
    #[serde(default = "default_min_fraction")]
    pub min_fraction: f64,
    /// A group below this fraction of its tier's median is an outlier (default 0.8).
    #[serde(default = "default_outlier_fraction")]
    pub outlier_fraction: f64,
    /// busbw is judged at sizes ≥ this, bytes (None: the largest swept).
    #[serde(default)]
    pub large_message: Option<Bytes>,
}

fn default_min_fraction() -> f64 {
    0.9
}
fn default_outlier_fraction() -> f64 {
    0.8
}

impl Default for Acceptance {
    fn default() -> Self {
        Acceptance {
            min_fraction: default_min_fraction(),
            outlier_fraction: default_outlier_fraction(),
            large_message: None,
        }
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// Parse TOML text into `T` with an error "FILE:LINE:COL: field: problem".
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, file: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| {
        let (pos, field) = e
            .span()
            .map(|s| {
                let (l, c) = line_col(text, s.start);
                (format!("{l}:{c}"), field_at(text, l))
            })
            .unwrap_or_else(|| ("1:1".into(), None));
        let msg = e.message().trim();
        match field {
            // serde's message names a missing or unknown field itself
            Some(f) if !msg.contains(&format!("`{}`", f.rsplit('.').next().unwrap_or(&f))) => {
                anyhow!("{file}:{pos}: {f}: {msg}")
            }
            _ => anyhow!("{file}:{pos}: {msg}"),
        }
    })
}

/// "section.key" of a `key = value` line (1-based), with the nearest `[section]` above.
fn field_at(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?.trim();
    let key = this.split_once('=')?.0.trim().trim_matches(['"', '\'']);
    if key.is_empty() || key.starts_with('[') || key.starts_with('#') {
        return None;
    }
    let section = lines[..line - 1].iter().rev().find_map(|l| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[[") && l.ends_with(']'))
            .then(|| l.trim_matches(['[', ']']).trim().to_string())
    });
    Some(match section {
        Some(s) if !s.is_empty() => format!("{s}.{key}"),
        _ => key.to_string(),
    })
}

impl Topology {
    pub fn parse(text: &str, file: &str) -> Result<Topology> {
        let t: Topology = parse_toml(text, file)?;
        t.validate(file)?;
        Ok(t)
    }

    pub fn load(path: &Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("--topology: cannot read {}: {e}", path.display()))?;
        Topology::parse(&text, &path.display().to_string())
    }

    fn validate(&self, file: &str) -> Result<()> {
        let frac = |name: &str, v: f64| -> Result<()> {
            if v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(anyhow!("{file}: acceptance.{name}: {v} must be in (0, 1]"))
            }
        };
        frac("min_fraction", self.acceptance.min_fraction)?;
        frac("outlier_fraction", self.acceptance.outlier_fraction)?;
        if let Some(g) = &self.gpu {
            for (field, v) in [
                ("memory_gbps", g.memory_gbps),
                ("fp32_tflops", g.fp32_tflops),
                ("host_copy_gbps", g.host_copy_gbps),
                ("peer_gbps", g.peer_gbps),
            ] {
                if v.is_some_and(|v| !(v > 0.0 && v.is_finite())) {
                    return Err(anyhow!("{file}: gpu.{field}: must be a positive number"));
                }
            }
            if g.pcie_gen.is_some_and(|v| !(1..=7).contains(&v)) {
                return Err(anyhow!("{file}: gpu.pcie_gen: must be 1 to 7"));
            }
            if g.pcie_width
                .is_some_and(|v| ![1, 2, 4, 8, 16, 32].contains(&v))
            {
                return Err(anyhow!(
                    "{file}: gpu.pcie_width: must be 1, 2, 4, 8, 16 or 32"
                ));
            }
        }
        for (tier, spec) in [
            ("intra", &self.intra),
            ("inter", &self.inter),
            ("pairs", &self.pairs),
            ("world", &self.world),
        ] {
            if let Some(s) = spec {
                if let Some(v) = s.outlier_fraction {
                    if !(v > 0.0 && v <= 1.0) {
                        return Err(anyhow!(
                            "{file}: {tier}.outlier_fraction: {v} must be in (0, 1]"
                        ));
                    }
                }
                for (field, v) in [
                    ("all_reduce_busbw_gbps", s.all_reduce_busbw_gbps),
                    ("all_gather_busbw_gbps", s.all_gather_busbw_gbps),
                    ("reduce_scatter_busbw_gbps", s.reduce_scatter_busbw_gbps),
                    ("alltoall_busbw_gbps", s.alltoall_busbw_gbps),
                    ("nic_rate_gbit", s.nic_rate_gbit),
                ] {
                    if let Some(v) = v {
                        if !(v > 0.0 && v.is_finite()) {
                            return Err(anyhow!(
                                "{file}: {tier}.{field}: {v} must be a positive number"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The outlier fraction a tier's own section sets (`inter` covers rails).
    pub fn tier_outlier_fraction(&self, tier: &str) -> Option<f64> {
        let spec = match tier {
            "intra" => &self.intra,
            "inter" | "rails" => &self.inter,
            "pairs" => &self.pairs,
            "world" => &self.world,
            _ => return None,
        };
        spec.as_ref().and_then(|s| s.outlier_fraction)
    }

    /// Ranks per node the file expects.
    pub fn ranks_per_node(&self) -> usize {
        self.node.ranks.unwrap_or(self.node.gpus.max(1))
    }

    /// Expected busbw (GB/s) of a group of `ranks` ranks on `nodes` nodes in `tier`.
    ///
    /// - intra: the file's `[intra]`; inter and rails (one rank per node): `[inter]`;
    /// - pairs and world: their own section when the file has one; else, across
    ///   nodes, the relation per-NIC rate = busbw·(k−1)/(n−1) turned
    ///   around — `inter`·(n−1)/(k−1) — capped by the intra-node expectation; on one
    ///   node, `[intra]`.
    pub fn expectation(
        &self,
        tier: &str,
        kind: CollKind,
        ranks: usize,
        nodes: usize,
    ) -> Option<f64> {
        let intra = self.intra.as_ref().and_then(|s| s.expected(kind));
        let inter = self.inter.as_ref().and_then(|s| s.expected(kind));
        let derived = || -> Option<f64> {
            if nodes <= 1 {
                return intra;
            }
            let scaled = inter? * (ranks.saturating_sub(1)) as f64 / (nodes - 1) as f64;
            Some(intra.map_or(scaled, |i| scaled.min(i)))
        };
        match tier {
            "intra" => intra,
            "inter" | "rails" => inter,
            "pairs" => self
                .pairs
                .as_ref()
                .and_then(|s| s.expected(kind))
                .or_else(derived),
            "world" => self
                .world
                .as_ref()
                .and_then(|s| s.expected(kind))
                .or_else(derived),
            _ => None,
        }
    }
}

impl Topology {
    /// Load the topology file on rank 0 and share it (the file may exist only on the
    /// launch host); a bad file is an agreed error naming file, line and field.
    pub fn load_shared(
        world: &crate::world::World,
        path: Option<&Path>,
    ) -> Result<Option<Topology>> {
        let Some(path) = path else { return Ok(None) };
        let mine: std::result::Result<Topology, String> = if world.rank == 0 {
            Topology::load(path).map_err(|e| format!("{e:#}"))
        } else {
            Err(String::new())
        };
        match world.broadcast_json(Some(&mine))? {
            Ok(t) => Ok(Some(t)),
            Err(e) => anyhow::bail!(crate::error::Agreed(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_topologies_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let t = Topology::load(&p).unwrap_or_else(|e| panic!("{e:#}"));
                assert!(!t.name.is_empty());
                n += 1;
            }
        }
        assert!(n >= 5, "the five shipped topologies");
    }

    #[test]
    fn expectations_per_tier() {
        let t =
            Topology::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/dgx-h100.toml"))
                .unwrap();
        assert_eq!(
            t.expectation("intra", CollKind::AllReduce, 8, 1),
            Some(460.0)
        );
        assert_eq!(
            t.expectation("inter", CollKind::AllReduce, 4, 4),
            Some(46.0)
        );
        assert_eq!(
            t.expectation("rails", CollKind::AllGather, 4, 4),
            Some(46.0)
        );
        // 2 nodes x 8 GPUs: 46 * 15 / 1 = 690, capped by NVLink's 460.
        assert_eq!(
            t.expectation("pairs", CollKind::AllReduce, 16, 2),
            Some(460.0)
        );
        // 16 nodes x 8: 46 * 127 / 15 = 389.5
        let w = t
            .expectation("world", CollKind::AllReduce, 128, 16)
            .unwrap();
        assert!((w - 46.0 * 127.0 / 15.0).abs() < 1e-9);
        assert_eq!(t.expectation("world", CollKind::Broadcast, 128, 16), None);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let text = "name = \"x\"\n[node]\ngpus = 8\n[intra]\nall_reduce_busbw_gbps = \"fast\"\n";
        let e = format!("{:#}", Topology::parse(text, "t.toml").unwrap_err());
        assert!(e.starts_with("t.toml:5:"), "{e}");
        assert!(
            e.contains("intra.all_reduce_busbw_gbps: invalid type"),
            "{e}"
        );
        let text = "name = \"x\"\n[node]\ngpus = 8\ngpu_modle = \"H100\"\n";
        let e = format!("{:#}", Topology::parse(text, "t.toml").unwrap_err());
        assert!(e.starts_with("t.toml:4:") && e.contains("gpu_modle"), "{e}");
        let text = "name = \"x\"\n[node]\ngpus = 8\n[acceptance]\nmin_fraction = 2.0\n";
        let e = format!("{:#}", Topology::parse(text, "t.toml").unwrap_err());
        assert!(e.contains("acceptance.min_fraction"), "{e}");
        let e = format!(
            "{:#}",
            Topology::parse("name = \"x\"\n", "t.toml").unwrap_err()
        );
        assert!(e.contains("missing field `node`"), "{e}");
    }
}
