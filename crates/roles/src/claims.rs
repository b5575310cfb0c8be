//! Who runs a task. On one machine a claim is a file created exclusively in
//! `.clawboard/claims/`; the multi-node issue extends [`claim`] to a conditional
//! write in the bucket. `.clawboard/active/` lists claimed tasks not yet finished,
//! which a starting daemon resumes.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use clawboard_core::{Error, Store, Timestamp, layout};

/// `dir` (a `layout` constant) under the root, created if missing.
fn dir(store: &Store, dir: &str) -> Result<PathBuf, Error> {
    let d = store.root().join(dir);
    fs::create_dir_all(&d).map_err(|e| Error::Io { path: d.clone(), source: e })?;
    Ok(d)
}

/// Whether a claim's files are synced one by one ([`claim`]), or by the caller
/// once for many ([`claim_all`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    Synced,
    Deferred,
}

fn create_new(path: &Path, body: &str, durability: Durability) -> Result<bool, Error> {
    use std::io::Write;
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut f) => {
            f.write_all(body.as_bytes())
                .and_then(|()| if durability == Durability::Synced { f.sync_all() } else { Ok(()) })
                .map_err(|e| Error::Io { path: path.to_owned(), source: e })?;
            if let Some(parent) = path.parent().filter(|_| durability == Durability::Synced) {
                sync_dir(parent)?;
            }
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::Io { path: path.to_owned(), source: e }),
    }
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::Io { path: dir.to_owned(), source: e })
}

/// Claims `task_id` for this node; false if it was claimed before (by anyone, ever).
pub fn claim(store: &Store, task_id: &str) -> Result<bool, Error> {
    let claims = dir(store, layout::CLAIMS)?;
    if claims.join(task_id).exists() {
        return Ok(false);
    }
    // Active first: a crash between the two leaves a task that resumes, never one
    // that is claimed and forgotten.
    create_new(&dir(store, layout::ACTIVE)?.join(task_id), "", Durability::Synced)?;
    let body = format!("{{\"claimedAt\": \"{}\", \"pid\": {}}}\n", Timestamp::now(), std::process::id());
    create_new(&claims.join(task_id), &body, Durability::Synced)
}

/// Claims each of `task_ids` as [`claim`] does (false: claimed before), with
/// one sync per directory for the whole batch instead of four per claim: every
/// `active/` file first, synced, then every claim, synced. The order across a
/// power loss stays [`claim`]'s: a claim that survives has its `active/` file.
/// An error leaves some claimed and some not; claiming again is harmless.
pub fn claim_all(store: &Store, task_ids: &[&str]) -> Result<Vec<bool>, Error> {
    let (claims, active) = (dir(store, layout::CLAIMS)?, dir(store, layout::ACTIVE)?);
    let fresh: Vec<bool> = task_ids.iter().map(|id| !claims.join(id).exists()).collect();
    for (id, _) in task_ids.iter().zip(&fresh).filter(|(_, f)| **f) {
        create_new(&active.join(id), "", Durability::Deferred)?;
    }
    sync_dir(&active)?;
    let body = format!("{{\"claimedAt\": \"{}\", \"pid\": {}}}\n", Timestamp::now(), std::process::id());
    let mut won = Vec::with_capacity(task_ids.len());
    for (id, fresh) in task_ids.iter().zip(fresh) {
        won.push(fresh && create_new(&claims.join(id), &body, Durability::Deferred)?);
    }
    sync_dir(&claims)?;
    Ok(won)
}

/// Makes `task_id` this node's (a claim won across nodes, or taken over): it is
/// driven now and resumed after a restart.
pub fn adopt(store: &Store, task_id: &str) -> Result<(), Error> {
    create_new(&dir(store, layout::ACTIVE)?.join(task_id), "", Durability::Synced)?;
    let body = format!("{{\"claimedAt\": \"{}\", \"pid\": {}}}\n", Timestamp::now(), std::process::id());
    create_new(&dir(store, layout::CLAIMS)?.join(task_id), &body, Durability::Synced)?;
    Ok(())
}

pub fn is_claimed(store: &Store, task_id: &str) -> bool {
    store.root().join(layout::CLAIMS).join(task_id).exists()
}

/// Claimed tasks that have not finished.
pub fn active(store: &Store) -> Result<Vec<String>, Error> {
    let d = dir(store, layout::ACTIVE)?;
    let mut ids: Vec<String> = fs::read_dir(&d)
        .map_err(|e| Error::Io { path: d.clone(), source: e })?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| clawboard_core::check_id(n).is_ok())
        .collect();
    ids.sort();
    Ok(ids)
}

/// The task finished (completed or failed): it is no longer resumed.
pub fn finish(store: &Store, task_id: &str) -> Result<(), Error> {
    let p = dir(store, layout::ACTIVE)?.join(task_id);
    match fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io { path: p, source: e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_claimed_once() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        assert!(claim(&store, "t1").unwrap());
        assert!(!claim(&store, "t1").unwrap());
        assert_eq!(active(&store).unwrap(), vec!["t1"]);
        finish(&store, "t1").unwrap();
        assert!(active(&store).unwrap().is_empty());
        assert!(!claim(&store, "t1").unwrap(), "a finished task is not claimed again");
    }

    #[test]
    fn a_batch_of_claims_claims_each_task_once() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        assert!(claim(&store, "t1").unwrap());
        assert_eq!(claim_all(&store, &["t1", "t2", "t3", "t2"]).unwrap(), [false, true, true, false]);
        assert_eq!(active(&store).unwrap(), ["t1", "t2", "t3"]);
        assert!(is_claimed(&store, "t3"));
        assert_eq!(claim_all(&store, &[]).unwrap(), Vec::<bool>::new());
    }
}
