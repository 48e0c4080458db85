//! all_reduce: every rank ends with the reduction of all ranks' buffers.
//! busbw factor 2(n−1)/n: a ring sends and receives 2(n−1)/n of the data per rank.
use super::{Collective, Layout, Params, Pattern, Prims, Source};
use anyhow::Result;

pub struct AllReduce;

impl Collective for AllReduce {
    fn layout(&self, p: &Params) -> Layout {
        Layout::same(p.count)
    }
    fn bus_factor(&self, n: usize) -> f64 {
        2.0 * super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        Pattern::one(*p, 0, p.count, Source::ReduceInput { rank })
    }
    fn expected(&self, p: &Params, _rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        Pattern::one(*p, 0, p.count, Source::ReduceExpected)
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.all_reduce(p.count)
    }
}
