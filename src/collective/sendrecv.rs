//! sendrecv: a ring neighbour exchange — every rank sends its buffer to rank r+1 and
//! receives rank r−1's, all at once. busbw factor 1.
use super::{Collective, Layout, Params, Pattern, Source};
use crate::kinds::CollKind;

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
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        Pattern::one(*p, 0, p.count, Source::Plain { rank })
    }
    fn expected(&self, p: &Params, rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        let from = (rank + p.n - 1) % p.n;
        Pattern::one(*p, 0, p.count, Source::Plain { rank: from })
    }
}
