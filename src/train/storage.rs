//! Plain file I/O for the checkpoint protocol and the raw storage baseline.
//!
//! The raw baseline answers "how fast is this directory for a plain sequential file of
//! the shard's size", measured the same way as a checkpoint shard: write, fsync, drop
//! the file's pages from the page cache, then read it back sequentially. Dropping the
//! cache (`posix_fadvise(DONTNEED)` after the fsync) is what makes the read a read of
//! the storage rather than of memory; it is best effort (a filesystem may ignore it),
//! and both the shard and the raw file get the same treatment, so their ratio is fair.
use super::data;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::Instant;

/// fsync a directory, so a rename or a new entry in it is durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).with_context(|| format!("cannot open directory {}", dir.display()))?;
    d.sync_all()
        .with_context(|| format!("cannot fsync directory {}", dir.display()))
}

/// Ask the kernel to forget a file's cached pages (best effort, after an fsync).
pub fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise on a file descriptor we own, over the whole file (0, 0);
    // it only affects caching and reports failure through its return value.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// fsync a file by path, then drop its pages from the cache.
pub fn fsync_and_drop(path: &Path) -> Result<()> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", path.display()))?;
    drop_cache(&f);
    Ok(())
}

/// Read a whole file, timing the reads only: the buffer is sized and its pages touched
/// first, so the time is the storage's (as `raw_read`'s), not the page faults of a
/// fresh allocation.
pub fn read_timed(path: &Path) -> Result<(Vec<u8>, f64)> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len() as usize;
    let mut bytes = vec![1u8; len];
    let t = Instant::now();
    let mut got = 0;
    while got < len {
        let n = f
            .read(&mut bytes[got..])
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let secs = t.elapsed().as_secs_f64();
    bytes.truncate(got);
    // grown since the stat: read the rest (the checksum then tells)
    f.read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok((bytes, secs))
}

const CHUNK: usize = 4 << 20;

/// Write `bytes` of incompressible data to `path` sequentially in 4 MiB writes, fsync
/// it and drop it from the cache; the seconds it took (write + fsync).
pub fn raw_write(path: &Path, bytes: u64, key: u64) -> Result<f64> {
    let mut block = vec![0u8; CHUNK.min(bytes.max(1) as usize)];
    data::fill_random(key, &mut block);
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut left = bytes;
    while left > 0 {
        let n = (block.len() as u64).min(left) as usize;
        f.write_all(&block[..n])
            .with_context(|| format!("cannot write {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", path.display()))?;
    let secs = t.elapsed().as_secs_f64();
    drop_cache(&f);
    Ok(secs)
}

/// Read `path` sequentially in 4 MiB reads; (bytes, seconds).
pub fn raw_read(path: &Path) -> Result<(u64, f64)> {
    let mut buf = vec![0u8; CHUNK];
    let t = Instant::now();
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut total = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok((total, t.elapsed().as_secs_f64()))
}

/// sha256 of bytes, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(bytes))
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_write_then_read_round_trips_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raw");
        let w = raw_write(&p, (9 << 20) + 3, 1).unwrap();
        assert!(w > 0.0);
        let (n, r) = raw_read(&p).unwrap();
        assert_eq!(n, (9 << 20) + 3);
        assert!(r > 0.0);
        fsync_dir(dir.path()).unwrap();
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
