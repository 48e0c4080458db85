//! The vocabulary every layer shares: collective kinds, element types, reductions,
//! topology tiers and the node map. A leaf: it imports nothing of burnin, so the
//! backends, the workloads, the results model and the report all name the same types
//! without reaching into one another.
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element types. Names follow Rust; nccl-tests' names parse too.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F64,
    F16,
    Bf16,
    I32,
    U8,
}

impl Dtype {
    pub const ALL: [Dtype; 6] = [
        Dtype::F32,
        Dtype::F64,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::I32,
        Dtype::U8,
    ];
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F64 => 8,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::U8 => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I32 => "i32",
            Dtype::U8 => "u8",
        }
    }
    /// nccl-tests' column name.
    pub fn nccl_name(self) -> &'static str {
        match self {
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::F16 => "half",
            Dtype::Bf16 => "bfloat16",
            Dtype::I32 => "int32",
            Dtype::U8 => "uint8",
        }
    }
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" => Dtype::F32,
            "f64" | "double" | "float64" => Dtype::F64,
            "f16" | "half" | "float16" => Dtype::F16,
            "bf16" | "bfloat16" => Dtype::Bf16,
            "i32" | "int" | "int32" => Dtype::I32,
            "u8" | "uint8" => Dtype::U8,
            _ => return None,
        })
    }
    pub fn is_float(self) -> bool {
        !matches!(self, Dtype::I32 | Dtype::U8)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operations.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl RedOp {
    pub const ALL: [RedOp; 5] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
            RedOp::Avg => "avg",
        }
    }
    pub fn parse(s: &str) -> Option<RedOp> {
        RedOp::ALL
            .into_iter()
            .find(|o| o.name() == s.trim().to_ascii_lowercase())
    }
}

/// The collective table: one line per collective. `kind` is its [`CollKind`] variant
/// and the name of its type in `src/collective/<file>.rs` (which says its sizes, data,
/// expected result and launch); `name` is how tables, JSON and `-c` name it.
/// [`CollKind`] is made from this list here, `collective::get` in `collective`; adding
/// a collective is its file and one line here (docs/ARCHITECTURE.md walks through it).
macro_rules! collective_table {
    ($make:ident) => {
        $make! {
        //  kind           file            name              reduces  rooted
            AllReduce      all_reduce      "all_reduce"      true     false,
            AllGather      all_gather      "all_gather"      false    false,
            ReduceScatter  reduce_scatter  "reduce_scatter"  true     false,
            Broadcast      broadcast       "broadcast"       false    true,
            Reduce         reduce          "reduce"          true     true,
            AllToAll       alltoall        "alltoall"        false    false,
            SendRecv       sendrecv        "sendrecv"        false    false,
        }
    };
}
pub(crate) use collective_table;

/// [`CollKind`] from the lines of [`collective_table`].
macro_rules! coll_kinds {
    ($($kind:ident $file:ident $name:literal $reduces:literal $rooted:literal,)*) => {
        /// The collectives burnin measures (nccl-tests' set), in the table's order.
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
            schemars::JsonSchema,
        )]
        pub enum CollKind {
            $(#[serde(rename = $name)] $kind,)*
        }

        impl CollKind {
            pub const ALL: [CollKind; [$($name),*].len()] = [$(CollKind::$kind),*];
            pub fn name(self) -> &'static str {
                match self {
                    $(CollKind::$kind => $name,)*
                }
            }
            /// Whether the collective applies a reduction operation.
            pub fn reduces(self) -> bool {
                match self {
                    $(CollKind::$kind => $reduces,)*
                }
            }
            /// Whether the collective has a root rank.
            pub fn rooted(self) -> bool {
                match self {
                    $(CollKind::$kind => $rooted,)*
                }
            }
        }
    };
}
collective_table!(coll_kinds);

impl CollKind {
    pub fn parse(s: &str) -> Option<CollKind> {
        let t = s.trim().to_ascii_lowercase().replace('-', "_");
        let t = t.strip_suffix("_perf").unwrap_or(&t);
        CollKind::ALL
            .into_iter()
            .find(|k| k.name() == t || k.name().replace('_', "") == t)
    }
}

impl fmt::Display for CollKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A topology tier: which ranks a sweep measures together.
/// Ordered as listed (reports show tiers in this order).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TierKind {
    #[default]
    World,
    Intra,
    Inter,
    Rails,
    Pairs,
    /// `--find-slow`: the groups of the bisection search (`topology::bisect`), planned
    /// round by round from the last one's results; not one of `--tiers`.
    Bisect,
    /// `--fabric-map`: the groups of the fabric map's rounds (`sweep::fabric_map`);
    /// not one of `--tiers`.
    Map,
}

impl TierKind {
    pub const ALL: [TierKind; 5] = [
        TierKind::World,
        TierKind::Intra,
        TierKind::Inter,
        TierKind::Rails,
        TierKind::Pairs,
    ];
    pub fn name(self) -> &'static str {
        match self {
            TierKind::World => "world",
            TierKind::Intra => "intra",
            TierKind::Inter => "inter",
            TierKind::Rails => "rails",
            TierKind::Pairs => "pairs",
            TierKind::Bisect => "bisect",
            TierKind::Map => "map",
        }
    }
    pub fn parse(s: &str) -> Option<TierKind> {
        let t = s.trim().to_ascii_lowercase();
        let t = match t.as_str() {
            "rail" => "rails",
            "pair" => "pairs",
            other => other,
        };
        TierKind::ALL.into_iter().find(|k| k.name() == t)
    }
}

impl fmt::Display for TierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // pad: tables align tier names with `{:<6}`, as they did the names' strings
        f.pad(self.name())
    }
}

/// One node of the job: its name and the world ranks on it, in local-rank order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Node {
    /// Position of the node in the job (by lowest world rank).
    pub index: usize,
    /// Hostname of the node (as its first rank reports it).
    pub host: String,
    /// World ranks on this node; position in the list is the local rank.
    pub ranks: Vec<usize>,
}

/// `--grow`: which communicators grow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grow {
    /// Those whose ranks span more than one host in the trace, and the world.
    Auto,
    /// These communicator ids.
    Ids(Vec<String>),
}

impl Grow {
    pub fn parse(s: &str) -> Result<Grow, String> {
        let s = s.trim();
        if s == "auto" {
            return Ok(Grow::Auto);
        }
        let ids: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect();
        if ids.is_empty() {
            return Err(format!(
                "--grow: '{s}': give auto or communicator ids, comma-separated"
            ));
        }
        Ok(Grow::Ids(ids))
    }
}
