//! Conflict copies (`NAME.conflict-{node}-{stamp}.EXT`): how one is named, whose
//! version it holds, and taking this node's copies out of a task it lost.
//!
//! In a task's directory the claim holder's version wins a conflict, and the
//! other version is kept beside it as a copy. When that version came from a node
//! that took in the same task and lost its claim (it pushed its copy of the task's
//! files before the claim was decided), the copy would stay in the holder's
//! directory for good. So the node whose version it is withdraws it once it knows
//! it lost the task (it fenced it, or the copy of a `task.json` it created itself
//! arrives under another node's claim: see `Pull::took_in_and_lost`): it keeps
//! the bytes under `.clawboard/fenced/{task}/` (not synced, beside whatever else
//! it kept when it fenced the task), then deletes the copy from its tree and the
//! bucket and logs the delete, which every other node, the holder too, applies
//! as a plain newer version. Only this node's own versions, only in a task it
//! lost, and only a copy nobody changed since it was made: an edited copy is a
//! change, and it stays.

use std::sync::atomic::Ordering;

use clawboard_core::RelPath;

use crate::error::{Error, Result};
use crate::remote::Remote;
use crate::shared::{SyncState, log_entry, task_of};
use crate::state::Pushed;
use crate::version::{self, Vv};

/// `dir/stem.conflict-{node}-{stamp}.ext`.
pub fn conflict_name(path: &str, node: &str, hlc: u64) -> String {
    let (dir, file) = match path.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), path),
    };
    let stamp = version::stamp_text(hlc).replace('.', "");
    match file.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{dir}{stem}.conflict-{node}-{stamp}.{ext}"),
        _ => format!("{dir}{file}.conflict-{node}-{stamp}"),
    }
}

/// The path `copy` is a conflict copy of, when it is one of `node`'s versions
/// (named by [`conflict_name`]): `gm/a.conflict-n1-20261127T033107736Z.md` → `gm/a.md`.
pub fn copy_of(copy: &str, node: &str) -> Option<String> {
    let (dir, file) = match copy.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), copy),
    };
    let (stem, rest) = file.split_once(&format!(".conflict-{node}-"))?;
    let (stamp, ext) = match rest.split_once('.') {
        Some((stamp, ext)) => (stamp, Some(ext)),
        None => (rest, None),
    };
    let stamp_like = !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'T' || b == b'Z');
    if stem.is_empty() || !stamp_like {
        return None;
    }
    Some(match ext {
        Some(ext) => format!("{dir}{stem}.{ext}"),
        None => format!("{dir}{stem}"),
    })
}

/// Where a withdrawn copy of `path` (in `tasks/{task}/`) is kept, relative to the
/// root: `.clawboard/fenced/{task}/` and its path inside the task's directory.
pub fn kept_path(path: &str) -> Option<String> {
    let task = task_of(path)?;
    let inside = path.strip_prefix(&format!("tasks/{task}/"))?;
    Some(format!(".clawboard/fenced/{task}/{inside}"))
}

/// Whether a copy of `path` holding `bytes` can be kept at [`kept_path`]: nothing is
/// there yet, or the same bytes are (never overwrites what fencing kept).
pub(crate) fn can_keep(root: &std::path::Path, path: &str, bytes: &[u8]) -> bool {
    let Some(rel) = kept_path(path) else { return false };
    match std::fs::symlink_metadata(root.join(&rel)) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(m) => m.is_file() && std::fs::read(root.join(&rel)).is_ok_and(|b| b == bytes),
    }
}

