//! reduce_scatter: the reduction of all ranks' count elements, scattered so rank r
//! keeps chunk r. busbw factor (n−1)/n. In place, NCCL leaves the chunk at offset
//! r·chunk of the buffer while MPI_IN_PLACE leaves it at 0: the backend says which
//! (`rs` offset, in elements).
use super::{Collective, Layout, Params, Pattern, Prims, Run, Source};
use anyhow::Result;

pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn splits(&self) -> bool {
        true
    }
    fn layout(&self, p: &Params) -> Layout {
        Layout {
            send: p.chunk() * p.n,
            recv: p.chunk(),
        }
    }
    fn in_place_at(&self, p: &Params, rank: usize) -> (usize, usize) {
        (0, rank * p.chunk())
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        let c = p.chunk();
        let runs = (0..p.n)
            .map(|q| Run::new(q * c, c, Source::ReduceInput { rank }, index(c, q)))
            .collect();
        Pattern::new(*p, runs)
    }
    fn expected(&self, p: &Params, rank: usize, in_place: bool, rs: usize) -> Pattern {
        let c = p.chunk();
        let start = if in_place { rs } else { 0 };
        Pattern::new(
            *p,
            vec![Run::new(start, c, Source::ReduceExpected, index(c, rank))],
        )
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.reduce_scatter(p.chunk())
    }
}

/// The data index where chunk `q` (of `c` elements) starts: `q·c + q·CHUNK_SKIP`.
/// Every chunk skips ahead in the data, so the ranks' roles in a max or min (which
/// rank holds the extreme, `collective::data`) differ between the chunks that
/// neighbouring ranks keep: with one element a rank and consecutive indices, each rank
/// of 3 held the min at its own element, and an in-place call that wrote nothing
/// passed on all of them (NCCL's offset). 65 makes a rank's own element `67·r` into the
/// data, and 67 is prime above every rotation length (≤ 64).
fn index(c: usize, q: usize) -> usize {
    const CHUNK_SKIP: usize = 65;
    q * c + q * CHUNK_SKIP
}
