//! Test-only hooks of `burnin sweep` (hidden flags, never in a card): make one rank's
//! result wrong at a chosen element (`--corrupt-rank`, `--corrupt-at`), or make one
//! rank's collective call differ from the other ranks' (`--mismatch RANK:WHAT`) — on
//! NCCL, and on the GPU twin, such a call never completes, and burnin's watchdog must
//! be what names it.
use crate::backend::Call;
use crate::error::usage;
use crate::kinds::{Dtype, RedOp};
use anyhow::Result;

/// What this rank does wrong on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Write one wrong value into the result before the check, at this element.
    pub corrupt: Option<At>,
    /// Call the collective with this parameter changed.
    pub mismatch: Option<Mismatch>,
}

/// Which element of the checked result a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    First,
    Middle,
    Last,
    /// A SplitMix64 draw from the seed and the point (the same on every run).
    Random(u64),
}

impl At {
    /// `first`, `middle`, `last`, `random` or `random:SEED`.
    pub fn parse(s: &str) -> Result<At> {
        Ok(match s {
            "first" => At::First,
            "middle" => At::Middle,
            "last" => At::Last,
            "random" => At::Random(0),
            _ => match s.strip_prefix("random:").map(str::parse::<u64>) {
                Some(Ok(seed)) => At::Random(seed),
                _ => {
                    return Err(usage(
                        "--corrupt-at",
                        format!("{s:?}: expected first, middle, last, random or random:SEED"),
                    ))
                }
            },
        })
    }

    /// The element among `total` (> 0); `salt` tells points apart.
    pub fn index(self, total: usize, salt: u64) -> usize {
        match self {
            At::First => 0,
            At::Middle => total / 2,
            At::Last => total - 1,
            At::Random(seed) => {
                (crate::fault::SplitMix64(seed ^ salt).next_u64() % total as u64) as usize
            }
        }
    }
}

/// The parameter a mismatched call changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// One element fewer.
    Count,
    /// Another type of the same size (f32↔i32, f16↔bf16; f64 and u8 become f32).
    Dtype,
    /// max for sum, sum for the others.
    Op,
    /// The next rank as root.
    Root,
}

impl Mismatch {
    /// `RANK:count|dtype|op|root`: the rank and what it changes.
    pub fn parse(s: &str) -> Result<(usize, Mismatch)> {
        let bad = || {
            usage(
                "--mismatch",
                format!("{s:?}: expected RANK:count, RANK:dtype, RANK:op or RANK:root"),
            )
        };
        let (rank, what) = s.split_once(':').ok_or_else(bad)?;
        let rank = rank.parse().map_err(|_| bad())?;
        let what = match what {
            "count" => Mismatch::Count,
            "dtype" => Mismatch::Dtype,
            "op" => Mismatch::Op,
            "root" => Mismatch::Root,
            _ => return Err(bad()),
        };
        Ok((rank, what))
    }

    /// Change `call` (of an `n`-rank group) as this mismatch says.
    pub fn apply(self, call: &mut Call, n: usize) {
        match self {
            Mismatch::Count => call.count = call.count.saturating_sub(1),
            Mismatch::Dtype => {
                call.dtype = match call.dtype {
                    Dtype::F32 => Dtype::I32,
                    Dtype::F16 => Dtype::Bf16,
                    Dtype::Bf16 => Dtype::F16,
                    _ => Dtype::F32,
                }
            }
            Mismatch::Op => {
                call.op = if call.op == RedOp::Sum {
                    RedOp::Max
                } else {
                    RedOp::Sum
                }
            }
            Mismatch::Root => call.root = (call.root + 1) % n.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::CollKind;

    #[test]
    fn positions_are_first_middle_last_or_a_seeded_draw() {
        assert_eq!(At::parse("first").unwrap().index(10, 0), 0);
        assert_eq!(At::parse("middle").unwrap().index(10, 0), 5);
        assert_eq!(At::parse("last").unwrap().index(10, 0), 9);
        let r = At::parse("random:7").unwrap();
        assert_eq!(r, At::Random(7));
        assert_eq!(r.index(1000, 3), r.index(1000, 3));
        let draws: std::collections::BTreeSet<usize> = (0..64).map(|s| r.index(1000, s)).collect();
        assert!(
            draws.len() > 50 && draws.iter().all(|&i| i < 1000),
            "{draws:?}"
        );
        let e = At::parse("end").unwrap_err().to_string();
        assert!(e.contains("--corrupt-at: \"end\""), "{e}");
    }

    #[test]
    fn a_mismatch_changes_exactly_its_parameter() {
        let base = Call {
            kind: CollKind::Broadcast,
            dtype: Dtype::F16,
            op: RedOp::Sum,
            root: 2,
            count: 100,
            in_place: false,
        };
        let with = |s: &str| {
            let (rank, m) = Mismatch::parse(s).unwrap();
            let mut c = base;
            m.apply(&mut c, 3);
            (rank, c)
        };
        assert_eq!(with("1:count"), (1, Call { count: 99, ..base }));
        assert_eq!(
            with("0:dtype"),
            (
                0,
                Call {
                    dtype: Dtype::Bf16,
                    ..base
                }
            )
        );
        assert_eq!(
            with("2:op"),
            (
                2,
                Call {
                    op: RedOp::Max,
                    ..base
                }
            )
        );
        assert_eq!(with("1:root"), (1, Call { root: 0, ..base }));
        for bad in ["1", "x:count", "1:size"] {
            assert!(Mismatch::parse(bad).is_err(), "{bad}");
        }
    }
}
