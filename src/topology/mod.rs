//! Topology: tiers of groups built from the node map, the node-pair schedule, topology
//! files, and the analysis that names a slow node or link.
//!
//! Tiers (DESIGN.md):
//! - `world`: every rank;
//! - `intra`: one group per node, all nodes at once (NVLink / shared memory);
//! - `inter`: one rank per node (local rank 0): the network with one stream per node;
//! - `rails`: local rank k of every node, one group per k, all rails at once;
//! - `pairs`: every pair of nodes (all their ranks), in rounds of disjoint pairs run at
//!   the same time — n−1 rounds for an even node count (the circle method).
//!
//! Groups in one round are disjoint, so every rank is in at most one group per round.
//! A tier whose groups would repeat an earlier tier's (intra on one node = world) or
//! that has no group of two ranks is skipped.
pub mod bisect;
pub mod fabric_map;
pub mod fabric_search;
pub mod file;
pub mod switches;

use crate::kinds::{Node, TierKind};
use serde::{Deserialize, Serialize};

/// A group of ranks measured together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// Index of the group within its tier (pairs: across all rounds).
    pub index: usize,
    /// "world", "node3", "inter", "rail 1", "node0+node3".
    pub label: String,
    /// World ranks, ascending.
    pub members: Vec<usize>,
    /// Node indices the group spans, ascending.
    pub nodes: Vec<usize>,
}

/// Groups that run at the same time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    pub groups: Vec<Group>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tier {
    pub kind: TierKind,
    pub rounds: Vec<Round>,
}

/// Rounds of disjoint node pairs covering every pair exactly once (circle method):
/// n−1 rounds of n/2 pairs for even n; n rounds (one node resting each) for odd n.
pub fn pair_rounds(n: usize) -> Vec<Vec<(usize, usize)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = if n % 2 == 0 { n } else { n + 1 }; // a ghost node for odd n
    let mut rounds = Vec::with_capacity(m - 1);
    // Node m-1 stays put; the others rotate.
    for r in 0..m - 1 {
        let mut pairs = Vec::with_capacity(m / 2);
        let pos = |i: usize| -> usize {
            if i == m - 1 {
                m - 1
            } else {
                (i + r) % (m - 1)
            }
        };
        for i in 0..m / 2 {
            let a = pos(i);
            let b = pos(m - 1 - i);
            if a < n && b < n {
                pairs.push((a.min(b), a.max(b)));
            }
        }
        pairs.sort_unstable();
        rounds.push(pairs);
    }
    rounds
}

fn node_label(nodes: &[Node], i: usize) -> String {
    nodes
        .get(i)
        .map(|n| n.host.clone())
        .unwrap_or_else(|| format!("node{i}"))
}

/// The tiers to run for this node map, in `wanted` order, skipping those that do not
/// apply (see the module header). `pair_ranks`: ranks per node in a node-pair group
/// (local ranks 0..k; None: all) — one per NIC, so every NIC of both nodes carries
/// one stream and the node's other ranks do not compete for its CPUs.
pub fn plan_tiers(nodes: &[Node], wanted: &[TierKind], pair_ranks: Option<usize>) -> Vec<Tier> {
    let mut tiers: Vec<Tier> = Vec::new();
    let mut seen: Vec<Vec<Vec<usize>>> = Vec::new();
    for &kind in wanted {
        let rounds = match kind {
            TierKind::World => vec![world_round(nodes)],
            TierKind::Intra => vec![intra_round(nodes)],
            TierKind::Inter => vec![inter_round(nodes)],
            TierKind::Rails => vec![rails_round(nodes)],
            TierKind::Pairs => pairs_rounds(nodes, pair_ranks),
            TierKind::Bisect | TierKind::Map => Vec::new(), // planned as they run
        };
        let rounds = without_single_ranks(rounds, kind);
        let signature = tier_signature(&rounds);
        if rounds.is_empty() || seen.contains(&signature) {
            continue;
        }
        seen.push(signature);
        tiers.push(Tier { kind, rounds });
    }
    tiers
}

/// `world`: every rank in one group.
fn world_round(nodes: &[Node]) -> Round {
    let all_ranks = nodes.iter().flat_map(|n| n.ranks.iter().copied()).collect();
    whole_job_round("world", all_ranks, nodes)
}

/// One round of one group spanning every node: `members`, sorted here.
fn whole_job_round(label: &str, mut members: Vec<usize>, nodes: &[Node]) -> Round {
    members.sort_unstable();
    Round {
        groups: vec![Group {
            index: 0,
            label: label.into(),
            members,
            nodes: (0..nodes.len()).collect(),
        }],
    }
}

