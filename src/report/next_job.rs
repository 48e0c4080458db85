//! The next job's files, from the verdict: which nodes to leave out and why, an mpirun
//! hostfile of the rest (`hosts.good`, in a ring order that keeps the slowest measured
//! links out of the ring), and the same choice in Slurm's words (`--nodelist`,
//! `--exclude`), in `next-job.txt` and the report.
//!
//! A node is left out when the sweep named it (an outlier node of the pairs or another
//! tier: its own fail finding says why) or `--find-slow` did. A slow link, pair or
//! uplink leaves its nodes in: the ring order keeps such links out where the pair
//! matrix lets it.

use super::data::RunData;
use super::Doc;
use crate::results::analysis::PairMatrix;
use std::collections::BTreeMap;

/// What the next job should run on.
#[derive(Clone, Debug, PartialEq)]
pub struct NextJob {
    /// Every node of the measured job with its slots (ranks), in job order.
    pub nodes: Vec<(String, usize)>,
    /// Nodes left out, each with why.
    pub excluded: Vec<(String, String)>,
    /// The nodes kept, in ring order.
    pub ring: Vec<String>,
    /// How the ring was ordered, and its slowest measured link.
    pub ring_note: String,
    /// What was named or left open without leaving a node out: slow links, uplinks,
    /// groups the search could not split. The kept nodes are not all cleared.
    pub doubts: Vec<String>,
}

/// The plan from a results folder's sweep (or soak): None when neither recorded the
/// job's nodes.
pub fn plan(data: &RunData) -> Option<NextJob> {
    let rep = data
        .sweep
        .as_ref()
        .and_then(|s| s.report.as_ref())
        .or_else(|| data.soak.as_ref().and_then(|s| s.report.as_ref()))?;
    let nodes: Vec<(String, usize)> = rep
        .provenance
        .nodes
        .iter()
        .map(|n| (n.host.clone(), n.ranks.len()))
        .collect();
    if nodes.is_empty() {
        return None;
    }
    let a = &rep.analysis;
    let mut why: BTreeMap<String, String> = BTreeMap::new();
    for host in &a.outlier_nodes {
        let said = a
            .findings
            .iter()
            .find(|f| f.severity == "fail" && f.subject == *host)
            .map_or_else(
                || "named an outlier by the sweep".to_string(),
                |f| f.text.clone(),
            );
        why.entry(host.clone()).or_insert(said);
    }
    let mut doubts: Vec<String> = a
        .findings
        .iter()
        .filter(|f| f.severity == "fail" && (f.subject.contains('+') || f.subject.contains('↔')))
        .map(|f| format!("{} (its nodes are kept)", f.text))
        .collect();
    if let Some(fs) = &rep.find_slow {
        for host in &fs.slow_nodes {
            why.entry(host.clone())
                .or_insert_with(|| format!("{host}: named a slow node by --find-slow"));
        }
        for (x, y) in &fs.slow_links {
            doubts.push(format!(
                "{x}+{y}: a slow link by --find-slow (both nodes kept)"
            ));
        }
        for u in &fs.slow_uplinks {
            doubts.push(format!("{}: a slow uplink by --find-slow", u.join(" ")));
        }
        for g in &fs.unresolved {
            doubts.push(format!(
                "{}: slow together, not split further by --find-slow (kept, not cleared)",
                g.join("+")
            ));
        }
    }
    let excluded: Vec<(String, String)> = nodes
        .iter()
        .filter_map(|(h, _)| why.get(h).map(|w| (h.clone(), w.clone())))
        .collect();
    let kept: Vec<String> = nodes
        .iter()
        .map(|n| n.0.clone())
        .filter(|h| !why.contains_key(h))
        .collect();
    let (ring, ring_note) = match a.pair_matrices.first() {
        Some(m) => ring_order(&kept, m),
        None => (
            kept,
            "job order (no node-pair matrix: run the pairs tier to order the ring by measured links)".into(),
        ),
    };
    Some(NextJob {
        nodes,
        excluded,
        ring,
        ring_note,
        doubts,
    })
}

