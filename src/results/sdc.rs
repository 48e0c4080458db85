//! Silent data corruption found by voting: every rank computes the same deterministic
//! workload each round, hashes its outputs per kind and per block, and the hashes of
//! ranks with the same processor model are compared. A rank whose hash differs from
//! the one a strict majority of its model's ranks holds is named; where no hash has a
//! strict majority (two ranks that differ, or three that all differ) every rank of the
//! model is named and the finding says "no majority". Pure: the rounds are run by
//! `health::sdc`, the vote and the records are here.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Blocks each kind's output is split into; a disagreement is located to one.
pub const BLOCKS: usize = 16;

/// What one rank computes with (its vote group is the model).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SdcRank {
    /// World rank.
    pub rank: usize,
    /// Its host.
    pub host: String,
    /// GPU index on the host (visible ordinal), null on a CPU rank.
    pub gpu: Option<usize>,
    /// PCI bus id of the GPU, empty on a CPU rank.
    #[serde(default)]
    pub pci_bus_id: String,
    /// The GPU's UUID, empty on a CPU rank.
    #[serde(default)]
    pub uuid: String,
    /// The processor model the rank votes with: the GPU's name, or "CPU <model>".
    pub model: String,
    /// Kinds this rank computed each round, in the hash order.
    pub kinds: Vec<String>,
    /// Rounds in which this rank was named (in the minority, or in a group without a
    /// majority).
    pub disagreements: u32,
    /// GPU ranks: whether the first round agreed with the host — fma (its first
    /// [`HOST_CHECKED`] elements) and reduce bit for bit, the tensor-core gemm within
    /// a bound (see `host_checks`) — a check that needs no other GPU; null on CPU
    /// ranks or when the round did not run.
    #[serde(default)]
    pub host_check: Option<bool>,
    /// GPU ranks: one note per kind compared with the host in the first round ("fma:
    /// equal to the host bit for bit", "gemm: within …", or what differed), and why
    /// a kind did not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_checks: Vec<String>,
    /// GPU ranks: how its GPU failed (the first error), when it did; from that round
    /// on its outputs did not vote (they are not the GPU's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_lost: Option<String>,
    /// Rounds it did not vote in because its GPU had failed.
    #[serde(default)]
    pub rounds_lost: u64,
}

/// Elements of the first round's fma output a GPU rank compares with the host.
pub const HOST_CHECKED: usize = 65_536;

/// One located disagreement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SdcFinding {
    /// Round number (its inputs are a function of it: `--sdc-start ROUND
    /// --sdc-rounds 1` computes it again on any GPU).
    pub round: u64,
    /// Workload kind: fma, memory, gemm, reduce.
    pub kind: String,
    /// Block of the kind's output, 0..BLOCKS.
    pub block: usize,
    /// The model whose ranks voted.
    pub model: String,
    /// Ranks named: the minority, or with `majority` false every rank of the model.
    pub ranks: Vec<usize>,
    /// Whether a strict majority of the model's ranks agreed.
    pub majority: bool,
    /// Ranks in the model's vote.
    pub voters: usize,
    /// Seconds since the phase began on rank 0 when the round began.
    pub t_s: f64,
    /// The first named rank's GPU temperature nearest that time, °C (NVML).
    pub temp_c: Option<u32>,
    /// The first named rank's SM clock nearest that time, MHz (NVML).
    pub sm_mhz: Option<u32>,
}

/// The SDC rounds of a `burnin gpu --sdc` run (rank 0's view).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SdcReport {
    /// Seconds asked for (`--sdc`).
    pub seconds_asked: f64,
    /// Seconds the rounds took.
    pub seconds: f64,
    /// First round number (`--sdc-start`).
    pub first_round: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Median seconds of one round (compute, hashing and the exchange of hashes).
    pub round_s_median: f64,
    /// Output bytes of each kind per round.
    pub bytes_per_kind: u64,
    /// Every rank, in rank order.
    pub ranks: Vec<SdcRank>,
    /// Disagreements, in round order (at most [`MAX_FINDINGS`] kept; `findings_total`
    /// counts them all).
    pub findings: Vec<SdcFinding>,
    /// Every disagreement found, kept or not.
    pub findings_total: u64,
    /// Why the rounds stopped early or did not run.
    pub error: Option<String>,
}

/// Findings kept in the record (a GPU wrong in every round would fill it).
pub const MAX_FINDINGS: usize = 200;

/// One rank's hashes for one round: kinds × [`BLOCKS`], kind-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ballot<'a> {
    pub rank: usize,
    pub model: &'a str,
    pub kinds: &'a [String],
    pub hashes: &'a [u64],
}

