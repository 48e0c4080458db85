//! What fault to inject, where and when: the `--fault*` flags shared by `burnin train`
//! (the victim injects it) and `burnin chaos` (the supervisor asks for it), parsed and
//! resolved into a [`FaultPlan`] by pure functions every rank evaluates alike.
//!
//! Kinds: `kill` (SIGKILL to itself), `exit` (exit code [`FAULT_EXIT_CODE`] without
//! MPI_Finalize), `hang` (stays alive, stops making progress), `slow` (sleeps so its
//! steps take `--slow-factor` times as long: a straggler), `corrupt-ckpt` (damages its
//! shard of the newest complete checkpoint, then SIGKILL), `node-loss:NODE` (every
//! rank of NODE SIGKILLs itself at the same step), and `link-cut:NODE`, which no rank
//! can do to itself: `burnin chaos` runs `sim-cluster cut NODE` when the job reaches
//! the step.
//!
//! A fault fires at the *end* of step S — after its update and its checkpoint, if one
//! was due — so the work of steps 1..=S is done and "steps lost" is S minus the step
//! of the checkpoint the job recovers from.
//!
//! `random` ranks and steps come from SplitMix64 seeded with `--fault-seed` (default:
//! the training `--seed`), so every rank draws the same and a run is reproducible; the
//! draw is reported. Random steps stay where the fault is meaningful: `hang` not in
//! the first steps (the deadline is still the start-up allowance there), `slow` with
//! steps left to see it, `corrupt-ckpt` after two checkpoints (one to damage, one to
//! fall back to).
use crate::error::usage;
use anyhow::Result;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Exit code of the `exit` fault (distinct from burnin's own 1 and 2).
pub const FAULT_EXIT_CODE: i32 = 3;

/// The `--fault*` flags (flattened into `burnin train` and `burnin chaos`).
#[derive(Args, Debug, Serialize, Clone, Default, PartialEq, schemars::JsonSchema)]
pub struct FaultArgs {
    /// Inject a failure on purpose: kill, exit, hang, slow, corrupt-ckpt,
    /// node-loss:NODE (train and chaos), link-cut:NODE (chaos on the simulated
    /// cluster). `burnin chaos` takes a comma list and picks one per trial.
    #[arg(long, value_name = "KIND")]
    pub fault: Option<String>,
    /// Rank that injects the fault, or `random` (default).
    #[arg(long, value_name = "RANK|random")]
    pub fault_rank: Option<String>,
    /// Step at whose end the fault fires, or `random` (default).
    #[arg(long, value_name = "STEP|random")]
    pub fault_step: Option<String>,
    /// `slow`: the victim's steps take this many times as long from the fault on.
    #[arg(long, value_name = "F", default_value_t = 3.0)]
    pub slow_factor: f64,
    /// Seed of the `random` draws (default: the training --seed).
    #[arg(long, value_name = "SEED")]
    pub fault_seed: Option<u64>,
}

/// A fault kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "String", try_from = "String")]
#[schemars(with = "String")]
pub enum FaultKind {
    Kill,
    Exit,
    Hang,
    Slow,
    CorruptCkpt,
    /// Every rank of this node dies at once.
    NodeLoss(String),
    /// The node's link is cut (simulated cluster; done by the supervisor).
    LinkCut(String),
}

impl FaultKind {
    pub fn parse(s: &str) -> std::result::Result<FaultKind, String> {
        let t = s.trim();
        let node = |rest: &str, kind: &str| -> std::result::Result<String, String> {
            let n = rest.trim();
            if n.is_empty() || n.contains(char::is_whitespace) {
                Err(format!("{kind}: wants a node name, as in {kind}:node2"))
            } else {
                Ok(n.to_string())
            }
        };
        Ok(match t {
            "kill" => FaultKind::Kill,
            "exit" => FaultKind::Exit,
            "hang" => FaultKind::Hang,
            "slow" => FaultKind::Slow,
            "corrupt-ckpt" => FaultKind::CorruptCkpt,
            _ => {
                if let Some(rest) = t.strip_prefix("node-loss:") {
                    FaultKind::NodeLoss(node(rest, "node-loss")?)
                } else if let Some(rest) = t.strip_prefix("link-cut:") {
                    FaultKind::LinkCut(node(rest, "link-cut")?)
                } else if t == "node-loss" || t == "link-cut" {
                    return Err(format!("{t} wants a node, as in {t}:node2"));
                } else {
                    return Err(format!(
                        "unknown fault '{t}' (kill, exit, hang, slow, corrupt-ckpt, node-loss:NODE, link-cut:NODE)"
                    ));
                }
            }
        })
    }

    /// Name as written on the command line ("kill", "node-loss:node2").
    pub fn name(&self) -> String {
        match self {
            FaultKind::Kill => "kill".into(),
            FaultKind::Exit => "exit".into(),
            FaultKind::Hang => "hang".into(),
            FaultKind::Slow => "slow".into(),
            FaultKind::CorruptCkpt => "corrupt-ckpt".into(),
            FaultKind::NodeLoss(n) => format!("node-loss:{n}"),
            FaultKind::LinkCut(n) => format!("link-cut:{n}"),
        }
    }

    /// The kind without its node ("node-loss"), for grouping trials.
    pub fn family(&self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Exit => "exit",
            FaultKind::Hang => "hang",
            FaultKind::Slow => "slow",
            FaultKind::CorruptCkpt => "corrupt-ckpt",
            FaultKind::NodeLoss(_) => "node-loss",
            FaultKind::LinkCut(_) => "link-cut",
        }
    }

    /// Whether one chosen rank injects it (not a node's ranks, not the supervisor).
    pub fn has_victim_rank(&self) -> bool {
        !matches!(self, FaultKind::NodeLoss(_) | FaultKind::LinkCut(_))
    }

    /// Whether the job is expected to end (and be relaunched): all but `slow`.
    pub fn ends_the_job(&self) -> bool {
        !matches!(self, FaultKind::Slow)
    }

    /// Steps `random` may draw from, inclusive, for a run of `steps` steps.
    pub fn step_range(
        &self,
        steps: u64,
        ckpt_every: u64,
        keep: usize,
    ) -> std::result::Result<(u64, u64), String> {
        let last = steps.saturating_sub(1);
        let (lo, hi) = match self {
            FaultKind::Hang => (3.min(last), last),
            // Steps left to fill the straggler window and its streak.
            FaultKind::Slow => (4, steps.saturating_sub(12)),
            FaultKind::LinkCut(_) => (2.min(last), last),
            FaultKind::CorruptCkpt => {
                check_corrupt_ckpt(ckpt_every, keep)?;
                (2 * ckpt_every, last)
            }
            _ => (1, last),
        };
        if lo < 1 || lo > hi {
            return Err(format!(
                "no step of a {steps}-step run suits {} at random{}; give more --steps or an explicit --fault-step",
                self.name(),
                if *self == FaultKind::CorruptCkpt {
                    format!(" (it needs two checkpoints first: step >= 2 x --ckpt-every = {})", 2 * ckpt_every)
                } else {
                    String::new()
                }
            ));
        }
        Ok((lo, hi))
    }
}

