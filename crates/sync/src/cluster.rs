//! Several nodes on one bucket: heartbeats, and who runs which task.
//!
//! - **Heartbeats**: each node writes `_nodes/{node}.json` every `sync.heartbeat`
//!   (30 s) with what it runs; every node folds all of them into its own
//!   `shared/node-status.json`, which is never synced and so never conflicts.
//!   Staleness is judged by the observer's own clock: a heartbeat object whose
//!   ETag has not changed for `sync.lease` (2 minutes) of local time is stale, so
//!   clock skew between machines does not matter.
//! - **Claims**: a task is run by the node that created `_claims/{taskId}` first
//!   (`If-None-Match: *`, or `link(2)` on the local-directory backend). A stale
//!   node's claims are taken over with `If-Match` on the claim's ETag, which bumps
//!   the claim's generation; exactly one taker wins.
//! - **Fencing**: a node that finds its claim taken stops the task and never
//!   writes to its directory again: `.clawboard/fenced/{taskId}/` marks it, push
//!   skips the directory, and whatever this node had changed there that the bucket
//!   does not hold is moved into that marker directory (kept, not synced) and
//!   replaced by the bucket's version.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use bytes::Bytes;
use clawboard_core::RelPath;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Failure, Result};
pub use crate::node::Heartbeat;
use crate::node::{NODES_PREFIX, fenced_dir, remember_generation};
use crate::push::{Pusher, sync_dir};
use crate::remote::{Body, Condition, Metadata, PutOutcome, Remote};
use crate::report::now_text;

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
}

/// Who holds a claim after an attempt to take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResult {
    Won { generation: u64 },
    Lost { owner: String },
}

fn claim_key(task: &str) -> Result<String> {
    clawboard_core::check_id(task).map_err(|e| Error::config("taskId", format!("{task:?}: {e}")))?;
    Ok(format!("{CLAIMS_PREFIX}{task}"))
}

impl<R: Remote> Pusher<R> {
    /// Writes this node's heartbeat.
    /// Writes this node's heartbeat: `If-Match` on the ETag of this process's last
    /// beat, so a beat written by anyone else under this node id meanwhile is seen.
    /// Returns false when that happened (two machines share this node id).
    pub async fn heartbeat(&self, mut beat: Heartbeat) -> Result<bool> {
        beat.node = self.node.clone();
        beat.seen_at = now_text();
        let body = Bytes::from(serde_json::to_vec_pretty(&beat).map_err(|e| Error::io("heartbeat", e.into()))?);
        let key = format!("{NODES_PREFIX}{}.json", self.node);
        let meta = Metadata::new();
        let previous = self.own_beat.lock().clone();
        let condition = previous.map_or(Condition::None, Condition::Matches);
        self.counts.put.fetch_add(1, Ordering::Relaxed);
        let (stored, alone) =
            match self.retry(|| self.remote.put(&key, Body::Bytes(body.clone()), &meta, &condition)).await {
                Ok(stored) => (stored, true),
                Err(e) if e.failure == Failure::PreconditionFailed => {
                    // Ours after all (a retried request that had landed), or another writer.
                    self.counts.get.fetch_add(1, Ordering::Relaxed);
                    let ours = self.retry(|| self.remote.get(&key)).await?.is_some_and(|(b, _)| b == body);
                    self.counts.put.fetch_add(1, Ordering::Relaxed);
                    let stored = self
                        .retry(|| self.remote.put(&key, Body::Bytes(body.clone()), &meta, &Condition::None))
                        .await?;
                    (stored, ours)
                }
                Err(e) => return Err(e.into()),
            };
        // This node's own beat is not read back.
        if let PutOutcome::Stored { etag: Some(etag) } = stored {
            *self.own_beat.lock() = Some(etag.clone());
            self.beats.lock().insert(self.node.clone(), (etag, beat));
        }
        Ok(alone)
    }

