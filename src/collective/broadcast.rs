//! broadcast: the root's buffer reaches every rank. busbw factor 1.
use super::{Collective, Layout, Params, Pattern, Prims, Source};
use anyhow::Result;

pub struct Broadcast;

impl Collective for Broadcast {
    fn layout(&self, p: &Params) -> Layout {
        Layout::same(p.count)
    }
    fn needs(&self, p: &Params, rank: usize) -> Layout {
        // Only the root reads its send buffer.
        Layout {
            send: if rank == p.root { p.count } else { 0 },
            recv: p.count,
        }
    }
    fn bus_factor(&self, _n: usize) -> f64 {
        1.0
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        let src = if rank == p.root {
            Source::Plain { rank }
        } else {
            Source::Poison
        };
        Pattern::one(*p, 0, p.count, src)
    }
    fn expected(&self, p: &Params, _rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        Pattern::one(*p, 0, p.count, Source::Plain { rank: p.root })
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.broadcast(p.count, p.root)
    }
}
