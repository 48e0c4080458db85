//! alltoall: rank r's block q (count/n elements) goes to rank q, which stores it as
//! block r. busbw factor (n−1)/n.
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

pub struct AllToAll;

impl Collective for AllToAll {
    fn kind(&self) -> CollKind {
        CollKind::AllToAll
    }
    fn splits(&self) -> bool {
        true
    }
    fn layout(&self, p: &Params) -> Layout {
        let all = p.chunk() * p.n;
        Layout {
            send: all,
            recv: all,
        }
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, _p: &Params, rank: usize, i: usize) -> Option<f64> {
        Some(data::plain_input(rank, i))
    }
    fn expected(
        &self,
        p: &Params,
        rank: usize,
        i: usize,
        _in_place: bool,
        _rs: usize,
    ) -> Option<f64> {
        let c = p.chunk();
        let (from, j) = (i / c, i % c);
        Some(data::plain_input(from, rank * c + j))
    }
}
