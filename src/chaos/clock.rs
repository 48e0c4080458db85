//! Clock offsets between ranks, so events stamped on different hosts line up.
//!
//! At start rank 0 plays ping-pong with every other rank in turn ([`ROUNDS`] rounds):
//! it stamps `t0`, sends, the peer stamps `t_peer` on receipt and answers, rank 0
//! stamps `t1`. If the two legs take equally long, the peer's clock is ahead of rank
//! 0's by `t_peer - (t0 + t1) / 2`, with an error of at most half the round trip; the
//! sample with the smallest round trip is the most trustworthy and is the one kept
//! (NTP's rule). Rank 0 then tells each peer its offset and round trip.
use crate::chaos::events::unix_now;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Communicator, SimpleCommunicator};

/// Ping-pong rounds per rank.
pub const ROUNDS: usize = 8;

/// One ping-pong sample, all in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Rank 0's clock when it sent.
    pub t0: f64,
    /// The peer's clock when it received.
    pub t_peer: f64,
    /// Rank 0's clock when the answer came back.
    pub t1: f64,
}

/// (offset of the peer's clock over rank 0's, round trip) from the minimum-RTT
/// sample; (0, inf) without samples. Pure.
pub fn best_offset(samples: &[Sample]) -> (f64, f64) {
    samples
        .iter()
        .map(|s| (s.t_peer - (s.t0 + s.t1) / 2.0, s.t1 - s.t0))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0.0, f64::INFINITY))
}

/// Measure this rank's offset to rank 0 over `comm` (collective; every rank calls
/// it). Returns (offset, round trip) — (0, 0) on rank 0.
pub fn measure(comm: &SimpleCommunicator) -> (f64, f64) {
    let rank = comm.rank();
    let size = comm.size();
    if rank == 0 {
        for peer in 1..size {
            let p = comm.process_at_rank(peer);
            let mut samples = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                let t0 = unix_now();
                p.send(&t0);
                let (t_peer, _) = p.receive::<f64>();
                let t1 = unix_now();
                samples.push(Sample { t0, t_peer, t1 });
            }
            let (offset, rtt) = best_offset(&samples);
            p.send(&[offset, rtt][..]);
        }
        (0.0, 0.0)
    } else {
        let root = comm.process_at_rank(0);
        for _ in 0..ROUNDS {
            let (_t0, _) = root.receive::<f64>();
            let t = unix_now();
            root.send(&t);
        }
        let (v, _) = root.receive_vec::<f64>();
        match v.as_slice() {
            [o, r] => (*o, *r),
            _ => (0.0, f64::INFINITY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimum_round_trip_sample_gives_the_offset() {
        // Peer 2 s ahead; the first sample's answer was delayed 0.5 s on the way back.
        let s = [
            Sample {
                t0: 100.0,
                t_peer: 102.001,
                t1: 100.502,
            },
            Sample {
                t0: 101.0,
                t_peer: 103.001,
                t1: 101.002,
            },
        ];
        let (off, rtt) = best_offset(&s);
        assert!((off - 2.0).abs() < 1e-9, "{off}");
        assert!((rtt - 0.002).abs() < 1e-9);
        assert_eq!(best_offset(&[]).0, 0.0);
    }
}
