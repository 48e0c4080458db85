//! sendrecv: a ring neighbour exchange — every rank sends its buffer to rank r+1 and
//! receives rank r−1's, all at once. busbw factor 1.
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

pub struct SendRecv;

impl Collective for SendRecv {
    fn kind(&self) -> CollKind {
        CollKind::SendRecv
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
        Some(data::plain_input((rank + p.n - 1) % p.n, i))
    }
}
