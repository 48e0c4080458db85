//! `burnin sweep`: collectives over a ladder of message sizes, nccl-tests style, with
//! correctness checks on every size and adaptive sampling.
//!
//! Planning (sizes, lists, validation) is pure and unit-tested; measuring talks to a
//! [`Backend`]. Every decision that changes how many calls a rank makes (when to stop
//! sampling) is taken collectively — the same all-reduced numbers on every rank — so
//! ranks can never disagree on the number of calls and deadlock.
pub mod analysis;
mod args;
pub mod fabric_map;
pub mod find_slow;
pub mod hooks;
pub mod soak;
use crate::backend::{self, Backend, BackendKind, Bufs, Call, WaitCtx};
use crate::collective::{self, Params, Pattern};
use crate::config::GlobalArgs;
use crate::error::{usage, Agreed, Outcome};
use crate::kinds::TierKind;
use crate::kinds::{CollKind, Dtype, RedOp};
use crate::results::analysis::Analysis;
use crate::results::provenance::Provenance;
use crate::results::sweep::{
    FindSlow, Plan, Point, Sampling, Soak, SweepReport, Timing, SCHEMA_VERSION,
};
use crate::results::{self, Jsonl};
use crate::stats::{self, Combine, TimeStats};
use crate::topology;
use crate::topology::file::Topology;
use crate::transport::{self, CommRecord, TierGroups, TransportReport};
use crate::units::Bytes;
use crate::watchdog::Watchdog;
use crate::world::{self, World};
use analysis::Rules;
use anyhow::{Context, Result};
pub use args::SweepArgs;
pub use hooks::{At, Hooks};
use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::topology::Communicator;
use serde::{Deserialize, Serialize};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parse a comma list with `all`, naming the flag on error.
fn parse_list<T: Copy + PartialEq>(
    flag: &str,
    text: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    known: &str,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.eq_ignore_ascii_case("all") {
            for a in all {
                if !out.contains(a) {
                    out.push(*a);
                }
            }
            continue;
        }
        if item.is_empty() {
            return Err(usage(
                flag,
                format!("empty item in '{text}' (known: {known})"),
            ));
        }
        match parse(item) {
            Some(v) if !out.contains(&v) => out.push(v),
            Some(_) => {}
            None => {
                return Err(usage(
                    flag,
                    format!("unknown value '{item}' (known: {known}, all)"),
                ))
            }
        }
    }
    Ok(out)
}

/// The size ladder from `min` to `max` by `factor` (or by `step` bytes).
pub fn size_ladder(min: u64, max: u64, factor: Option<u64>, step: Option<u64>) -> Result<Vec<u64>> {
    if min == 0 {
        return Err(usage("-b/--min-bytes", "must be at least 1 byte"));
    }
    if min > max {
        return Err(usage(
            "-b/--min-bytes",
            format!(
                "{} is larger than -e/--max-bytes {}",
                Bytes(min),
                Bytes(max)
            ),
        ));
    }
    let mut sizes = vec![min];
    let mut s = min;
    match (factor, step) {
        (_, Some(0)) => return Err(usage("-i/--step-bytes", "must be at least 1 byte")),
        (_, Some(step)) => {
            while let Some(next) = s.checked_add(step).filter(|&n| n <= max) {
                s = next;
                sizes.push(s);
                if sizes.len() > 100_000 {
                    return Err(usage(
                        "-i/--step-bytes",
                        "makes more than 100000 sizes; use a larger step",
                    ));
                }
            }
        }
        (Some(f), None) if f <= 1 => {
            return Err(usage(
                "-f/--step-factor",
                format!("{f} must be larger than 1"),
            ))
        }
        (f, None) => {
            let f = f.unwrap_or(2);
            while let Some(next) = s.checked_mul(f).filter(|&n| n <= max) {
                s = next;
                sizes.push(s);
            }
        }
    }
    Ok(sizes)
}

/// Validate the flags into a plan for `n` ranks on `backend`.
pub fn plan(
    args: &SweepArgs,
    n: usize,
    kind: BackendKind,
    supports: impl Fn(Dtype) -> bool,
) -> Result<Plan> {
    let lists = parse_lists(args, kind, supports)?;
    let step = args.step_bytes.map(|b| b.get());
    let sizes = size_ladder(
        args.min_bytes.get(),
        args.max_bytes.get(),
        args.step_factor,
        step,
    )?;
    if args.root >= n {
        return Err(usage(
            "-r/--root",
            format!("rank {} does not exist in a job of {n} ranks", args.root),
        ));
    }
    check_sizes(&sizes, &lists, n, kind)?;
    let sampling = sampling_of(args)?;
    let Some(timing) = Timing::parse(&args.timing) else {
        return Err(usage(
            "--timing",
            format!(
                "unknown method {:?} (batch: back to back as nccl-tests; osu: a barrier after every iteration)",
                args.timing
            ),
        ));
    };
    Ok(Plan {
        collectives: lists.collectives,
        dtypes: lists.dtypes,
        ops: lists.ops,
        sizes,
        placements: lists.placements,
        root: args.root,
        check: args.check == 1,
        combine: Combine::from_flag(args.average),
        sampling,
        timing,
    })
}

/// The value lists of a plan, as the flags name them.
struct Lists {
    collectives: Vec<CollKind>,
    dtypes: Vec<Dtype>,
    ops: Vec<RedOp>,
    placements: Vec<bool>,
}

