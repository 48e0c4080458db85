//! [`Prims`]: what NCCL and MPI both offer, the operations a collective's `launch`
//! maps itself onto. Each backend implements them once, over one rank's call whose
//! buffers are already laid out (`backend::Call::place`, from the collective's sizes
//! and in-place offsets): a primitive's input is the call's send buffer (in place, the
//! one buffer from the input's offset), its output the receive buffer (in place, from
//! the output's offset). Element type and reduction are the call's; counts and
//! offsets are in elements; peers and roots are ranks of the group.
//!
//! `all_to_all` and `send_recv` default to a [`Prims::group`] of point-to-point
//! transfers, as nccl-tests builds them (and gather and scatter) from grouped
//! `ncclSend`/`ncclRecv`; a backend with a native call of its own (MPI) overrides them.
use anyhow::Result;

/// One point-to-point transfer of a [`Prims::group`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2p {
    /// Send `count` elements of the input from element `at` to `peer`.
    Send {
        peer: usize,
        at: usize,
        count: usize,
    },
    /// Receive `count` elements from `peer` into the output at element `at`.
    Recv {
        peer: usize,
        at: usize,
        count: usize,
    },
}

/// The primitives of one rank's call (see the module header).
pub trait Prims {
    /// Ranks in the group.
    fn ranks(&self) -> usize;
    /// Every rank's output: the reduction of every rank's `count` input elements.
    fn all_reduce(&mut self, count: usize) -> Result<()>;
    /// Every rank's output: every rank's `chunk` input elements, in rank order.
    fn all_gather(&mut self, chunk: usize) -> Result<()>;
    /// Rank r's output: the reduction of every rank's input chunk r (`chunk` elements).
    fn reduce_scatter(&mut self, chunk: usize) -> Result<()>;
    /// Every rank's output: `root`'s `count` input elements.
    fn broadcast(&mut self, count: usize, root: usize) -> Result<()>;
    /// `root`'s output: the reduction of every rank's `count` input elements.
    fn reduce(&mut self, count: usize, root: usize) -> Result<()>;
    /// The transfers of `ops`, run together (one NCCL group; MPI requests waited for
    /// together), so that they cannot wait on one another.
    fn group(&mut self, ops: &[P2p]) -> Result<()>;
    /// Rank r's input chunk q (`chunk` elements) becomes rank q's output chunk r.
    fn all_to_all(&mut self, chunk: usize) -> Result<()> {
        let ops: Vec<P2p> = (0..self.ranks())
            .flat_map(|peer| {
                let at = peer * chunk;
                [
                    P2p::Send {
                        peer,
                        at,
                        count: chunk,
                    },
                    P2p::Recv {
                        peer,
                        at,
                        count: chunk,
                    },
                ]
            })
            .collect();
        self.group(&ops)
    }
    /// Send `count` input elements to `to` while receiving as many from `from`.
    fn send_recv(&mut self, count: usize, to: usize, from: usize) -> Result<()> {
        self.group(&[
            P2p::Send {
                peer: to,
                at: 0,
                count,
            },
            P2p::Recv {
                peer: from,
                at: 0,
                count,
            },
        ])
    }
}
