//! Checkpoints you can trust (DESIGN.md): every rank writes its shard under a
//! temporary name, fsyncs it, renames it into place and fsyncs the directory; only
//! when every rank has reported its shard durable (a gather to rank 0, which is the
//! barrier) does rank 0 write the manifest — sizes and sha256 of every shard, the
//! step, the world size and the model — atomically and last. So a checkpoint is
//! either complete (a manifest exists and every shard matches it) or visibly torn (no
//! manifest). Restore takes the newest checkpoint whose manifest verifies.
//!
//! Layout: `DIR/step-000000040/{rank-00000.safetensors, …, manifest.json}`.
//!
//! Every rank's shard holds the whole training state as that rank has it: weights,
//! AdamW moments and step count, the step, the data cursor and the data stream's seed
//! (the "RNG state": batches are a function of (seed, step, rank), see `data.rs`),
//! plus an optional `pad` tensor of incompressible bytes (`--ckpt-bytes`). With plain
//! data parallelism the weights are replicas, so each shard is a full copy; that is
//! exactly the load a real DDP job puts on the storage when every rank saves.
//!
//! Policy on what a resume finds, newest first:
//! - no manifest: torn (the job stopped while writing it) — skipped with a warning;
//! - a manifest that does not parse or whose own checksum fails: corrupt. burnin never
//!   leaves a partial manifest (it is renamed into place), so the storage or someone
//!   changed it; resuming from an older one would silently lose work: refused (exit 2);
//! - a manifest of another world size or model: refused (exit 2);
//! - a shard missing, of the wrong size or checksum: skipped with a warning that names
//!   the rank and why, falling back to the next older checkpoint.
//!
//! Retention (`--keep K`): after a manifest is durable, rank 0 deletes the manifests of
//! older checkpoints beyond the newest K complete ones (and of torn ones) first, then
//! every rank deletes its own shards there — a checkpoint being pruned turns torn,
//! never half-valid.
use super::model::{hash_tensors, Model};
use super::optim::AdamW;
use anyhow::{anyhow, bail, Context, Result};
use burnin::error::Agreed;
use burnin::train::args::{DiePhase, ModelConfig, TrainPlan};
use burnin::train::data;
use burnin::train::report::{CkptWrite, RestoreRecord};
use burnin::train::storage::{self, sha256_hex};
use burnin::watchdog::Watchdog;
use burnin::world::World;
use mpi::collective::CommunicatorCollectives;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

pub const MANIFEST: &str = "manifest.json";
pub const FORMAT: &str = "burnin-checkpoint";
pub const MANIFEST_VERSION: u32 = 1;

pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:09}")
}

pub fn parse_step_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub fn shard_name(rank: usize) -> String {
    format!("rank-{rank:05}.safetensors")
}

fn shard_tmp_name(rank: usize) -> String {
    format!(".{}.tmp", shard_name(rank))
}

/// One rank's shard as the manifest records it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardEntry {
    pub rank: usize,
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
}

/// What a complete checkpoint is.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// Steps completed when the checkpoint was taken; training resumes at step + 1.
    pub step: u64,
    pub world_size: usize,
    pub model: ModelConfig,
    /// Seed of the data stream (and of the initial weights).
    pub seed: u64,
    pub batch: i64,
    pub lr: f64,
    /// "cpu" or "cuda".
    pub device: String,
    /// sha256 of the weights at this step (identical on every rank).
    pub weights_sha256: String,
    pub burnin_version: String,
    pub created_unix: f64,
    pub shards: Vec<ShardEntry>,
    /// sha256 of the manifest's exact bytes before this field (see [`Manifest::to_bytes`]):
    /// catches a manifest changed after it was written, even one that still parses.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest_sha256: String,
}

/// How the checksum is appended: the manifest is compact JSON whose last field is
/// the sha256 of every byte before it (with the object closed). Checking bytes, not
/// re-serialised values, keeps floats out of it (a JSON float need not parse back to
/// the same bits).
const SEAL: &str = ",\"manifest_sha256\":\"";

impl Manifest {
    /// The manifest file's bytes, checksum last.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut m = self.clone();
        m.manifest_sha256 = String::new();
        let body = serde_json::to_vec(&m)?;
        if body.last() != Some(&b'}') {
            bail!("manifest JSON does not end with '}}'");
        }
        let mut out = body[..body.len() - 1].to_vec();
        out.extend_from_slice(SEAL.as_bytes());
        out.extend_from_slice(sha256_hex(&body).as_bytes());
        out.extend_from_slice(b"\"}\n");
        Ok(out)
    }

    /// Parse a manifest file and check its checksum, format and shard list.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Manifest, String> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| format!("it is not a valid manifest ({e})"))?;
        let text = bytes.trim_ascii_end();
        let sealed = text
            .windows(SEAL.len())
            .rposition(|w| w == SEAL.as_bytes())
            .and_then(|i| {
                let claimed = text.get(i + SEAL.len()..text.len().checked_sub(2)?)?;
                let mut body = text[..i].to_vec();
                body.push(b'}');
                Some((sha256_hex(&body), claimed.to_vec()))
            });
        match sealed {
            Some((h, claimed)) if h.as_bytes() == claimed && h == m.manifest_sha256 => {}
            _ => return Err("its checksum does not match its content".into()),
        }
        if m.format != FORMAT {
            return Err(format!("its format is '{}', not '{FORMAT}'", m.format));
        }
        if m.shards.len() != m.world_size || m.shards.iter().enumerate().any(|(r, s)| s.rank != r) {
            return Err(format!(
                "it lists {} shards for a world of {}",
                m.shards.len(),
                m.world_size
            ));
        }
        Ok(m)
    }
}

/// A step directory as a resume finds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    /// No manifest: the job stopped while writing it.
    Torn {
        step: u64,
        dir: PathBuf,
        why: String,
    },
    /// A manifest that cannot be trusted.
    Corrupt {
        step: u64,
        dir: PathBuf,
        why: String,
    },
    Ready {
        dir: PathBuf,
        manifest: Box<Manifest>,
    },
}

impl Found {
    pub fn step(&self) -> u64 {
        match self {
            Found::Torn { step, .. } | Found::Corrupt { step, .. } => *step,
            Found::Ready { manifest, .. } => manifest.step,
        }
    }
}