/// Parse `-c`, `-d` (only types the backend `supports`), `-o` and `--placement`.
fn parse_lists(
    args: &SweepArgs,
    kind: BackendKind,
    supports: impl Fn(Dtype) -> bool,
) -> Result<Lists> {
    let coll_names = CollKind::ALL.map(|k| k.name()).join(", ");
    let collectives = parse_list(
        "-c/--collectives",
        &args.collectives,
        &CollKind::ALL,
        CollKind::parse,
        &coll_names,
    )?;
    let all_dtypes: Vec<Dtype> = Dtype::ALL.into_iter().filter(|d| supports(*d)).collect();
    let dtypes = parse_list(
        "-d/--dtype",
        &args.dtype,
        &all_dtypes,
        Dtype::parse,
        "f32, f64, f16, bf16, i32, u8",
    )?;
    if let Some(d) = dtypes.iter().find(|d| !supports(**d)) {
        return Err(usage(
            "-d/--dtype",
            format!(
                "the {kind} backend has no {d} (it has {}); use --backend nccl for half types",
                all_dtypes
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let ops = parse_list(
        "-o/--op",
        &args.op,
        &RedOp::ALL,
        RedOp::parse,
        "sum, prod, max, min, avg",
    )?;
    let placements = parse_list(
        "--placement",
        &args.placement,
        &[false, true],
        |s| match s {
            "out" | "out-of-place" => Some(false),
            "in" | "in-place" => Some(true),
            _ => None,
        },
        "out, in",
    )?;
    Ok(Lists {
        collectives,
        dtypes,
        ops,
        placements,
    })
}

/// Every size must be whole elements of every type, within MPI's counts, and split
/// evenly over `n` ranks for the collectives that split it.
fn check_sizes(sizes: &[u64], lists: &Lists, n: usize, kind: BackendKind) -> Result<()> {
    for &size in sizes {
        for &d in &lists.dtypes {
            let es = d.size() as u64;
            if size % es != 0 {
                return Err(usage(
                    "-b/-e/-i",
                    format!(
                        "{} is not a whole number of {d} elements ({es} bytes each)",
                        Bytes(size)
                    ),
                ));
            }
            let count = size / es;
            // MPI counts are C ints; NCCL's are size_t (an 8 GiB f32 all_reduce is
            // 2^31 elements, as nccl-tests runs it).
            if kind == BackendKind::Mpi && count > i32::MAX as u64 {
                return Err(usage(
                    "-e/--max-bytes",
                    format!(
                        "{} of {d} is more than 2^31-1 elements, the most MPI takes",
                        Bytes(size)
                    ),
                ));
            }
            for &c in &lists.collectives {
                if collective::get(c).splits() && count % n as u64 != 0 {
                    return Err(usage(
                        "-b/-e",
                        format!(
                            "{} of {d} is {count} elements, which {c} cannot split evenly over {n} ranks; \
                             use sizes that are multiples of {} bytes",
                            Bytes(size),
                            es * n as u64
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `--ci`, `--budget` and `-n/--iters` into the sampling rule.
fn sampling_of(args: &SweepArgs) -> Result<Sampling> {
    if !(args.ci > 0.0 && args.ci < 1.0) {
        return Err(usage(
            "--ci",
            format!("{} must be between 0 and 1 (0.01 = ±1%)", args.ci),
        ));
    }
    if !(args.budget > 0.0 && args.budget.is_finite()) {
        return Err(usage(
            "--budget",
            format!("{} must be a positive number of seconds", args.budget),
        ));
    }
    Ok(match args.iters {
        Some(0) => return Err(usage("-n/--iters", "must be at least 1")),
        Some(iters) => Sampling::Fixed {
            warmup: args.warmup_iters,
            iters,
        },
        None => Sampling::Adaptive {
            warmup: args.warmup_iters,
            ci: args.ci,
            budget_s: args.budget,
            max_iters: args.max_iters.max(10),
        },
    })
}

/// What each rank reports after measuring one point.
#[derive(Serialize, Deserialize)]
struct RankResult {
    stats: TimeStats,
    ci: f64,
    wrong: Option<(u64, Option<usize>)>,
    wall_s: f64,
    in_calls_s: f64,
}

/// Run `iters` timed calls under a deadline.
fn timed(
    be: &dyn Backend,
    call: &Call,
    bufs: &mut Buffers,
    iters: usize,
    ctx: &WaitCtx,
) -> Result<Vec<f64>> {
    let t = Instant::now();
    let times = be.run_timed(call, bufs.bufs(), iters, ctx);
    bufs.in_calls += t.elapsed();
    times
}

/// The buffers of one point.
pub struct Buffers {
    send: backend::Buffer,
    recv: backend::Buffer,
    in_place: bool,
    /// Wall time spent inside the backend's timed calls so far.
    in_calls: Duration,
}

impl Buffers {
    /// The buffer the call reads: the send buffer, or the one in-place buffer.
    fn input_mut(&mut self) -> &mut backend::Buffer {
        if self.in_place {
            &mut self.recv
        } else {
            &mut self.send
        }
    }
    fn bufs(&mut self) -> Bufs<'_> {
        if self.in_place {
            Bufs::InPlace(&mut self.recv)
        } else {
            Bufs::OutOfPlace {
                send: &self.send,
                recv: &mut self.recv,
            }
        }
    }
}

/// Sample iteration times as the plan says; every rank ends with the same count.
fn sample(
    be: &dyn Backend,
    call: &Call,
    bufs: &mut Buffers,
    sampling: Sampling,
    ctx: &WaitCtx,
) -> Result<(Vec<f64>, f64)> {
    match sampling {
        Sampling::Fixed { warmup, iters } => {
            timed(be, call, bufs, warmup as usize, ctx)?;
            let t = timed(be, call, bufs, iters as usize, ctx)?;
            let ci = worst_over_ranks(be, stats::median_ci_rel_halfwidth(&t));
            Ok((t, ci))
        }
        Sampling::Adaptive {
            warmup,
            ci,
            budget_s,
            max_iters,
        } => {
            timed(be, call, bufs, warmup as usize, ctx)?;
            let start = Instant::now();
            let mut times = Vec::new();
            let mut batch = 10usize;
            loop {
                times.extend(timed(be, call, bufs, batch, ctx)?);
                let hw = stats::median_ci_rel_halfwidth(&times);
                let elapsed = start.elapsed().as_secs_f64();
                // Collective decision: the worst rank's numbers, identical everywhere.
                let mine = [if hw.is_finite() { hw } else { f64::MAX }, elapsed];
                let mut worst = [0.0f64; 2];
                be.control()
                    .all_reduce_into(&mine[..], &mut worst[..], SystemOperation::max());
                let done = times.len();
                if worst[0] <= ci || worst[1] >= budget_s || done >= max_iters as usize {
                    return Ok((times, worst[0]));
                }
                // Double the sample, but not past the budget or the cap.
                let per_iter = worst[1] / done as f64;
                let fits = if per_iter > 0.0 {
                    ((budget_s - worst[1]) / per_iter) as usize
                } else {
                    done
                };
                batch = done.min(fits.max(1)).min(max_iters as usize - done).max(1);
            }
        }
    }
}

fn worst_over_ranks(be: &dyn Backend, v: f64) -> f64 {
    let mine = if v.is_finite() { v } else { f64::MAX };
    let mut worst = 0.0f64;
    be.control()
        .all_reduce_into(&mine, &mut worst, SystemOperation::max());
    worst
}

/// Where the group sits in the job, for the records.
#[derive(Clone, Debug)]
pub struct GroupInfo {
    pub tier: TierKind,
    pub group: usize,
    pub label: String,
    pub members: Vec<usize>,
    pub hosts: Vec<String>,
}

/// Measure one point on `be`: sample the timing, then (if asked) one checked call.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    be: &dyn Backend,
    plan: &Plan,
    kind: CollKind,
    dtype: Dtype,
    op: RedOp,
    size: u64,
    in_place: bool,
    group: &GroupInfo,
    timeout: Duration,
    hooks: Hooks,
) -> Result<Point> {
    let n = be.size();
    let count = (size / dtype.size() as u64) as usize;
    let p = Params {
        n,
        count,
        dtype,
        op,
        root: plan.root.min(n - 1),
    };
    let mut call = Call {
        kind,
        dtype,
        op,
        root: p.root,
        count,
        in_place,
    };
    if let Some(m) = hooks.mismatch {
        m.apply(&mut call, n);
    }
    let ctx = WaitCtx {
        what: format!(
            "{} on tier {} group {} (ranks {:?})",
            call.describe(),
            group.tier,
            group.group,
            group.members
        ),
        deadline: timeout,
        barrier: plan.timing == Timing::Osu,
    };
    let one = OnePoint {
        be,
        coll: collective::get(kind),
        p,
        call,
        ctx,
    };
    let (mine, iterations) = one.on_this_rank(plan, hooks.corrupt)?;
    let all: Vec<RankResult> = world::all_gather_json(be.control(), &mine)?;
    Ok(one.point(plan, size, group, iterations, &all))
}

/// One point being measured: the backend, the collective, the call and its deadline.
struct OnePoint<'a> {
    be: &'a dyn Backend,
    coll: &'static dyn collective::Collective,
    p: Params,
    call: Call,
    ctx: WaitCtx,
}

impl OnePoint<'_> {
    /// This rank's part: buffers, fill, sampling and the check; with the sample count.
    fn on_this_rank(&self, plan: &Plan, corrupt: Option<At>) -> Result<(RankResult, usize)> {
        let (be, p, in_place) = (self.be, &self.p, self.call.in_place);
        let rank = be.rank();
        let layout = self.coll.layout(p);
        let es = p.dtype.size();
        let send_elems = if in_place { 0 } else { layout.send };
        let recv_elems = if in_place {
            layout.in_place()
        } else {
            layout.recv
        };
        let started = Instant::now();
        let mut bufs = Buffers {
            send: be.alloc(send_elems.max(1) * es)?,
            recv: be.alloc(recv_elems.max(1) * es)?,
            in_place,
            in_calls: Duration::ZERO,
        };
        // Like nccl-tests, time on initialised data: a buffer never written is the
        // kernel's shared zero page (or untouched device memory), which no real job sends.
        // The backend writes the pattern where the buffer lives (a kernel on a GPU).
        let input = if in_place {
            self.coll.in_place_input(p, rank)
        } else {
            self.coll.input(p, rank)
        };
        be.fill(bufs.input_mut(), &input)?;
        let (times, ci) = sample(be, &self.call, &mut bufs, plan.sampling, &self.ctx)?;
        let stats = stats::summarize(&times);
        let wrong = if plan.check {
            Some(self.check(&mut bufs, &input, recv_elems, corrupt)?)
        } else {
            None
        };
        let mine = RankResult {
            stats,
            ci,
            wrong,
            wall_s: started.elapsed().as_secs_f64(),
            in_calls_s: bufs.in_calls.as_secs_f64(),
        };
        Ok((mine, times.len()))
    }

    /// One call on fresh input into a poisoned output, compared with the expected
    /// result: (wrong values, first wrong index).
    fn check(
        &self,
        bufs: &mut Buffers,
        input: &Pattern,
        recv_elems: usize,
        corrupt: Option<At>,
    ) -> Result<(u64, Option<usize>)> {
        let (be, p) = (self.be, self.p);
        let es = p.dtype.size();
        let rs_offset = be.reduce_scatter_in_place_offset(p.chunk() * es) / es;
        be.fill(bufs.input_mut(), input)?;
        if !self.call.in_place {
            let poison = Pattern::one(p, 0, recv_elems, collective::Source::Poison);
            be.fill(&mut bufs.recv, &poison)?;
        }
        timed(be, &self.call, bufs, 1, &self.ctx)?;
        let expected = self
            .coll
            .expected(&p, be.rank(), self.call.in_place, rs_offset);
        if let Some(at) = corrupt {
            // Test hook: one wrong value, at the element of the checked runs `at` says.
            let total: usize = expected.runs.iter().map(|r| r.len).sum();
            if total > 0 {
                let salt = (p.count as u64) << 8 | u64::from(self.call.in_place);
                let mut k = at.index(total, salt);
                if let Some(r) = expected.runs.iter().find(|r| {
                    let here = k < r.len;
                    if !here {
                        k -= r.len;
                    }
                    here
                }) {
                    let bad = Pattern::one(p, r.start + k, 1, collective::Source::Poison);
                    be.fill(&mut bufs.recv, &bad)?;
                }
            }
        }
        let m = be.check(&bufs.recv, &expected)?;
        Ok((m.wrong, m.first))
    }

    /// The point's record from every rank's result.
    fn point(
        &self,
        plan: &Plan,
        size: u64,
        group: &GroupInfo,
        iterations: usize,
        all: &[RankResult],
    ) -> Point {
        let (kind, n) = (self.call.kind, self.p.n);
        let per_rank: Vec<TimeStats> = all.iter().map(|r| r.stats).collect();
        let time = stats::combine(&per_rank, plan.combine);
        let rank_p50_us: Vec<f64> = per_rank.iter().map(|t| t.p50_us).collect();
        let (slowest_rank, rank_spread) = slowest_and_spread(&rank_p50_us);
        let (wrong, wrong_ranks) = wrong_over_ranks(plan.check, all);
        let outside = |r: &RankResult| (r.wall_s - r.in_calls_s) / r.wall_s.max(1e-12);
        let overhead_rank = all.iter().max_by(|a, b| outside(a).total_cmp(&outside(b)));
        let (algbw, busbw) = collective::bandwidths(kind, size, time.p50_us / 1e6, n);
        let (algbw_mean, busbw_mean) = collective::bandwidths(kind, size, time.mean_us / 1e6, n);
        Point {
            schema_version: SCHEMA_VERSION,
            tier: group.tier,
            group: group.group,
            label: group.label.clone(),
            members: group.members.clone(),
            hosts: group.hosts.clone(),
            collective: kind,
            dtype: self.p.dtype,
            op: kind.reduces().then_some(self.p.op),
            root: kind.rooted().then_some(self.p.root),
            in_place: self.call.in_place,
            bytes: size,
            count: self.p.count,
            iterations,
            warmup: match plan.sampling {
                Sampling::Fixed { warmup, .. } | Sampling::Adaptive { warmup, .. } => warmup,
            },
            adaptive: matches!(plan.sampling, Sampling::Adaptive { .. }),
            ci_half_width: all.iter().map(|r| r.ci).fold(0.0, f64::max),
            time,
            combine: plan.combine,
            rank_p50_us,
            slowest_rank,
            rank_spread,
            algbw_gbps: algbw,
            busbw_gbps: busbw,
            algbw_mean_gbps: algbw_mean,
            busbw_mean_gbps: busbw_mean,
            wrong,
            wrong_ranks,
            wall_s: overhead_rank.map_or(0.0, |r| r.wall_s),
            in_calls_s: overhead_rank.map_or(0.0, |r| r.in_calls_s),
            pass: 0,
            unix: crate::watchdog::unix_seconds(std::time::SystemTime::now()),
        }
    }
}

/// The rank with the largest median time, and (max − min) / min of the medians.
fn slowest_and_spread(rank_p50_us: &[f64]) -> (usize, f64) {
    let slowest = rank_p50_us
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(r, _)| r)
        .unwrap_or(0);
    let lo = rank_p50_us.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = rank_p50_us.iter().cloned().fold(0.0, f64::max);
    let spread = if lo > 0.0 && lo.is_finite() {
        (hi - lo) / lo
    } else {
        0.0
    };
    (slowest, spread)
}

/// Wrong values over all ranks (None when unchecked), and (rank, first wrong index)
/// of each rank that had any.
fn wrong_over_ranks(check: bool, all: &[RankResult]) -> (Option<u64>, Vec<(usize, usize)>) {
    if !check {
        return (None, Vec::new());
    }
    let mut total = 0;
    let mut ranks = Vec::new();
    for (r, res) in all.iter().enumerate() {
        if let Some((w, first)) = res.wrong {
            total += w;
            if w > 0 {
                ranks.push((r, first.unwrap_or(0)));
            }
        }
    }
    (Some(total), ranks)
}

/// nccl-tests' table header.
pub fn table_header(title: &str) -> String {
    format!(
        "# {title}\n#\n#{:>12} {:>12} {:>8} {:>6} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:>9} {:>7} {:>7} {:>6} {:>7}\n#{:>12} {:>12} {:>8} {:>6} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:>9} {:>7} {:>7} {:>6} {:>7}\n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "iters",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "",
    )
}

/// One table row: out-of-place and in-place columns for one size (either may be
/// missing when the placement was not run).
pub fn table_row(out: Option<&Point>, inp: Option<&Point>) -> String {
    let any = match out.or(inp) {
        Some(p) => p,
        None => return String::new(),
    };
    let cols = |p: Option<&Point>| match p {
        Some(p) => format!(
            "{:>9.2} {:>7.2} {:>7.2} {:>6}",
            p.time.p50_us,
            p.algbw_gbps,
            p.busbw_gbps,
            p.wrong
                .map(|w| w.to_string())
                .unwrap_or_else(|| "N/A".into())
        ),
        None => format!("{:>9} {:>7} {:>7} {:>6}", "-", "-", "-", "-"),
    };
    let iters = [out, inp]
        .iter()
        .flatten()
        .map(|p| p.iterations)
        .max()
        .unwrap_or(0);
    format!(
        " {:>12} {:>12} {:>8} {:>6} {:>6}   {}   {} {:>7}\n",
        any.bytes,
        any.count,
        any.dtype.nccl_name(),
        any.op.map(|o| o.name()).unwrap_or("none"),
        any.root.map(|r| r as i64).unwrap_or(-1),
        cols(out),
        cols(inp),
        iters
    )
}

/// nccl-tests' footer.
pub fn table_footer(points: &[Point]) -> String {
    let wrong: u64 = points.iter().filter_map(|p| p.wrong).sum();
    let checked = points.iter().any(|p| p.wrong.is_some());
    let avg = avg_busbw(points);
    let mut s = String::new();
    if checked {
        s.push_str(&format!(
            "# Out of bounds values : {} {}\n",
            wrong,
            if wrong == 0 { "OK" } else { "FAILED" }
        ));
    } else {
        s.push_str("# Out of bounds values : not checked (--check 0)\n");
    }
    s.push_str(&format!(
        "# Avg bus bandwidth    : {avg:.4} GB/s (from median times)\n"
    ));
    for p in points.iter().filter(|p| !p.wrong_ranks.is_empty()) {
        let at: Vec<String> = p
            .wrong_ranks
            .iter()
            .map(|(r, i)| {
                format!(
                    "rank {} first at element {}",
                    p.members.get(*r).copied().unwrap_or(*r),
                    i
                )
            })
            .collect();
        s.push_str(&format!(
            "# WRONG: {} {} {}{}: {}\n",
            p.collective,
            Bytes(p.bytes),
            p.dtype,
            if p.in_place { " in-place" } else { "" },
            at.join("; ")
        ));
    }
    s
}

pub fn avg_busbw(points: &[Point]) -> f64 {
    if points.is_empty() {
        0.0
    } else {
        points.iter().map(|p| p.busbw_gbps).sum::<f64>() / points.len() as f64
    }
}

/// Rank 0's output side: tables on stdout, points to JSONL as they come.
struct Sink {
    points_file: Option<Jsonl>,
    progress: bool,
    points: Vec<Point>,
    /// The soak pass being measured (0 without `--duration`).
    pass: u32,
}

impl Sink {
    fn record(&mut self, mut p: Point) -> Result<()> {
        p.pass = self.pass;
        if let Some(j) = &mut self.points_file {
            j.append(&p)?;
        }
        crate::metrics::sweep_point(&p);
        let where_ = match &self.points_file {
            Some(j) => format!("; points in {}", j.path().display()),
            None => String::new(),
        };
        crate::interrupt::set_progress(format!(
            "sweep: {} points measured, last {} {} {} on tier {} ({}){where_}",
            self.points.len() + 1,
            p.collective,
            Bytes(p.bytes),
            p.dtype,
            p.tier,
            p.label
        ));
        self.points.push(p);
        Ok(())
    }
}

/// Open `--out` on rank 0 and tell every rank whether that worked (an agreed error).
fn open_out(world: &World, out: Option<&PathBuf>) -> Result<Option<Jsonl>> {
    let open = || {
        results::open_records(out.map(PathBuf::as_path), |dir| {
            let p = dir.join("points.jsonl");
            let _ = std::fs::remove_file(&p);
            let _ = std::fs::remove_file(dir.join("run.json"));
            let _ = std::fs::remove_file(dir.join("interrupted.txt"));
            crate::interrupt::set_note_file(dir.join("interrupted.txt"));
            p
        })
    };
    Ok(world.on_rank0_agreed(open)?.flatten())
}

/// Everything one group measures, in order; `live` is called on each point as soon
/// as it is measured (rank 0 streams its own group's points).
#[allow(clippy::too_many_arguments)]
fn run_group(
    be: &dyn Backend,
    plan: &Plan,
    sizes: &[u64],
    group: &GroupInfo,
    timeout: Duration,
    hooks: Hooks,
    print_table: bool,
    live: &mut dyn FnMut(Point) -> Result<()>,
) -> Result<Vec<Point>> {
    let mut out = Vec::new();
    for &kind in &plan.collectives {
        let ops: Vec<RedOp> = if kind.reduces() {
            plan.ops.clone()
        } else {
            vec![RedOp::Sum]
        };
        for &dtype in &plan.dtypes {
            for &op in &ops {
                if print_table {
                    let title = format!(
                        "{kind} {dtype}{}",
                        if kind.reduces() {
                            format!(" {}", op.name())
                        } else {
                            String::new()
                        }
                    );
                    print!("{}", table_header(&title));
                }
                for &size in sizes {
                    let mut row: [Option<Point>; 2] = [None, None];
                    for &in_place in &plan.placements {
                        let point = measure(
                            be, plan, kind, dtype, op, size, in_place, group, timeout, hooks,
                        )
                        .with_context(|| {
                            format!(
                                "measuring {kind} {} {dtype} on {}",
                                Bytes(size),
                                group.label
                            )
                        })?;
                        row[in_place as usize] = Some(point.clone());
                        if be.rank() == 0 {
                            live(point.clone())?;
                            out.push(point);
                        }
                    }
                    if print_table {
                        print!("{}", table_row(row[0].as_ref(), row[1].as_ref()));
                        let _ = std::io::stdout().flush();
                    }
                }
            }
        }
    }
    Ok(out)
}

/// One line per group for the non-world tiers: busbw at the largest size per
/// collective.
fn group_summary_lines(points: &[Point]) -> String {
    let mut s = String::new();
    let mut seen = Vec::new();
    for p in points {
        let key = (p.group, p.collective, p.dtype, p.op);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let best = points
            .iter()
            .filter(|q| (q.group, q.collective, q.dtype, q.op) == key)
            .max_by_key(|q| (q.bytes, !q.in_place))
            .unwrap_or(p);
        s.push_str(&format!(
            "  {:<14} {:<14} {:>9} busbw {:>9.3} GB/s  ranks {:?}  hosts {}\n",
            p.label,
            p.collective.name(),
            Bytes(best.bytes).to_string(),
            best.busbw_gbps,
            p.members,
            p.hosts.join(",")
        ));
    }
    s
}

/// `burnin sweep`.
pub fn run(
    world: &World,
    global: &GlobalArgs,
    args: &SweepArgs,
    dog: Arc<Watchdog>,
) -> Result<Outcome> {
    let agreed = |e: anyhow::Error| anyhow::Error::new(Agreed(format!("{e:#}")));
    let cfg = global.backend_config();
    let (kind, why) = backend::resolve(world, &cfg)?;
    let wanted = topology::parse_tiers(&args.tiers).map_err(agreed)?;
    let topo = Topology::load_shared(world, args.topology.as_deref())?;
    let fabric = load_fabric(world, args)?;
    let nics = topo
        .as_ref()
        .and_then(|t| t.inter.as_ref())
        .and_then(|i| i.nics);
    let tiers = topology::plan_tiers(&world.nodes, &wanted, nics);
    if world.rank == 0 {
        print_header(world, &why, &tiers);
    }
    let be_world = backend::build(kind, world.comm.duplicate(), world, &cfg, dog.clone())?;
    let supports = |d| be_world.supports(d, None);
    let plan = plan(args, world.size, kind, supports).map_err(agreed)?;
    // Every group size must take the plan too (e.g. all_gather splitting).
    for n in group_sizes(&tiers) {
        let mut a = args.clone();
        a.root = 0;
        self::plan(&a, n, kind, supports)
            .map_err(|e| agreed(e.context(format!("for groups of {n} ranks"))))?;
    }
    let stack = be_world.describe();
    let gpu_bus = be_world.pci_bus_id();
    drop(be_world);
    let bisect_plan = find_slow::bisect_plan(&plan);
    let mut run = TierRun {
        world,
        cfg: &cfg,
        args,
        plan: &plan,
        bisect_plan: &bisect_plan,
        kind,
        dog,
        sink: Sink {
            points_file: open_out(world, args.out.as_ref())?,
            progress: std::io::stderr().is_terminal(),
            points: Vec::new(),
            pass: 0,
        },
        comms: Vec::new(),
        gpu_bus,
        rules: {
            let mut r = Rules::from(topo.as_ref(), args.outlier_fraction, args.min_fraction);
            r.fabric = fabric.clone();
            r
        },
        stream_s: None,
    };
    let provenance = Provenance::new(
        &why,
        crate::world::mpi_version(),
        world.size,
        world.nodes.clone(),
        world.all_gather_text(&stack),
    );
    // Every NCCL communicator this rank creates, in order: the n-th of its NCCL log.
    run.note_comm(TierKind::World, 0, (0..world.size).collect());
    let soak_clock = run.passes(&tiers)?;
    let find_slow = if args.find_slow {
        let rules = Rules::from(topo.as_ref(), args.outlier_fraction, args.min_fraction);
        run.find_slow(rules.outlier_for(TierKind::Pairs), nics)?
    } else {
        None
    };
    let fabric_map = if args.fabric_map {
        run.fabric_map(nics)?
    } else {
        None
    };
    let transport = collect_transport(world, kind, args, &tiers, &run.comms)?;
    if world.rank != 0 {
        return Ok(Outcome::Pass);
    }
    let sink = run.sink;
    if sink.progress {
        eprintln!();
    }
    let soak = soak_clock.map(|(clock, t0, gpus)| {
        let hosts: Vec<String> = world.nodes.iter().map(|n| n.host.clone()).collect();
        let mut s = soak::analyze(
            &sink.points,
            args.duration.unwrap_or(0.0),
            clock.elapsed_s(),
            soak::Judged {
                max_drift: args.max_drift,
                max_pass_cv: args.max_pass_cv,
                drift_window_s: args.drift_window,
            },
            &hosts,
        );
        s.gpu_note = soak::gpu_note(kind, &gpus);
        s.gpus = gpus;
        (s, t0)
    });
    // Undeclared, the tiers are judged on the leaves the map found (run.json's
    // `fabric` says so in its source).
    let fabric = fabric.or_else(|| fabric_map.as_ref().and_then(fabric_map::measured_fabric));
    let ends = Ends {
        provenance,
        plan,
        topology: topo,
        fabric,
        transport,
        find_slow,
        fabric_map,
        soak,
    };
    finish(world, args, sink.points, ends)
}

/// rank 0's first lines: ranks, nodes, backend, tiers, the node map.
fn print_header(world: &World, why: &str, tiers: &[topology::Tier]) {
    let names: Vec<&str> = tiers.iter().map(|t| t.kind.name()).collect();
    println!(
        "# burnin sweep: {} ranks on {} nodes, backend {why}, tiers {}",
        world.size,
        world.nodes.len(),
        names.join(",")
    );
    let map: Vec<String> = world
        .nodes
        .iter()
        .map(|n| format!("{} ranks {:?}", n.host, n.ranks))
        .collect();
    println!("# nodes: {}", map.join("; "));
}

/// The distinct group sizes of all tiers' rounds, ascending.
fn group_sizes(tiers: &[topology::Tier]) -> Vec<usize> {
    let mut sizes: Vec<usize> = tiers
        .iter()
        .flat_map(|t| {
            t.rounds
                .iter()
                .flat_map(|r| r.groups.iter().map(|g| g.members.len()))
        })
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// A soak's clock, its start (Unix seconds) and, on rank 0, every rank's GPU.
type Soaked = (soak::Clock, f64, Vec<crate::results::sweep::SoakGpu>);

/// What measuring the tiers needs and gathers.
struct TierRun<'a> {
    world: &'a World,
    cfg: &'a backend::BackendConfig,
    args: &'a SweepArgs,
    plan: &'a Plan,
    /// What every `--find-slow` group runs (one all_reduce at the largest size).
    bisect_plan: &'a Plan,
    kind: BackendKind,
    dog: Arc<Watchdog>,
    /// rank 0: every point, streamed to points.jsonl.
    sink: Sink,
    /// Every NCCL communicator this rank created, in order.
    comms: Vec<CommRecord>,
    /// This rank's GPU (NCCL backend), which a soak samples with NVML.
    gpu_bus: Option<String>,
    /// How the pairs tier is judged before its slow rounds are measured again.
    rules: analysis::Rules,
    /// Set while a fabric map round streams: its groups run the bisection plan for
    /// this many seconds each (after the warm-up) instead of its iterations.
    stream_s: Option<f64>,
}

impl TierRun<'_> {
    fn note_comm(&mut self, tier: TierKind, group: usize, members: Vec<usize>) {
        if self.kind == BackendKind::Nccl {
            self.comms.push(CommRecord {
                tier,
                group,
                members,
            });
        }
    }

    /// Every tier once, or with `--duration` pass after pass until the time is up
    /// (rank 0 decides whether another pass fits; every rank follows), while NVML
    /// samples this rank's GPU. rank 0 gets the soak's clock, its start and every
    /// rank's GPU timeline.
    fn passes(&mut self, tiers: &[topology::Tier]) -> Result<Option<Soaked>> {
        let Some(d) = self.args.duration else {
            for tier in tiers {
                self.tier(tier)?;
            }
            return Ok(None);
        };
        soak::validate(self.args.max_drift, self.args.max_pass_cv)
            .and_then(|()| soak::validate_window(self.args.drift_window, d))
            .map_err(|e| anyhow::Error::new(Agreed(format!("{e:#}"))))?;
        let bus = self.gpu_bus.clone();
        let opened = bus.as_deref().map(crate::nvml::NvmlGpu::open);
        let gpu = opened.as_ref().and_then(|g| g.as_ref().ok());
        let stage = crate::nvml::Stage::new("soak", gpu);
        let t0 = crate::watchdog::unix_seconds(std::time::SystemTime::now());
        let w = crate::nvml::watch(soak::sample_period(d), &stage, || {
            self.soak_passes(tiers, d)
        });
        let clock = w.value?;
        if bus.is_none() {
            return Ok(Some((clock, t0, Vec::new())));
        }
        let error = match &opened {
            Some(Err(e)) => Some(e.clone()),
            _ => w.error.clone(),
        };
        let host = self.world.host_of(self.world.rank).to_string();
        let mine = soak::gpu_timeline(
            (self.world.rank, &host, bus.as_deref().unwrap_or_default()),
            t0,
            &w.samples,
            w.xids,
            error,
        );
        let all = self.world.gather_json(&mine)?.unwrap_or_default();
        Ok(Some((clock, t0, all)))
    }

    /// The soak's passes, until the clock says no other fits.
    fn soak_passes(&mut self, tiers: &[topology::Tier], d: f64) -> Result<soak::Clock> {
        let mut clock = soak::Clock::start(d);
        let mut said: Option<std::time::Instant> = None;
        loop {
            let pass_start = std::time::Instant::now();
            for tier in tiers {
                self.tier(tier)?;
            }
            let again = clock.another();
            // A line per pass at most every 10 s: hours of soak stay readable.
            let due = said.map_or(true, |t| t.elapsed().as_secs_f64() >= 10.0);
            if self.world.rank == 0 && (due || !again) {
                said = Some(std::time::Instant::now());
                println!(
                    "# soak pass {}: {:.1} s, {:.0} of {d:.0} s",
                    self.sink.pass + 1,
                    pass_start.elapsed().as_secs_f64(),
                    clock.elapsed_s()
                );
            }
            let again: bool = self.world.broadcast_json(Some(&again))?;
            if !again {
                return Ok(clock);
            }
            self.sink.pass += 1;
            crate::metrics::gauge(
                "burnin_soak_pass",
                "The soak pass being measured (0 is the first).",
                &[],
                f64::from(self.sink.pass),
            );
        }
    }

    /// Every round of `tier`, one after the other.
    fn tier(&mut self, tier: &topology::Tier) -> Result<()> {
        crate::metrics::phase(&format!("sweep {}", tier.kind.name()));
        if self.world.rank == 0 && tier.kind != TierKind::World && self.sink.pass == 0 {
            println!(
                "# tier {}: {} round(s)",
                tier.kind.name(),
                tier.rounds.len()
            );
        }
        for ri in 0..tier.rounds.len() {
            if self.world.rank == 0 && self.sink.progress {
                eprint!(
                    "\r[tier {} round {}/{}]      ",
                    tier.kind.name(),
                    ri + 1,
                    tier.rounds.len()
                );
            }
            self.round(tier, ri)?;
        }
        if tier.kind == TierKind::Pairs && self.sink.pass == 0 && self.args.duration.is_none() {
            // twice at most: a slow link stays slow, a busy moment passes
            for _ in 0..2 {
                if !self.remeasure_slow_pairs(tier)? {
                    break;
                }
            }
        }
        Ok(())
    }

    /// A pair judged slow is measured again before it is named: the rounds holding a
    /// slow pair run once more (true when some did), whole (so that pairs share uplinks as they did), and
    /// the judgement takes each pair's best measurement. One slow measurement of a
    /// busy machine (another job, a daemon) then names nothing; a slow link is slow
    /// twice.
    fn remeasure_slow_pairs(&mut self, tier: &topology::Tier) -> Result<bool> {
        let again: Vec<usize> = if self.world.rank == 0 {
            let pts: Vec<Point> = self
                .sink
                .points
                .iter()
                .filter(|p| p.tier == TierKind::Pairs)
                .cloned()
                .collect();
            let hosts: Vec<String> = self.world.nodes.iter().map(|n| n.host.clone()).collect();
            let a = analysis::analyze(&pts, None, &self.rules, &hosts);
            let slow: Vec<usize> = a
                .tiers
                .iter()
                .filter(|t| t.tier == TierKind::Pairs)
                .flat_map(|t| t.groups.iter().filter(|g| g.outlier).map(|g| g.group))
                .collect();
            (0..tier.rounds.len())
                .filter(|&ri| {
                    tier.rounds[ri]
                        .groups
                        .iter()
                        .any(|g| slow.contains(&g.index))
                })
                .collect()
        } else {
            Vec::new()
        };
        let again: Vec<usize> = self.world.broadcast_json(Some(&again))?;
        if again.is_empty() {
            return Ok(false);
        }
        if self.world.rank == 0 {
            println!(
                "# tier pairs: {} round(s) with a slow pair measured again",
                again.len()
            );
        }
        for ri in again {
            self.round(tier, ri)?;
        }
        Ok(true)
    }

    /// One round: this rank's group measures (if it is in one), then rank 0 gathers
    /// the other groups' points.
    fn round(&mut self, tier: &topology::Tier, ri: usize) -> Result<()> {
        let world = self.world;
        let round = &tier.rounds[ri];
        let mine = round
            .groups
            .iter()
            .find(|g| g.members.binary_search(&world.rank).is_ok());
        let comm = world.split(mine.map(|g| g.index as u32), world.rank as i32);
        let mut gathered: Vec<Point> = Vec::new();
        let built = match (mine, comm) {
            (Some(g), Some(comm)) => Some((
                g,
                backend::build(self.kind, comm, world, self.cfg, self.dog.clone())?,
            )),
            _ => None,
        };
        // The groups of a round start together once every communicator is up (they
        // come up at different times), so that they share the fabric for their whole
        // run, as the round means: otherwise a group that starts late runs its last
        // iterations alone, faster than the fabric allows the round.
        if round.groups.len() > 1 {
            world.quiet_barrier();
        }
        if let Some((g, be)) = built {
            let info = GroupInfo {
                tier: tier.kind,
                group: g.index,
                label: g.label.clone(),
                members: g.members.clone(),
                hosts: g
                    .nodes
                    .iter()
                    .map(|&i| world.nodes[i].host.clone())
                    .collect(),
            };
            self.note_comm(info.tier, info.group, info.members.clone());
            let searched = matches!(tier.kind, TierKind::Bisect | TierKind::Map);
            let streamed;
            let plan = match (searched, self.stream_s) {
                (true, Some(s)) => {
                    streamed = fabric_map::streamed(self.bisect_plan, s);
                    &streamed
                }
                (true, None) => self.bisect_plan,
                (false, _) => self.plan,
            };
            let largest = self.plan.sizes.last().copied().unwrap_or(0);
            let sizes = if searched {
                // The same block per peer in every group, so that groups of any size
                // compare (see find_slow::bisect_bytes).
                vec![find_slow::bisect_bytes(
                    largest,
                    world.size,
                    g.members.len(),
                )]
            } else if tier.kind == TierKind::Pairs {
                vec![largest]
            } else {
                self.plan.sizes.clone()
            };
            let hooks = self.args.hooks(world.rank)?;
            let print_table =
                world.rank == 0 && tier.kind == TierKind::World && self.sink.pass == 0;
            let sink = &mut self.sink;
            let mut live = |p: Point| -> Result<()> {
                if world.rank == 0 {
                    sink.record(p)?;
                }
                Ok(())
            };
            let pts = run_group(
                be.as_ref(),
                plan,
                &sizes,
                &info,
                self.cfg.deadline,
                hooks,
                print_table,
                &mut live,
            )?;
            if world.rank != 0 {
                gathered = pts;
            }
        }
        // Ranks done early wait without spinning; then group leaders other than
        // rank 0 send their points to rank 0.
        world.quiet_barrier();
        if let Some(all) = world.gather_json(&gathered)? {
            let mut round_points: Vec<Point> = self
                .sink
                .points
                .iter()
                .filter(|p| p.tier == tier.kind && p.pass == self.sink.pass)
                .cloned()
                .collect();
            for p in all.into_iter().flatten() {
                round_points.push(p.clone());
                self.sink.record(p)?;
            }
            let summary = !matches!(
                tier.kind,
                TierKind::World | TierKind::Bisect | TierKind::Map
            ) && self.sink.pass == 0;
            if summary && ri + 1 == tier.rounds.len() {
                print!("{}", group_summary_lines(&round_points));
            }
        }
        Ok(())
    }
}

/// `--fabric` (with `--oversubscription`), read by rank 0 and shared, checked against
/// the job's hosts before anything is measured: a host no switch holds is exit 2.
fn load_fabric(
    world: &World,
    args: &SweepArgs,
) -> Result<Option<crate::topology::switches::Fabric>> {
    let Some(path) = args.fabric.as_deref() else {
        return Ok(None);
    };
    let mine: std::result::Result<crate::topology::switches::Fabric, String> = if world.rank == 0 {
        crate::topology::switches::Fabric::load(path)
            .and_then(|mut f| {
                f.oversubscription = args.oversubscription;
                let hosts: Vec<String> = world.nodes.iter().map(|n| n.host.clone()).collect();
                let missing = f.unplaced(&hosts);
                if !missing.is_empty() {
                    anyhow::bail!(
                        "--fabric {}: no switch holds {} (hosts of this job: {})",
                        path.display(),
                        missing.join(", "),
                        hosts.join(", ")
                    );
                }
                Ok(f)
            })
            .map_err(|e| format!("{e:#}"))
    } else {
        Err(String::new())
    };
    match world.broadcast_json(Some(&mine))? {
        Ok(f) => Ok(Some(f)),
        Err(e) => anyhow::bail!(crate::error::Agreed(e)),
    }
}

/// Which transports carried each tier's traffic (rank 0 gets the report), unless
/// `--no-transport`.
fn collect_transport(
    world: &World,
    kind: BackendKind,
    args: &SweepArgs,
    tiers: &[topology::Tier],
    comms: &[CommRecord],
) -> Result<Option<TransportReport>> {
    if args.no_transport {
        return Ok(None);
    }
    transport::tidy(kind);
    let mine = transport::collect(kind, world.rank, &world.host, &world.node_of, comms);
    let node_hosts: Vec<String> = world.nodes.iter().map(|n| n.host.clone()).collect();
    Ok(world.gather_json(&mine)?.map(|all| {
        let groups: Vec<TierGroups> = tiers
            .iter()
            .map(|t| TierGroups {
                tier: t.kind,
                groups: t
                    .rounds
                    .iter()
                    .flat_map(|r| r.groups.iter().map(|g| g.members.clone()))
                    .collect(),
            })
            .collect();
        transport::build_report(kind, &all, &world.node_of, &node_hosts, &groups)
    }))
}

/// What run.json carries besides the points.
struct Ends {
    provenance: Provenance,
    plan: Plan,
    topology: Option<Topology>,
    fabric: Option<crate::topology::switches::Fabric>,
    transport: Option<TransportReport>,
    find_slow: Option<FindSlow>,
    fabric_map: Option<crate::results::sweep::FabricMap>,
    /// The soak's judgement and when it began (Unix seconds).
    soak: Option<(Soak, f64)>,
}

/// rank 0: the footer, the analysis, the verdict, and run.json.
fn finish(world: &World, args: &SweepArgs, points: Vec<Point>, ends: Ends) -> Result<Outcome> {
    let node_hosts: Vec<String> = world.nodes.iter().map(|n| n.host.clone()).collect();
    let world_points: Vec<Point> = points
        .iter()
        .filter(|p| p.tier == TierKind::World)
        .cloned()
        .collect();
    print!("{}", table_footer(&points));
    let topo = ends.topology.as_ref();
    let mut rules = Rules::from(topo, args.outlier_fraction, args.min_fraction);
    rules.fabric = ends.fabric.clone();
    let analysis = analysis::analyze(&points, topo, &rules, &node_hosts);
    print!("{}", render_analysis(&analysis));
    if let Some(t) = &ends.transport {
        print!("{}", transport::render_lines(t));
    }
    let wrong_total: u64 = points.iter().filter_map(|p| p.wrong).sum();
    let found_clean = ends.find_slow.as_ref().map_or(true, FindSlow::clean);
    if let Some((s, t0)) = &ends.soak {
        print!("{}", soak::render(s, *t0));
    }
    let soak_ok = ends.soak.as_ref().map_or(true, |(s, _)| s.pass);
    let outcome = Outcome::from_ok(wrong_total == 0 && analysis.pass && found_clean && soak_ok);
    let pass = outcome == Outcome::Pass;
    println!("# verdict: {}", if pass { "PASS" } else { "FAIL" });
    if let Some(dir) = &args.out {
        let report = SweepReport {
            schema_version: SCHEMA_VERSION,
            kind: "sweep".into(),
            provenance: ends.provenance,
            plan: ends.plan,
            avg_busbw_gbps: avg_busbw(&world_points),
            wrong_total,
            points,
            analysis,
            topology: ends.topology,
            fabric: ends.fabric,
            transport: ends.transport,
            find_slow: ends.find_slow,
            fabric_map: ends.fabric_map,
            soak: ends.soak.map(|(s, _)| s),
            finished_unix: crate::watchdog::unix_seconds(std::time::SystemTime::now()),
            outcome: if pass { "pass" } else { "fail" }.into(),
        };
        results::write_json_atomic(&dir.join("run.json"), &report)?;
        println!("# results: {}", dir.join("run.json").display());
    }
    Ok(outcome)
}

/// Tier verdicts and findings as text.
pub fn render_analysis(a: &Analysis) -> String {
    let mut s = String::new();
    if a.tiers.is_empty() {
        return s;
    }
    s.push_str("#\n# tiers (busbw at large messages, GB/s; groups vs the tier median)\n");
    let header = [
        "tier",
        "collective",
        "groups",
        "median",
        "worst",
        "worst group",
        "expected",
        "verdict",
    ];
    let rows: Vec<Vec<String>> = a
        .tiers
        .iter()
        .map(|t| {
            let mut r = t.table_cells();
            r.push(match t.meets_expectation {
                Some(true) => "ok".into(),
                Some(false) => "BELOW".into(),
                None => "-".into(),
            });
            r
        })
        .collect();
    for line in crate::table::render(&header, &rows).lines() {
        s.push_str("# ");
        s.push_str(line);
        s.push('\n');
    }
    if a.findings.is_empty() {
        s.push_str("# no outlier node or link\n");
    }
    for f in &a.findings {
        s.push_str(&format!("# {}: {}\n", f.severity.to_uppercase(), f.text));
    }
    if !a.outlier_nodes.is_empty() {
        s.push_str(&format!(
            "# outlier nodes: {}\n",
            a.outlier_nodes.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> SweepArgs {
        let mut argv = vec!["burnin", "sweep"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Sweep(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn ladder_by_factor_and_by_step() {
        assert_eq!(
            size_ladder(1024, 16384, Some(4), None).unwrap(),
            vec![1024, 4096, 16384]
        );
        assert_eq!(size_ladder(8, 8, None, None).unwrap(), vec![8]);
        assert_eq!(size_ladder(8, 40, None, Some(16)).unwrap(), vec![8, 24, 40]);
        assert_eq!(
            size_ladder(8, 100, None, None).unwrap(),
            vec![8, 16, 32, 64]
        );
    }

    #[test]
    fn bad_ladders_name_the_flag() {
        let e = format!("{:#}", size_ladder(2048, 1024, None, None).unwrap_err());
        assert!(e.contains("-b/--min-bytes") && e.contains("2KiB"), "{e}");
        let e = format!("{:#}", size_ladder(8, 1024, Some(1), None).unwrap_err());
        assert!(e.contains("-f/--step-factor"), "{e}");
        let e = format!("{:#}", size_ladder(8, 1024, None, Some(0)).unwrap_err());
        assert!(e.contains("-i/--step-bytes"), "{e}");
    }

    #[test]
    fn plan_expands_all_and_validates() {
        let p = plan(
            &args(&["-c", "all", "-b", "1K", "-e", "16M", "-f", "4"]),
            4,
            BackendKind::Mpi,
            |d| !matches!(d, Dtype::F16 | Dtype::Bf16),
        )
        .unwrap();
        assert_eq!(p.collectives.len(), 7);
        assert_eq!(p.sizes.len(), 8);
        assert_eq!(p.placements, vec![false, true]);
        let mpi = |d: Dtype| !matches!(d, Dtype::F16 | Dtype::Bf16);
        let e = format!(
            "{:#}",
            plan(&args(&["-d", "bf16"]), 4, BackendKind::Mpi, mpi).unwrap_err()
        );
        assert!(e.contains("-d/--dtype") && e.contains("no bf16"), "{e}");
        let e = format!(
            "{:#}",
            plan(
                &args(&["-c", "all_gather", "-b", "1K", "-e", "1K"]),
                3,
                BackendKind::Mpi,
                mpi
            )
            .unwrap_err()
        );
        assert!(e.contains("cannot split evenly over 3 ranks"), "{e}");
        let e = format!(
            "{:#}",
            plan(&args(&["-c", "allreduce,bogus"]), 2, BackendKind::Mpi, mpi).unwrap_err()
        );
        assert!(e.contains("-c/--collectives") && e.contains("bogus"), "{e}");
        let e = format!(
            "{:#}",
            plan(&args(&["-r", "4"]), 4, BackendKind::Mpi, mpi).unwrap_err()
        );
        assert!(e.contains("-r/--root"), "{e}");
        let e = format!(
            "{:#}",
            plan(&args(&["-b", "6", "-e", "6"]), 1, BackendKind::Mpi, mpi).unwrap_err()
        );
        assert!(e.contains("not a whole number of f32"), "{e}");
        let d = plan(&args(&["-d", "all"]), 2, BackendKind::Mpi, mpi).unwrap();
        assert_eq!(
            d.dtypes,
            vec![Dtype::F32, Dtype::F64, Dtype::I32, Dtype::U8]
        );
    }

    /// Regression: an 8 GiB f32 sweep (2^31 elements, nccl-tests' usual top size) was
    /// refused for NCCL too, whose counts are size_t; only MPI's are C ints.
    #[test]
    fn eight_gib_of_f32_is_refused_for_mpi_only() {
        let a = args(&["-b", "8G", "-e", "8G"]);
        let e = format!("{:#}", plan(&a, 1, BackendKind::Mpi, |_| true).unwrap_err());
        assert!(e.contains("-e/--max-bytes") && e.contains("MPI"), "{e}");
        let p = plan(&a, 1, BackendKind::Nccl, |_| true).unwrap();
        assert_eq!(p.sizes, vec![8 << 30]);
    }

    #[test]
    fn fixed_iterations_turn_adaptive_off() {
        let p = plan(&args(&["-n", "20", "-w", "5"]), 2, BackendKind::Mpi, |_| {
            true
        })
        .unwrap();
        assert_eq!(
            p.sampling,
            Sampling::Fixed {
                warmup: 5,
                iters: 20
            }
        );
    }

    #[test]
    fn timing_method_is_batch_unless_asked_and_names_its_flag() {
        let any = |_: Dtype| true;
        let p = plan(&args(&[]), 2, BackendKind::Mpi, any).unwrap();
        assert_eq!(p.timing, Timing::Batch);
        let p = plan(&args(&["--timing", "osu"]), 2, BackendKind::Mpi, any).unwrap();
        assert_eq!(p.timing, Timing::Osu);
        let p = plan(&args(&["--timing", "nccl-tests"]), 2, BackendKind::Mpi, any).unwrap();
        assert_eq!(p.timing, Timing::Batch);
        let e = format!(
            "{:#}",
            plan(&args(&["--timing", "fast"]), 2, BackendKind::Mpi, any).unwrap_err()
        );
        assert!(e.contains("--timing") && e.contains("\"fast\""), "{e}");
        // A run.json written before the field reads as batch.
        let mut v = serde_json::to_value(&p).unwrap();
        v.as_object_mut().unwrap().remove("timing");
        let old: Plan = serde_json::from_value(v).unwrap();
        assert_eq!(old.timing, Timing::Batch);
    }
}
