//! sendrecv: a ring neighbour exchange — every rank sends its buffer to rank r+1 and
//! receives rank r−1's, all at once. busbw factor 1.
use super::{Collective, Layout, Params, Pattern, Prims, Source};
use anyhow::Result;

pub struct SendRecv;

impl Collective for SendRecv {
    fn layout(&self, p: &Params) -> Layout {
        Layout::same(p.count)
    }
    fn in_place_from_copy(&self) -> bool {
        true
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
    fn launch(&self, x: &mut dyn Prims, p: &Params, rank: usize) -> Result<()> {
        x.send_recv(p.count, (rank + 1) % p.n, (rank + p.n - 1) % p.n)
    }
}
