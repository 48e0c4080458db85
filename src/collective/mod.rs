//! Collectives as a table (after nccl-tests): each collective is one file that knows
//! its buffer sizes for a message, its bus-bandwidth factor, each rank's input values
//! and the exact expected output. Adding a collective touches only its file and
//! [`table`].
//!
//! Data are small integers chosen so that every reduction of every type has a
//! closed-form, exactly representable result for any rank count a real cluster has
//! (see [`data`]); a single wrong element anywhere is therefore detected, not hidden
//! behind a tolerance.
pub mod all_gather;
pub mod all_reduce;
pub mod alltoall;
pub mod broadcast;
pub mod data;
pub mod pattern;
pub mod reduce;
pub mod reduce_scatter;
pub mod sendrecv;

use crate::kinds::{CollKind, Dtype, RedOp};
pub use pattern::{Mismatch, Pattern, Run, Source};

/// What a collective needs to know about one call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Ranks in the group.
    pub n: usize,
    /// Elements of the message size (nccl-tests' count).
    pub count: usize,
    pub dtype: Dtype,
    pub op: RedOp,
    pub root: usize,
}

impl Params {
    /// Elements per rank for the collectives that split the message.
    pub fn chunk(&self) -> usize {
        self.count / self.n
    }
}

/// Elements of each buffer a rank needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub send: usize,
    pub recv: usize,
}

impl Layout {
    /// The one buffer of an in-place call.
    pub fn in_place(&self) -> usize {
        self.send.max(self.recv)
    }
}

/// One collective's row of the table.
pub trait Collective: Sync {
    fn kind(&self) -> CollKind;
    /// Whether the message must split evenly over the ranks.
    fn splits(&self) -> bool {
        false
    }
    fn layout(&self, p: &Params) -> Layout;
    /// busbw = algbw × this (nccl-tests' convention, its doc/PERFORMANCE.md).
    fn bus_factor(&self, n: usize) -> f64;
    /// What `rank`'s send buffer ([`Layout::send`] elements) holds before the call.
    fn input(&self, p: &Params, rank: usize) -> Pattern;
    /// What `rank`'s single in-place buffer ([`Layout::in_place`] elements) holds
    /// before the call.
    fn in_place_input(&self, p: &Params, rank: usize) -> Pattern {
        self.input(p, rank)
    }
    /// What `rank`'s output (the receive buffer, or the in-place buffer) must hold
    /// after the call; elements outside the runs are not checked. `rs_offset` is where
    /// an in-place reduce_scatter leaves its chunk, in elements.
    fn expected(&self, p: &Params, rank: usize, in_place: bool, rs_offset: usize) -> Pattern;
}

/// Every collective, in nccl-tests' order.
pub fn table() -> [&'static dyn Collective; 7] {
    [
        &all_reduce::AllReduce,
        &all_gather::AllGather,
        &reduce_scatter::ReduceScatter,
        &broadcast::Broadcast,
        &reduce::Reduce,
        &alltoall::AllToAll,
        &sendrecv::SendRecv,
    ]
}

/// The table row for `kind`.
pub fn get(kind: CollKind) -> &'static dyn Collective {
    match kind {
        CollKind::AllReduce => &all_reduce::AllReduce,
        CollKind::AllGather => &all_gather::AllGather,
        CollKind::ReduceScatter => &reduce_scatter::ReduceScatter,
        CollKind::Broadcast => &broadcast::Broadcast,
        CollKind::Reduce => &reduce::Reduce,
        CollKind::AllToAll => &alltoall::AllToAll,
        CollKind::SendRecv => &sendrecv::SendRecv,
    }
}

/// (n − 1) / n, the factor of the collectives where each rank gets n − 1 chunks.
pub fn n_minus_one_over_n(n: usize) -> f64 {
    if n <= 1 {
        0.0
    } else {
        (n - 1) as f64 / n as f64
    }
}

