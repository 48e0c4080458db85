//! Results on disk: JSON written atomically, JSONL appended and flushed record by
//! record, so a killed run leaves only whole lines and either a complete `run.json` or
//! none.
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub mod acceptance;
pub mod analysis;
pub mod chaos;
pub mod comm;
pub mod dcgm;
pub mod evidence;
pub mod gpu;
pub mod gpu_analysis;
pub mod gpu_floors;
pub mod probe;
pub mod provenance;
pub mod replay;
pub mod sdc;
pub mod smoke;
pub mod sweep;
pub mod train;

/// Write `value` as pretty JSON to `path`: temporary file in the same directory,
/// fsync, rename over the target, fsync the directory.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)?;
    write_atomic(path, &bytes)
}

/// Atomically replace `path` with `bytes` (see [`write_json_atomic`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `--out` of a workload: make the folder, let `prepare` clear what an earlier run
/// left and name the JSONL file, and open it for appending. None without `--out`.
/// Under MPI rank 0 calls it and tells the others whether it worked
/// (`World::on_rank0_agreed`): the caller gathers, the records only write.
pub fn open_records(
    out: Option<&Path>,
    prepare: impl FnOnce(&Path) -> PathBuf,
) -> Result<Option<Jsonl>> {
    out.map(|dir| create_out_dir(dir, "--out").and_then(|_| Jsonl::open(&prepare(dir))))
        .transpose()
}

/// Make an output directory (and its parents), with an error that names it.
pub fn create_out_dir(dir: &Path, flag: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag}: cannot create directory {}", dir.display()))?;
    // Prove it is writable now, before any measurement, not after an hour of work.
    let probe = dir.join(format!(".burnin-write-test.{}", std::process::id()));
    File::create(&probe)
        .with_context(|| format!("{flag}: directory {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// An append-only JSON-lines file; every record is written whole and flushed at once.
pub struct Jsonl {
    file: File,
    path: PathBuf,
}

impl Jsonl {
    /// Open for appending, creating it; a symlink at `path` is refused (O_NOFOLLOW),
    /// so a link planted in a shared results folder cannot redirect our writes.
    pub fn open(path: &Path) -> Result<Jsonl> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .with_context(|| format!("cannot open {} for appending", path.display()))?;
        Ok(Jsonl {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Append one record as one line (a single write, so a kill cannot split it
    /// between our own writes) and flush it to the OS.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .with_context(|| format!("cannot append to {}", self.path.display()))?;
        self.file.flush()?;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// "20260412T101500Z" for a unix time (UTC), as `date -u +%Y%m%dT%H%M%SZ` prints.
pub fn utc_stamp(unix: f64) -> String {
    utc_format(
        unix,
        time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"),
    )
}

/// "2026-04-12 10:15:00 UTC".
pub fn utc_text(unix: f64) -> String {
    utc_format(
        unix,
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC"),
    )
}

fn utc_format(unix: f64, format: &[time::format_description::BorrowedFormatItem<'_>]) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(unix.max(0.0) as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(format).unwrap_or_default()
}

/// Schema versions this burnin reads, oldest to newest, per kind of file.
pub struct SchemaRange {
    pub kind: &'static str,
    pub oldest: u32,
    pub newest: u32,
}

/// Sweep run.json / points.jsonl.
pub const SWEEP_SCHEMA: SchemaRange = SchemaRange {
    kind: "sweep",
    oldest: 1,
    newest: crate::results::sweep::SCHEMA_VERSION,
};

/// Train run.json / steps.jsonl.
pub const TRAIN_SCHEMA: SchemaRange = SchemaRange {
    kind: "train",
    oldest: 1,
    newest: crate::results::train::SCHEMA_VERSION,
};

/// gpu.json.
pub const GPU_SCHEMA: SchemaRange = SchemaRange {
    kind: "gpu",
    oldest: 1,
    newest: crate::results::gpu::SCHEMA_VERSION,
};

/// replay.json.
pub const REPLAY_SCHEMA: SchemaRange = SchemaRange {
    kind: "replay",
    oldest: 1,
    newest: crate::results::replay::SCHEMA_VERSION,
};

/// acceptance.json.
pub const ACCEPTANCE_SCHEMA: SchemaRange = SchemaRange {
    kind: "acceptance",
    oldest: 1,
    newest: crate::results::acceptance::SCHEMA_VERSION,
};

/// Refuse a record this burnin cannot read, naming the file and what to do.
pub fn check_schema(v: &Value, file: &Path, range: &SchemaRange) -> Result<u32> {
    let kind = range.kind;
    let Some(found) = v.get("schema_version") else {
        bail!(
            "{}: no schema_version field: not a burnin {kind} record (or one from before records were versioned)",
            file.display()
        );
    };
    let Some(n) = found.as_u64().and_then(|n| u32::try_from(n).ok()) else {
        bail!(
            "{}: schema_version {found} is not a whole number",
            file.display()
        );
    };
    if n > range.newest {
        bail!(
            "{}: {kind} schema_version {n} is newer than this burnin reads ({}..={}); render it with the burnin that wrote it, or a newer one",
            file.display(),
            range.oldest,
            range.newest
        );
    }
    if n < range.oldest {
        bail!(
            "{}: {kind} schema_version {n} is older than this burnin still reads ({}..={}); render it with burnin {} or earlier",
            file.display(),
            range.oldest,
            range.newest,
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0.0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400.0), "20000229T000000Z");
        assert_eq!(utc_stamp(1_767_225_599.0), "20251231T235959Z");
        assert_eq!(utc_text(1_767_225_599.0), "2025-12-31 23:59:59 UTC");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.json");
        write_json_atomic(&p, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&p, &serde_json::json!({"a": 2})).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(v["a"], 2);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary files left");
    }

    #[test]
    fn jsonl_lines_each_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("points.jsonl");
        let mut j = Jsonl::open(&p).unwrap();
        for i in 0..3 {
            j.append(&serde_json::json!({"i": i})).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 3);
        for l in text.lines() {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
    }

    #[test]
    fn jsonl_refuses_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("points.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(Jsonl::open(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn unwritable_out_dir_is_named() {
        let e = create_out_dir(Path::new("/proc/burnin-cannot-exist"), "--out").unwrap_err();
        assert!(
            format!("{e:#}").contains("--out: cannot create directory /proc/burnin-cannot-exist")
        );
    }
}
