//! Floors per GPU model for `burnin gpu` (`cards/floors/gpu-floors.toml`, built in): a GPU
//! of a known model whose device memory bandwidth, FP32 burn or host copies fall below a
//! fraction of NVIDIA's published peak fails `gpu.model_floors`, naming the floor and
//! where its number comes from. The file says why each fraction is what it is.
use serde::Deserialize;

/// The table as shipped.
pub const BUILT_IN: &str = include_str!("../../cards/floors/gpu-floors.toml");

/// What fraction of each peak a healthy GPU reaches at least.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fractions {
    pub memory: f64,
    pub fp32: f64,
    pub host_copy: f64,
}

/// One GPU model's published peaks.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    /// Substrings of the CUDA device name that mean this model.
    #[serde(rename = "match")]
    pub matches: Vec<String>,
    /// Peak memory bandwidth, GB/s (reads plus writes).
    pub memory_gbps: f64,
    /// Peak FP32 (non-tensor) rate, TFLOP/s.
    pub fp32_tflops: f64,
    /// Dense BF16 tensor-core peak, TFLOP/s (kept for the tensor-core burn).
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    /// Dense FP8 tensor-core peak, TFLOP/s.
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    pub max_power_w: f64,
    /// Where the peaks come from.
    pub source: String,
}

/// The floors table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Table {
    pub fractions: Fractions,
    #[serde(rename = "model")]
    pub models: Vec<Model>,
}

impl Table {
    /// The built-in table.
    pub fn built_in() -> Result<Table, String> {
        toml::from_str(BUILT_IN).map_err(|e| format!("cards/floors/gpu-floors.toml: {e}"))
    }

    /// The model a CUDA device name is (the first whose substring it holds).
    pub fn find(&self, device: &str) -> Option<&Model> {
        self.models
            .iter()
            .find(|m| m.matches.iter().any(|s| device.contains(s.as_str())))
    }

    /// The models' names, for a message.
    pub fn names(&self) -> String {
        let v: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
        v.join(", ")
    }
}

/// A PCIe link's line rate per direction, GB/s (8b/10b to Gen2, 128b/130b from Gen3;
/// Gen6's FLIT mode taken as Gen5's encoding at twice the rate).
pub fn pcie_line_gbps(gen: u32, width: u32) -> Option<f64> {
    let (gt, enc) = match gen {
        1 => (2.5, 0.8),
        2 => (5.0, 0.8),
        3 => (8.0, 128.0 / 130.0),
        4 => (16.0, 128.0 / 130.0),
        5 => (32.0, 128.0 / 130.0),
        6 => (64.0, 128.0 / 130.0),
        _ => return None,
    };
    Some(gt * enc * f64::from(width) / 8.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_table_reads_and_finds_each_model_by_its_cuda_name() {
        let t = Table::built_in().unwrap();
        assert_eq!(t.fractions.memory, 0.65);
        for (device, model) in [
            ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA H100 NVL", "H100 NVL"),
            ("NVIDIA H200", "H200 SXM"),
            ("NVIDIA H200 NVL", "H200 NVL"),
            ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
            ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
            ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA B200", "B200"),
        ] {
            assert_eq!(
                t.find(device).map(|m| m.name.as_str()),
                Some(model),
                "{device}"
            );
        }
        assert!(t.find("NVIDIA GeForce RTX 4090").is_none());
        for m in &t.models {
            assert!(m.source.contains("https://"), "{}: a source", m.name);
            assert!(m.memory_gbps > 0.0 && m.fp32_tflops > 0.0);
        }
    }

    #[test]
    fn pcie_line_rates() {
        assert!((pcie_line_gbps(5, 16).unwrap() - 63.015).abs() < 0.01);
        assert!((pcie_line_gbps(4, 16).unwrap() - 31.508).abs() < 0.01);
        assert_eq!(pcie_line_gbps(7, 16), None);
    }
}