/// Writes `bytes`, this node's version kept as copy `path`, at [`kept_path`]
/// (atomically, fsync'd). The caller checked [`can_keep`].
pub(crate) fn keep(root: &std::path::Path, path: &str, bytes: &[u8]) -> Result<()> {
    let Some(rel) = kept_path(path) else {
        return Err(Error::io(path, std::io::Error::other("not in a task's directory; not kept")));
    };
    let dest = root.join(&rel);
    let (Some(dir), Some(name)) = (dest.parent(), dest.file_name().and_then(|n| n.to_str())) else {
        return Err(Error::io(&dest, std::io::Error::other("no file name")));
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    clawboard_core::store::write_atomic(dir, name, bytes)?;
    Ok(())
}

/// Withdraws `path`, a copy of one of this node's versions in a task it lost, whose
/// bytes are `bytes` and whose history is `base`: the bytes are kept at
/// [`kept_path`] (fsync'd first), then the copy is removed from the tree, deleted
/// in the bucket, logged as a delete by this node on top of `base`, and recorded.
/// False (and nothing done) when the place to keep it holds other bytes.
/// The caller holds [`SyncState::exclusive`] and loaded the push state.
pub(crate) async fn withdraw<R: Remote>(sync: &SyncState<R>, path: &str, bytes: &[u8], base: &Vv) -> Result<bool> {
    let Some(rel) = kept_path(path) else {
        return Err(Error::io(path, std::io::Error::other("not in a task's directory; not withdrawn")));
    };
    if !can_keep(&sync.root, path, bytes) {
        tracing::warn!(path, kept = rel, "another file is kept there already; the conflict copy stays");
        return Ok(false);
    }
    keep(&sync.root, path, bytes)?;
    sync.writer.remove(&RelPath::new(path)?)?;
    delete_logged(sync, path, base).await?;
    tracing::warn!(path, kept = rel, "withdrew this node's conflict copy from a task it lost");
    Ok(true)
}

/// Deletes `path` in the bucket, logged as a delete by this node on top of
/// `base`, and records the delete. The caller holds [`SyncState::exclusive`].
pub(crate) async fn delete_logged<R: Remote>(sync: &SyncState<R>, path: &str, base: &Vv) -> Result<()> {
    let hlc = sync.clock.now();
    let mut vv = base.clone();
    vv.insert(sync.node.clone(), hlc);
    let tomb = Pushed { vv, hlc, author: sync.node.clone(), deleted: true, ..Pushed::default() };
    sync.counts.delete.fetch_add(1, Ordering::Relaxed);
    sync.retry(|| sync.remote.delete(path)).await?;
    sync.outbox.append(&[log_entry(path, &tomb)])?;
    sync.with_state(|s| s.record(path, Some(tomb)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_names_keep_the_extension_and_sort_by_time() {
        let t = (1_763_786_043_123u64 << 16) | 5;
        assert_eq!(conflict_name("gm/notes.md", "node-a", t), "gm/notes.conflict-node-a-20251122T043403123Z.md");
        assert_eq!(conflict_name("README", "n", t), "README.conflict-n-20251122T043403123Z");
        assert_eq!(conflict_name(".hidden", "n", t), ".hidden.conflict-n-20251122T043403123Z");
        assert_eq!(conflict_name("a/b.tar.gz", "n", t), "a/b.tar.conflict-n-20251122T043403123Z.gz");
        assert!(conflict_name("x.md", "n", t) < conflict_name("x.md", "n", t + (1 << 16)));
    }

    #[test]
    fn a_copy_names_its_file_and_its_node() {
        let t = (1_763_786_043_123u64 << 16) | 5;
        for path in ["gm/notes.md", "README", "a/b.tar.gz", "tasks/t1/task.json"] {
            assert_eq!(copy_of(&conflict_name(path, "node-a", t), "node-a").as_deref(), Some(path));
            assert_eq!(copy_of(&conflict_name(path, "node-a", t), "node"), None, "another node's copy");
        }
        // Node "a" is not node "a-b", whose copies also hold ".conflict-a-".
        assert_eq!(copy_of(&conflict_name("gm/x.md", "a-b", t), "a"), None);
        assert_eq!(copy_of("gm/notes.md", "node-a"), None);
        assert_eq!(copy_of("gm/.conflict-n-20251122T043403123Z.md", "n"), None);
    }

    #[test]
    fn a_withdrawn_copy_is_kept_under_its_tasks_fence_marker() {
        assert_eq!(
            kept_path("tasks/t1/task.conflict-n-20251122T043403123Z.json").as_deref(),
            Some(".clawboard/fenced/t1/task.conflict-n-20251122T043403123Z.json")
        );
        assert_eq!(kept_path("tasks/t1/a/b.md").as_deref(), Some(".clawboard/fenced/t1/a/b.md"));
        assert_eq!(kept_path("gm/notes.md"), None);
        assert_eq!(kept_path("tasks/t1"), None);
    }
}