/// Step directories of `root`, newest first, with whether each has a manifest.
pub fn listing(root: &Path) -> Result<Vec<(u64, PathBuf, bool)>> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", root.display())),
    };
    for entry in rd {
        let entry = entry.with_context(|| format!("cannot list {}", root.display()))?;
        let name = entry.file_name();
        let Some(step) = name.to_str().and_then(parse_step_dir) else {
            continue;
        };
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let has = dir.join(MANIFEST).is_file();
        out.push((step, dir, has));
    }
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    Ok(out)
}

/// Read every step directory of `root`, newest first.
pub fn scan(root: &Path) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    for (step, dir, has) in listing(root)? {
        if !has {
            let shards = std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter(|e| {
                            let n = e.file_name();
                            let n = n.to_string_lossy();
                            n.starts_with("rank-") && n.ends_with(".safetensors")
                        })
                        .count()
                })
                .unwrap_or(0);
            out.push(Found::Torn {
                step,
                dir,
                why: format!(
                    "no manifest: torn, the job stopped while writing it ({shards} finished shard(s) there)"
                ),
            });
            continue;
        }
        let path = dir.join(MANIFEST);
        match std::fs::read(&path) {
            Err(e) => out.push(Found::Corrupt {
                step,
                dir,
                why: format!("cannot read {}: {e}", path.display()),
            }),
            Ok(bytes) => match Manifest::parse(&bytes) {
                Ok(m) if m.step != step => out.push(Found::Corrupt {
                    step,
                    dir,
                    why: format!("{} says step {}", path.display(), m.step),
                }),
                Ok(manifest) => out.push(Found::Ready {
                    dir,
                    manifest: Box::new(manifest),
                }),
                Err(why) => out.push(Found::Corrupt {
                    step,
                    dir,
                    why: format!("{} is corrupt: {why}", path.display()),
                }),
            },
        }
    }
    Ok(out)
}

/// What rank 0 decided from a scan: checkpoints to try in order, and warnings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Choice {
    pub candidates: Vec<(PathBuf, Manifest)>,
    pub warnings: Vec<String>,
}

/// Decide what a resume may use (pure): skip torn checkpoints, refuse a corrupt
/// manifest and a checkpoint of another world size or model, and stop at the first
/// usable one's older siblings (they are fallbacks if its shards do not verify).
pub fn choose(
    found: &[Found],
    root: &Path,
    world_size: usize,
    model: &ModelConfig,
) -> std::result::Result<Choice, String> {
    let mut choice = Choice {
        candidates: Vec::new(),
        warnings: Vec::new(),
    };
    for f in found {
        match f {
            Found::Torn { step, dir, why } => choice.warnings.push(format!(
                "skipping checkpoint step {step} ({}): {why}",
                dir.display()
            )),
            Found::Corrupt { step, dir, why } => {
                return Err(format!(
                    "--resume: checkpoint step {step}: {why}; burnin writes manifests atomically, \
                     so the storage or someone changed it. Move {} away to fall back to the \
                     previous checkpoint",
                    dir.display()
                ))
            }
            Found::Ready { dir, manifest: m } => {
                if m.world_size != world_size {
                    return Err(format!(
                        "--resume: the checkpoint of step {} in {} was written by {} ranks and this \
                         job has {world_size}; resume with -np {}, or use another --ckpt-dir",
                        m.step,
                        root.display(),
                        m.world_size,
                        m.world_size
                    ));
                }
                let diff = m.model.differences(model);
                if !diff.is_empty() {
                    return Err(format!(
                        "--resume: the checkpoint of step {} in {} is of another model: {}; \
                         resume with the same model flags, or use another --ckpt-dir",
                        m.step,
                        root.display(),
                        diff.join(", ")
                    ));
                }
                choice.candidates.push((dir.clone(), (**m).clone()));
            }
        }
    }
    Ok(choice)
}

/// Step directories to delete once checkpoint `current` is complete (pure): complete
/// ones at or below `current` beyond the newest `keep`, and torn ones below `current`.
pub fn doomed(listing: &[(u64, bool)], current: u64, keep: usize) -> Vec<u64> {
    let mut complete: Vec<u64> = listing
        .iter()
        .filter(|(s, has)| *has && *s <= current)
        .map(|(s, _)| *s)
        .collect();
    complete.sort_unstable_by(|a, b| b.cmp(a));
    let mut out: Vec<u64> = complete.into_iter().skip(keep).collect();
    out.extend(
        listing
            .iter()
            .filter(|(s, has)| !*has && *s < current)
            .map(|(s, _)| *s),
    );
    out.sort_unstable();
    out.dedup();
    out
}

/// A checkpoint's state as it comes back from a shard.
pub struct Restored {
    pub step: u64,
    pub seed: u64,
}

/// Everything a rank writes in its shard.
pub fn shard_tensors(
    model: &Model,
    opt: &AdamW,
    step: u64,
    seed: u64,
    rank: usize,
    pad: Option<&Tensor>,
) -> Result<Vec<(String, Tensor)>> {
    let cpu = |t: &Tensor| -> Result<Tensor> {
        Ok(t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?)
    };
    let scalar = |v: i64| -> Result<Tensor> { Ok(Tensor::f_from_slice(&[v])?) };
    let mut out = Vec::with_capacity(3 * model.params.len() + 6);
    for ((p, m), v) in model.params.iter().zip(&opt.m).zip(&opt.v) {
        out.push((format!("model.{}", p.name), cpu(&p.tensor)?));
        out.push((format!("opt.m.{}", p.name), cpu(m)?));
        out.push((format!("opt.v.{}", p.name), cpu(v)?));
    }
    out.push(("opt.t".into(), scalar(opt.t as i64)?));
    out.push(("state.step".into(), scalar(step as i64)?));
    // The data cursor: the next step whose batch is drawn.
    out.push(("state.cursor".into(), scalar(step as i64 + 1)?));
    out.push(("state.seed".into(), scalar(seed as i64)?));
    out.push(("state.rank".into(), scalar(rank as i64)?));
    if let Some(p) = pad {
        out.push(("pad".into(), p.shallow_clone()));
    }
    Ok(out)
}

/// Bytes of tensor data in a shard without padding.
pub fn state_bytes(model: &Model) -> u64 {
    (model.numel() * 4 * 3 + 5 * 8) as u64
}