    /// Creates this node's heartbeat object if it has none (a node that only pushes
    /// from the command line is found by pullers all the same).
    pub(crate) async fn announce(&self) -> Result<()> {
        let beat = Heartbeat {
            node: self.node.clone(),
            seen_at: now_text(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            ..Heartbeat::default()
        };
        let body = serde_json::to_vec_pretty(&beat).map_err(|e| Error::io("heartbeat", e.into()))?;
        let key = format!("{NODES_PREFIX}{}.json", self.node);
        self.counts.put.fetch_add(1, Ordering::Relaxed);
        let meta = Metadata::new();
        match self
            .retry(|| self.remote.put(&key, Body::Bytes(Bytes::from(body.clone())), &meta, &Condition::Absent))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.failure == Failure::PreconditionFailed => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every node's last heartbeat, with its ETag. One listing of `_nodes/`; a
    /// heartbeat is read only when its ETag changed since this process last read it.
    pub async fn heartbeats(&self) -> Result<Vec<(Heartbeat, String)>> {
        self.counts.list.fetch_add(1, Ordering::Relaxed);
        let listed = self.retry(|| crate::remote::list_all(self.remote.as_ref(), NODES_PREFIX)).await?;
        let mut out = Vec::new();
        for o in listed {
            let Some(node) = o.key.strip_prefix(NODES_PREFIX).and_then(|k| k.strip_suffix(".json")) else { continue };
            let cached = self.beats.lock().get(node).cloned();
            // This node's own beat is the one it last wrote (another writer of the same
            // id is caught by the next beat's If-Match); others are read again when their
            // listed ETag changed, or on every listing that carries no ETag.
            if let Some((etag, beat)) = &cached
                && (node == self.node || o.etag.as_ref() == Some(etag))
            {
                out.push((beat.clone(), etag.clone()));
                continue;
            }
            self.counts.get.fetch_add(1, Ordering::Relaxed);
            let Some((bytes, info)) = self.retry(|| self.remote.get(&o.key)).await? else { continue };
            let etag = info.etag.unwrap_or_default();
            match serde_json::from_slice::<Heartbeat>(&bytes) {
                Ok(b) => {
                    self.beats.lock().insert(node.to_owned(), (etag.clone(), b.clone()));
                    out.push((b, etag));
                }
                Err(e) => tracing::warn!(key = o.key, "unreadable heartbeat: {e}"),
            }
        }
        Ok(out)
    }

    /// The claim on `task`, with its ETag.
    pub async fn claim_of(&self, task: &str) -> Result<Option<(ClaimDoc, String)>> {
        let key = claim_key(task)?;
        self.counts.get.fetch_add(1, Ordering::Relaxed);
        let Some((bytes, info)) = self.retry(|| self.remote.get(&key)).await? else { return Ok(None) };
        let doc = serde_json::from_slice::<ClaimDoc>(&bytes)
            .map_err(|e| Error::io(&key, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Ok(Some((doc, info.etag.unwrap_or_default())))
    }

    async fn put_claim(&self, doc: &ClaimDoc, condition: Condition) -> Result<bool> {
        let key = claim_key(&doc.task_id)?;
        let body = Bytes::from(serde_json::to_vec_pretty(doc).map_err(|e| Error::io(&key, e.into()))?);
        self.counts.put.fetch_add(1, Ordering::Relaxed);
        let meta = Metadata::new();
        match self.retry(|| self.remote.put(&key, Body::Bytes(body.clone()), &meta, &condition)).await {
            Ok(PutOutcome::Stored { .. }) => {
                remember_generation(&self.root, &doc.task_id, doc.generation)?;
                Ok(true)
            }
            Ok(PutOutcome::BodyChanged) => Ok(false),
            Err(e) if e.failure == Failure::PreconditionFailed => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Claims `task` for this node: true when this node holds it (now or already).
    pub async fn claim(&self, task: &str) -> Result<ClaimResult> {
        let doc = ClaimDoc {
            task_id: task.to_owned(),
            node: self.node.clone(),
            generation: 1,
            claimed_at: now_text(),
            taken_from: None,
        };
        if self.put_claim(&doc, Condition::Absent).await? {
            return Ok(ClaimResult::Won { generation: 1 });
        }
        self.check_claim(task).await
    }

    /// Who holds `task` now, from this node's point of view.
    pub async fn check_claim(&self, task: &str) -> Result<ClaimResult> {
        match self.claim_of(task).await? {
            Some((doc, _)) if doc.node == self.node => {
                remember_generation(&self.root, task, doc.generation)?;
                Ok(ClaimResult::Won { generation: doc.generation })
            }
            Some((doc, _)) => Ok(ClaimResult::Lost { owner: doc.node }),
            // Never claimed (e.g. claimed only locally before sync was on): claim it now.
            None => Box::pin(self.claim(task)).await,
        }
    }

    /// This node holds `task` (again): its fence marker, if any, is archived to
    /// `.clawboard/fenced-archive/{task}-{time}/` (what it kept stays there) and its
    /// directory is pushed again.
    pub fn unfence(&self, task: &str) -> Result<()> {
        let marker = fenced_dir(&self.root).join(task);
        if !marker.is_dir() {
            return Ok(());
        }
        let archive = self.root.join(".clawboard/fenced-archive");
        std::fs::create_dir_all(&archive).map_err(|e| Error::io(&archive, e))?;
        let dest = archive.join(format!("{task}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ")));
        std::fs::rename(&marker, &dest).map_err(|e| Error::io(&marker, e))?;
        tracing::info!(task, kept = %dest.display(), "this node holds the task again: unfenced");
        Ok(())
    }

    /// Takes `task` over from `from` (whose heartbeat went stale): `If-Match` on the
    /// claim's ETag, so one taker wins. `None` when the claim is not `from`'s anymore.
    pub async fn take_over(&self, task: &str, from: &str) -> Result<Option<ClaimResult>> {
        let Some((doc, etag)) = self.claim_of(task).await? else { return Ok(None) };
        if doc.node != from {
            return Ok(None);
        }
        let next = ClaimDoc {
            task_id: task.to_owned(),
            node: self.node.clone(),
            generation: doc.generation + 1,
            claimed_at: now_text(),
            taken_from: Some(from.to_owned()),
        };
        if self.put_claim(&next, Condition::Matches(etag)).await? {
            return Ok(Some(ClaimResult::Won { generation: next.generation }));
        }
        // A retried request that had landed finds the claim already ours.
        match self.claim_of(task).await? {
            Some((d, _)) if d.node == self.node => {
                remember_generation(&self.root, task, d.generation)?;
                Ok(Some(ClaimResult::Won { generation: d.generation }))
            }
            Some((d, _)) => Ok(Some(ClaimResult::Lost { owner: d.node })),
            None => Ok(None),
        }
    }

    /// This node lost `task`: never push its directory again, and put back the
    /// bucket's version of every file this node changed there (this node's versions
    /// are kept under `.clawboard/fenced/{task}/`). Returns how many files moved.
    pub async fn fence(&self, task: &str) -> Result<usize> {
        let _guards = self.exclusive().await?;
        self.load_state()?;
        self.fence_locked(task).await
    }

    /// [`Self::fence`], for a caller that holds [`Pusher::exclusive`].
    pub(crate) async fn fence_locked(&self, task: &str) -> Result<usize> {
        let keep = fenced_dir(&self.root).join(task);
        std::fs::create_dir_all(&keep).map_err(|e| Error::io(&keep, e))?;
        let prefix = format!("tasks/{task}/");
        let mut paths: Vec<String> = Vec::new();
        let dir = self.root.join(&prefix);
        // Only a real directory (not a link to one, wherever it points) is walked.
        let real = clawboard_core::store::real_dir(&self.root, &prefix);
        if real {
            for entry in walkdir::WalkDir::new(&dir)
                .follow_links(false)
                .follow_root_links(false)
                .into_iter()
                .filter_map(|e| e.ok())
            {
                if entry.file_type().is_file()
                    && let Ok(rel) = entry.path().strip_prefix(&self.root)
                {
                    paths.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        let recorded: Vec<String> =
            self.with_state(|s| Ok(s.live_paths().filter(|p| p.starts_with(&prefix)).cloned().collect()))?;
        for p in recorded {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        let writer = self.writer.lock().clone();
        let mut moved = 0;
        for path in paths {
            if self.is_excluded(&path) {
                continue;
            }
            let rec = self.with_state(|s| Ok(s.get(&path).cloned()))?;
            let abs = self.root.join(&path);
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
            if clean {
                continue;
            }
            if meta.is_some() {
                let dest = keep.join(path.strip_prefix(&prefix).unwrap_or(&path));
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
                }
                std::fs::rename(&abs, &dest).map_err(|e| Error::io(&abs, e))?;
                writer.remove(&RelPath::new(&path)?)?; // reports the removal (already gone)
                moved += 1;
            }
            // Put back what the bucket holds.
            self.counts.get.fetch_add(1, Ordering::Relaxed);
            if let Some((bytes, info)) = self.retry(|| self.remote.get(&path)).await? {
                writer.write_bytes(&RelPath::new(&path)?, &bytes)?;
                let stamp =
                    clawboard_core::index::Stamp::of(&std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?);
                let mut record = rec.clone().unwrap_or_default();
                record.hash = blake3::hash(&bytes).to_hex().to_string();
                record.size = stamp.size;
                record.mtime_ns = stamp.mtime_ns;
                record.etag = info.etag.unwrap_or_default();
                record.deleted = false;
                self.with_state(|s| s.record(&path, Some(record)))?;
            }
        }
        self.with_state(crate::state::PushState::sync)?;
        tracing::warn!(task, moved, kept = %keep.display(), "lost the claim on this task: fenced");
        Ok(moved)
    }

    /// Deletes this node's change-log segments older than `sync.log_retention`.
    pub async fn expire_log(&self) -> Result<usize> {
        let keep_after = chrono::Utc::now()
            - chrono::Duration::from_std(self.settings.log_retention).unwrap_or(chrono::Duration::days(7));
        crate::log::expire(self.remote.as_ref(), &self.node, keep_after).await
    }
}

/// The sync directory's marker of when the log was last expired.
pub fn expired_marker(root: &Path) -> PathBuf {
    sync_dir(root).join("log-expired-at")
}