/// The vote of one round: for every model, kind and block, the ranks that disagree.
/// Ranks alone with their model (or the only ones computing a kind) cannot be
/// checked and are never named.
pub fn vote(round: u64, t_s: f64, ballots: &[Ballot]) -> Vec<SdcFinding> {
    let mut models: Vec<&str> = ballots.iter().map(|b| b.model).collect();
    models.sort_unstable();
    models.dedup();
    let mut out = Vec::new();
    for model in models {
        let group: Vec<&Ballot> = ballots.iter().filter(|b| b.model == model).collect();
        let mut kinds: Vec<&String> = group.iter().flat_map(|b| b.kinds.iter()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            // (rank, this kind's hashes) of the ranks that computed it
            let voters: Vec<(usize, &[u64])> = group
                .iter()
                .filter_map(|b| {
                    let k = b.kinds.iter().position(|x| x == kind)?;
                    let h = b.hashes.get(k * BLOCKS..(k + 1) * BLOCKS)?;
                    Some((b.rank, h))
                })
                .collect();
            if voters.len() < 2 {
                continue;
            }
            for block in 0..BLOCKS {
                if let Some(f) = vote_block(&voters, block) {
                    out.push(SdcFinding {
                        round,
                        kind: kind.clone(),
                        block,
                        model: model.to_string(),
                        ranks: f.0,
                        majority: f.1,
                        voters: voters.len(),
                        t_s,
                        temp_c: None,
                        sm_mhz: None,
                    });
                }
            }
        }
    }
    out
}

/// The ranks to name for one block (None: all agree), and whether a majority held.
fn vote_block(voters: &[(usize, &[u64])], block: usize) -> Option<(Vec<usize>, bool)> {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for (_, h) in voters {
        match counts.iter_mut().find(|(x, _)| *x == h[block]) {
            Some(c) => c.1 += 1,
            None => counts.push((h[block], 1)),
        }
    }
    if counts.len() == 1 {
        return None;
    }
    let n = voters.len();
    match counts.iter().find(|(_, c)| 2 * c > n) {
        Some(&(winner, _)) => Some((
            voters
                .iter()
                .filter(|(_, h)| h[block] != winner)
                .map(|(r, _)| *r)
                .collect(),
            true,
        )),
        None => Some((voters.iter().map(|(r, _)| *r).collect(), false)),
    }
}

/// One line per finding for people: who, what, when.
pub fn describe(f: &SdcFinding, ranks: &[SdcRank]) -> String {
    let who: Vec<String> = f
        .ranks
        .iter()
        .map(|r| match ranks.get(*r) {
            Some(x) => name(x),
            None => format!("rank {r}"),
        })
        .collect();
    let heat = match (f.temp_c, f.sm_mhz) {
        (Some(t), Some(c)) => format!(" at {t} °C, SM {c} MHz"),
        (Some(t), None) => format!(" at {t} °C"),
        _ => String::new(),
    };
    if f.majority {
        format!(
            "round {} {} block {}: {} disagree(s) with the other {} {} rank(s){heat}",
            f.round,
            f.kind,
            f.block,
            who.join(", "),
            f.voters - f.ranks.len(),
            f.model
        )
    } else {
        format!(
            "round {} {} block {}: disagree, no majority among {} {} rank(s): {}{heat}",
            f.round,
            f.kind,
            f.block,
            f.voters,
            f.model,
            who.join(", ")
        )
    }
}