/// Padding that brings a shard to at least `target` bytes (None when not needed).
pub fn make_pad(target: Option<u64>, model: &Model, key: u64) -> Result<Option<Tensor>> {
    let Some(target) = target else {
        return Ok(None);
    };
    let have = state_bytes(model);
    if target <= have {
        return Ok(None);
    }
    let mut bytes = vec![0u8; (target - have) as usize];
    data::fill_random(key, &mut bytes);
    Ok(Some(Tensor::f_from_slice(&bytes)?))
}

/// Load a verified shard's bytes into the model and the optimizer.
pub fn load_shard(bytes: &[u8], model: &Model, opt: &mut AdamW, rank: usize) -> Result<Restored> {
    use safetensors::SafeTensors;
    let st =
        SafeTensors::deserialize(bytes).map_err(|e| anyhow!("not a safetensors file: {e:?}"))?;
    let get = |name: &str| -> Result<Tensor> {
        let view = st
            .tensor(name)
            .map_err(|e| anyhow!("shard has no tensor {name} ({e:?})"))?;
        Tensor::try_from(view).with_context(|| format!("reading tensor {name}"))
    };
    let scalar = |name: &str| -> Result<i64> {
        let t = get(name)?;
        if t.f_kind()? != Kind::Int64 || t.numel() != 1 {
            bail!("tensor {name} is not one int64");
        }
        Ok(t.f_int64_value(&[0])?)
    };
    let _guard = tch::no_grad_guard();
    let load = |dst: &mut Tensor, name: &str| -> Result<()> {
        let src = get(name)?;
        if src.size() != dst.size() || src.f_kind()? != dst.f_kind()? {
            bail!(
                "tensor {name} is {:?} {:?}, the model's is {:?} {:?}",
                src.f_kind()?,
                src.size(),
                dst.f_kind()?,
                dst.size()
            );
        }
        dst.f_copy_(&src)?;
        Ok(())
    };
    for ((p, m), v) in model.params.iter().zip(&mut opt.m).zip(&mut opt.v) {
        load(&mut p.tensor.shallow_clone(), &format!("model.{}", p.name))?;
        load(m, &format!("opt.m.{}", p.name))?;
        load(v, &format!("opt.v.{}", p.name))?;
    }
    let t = scalar("opt.t")?;
    let step = scalar("state.step")?;
    let cursor = scalar("state.cursor")?;
    let seed = scalar("state.seed")?;
    let shard_rank = scalar("state.rank")?;
    if t < 0 || step < 0 || cursor != step + 1 {
        bail!("inconsistent state: opt.t {t}, step {step}, cursor {cursor}");
    }
    if shard_rank != rank as i64 {
        bail!("the shard belongs to rank {shard_rank}");
    }
    opt.t = t as u64;
    Ok(Restored {
        step: step as u64,
        seed: seed as u64,
    })
}

/// Kill this process now if the test hook says so.
fn maybe_die(plan: &TrainPlan, step: u64, phase: DiePhase, rank: usize) {
    if let Some(d) = plan.die {
        if d.step == step && d.phase == phase && d.rank == rank {
            eprintln!("burnin: test hook: rank {rank} kills itself at step {step} ({phase:?})");
            // SAFETY: kill(2) on our own pid with SIGKILL; nothing to uphold.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

/// One rank's durable shard.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShardWritten {
    pub entry: ShardEntry,
    /// write + fsync + rename + directory fsync.
    pub write_s: f64,
    /// Of which writing the safetensors file into the page cache.
    pub serialize_s: f64,
    /// Of which the file's fsync.
    pub fsync_s: f64,
    /// Reading the file back from the page cache to checksum it.
    pub hash_s: f64,
}

/// safetensors' name of a tensor kind.
fn safetensors_dtype(kind: Kind) -> Result<&'static str> {
    Ok(match kind {
        Kind::Float => "F32",
        Kind::Double => "F64",
        Kind::Half => "F16",
        Kind::BFloat16 => "BF16",
        Kind::Int64 => "I64",
        Kind::Int => "I32",
        Kind::Int16 => "I16",
        Kind::Int8 => "I8",
        Kind::Uint8 => "U8",
        Kind::Bool => "BOOL",
        k => bail!("no safetensors dtype for {k:?}"),
    })
}

/// Write `tensors` as a safetensors file straight from their memory: the header, then
/// each (CPU, contiguous) tensor's bytes in one `write` — no serialised copy of the
/// whole shard first, as `Tensor::write_safetensors` makes. `path` must not exist.
/// Returns the open file (for the caller's fsync). Readable by any safetensors reader.
fn write_safetensors_direct(tensors: &[(String, Tensor)], path: &Path) -> Result<std::fs::File> {
    use std::io::Write;
    let mut header = serde_json::Map::new();
    let mut parts: Vec<(Tensor, usize)> = Vec::with_capacity(tensors.len());
    let mut offset = 0usize;
    for (name, t) in tensors {
        // no copy when the tensor already is a contiguous CPU tensor
        let t = t.to_device(Device::Cpu).contiguous();
        let kind = t.kind();
        let nbytes = t.numel() * kind.elt_size_in_bytes();
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": safetensors_dtype(kind)?,
                "shape": t.size(),
                "data_offsets": [offset, offset + nbytes],
            }),
        );
        offset += nbytes;
        parts.push((t, nbytes));
    }
    let mut head = serde_json::to_vec(&header)?;
    // the data starts 8-byte aligned, as safetensors' own writer pads it
    while (8 + head.len()) % 8 != 0 {
        head.push(b' ');
    }
    // A new file or none: never through a symlink or file planted at the name.
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?
    };
    let mut first = Vec::with_capacity(8 + head.len());
    first.extend_from_slice(&(head.len() as u64).to_le_bytes());
    first.extend_from_slice(&head);
    f.write_all(&first)?;
    for (t, nbytes) in &parts {
        if *nbytes == 0 {
            continue;
        }
        // SAFETY: `t` is a contiguous CPU tensor of `nbytes` bytes that lives (and is
        // not written) for the duration of the borrow.
        let bytes = unsafe { std::slice::from_raw_parts(t.data_ptr() as *const u8, *nbytes) };
        f.write_all(bytes)?;
    }
    Ok(f)
}

