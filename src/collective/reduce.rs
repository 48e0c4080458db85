//! reduce: the reduction of all ranks' buffers lands on the root only. busbw factor 1.
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

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
    fn input(&self, p: &Params, rank: usize, i: usize) -> Option<f64> {
        Some(data::reduce_input(p.op, p.n, rank, i))
    }
    fn expected(
        &self,
        p: &Params,
        rank: usize,
        i: usize,
        _in_place: bool,
        _rs: usize,
    ) -> Option<f64> {
        (rank == p.root).then(|| data::reduce_expected(p.op, p.dtype, p.n, i))
    }
}