/// busbw of the pair (a, b) in the matrix, when measured.
fn link(m: &PairMatrix, a: &str, b: &str) -> Option<f64> {
    let i = m.nodes.iter().position(|n| n == a)?;
    let j = m.nodes.iter().position(|n| n == b)?;
    m.busbw_gbps.get(i)?.get(j).copied().flatten()
}

fn find(parent: &mut [usize], x: usize) -> usize {
    let mut r = x;
    while parent[r] != r {
        r = parent[r];
    }
    parent[x] = r;
    r
}

/// The kept nodes as a ring that uses the fastest measured links first (greedy: the
/// fastest pair whose nodes still have a free side and are not yet on one path, until
/// one path holds them all; its ends close the ring), and a note naming its slowest
/// link against the matrix's slowest.
fn ring_order(kept: &[String], m: &PairMatrix) -> (Vec<String>, String) {
    let n = kept.len();
    if n < 3 {
        return (
            kept.to_vec(),
            "fewer than 3 nodes: any order is the ring".into(),
        );
    }
    let mut edges: Vec<(f64, usize, usize)> = Vec::new();
    for i in 0..n {
        for j in i + 1..n {
            // An unmeasured pair goes last, below every measured one.
            let bw = link(m, &kept[i], &kept[j]).unwrap_or(-1.0);
            edges.push((bw, i, j));
        }
    }
    edges.sort_by(|x, y| y.0.total_cmp(&x.0).then((x.1, x.2).cmp(&(y.1, y.2))));
    let mut degree = vec![0usize; n];
    let mut parent: Vec<usize> = (0..n).collect();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut used = 0;
    for &(_, i, j) in &edges {
        if used == n - 1 {
            break;
        }
        if degree[i] == 2 || degree[j] == 2 {
            continue;
        }
        let (ri, rj) = (find(&mut parent, i), find(&mut parent, j));
        if ri == rj {
            continue;
        }
        parent[ri] = rj;
        degree[i] += 1;
        degree[j] += 1;
        adj[i].push(j);
        adj[j].push(i);
        used += 1;
    }
    // Walk the path from one end.
    let start = (0..n).find(|&i| degree[i] <= 1).unwrap_or(0);
    let mut order = vec![start];
    let mut prev = usize::MAX;
    let mut at = start;
    while order.len() < n {
        let Some(&next) = adj[at].iter().find(|&&x| x != prev) else {
            break;
        };
        order.push(next);
        prev = at;
        at = next;
    }
    // A broken walk (cannot happen with n - 1 path edges) falls back to job order.
    if order.len() < n {
        return (
            kept.to_vec(),
            "job order (the ring could not be built)".into(),
        );
    }
    let w = |a: usize, b: usize| link(m, &kept[a], &kept[b]).unwrap_or(-1.0);
    improve(&mut order, &w);
    let ring: Vec<String> = order.iter().map(|&i| kept[i].clone()).collect();
    let hops: Vec<(String, String, Option<f64>)> = (0..n)
        .map(|k| {
            let (a, b) = (&ring[k], &ring[(k + 1) % n]);
            (a.clone(), b.clone(), link(m, a, b))
        })
        .collect();
    let slowest_in = hops
        .iter()
        .filter_map(|(a, b, bw)| bw.map(|bw| (a, b, bw)))
        .min_by(|x, y| x.2.total_cmp(&y.2));
    let unmeasured = hops.iter().filter(|h| h.2.is_none()).count();
    let mut worst: Option<(String, String, f64)> = None;
    for (i, a) in m.nodes.iter().enumerate() {
        for (j, b) in m.nodes.iter().enumerate().skip(i + 1) {
            if let Some(bw) = m
                .busbw_gbps
                .get(i)
                .and_then(|r| r.get(j))
                .copied()
                .flatten()
            {
                if worst.as_ref().map_or(true, |w| bw < w.2) {
                    worst = Some((a.clone(), b.clone(), bw));
                }
            }
        }
    }
    let mut note = format!(
        "ordered by the measured node-pair busbw ({} at {}): fastest links first",
        m.collective,
        crate::units::Bytes(m.bytes)
    );
    if let Some((a, b, bw)) = slowest_in {
        note.push_str(&format!(
            "; the ring's slowest link {a}+{b} at {bw:.3} GB/s"
        ));
    }
    if let Some((a, b, bw)) = worst {
        let inside = hops
            .iter()
            .any(|h| (h.0 == a && h.1 == b) || (h.0 == b && h.1 == a));
        note.push_str(&format!(
            "; the slowest pair measured, {a}+{b} at {bw:.3} GB/s, is {}",
            if inside {
                "in the ring (the search found no ring of these nodes without it)"
            } else if kept.contains(&a) && kept.contains(&b) {
                "kept out of the ring"
            } else {
                "out with its excluded node"
            }
        ));
    }
    if unmeasured > 0 {
        note.push_str(&format!("; {unmeasured} of its links were not measured"));
    }
    (ring, note)
}

