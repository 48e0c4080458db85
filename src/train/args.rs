//! `burnin train`'s flags and their validation into a [`TrainPlan`].
//!
//! This part builds without libtorch, so `burnin train` parses (and says why it cannot
//! run) in a build without the `train` feature. Validation is pure and unit-tested:
//! every rank reaches the same verdict on the same (agreed) flags.
use crate::error::usage;
pub use crate::results::train::{DeviceChoice, DiePhase, DiePoint, ModelConfig, Preset, TrainPlan};
use crate::units::Bytes;
use anyhow::Result;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Debug, Serialize, Clone)]
pub struct TrainArgs {
    /// Model size preset; --width/--depth/--heads/--seq/--vocab/--batch/--lr override it.
    #[arg(long, value_enum, default_value_t = Preset::Tiny)]
    pub preset: Preset,
    /// Model width (embedding size); a multiple of --heads.
    #[arg(long)]
    pub width: Option<u32>,
    /// Number of transformer blocks.
    #[arg(long)]
    pub depth: Option<u32>,
    /// Attention heads per block.
    #[arg(long)]
    pub heads: Option<u32>,
    /// Sequence length (tokens per sample).
    #[arg(long)]
    pub seq: Option<u32>,
    /// Vocabulary size.
    #[arg(long)]
    pub vocab: Option<u32>,
    /// Samples per rank per step.
    #[arg(long)]
    pub batch: Option<u32>,
    /// AdamW learning rate.
    #[arg(long)]
    pub lr: Option<f64>,
    /// Total steps to reach (a resumed run continues up to this step).
    #[arg(long, default_value_t = 60)]
    pub steps: u64,
    /// Seed of the initial weights and of the synthetic data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// cpu, cuda (GPU = local rank) or auto.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Gradient bucket size for the all-reduce (a multiple of 4 bytes).
    #[arg(long = "bucket", default_value = "4M", value_name = "SIZE")]
    pub bucket: Bytes,
    /// Checkpoint directory (default: OUT/ckpt with --out, else ./burnin-ckpt). Every
    /// rank writes its shard here; rank 0 writes the manifests.
    #[arg(long, value_name = "DIR")]
    pub ckpt_dir: Option<PathBuf>,
    /// Write a checkpoint every N steps and at the last step (0: never).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub ckpt_every: u64,
    /// Keep the newest K complete checkpoints.
    #[arg(long, default_value_t = 2, value_name = "K")]
    pub keep: usize,
    /// Pad every shard to at least this size (e.g. 64M) so the storage test is
    /// representative of a real model's checkpoint.
    #[arg(long, value_name = "SIZE")]
    pub ckpt_bytes: Option<Bytes>,
    /// Continue from the newest checkpoint in --ckpt-dir whose manifest verifies.
    #[arg(long)]
    pub resume: bool,
    /// Write run.json and steps.jsonl to this folder (steps appended as they happen).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print a progress line every N steps (0: only the summary).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub log_every: u64,
    /// Test only: STEP:PHASE[:RANK] — that rank (default 0) SIGKILLs itself at that
    /// point of the checkpoint of STEP. Phases: shard-tmp (shard written, not yet
    /// renamed), shard-done (shard durable), before-manifest (rank 0, all shards durable).
    #[arg(long, hide = true, value_name = "STEP:PHASE[:RANK]")]
    pub test_die: Option<String>,
    /// Compare every replica's weights (a hash, all-gathered) every N steps and name a
    /// replica that differs from the majority, with the first step it did (0: at the
    /// end only).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub replica_check_every: u64,
    /// Test only: RANK:STEP — that rank changes one weight after STEP's update, as
    /// a GPU that computed one value wrong would.
    #[arg(long, hide = true, value_name = "RANK:STEP")]
    pub test_diverge: Option<String>,
    /// Chaos: a fault this run injects on purpose (see `burnin chaos`).
    #[command(flatten)]
    pub fault: crate::fault::FaultArgs,
}

struct PresetValues {
    model: ModelConfig,
    batch: i64,
    lr: f64,
}

fn preset_values(p: Preset) -> PresetValues {
    match p {
        Preset::Tiny => PresetValues {
            model: ModelConfig {
                vocab: 256,
                width: 64,
                depth: 2,
                heads: 4,
                seq: 64,
            },
            batch: 4,
            lr: 3e-3,
        },
        Preset::GpuSmall => PresetValues {
            model: ModelConfig {
                vocab: 8192,
                width: 512,
                depth: 8,
                heads: 8,
                seq: 512,
            },
            batch: 16,
            lr: 1e-3,
        },
    }
}

