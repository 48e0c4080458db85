//! The judgement of a sweep's tiers (run.json's `analysis`): per-tier and per-group
//! busbw against the median and the topology's expectation, the node-pair matrix and
//! the findings. Computed by `sweep::analysis::analyze`.
use crate::kinds::{CollKind, Dtype, RedOp, TierKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One group's number in a tier.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct GroupResult {
    pub group: usize,
    pub label: String,
    pub members: Vec<usize>,
    pub hosts: Vec<String>,
    /// Best busbw at large messages (GB/s).
    pub busbw_gbps: f64,
    /// Message size that busbw was measured at.
    pub bytes: u64,
    /// busbw / the tier's median.
    pub vs_median: f64,
    pub outlier: bool,
}

/// A tier's verdict for one (collective, type, op).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct TierResult {
    pub tier: TierKind,
    pub collective: CollKind,
    pub dtype: Dtype,
    pub op: Option<RedOp>,
    pub in_place: bool,
    pub groups: Vec<GroupResult>,
    pub median_gbps: f64,
    /// Expected busbw from the topology file (per group), if it gives one.
    pub expected_gbps: Option<f64>,
    pub min_fraction: f64,
    /// Worst group busbw / expected.
    pub worst_vs_expected: Option<f64>,
    pub meets_expectation: Option<bool>,
}

/// busbw between every pair of nodes at the largest size (GB/s).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct PairMatrix {
    pub collective: CollKind,
    pub bytes: u64,
    pub nodes: Vec<String>,
    pub busbw_gbps: Vec<Vec<Option<f64>>>,
}

/// One line of the verdict.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Finding {
    /// "fail" makes the run fail; "info" does not.
    pub severity: String,
    /// What to suspect: a node ("node3"), a pair ("node0+node2"), a rail, a tier.
    pub subject: String,
    pub text: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, JsonSchema)]
pub struct Analysis {
    pub tiers: Vec<TierResult>,
    pub pair_matrices: Vec<PairMatrix>,
    pub findings: Vec<Finding>,
    /// Nodes named as outliers.
    pub outlier_nodes: Vec<String>,
    pub pass: bool,
}