/// The ring's slowest link first, then its links' sum: (min, sum) of `w` around it.
fn ring_score(order: &[usize], w: &dyn Fn(usize, usize) -> f64) -> (f64, f64) {
    let n = order.len();
    (0..n)
        .map(|k| w(order[k], order[(k + 1) % n]))
        .fold((f64::INFINITY, 0.0), |(lo, sum), e| (lo.min(e), sum + e))
}

/// 2-opt on the ring (reverse a stretch where that raises its slowest link, or keeps
/// it and raises the sum), at most 20 passes, for rings of up to 256 nodes (the greedy
/// path alone closes on whatever link its two ends leave).
fn improve(order: &mut Vec<usize>, w: &dyn Fn(usize, usize) -> f64) {
    let n = order.len();
    if !(4..=256).contains(&n) {
        return;
    }
    let mut best = ring_score(order, w);
    for _ in 0..20 {
        let mut moved = false;
        for i in 0..n - 1 {
            for j in i + 2..n {
                if i == 0 && j == n - 1 {
                    continue;
                }
                let (a, b, c, d) = (order[i], order[i + 1], order[j], order[(j + 1) % n]);
                if w(a, c).min(w(b, d)) < w(a, b).min(w(c, d)).min(best.0) {
                    continue;
                }
                let mut cand = order.clone();
                cand[i + 1..=j].reverse();
                let s = ring_score(&cand, w);
                if s.0 > best.0 || (s.0 == best.0 && s.1 > best.1 + 1e-12) {
                    *order = cand;
                    best = s;
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
}

/// `hosts.good`: an Open MPI hostfile of the kept nodes in ring order, with their slots.
pub fn hostfile(p: &NextJob) -> String {
    let slots: BTreeMap<&str, usize> = p.nodes.iter().map(|(h, s)| (h.as_str(), *s)).collect();
    let mut s = String::from(
        "# burnin: the nodes the verdict keeps, in ring order (mpirun --hostfile hosts.good)\n",
    );
    for h in &p.ring {
        s.push_str(&format!(
            "{h} slots={}\n",
            slots.get(h.as_str()).copied().unwrap_or(1)
        ));
    }
    s
}

/// `next-job.txt`: Slurm's forms, what is left out and why, and the ring.
pub fn text(p: &NextJob) -> String {
    let mut s = String::new();
    s.push_str(&format!("srun --nodelist={}\n", p.ring.join(",")));
    if p.excluded.is_empty() {
        s.push_str("# exclude: none (no node was named)\n");
    } else {
        let names: Vec<&str> = p.excluded.iter().map(|e| e.0.as_str()).collect();
        s.push_str(&format!("sbatch --exclude={}\n", names.join(",")));
        for (h, why) in &p.excluded {
            s.push_str(&format!("# {h} is out: {why}\n"));
        }
    }
    s.push_str(&format!("# ring: {}\n", p.ring_note));
    for d in &p.doubts {
        s.push_str(&format!("# kept, not cleared: {d}\n"));
    }
    s
}

/// The report's "Next job" section.
pub fn section(d: &mut Doc, p: &NextJob) {
    d.h(2, "Next job");
    let mut items = vec![
        format!(
            "keep {} of {} nodes, in ring order: {} (`hosts.good`; Slurm: `--nodelist={}`)",
            p.ring.len(),
            p.nodes.len(),
            p.ring.join(", "),
            p.ring.join(",")
        ),
        format!("ring: {}", p.ring_note),
    ];
    if p.excluded.is_empty() {
        items.push("no node left out: none was named".into());
    } else {
        let names: Vec<&str> = p.excluded.iter().map(|e| e.0.as_str()).collect();
        items.push(format!("Slurm: `--exclude={}`", names.join(",")));
        for (h, why) in &p.excluded {
            items.push(format!("{h} is out: {why}"));
        }
    }
    for doubt in &p.doubts {
        items.push(format!("kept, not cleared: {doubt}"));
    }
    d.list(items);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::CollKind;

    fn matrix(nodes: &[&str], bw: impl Fn(usize, usize) -> Option<f64>) -> PairMatrix {
        let n = nodes.len();
        PairMatrix {
            collective: CollKind::AllReduce,
            bytes: 1 << 24,
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            busbw_gbps: (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| if i == j { None } else { bw(i.min(j), i.max(j)) })
                        .collect()
                })
                .collect(),
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_ring_keeps_the_slow_links_out_when_it_can() {
        // node0+node1 and node2+node3 are slow; a ring of four avoids both.
        let m = matrix(&["node0", "node1", "node2", "node3"], |i, j| {
            Some(if (i, j) == (0, 1) || (i, j) == (2, 3) {
                0.1
            } else {
                1.0
            })
        });
        let (ring, note) = ring_order(&names(&["node0", "node1", "node2", "node3"]), &m);
        let n = ring.len();
        for k in 0..n {
            let (a, b) = (&ring[k], &ring[(k + 1) % n]);
            assert_eq!(link(&m, a, b), Some(1.0), "{ring:?}");
        }
        assert!(note.contains("is kept out of the ring"), "{note}");
        // With node3 left out, node0+node1 must be in a ring of three.
        let (ring, note) = ring_order(&names(&["node0", "node1", "node2"]), &m);
        assert_eq!(ring.len(), 3);
        assert!(
            note.contains("in the ring (the search found no ring of these nodes without it)"),
            "{note}"
        );
        // One slow pair among four: the greedy path's ends would close on it; the
        // ring avoids it.
        let m = matrix(&["node0", "node1", "node2", "node3"], |i, j| {
            Some(match (i, j) {
                (0, 3) => 0.05,
                (0, 2) | (1, 3) => 1.0,
                _ => 0.9,
            })
        });
        let (ring, note) = ring_order(&names(&["node0", "node1", "node2", "node3"]), &m);
        assert!(
            note.contains("node0+node3 at 0.050 GB/s, is kept out of the ring"),
            "{note} {ring:?}"
        );
    }

    #[test]
    fn hostfile_and_slurm_forms_say_who_is_out_and_why() {
        let p = NextJob {
            nodes: vec![
                ("node0".into(), 2),
                ("node1".into(), 2),
                ("node2".into(), 2),
            ],
            excluded: vec![("node2".into(), "node2: every pair runs at 0.25x".into())],
            ring: names(&["node1", "node0"]),
            ring_note: "fewer than 3 nodes: any order is the ring".into(),
            doubts: Vec::new(),
        };
        assert_eq!(
            hostfile(&p),
            "# burnin: the nodes the verdict keeps, in ring order (mpirun --hostfile hosts.good)\nnode1 slots=2\nnode0 slots=2\n"
        );
        let t = text(&p);
        assert!(t.starts_with("srun --nodelist=node1,node0\nsbatch --exclude=node2\n# node2 is out: node2: every pair runs at 0.25x\n"), "{t}");
    }
}