/// `intra`: one group per node.
fn intra_round(nodes: &[Node]) -> Round {
    Round {
        groups: nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut m = n.ranks.clone();
                m.sort_unstable();
                Group {
                    index: i,
                    label: node_label(nodes, i),
                    members: m,
                    nodes: vec![i],
                }
            })
            .collect(),
    }
}

/// `inter`: the first rank of every node.
fn inter_round(nodes: &[Node]) -> Round {
    let firsts = nodes
        .iter()
        .filter_map(|n| n.ranks.first().copied())
        .collect();
    whole_job_round("inter", firsts, nodes)
}

/// `rails`: local rank k of every node, one group per k.
fn rails_round(nodes: &[Node]) -> Round {
    let max_local = nodes.iter().map(|n| n.ranks.len()).max().unwrap_or(0);
    Round {
        groups: (0..max_local)
            .map(|k| {
                let mut m: Vec<usize> = nodes
                    .iter()
                    .filter_map(|n| n.ranks.get(k).copied())
                    .collect();
                m.sort_unstable();
                let ns = nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.ranks.len() > k)
                    .map(|(i, _)| i)
                    .collect();
                Group {
                    index: k,
                    label: format!("rail {k}"),
                    members: m,
                    nodes: ns,
                }
            })
            .collect(),
    }
}

/// `pairs`: every pair of nodes (their first `pair_ranks` ranks each), in rounds of
/// disjoint pairs; group indices run across the rounds.
fn pairs_rounds(nodes: &[Node], pair_ranks: Option<usize>) -> Vec<Round> {
    let mut index = 0;
    pair_rounds(nodes.len())
        .into_iter()
        .map(|pairs| Round {
            groups: pairs
                .into_iter()
                .map(|(a, b)| {
                    let take = pair_ranks.unwrap_or(usize::MAX).max(1);
                    let mut m: Vec<usize> = nodes[a]
                        .ranks
                        .iter()
                        .take(take)
                        .chain(nodes[b].ranks.iter().take(take))
                        .copied()
                        .collect();
                    m.sort_unstable();
                    let g = Group {
                        index,
                        label: format!("{}+{}", node_label(nodes, a), node_label(nodes, b)),
                        members: m,
                        nodes: vec![a, b],
                    };
                    index += 1;
                    g
                })
                .collect(),
        })
        .collect()
}

/// A group of whole nodes (their first `ranks_per_node` ranks each; None: all), as
/// the bisection search plans them; `index` runs across its rounds.
pub fn node_group(
    nodes: &[Node],
    of: &[usize],
    ranks_per_node: Option<usize>,
    index: usize,
) -> Group {
    let take = ranks_per_node.unwrap_or(usize::MAX).max(1);
    let mut members: Vec<usize> = of
        .iter()
        .flat_map(|&i| nodes[i].ranks.iter().take(take).copied())
        .collect();
    members.sort_unstable();
    let mut sorted = of.to_vec();
    sorted.sort_unstable();
    let label = match sorted.as_slice() {
        [a, b] => format!("{}+{}", node_label(nodes, *a), node_label(nodes, *b)),
        [a, .., b] if b - a + 1 == sorted.len() => {
            format!("{}..{}", node_label(nodes, *a), node_label(nodes, *b))
        }
        _ => sorted
            .iter()
            .map(|&i| node_label(nodes, i))
            .collect::<Vec<_>>()
            .join("+"),
    };
    Group {
        index,
        label,
        members,
        nodes: sorted,
    }
}

/// Drop groups of one rank (except the world of a one-GPU machine, which nccl-tests
/// measures too), then the rounds left empty.
fn without_single_ranks(rounds: Vec<Round>, kind: TierKind) -> Vec<Round> {
    rounds
        .into_iter()
        .map(|r| Round {
            groups: r
                .groups
                .into_iter()
                .filter(|g| g.members.len() >= 2 || kind == TierKind::World)
                .collect(),
        })
        .filter(|r| !r.groups.is_empty())
        .collect()
}

/// A tier's groups' members, sorted: two tiers with the same signature measure the
/// same thing (intra on one node = world), so the second is dropped.
fn tier_signature(rounds: &[Round]) -> Vec<Vec<usize>> {
    let mut s: Vec<Vec<usize>> = rounds
        .iter()
        .flat_map(|r| r.groups.iter().map(|g| g.members.clone()))
        .collect();
    s.sort();
    s
}

