//! A trace made on R ranks replayed on k × R: the job repeated k times along its
//! data-parallel dimension, copy j on ranks j·R … (j+1)·R − 1 (contiguous, as a
//! launcher places whole nodes). Each communicator either grows — one communicator of
//! the k copies' members together, as a data-parallel group does when the job gets k
//! times the nodes — or repeats, one per copy, as a tensor-parallel group inside a node
//! does. Pure: the trace's steps in, the scaled ones and what was assumed out.
use super::trace::{Op, Trace, TraceCall, TraceComm};
use crate::kinds::CollKind;
pub use crate::kinds::Grow;

/// The scaled trace (its communicators and ranks) and steps, and what was assumed.
#[derive(Debug)]
pub struct Scaled {
    pub trace: Trace,
    pub steps: Vec<Vec<TraceCall>>,
    pub notes: Vec<String>,
}

/// Which of the trace's communicators grow.
fn growing(t: &Trace, grow: &Grow) -> Result<Vec<bool>, String> {
    match grow {
        Grow::Ids(ids) => {
            if let Some(bad) = ids.iter().find(|id| !t.comms.iter().any(|c| c.id == **id)) {
                let have: Vec<&str> = t.comms.iter().map(|c| c.id.as_str()).collect();
                return Err(format!(
                    "--grow: the trace has no communicator '{bad}' (it has {})",
                    have.join(", ")
                ));
            }
            Ok(t.comms.iter().map(|c| ids.contains(&c.id)).collect())
        }
        Grow::Auto => t
            .comms
            .iter()
            .map(|c| {
                if c.members.len() == t.ranks {
                    return Ok(true);
                }
                let hosts: Option<Vec<&String>> = c
                    .members
                    .iter()
                    .map(|g| t.hosts.get(*g).and_then(Option::as_ref))
                    .collect();
                let Some(mut hosts) = hosts else {
                    return Err(format!(
                        "--grow auto: the trace does not say which host communicator {}'s ranks were on (NCCL logs with host:pid prefixes do): name the communicators that grow, --grow ID,ID",
                        c.id
                    ));
                };
                hosts.sort();
                hosts.dedup();
                Ok(hosts.len() > 1)
            })
            .collect(),
    }
}

/// A grown communicator's call: the same message (burnin's count: all_reduce's and
/// broadcast's buffer, all_gather's whole output, reduce_scatter's and alltoall's
/// whole input), rounded up to a multiple of the new size where it is split by rank.
fn grown_call(x: &TraceCall, n: usize, rounded: &mut bool) -> TraceCall {
    let mut y = x.clone();
    if matches!(
        x.op,
        Op::Coll(CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll)
    ) && x.count % n != 0
    {
        y.count = x.count.div_ceil(n) * n;
        *rounded = true;
    }
    y
}

/// The trace's steps on `to` ranks (a multiple of the trace's).
pub fn scale(
    t: &Trace,
    steps: &[Vec<TraceCall>],
    to: usize,
    grow: &Grow,
) -> Result<Scaled, String> {
    let r = t.ranks;
    if r == 0 || to % r != 0 || to < r {
        return Err(format!(
            "--grow: this job has {to} rank(s), not a multiple of the trace's {r}: run it with -np {r} × k"
        ));
    }
    let k = to / r;
    let grows = growing(t, grow)?;
    // New communicators: a grown one keeps its index order; a repeated one becomes k.
    let mut comms = Vec::new();
    let mut index: Vec<Vec<usize>> = Vec::new();
    for (c, comm) in t.comms.iter().enumerate() {
        if grows[c] {
            index.push(vec![comms.len(); k]);
            comms.push(TraceComm {
                id: comm.id.clone(),
                members: (0..k)
                    .flat_map(|j| comm.members.iter().map(move |g| g + j * r))
                    .collect(),
                problems: comm.problems.clone(),
            });
        } else {
            index.push((comms.len()..comms.len() + k).collect());
            for j in 0..k {
                comms.push(TraceComm {
                    id: if j == 0 {
                        comm.id.clone()
                    } else {
                        format!("{}#{j}", comm.id)
                    },
                    members: comm.members.iter().map(|g| g + j * r).collect(),
                    problems: comm.problems.clone(),
                });
            }
        }
    }
    let mut rounded = false;
    let mut out_steps = Vec::with_capacity(to);
    // Per copy, each trace communicator's index among the new ones.
    let per_copy: Vec<Vec<usize>> = (0..k)
        .map(|j| index.iter().map(|v| v[j]).collect())
        .collect();
    for (copy, map) in per_copy.iter().enumerate() {
        for step in steps.iter().take(r) {
            out_steps.push(
                step.iter()
                    .map(|x| {
                        let len = t.comms[x.comm].members.len();
                        let mut y = if grows[x.comm] {
                            grown_call(x, len * k, &mut rounded)
                        } else {
                            x.clone()
                        };
                        // A send or receive stays inside its copy of the job: in a
                        // grown communicator its peer is the peer's copy.
                        if grows[x.comm] && !matches!(x.op, Op::Coll(_)) {
                            y.root = x.root + copy * len;
                        }
                        y.comm = map[x.comm];
                        y
                    })
                    .collect(),
            );
        }
    }
    let names = |want: bool| -> Vec<String> {
        t.comms
            .iter()
            .zip(&grows)
            .filter(|(_, g)| **g == want)
            .map(|(c, _)| match want {
                true => format!(
                    "{} ({} → {} ranks)",
                    c.id,
                    c.members.len(),
                    c.members.len() * k
                ),
                false => format!("{} ({} ranks)", c.id, c.members.len()),
            })
            .collect()
    };
    let mut notes = vec![format!(
        "scaled from the trace's {r} rank(s) to {to}: the job repeated {k} times, copy j on ranks j×{r} to (j+1)×{r}−1; grown (one communicator over the copies): {}; repeated in each copy: {}",
        list(&names(true)),
        list(&names(false))
    )];
    if grows.iter().any(|g| *g) {
        notes.push(
            "a grown communicator's calls keep their message size (the model's tensors do not grow with the data-parallel degree: an all_gather's output and a reduce_scatter's input stay whole, each rank's shard shrinks); its source times, if any, are of the trace's smaller group"
                .into(),
        );
    }
    if rounded {
        notes.push("messages split by rank rounded up to a multiple of the grown size".into());
    }
    let mut trace = t.clone();
    trace.ranks = to;
    trace.comms = comms;
    trace.calls = out_steps.clone();
    trace.hosts = Vec::new();
    Ok(Scaled {
        trace,
        steps: out_steps,
        notes,
    })
}

