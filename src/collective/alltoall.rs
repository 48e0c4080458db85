//! alltoall: rank r's block q (count/n elements) goes to rank q, which stores it as
//! block r. busbw factor (n−1)/n.
use super::{Collective, Layout, Params, Pattern, Prims, Run, Source};
use anyhow::Result;

pub struct AllToAll;

impl Collective for AllToAll {
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
    fn in_place_from_copy(&self) -> bool {
        true
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        Pattern::one(*p, 0, p.chunk() * p.n, Source::Plain { rank })
    }
    fn expected(&self, p: &Params, rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        // Block q comes from rank q: its block for this rank.
        let c = p.chunk();
        let runs = (0..p.n)
            .map(|q| Run::new(q * c, c, Source::Plain { rank: q }, rank * c))
            .collect();
        Pattern::new(*p, runs)
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.all_to_all(p.chunk())
    }
}