fn check_corrupt_ckpt(ckpt_every: u64, keep: usize) -> std::result::Result<(), String> {
    if ckpt_every == 0 {
        return Err("corrupt-ckpt needs checkpoints (--ckpt-every N > 0)".into());
    }
    if keep < 2 {
        return Err(
            "corrupt-ckpt needs an older checkpoint to fall back to (--keep 2 or more)".into(),
        );
    }
    Ok(())
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl From<FaultKind> for String {
    fn from(k: FaultKind) -> String {
        k.name()
    }
}

impl TryFrom<String> for FaultKind {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<FaultKind, String> {
        FaultKind::parse(&s)
    }
}

/// A rank or step: a number, or drawn at random.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Pick {
    Fixed(u64),
    Random,
}

impl Pick {
    pub fn parse(flag: &str, s: Option<&str>) -> Result<Pick> {
        match s.map(str::trim) {
            None | Some("random") => Ok(Pick::Random),
            Some(t) => t.parse().map(Pick::Fixed).map_err(|_| {
                usage(
                    flag,
                    format!("'{t}' is neither a non-negative number nor 'random'"),
                )
            }),
        }
    }
    pub fn as_arg(self) -> String {
        match self {
            Pick::Fixed(v) => v.to_string(),
            Pick::Random => "random".into(),
        }
    }
}

