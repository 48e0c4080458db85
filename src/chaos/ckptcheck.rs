//! The supervisor's own look at a checkpoint directory, independent of the code that
//! wrote it: which step directories have a manifest whose every shard has the size
//! and sha256 the manifest says. "The job recovered from the newest checkpoint that
//! was good when it died" is then checked, not assumed.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// What a checkpoint directory holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CkptState {
    /// Steps whose manifest and shards verify, newest first.
    pub verified: Vec<u64>,
    /// Steps with a manifest that does not verify, and why.
    pub bad: Vec<(u64, String)>,
    /// Steps without a manifest (torn: the job stopped while writing them).
    pub torn: Vec<u64>,
}

impl CkptState {
    pub fn newest_verified(&self) -> Option<u64> {
        self.verified.first().copied()
    }
}

fn sha256_file(path: &Path) -> std::io::Result<(u64, String)> {
    let bytes = std::fs::read(path)?;
    let mut h = Sha256::new();
    h.update(&bytes);
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((bytes.len() as u64, hex))
}

/// Why the checkpoint in `dir` does not verify (None: it does).
fn verify(dir: &Path) -> Option<String> {
    let text = match std::fs::read(dir.join("manifest.json")) {
        Ok(t) => t,
        Err(e) => return Some(format!("manifest unreadable: {e}")),
    };
    let m: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => return Some(format!("manifest does not parse: {e}")),
    };
    let Some(shards) = m["shards"].as_array() else {
        return Some("manifest lists no shards".into());
    };
    for sh in shards {
        let (Some(file), Some(bytes), Some(sha)) = (
            sh["file"].as_str(),
            sh["bytes"].as_u64(),
            sh["sha256"].as_str(),
        ) else {
            return Some("a shard entry lacks file, bytes or sha256".into());
        };
        match sha256_file(&dir.join(file)) {
            Err(e) => return Some(format!("{file}: {e}")),
            Ok((n, _)) if n != bytes => {
                return Some(format!("{file} has {n} bytes, the manifest says {bytes}"))
            }
            Ok((_, h)) if h != sha => return Some(format!("{file} does not match its sha256")),
            Ok(_) => {}
        }
    }
    None
}

/// Inspect every `step-N` directory of `root`.
pub fn inspect(root: &Path) -> CkptState {
    let mut steps: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let s = super::victim::step_dir_step(e.file_name().to_str()?)?;
                    Some((s, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    steps.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut st = CkptState::default();
    for (step, dir) in steps {
        if !dir.join("manifest.json").exists() {
            st.torn.push(step);
            continue;
        }
        match verify(&dir) {
            None => st.verified.push(step),
            Some(why) => st.bad.push((step, why)),
        }
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_bad_and_torn_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mk = |step: u64, content: &[u8], claim: &[u8], manifest: bool| {
            let d = root.join(format!("step-{step:09}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("rank-00000.safetensors"), content).unwrap();
            if manifest {
                let mut h = Sha256::new();
                h.update(claim);
                let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
                let m = serde_json::json!({"step": step, "shards": [
                    {"rank": 0, "file": "rank-00000.safetensors", "bytes": claim.len(), "sha256": hex}]});
                std::fs::write(d.join("manifest.json"), m.to_string()).unwrap();
            }
        };
        mk(10, b"good", b"good", true);
        mk(20, b"evil", b"good", true);
        mk(30, b"half", b"half", false);
        let st = inspect(root);
        assert_eq!(st.verified, vec![10]);
        assert_eq!(st.bad.len(), 1);
        assert_eq!(st.bad[0].0, 20);
        assert!(st.bad[0].1.contains("sha256"), "{:?}", st.bad);
        assert_eq!(st.torn, vec![30]);
        assert_eq!(st.newest_verified(), Some(10));
        assert_eq!(inspect(&root.join("none")), CkptState::default());
    }
}
