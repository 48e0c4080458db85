//! reduce: the reduction of all ranks' buffers lands on the root only. busbw factor 1.
use super::{Collective, Layout, Params, Pattern, Source};
use crate::kinds::CollKind;

pub struct Reduce;

impl Collective for Reduce {
    fn kind(&self) -> CollKind {
        CollKind::Reduce
    }
    fn layout(&self, p: &Params) -> Layout {
        Layout {
            send: p.count,
            recv: p.count,
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
}
