//! Advisory locks for writers of the same path: `File::lock` on one of a fixed set
//! of lock files, picked by a hash of the path. Fixed, so `.clawboard/locks/` never
//! grows; one lock held at a time, so stripes cannot deadlock.

use std::fs::{File, OpenOptions};

use super::{RelPath, Store};
use crate::error::{Error, Result};
use crate::layout;

const STRIPES: u64 = 64;

/// Held while a path is written; released on drop (the file is closed).
#[derive(Debug)]
pub struct PathLock {
    _file: File,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

impl Store {
    /// Blocks until this process holds the write lock for `rel`.
    pub fn lock(&self, rel: &RelPath) -> Result<PathLock> {
        let stripe = fnv1a(rel.to_string().as_bytes()) % STRIPES;
        let dir = self.root.join(layout::LOCKS);
        let path = dir.join(format!("{stripe:02}.lock"));
        let open = || OpenOptions::new().create(true).truncate(false).write(true).open(&path);
        let file = match open() {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
                open().map_err(|e| Error::io(&path, e))?
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        file.lock().map_err(|e| Error::io(&path, e))?;
        Ok(PathLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::ActiveInstances;
    use std::sync::Arc;

    #[test]
    fn concurrent_updates_are_serialized() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        let store = Arc::new(store);
        let rel = RelPath::new("roles/active.json").unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (store, rel) = (store.clone(), rel.clone());
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        store
                            .update_json(&rel, |a: &mut ActiveInstances| {
                                let n = a.extra.get("n").and_then(|v| v.as_u64()).unwrap_or(0);
                                a.extra.insert("n".into(), (n + 1).into());
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let a: ActiveInstances = store.read(&rel).unwrap();
        assert_eq!(a.extra["n"], 200);
    }
}
