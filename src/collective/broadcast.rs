//! broadcast: the root's buffer reaches every rank. busbw factor 1.
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

pub struct Broadcast;

impl Collective for Broadcast {
    fn kind(&self) -> CollKind {
        CollKind::Broadcast
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
        (rank == p.root).then(|| data::plain_input(rank, i))
    }
    fn expected(
        &self,
        p: &Params,
        _rank: usize,
        i: usize,
        _in_place: bool,
        _rs: usize,
    ) -> Option<f64> {
        Some(data::plain_input(p.root, i))
    }
}
