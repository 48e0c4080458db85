//! Buffer contents as runs of periodic values, so a buffer is filled and checked at
//! memory speed on the host and by one small kernel on a GPU, never element by element
//! through a closure.
//!
//! Every value [`data`] defines is periodic in the element index: sums repeat every 3
//! elements, max/min every `m·(100 / m)` (m = min(n, 64)), the data-movement pattern
//! every 101, products every n ranks. A collective therefore describes a buffer as a few [`Run`]s, each a range of
//! elements holding one [`Source`] at consecutive indices; a run becomes one table of
//! `period` values and a phase. The host replicates an encoded block of that table
//! (memcpy speed); the GPU kernels (`backend::nccl::kernels`) read the table.
use super::{data, Params};
use crate::kinds::RedOp;

/// Which of [`data`]'s value functions a run holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// [`data::reduce_input`] of this rank.
    ReduceInput { rank: usize },
    /// [`data::reduce_expected`]: the exact reduction over all ranks.
    ReduceExpected,
    /// [`data::plain_input`] of this rank (data-movement collectives).
    Plain { rank: usize },
    /// [`data::POISON`]: what an output element holds before the call writes it.
    Poison,
}

impl Source {
    /// The period of the value in the element index, for `p`'s op and rank count.
    pub fn period(self, p: &Params) -> usize {
        match self {
            Source::ReduceInput { .. } => match p.op {
                RedOp::Sum | RedOp::Avg => 3,
                RedOp::Prod => p.n.max(1),
                RedOp::Max | RedOp::Min => data::extreme_period(p.n),
            },
            Source::ReduceExpected => match p.op {
                RedOp::Sum | RedOp::Avg => 3,
                RedOp::Prod => 1,
                RedOp::Max | RedOp::Min => data::extreme_period(p.n),
            },
            Source::Plain { .. } => 101,
            Source::Poison => 1,
        }
    }

    /// The same values as one source shared by every rank: `(source, index)` with
    /// `canonical.value(index')` equal to `self.value(index)` for every shift, so runs
    /// of different ranks share one table (and an n-rank all_gather check uploads one
    /// table, not n).
    pub fn canonical(self, p: &Params, index: usize) -> (Source, usize) {
        match self {
            // (13 r + i) % 101
            Source::Plain { rank } => (Source::Plain { rank: 0 }, index + 13 * (rank % 101)),
            Source::ReduceInput { rank } => {
                let shift = match p.op {
                    // (r + i + 1) % 3: rank 0 at index i + r
                    RedOp::Sum | RedOp::Avg => rank % 3,
                    // 2 where (i + 1) % n == r: rank 0 at index i + n - r
                    RedOp::Prod => p.n.max(1) - rank % p.n.max(1),
                    // a rotation above a base of rank 0's index: no shift of rank 0's
                    // values is another rank's (each rank keeps a table of its own)
                    RedOp::Max | RedOp::Min => return (self, index),
                };
                (Source::ReduceInput { rank: 0 }, index + shift)
            }
            s => (s, index),
        }
    }

    /// The value at source index `i`.
    pub fn value(self, p: &Params, i: usize) -> f64 {
        match self {
            Source::ReduceInput { rank } => data::reduce_input(p.op, p.n, rank, i),
            Source::ReduceExpected => data::reduce_expected(p.op, p.dtype, p.n, i),
            Source::Plain { rank } => data::plain_input(rank, i),
            Source::Poison => data::POISON,
        }
    }
}

/// Elements `start..start + len` of a buffer hold `source` at indices `index..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First element of the run in the buffer.
    pub start: usize,
    /// Elements in the run.
    pub len: usize,
    pub source: Source,
    /// Source index of the run's first element.
    pub index: usize,
}

impl Run {
    pub fn new(start: usize, len: usize, source: Source, index: usize) -> Run {
        Run {
            start,
            len,
            source,
            index,
        }
    }
    /// The run's shared table's source, and the index into that table of the run's
    /// first element.
    pub fn table_key(&self, p: &Params) -> (Source, usize) {
        let (source, index) = self.source.canonical(p, self.index);
        (source, index % source.period(p))
    }
}