fn parse_die(text: &str, world_size: usize) -> Result<DiePoint> {
    let flag = "--test-die";
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err(usage(flag, format!("'{text}' is not STEP:PHASE[:RANK]")));
    }
    let step: u64 = parts[0]
        .parse()
        .map_err(|_| usage(flag, format!("'{}' is not a step number", parts[0])))?;
    let phase = match parts[1] {
        "shard-tmp" => DiePhase::ShardTmp,
        "shard-done" => DiePhase::ShardDone,
        "before-manifest" => DiePhase::BeforeManifest,
        p => {
            return Err(usage(
                flag,
                format!("unknown phase '{p}' (shard-tmp, shard-done, before-manifest)"),
            ))
        }
    };
    let rank: usize = match parts.get(2) {
        Some(r) => r
            .parse()
            .map_err(|_| usage(flag, format!("'{r}' is not a rank")))?,
        None => 0,
    };
    if rank >= world_size {
        return Err(usage(
            flag,
            format!("rank {rank} does not exist in a job of {world_size} ranks"),
        ));
    }
    Ok(DiePoint { step, phase, rank })
}

fn positive(flag: &str, v: Option<u32>, default: i64, max: i64) -> Result<i64> {
    let v = v.map(i64::from).unwrap_or(default);
    if v < 1 || v > max {
        return Err(usage(flag, format!("{v} must be between 1 and {max}")));
    }
    Ok(v)
}

/// The model's shape from the flags (the preset's where a flag is absent), checked:
/// heads divide the width, at most 4e9 parameters.
fn model_of(args: &TrainArgs, p: &PresetValues) -> Result<ModelConfig> {
    let model = ModelConfig {
        width: positive("--width", args.width, p.model.width, 65_536)?,
        depth: positive("--depth", args.depth, p.model.depth, 1024)?,
        heads: positive("--heads", args.heads, p.model.heads, 1024)?,
        seq: positive("--seq", args.seq, p.model.seq, 1 << 20)?,
        vocab: positive("--vocab", args.vocab, p.model.vocab, 1 << 24)?,
    };
    if model.vocab < 2 {
        return Err(usage("--vocab", "must be at least 2"));
    }
    if model.width % model.heads != 0 {
        return Err(usage(
            "--width",
            format!(
                "{} is not a multiple of --heads {}",
                model.width, model.heads
            ),
        ));
    }
    if model.parameters() > 4_000_000_000 {
        return Err(usage(
            "--width/--depth/--vocab",
            format!(
                "a model of {} parameters is beyond burnin train (at most 4e9)",
                model.parameters()
            ),
        ));
    }
    Ok(model)
}

/// `--batch` (samples per rank and step), at most 2^28 tokens per rank and step.
fn batch_of(args: &TrainArgs, p: &PresetValues, model: &ModelConfig) -> Result<i64> {
    let batch = positive("--batch", args.batch, p.batch, 1 << 20)?;
    if batch as u64 * (model.seq as u64 + 1) > 1 << 28 {
        return Err(usage(
            "--batch",
            format!(
                "{batch} samples of {} tokens is more than 2^28 tokens per rank and step",
                model.seq + 1
            ),
        ));
    }
    Ok(batch)
}

/// `--bucket` in bytes: a positive multiple of 4 (f32) of at most 2^31-1 elements.
fn bucket_of(args: &TrainArgs) -> Result<u64> {
    let bucket = args.bucket.get();
    if bucket < 4 || bucket % 4 != 0 {
        return Err(usage(
            "--bucket",
            format!(
                "{} must be a positive multiple of 4 bytes (f32)",
                args.bucket
            ),
        ));
    }
    if bucket / 4 > i32::MAX as u64 {
        return Err(usage(
            "--bucket",
            format!("{} is more than 2^31-1 f32 elements", args.bucket),
        ));
    }
    Ok(bucket)
}

/// The checkpoint directory: `--ckpt-dir`, else `--out`/ckpt, else ./burnin-ckpt.
fn ckpt_dir_of(args: &TrainArgs) -> PathBuf {
    match (&args.ckpt_dir, &args.out) {
        (Some(d), _) => d.clone(),
        (None, Some(out)) => out.join("ckpt"),
        (None, None) => PathBuf::from("burnin-ckpt"),
    }
}

/// Validate the flags for a job of `world_size` ranks.
pub fn plan(args: &TrainArgs, world_size: usize) -> Result<TrainPlan> {
    let p = preset_values(args.preset);
    let model = model_of(args, &p)?;
    let batch = batch_of(args, &p, &model)?;
    let lr = args.lr.unwrap_or(p.lr);
    if !(lr > 0.0 && lr.is_finite() && lr < 10.0) {
        return Err(usage("--lr", format!("{lr} must be a number in (0, 10)")));
    }
    if args.steps == 0 || args.steps > 1 << 40 {
        return Err(usage("--steps", "must be at least 1"));
    }
    let bucket = bucket_of(args)?;
    if args.keep == 0 {
        return Err(usage("--keep", "must keep at least 1 checkpoint"));
    }
    if let Some(b) = args.ckpt_bytes {
        if b.get() > 1 << 40 {
            return Err(usage("--ckpt-bytes", format!("{b} is more than 1TiB")));
        }
    }
    let ckpt_dir = ckpt_dir_of(args);
    let die = match &args.test_die {
        Some(t) => Some(parse_die(t, world_size)?),
        None => None,
    };
    let diverge = match &args.test_diverge {
        Some(t) => Some(parse_diverge(t, world_size)?),
        None => None,
    };
    let fault = crate::fault::plan(
        &args.fault,
        world_size,
        args.steps,
        args.ckpt_every,
        args.keep,
        args.seed,
    )?;
    Ok(TrainPlan {
        preset: args.preset,
        model,
        batch,
        lr,
        steps: args.steps,
        seed: args.seed,
        device: args.device,
        bucket_bytes: bucket,
        ckpt_dir,
        ckpt_every: args.ckpt_every,
        keep: args.keep,
        ckpt_bytes: args.ckpt_bytes.map(|b| b.get()),
        resume: args.resume,
        out: args.out.clone(),
        log_every: args.log_every,
        die,
        fault,
        replica_check_every: args.replica_check_every,
        diverge,
    })
}

