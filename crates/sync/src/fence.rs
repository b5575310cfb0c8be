//! Below push and cluster, what both do with claims: read a task's claim in the
//! bucket, and fence a task this node lost. Cluster fences when a claim check finds
//! the task taken; push fences a finished task it finds taken over before it would
//! push into it.

use clawboard_core::RelPath;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::node::fenced_dir;
use crate::remote::Remote;
use crate::shared::SyncState;

pub const CLAIMS_PREFIX: &str = "_claims/";

/// `_claims/{taskId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimDoc {
    pub task_id: String,
    pub node: String,
    pub generation: u64,
    pub claimed_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_from: Option<String>,
    /// When the holder last renewed it (after a restart, or a lapse of its heartbeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_at: Option<String>,
}

pub(crate) fn claim_key(task: &str) -> Result<String> {
    clawboard_core::check_id(task).map_err(|e| Error::config("taskId", format!("{task:?}: {e}")))?;
    Ok(format!("{CLAIMS_PREFIX}{task}"))
}

/// The claim on `task`, with its ETag.
pub(crate) async fn claim_of<R: Remote>(sync: &SyncState<R>, task: &str) -> Result<Option<(ClaimDoc, String)>> {
    let key = claim_key(task)?;
    let got = match sync.get_checked(&key).await {
        Ok(got) => got,
        Err(e) if e.is_retryable() => match mend_torn(sync, &key).await? {
            Some(got) => Some(got),
            None => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    };
    let Some((bytes, info)) = got else { return Ok(None) };
    let doc = serde_json::from_slice::<ClaimDoc>(&bytes)
        .map_err(|e| Error::io(&key, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Ok(Some((doc, info.etag.unwrap_or_default())))
}

/// Whether `bytes` are not the version `info`'s hash names.
fn torn(bytes: &[u8], info: &crate::remote::ObjectInfo) -> bool {
    info.blake3().is_some_and(|named| named != blake3::hash(bytes).to_hex().as_str())
}

/// A claim whose bytes and hash still disagree when read twice, the ETag and
/// bytes the same, [`crate::cluster::READ_BACK`] apart: a server that stores an
/// object's data and metadata apart let two writes interleave (s3s-fs), and no
/// read will ever match again. It is rewritten whole over that ETag, its bytes
/// with their own hash: the claim is the node its bytes name. `None` when the
/// object is not torn that way (a read beside a write, which passes).
async fn mend_torn<R: Remote>(
    sync: &SyncState<R>,
    key: &str,
) -> Result<Option<(bytes::Bytes, crate::remote::ObjectInfo)>> {
    let read = || async {
        sync.counts.get.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        sync.remote.get(key).await
    };
    let Some((bytes, info)) = read().await? else { return Ok(None) };
    if !torn(&bytes, &info) {
        return Ok(Some((bytes, info)));
    }
    tokio::time::sleep(crate::cluster::READ_BACK).await;
    let Some((again, info_again)) = read().await? else { return Ok(None) };
    let Some(etag) = info.etag.clone().filter(|e| Some(e) == info_again.etag.as_ref() && again == bytes) else {
        return Ok(None);
    };
    sync.counts.put.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = crate::remote::Body::Bytes(bytes.clone());
    match sync.remote.put(key, body, &crate::remote::hashed(&bytes), &crate::remote::Condition::Matches(etag)).await {
        Ok(_) => {
            tracing::warn!(key, "a claim two interleaved writes left torn was written again whole");
            Ok(sync.get_checked(key).await?)
        }
        Err(e) if e.failure == crate::error::Failure::PreconditionFailed => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// This node lost `task`: never push its directory again, and put back the
/// bucket's version of every file this node changed there (this node's versions
/// are kept under `.clawboard/fenced/{task}/`, and so is a copy of each version
/// of its own it had pushed, which the holder's may replace). Conflict copies of this node's
/// versions there are withdrawn ([`crate::copy`]). Returns how many files moved.
/// The caller holds [`SyncState::exclusive`] and loaded the push state.
pub(crate) async fn fence_locked<R: Remote>(sync: &SyncState<R>, task: &str) -> Result<usize> {
    let keep = fenced_dir(&sync.root).join(task);
    std::fs::create_dir_all(&keep).map_err(|e| Error::io(&keep, e))?;
    let prefix = format!("tasks/{task}/");
    let mut paths: Vec<String> = Vec::new();
    let dir = sync.root.join(&prefix);
    // Only a real directory (not a link to one, wherever it points) is walked.
    let real = clawboard_core::store::real_dir(&sync.root, &prefix);
    if real {
        for entry in
            walkdir::WalkDir::new(&dir).follow_links(false).follow_root_links(false).into_iter().filter_map(|e| e.ok())
        {
            if entry.file_type().is_file()
                && let Ok(rel) = entry.path().strip_prefix(&sync.root)
            {
                paths.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let recorded: Vec<String> =
        sync.with_state(|s| Ok(s.live_paths().filter(|p| p.starts_with(&prefix)).cloned().collect()))?;
    for p in recorded {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    let writer = &sync.writer;
    let (mut moved, mut withdrawn, mut kept) = (0, 0, 0);
    for path in paths {
        if sync.is_excluded(&path) {
            continue;
        }
        let rec = sync.with_state(|s| Ok(s.get(&path).cloned()))?;
        let abs = sync.root.join(&path);
        let meta = std::fs::symlink_metadata(&abs).ok().filter(std::fs::Metadata::is_file);
        let clean = match (&meta, rec.as_ref().and_then(crate::state::Pushed::live)) {
            (Some(m), Some(r)) => {
                let stamp = clawboard_core::index::Stamp::of(m);
                (stamp.size == r.size && stamp.mtime_ns == r.mtime_ns)
                    || std::fs::read(&abs).is_ok_and(|b| blake3::hash(&b).to_hex().as_str() == r.hash)
            }
            (None, None) => true,
            _ => false,
        };
        // A copy of this node's own version that lost to the holder's: withdrawn
        // (kept in the marker directory, deleted in the tree and the bucket).
        if clean
            && let Some(r) = rec.as_ref().and_then(crate::state::Pushed::live)
            && crate::copy::copy_of(&path, &sync.node).is_some()
            && let Ok(bytes) = std::fs::read(&abs)
            && crate::copy::withdraw(sync, &path, &bytes, &r.vv).await?
        {
            withdrawn += 1;
            continue;
        }
        let dest = keep.join(path.strip_prefix(&prefix).unwrap_or(&path));
        if clean {
            // A version of this node's own, shared: the holder's may replace it (a
            // step the holder ran again over one this node pushed last), so it is
            // kept here too.
            if meta.is_some() && rec.as_ref().is_some_and(|r| r.author == sync.node && !r.deleted) {
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
                }
                std::fs::copy(&abs, &dest).map_err(|e| Error::io(&abs, e))?;
                kept += 1;
            }
            continue;
        }
        if meta.is_some() {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            std::fs::rename(&abs, &dest).map_err(|e| Error::io(&abs, e))?;
            writer.remove(&RelPath::new(&path)?)?; // reports the removal (already gone)
            moved += 1;
        }
        put_back(sync, &path, rec.as_ref(), &dest).await?;
    }
    sync.with_state(crate::state::PushState::sync)?;
    tracing::warn!(task, moved, withdrawn, copied = kept, kept = %keep.display(), "lost the claim on this task: fenced");
    Ok(moved)
}

/// Puts back the bucket's version of `path` in a task this node lost (its own
/// version was kept at `dest`, or it had none). An object of this node's own at a
/// path it never recorded (the PUT of a new file landed as the node was killed) is
/// no one else's version: no change log names it, and the holder never had it. It
/// is kept at `dest` (unless this node's file is there already) and deleted in the
/// bucket with a logged delete, not written back into the task.
async fn put_back<R: Remote>(
    sync: &SyncState<R>,
    path: &str,
    rec: Option<&crate::state::Pushed>,
    dest: &std::path::Path,
) -> Result<()> {
    let Some((bytes, info)) = sync.get_checked(path).await? else { return Ok(()) };
    if let Some((_, vv, hlc)) =
        crate::pull::stamp_of(&info).filter(|(author, _, _)| *author == sync.node && rec.is_none_or(|r| r.deleted))
    {
        tracing::warn!(path, hlc, "deleting this node's unrecorded upload of a new file from a task it lost");
        if !dest.exists() {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            std::fs::write(dest, &bytes).map_err(|e| Error::io(dest, e))?;
        }
        return crate::copy::delete_logged(sync, path, &vv).await;
    }
    let abs = sync.root.join(path);
    sync.writer.write_bytes(&RelPath::new(path)?, &bytes)?;
    let stamp = clawboard_core::index::Stamp::of(&std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?);
    let mut record = rec.cloned().unwrap_or_default();
    record.hash = blake3::hash(&bytes).to_hex().to_string();
    record.size = stamp.size;
    record.mtime_ns = stamp.mtime_ns;
    record.etag = info.etag.unwrap_or_default();
    record.deleted = false;
    sync.with_state(|s| s.record(path, Some(record)))
}