/// The fault of a run, resolved (identical on every rank).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FaultPlan {
    /// The fault to inject.
    pub kind: FaultKind,
    /// The rank that injects it (None for node-loss and link-cut).
    pub rank: Option<usize>,
    /// The fault fires at the end of this step.
    pub step: u64,
    /// slow: how many times slower the rank computes (--slow-factor).
    pub slow_factor: f64,
    /// The rank was drawn at random (with `seed`).
    pub rank_random: bool,
    /// The step was drawn at random (with `seed`).
    pub step_random: bool,
    /// Seed of the random draws.
    pub seed: u64,
}

impl FaultPlan {
    /// "kill on rank 3 at the end of step 17 (rank and step drawn with seed 5)".
    pub fn describe(&self) -> String {
        let who = match (&self.kind, self.rank) {
            (FaultKind::NodeLoss(n), _) => format!("on every rank of {n}"),
            (FaultKind::LinkCut(n), _) => format!("on {n}'s link"),
            (_, Some(r)) => format!("on rank {r}"),
            (_, None) => String::new(),
        };
        let slow = if self.kind == FaultKind::Slow {
            format!(" (x{})", self.slow_factor)
        } else {
            String::new()
        };
        let drawn: Vec<&str> = [(self.rank_random, "rank"), (self.step_random, "step")]
            .iter()
            .filter(|(r, _)| *r)
            .map(|(_, n)| *n)
            .collect();
        let drawn = if drawn.is_empty() {
            String::new()
        } else {
            format!(" ({} drawn with seed {})", drawn.join(" and "), self.seed)
        };
        format!(
            "{}{slow} {who} at the end of step {}{drawn}",
            self.kind, self.step
        )
    }
}

/// SplitMix64: small, seedable, the same everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in lo..=hi (lo <= hi).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// Uniform in 0..n (n > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed of trial `trial` of a campaign seeded with `seed`.
pub fn trial_seed(seed: u64, trial: usize) -> u64 {
    let mut r = SplitMix64(seed ^ 0x6368_616f_7300_0000);
    for _ in 0..=trial {
        r.next_u64();
    }
    r.next_u64()
}

/// `--fault KIND` parsed and checked with `--slow-factor`: a link cut is refused
/// here (only `burnin chaos` can cut a link).
fn fault_kind(args: &FaultArgs, text: &str) -> Result<FaultKind> {
    let kind = FaultKind::parse(text).map_err(|e| usage("--fault", e))?;
    if let FaultKind::LinkCut(n) = &kind {
        return Err(usage(
            "--fault",
            format!(
                "link-cut:{n} is not something a rank can do to itself: run `burnin chaos --fault link-cut:{n}` on the simulated cluster (it runs `sim-cluster cut {n}`)"
            ),
        ));
    }
    if !(args.slow_factor.is_finite() && args.slow_factor > 1.0 && args.slow_factor <= 1000.0) {
        return Err(usage(
            "--slow-factor",
            format!(
                "{} must be a number above 1 (at most 1000)",
                args.slow_factor
            ),
        ));
    }
    Ok(kind)
}

