//! all_gather: each rank contributes count/n elements; every rank ends with all of
//! them in rank order. busbw factor (n−1)/n. In place, a rank's input is its own
//! chunk of the output buffer (NCCL's and MPI's convention alike).
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

pub struct AllGather;

impl Collective for AllGather {
    fn kind(&self) -> CollKind {
        CollKind::AllGather
    }
    fn splits(&self) -> bool {
        true
    }
    fn layout(&self, p: &Params) -> Layout {
        Layout {
            send: p.chunk(),
            recv: p.chunk() * p.n,
        }
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize, i: usize) -> Option<f64> {
        Some(data::plain_input(rank, rank * p.chunk() + i))
    }
    fn in_place_input(&self, p: &Params, rank: usize, i: usize) -> Option<f64> {
        let c = p.chunk();
        (i / c == rank).then(|| data::plain_input(rank, i))
    }
    fn expected(
        &self,
        p: &Params,
        _rank: usize,
        i: usize,
        _in_place: bool,
        _rs: usize,
    ) -> Option<f64> {
        Some(data::plain_input(i / p.chunk(), i))
    }
}
