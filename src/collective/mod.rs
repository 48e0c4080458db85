//! Collectives as a table (after nccl-tests): each collective is one file that knows
//! its buffer sizes for a message, its bus-bandwidth factor, each rank's input values,
//! the exact expected output and its launch, in the [`Prims`] that both backends
//! implement. Adding a collective touches only its file and its line of the table
//! (`kinds::collective_table`), from which [`get`] and `CollKind` are made.
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
pub mod prims;
pub mod reduce;
pub mod reduce_scatter;
pub mod sendrecv;

use crate::kinds::{CollKind, Dtype, RedOp};
use anyhow::Result;
pub use pattern::{Mismatch, Pattern, Run, Source};
pub use prims::{P2p, Prims};

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
    /// `count` elements in and `count` out.
    pub fn same(count: usize) -> Layout {
        Layout {
            send: count,
            recv: count,
        }
    }
    /// The one buffer of an in-place call.
    pub fn in_place(&self) -> usize {
        self.send.max(self.recv)
    }
}

/// One collective's row of the table.
pub trait Collective: Sync {
    /// Whether the message must split evenly over the ranks.
    fn splits(&self) -> bool {
        false
    }
    /// Elements of each buffer every rank allocates (nccl-tests' sizes).
    fn layout(&self, p: &Params) -> Layout;
    /// Elements `rank`'s call reads from its send buffer and writes to its receive
    /// buffer: [`Collective::layout`], less where only the root reads or writes.
    fn needs(&self, p: &Params, _rank: usize) -> Layout {
        self.layout(p)
    }
    /// In place: where `rank`'s input and output start in the one buffer, in
    /// elements (NCCL's convention: all_gather's input is this rank's chunk of it).
    fn in_place_at(&self, _p: &Params, _rank: usize) -> (usize, usize) {
        (0, 0)
    }
    /// In place: whether the call's sends read what its receives overwrite, so that
    /// a backend without a native in-place form must send from a copy.
    fn in_place_from_copy(&self) -> bool {
        false
    }
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
    /// `rank`'s part of one call, in the primitives both backends offer.
    fn launch(&self, x: &mut dyn Prims, p: &Params, rank: usize) -> Result<()>;
}

/// [`get`] from the lines of `kinds::collective_table`.
macro_rules! collective_rows {
    ($($kind:ident $file:ident $name:literal $reduces:literal $rooted:literal,)*) => {
        /// The table row for `kind`.
        pub fn get(kind: CollKind) -> &'static dyn Collective {
            match kind {
                $(CollKind::$kind => &$file::$kind,)*
            }
        }
    };
}
crate::kinds::collective_table!(collective_rows);