fn write_shard(
    plan: &TrainPlan,
    dir: &Path,
    rank: usize,
    step: u64,
    tensors: &[(String, Tensor)],
) -> Result<ShardWritten> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(shard_tmp_name(rank));
    let file = shard_name(rank);
    let dst = dir.join(&file);
    let _ = std::fs::remove_file(&tmp);
    let t0 = Instant::now();
    let f = write_safetensors_direct(tensors, &tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let serialize_s = t0.elapsed().as_secs_f64();
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", tmp.display()))?;
    let written = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let bytes =
        std::fs::read(&tmp).with_context(|| format!("cannot read back {}", tmp.display()))?;
    let sha = sha256_hex(&bytes);
    let hash_s = t1.elapsed().as_secs_f64();
    storage::drop_cache(&f);
    drop(f);
    maybe_die(plan, step, DiePhase::ShardTmp, rank);
    let t2 = Instant::now();
    std::fs::rename(&tmp, &dst)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), dst.display()))?;
    storage::fsync_dir(dir)?;
    let write_s = written + t2.elapsed().as_secs_f64();
    maybe_die(plan, step, DiePhase::ShardDone, rank);
    Ok(ShardWritten {
        entry: ShardEntry {
            rank,
            file,
            bytes: bytes.len() as u64,
            sha256: sha,
        },
        write_s,
        serialize_s,
        fsync_s: written - serialize_s,
        hash_s,
    })
}

/// What rank 0 tells everyone after writing (or failing to write) the manifest.
#[derive(Serialize, Deserialize)]
enum AfterManifest {
    Done { doomed: Vec<(u64, PathBuf)> },
    Failed(String),
}

/// Where checkpoints go and what this run keeps between them.
pub struct CkptCtx {
    pub root: PathBuf,
    pub pad: Option<Tensor>,
    pub device_name: String,
    pub dog: std::sync::Arc<Watchdog>,
    pub deadline: Duration,
    /// Directories rank 0 doomed last time, removed whole next time.
    pub pending_removal: Vec<(u64, PathBuf)>,
    /// This rank's newest shard.
    pub last_shard: Option<LastShard>,
}

/// Write checkpoint `step` (collective: every rank calls it).
pub fn save(
    ctx: &mut CkptCtx,
    world: &World,
    plan: &TrainPlan,
    model: &Model,
    opt: &AdamW,
    step: u64,
    weights_sha256: &str,
) -> Result<Option<CkptWrite>> {
    let t0 = Instant::now();
    let dir = ctx.root.join(step_dir_name(step));
    {
        let _g = ctx
            .dog
            .arm(&format!("barrier before checkpoint {step}"), ctx.deadline);
        world.comm.barrier();
    }
    let mine: std::result::Result<ShardWritten, String> =
        shard_tensors(model, opt, step, plan.seed, world.rank, ctx.pad.as_ref())
            .and_then(|t| write_shard(plan, &dir, world.rank, step, &t))
            .map_err(|e| format!("{e:#}"));
    if let Ok(w) = &mine {
        ctx.last_shard = Some(LastShard {
            path: dir.join(&w.entry.file),
            sha256: w.entry.sha256.clone(),
            bytes: w.entry.bytes,
            step,
        });
    }
    let all = {
        let _g = ctx.dog.arm(
            &format!("checkpoint {step}: waiting for every rank's shard to be durable"),
            ctx.deadline,
        );
        world.gather_json(&mine)?
    };
    let (mut record, after) = match all {
        Some(all) => {
            let (record, after) = conclude(ctx, world, plan, &dir, step, weights_sha256, all);
            (record, Some(after))
        }
        None => (None, None),
    };
    let after: AfterManifest = world.broadcast_json(after.as_ref())?;
    match after {
        AfterManifest::Failed(msg) => bail!(Agreed(msg)),
        AfterManifest::Done { doomed } => remove_own_files(&doomed, world.rank),
    }
    if let Some(r) = &mut record {
        r.stall_s = t0.elapsed().as_secs_f64();
    }
    Ok(record)
}

/// Rank 0, with every rank's shard result: write the manifest when all shards are
/// durable, prune, and say what everyone does next (with the write's record).
fn conclude(
    ctx: &mut CkptCtx,
    world: &World,
    plan: &TrainPlan,
    dir: &Path,
    step: u64,
    weights_sha256: &str,
    all: Vec<std::result::Result<ShardWritten, String>>,
) -> (Option<CkptWrite>, AfterManifest) {
    let failed: Vec<String> = all
        .iter()
        .enumerate()
        .filter_map(|(r, w)| {
            w.as_ref()
                .err()
                .map(|e| format!("{}: {e}", world.describe_rank(r)))
        })
        .collect();
    if !failed.is_empty() {
        let msg = format!("checkpoint step {step} failed on {}", failed.join("; "));
        return (None, AfterManifest::Failed(msg));
    }
    let shards: Vec<ShardWritten> = all.into_iter().filter_map(|w| w.ok()).collect();
    maybe_die(plan, step, DiePhase::BeforeManifest, world.rank);
    let manifest = manifest_for(ctx, world, plan, step, weights_sha256, &shards);
    let written = manifest.to_bytes().and_then(|b| {
        burnin::results::write_atomic(&dir.join(MANIFEST), &b)?;
        storage::fsync_dir(&ctx.root)
    });
    if let Err(e) = written {
        let msg = format!("checkpoint step {step}: cannot write its manifest: {e:#}");
        return (None, AfterManifest::Failed(msg));
    }
    let doomed_dirs = prune_manifests(ctx, step, plan.keep);
    let record = write_record(dir, step, &shards, &doomed_dirs);
    let after = AfterManifest::Done {
        doomed: doomed_dirs,
    };
    (Some(record), after)
}

/// The manifest of checkpoint `step` over every rank's written shard.
fn manifest_for(
    ctx: &CkptCtx,
    world: &World,
    plan: &TrainPlan,
    step: u64,
    weights_sha256: &str,
    shards: &[ShardWritten],
) -> Manifest {
    Manifest {
        format: FORMAT.into(),
        version: MANIFEST_VERSION,
        step,
        world_size: world.size,
        model: plan.model,
        seed: plan.seed,
        batch: plan.batch,
        lr: plan.lr,
        device: ctx.device_name.clone(),
        weights_sha256: weights_sha256.to_string(),
        burnin_version: env!("CARGO_PKG_VERSION").into(),
        created_unix: burnin::watchdog::unix_seconds(std::time::SystemTime::now()),
        shards: shards.iter().map(|s| s.entry.clone()).collect(),
        manifest_sha256: String::new(),
    }
}