/// "host GPU i (PCI …, UUID)" or "host rank r (CPU)".
pub fn name(r: &SdcRank) -> String {
    match r.gpu {
        Some(g) => format!(
            "{} GPU {} (rank {}, PCI {}{}{})",
            r.host,
            g,
            r.rank,
            r.pci_bus_id,
            if r.uuid.is_empty() { "" } else { ", " },
            r.uuid
        ),
        None => format!("{} rank {} (CPU)", r.host, r.rank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> Vec<String> {
        vec!["fma".into(), "memory".into()]
    }

    fn hashes(seed: u64) -> Vec<u64> {
        (0..2 * BLOCKS as u64).map(|i| seed * 1000 + i).collect()
    }

    #[test]
    fn one_wrong_block_of_four_ranks_names_that_rank_kind_and_block() {
        let k = kinds();
        let good = hashes(1);
        let mut bad = good.clone();
        bad[BLOCKS + 5] ^= 1; // memory, block 5
        let b: Vec<Ballot> = (0..4)
            .map(|r| Ballot {
                rank: r,
                model: "H200",
                kinds: &k,
                hashes: if r == 2 { &bad } else { &good },
            })
            .collect();
        let f = vote(7, 1.5, &b);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].round, f[0].kind.as_str(), f[0].block, &f[0].ranks[..]),
            (7, "memory", 5, &[2usize][..])
        );
        assert!(f[0].majority);
        assert_eq!(f[0].voters, 4);
        assert_eq!(f[0].t_s, 1.5);
        // agreeing ranks: nothing
        let all_good: Vec<Ballot> = (0..4)
            .map(|r| Ballot {
                rank: r,
                model: "H200",
                kinds: &k,
                hashes: &good,
            })
            .collect();
        assert!(vote(0, 0.0, &all_good).is_empty());
    }

    #[test]
    fn two_ranks_or_no_majority_name_every_rank() {
        let k = kinds();
        let (a, mut c) = (hashes(1), hashes(1));
        c[3] ^= 8;
        let two = [
            Ballot {
                rank: 0,
                model: "H200",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 1,
                model: "H200",
                kinds: &k,
                hashes: &c,
            },
        ];
        let f = vote(1, 0.0, &two);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].ranks.clone(), f[0].majority), (vec![0, 1], false));
        // three ranks, two faulty in different ways: no hash has 2 of 3
        let mut d = hashes(1);
        d[3] ^= 16;
        let three = [
            Ballot {
                rank: 0,
                model: "H200",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 1,
                model: "H200",
                kinds: &k,
                hashes: &c,
            },
            Ballot {
                rank: 2,
                model: "H200",
                kinds: &k,
                hashes: &d,
            },
        ];
        let f = vote(1, 0.0, &three);
        assert_eq!(
            (f[0].ranks.clone(), f[0].majority, f[0].block),
            (vec![0, 1, 2], false, 3)
        );
        assert!(
            describe(&f[0], &[]).contains("no majority among 3 H200"),
            "{}",
            describe(&f[0], &[])
        );
        // two of four wrong the same way: 2 of 4 is no strict majority either
        let four = [
            Ballot {
                rank: 0,
                model: "H200",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 1,
                model: "H200",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 2,
                model: "H200",
                kinds: &k,
                hashes: &c,
            },
            Ballot {
                rank: 3,
                model: "H200",
                kinds: &k,
                hashes: &c,
            },
        ];
        assert!(!vote(1, 0.0, &four)[0].majority);
        // two of five wrong the same way: the three are the majority
        let five: Vec<Ballot> = (0..5)
            .map(|r| Ballot {
                rank: r,
                model: "H200",
                kinds: &k,
                hashes: if r < 2 { &c } else { &a },
            })
            .collect();
        let f = vote(1, 0.0, &five);
        assert_eq!((f[0].ranks.clone(), f[0].majority), (vec![0, 1], true));
    }

    #[test]
    fn models_vote_apart_and_a_lone_rank_is_never_named() {
        let k = kinds();
        let (a, b) = (hashes(1), hashes(2));
        // two H100s agree; a lone A100 computes something else: not a disagreement
        let v = [
            Ballot {
                rank: 0,
                model: "H100",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 1,
                model: "H100",
                kinds: &k,
                hashes: &a,
            },
            Ballot {
                rank: 2,
                model: "A100",
                kinds: &k,
                hashes: &b,
            },
        ];
        assert!(vote(0, 0.0, &v).is_empty());
        // a kind only one rank computes is not voted on
        let only_fma = vec!["fma".to_string()];
        let more = vec!["fma".to_string(), "gemm".to_string()];
        let c = hashes(3);
        let v = [
            Ballot {
                rank: 0,
                model: "X",
                kinds: &only_fma,
                hashes: &c[..BLOCKS],
            },
            Ballot {
                rank: 1,
                model: "X",
                kinds: &more,
                hashes: &c,
            },
        ];
        assert!(vote(0, 0.0, &v).is_empty());
    }

    #[test]
    fn findings_name_host_gpu_pci_and_uuid() {
        let ranks = vec![
            SdcRank {
                rank: 0,
                host: "n0".into(),
                gpu: Some(0),
                ..Default::default()
            },
            SdcRank {
                rank: 1,
                host: "n1".into(),
                gpu: Some(3),
                pci_bus_id: "0000:9A:00.0".into(),
                uuid: "GPU-1234".into(),
                ..Default::default()
            },
            SdcRank {
                rank: 2,
                host: "n2".into(),
                gpu: None,
                ..Default::default()
            },
        ];
        let f = SdcFinding {
            round: 12,
            kind: "fma".into(),
            block: 4,
            model: "NVIDIA H200".into(),
            ranks: vec![1],
            majority: true,
            voters: 3,
            t_s: 3.0,
            temp_c: Some(71),
            sm_mhz: Some(1980),
        };
        assert_eq!(
            describe(&f, &ranks),
            "round 12 fma block 4: n1 GPU 3 (rank 1, PCI 0000:9A:00.0, GPU-1234) disagree(s) \
             with the other 2 NVIDIA H200 rank(s) at 71 °C, SM 1980 MHz"
        );
        assert_eq!(name(&ranks[2]), "n2 rank 2 (CPU)");
    }
}