/// `--test-diverge RANK:STEP`.
fn parse_diverge(s: &str, world_size: usize) -> Result<(usize, u64)> {
    let bad = |why: String| usage("--test-diverge", format!("{s:?}: {why}"));
    let (r, st) = s
        .split_once(':')
        .ok_or_else(|| bad("expected RANK:STEP".into()))?;
    let rank: usize = r.parse().map_err(|_| bad("RANK is not a number".into()))?;
    let step: u64 = st.parse().map_err(|_| bad("STEP is not a number".into()))?;
    if rank >= world_size {
        return Err(bad(format!(
            "rank {rank} is not below the {world_size} rank(s)"
        )));
    }
    Ok((rank, step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: TrainArgs,
    }

    fn args(extra: &[&str]) -> TrainArgs {
        let mut argv = vec!["t"];
        argv.extend_from_slice(extra);
        T::parse_from(argv).a
    }

    #[test]
    fn defaults_are_the_tiny_preset() {
        let p = plan(&args(&[]), 4).unwrap();
        assert_eq!(p.model.width, 64);
        assert_eq!(p.model.heads, 4);
        assert_eq!(p.steps, 60);
        assert_eq!(p.ckpt_dir, PathBuf::from("burnin-ckpt"));
        assert!(p.model.parameters() > 100_000 && p.model.parameters() < 200_000);
        let g = plan(&args(&["--preset", "gpu-small"]), 4).unwrap();
        assert!(
            g.model.parameters() > 30_000_000,
            "{}",
            g.model.parameters()
        );
    }

    #[test]
    fn flags_override_the_preset_and_ckpt_dir_follows_out() {
        let p = plan(&args(&["--width", "32", "--heads", "2", "--out", "R"]), 2).unwrap();
        assert_eq!(p.model.width, 32);
        assert_eq!(p.model.depth, 2);
        assert_eq!(p.ckpt_dir, PathBuf::from("R/ckpt"));
    }

    #[test]
    fn bad_flags_name_themselves() {
        let cases: [(&[&str], &str); 7] = [
            (
                &["--width", "30"],
                "--width: 30 is not a multiple of --heads 4",
            ),
            (&["--heads", "0"], "--heads: 0 must be between 1"),
            (&["--lr=-1"], "--lr"),
            (&["--bucket", "6"], "--bucket"),
            (&["--keep", "0"], "--keep"),
            (&["--steps", "0"], "--steps"),
            (&["--test-die", "3:nowhere"], "unknown phase 'nowhere'"),
        ];
        for (a, want) in cases {
            let e = format!("{:#}", plan(&args(a), 4).unwrap_err());
            assert!(e.contains(want), "{a:?}: {e}");
        }
        let e = format!(
            "{:#}",
            plan(&args(&["--batch", "1000000", "--seq", "1000"]), 4).unwrap_err()
        );
        assert!(e.contains("--batch"), "{e}");
        let e = format!(
            "{:#}",
            plan(&args(&["--width", "65536", "--depth", "1000"]), 4).unwrap_err()
        );
        assert!(e.contains("beyond burnin train"), "{e}");
        let e = format!(
            "{:#}",
            plan(&args(&["--test-die", "3:shard-tmp:9"]), 4).unwrap_err()
        );
        assert!(e.contains("rank 9 does not exist"), "{e}");
    }

    #[test]
    fn checkpoints_every_n_and_at_the_end() {
        let p = plan(&args(&["--steps", "45", "--ckpt-every", "20"]), 1).unwrap();
        let due: Vec<u64> = (1..=45).filter(|&s| p.checkpoint_due(s)).collect();
        assert_eq!(due, vec![20, 40, 45]);
        let p = plan(&args(&["--ckpt-every", "0"]), 1).unwrap();
        assert!(!(1..=60).any(|s| p.checkpoint_due(s)));
    }

    #[test]
    fn die_point_parses() {
        let p = plan(&args(&["--test-die", "4:before-manifest"]), 2).unwrap();
        assert_eq!(
            p.die,
            Some(DiePoint {
                step: 4,
                phase: DiePhase::BeforeManifest,
                rank: 0
            })
        );
    }

    #[test]
    fn model_differences_name_the_flags() {
        let a = plan(&args(&[]), 1).unwrap().model;
        let b = plan(&args(&["--width", "128"]), 1).unwrap().model;
        assert_eq!(a.differences(&b), vec!["--width 64 (this run: 128)"]);
    }
}