/// The record of a durable checkpoint: total bytes, the slowest rank's times (s),
/// the steps pruned; its stall is filled in by [`save`].
fn write_record(
    dir: &Path,
    step: u64,
    shards: &[ShardWritten],
    doomed_dirs: &[(u64, PathBuf)],
) -> CkptWrite {
    let bytes: u64 = shards.iter().map(|s| s.entry.bytes).sum();
    let slowest = |f: fn(&ShardWritten) -> f64| shards.iter().map(f).fold(0.0, f64::max);
    let write_s = slowest(|s| s.write_s);
    CkptWrite {
        step,
        dir: dir.to_path_buf(),
        bytes,
        write_s,
        write_gbps: burnin::units::GBps::from_bytes_secs(bytes, write_s).0,
        serialize_s: slowest(|s| s.serialize_s),
        fsync_s: slowest(|s| s.fsync_s),
        hash_s: slowest(|s| s.hash_s),
        stall_s: 0.0,
        pruned: doomed_dirs.iter().map(|d| d.0).collect(),
    }
}

/// Rank 0, after a manifest is durable: remove whole the directories doomed last
/// time, then remove the manifests of the newly doomed ones (making them torn before
/// any shard goes). Returns the newly doomed (step, dir).
fn prune_manifests(ctx: &mut CkptCtx, current: u64, keep: usize) -> Vec<(u64, PathBuf)> {
    // Never the checkpoint just made (a torn leftover of the same step may have been
    // doomed at resume), never one that has a manifest again.
    for (s, d) in std::mem::take(&mut ctx.pending_removal) {
        if s != current && !d.join(MANIFEST).exists() {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
    let list = match listing(&ctx.root) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("burnin: warning: cannot prune old checkpoints: {e:#}");
            return Vec::new();
        }
    };
    let flat: Vec<(u64, bool)> = list.iter().map(|(s, _, h)| (*s, *h)).collect();
    let steps = doomed(&flat, current, keep);
    let out: Vec<(u64, PathBuf)> = list
        .into_iter()
        .filter(|(s, _, _)| steps.contains(s))
        .map(|(s, d, _)| (s, d))
        .collect();
    unpublish(&out);
    ctx.pending_removal = out.clone();
    out
}

/// Remove the manifests of `dirs` (rank 0), durably.
fn unpublish(dirs: &[(u64, PathBuf)]) {
    for (_, d) in dirs {
        let m = d.join(MANIFEST);
        if m.exists() {
            if let Err(e) = std::fs::remove_file(&m) {
                eprintln!("burnin: warning: cannot remove {}: {e}", m.display());
            }
            let _ = storage::fsync_dir(d);
        }
    }
}

/// Every rank: delete its own shard (and temporary) in each doomed directory, then
/// the directory when it is empty.
fn remove_own_files(doomed: &[(u64, PathBuf)], rank: usize) {
    for (_, d) in doomed {
        let _ = std::fs::remove_file(d.join(shard_name(rank)));
        let _ = std::fs::remove_file(d.join(shard_tmp_name(rank)));
        let _ = std::fs::remove_dir(d);
    }
}

/// What each rank found checking its shard of one candidate.
#[derive(Serialize, Deserialize)]
struct Verdict {
    problem: Option<String>,
    read_s: f64,
    verify_s: f64,
}

/// Check for a fresh start (no --resume): refuse a directory that already holds
/// checkpoints, and remove torn leftovers. Collective.
pub fn prepare_fresh(ctx: &CkptCtx, world: &World) -> Result<()> {
    let mut decision: Option<std::result::Result<Vec<(u64, PathBuf)>, String>> = None;
    if world.rank == 0 {
        decision = Some(match scan(&ctx.root) {
            Err(e) => Err(format!("--ckpt-dir: {e:#}")),
            Ok(found) => match found.iter().find(|f| !matches!(f, Found::Torn { .. })) {
                Some(f) => Err(format!(
                    "--ckpt-dir {} already holds checkpoints (newest: step {}); add --resume to \
                     continue from it, or choose an empty --ckpt-dir",
                    ctx.root.display(),
                    f.step()
                )),
                None => Ok(found
                    .iter()
                    .map(|f| match f {
                        Found::Torn { step, dir, .. } => (*step, dir.clone()),
                        _ => (0, PathBuf::new()),
                    })
                    .collect()),
            },
        });
    }
    let decision: std::result::Result<Vec<(u64, PathBuf)>, String> =
        world.broadcast_json(decision.as_ref())?;
    let doomed = decision.map_err(Agreed)?;
    remove_own_files(&doomed, world.rank);
    Ok(())
}

/// Restore the newest checkpoint that verifies (collective). None: nothing to resume
/// from (no checkpoint at all, or only torn ones).
///
/// The checkpoint's own training settings — the data stream's seed, the learning rate
/// and the batch — replace the command line's in `plan` (and the optimizer's rate), so
/// the resumed run continues the run that wrote it: rank 0 says what it carried over.
/// What cannot be carried (another world size, another model) was refused by
/// [`choose`].
pub fn restore(
    ctx: &mut CkptCtx,
    world: &World,
    plan: &mut TrainPlan,
    model: &Model,
    opt: &mut AdamW,
) -> Result<Option<RestoreRecord>> {
    let t0 = Instant::now();
    let choice = agree_on_choice(ctx, world, plan)?;
    let mut skipped = choice.warnings.clone();
    for (dir, m) in &choice.candidates {
        let entry = &m.shards[world.rank];
        let path = dir.join(&entry.file);
        let (verdict, bytes) = verify_shard(&path, entry);
        let all: Vec<Verdict> = {
            let _g = ctx.dog.arm(
                &format!("verifying checkpoint step {}", m.step),
                ctx.deadline,
            );
            world.all_gather_json(&verdict)?
        };
        if let Some(w) = skip_reason(&all, dir, m) {
            if world.rank == 0 {
                eprintln!("burnin: warning: {w}");
            }
            skipped.push(w);
            continue;
        }
        // The bytes just verified are the bytes loaded: no second read of the file.
        let restored = load_verified(world, &bytes, model, opt, m)?;
        let carried = carry_settings(plan, m, &restored);
        opt.lr = plan.lr;
        if world.rank == 0 && !carried.is_empty() {
            eprintln!(
                "burnin: note: resuming with the checkpoint's {} (the command line's apply \
                 to fresh runs only)",
                carried.join(", ")
            );
        }
        let record = restore_record(world, t0, &all, dir, m, skipped, restored.seed);
        drop_newer(ctx, world, m.step)?;
        ctx.last_shard = Some(LastShard {
            path,
            sha256: entry.sha256.clone(),
            bytes: entry.bytes,
            step: m.step,
        });
        return Ok(Some(record));
    }
    if !choice.candidates.is_empty() {
        bail!(Agreed(format!(
            "--resume: no checkpoint in {} verifies ({}); refusing to start over from step 0",
            ctx.root.display(),
            skipped.join("; ")
        )));
    }
    // Nothing complete to resume from: clean the torn leftovers and start at 0.
    clean_torn(ctx, world)?;
    Ok(None)
}

