//! Which remote the sync state in `.clawboard/sync/` belongs to.
//!
//! The push records say what the bucket already holds; they are true of one bucket
//! and prefix only. `remote` names it (the remote's description). When the config
//! names another remote, the state that was about the old one (push records, pull
//! cursors, the outbox, PUTs in flight, the log-expiry mark) is moved to
//! `replaced/`, and `full-pending` makes the next push a full one, so the new
//! bucket gets the whole tree instead of "all already there". The HLC clock, the
//! change-log seq and the conflict record stay: they are this node's, whatever the
//! bucket.
//!
//! A state without `remote` (written before the remote was recorded) is taken to
//! belong to the remote configured now.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

const REMOTE: &str = "remote";
const FULL_PENDING: &str = "full-pending";
const REPLACED: &str = "replaced";
/// The files whose content is about one bucket.
const PER_REMOTE: [&str; 6] =
    ["pushed.json", "pushed.log", "pull.json", "outbox.jsonl", "inflight.jsonl", "log-expired-at"];

/// Makes the state in `dir` the state of `remote`: true when it belonged to another
/// remote and was set aside (the caller drops what it holds in memory). Called with
/// the push lock held.
pub(crate) fn bind(dir: &Path, remote: &str) -> Result<bool> {
    let path = dir.join(REMOTE);
    let previous = match fs::read_to_string(&path) {
        Ok(text) => Some(text.trim_end().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(&path, e)),
    };
    if previous.as_deref() == Some(remote) {
        return Ok(false);
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let replaced = match &previous {
        Some(old) => {
            set_aside(dir)?;
            clawboard_core::store::write_atomic(dir, FULL_PENDING, format!("{remote}\n").as_bytes())?;
            tracing::warn!(
                from = %old,
                to = %remote,
                "the sync remote changed: this node's push records were about the old one (kept in \
                 .clawboard/sync/replaced/); the next push sends the whole tree"
            );
            true
        }
        None => false,
    };
    clawboard_core::store::write_atomic(dir, REMOTE, format!("{remote}\n").as_bytes())?;
    Ok(replaced)
}

fn set_aside(dir: &Path) -> Result<()> {
    let to = dir.join(REPLACED);
    if to.exists() {
        fs::remove_dir_all(&to).map_err(|e| Error::io(&to, e))?;
    }
    fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?;
    for name in PER_REMOTE {
        match fs::rename(dir.join(name), to.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(dir.join(name), e)),
        }
    }
    if let Ok(text) = fs::read_to_string(dir.join(REMOTE)) {
        fs::write(to.join(REMOTE), text).map_err(|e| Error::io(to.join(REMOTE), e))?;
    }
    Ok(())
}

/// True when the remote changed and no full push has completed since.
pub(crate) fn full_pending(dir: &Path) -> bool {
    dir.join(FULL_PENDING).exists()
}

/// A full push completed: the bucket has the tree.
pub(crate) fn full_done(dir: &Path) -> Result<()> {
    match fs::remove_file(dir.join(FULL_PENDING)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(dir.join(FULL_PENDING), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_binding_keeps_the_state_and_a_new_remote_sets_it_aside() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        fs::write(dir.join("pushed.json"), "{}").unwrap();
        fs::write(dir.join("log-seq"), "7\n").unwrap();
        assert!(!bind(dir, "dir:/a").unwrap());
        assert!(dir.join("pushed.json").exists(), "a state without a recorded remote is adopted");
        assert!(!full_pending(dir));
        assert!(!bind(dir, "dir:/a").unwrap());

        assert!(bind(dir, "s3://b/p/").unwrap());
        assert!(!dir.join("pushed.json").exists());
        assert_eq!(fs::read_to_string(dir.join("replaced/pushed.json")).unwrap(), "{}");
        assert_eq!(fs::read_to_string(dir.join("replaced/remote")).unwrap(), "dir:/a\n");
        assert_eq!(fs::read_to_string(dir.join("log-seq")).unwrap(), "7\n", "the node's log seq stays");
        assert_eq!(fs::read_to_string(dir.join("remote")).unwrap(), "s3://b/p/\n");
        assert!(full_pending(dir));
        full_done(dir).unwrap();
        assert!(!full_pending(dir));
        assert!(!bind(dir, "s3://b/p/").unwrap());
    }
}