/// What a buffer of `len` elements holds, or must hold, as runs in buffer order.
/// A fill writes only the runs; a check looks only at them (elements outside every
/// run are not checked).
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    pub params: Params,
    pub runs: Vec<Run>,
}

/// One run's values for one period: what the kernels and the host replicate.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The values, little-endian in the buffer's element type (for fills).
    pub encoded: Vec<u8>,
    /// Per entry, the value a check compares with and its absolute tolerance
    /// (0 where the result is exact): `[want0, tol0, want1, tol1, ...]`.
    pub want_tol: Vec<f64>,
    pub period: usize,
}

impl Pattern {
    pub fn new(params: Params, runs: Vec<Run>) -> Pattern {
        Pattern { params, runs }
    }

    /// One run of `source` over elements `start..start + len`, source index = element.
    pub fn one(params: Params, start: usize, len: usize, source: Source) -> Pattern {
        Pattern::new(params, vec![Run::new(start, len, source, start)])
    }

    /// The value at element `i`, or None outside every run.
    pub fn at(&self, i: usize) -> Option<f64> {
        self.runs
            .iter()
            .find(|r| (r.start..r.start + r.len).contains(&i))
            .map(|r| r.source.value(&self.params, r.index + (i - r.start)))
    }

    /// Elements covered by runs.
    pub fn elements(&self) -> usize {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// The largest element a run reaches (exclusive end).
    pub fn end(&self) -> usize {
        self.runs.iter().map(|r| r.start + r.len).max().unwrap_or(0)
    }

    /// The distinct tables the runs need, and for each run its table and phase.
    pub fn tables(&self) -> (Vec<Table>, Vec<(usize, usize)>) {
        let mut keys: Vec<Source> = Vec::new();
        let mut tables = Vec::new();
        let mut uses = Vec::with_capacity(self.runs.len());
        for run in &self.runs {
            let (source, phase) = run.table_key(&self.params);
            let t = match keys.iter().position(|k| *k == source) {
                Some(t) => t,
                None => {
                    keys.push(source);
                    tables.push(self.table(source));
                    keys.len() - 1
                }
            };
            uses.push((t, phase));
        }
        (tables, uses)
    }

    /// One period of `source` in the pattern's type.
    pub fn table(&self, source: Source) -> Table {
        let p = &self.params;
        let period = source.period(p);
        let es = p.dtype.size();
        let mut encoded = vec![0u8; period * es];
        let mut want_tol = Vec::with_capacity(2 * period);
        for j in 0..period {
            let v = source.value(p, j);
            data::encode(p.dtype, v, &mut encoded[j * es..(j + 1) * es]);
            let (want, tol) = data::tolerance(p.dtype, p.op, v);
            want_tol.push(want);
            want_tol.push(tol);
        }
        Table {
            encoded,
            want_tol,
            period,
        }
    }
}

/// Wrong elements found by a check.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mismatch {
    /// Elements that differ from the expected value.
    pub wrong: u64,
    /// The lowest wrong element.
    pub first: Option<usize>,
    /// Up to [`SAMPLE`] wrong elements, ascending (on a GPU: some of them, not
    /// necessarily the first).
    pub sample: Vec<usize>,
}

/// How many wrong positions a check reports besides the first.
pub const SAMPLE: usize = 8;

/// Elements per replicated block on the host: large enough that copies run at memory
/// speed, small enough to build cheaply for short runs.
const BLOCK_ELEMS: usize = 16 * 1024;

/// `run`'s values from its first element for `elems` elements rounded up to whole
/// periods (at least one), encoded: every slice of it that starts at a multiple of its
/// length lines up with the run again.
fn block(table: &Table, phase: usize, es: usize, elems: usize) -> Vec<u8> {
    let periods = elems.min(BLOCK_ELEMS).div_ceil(table.period).max(1);
    let n = periods * table.period;
    let mut out = Vec::with_capacity(n * es);
    // The table rotated to the phase, then doubled up to the block's length.
    out.extend_from_slice(&table.encoded[phase * es..]);
    out.extend_from_slice(&table.encoded[..phase * es]);
    while out.len() < n * es {
        let more = out.len().min(n * es - out.len());
        out.extend_from_within(..more);
    }
    out
}