/// Rank 0 scans --ckpt-dir and chooses; every rank gets the choice (a refusal is an
/// agreed error) and rank 0 prints its warnings. Collective.
fn agree_on_choice(ctx: &CkptCtx, world: &World, plan: &TrainPlan) -> Result<Choice> {
    let mut decision = None;
    if world.rank == 0 {
        decision = Some(match scan(&ctx.root) {
            Err(e) => Err(format!("--ckpt-dir: {e:#}")),
            Ok(found) => choose(&found, &ctx.root, world.size, &plan.model),
        });
    }
    let decision: std::result::Result<Choice, String> = world.broadcast_json(decision.as_ref())?;
    let choice = decision.map_err(Agreed)?;
    if world.rank == 0 {
        for w in &choice.warnings {
            eprintln!("burnin: warning: {w}");
        }
    }
    Ok(choice)
}

/// Read this rank's shard and check its size and sha256 against the manifest's
/// entry: the verdict, and the bytes read (empty when the read failed).
fn verify_shard(path: &Path, entry: &ShardEntry) -> (Verdict, Vec<u8>) {
    let mut verdict = Verdict {
        problem: None,
        read_s: 0.0,
        verify_s: 0.0,
    };
    let mut bytes = Vec::new();
    match storage::read_timed(path) {
        Err(e) => verdict.problem = Some(format!("{e:#}")),
        Ok((b, s)) => {
            verdict.read_s = s;
            let t = Instant::now();
            if b.len() as u64 != entry.bytes {
                verdict.problem = Some(format!(
                    "{} has {} bytes, the manifest says {}",
                    entry.file,
                    b.len(),
                    entry.bytes
                ));
            } else if sha256_hex(&b) != entry.sha256 {
                verdict.problem = Some(format!(
                    "{} does not match its sha256 in the manifest (changed after it was written)",
                    entry.file
                ));
            }
            verdict.verify_s = t.elapsed().as_secs_f64();
            bytes = b;
        }
    }
    (verdict, bytes)
}

/// The warning that skips checkpoint `m` in `dir` when a rank's shard failed to
/// verify (None when every shard verified).
fn skip_reason(all: &[Verdict], dir: &Path, m: &Manifest) -> Option<String> {
    let bad: Vec<String> = all
        .iter()
        .enumerate()
        .filter_map(|(r, v)| v.problem.as_ref().map(|p| format!("rank {r}: {p}")))
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "skipping checkpoint step {} ({}): {}",
            m.step,
            dir.display(),
            bad.join("; ")
        )
    })
}

/// Load the verified shard `bytes` into the model and optimizer; an agreed error
/// naming the first rank that cannot. Collective.
fn load_verified(
    world: &World,
    bytes: &[u8],
    model: &Model,
    opt: &mut AdamW,
    m: &Manifest,
) -> Result<Restored> {
    let loaded = load_shard(bytes, model, opt, world.rank)
        .map_err(|e| format!("{e:#}"))
        .and_then(|r| {
            if r.step != m.step {
                return Err(format!("shard says step {}, manifest {}", r.step, m.step));
            }
            Ok(r)
        });
    let problems: Vec<Option<String>> = world.all_gather_json(&loaded.as_ref().err().cloned())?;
    if let Some((r, p)) = problems
        .iter()
        .enumerate()
        .find_map(|(r, p)| p.as_ref().map(|p| (r, p)))
    {
        bail!(Agreed(format!(
            "--resume: checkpoint step {} verified but rank {r} cannot load it: {p}",
            m.step
        )));
    }
    loaded.map_err(|e| anyhow!(e))
}

/// Put the checkpoint's seed, learning rate and batch in `plan` (pure): what differed
/// from the command line, as `--flag checkpoint (this run: value)`.
fn carry_settings(plan: &mut TrainPlan, m: &Manifest, restored: &Restored) -> Vec<String> {
    let mut carried = Vec::new();
    if restored.seed != plan.seed {
        carried.push(format!(
            "--seed {} (this run: {})",
            restored.seed, plan.seed
        ));
        plan.seed = restored.seed;
    }
    if m.lr.to_bits() != plan.lr.to_bits() {
        carried.push(format!("--lr {} (this run: {})", m.lr, plan.lr));
        plan.lr = m.lr;
    }
    if m.batch != plan.batch {
        carried.push(format!("--batch {} (this run: {})", m.batch, plan.batch));
        plan.batch = m.batch;
    }
    carried
}

/// What the restore of checkpoint `m` took: the slowest rank's read, verify and
/// whole restore (since `t0`). Collective.
fn restore_record(
    world: &World,
    t0: Instant,
    all: &[Verdict],
    dir: &Path,
    m: &Manifest,
    skipped: Vec<String>,
    seed: u64,
) -> RestoreRecord {
    let read_s = all.iter().map(|v| v.read_s).fold(0.0, f64::max);
    let verify_s = all.iter().map(|v| v.verify_s).fold(0.0, f64::max);
    let bytes_total: u64 = m.shards.iter().map(|s| s.bytes).sum();
    let restore_s = t0.elapsed().as_secs_f64();
    let mut worst = 0.0f64;
    world.comm.all_reduce_into(
        &restore_s,
        &mut worst,
        mpi::collective::SystemOperation::max(),
    );
    RestoreRecord {
        step: m.step,
        dir: dir.to_path_buf(),
        bytes: bytes_total,
        restore_s: worst,
        read_s,
        read_gbps: burnin::units::GBps::from_bytes_secs(bytes_total, read_s).0,
        verify_s,
        skipped,
        seed,
    }
}

