//! reduce: the reduction of all ranks' buffers lands on the root only. busbw factor 1.
use super::{Collective, Layout, Params, Pattern, Prims, Source};
use anyhow::Result;

pub struct Reduce;

impl Collective for Reduce {
    fn layout(&self, p: &Params) -> Layout {
        Layout::same(p.count)
    }
    fn needs(&self, p: &Params, rank: usize) -> Layout {
        // Only the root gets the result.
        Layout {
            send: p.count,
            recv: if rank == p.root { p.count } else { 0 },
        }
    }
    fn bus_factor(&self, _n: usize) -> f64 {
        1.0
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        Pattern::one(*p, 0, p.count, Source::ReduceInput { rank })
    }
    fn expected(&self, p: &Params, rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        let len = if rank == p.root { p.count } else { 0 };
        Pattern::one(*p, 0, len, Source::ReduceExpected)
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.reduce(p.count, p.root)
    }
}