/// Write `pat`'s runs into `buf` (elements of the pattern's type) on the host.
pub fn fill_host(pat: &Pattern, buf: &mut [u8]) -> anyhow::Result<()> {
    let es = pat.params.dtype.size();
    check_bounds(pat, buf.len() / es)?;
    let (tables, uses) = pat.tables();
    for (run, &(t, phase)) in pat.runs.iter().zip(&uses) {
        if run.len == 0 {
            continue;
        }
        let b = block(&tables[t], phase, es, run.len);
        let dst = &mut buf[run.start * es..(run.start + run.len) * es];
        for piece in dst.chunks_mut(b.len()) {
            piece.copy_from_slice(&b[..piece.len()]);
        }
    }
    Ok(())
}

/// Compare `buf` with `pat`'s runs on the host: whole blocks by bytes, and only a
/// block that differs element by element (with [`data::matches`]' tolerance).
pub fn check_host(pat: &Pattern, buf: &[u8]) -> anyhow::Result<Mismatch> {
    let p = &pat.params;
    let es = p.dtype.size();
    check_bounds(pat, buf.len() / es)?;
    let (tables, uses) = pat.tables();
    let mut out = Mismatch::default();
    for (run, &(t, phase)) in pat.runs.iter().zip(&uses) {
        if run.len == 0 {
            continue;
        }
        let table = &tables[t];
        let b = block(table, phase, es, run.len);
        let got = &buf[run.start * es..(run.start + run.len) * es];
        let block_elems = b.len() / es;
        for (k, piece) in got.chunks(b.len()).enumerate() {
            if piece == &b[..piece.len()] {
                continue; // bytes equal the expected encoding: every element matches
            }
            for (j, have) in piece.chunks_exact(es).enumerate() {
                let entry = (phase + j) % table.period;
                let (want, tol) = (table.want_tol[2 * entry], table.want_tol[2 * entry + 1]);
                let have = data::decode(p.dtype, have);
                let ok = if tol > 0.0 {
                    (have - want).abs() <= tol
                } else {
                    have == want
                };
                if !ok {
                    let at = run.start + k * block_elems + j;
                    out.wrong += 1;
                    out.first = Some(out.first.map_or(at, |f| f.min(at)));
                    if out.sample.len() < SAMPLE {
                        out.sample.push(at);
                    }
                }
            }
        }
    }
    out.sample.sort_unstable();
    Ok(out)
}