/// Checkpoints newer than `step` were skipped: unpublish and remove them so the steps
/// this run re-does are written into clean directories. Collective.
fn drop_newer(ctx: &mut CkptCtx, world: &World, step: u64) -> Result<()> {
    let newer: Vec<(u64, PathBuf)> = match listing(&ctx.root) {
        Ok(l) if world.rank == 0 => l
            .into_iter()
            .filter(|(s, _, _)| *s > step)
            .map(|(s, d, _)| (s, d))
            .collect(),
        _ => Vec::new(),
    };
    if world.rank == 0 {
        unpublish(&newer);
        ctx.pending_removal = newer.clone();
    }
    let newer: Vec<(u64, PathBuf)> = world.broadcast_json(Some(&newer))?;
    remove_own_files(&newer, world.rank);
    Ok(())
}

/// Remove the torn leftovers of every step directory (nothing complete was found).
/// Collective.
fn clean_torn(ctx: &mut CkptCtx, world: &World) -> Result<()> {
    let torn: Vec<(u64, PathBuf)> = match listing(&ctx.root) {
        Ok(l) if world.rank == 0 => l.into_iter().map(|(s, d, _)| (s, d)).collect(),
        _ => Vec::new(),
    };
    let torn: Vec<(u64, PathBuf)> = world.broadcast_json(Some(&torn))?;
    remove_own_files(&torn, world.rank);
    if world.rank == 0 {
        ctx.pending_removal = torn.clone();
    }
    Ok(())
}

/// This rank's newest shard on the storage.
#[derive(Clone, Debug)]
pub struct LastShard {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// The step whose state it holds.
    pub step: u64,
}

/// What reading back a shard found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadBack {
    pub bytes: u64,
    pub seconds: f64,
    /// Why the shard is not what was written, if it is not.
    pub problem: Option<String>,
}