/// nccl-tests' algbw and busbw in GB/s for a message of `bytes` taking `seconds`.
pub fn bandwidths(kind: CollKind, bytes: u64, seconds: f64, n: usize) -> (f64, f64) {
    let alg = crate::units::GBps::from_bytes_secs(bytes, seconds).0;
    (alg, alg * get(kind).bus_factor(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_match_nccl_tests() {
        for n in [1usize, 2, 3, 4, 8] {
            let nf = n as f64;
            let ar = if n == 1 { 0.0 } else { 2.0 * (nf - 1.0) / nf };
            let ag = if n == 1 { 0.0 } else { (nf - 1.0) / nf };
            assert_eq!(
                get(CollKind::AllReduce).bus_factor(n),
                ar,
                "all_reduce n={n}"
            );
            for k in [
                CollKind::AllGather,
                CollKind::ReduceScatter,
                CollKind::AllToAll,
            ] {
                assert_eq!(get(k).bus_factor(n), ag, "{k} n={n}");
            }
            for k in [CollKind::Broadcast, CollKind::Reduce, CollKind::SendRecv] {
                assert_eq!(get(k).bus_factor(n), 1.0, "{k} n={n}");
            }
        }
    }

    #[test]
    fn bandwidth_formula_is_nccl_tests() {
        // nccl-tests: algbw = count*typesize/1e9/sec; busbw = algbw * factor.
        let (alg, bus) = bandwidths(CollKind::AllReduce, 1 << 30, 0.01, 8);
        assert!((alg - (1u64 << 30) as f64 / 1e9 / 0.01).abs() < 1e-9);
        assert!((bus - alg * 2.0 * 7.0 / 8.0).abs() < 1e-9);
    }

    /// Simulate every collective in plain Rust for n ranks (what a correct MPI or
    /// NCCL would compute) and check that the table's expectations agree with it.
    fn simulate(kind: CollKind, p: &Params, in_place: bool) -> Vec<Vec<Option<f64>>> {
        let c = get(kind);
        let l = c.layout(p);
        let n = p.n;
        let chunk = p.chunk();
        let inputs: Vec<Vec<f64>> = (0..n)
            .map(|r| {
                let len = if in_place { l.in_place() } else { l.send };
                (0..len)
                    .map(|i| {
                        let pat = if in_place {
                            c.in_place_input(p, r)
                        } else {
                            c.input(p, r)
                        };
                        // An input buffer is written whole: poison where no data.
                        pat.at(i).expect("input patterns cover their buffer")
                    })
                    .collect()
            })
            .collect();
        let red = |vals: Vec<f64>| data::reduce_values(p.op, p.dtype, &vals, n);
        (0..n)
            .map(|r| {
                let mut out: Vec<Option<f64>> =
                    vec![None; if in_place { l.in_place() } else { l.recv }];
                match kind {
                    CollKind::AllReduce => {
                        for (i, o) in out.iter_mut().enumerate() {
                            *o = Some(red((0..n).map(|q| inputs[q][i]).collect()));
                        }
                    }
                    CollKind::AllGather => {
                        for q in 0..n {
                            for j in 0..chunk {
                                let src = if in_place { q * chunk + j } else { j };
                                out[q * chunk + j] = Some(inputs[q][src]);
                            }
                        }
                    }
                    CollKind::ReduceScatter => {
                        for j in 0..chunk {
                            let v = red((0..n).map(|q| inputs[q][r * chunk + j]).collect());
                            out[if in_place { r * chunk + j } else { j }] = Some(v);
                        }
                    }
                    CollKind::Broadcast => {
                        for (i, o) in out.iter_mut().enumerate() {
                            *o = Some(inputs[p.root][i]);
                        }
                    }
                    CollKind::Reduce => {
                        if r == p.root {
                            for (i, o) in out.iter_mut().enumerate() {
                                *o = Some(red((0..n).map(|q| inputs[q][i]).collect()));
                            }
                        }
                    }
                    CollKind::AllToAll => {
                        for q in 0..n {
                            for j in 0..chunk {
                                out[q * chunk + j] = Some(inputs[q][r * chunk + j]);
                            }
                        }
                    }
                    CollKind::SendRecv => {
                        let from = (r + n - 1) % n;
                        for (i, o) in out.iter_mut().enumerate() {
                            *o = Some(inputs[from][i]);
                        }
                    }
                }
                out
            })
            .collect()
    }

    #[test]
    fn expectations_agree_with_a_reference_simulation() {
        for n in [1usize, 2, 3, 4, 8] {
            for kind in CollKind::ALL {
                for dtype in Dtype::ALL {
                    let ops: Vec<RedOp> = if kind.reduces() {
                        RedOp::ALL.to_vec()
                    } else {
                        vec![RedOp::Sum]
                    };
                    for op in ops {
                        for in_place in [false, true] {
                            let p = Params {
                                n,
                                count: 24 * n,
                                dtype,
                                op,
                                root: n / 2,
                            };
                            let sim = simulate(kind, &p, in_place);
                            let c = get(kind);
                            let rs_off = p.rank_chunk_offset_for_test(in_place);
                            for (r, out) in sim.iter().enumerate() {
                                let pat = c.expected(&p, r, in_place, rs_off(r));
                                let len = out.len();
                                assert!(pat.end() <= len, "{kind} expects past its buffer");
                                for (i, want) in out.iter().enumerate() {
                                    let exp = pat.at(i);
                                    if let (Some(w), Some(e)) = (want, exp) {
                                        assert!(
                                            data::matches(dtype, op, data::roundtrip(dtype, *w), e),
                                            "{kind} {dtype} {op:?} n={n} in_place={in_place} rank {r} elem {i}: sim {w} table {e}"
                                        );
                                    }
                                    if exp.is_some() {
                                        assert!(
                                            want.is_some(),
                                            "{kind} checks element {i} the call does not write"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    impl Params {
        /// NCCL's in-place reduce_scatter offset (rank × chunk), as the simulation does.
        fn rank_chunk_offset_for_test(&self, _in_place: bool) -> impl Fn(usize) -> usize {
            let chunk = self.chunk();
            move |r| r * chunk
        }
    }

    #[test]
    fn a_single_flipped_element_is_counted() {
        let p = Params {
            n: 4,
            count: 64,
            dtype: Dtype::F32,
            op: RedOp::Sum,
            root: 0,
        };
        let c = get(CollKind::AllReduce);
        let want = c.expected(&p, 0, false, 0);
        let mut got = vec![0u8; 64 * 4];
        pattern::fill_host(&want, &mut got).unwrap();
        assert_eq!(pattern::check_host(&want, &got).unwrap().wrong, 0);
        got[17 * 4] ^= 0x01;
        let m = pattern::check_host(&want, &got).unwrap();
        assert_eq!((m.wrong, m.first), (1, Some(17)));
    }

    #[test]
    fn input_patterns_cover_their_buffers_and_stay_inside() {
        for n in [1usize, 2, 5] {
            for kind in CollKind::ALL {
                let p = Params {
                    n,
                    count: 12 * n,
                    dtype: Dtype::I32,
                    op: RedOp::Sum,
                    root: n - 1,
                };
                let c = get(kind);
                let l = c.layout(&p);
                for r in 0..n {
                    for (pat, len) in [
                        (c.input(&p, r), l.send),
                        (c.in_place_input(&p, r), l.in_place()),
                    ] {
                        assert_eq!(pat.elements(), len, "{kind} n={n} rank {r}");
                        assert!((0..len).all(|i| pat.at(i).is_some()), "{kind} gap");
                    }
                }
            }
        }
    }
}