/// Every run must lie inside a buffer of `elems` elements.
pub fn check_bounds(pat: &Pattern, elems: usize) -> anyhow::Result<()> {
    if pat.end() > elems {
        anyhow::bail!(
            "a {} pattern reaches element {} of a {elems}-element buffer",
            pat.params.dtype,
            pat.end()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Dtype;

    fn params(n: usize, dtype: Dtype, op: RedOp) -> Params {
        Params {
            n,
            count: 0,
            dtype,
            op,
            root: 0,
        }
    }

    fn sources(n: usize) -> Vec<Source> {
        let mut s = vec![Source::ReduceExpected, Source::Poison];
        for r in [0, 1 % n, n - 1] {
            s.push(Source::ReduceInput { rank: r });
            s.push(Source::Plain { rank: r });
        }
        s
    }

    #[test]
    fn every_source_repeats_with_its_period() {
        for n in [1usize, 2, 3, 7, 64, 130] {
            for op in RedOp::ALL {
                for dtype in Dtype::ALL {
                    let p = params(n, dtype, op);
                    for s in sources(n) {
                        let period = s.period(&p);
                        for i in 0..3 * period.max(101) {
                            assert_eq!(
                                s.value(&p, i),
                                s.value(&p, i % period),
                                "{s:?} {op:?} {dtype} n={n} i={i}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn canonical_sources_give_the_same_values() {
        for n in [1usize, 2, 3, 7, 64, 130] {
            for op in RedOp::ALL {
                let p = params(n, Dtype::F64, op);
                for s in sources(n) {
                    for i in [0usize, 1, 5, 63, 64, 100, 101, 1000, 4099] {
                        let (c, j) = s.canonical(&p, i);
                        assert_eq!(s.value(&p, i), c.value(&p, j), "{s:?} {op:?} n={n} i={i}");
                    }
                }
            }
        }
        // Every rank's plain runs share one table.
        let p = params(16, Dtype::F32, RedOp::Sum);
        let runs = (0..16)
            .map(|q| Run::new(q * 10, 10, Source::Plain { rank: q }, 7 * q))
            .collect();
        let (tables, uses) = Pattern::new(p, runs).tables();
        assert_eq!((tables.len(), uses.len()), (1, 16));
    }

    #[test]
    fn a_host_block_is_whole_periods_up_to_its_cap_from_the_runs_phase() {
        let p = params(4, Dtype::F32, RedOp::Sum);
        let pat = Pattern::one(p, 0, 10, Source::Plain { rank: 0 });
        let (tables, _) = pat.tables();
        let t = &tables[0];
        assert_eq!(t.period, 101);
        let value = |k: usize| data::decode(Dtype::F32, &t.encoded[4 * k..4 * k + 4]);
        // elements asked → whole periods: at least one, at most BLOCK_ELEMS rounded up.
        for (elems, periods) in [
            (1, 1),
            (101, 1),
            (102, 2),
            (5_000, 50),
            (BLOCK_ELEMS, 163),
            (1 << 20, 163),
        ] {
            for phase in [0, 1, 57, 100] {
                let b = block(t, phase, 4, elems);
                assert_eq!(
                    b.len(),
                    periods * 101 * 4,
                    "{elems} elements, phase {phase}"
                );
                for (j, e) in b.chunks_exact(4).enumerate().step_by(37) {
                    let have = data::decode(Dtype::F32, e);
                    assert_eq!(have, value((phase + j) % 101), "{elems} {phase} {j}");
                }
            }
        }
    }

    #[test]
    fn host_fill_writes_exactly_the_runs() {
        for dtype in Dtype::ALL {
            let p = params(5, dtype, RedOp::Prod);
            let es = dtype.size();
            let pat = Pattern::new(
                p,
                vec![
                    Run::new(3, 40_000, Source::Plain { rank: 3 }, 777),
                    Run::new(40_010, 13, Source::ReduceInput { rank: 2 }, 1),
                ],
            );
            let mut buf = vec![0xeeu8; 40_100 * es];
            fill_host(&pat, &mut buf).unwrap();
            for i in 0..40_100 {
                let got = &buf[i * es..(i + 1) * es];
                match pat.at(i) {
                    Some(v) => assert_eq!(data::decode(dtype, got), v, "{dtype} element {i}"),
                    None => assert!(got.iter().all(|b| *b == 0xee), "{dtype} {i} touched"),
                }
            }
            assert_eq!(check_host(&pat, &buf).unwrap(), Mismatch::default());
        }
    }

    #[test]
    fn host_check_counts_every_wrong_element_and_reports_the_first() {
        let p = params(4, Dtype::F32, RedOp::Sum);
        let pat = Pattern::one(p, 0, 100_000, Source::ReduceExpected);
        let mut buf = vec![0u8; 100_000 * 4];
        fill_host(&pat, &mut buf).unwrap();
        for i in [99_999usize, 17, 50_001, 17_000] {
            buf[i * 4] ^= 1;
        }
        let m = check_host(&pat, &buf).unwrap();
        assert_eq!(m.wrong, 4);
        assert_eq!(m.first, Some(17));
        assert_eq!(m.sample, vec![17, 17_000, 50_001, 99_999]);
        // Elements outside the runs are not checked.
        let part = Pattern::one(p, 18, 1000, Source::ReduceExpected);
        assert_eq!(check_host(&part, &buf).unwrap().wrong, 0);
        // Past SAMPLE wrong elements, every one is counted and the first SAMPLE named.
        for i in (1000..1200).step_by(10) {
            buf[i * 4] ^= 1;
        }
        let m = check_host(&pat, &buf).unwrap();
        assert_eq!(m.wrong, 24);
        assert_eq!(m.sample.len(), SAMPLE);
        assert_eq!(m.sample, vec![17, 1000, 1010, 1020, 1030, 1040, 1050, 1060]);
    }

    #[test]
    fn an_average_within_the_types_precision_is_not_wrong() {
        // avg over 3 ranks of f16: 1/3 is not representable; a result off by one ulp
        // in the other direction still passes, as data::matches says.
        let p = params(3, Dtype::F16, RedOp::Avg);
        let pat = Pattern::one(p, 0, 30, Source::ReduceExpected);
        let mut buf = vec![0u8; 60];
        fill_host(&pat, &mut buf).unwrap();
        for i in 0..30 {
            let bits = u16::from_le_bytes([buf[2 * i], buf[2 * i + 1]]);
            let v = data::decode(Dtype::F16, &buf[2 * i..2 * i + 2]);
            if v != v.round() {
                buf[2 * i..2 * i + 2].copy_from_slice(&(bits + 1).to_le_bytes());
            }
        }
        assert_eq!(check_host(&pat, &buf).unwrap().wrong, 0);
    }

    #[test]
    fn an_average_one_ulp_off_passes_and_a_tenth_off_is_wrong_in_every_element() {
        // At 5 and 7 ranks the averages (3q + rem)/n are not representable in f16 or
        // bf16: the check meets rounded values and compares each with its own
        // tolerance. (In f16 that is 1e-3, a few ulps near 1; in bf16 8e-3, about
        // one ulp, so bf16 is only pushed a tenth off.)
        for dtype in [Dtype::F16, Dtype::Bf16] {
            for n in [5usize, 7] {
                let p = params(n, dtype, RedOp::Avg);
                let pat = Pattern::one(p, 0, 40, Source::ReduceExpected);
                let mut buf = vec![0u8; 80];
                fill_host(&pat, &mut buf).unwrap();
                let mut off = 0;
                for i in 0..40 {
                    let bits = u16::from_le_bytes([buf[2 * i], buf[2 * i + 1]]);
                    let v = data::decode(dtype, &buf[2 * i..2 * i + 2]);
                    if v != v.round() {
                        off += 1;
                        if dtype == Dtype::F16 {
                            buf[2 * i..2 * i + 2].copy_from_slice(&(bits + 1).to_le_bytes());
                        }
                    }
                }
                assert!(off >= 20, "{dtype} n={n}: {off} inexact");
                assert_eq!(check_host(&pat, &buf).unwrap().wrong, 0, "{dtype} n={n}");
                for i in 0..40 {
                    let v = data::decode(dtype, &buf[2 * i..2 * i + 2]);
                    data::encode(dtype, v + 0.1, &mut buf[2 * i..2 * i + 2]);
                }
                let m = check_host(&pat, &buf).unwrap();
                assert_eq!((m.wrong, m.first), (40, Some(0)), "{dtype} n={n}");
            }
        }
    }

    #[test]
    fn a_pattern_past_the_buffer_is_an_error() {
        let p = params(2, Dtype::F64, RedOp::Sum);
        let pat = Pattern::one(p, 5, 10, Source::Poison);
        let e = fill_host(&pat, &mut [0u8; 8 * 14]).unwrap_err();
        assert!(e.to_string().contains("element 15 of a 14-element"), "{e}");
        // The check refuses it the same way, and counts elements, not bytes.
        let e = check_host(&pat, &[0u8; 8 * 14]).unwrap_err();
        assert!(e.to_string().contains("element 15 of a 14-element"), "{e}");
        assert!(check_host(&pat, &[0u8; 8 * 15]).is_ok());
    }
}