/// Read back this rank's newest shard (its pages were dropped after the write, so
/// this reads the storage), check its checksum and, when it holds step `step`, that
/// its weights are the model's.
pub fn read_back(ctx: &CkptCtx, model: &Model, step: u64) -> Result<Option<ReadBack>> {
    let Some(last) = &ctx.last_shard else {
        return Ok(None);
    };
    let path = &last.path;
    let (data, seconds) = storage::read_timed(path)?;
    let problem = if data.len() as u64 != last.bytes || sha256_hex(&data) != last.sha256 {
        Some(format!(
            "{} changed on the storage since it was written",
            path.display()
        ))
    } else if last.step != step {
        None
    } else {
        let st = safetensors::SafeTensors::deserialize(&data)
            .map_err(|e| anyhow!("{}: not a safetensors file: {e:?}", path.display()))?;
        let mut loaded = Vec::with_capacity(model.params.len());
        for p in &model.params {
            let name = format!("model.{}", p.name);
            let view = st
                .tensor(&name)
                .map_err(|e| anyhow!("{}: no tensor {name} ({e:?})", path.display()))?;
            loaded.push((p.name.clone(), Tensor::try_from(view)?));
        }
        let file_hash = hash_tensors(loaded.iter().map(|(n, t)| (n.as_str(), t)))?;
        let model_hash = hash_tensors(model.params.iter().map(|p| (p.name.as_str(), &p.tensor)))?;
        (file_hash != model_hash).then(|| {
            format!(
                "{} holds other weights than the model's at step {step}",
                path.display()
            )
        })
    };
    Ok(Some(ReadBack {
        bytes: data.len() as u64,
        seconds,
        problem,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_carries_the_checkpoints_seed_rate_and_batch_and_says_which() {
        let mut plan = TrainPlan {
            preset: burnin::train::args::Preset::Tiny,
            model: cfg(),
            batch: 8,
            lr: 0.5,
            steps: 10,
            seed: 9,
            device: burnin::train::args::DeviceChoice::Cpu,
            bucket_bytes: 64,
            ckpt_dir: PathBuf::from("ck"),
            ckpt_every: 1,
            keep: 2,
            ckpt_bytes: None,
            resume: true,
            out: None,
            log_every: 0,
            die: None,
            fault: None,
            replica_check_every: 0,
            diverge: None,
        };
        let m = manifest(4, 2);
        let restored = Restored { step: 4, seed: 1 };
        let carried = carry_settings(&mut plan, &m, &restored);
        assert_eq!(
            carried,
            [
                "--seed 1 (this run: 9)",
                "--lr 0.1 (this run: 0.5)",
                "--batch 2 (this run: 8)"
            ]
        );
        assert_eq!((plan.seed, plan.lr, plan.batch), (1, 0.1, 2));
        // Carried once, nothing differs any more.
        assert!(carry_settings(&mut plan, &m, &restored).is_empty());
    }

    /// burnin chaos (no libtorch) finds checkpoints by these names too.
    #[test]
    fn names_match_what_chaos_looks_for() {
        use burnin::chaos::victim::{shard_file, step_dir_step};
        assert_eq!(shard_file(3), shard_name(3));
        assert_eq!(step_dir_step(&step_dir_name(40)), Some(40));
    }

    fn cfg() -> ModelConfig {
        ModelConfig {
            vocab: 32,
            width: 16,
            depth: 1,
            heads: 2,
            seq: 8,
        }
    }

    fn manifest(step: u64, n: usize) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            version: 1,
            step,
            world_size: n,
            model: cfg(),
            seed: 1,
            batch: 2,
            lr: 0.1,
            device: "cpu".into(),
            weights_sha256: "00".into(),
            burnin_version: "0".into(),
            created_unix: 0.0,
            shards: (0..n)
                .map(|r| ShardEntry {
                    rank: r,
                    file: shard_name(r),
                    bytes: 10,
                    sha256: "ab".into(),
                })
                .collect(),
            manifest_sha256: String::new(),
        }
    }

    #[test]
    fn direct_safetensors_files_read_back_bit_exact_in_tch_and_safetensors() {
        let dir = tempfile::tempdir().unwrap();
        let w = Tensor::randn([3, 5], (Kind::Float, Device::Cpu));
        // a non-contiguous view, a double, an integer step counter, a bf16, an empty one
        let t = Tensor::randn([4, 6], (Kind::Double, Device::Cpu)).transpose(0, 1);
        let step = Tensor::from_slice(&[7i64, -3]);
        let h = Tensor::randn([9], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let e = Tensor::zeros([0, 4], (Kind::Float, Device::Cpu));
        let named: Vec<(String, Tensor)> =
            [("w", &w), ("t", &t), ("step", &step), ("h", &h), ("e", &e)]
                .into_iter()
                .map(|(n, x)| (n.to_string(), x.shallow_clone()))
                .collect();
        let path = dir.path().join("direct.safetensors");
        drop(write_safetensors_direct(&named, &path).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.names().len(), 5);
        let back: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(&path)
            .unwrap()
            .into_iter()
            .collect();
        for (name, x) in &named {
            let y = &back[name];
            assert_eq!(y.kind(), x.kind(), "{name}");
            assert_eq!(y.size(), x.size(), "{name}");
            assert!(y.equal(x), "{name} differs");
        }
        // the same bytes of data as tch's own writer stores
        let theirs = dir.path().join("tch.safetensors");
        // (tch's writer refuses non-contiguous tensors; ours writes them contiguous)
        let contiguous: Vec<(String, Tensor)> = named
            .iter()
            .map(|(n, x)| (n.clone(), x.contiguous()))
            .collect();
        Tensor::write_safetensors(&contiguous, &theirs).unwrap();
        let a: usize = st.tensors().iter().map(|(_, v)| v.data().len()).sum();
        let other = std::fs::read(&theirs).unwrap();
        let b: usize = safetensors::SafeTensors::deserialize(&other)
            .unwrap()
            .tensors()
            .iter()
            .map(|(_, v)| v.data().len())
            .sum();
        assert_eq!(a, b);
    }

    #[test]
    fn step_dir_names_round_trip() {
        assert_eq!(step_dir_name(40), "step-000000040");
        assert_eq!(parse_step_dir("step-000000040"), Some(40));
        assert_eq!(parse_step_dir("step-"), None);
        assert_eq!(parse_step_dir("step-12a"), None);
        assert_eq!(parse_step_dir("other"), None);
    }

    #[test]
    fn manifest_checksum_catches_an_edit_that_still_parses() {
        let m = manifest(40, 2);
        let bytes = m.to_bytes().unwrap();
        let back = Manifest::parse(&bytes).unwrap();
        assert_eq!(back.shards, m.shards);
        // Floats whose text need not parse back to the same bits do not matter.
        let mut f = manifest(40, 2);
        for i in 0..2000 {
            f.created_unix = 1.764e9 + i as f64 * 0.000_123_456_789;
            f.lr = 1e-3 + i as f64 * 1.1e-7;
            Manifest::parse(&f.to_bytes().unwrap()).unwrap();
        }
        let text = String::from_utf8(bytes).unwrap();
        let edited = text.replace("\"step\":40", "\"step\":41");
        let e = Manifest::parse(edited.as_bytes()).unwrap_err();
        assert!(e.contains("checksum"), "{e}");
        let e = Manifest::parse(b"{\"format\":").unwrap_err();
        assert!(e.contains("not a valid manifest"), "{e}");
    }

    #[test]
    fn choose_skips_torn_and_refuses_corrupt_or_foreign() {
        let root = Path::new("/c");
        let torn = Found::Torn {
            step: 50,
            dir: root.join("step-000000050"),
            why: "no manifest".into(),
        };
        let ready = |s, n| Found::Ready {
            dir: root.join(step_dir_name(s)),
            manifest: Box::new(manifest(s, n)),
        };
        let c = choose(&[torn.clone(), ready(40, 2), ready(20, 2)], root, 2, &cfg()).unwrap();
        assert_eq!(c.candidates.len(), 2);
        assert_eq!(c.candidates[0].1.step, 40);
        assert!(c.warnings[0].contains("step 50") && c.warnings[0].contains("no manifest"));
        let e = choose(&[torn.clone(), ready(40, 4)], root, 2, &cfg()).unwrap_err();
        assert!(
            e.contains("written by 4 ranks and this job has 2") && e.contains("-np 4"),
            "{e}"
        );
        let mut other = cfg();
        other.width = 32;
        let e = choose(&[ready(40, 2)], root, 2, &other).unwrap_err();
        assert!(e.contains("--width 16 (this run: 32)"), "{e}");
        let corrupt = Found::Corrupt {
            step: 60,
            dir: root.join("step-000000060"),
            why: "manifest.json is corrupt: its checksum does not match".into(),
        };
        let e = choose(&[corrupt, ready(40, 2)], root, 2, &cfg()).unwrap_err();
        assert!(
            e.contains("corrupt") && e.contains("Move /c/step-000000060 away"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let c = choose(&[torn], root, 2, &cfg()).unwrap();
        assert!(c.candidates.is_empty());
    }

    #[test]
    fn retention_keeps_the_newest_complete_and_drops_older_torn() {
        let l = [
            (60, true),
            (50, false),
            (40, true),
            (30, false),
            (20, true),
            (10, true),
        ];
        assert_eq!(doomed(&l, 60, 2), vec![10, 20, 30, 50]);
        assert_eq!(doomed(&l, 60, 3), vec![10, 30, 50]);
        assert_eq!(doomed(&l, 60, 4), vec![30, 50]);
        // Never the current one, never newer ones.
        assert_eq!(doomed(&[(70, false), (60, true)], 60, 1), Vec::<u64>::new());
    }

    #[test]
    fn scan_tells_torn_from_corrupt_from_ready() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let d40 = root.join(step_dir_name(40));
        let d50 = root.join(step_dir_name(50));
        let d60 = root.join(step_dir_name(60));
        for d in [&d40, &d50, &d60] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(d40.join(MANIFEST), manifest(40, 1).to_bytes().unwrap()).unwrap();
        std::fs::write(d50.join(shard_name(0)), b"x").unwrap();
        std::fs::write(d60.join(MANIFEST), b"garbage").unwrap();
        std::fs::write(root.join("step-notanumber"), b"").unwrap();
        let found = scan(root).unwrap();
        assert_eq!(found.len(), 3);
        assert!(matches!(&found[0], Found::Corrupt { step: 60, .. }));
        assert!(
            matches!(&found[1], Found::Torn { step: 50, why, .. } if why.contains("1 finished shard"))
        );
        assert!(matches!(&found[2], Found::Ready { manifest, .. } if manifest.step == 40));
    }
}