/// `--rank-map`: trace rank i runs on job rank `map[i]` (a permutation of the job's
/// ranks), for a job whose launcher placed ranks otherwise than contiguously.
pub fn parse_rank_map(text: &str, ranks: usize) -> Result<Vec<usize>, String> {
    let map: Vec<usize> = text
        .split(',')
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| format!("--rank-map: '{}' is not a rank", x.trim()))
        })
        .collect::<Result<_, _>>()?;
    if map.len() != ranks {
        return Err(format!(
            "--rank-map: {} rank(s) given, the replay has {ranks}: give where each of its ranks runs, in order",
            map.len()
        ));
    }
    let mut seen = vec![false; ranks];
    for &m in &map {
        if m >= ranks || std::mem::replace(&mut seen[m], true) {
            return Err(format!(
                "--rank-map: rank {m} is out of 0..{ranks} or given twice: the map must name each rank once"
            ));
        }
    }
    Ok(map)
}

/// The trace's rank i placed on rank `map[i]`: communicators keep their rank order.
pub fn place(t: &mut Trace, steps: &mut Vec<Vec<TraceCall>>, map: &[usize]) {
    for c in &mut t.comms {
        for m in &mut c.members {
            *m = map[*m];
        }
    }
    let mut placed = vec![Vec::new(); steps.len()];
    for (i, s) in steps.drain(..).enumerate() {
        placed[map[i]] = s;
    }
    *steps = placed;
    t.calls = steps.clone();
    if t.hosts.len() == map.len() {
        let mut h = vec![None; map.len()];
        for (i, x) in t.hosts.drain(..).enumerate() {
            h[map[i]] = x;
        }
        t.hosts = h;
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Dtype, RedOp};

    fn call(comm: usize, kind: CollKind, count: usize) -> TraceCall {
        TraceCall {
            comm,
            op: Op::Coll(kind),
            count,
            dtype: Dtype::F32,
            dtype_note: None,
            note: None,
            red: RedOp::Sum,
            root: 0,
            source_us: Some(10.0),
            grouped: false,
        }
    }

    /// 4 ranks on 2 hosts: tp0 = {0,1} and tp1 = {2,3} inside a host, dp0 = {0,2} and
    /// dp1 = {1,3} across them, and the world.
    fn dp_tp() -> (Trace, Vec<Vec<TraceCall>>) {
        let comm = |id: &str, m: &[usize]| TraceComm {
            id: id.into(),
            members: m.to_vec(),
            problems: Vec::new(),
        };
        let t = Trace {
            format: "nccl-coll".into(),
            ranks: 4,
            comms: vec![
                comm("world", &[0, 1, 2, 3]),
                comm("tp0", &[0, 1]),
                comm("tp1", &[2, 3]),
                comm("dp0", &[0, 2]),
                comm("dp1", &[1, 3]),
            ],
            hosts: ["a", "a", "b", "b"].map(|h| Some(h.to_string())).to_vec(),
            ..Trace::default()
        };
        let steps = (0..4)
            .map(|g| {
                vec![
                    call(1 + g / 2, CollKind::AllGather, 1000),
                    call(3 + g % 2, CollKind::AllReduce, 777),
                    call(3 + g % 2, CollKind::ReduceScatter, 6),
                ]
            })
            .collect();
        (t, steps)
    }

    #[test]
    fn auto_grows_the_groups_that_span_hosts_and_repeats_the_ones_inside_a_host() {
        let (t, steps) = dp_tp();
        let s = scale(&t, &steps, 12, &Grow::Auto).unwrap();
        assert_eq!(s.trace.ranks, 12);
        let ids: Vec<(&str, &[usize])> = s
            .trace
            .comms
            .iter()
            .map(|c| (c.id.as_str(), c.members.as_slice()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("world", &(0..12).collect::<Vec<_>>()[..]),
                ("tp0", &[0, 1][..]),
                ("tp0#1", &[4, 5][..]),
                ("tp0#2", &[8, 9][..]),
                ("tp1", &[2, 3][..]),
                ("tp1#1", &[6, 7][..]),
                ("tp1#2", &[10, 11][..]),
                ("dp0", &[0, 2, 4, 6, 8, 10][..]),
                ("dp1", &[1, 3, 5, 7, 9, 11][..]),
            ]
        );
        assert_eq!(s.steps.len(), 12);
        // Rank 7 is copy 1's rank 3: tp1#1, then dp1 grown.
        let r7 = &s.steps[7];
        assert_eq!(s.trace.comms[r7[0].comm].id, "tp1#1");
        assert_eq!(r7[0].count, 1000, "a repeated group's call is unchanged");
        assert_eq!(s.trace.comms[r7[1].comm].id, "dp1");
        assert_eq!(r7[1].count, 777, "all_reduce keeps its buffer");
        assert_eq!(r7[2].count, 6, "6 elements split over 6 ranks: unchanged");
        assert_eq!(r7[1].source_us, Some(10.0));
        // Every member of a communicator makes the same calls on it.
        super::super::consistent(&s.trace, &s.steps).unwrap();
        assert!(
            s.notes[0].contains("dp0 (2 → 6 ranks)") && s.notes[0].contains("tp0 (2 ranks)"),
            "{:?}",
            s.notes
        );
        assert_eq!(s.notes.len(), 2, "{:?}", s.notes);
    }

    #[test]
    fn a_rank_map_places_each_trace_rank_and_keeps_communicator_order() {
        let (mut t, mut steps) = dp_tp();
        let map = parse_rank_map("0, 2,1,3", 4).unwrap();
        place(&mut t, &mut steps, &map);
        // tp0 was trace ranks 0,1: now on 0 and 2; dp0 (0,2) on 0 and 1.
        assert_eq!(t.comms[1].members, vec![0, 2]);
        assert_eq!(t.comms[3].members, vec![0, 1]);
        assert_eq!(steps[2][0].comm, 1, "trace rank 1's step (tp0) on rank 2");
        assert_eq!(steps[1][0].comm, 2, "trace rank 2's step (tp1) on rank 1");
        assert_eq!(t.hosts[1].as_deref(), Some("b"));
        super::super::consistent(&t, &steps).unwrap();
        for (text, want) in [
            ("0,1,2", "3 rank(s) given, the replay has 4"),
            ("0,1,1,3", "rank 1 is out of 0..4 or given twice"),
            ("0,1,2,4", "rank 4 is out of 0..4"),
            ("0,1,x,3", "'x' is not a rank"),
        ] {
            let e = parse_rank_map(text, 4).unwrap_err();
            assert!(
                e.starts_with("--rank-map: ") && e.contains(want),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn a_split_message_is_rounded_up_to_the_grown_size_and_said() {
        let (t, mut steps) = dp_tp();
        for s in &mut steps {
            s[2].count = 4;
        }
        let s = scale(&t, &steps, 8, &Grow::Auto).unwrap();
        assert_eq!(s.steps[0][2].count, 4, "4 over 4 ranks");
        let s = scale(&t, &steps, 12, &Grow::Auto).unwrap();
        assert_eq!(s.steps[0][2].count, 6, "4 over 6 ranks: 6");
        assert!(s.notes.iter().any(|n| n.contains("rounded up")));
    }

    #[test]
    fn named_ids_grow_and_bad_sizes_ids_or_unknown_hosts_are_refused() {
        let (mut t, steps) = dp_tp();
        let s = scale(&t, &steps, 8, &Grow::Ids(vec!["tp0".into(), "tp1".into()])).unwrap();
        let tp0 = s.trace.comms.iter().find(|c| c.id == "tp0").unwrap();
        assert_eq!(tp0.members, vec![0, 1, 4, 5]);
        assert!(s.trace.comms.iter().any(|c| c.id == "dp0#1"));
        let e = scale(&t, &steps, 6, &Grow::Auto).unwrap_err();
        assert!(
            e.contains("6 rank(s), not a multiple of the trace's 4"),
            "{e}"
        );
        let e = scale(&t, &steps, 8, &Grow::Ids(vec!["pp".into()])).unwrap_err();
        assert!(
            e.contains("no communicator 'pp'") && e.contains("dp1"),
            "{e}"
        );
        t.hosts.clear();
        let e = scale(&t, &steps, 8, &Grow::Auto).unwrap_err();
        assert!(e.contains("--grow ID,ID") && e.contains("tp0"), "{e}");
        assert_eq!(Grow::parse("auto").unwrap(), Grow::Auto);
        assert_eq!(
            Grow::parse(" a, b ").unwrap(),
            Grow::Ids(vec!["a".into(), "b".into()])
        );
        assert!(Grow::parse(",").is_err());
    }
}
