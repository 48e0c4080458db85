//! The judgement of a sweep's tiers (run.json's `analysis`): per-tier and per-group
//! busbw against the median and the topology's expectation, the node-pair matrix and
//! the findings. Computed by `sweep::analysis::analyze`.
use crate::kinds::{CollKind, Dtype, RedOp, TierKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One group's number in a tier.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct GroupResult {
    /// Group index within the tier.
    pub group: usize,
    /// Group name: "world", "node3", "rail 1", "node0+node3".
    pub label: String,
    /// World ranks in the group.
    pub members: Vec<usize>,
    /// Hosts of the group, deduplicated, in member order.
    pub hosts: Vec<String>,
    /// Best busbw at large messages (GB/s).
    pub busbw_gbps: f64,
    /// Message size that busbw was measured at.
    pub bytes: u64,
    /// busbw / the tier's median.
    pub vs_median: f64,
    /// busbw below the tier's outlier fraction × the median (with two groups: × the
    /// faster one's).
    pub outlier: bool,
}

/// A tier's verdict for one (collective, type, op).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct TierResult {
    /// The topology tier.
    pub tier: TierKind,
    /// The collective judged.
    pub collective: CollKind,
    /// Its element type.
    pub dtype: Dtype,
    /// Its reduction op (None for data-movement collectives).
    pub op: Option<RedOp>,
    /// Whether the points judged were in-place.
    pub in_place: bool,
    /// Every group of the tier, with its busbw.
    pub groups: Vec<GroupResult>,
    /// Median of the groups' busbw (GB/s).
    pub median_gbps: f64,
    /// Expected busbw from the topology file (per group), if it gives one.
    pub expected_gbps: Option<f64>,
    /// The fraction of the expected busbw the worst group must reach.
    pub min_fraction: f64,
    /// Worst group busbw / expected.
    pub worst_vs_expected: Option<f64>,
    /// Worst group busbw / expected ≥ `min_fraction` (None: no expectation).
    pub meets_expectation: Option<bool>,
}

impl TierResult {
    /// The group with the lowest busbw (the first of equals).
    pub fn slowest_group(&self) -> Option<&GroupResult> {
        self.groups
            .iter()
            .min_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps))
    }

    /// The cells every tier table starts with: tier, collective, groups, median
    /// busbw, the slowest group's busbw and label, the expected busbw (GB/s to three
    /// places; "-" where the topology gives none).
    pub fn table_cells(&self) -> Vec<String> {
        let slowest = self.slowest_group();
        vec![
            self.tier.to_string(),
            self.collective.name().to_string(),
            self.groups.len().to_string(),
            format!("{:.3}", self.median_gbps),
            slowest
                .map(|g| format!("{:.3}", g.busbw_gbps))
                .unwrap_or_default(),
            slowest.map(|g| g.label.clone()).unwrap_or_default(),
            self.expected_gbps
                .map(|e| format!("{e:.3}"))
                .unwrap_or_else(|| "-".into()),
        ]
    }
}

/// busbw between every pair of nodes at the largest size (GB/s).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct PairMatrix {
    /// The collective measured.
    pub collective: CollKind,
    /// Message size the matrix is at (the largest of its pairs).
    pub bytes: u64,
    /// Host names, in the order of the matrix's rows and columns.
    pub nodes: Vec<String>,
    /// busbw of each node pair (GB/s), symmetric; None where the pair was not measured.
    pub busbw_gbps: Vec<Vec<Option<f64>>>,
}

/// One class of node pairs of the pairs tier, judged among themselves.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct PairClass {
    /// The collective judged.
    pub collective: CollKind,
    /// "inside one switch", or "across switches, busiest uplink shared 4 ways".
    pub class: String,
    /// Pairs in the class.
    pub pairs: usize,
    /// Their median busbw (GB/s).
    pub median_gbps: f64,
    /// What each pair was judged against (GB/s): the class median, or with a
    /// declared oversubscription the rate the declared uplinks allow the pair (the
    /// class's median of those).
    pub reference_gbps: f64,
    /// "class median" or "declared oversubscription".
    pub reference: String,
    /// The slowest pair's busbw over its reference.
    pub slowest_vs_reference: f64,
    /// A pair below this fraction of its reference is slow: the smallest slowdown the
    /// class can see.
    pub threshold: f64,
}

/// One line of the verdict.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Finding {
    /// "fail" makes the run fail; "info" does not.
    pub severity: String,
    /// What to suspect: a node ("node3"), a pair ("node0+node2"), a rail, a tier.
    pub subject: String,
    /// The finding, in words.
    pub text: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default, JsonSchema)]
pub struct Analysis {
    /// One verdict per (tier, collective, type, op) measured.
    pub tiers: Vec<TierResult>,
    /// The node-pair busbw matrices (pairs tier only).
    pub pair_matrices: Vec<PairMatrix>,
    /// Every finding, in tier order.
    pub findings: Vec<Finding>,
    /// Nodes named as outliers.
    pub outlier_nodes: Vec<String>,
    /// With a fabric (`--fabric`): how the pairs tier judged each class of pairs the
    /// fabric lets run alike (inside one switch; across switches, by how many of its
    /// round's pairs shared the busiest uplink of its path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pair_classes: Vec<PairClass>,
    /// No finding of severity fail.
    pub pass: bool,
}