/// Every collective, in the table's order (nccl-tests').
pub fn table() -> [&'static dyn Collective; CollKind::ALL.len()] {
    CollKind::ALL.map(get)
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
    fn only_the_collectives_that_cut_the_message_per_rank_split_it() {
        // nccl-tests: all_gather, reduce_scatter and alltoall move count/n elements a
        // rank; the others take any count.
        for k in CollKind::ALL {
            let splits = matches!(
                k,
                CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll
            );
            assert_eq!(get(k).splits(), splits, "{k}");
        }
    }

    #[test]
    fn only_alltoall_and_sendrecv_send_in_place_from_a_copy() {
        // In place, their receives overwrite blocks the same call still sends; every
        // other collective has an in-place form that NCCL and MPI (MPI_IN_PLACE) run
        // directly, where a copy would only cost memory and time.
        for k in CollKind::ALL {
            let copy = matches!(k, CollKind::AllToAll | CollKind::SendRecv);
            assert_eq!(get(k).in_place_from_copy(), copy, "{k}");
        }
    }

    #[test]
    fn bandwidth_formula_is_nccl_tests() {
        // nccl-tests: algbw = count*typesize/1e9/sec; busbw = algbw * factor.
        let (alg, bus) = bandwidths(CollKind::AllReduce, 1 << 30, 0.01, 8);
        assert!((alg - (1u64 << 30) as f64 / 1e9 / 0.01).abs() < 1e-9);
        assert!((bus - alg * 2.0 * 7.0 / 8.0).abs() < 1e-9);
    }

    /// One primitive of one rank's launch, as [`Recorder`] saw it.
    #[derive(Clone, Debug, PartialEq)]
    enum Prim {
        AllReduce(usize),
        AllGather(usize),
        ReduceScatter(usize),
        Broadcast(usize, usize),
        Reduce(usize, usize),
        Group(Vec<P2p>),
    }

    /// Records one rank's primitives; all_to_all and send_recv stay the groups of
    /// transfers they default to (what the NCCL backend runs).
    struct Recorder {
        n: usize,
        prims: Vec<Prim>,
    }

    impl Prims for Recorder {
        fn ranks(&self) -> usize {
            self.n
        }
        fn all_reduce(&mut self, count: usize) -> Result<()> {
            self.prims.push(Prim::AllReduce(count));
            Ok(())
        }
        fn all_gather(&mut self, chunk: usize) -> Result<()> {
            self.prims.push(Prim::AllGather(chunk));
            Ok(())
        }
        fn reduce_scatter(&mut self, chunk: usize) -> Result<()> {
            self.prims.push(Prim::ReduceScatter(chunk));
            Ok(())
        }
        fn broadcast(&mut self, count: usize, root: usize) -> Result<()> {
            self.prims.push(Prim::Broadcast(count, root));
            Ok(())
        }
        fn reduce(&mut self, count: usize, root: usize) -> Result<()> {
            self.prims.push(Prim::Reduce(count, root));
            Ok(())
        }
        fn group(&mut self, ops: &[P2p]) -> Result<()> {
            self.prims.push(Prim::Group(ops.to_vec()));
            Ok(())
        }
    }

    /// Run a collective's launch on every one of n ranks over a plain-Rust reference
    /// of the primitives (what a correct MPI or NCCL computes, with the table's
    /// buffer layout and NCCL's in-place offsets) and return each rank's output; an
    /// element the call does not write stays None. A launch that reads or writes
    /// outside what its `needs` say panics.
    fn simulate(c: &dyn Collective, p: &Params, in_place: bool) -> Vec<Vec<Option<f64>>> {
        let l = c.layout(p);
        let n = p.n;
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
        let launches: Vec<Vec<Prim>> = (0..n)
            .map(|r| {
                let mut x = Recorder { n, prims: vec![] };
                c.launch(&mut x, p, r).unwrap();
                x.prims
            })
            .collect();
        let steps = launches[0].len();
        assert!(launches.iter().all(|l| l.len() == steps), "ranks disagree");
        assert!(
            steps <= 1 || !in_place,
            "the reference reads an in-place input as it was before the call"
        );
        let at = |r: usize| {
            if in_place {
                c.in_place_at(p, r)
            } else {
                (0, 0)
            }
        };
        // Where rank q's input element i is, checked against what q's call may read.
        let input = |q: usize, i: usize| {
            assert!(in_place || i < c.needs(p, q).send, "reads past the input");
            inputs[q][at(q).0 + i]
        };
        let red = |i: usize| {
            data::reduce_values(
                p.op,
                p.dtype,
                &(0..n).map(|q| input(q, i)).collect::<Vec<_>>(),
                n,
            )
        };
        let mut outs: Vec<Vec<Option<f64>>> =
            vec![vec![None; if in_place { l.in_place() } else { l.recv }]; n];
        // Every rank's step-th primitive together (the index reads other ranks' too).
        #[allow(clippy::needless_range_loop)]
        for step in 0..steps {
            for (r, out) in outs.iter_mut().enumerate() {
                let need = c.needs(p, r).recv;
                let mut put = |i: usize, v: f64| {
                    assert!(in_place || i < need, "writes past the output");
                    out[at(r).1 + i] = Some(v);
                };
                match &launches[r][step] {
                    Prim::AllReduce(count) => (0..*count).for_each(|i| put(i, red(i))),
                    Prim::AllGather(chunk) => {
                        for q in 0..n {
                            (0..*chunk).for_each(|j| put(q * chunk + j, input(q, j)));
                        }
                    }
                    Prim::ReduceScatter(chunk) => {
                        (0..*chunk).for_each(|j| put(j, red(r * chunk + j)));
                    }
                    Prim::Broadcast(count, root) => {
                        (0..*count).for_each(|i| put(i, input(*root, i)));
                    }
                    Prim::Reduce(count, root) => {
                        if r == *root {
                            (0..*count).for_each(|i| put(i, red(i)));
                        }
                    }
                    Prim::Group(ops) => {
                        // The m-th receive from q gets q's m-th send to this rank.
                        let mut taken = vec![0usize; n];
                        for op in ops {
                            let P2p::Recv { peer, at, count } = *op else {
                                continue;
                            };
                            let Prim::Group(theirs) = &launches[peer][step] else {
                                panic!("rank {peer} is not in a group at step {step}");
                            };
                            let sends: Vec<(usize, usize)> = theirs
                                .iter()
                                .filter_map(|o| match *o {
                                    P2p::Send {
                                        peer: to,
                                        at,
                                        count,
                                    } if to == r => Some((at, count)),
                                    _ => None,
                                })
                                .collect();
                            let (from, len) = sends[taken[peer]];
                            taken[peer] += 1;
                            assert_eq!(len, count, "send and receive sizes differ");
                            (0..count).for_each(|i| put(at + i, input(peer, from + i)));
                        }
                    }
                }
            }
        }
        outs
    }

    /// The table's expectations of `c` (named `kind`) agree with [`simulate`].
    fn agrees_with_the_reference(c: &dyn Collective, kind: &str, reduces: bool) {
        for n in [1usize, 2, 3, 4, 8] {
            for dtype in Dtype::ALL {
                let ops: Vec<RedOp> = if reduces {
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
                        let sim = simulate(c, &p, in_place);
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
                                if want.is_some() {
                                    assert!(
                                        exp.is_some(),
                                        "{kind} n={n} in_place={in_place} rank {r} does not check element {i} the call writes"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn expectations_agree_with_a_reference_simulation() {
        for kind in CollKind::ALL {
            agrees_with_the_reference(get(kind), kind.name(), kind.reduces());
        }
    }

    /// What adding a collective takes, shown on one the table does not list: gather
    /// as nccl-tests builds it (every rank sends its chunk to the root, which
    /// receives rank q's chunk at q in the same group). This impl is all of it: as
    /// `src/collective/gather.rs` with its line in `kinds::collective_table`
    /// (`Gather gather "gather" false true`) both backends would run it (NCCL as one
    /// group of ncclSend/ncclRecv, MPI as requests waited for together), the sweep
    /// would size, fill, time and check it, and the test above would hold it to
    /// this reference.
    struct Gather;

    impl Collective for Gather {
        fn splits(&self) -> bool {
            true
        }
        fn layout(&self, p: &Params) -> Layout {
            all_gather::AllGather.layout(p)
        }
        fn needs(&self, p: &Params, rank: usize) -> Layout {
            let recv = if rank == p.root { p.chunk() * p.n } else { 0 };
            Layout {
                send: p.chunk(),
                recv,
            }
        }
        fn in_place_at(&self, p: &Params, rank: usize) -> (usize, usize) {
            (rank * p.chunk(), 0)
        }
        fn bus_factor(&self, n: usize) -> f64 {
            n_minus_one_over_n(n)
        }
        fn input(&self, p: &Params, rank: usize) -> Pattern {
            all_gather::AllGather.input(p, rank)
        }
        fn in_place_input(&self, p: &Params, rank: usize) -> Pattern {
            all_gather::AllGather.in_place_input(p, rank)
        }
        fn expected(&self, p: &Params, rank: usize, in_place: bool, rs: usize) -> Pattern {
            if rank == p.root {
                all_gather::AllGather.expected(p, rank, in_place, rs)
            } else {
                Pattern::one(*p, 0, 0, Source::Poison)
            }
        }
        fn launch(&self, x: &mut dyn Prims, p: &Params, rank: usize) -> Result<()> {
            let c = p.chunk();
            let mut ops = vec![P2p::Send {
                peer: p.root,
                at: 0,
                count: c,
            }];
            if rank == p.root {
                ops.extend((0..p.n).map(|q| P2p::Recv {
                    peer: q,
                    at: q * c,
                    count: c,
                }));
            }
            x.group(&ops)
        }
    }

    #[test]
    fn a_collective_is_its_file_gather_shown() {
        agrees_with_the_reference(&Gather, "gather", false);
        // A wrong launch is caught: the root receiving the chunks in reverse.
        struct Reversed;
        impl Collective for Reversed {
            fn layout(&self, p: &Params) -> Layout {
                Gather.layout(p)
            }
            fn bus_factor(&self, n: usize) -> f64 {
                Gather.bus_factor(n)
            }
            fn input(&self, p: &Params, rank: usize) -> Pattern {
                Gather.input(p, rank)
            }
            fn expected(&self, p: &Params, rank: usize, ip: bool, rs: usize) -> Pattern {
                Gather.expected(p, rank, ip, rs)
            }
            fn launch(&self, x: &mut dyn Prims, p: &Params, rank: usize) -> Result<()> {
                let mut rec = Recorder {
                    n: p.n,
                    prims: vec![],
                };
                Gather.launch(&mut rec, p, rank)?;
                let Some(Prim::Group(mut ops)) = rec.prims.pop() else {
                    unreachable!()
                };
                let n = p.n;
                for op in &mut ops {
                    if let P2p::Recv { peer, .. } = op {
                        *peer = n - 1 - *peer;
                    }
                }
                x.group(&ops)
            }
        }
        let p = Params {
            n: 4,
            count: 16,
            dtype: Dtype::I32,
            op: RedOp::Sum,
            root: 1,
        };
        let out = simulate(&Reversed, &p, false);
        let want = Reversed.expected(&p, 1, false, 0);
        let wrong = (0..16).filter(|&i| out[1][i] != want.at(i)).count();
        assert_eq!(wrong, 16);
    }

    impl Params {
        /// NCCL's in-place reduce_scatter offset (rank × chunk), as the simulation does.
        fn rank_chunk_offset_for_test(&self, _in_place: bool) -> impl Fn(usize) -> usize {
            let chunk = self.chunk();
            move |r| r * chunk
        }
    }

    /// Every rank's buffer before the call, as the sweep's check leaves it: the input
    /// (the one buffer, in place), and out of place a send buffer with the input and a
    /// receive buffer poisoned. `(send, recv)` bytes; in place `send` is empty.
    fn before_the_call(
        c: &dyn Collective,
        p: &Params,
        rank: usize,
        in_place: bool,
    ) -> (Vec<u8>, Vec<u8>) {
        let (l, es) = (c.layout(p), p.dtype.size());
        if in_place {
            let mut buf = vec![0u8; l.in_place() * es];
            pattern::fill_host(&c.in_place_input(p, rank), &mut buf).unwrap();
            return (Vec::new(), buf);
        }
        let mut send = vec![0u8; l.send * es];
        pattern::fill_host(&c.input(p, rank), &mut send).unwrap();
        let mut recv = vec![0u8; l.recv * es];
        pattern::fill_host(&Pattern::one(*p, 0, l.recv, Source::Poison), &mut recv).unwrap();
        (send, recv)
    }

    /// The class of bugs where a call that moves no data passes its check (an in-place
    /// input that already holds the expected output, a check of the input buffer, a
    /// backend that returns without running): for every collective, in and out of
    /// place, every rank count from 2 to 9, every type and op, two roots and two
    /// message lengths, a call that writes nothing, or copies its input into its
    /// output (at the start, or where this rank's own block goes), fails the check on
    /// every rank that receives data from another rank: all of them, but a broadcast's
    /// root (its output is its own input) and a reduce's other ranks (nothing is
    /// checked there).
    ///
    /// One limit is the data's, and inherent to integer averages: a check over fewer
    /// elements than one period of the op's input ([`Source::period`]) may find, on
    /// one rank, inputs equal to the result (two elements `[0, 1]` and `[1, 2]`
    /// average to `[0, 1]` in i32). There the call as a whole still fails (another
    /// rank's check does), which is asserted for every case.
    #[test]
    fn a_call_that_moves_no_data_fails_the_check_on_every_receiving_rank() {
        let mut cases = 0;
        for kind in CollKind::ALL {
            let c = get(kind);
            let ops: &[RedOp] = if kind.reduces() {
                &RedOp::ALL
            } else {
                &[RedOp::Sum]
            };
            for n in 2..=9usize {
                for (dtype, &op, root, per_rank) in Dtype::ALL
                    .iter()
                    .flat_map(|&d| ops.iter().map(move |op| (d, op)))
                    .flat_map(|(d, op)| [(d, op, 0), (d, op, n - 1)])
                    .flat_map(|(d, op, root)| [(d, op, root, 1), (d, op, root, 66)])
                {
                    let p = Params {
                        n,
                        count: per_rank * n,
                        dtype,
                        op,
                        root,
                    };
                    for in_place in [false, true] {
                        // per fake call (index), the ranks whose check failed
                        let mut failed: Vec<usize> = Vec::new();
                        for rank in 0..n {
                            let fails = no_data_moved(c, kind, &p, rank, in_place);
                            failed.resize(fails.len(), 0);
                            for (k, f) in fails.iter().enumerate() {
                                failed[k] += usize::from(*f);
                            }
                        }
                        let what = format!(
                            "{kind} {dtype} {op:?} n={n} count={} root={root} {}",
                            p.count,
                            if in_place { "in place" } else { "out of place" }
                        );
                        assert!(
                            failed.iter().all(|&f| f > 0),
                            "{what}: a fake call passed on every rank"
                        );
                        cases += failed.len();
                    }
                }
            }
        }
        assert!(cases > 10_000, "{cases} fake calls checked");
    }

    /// [`a_call_that_moves_no_data_fails_the_check_on_every_receiving_rank`] for one
    /// rank: per fake call, whether this rank's check failed; asserts that it did on
    /// a receiving rank, but for the data's one limit (a check shorter than a period).
    fn no_data_moved(
        c: &dyn Collective,
        kind: CollKind,
        p: &Params,
        rank: usize,
        in_place: bool,
    ) -> Vec<bool> {
        let receives = match kind {
            CollKind::Broadcast => rank != p.root,
            CollKind::Reduce => rank == p.root,
            _ => true,
        };
        let period = Source::ReduceInput { rank: 0 }.period(p);
        let es = p.dtype.size();
        let (send, untouched) = before_the_call(c, p, rank, in_place);
        let mut fails = Vec::new();
        // Where MPI (0) and NCCL (rank × chunk) leave an in-place reduce_scatter's chunk.
        for rs_offset in [0, rank * p.chunk()] {
            let want = c.expected(p, rank, in_place, rs_offset);
            let mut fakes = vec![("writes nothing", untouched.clone())];
            if !in_place {
                let own = c.in_place_at(p, rank).0 * es;
                for (how, at) in [
                    ("copies its input to the start", 0),
                    ("copies its input to its own block", own),
                ] {
                    let mut out = untouched.clone();
                    let len = send.len().min(out.len().saturating_sub(at));
                    out[at..at + len].copy_from_slice(&send[..len]);
                    fakes.push((how, out));
                }
            }
            for (how, out) in fakes {
                let wrong = if want.elements() == 0 {
                    assert!(!receives, "{kind} rank {rank} of {} checks nothing", p.n);
                    0
                } else {
                    pattern::check_host(&want, &out).unwrap().wrong
                };
                let short = kind.reduces() && want.elements() < period;
                assert!(
                    wrong > 0 || !receives || short,
                    "{kind} {} {:?} n={} count={} root={} {} rank {rank}: a call that {how} passes its check",
                    p.dtype,
                    p.op,
                    p.n,
                    p.count,
                    p.root,
                    if in_place { "in place" } else { "out of place" },
                );
                fails.push(wrong > 0);
            }
        }
        fails
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