/// The victim rank of `kind` (`--fault-rank`, or drawn from `rng`), None for a fault
/// that hits a whole node.
fn pick_rank(
    args: &FaultArgs,
    kind: &FaultKind,
    rank_pick: Pick,
    world_size: usize,
    rng: &mut SplitMix64,
) -> Result<Option<usize>> {
    Ok(if kind.has_victim_rank() {
        Some(match rank_pick {
            Pick::Fixed(r) if r as usize >= world_size => {
                return Err(usage(
                    "--fault-rank",
                    format!("rank {r} does not exist in a job of {world_size} ranks"),
                ))
            }
            Pick::Fixed(r) => r as usize,
            Pick::Random => rng.between(0, world_size.saturating_sub(1) as u64) as usize,
        })
    } else {
        if args.fault_rank.is_some() {
            return Err(usage(
                "--fault-rank",
                format!("{kind} hits every rank of the node: leave --fault-rank out"),
            ));
        }
        None
    })
}

/// The step the fault fires at (`--fault-step`, or drawn from `rng` in the range
/// `kind` can recover from).
fn pick_step(
    kind: &FaultKind,
    step_pick: Pick,
    steps: u64,
    ckpt_every: u64,
    keep: usize,
    rng: &mut SplitMix64,
) -> Result<u64> {
    Ok(match step_pick {
        Pick::Fixed(s) => {
            if s < 1 || s >= steps {
                return Err(usage(
                    "--fault-step",
                    format!(
                        "{s} must be between 1 and --steps - 1 = {} (the job must have a step left to recover into)",
                        steps.saturating_sub(1)
                    ),
                ));
            }
            if *kind == FaultKind::CorruptCkpt {
                check_corrupt_ckpt(ckpt_every, keep).map_err(|e| usage("--fault", e))?;
                if s < 2 * ckpt_every {
                    return Err(usage(
                        "--fault-step",
                        format!(
                            "corrupt-ckpt at step {s} would damage the only checkpoint: it needs two complete ones first (step >= 2 x --ckpt-every = {})",
                            2 * ckpt_every
                        ),
                    ));
                }
            }
            s
        }
        Pick::Random => {
            let (lo, hi) = kind
                .step_range(steps, ckpt_every, keep)
                .map_err(|e| usage("--fault-step", e))?;
            rng.between(lo, hi)
        }
    })
}

