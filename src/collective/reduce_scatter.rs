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
        Pattern::one(*p, 0, p.chunk() * p.n, Source::ReduceInput { rank })
    }
    fn expected(&self, p: &Params, rank: usize, in_place: bool, rs: usize) -> Pattern {
        let c = p.chunk();
        let start = if in_place { rs } else { 0 };
        Pattern::new(
            *p,
            vec![Run::new(start, c, Source::ReduceExpected, rank * c)],
        )
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.reduce_scatter(p.chunk())
    }
}