/// Parse `--tiers` (comma list or `all`).
pub fn parse_tiers(text: &str) -> anyhow::Result<Vec<TierKind>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.eq_ignore_ascii_case("all") {
            for k in TierKind::ALL {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        } else if let Some(k) = TierKind::parse(item) {
            if !out.contains(&k) {
                out.push(k);
            }
        } else {
            return Err(crate::error::usage(
                "--tiers",
                format!("unknown tier '{item}' (known: world, intra, inter, rails, pairs, all)"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn nodes(k: usize, per: usize) -> Vec<Node> {
        (0..k)
            .map(|i| Node {
                index: i,
                host: format!("node{i}"),
                ranks: (i * per..(i + 1) * per).collect(),
            })
            .collect()
    }

    fn check_schedule(n: usize) {
        let rounds = pair_rounds(n);
        let mut seen = HashSet::new();
        for r in &rounds {
            let mut busy = HashSet::new();
            for &(a, b) in r {
                assert!(a < b && b < n);
                assert!(
                    busy.insert(a) && busy.insert(b),
                    "node twice in a round (n={n})"
                );
                assert!(seen.insert((a, b)), "pair twice (n={n})");
            }
        }
        assert_eq!(seen.len(), n * (n - 1) / 2, "every pair once (n={n})");
        let expected_rounds = if n % 2 == 0 { n - 1 } else { n };
        assert_eq!(rounds.len(), expected_rounds);
    }

    #[test]
    fn pair_schedule_covers_every_pair_once_with_disjoint_rounds() {
        for n in 2..=40 {
            check_schedule(n);
        }
        check_schedule(1024);
        assert!(pair_rounds(1).is_empty());
    }

    #[test]
    fn tiers_of_four_nodes_by_two() {
        let t = plan_tiers(&nodes(4, 2), &TierKind::ALL, None);
        let kinds: Vec<TierKind> = t.iter().map(|t| t.kind).collect();
        assert_eq!(kinds, TierKind::ALL.to_vec());
        let intra = &t[1].rounds[0].groups;
        assert_eq!(intra.len(), 4);
        assert_eq!(intra[3].members, vec![6, 7]);
        assert_eq!(t[2].rounds[0].groups[0].members, vec![0, 2, 4, 6]);
        let rails = &t[3].rounds[0].groups;
        assert_eq!(rails[1].members, vec![1, 3, 5, 7]);
        assert_eq!(t[4].rounds.len(), 3);
        assert!(t[4].rounds.iter().all(|r| r.groups.len() == 2));
        let labels: Vec<&str> = t[4]
            .rounds
            .iter()
            .flat_map(|r| r.groups.iter().map(|g| g.label.as_str()))
            .collect();
        assert!(labels.contains(&"node0+node3") && labels.contains(&"node2+node3"));
    }

    #[test]
    fn pairs_take_one_rank_per_nic() {
        let t = plan_tiers(&nodes(4, 2), &[TierKind::Pairs], Some(1));
        let g = &t[0].rounds[0].groups[0];
        assert_eq!(g.members.len(), 2);
        assert!(
            g.members.iter().all(|r| r % 2 == 0),
            "local rank 0 of each node: {:?}",
            g.members
        );
    }

    #[test]
    fn one_node_runs_world_only() {
        let t = plan_tiers(&nodes(1, 4), &TierKind::ALL, None);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].kind, TierKind::World);
    }

    /// Regression: a one-GPU machine (one rank) measured nothing at all, while
    /// nccl-tests runs every collective on one GPU.
    #[test]
    fn one_rank_still_measures_the_world() {
        let t = plan_tiers(&nodes(1, 1), &TierKind::ALL, None);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].kind, TierKind::World);
        assert_eq!(t[0].rounds[0].groups[0].members, vec![0]);
    }

    #[test]
    fn one_rank_per_node_skips_duplicates() {
        // 3 nodes x 1: intra has no pair of ranks; inter == rails == world.
        let t = plan_tiers(&nodes(3, 1), &TierKind::ALL, None);
        let kinds: Vec<TierKind> = t.iter().map(|t| t.kind).collect();
        assert_eq!(kinds, vec![TierKind::World, TierKind::Pairs]);
    }

    #[test]
    fn tiers_flag() {
        assert_eq!(parse_tiers("all").unwrap().len(), 5);
        assert_eq!(
            parse_tiers("intra,pair").unwrap(),
            vec![TierKind::Intra, TierKind::Pairs]
        );
        assert!(format!("{:#}", parse_tiers("nvlink").unwrap_err()).contains("--tiers"));
    }
}
