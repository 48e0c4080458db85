//! all_gather: each rank contributes count/n elements; every rank ends with all of
//! them in rank order. busbw factor (n−1)/n. In place, a rank's input is its own
//! chunk of the output buffer (NCCL's and MPI's convention alike).
use super::{Collective, Layout, Params, Pattern, Prims, Run, Source};
use anyhow::Result;

pub struct AllGather;

impl Collective for AllGather {
    fn splits(&self) -> bool {
        true
    }
    fn layout(&self, p: &Params) -> Layout {
        Layout {
            send: p.chunk(),
            recv: p.chunk() * p.n,
        }
    }
    fn in_place_at(&self, p: &Params, rank: usize) -> (usize, usize) {
        (rank * p.chunk(), 0)
    }
    fn bus_factor(&self, n: usize) -> f64 {
        super::n_minus_one_over_n(n)
    }
    fn input(&self, p: &Params, rank: usize) -> Pattern {
        let c = p.chunk();
        Pattern::new(*p, vec![Run::new(0, c, Source::Plain { rank }, rank * c)])
    }
    fn in_place_input(&self, p: &Params, rank: usize) -> Pattern {
        // This rank's chunk at its place; the rest is output, poisoned.
        let c = p.chunk();
        let runs = (0..p.n)
            .map(|q| {
                let src = if q == rank {
                    Source::Plain { rank }
                } else {
                    Source::Poison
                };
                Run::new(q * c, c, src, q * c)
            })
            .collect();
        Pattern::new(*p, runs)
    }
    fn expected(&self, p: &Params, _rank: usize, _in_place: bool, _rs: usize) -> Pattern {
        let c = p.chunk();
        let runs = (0..p.n)
            .map(|q| Run::new(q * c, c, Source::Plain { rank: q }, q * c))
            .collect();
        Pattern::new(*p, runs)
    }
    fn launch(&self, x: &mut dyn Prims, p: &Params, _rank: usize) -> Result<()> {
        x.all_gather(p.chunk())
    }
}
