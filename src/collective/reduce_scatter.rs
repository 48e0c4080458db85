//! reduce_scatter: the reduction of all ranks' count elements, scattered so rank r
//! keeps chunk r. busbw factor (n−1)/n. In place, NCCL leaves the chunk at offset
//! r·chunk of the buffer while MPI_IN_PLACE leaves it at 0: the backend says which
//! (`rs` offset, in elements).
use super::{data, Collective, Layout, Params};
use crate::backend::CollKind;

pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn kind(&self) -> CollKind {
        CollKind::ReduceScatter
    }
    fn splits(&self) -> bool {
        true
    }
    fn layout(&self, p: &Params) -> Layout {
        Layout {
            send: p.chunk() * p.n,
            recv: p.chunk(),
        }
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize, i: usize) -> Option<f64> {
        Some(data::reduce_input(p.op, p.n, rank, i))
    }
    fn expected(
        &self,
        p: &Params,
        rank: usize,
        i: usize,
        in_place: bool,
        rs: usize,
    ) -> Option<f64> {
        let c = p.chunk();
        let j = if in_place {
            if i < rs || i >= rs + c {
                return None;
            }
            i - rs
        } else {
            i
        };
        Some(data::reduce_expected(p.op, p.dtype, p.n, rank * c + j))
    }
}
