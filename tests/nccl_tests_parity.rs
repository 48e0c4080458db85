//! Parity with nccl-tests' bandwidth arithmetic, bit for bit.
//!
//! The formulas below are written from nccl-tests' documented conventions (see
//! nccl-tests' doc/PERFORMANCE.md), independently of burnin's collective table: each collective's
//! per-rank element count for a message of `size` bytes (nccl-tests rounds the split
//! collectives' per-rank count down to 16 bytes), the bytes that count for the
//! bandwidth, `algbw = bytes / 1e9 / seconds`, and `busbw = algbw × factor` with the
//! factor computed as nccl-tests does (`2(n−1)/n`, `(n−1)/n` or 1). burnin's
//! `collective::bandwidths` must give exactly the same two doubles for every
//! collective, rank count and size where the per-rank chunk is whole 16-byte blocks
//! (burnin refuses sizes that do not split evenly; nccl-tests silently rounds them).
use burnin::collective::bandwidths;
use burnin::kinds::CollKind;

/// nccl-tests' (algbw, busbw) in GB/s for `collective` with a message of `size` bytes
/// of `elt`-byte elements taking `sec` seconds on `n` ranks.
fn nccl_tests(collective: &str, size: u64, elt: u64, sec: f64, n: u64) -> (f64, f64) {
    let count = size / elt;
    // Per-rank count of the split collectives: count / n, rounded down to 16 bytes.
    let per_rank = (count / n) & !(16 / elt - 1);
    let (bytes, factor) = match collective {
        "all_reduce" => (count * elt, (2 * (n - 1)) as f64 / n as f64),
        "all_gather" | "reduce_scatter" | "alltoall" => {
            (per_rank * elt * n, (n - 1) as f64 / n as f64)
        }
        "broadcast" | "reduce" | "sendrecv" => (count * elt, 1.0),
        other => panic!("no nccl-tests formula for {other}"),
    };
    let algbw = bytes as f64 / 1.0E9 / sec;
    (algbw, algbw * factor)
}

const RANKS: [u64; 6] = [1, 2, 3, 4, 8, 16];

fn sizes(n: u64) -> Vec<u64> {
    // Whole 16-byte blocks per rank, from one block to 8 GiB-ish, plus odd multiples.
    let unit = 16 * n;
    let mut v = vec![unit, 3 * unit, 1000 * unit, 12_345 * unit];
    let mut s = unit;
    while s <= 8 << 30 {
        v.push(s);
        s *= 4;
    }
    v
}

const TIMES: [f64; 6] = [1.3e-6, 2.5e-5, 1.0e-3, 0.0123456789, 0.75, 3.0];

#[test]
fn algbw_and_busbw_equal_nccl_tests_for_every_collective_and_rank_count() {
    let mut checked = 0;
    for kind in CollKind::ALL {
        for n in RANKS {
            for size in sizes(n) {
                for elt in [1u64, 2, 4, 8] {
                    for sec in TIMES {
                        let want = nccl_tests(kind.name(), size, elt, sec, n);
                        let got = bandwidths(kind, size, sec, n as usize);
                        assert!(
                            got.0.to_bits() == want.0.to_bits() && got.1.to_bits() == want.1.to_bits(),
                            "{kind} n={n} size={size} elt={elt} sec={sec}: burnin {got:?} nccl-tests {want:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 5000, "{checked}");
}

#[test]
fn bus_factors_are_the_reference_ones() {
    // nccl-tests' doc/PERFORMANCE.md: all_reduce 2(n−1)/n; all_gather, reduce_scatter, alltoall
    // (n−1)/n; broadcast, reduce, sendrecv 1 — seen through busbw / algbw.
    for n in RANKS {
        let nf = n as f64;
        for kind in CollKind::ALL {
            let (alg, bus) = bandwidths(kind, 1 << 30, 0.5, n as usize);
            let factor = bus / alg;
            let want = match kind {
                CollKind::AllReduce => 2.0 * (nf - 1.0) / nf,
                CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll => {
                    (nf - 1.0) / nf
                }
                CollKind::Broadcast | CollKind::Reduce | CollKind::SendRecv => 1.0,
            };
            assert!(
                (factor - want).abs() < 1e-15,
                "{kind} n={n}: {factor} vs {want}"
            );
        }
    }
}

/// Where the two differ on purpose: nccl-tests rounds a split collective's per-rank
/// count down to 16 bytes, so a size that is not whole 16-byte blocks per rank moves
/// fewer bytes there (burnin's planner refuses such sizes instead).
#[test]
fn unaligned_split_sizes_are_where_nccl_tests_rounds_down() {
    let (nt_alg, _) = nccl_tests("all_gather", 24, 4, 1e-6, 2);
    let (b_alg, _) = bandwidths(CollKind::AllGather, 24, 1e-6, 2);
    // 24 B over 2 ranks = 12 B per rank -> nccl-tests moves 0 B; burnin counts 24 B.
    assert_eq!(nt_alg, 0.0);
    assert!(b_alg > 0.0);
}