/// Resolve the `--fault*` flags of a run of `world_size` ranks (None: no fault).
/// Pure: every rank reaches the same plan or the same error.
pub fn plan(
    args: &FaultArgs,
    world_size: usize,
    steps: u64,
    ckpt_every: u64,
    keep: usize,
    default_seed: u64,
) -> Result<Option<FaultPlan>> {
    let Some(text) = &args.fault else {
        for (flag, given) in [
            ("--fault-rank", args.fault_rank.is_some()),
            ("--fault-step", args.fault_step.is_some()),
            ("--fault-seed", args.fault_seed.is_some()),
        ] {
            if given {
                return Err(usage(flag, "needs --fault KIND"));
            }
        }
        return Ok(None);
    };
    let kind = fault_kind(args, text)?;
    let seed = args.fault_seed.unwrap_or(default_seed);
    let mut rng = SplitMix64(seed);
    let rank_pick = Pick::parse("--fault-rank", args.fault_rank.as_deref())?;
    let step_pick = Pick::parse("--fault-step", args.fault_step.as_deref())?;
    let rank = pick_rank(args, &kind, rank_pick, world_size, &mut rng)?;
    let step = pick_step(&kind, step_pick, steps, ckpt_every, keep, &mut rng)?;
    Ok(Some(FaultPlan {
        kind,
        rank,
        step,
        slow_factor: args.slow_factor,
        rank_random: rank.is_some() && rank_pick == Pick::Random,
        step_random: step_pick == Pick::Random,
        seed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(fault: &str, rank: Option<&str>, step: Option<&str>) -> FaultArgs {
        FaultArgs {
            fault: Some(fault.into()),
            fault_rank: rank.map(Into::into),
            fault_step: step.map(Into::into),
            slow_factor: 3.0,
            fault_seed: Some(7),
        }
    }

    #[test]
    fn kinds_parse_and_print_back() {
        for k in [
            "kill",
            "exit",
            "hang",
            "slow",
            "corrupt-ckpt",
            "node-loss:node2",
            "link-cut:node1",
        ] {
            assert_eq!(FaultKind::parse(k).unwrap().name(), k);
        }
        assert!(FaultKind::parse("explode")
            .unwrap_err()
            .contains("unknown fault"));
        assert!(FaultKind::parse("link-cut")
            .unwrap_err()
            .contains("link-cut:node2"));
        assert!(FaultKind::parse("node-loss:").is_err());
        let j = serde_json::to_string(&FaultKind::NodeLoss("n1".into())).unwrap();
        assert_eq!(j, "\"node-loss:n1\"");
    }

    #[test]
    fn random_draws_are_reproducible_and_in_range() {
        let a = plan(&args("kill", None, None), 8, 40, 10, 2, 1)
            .unwrap()
            .unwrap();
        let b = plan(&args("kill", None, None), 8, 40, 10, 2, 1)
            .unwrap()
            .unwrap();
        assert_eq!(a, b);
        assert!(a.rank_random && a.step_random);
        for seed in 0..200 {
            let mut x = args("corrupt-ckpt", None, None);
            x.fault_seed = Some(seed);
            let p = plan(&x, 4, 40, 10, 2, 1).unwrap().unwrap();
            assert!((20..=39).contains(&p.step), "{p:?}");
            assert!(p.rank.unwrap() < 4);
            x.fault = Some("hang".into());
            let p = plan(&x, 4, 40, 10, 2, 1).unwrap().unwrap();
            assert!((3..=39).contains(&p.step), "{p:?}");
            x.fault = Some("slow".into());
            let p = plan(&x, 4, 40, 10, 2, 1).unwrap().unwrap();
            assert!((4..=28).contains(&p.step), "{p:?}");
        }
        let p = plan(&args("kill", Some("3"), Some("5")), 4, 40, 10, 2, 1)
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.rank, p.step, p.rank_random, p.step_random),
            (Some(3), 5, false, false)
        );
        assert!(
            p.describe().contains("kill on rank 3 at the end of step 5"),
            "{}",
            p.describe()
        );
    }

    #[test]
    fn bad_fault_flags_name_themselves() {
        let e =
            |a: FaultArgs, steps: u64| format!("{:#}", plan(&a, 4, steps, 10, 2, 1).unwrap_err());
        assert!(
            e(args("kill", Some("4"), None), 40).contains("--fault-rank: rank 4 does not exist")
        );
        assert!(e(args("kill", None, Some("40")), 40)
            .contains("--fault-step: 40 must be between 1 and"));
        assert!(e(args("kill", None, Some("x")), 40).contains("--fault-step: 'x'"));
        assert!(e(args("corrupt-ckpt", None, Some("15")), 40).contains("only checkpoint"));
        assert!(e(args("corrupt-ckpt", None, None), 15).contains("two checkpoints"));
        assert!(e(args("link-cut:node1", None, None), 40).contains("burnin chaos"));
        assert!(e(args("node-loss:node1", Some("1"), None), 40).contains("leave --fault-rank out"));
        let mut slow = args("slow", None, None);
        slow.slow_factor = 1.0;
        assert!(e(slow, 40).contains("--slow-factor"));
        let orphan = FaultArgs {
            fault_step: Some("3".into()),
            ..FaultArgs::default()
        };
        assert!(e(orphan, 40).contains("--fault-step: needs --fault"));
        let none = FaultArgs {
            slow_factor: 3.0,
            ..FaultArgs::default()
        };
        assert_eq!(plan(&none, 4, 40, 10, 2, 1).unwrap(), None);
    }

    #[test]
    fn node_loss_has_no_single_victim() {
        let p = plan(&args("node-loss:node1", None, Some("6")), 8, 40, 10, 2, 1)
            .unwrap()
            .unwrap();
        assert_eq!(p.rank, None);
        assert!(p.describe().contains("every rank of node1"));
    }

    #[test]
    fn trial_seeds_differ() {
        let s: Vec<u64> = (0..10).map(|t| trial_seed(1, t)).collect();
        let mut d = s.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 10);
        assert_eq!(trial_seed(1, 3), s[3]);
    }
}
