//! Several nodes on one bucket: heartbeats, and who runs which task.
//!
//! - **Heartbeats**: each node writes `_nodes/{node}.json` every `sync.heartbeat`
//!   (30 s) with what it runs; every node folds all of them into its own
//!   `shared/node-status.json`, which is never synced and so never conflicts.
//!   Staleness is judged by the observer's own clock: a heartbeat object whose
//!   ETag has not changed for `sync.lease` (2 minutes; the longer of the
//!   observer's and the one the heartbeat names) of local time is stale, so clock
//!   skew between machines does not matter.
//! - **Claims**: a task is run by the node that created `_claims/{taskId}` first
//!   (`If-None-Match: *`, or `link(2)` on the local-directory backend). A stale
//!   node's claims are taken over with `If-Match` on the claim's ETag, which bumps
//!   the claim's generation; exactly one taker wins.
//! - **Fencing**: a node that finds its claim taken stops the task and never
//!   writes to its directory again: `.clawboard/fenced/{taskId}/` marks it, push
//!   skips the directory, and whatever this node had changed there that the bucket
//!   does not hold is moved into that marker directory (kept, not synced) and
//!   replaced by the bucket's version. A conflict copy of this node's version
//!   there (the holder's version won) is withdrawn: kept in the marker directory,
//!   deleted for every node ([`crate::copy`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use clawboard_core::lock::Lock;

use crate::error::{Error, Failure, Result};
use crate::fence::claim_key;
pub use crate::fence::{CLAIMS_PREFIX, ClaimDoc};
pub use crate::node::Heartbeat;
use crate::node::{NODES_PREFIX, fenced_dir, remember_generation};
use crate::remote::{Body, Condition, PutOutcome, Remote};
use crate::report::now_text;
use crate::shared::SyncState;

/// How long after a takeover or a renewal the claim is read back (see `put_claim`).
pub(crate) const READ_BACK: std::time::Duration = std::time::Duration::from_millis(250);

/// Who holds a claim after an attempt to take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResult {
    Won { generation: u64 },
    Lost { owner: String },
}

/// The cluster job: this node's heartbeat, the others', and task claims.
pub struct Cluster<R: Remote> {
    sync: Arc<SyncState<R>>,
    /// Heartbeats last read, by node: (ETag, heartbeat).
    beats: Lock<HashMap<String, (String, Heartbeat)>>,
    /// ETag of the last heartbeat this process wrote.
    own_beat: Lock<Option<String>>,
    /// One heartbeat write at a time (each is conditional on the one before).
    beating: tokio::sync::Mutex<()>,
}

impl<R: Remote> Cluster<R> {
    pub fn new(sync: Arc<SyncState<R>>) -> Cluster<R> {
        sync.lease.enforce();
        Cluster {
            sync,
            beats: Lock::new(HashMap::new()),
            own_beat: Lock::new(None),
            beating: tokio::sync::Mutex::new(()),
        }
    }

    pub fn sync(&self) -> &SyncState<R> {
        &self.sync
    }

    /// Writes this node's heartbeat: `If-Match` on the ETag of this process's last
    /// beat, so a beat written by anyone else under this node id meanwhile is seen.
    /// Returns false when that happened (two machines share this node id). A beat
    /// that lands extends this node's [lease](crate::lease).
    pub async fn heartbeat(&self, mut beat: Heartbeat) -> Result<bool> {
        let _one = self.beating.lock().await;
        let started = crate::lease::Moment::now();
        beat.node = self.sync.node.clone();
        beat.lease_ms = Some(u64::try_from(self.sync.settings().lease.as_millis()).unwrap_or(u64::MAX));
        beat.seen_at = now_text();
        let body = Bytes::from(serde_json::to_vec_pretty(&beat).map_err(|e| Error::io("heartbeat", e.into()))?);
        let key = format!("{NODES_PREFIX}{}.json", self.sync.node);
        let meta = crate::remote::hashed(&body);
        let previous = self.own_beat.lock().clone();
        let condition = previous.map_or(Condition::None, Condition::Matches);
        self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
        let (stored, alone) =
            match self.sync.retry(|| self.sync.remote.put(&key, Body::Bytes(body.clone()), &meta, &condition)).await {
                Ok(stored) => (stored, true),
                Err(e) if e.failure == Failure::PreconditionFailed => {
                    // Ours after all (a retried request that had landed), or another writer.
                    let ours = self.sync.get_checked(&key).await?.is_some_and(|(b, _)| b == body);
                    self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
                    let stored = self
                        .sync
                        .retry(|| self.sync.remote.put(&key, Body::Bytes(body.clone()), &meta, &Condition::None))
                        .await?;
                    (stored, ours)
                }
                Err(e) => return Err(e.into()),
            };
        // This node's own beat is not read back.
        if let PutOutcome::Stored { etag: Some(etag) } = stored {
            *self.own_beat.lock() = Some(etag.clone());
            self.beats.lock().insert(self.sync.node.clone(), (etag, beat));
        }
        self.sync.lease.landed(started);
        Ok(alone)
    }

    /// Every node's last heartbeat, with its ETag. One listing of `_nodes/`; a
    /// heartbeat is read only when its ETag changed since this process last read it.
    pub async fn heartbeats(&self) -> Result<Vec<(Heartbeat, String)>> {
        self.sync.counts.list.fetch_add(1, Ordering::Relaxed);
        let listed = self.sync.retry(|| crate::remote::list_all(&self.sync.remote, NODES_PREFIX)).await?;
        let mut out = Vec::new();
        for o in listed {
            let Some(node) = o.key.strip_prefix(NODES_PREFIX).and_then(|k| k.strip_suffix(".json")) else { continue };
            let cached = self.beats.lock().get(node).cloned();
            // This node's own beat is the one it last wrote (another writer of the same
            // id is caught by the next beat's If-Match); others are read again when their
            // listed ETag changed, or on every listing that carries no ETag.
            if let Some((etag, beat)) = &cached
                && (node == self.sync.node || o.etag.as_ref() == Some(etag))
            {
                out.push((beat.clone(), etag.clone()));
                continue;
            }
            let Some((bytes, info)) = self.sync.get_checked(&o.key).await? else { continue };
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
        crate::fence::claim_of(&self.sync, task).await
    }

    /// Writes `doc` under `condition`: true when it was stored (and this node holds it).
    ///
    /// A write over an existing claim (`If-Match`: a takeover, a renewal) is read
    /// back [`READ_BACK`] after it succeeded: some S3-compatible servers check a
    /// condition and then write without a lock (s3s-fs 0.14), so two conditional
    /// writes racing can both succeed, the later one staying. A claim read back as
    /// another's was not won.
    async fn put_claim(&self, doc: &ClaimDoc, condition: Condition) -> Result<bool> {
        let key = claim_key(&doc.task_id)?;
        let body = Bytes::from(serde_json::to_vec_pretty(doc).map_err(|e| Error::io(&key, e.into()))?);
        self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
        let meta = crate::remote::hashed(&body);
        let read_back = matches!(condition, Condition::Matches(_));
        match self.sync.retry(|| self.sync.remote.put(&key, Body::Bytes(body.clone()), &meta, &condition)).await {
            Ok(PutOutcome::Stored { .. }) => {
                if read_back {
                    tokio::time::sleep(READ_BACK).await;
                    if !self.claim_of(&doc.task_id).await?.is_some_and(|(d, _)| d == *doc) {
                        tracing::warn!(
                            task = doc.task_id,
                            "a claim written over another was replaced at once: not won"
                        );
                        return Ok(false);
                    }
                }
                remember_generation(&self.sync.root, &doc.task_id, doc.generation)?;
                Ok(true)
            }
            Ok(PutOutcome::BodyChanged) => Ok(false),
            Err(e) if e.failure == Failure::PreconditionFailed => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Claims `task` for this node: true when this node holds it (now or already).
    pub async fn claim(&self, task: &str) -> Result<ClaimResult> {
        let epoch = self.sync.lease.epoch();
        let doc = ClaimDoc {
            task_id: task.to_owned(),
            node: self.sync.node.clone(),
            generation: 1,
            claimed_at: now_text(),
            taken_from: None,
            renewed_at: None,
        };
        if self.put_claim(&doc, Condition::Absent).await? {
            self.sync.lease.confirm(task, epoch);
            return Ok(ClaimResult::Won { generation: 1 });
        }
        // There already: another node's, or this node's from before (renewed).
        Box::pin(self.renew(task)).await
    }

    /// Renews this node's claim on `task` (`If-Match` on its ETag, same generation),
    /// confirming it in the lease's current epoch: after a restart or a lapse of the
    /// heartbeats, before the task goes on. A taker whose conditional write comes
    /// first makes the renewal fail (`Lost`); one that comes after fails itself,
    /// or finds the new heartbeat when it reads it again (see [`Cluster::take_over`]).
    pub async fn renew(&self, task: &str) -> Result<ClaimResult> {
        let epoch = self.sync.lease.epoch();
        let Some((doc, etag)) = self.claim_of(task).await? else { return Box::pin(self.claim(task)).await };
        if doc.node != self.sync.node {
            self.sync.lease.forget(task);
            return Ok(ClaimResult::Lost { owner: doc.node });
        }
        let renewed = ClaimDoc { renewed_at: Some(now_text()), ..doc };
        if self.put_claim(&renewed, Condition::Matches(etag)).await? {
            self.sync.lease.confirm(task, epoch);
            return Ok(ClaimResult::Won { generation: renewed.generation });
        }
        // Changed meanwhile: taken over, or this renewal's own retried request landed.
        match self.claim_of(task).await? {
            Some((d, _)) if d == renewed => {
                self.sync.lease.confirm(task, epoch);
                Ok(ClaimResult::Won { generation: d.generation })
            }
            Some((d, _)) if d.node != self.sync.node => {
                self.sync.lease.forget(task);
                Ok(ClaimResult::Lost { owner: d.node })
            }
            // Renewed by another process under this node id, or gone: tried again later.
            _ => Err(Error::config("claim", format!("{task}: the claim changed while it was renewed"))),
        }
    }

    /// Claims blackboard entry `id` for this node (a lane handles it once over all
    /// nodes): `_claims/_entries/{id}`, which no task claim can be (a task id never
    /// holds a `/`). Entries are never taken over: a node that dies holding one
    /// leaves it `in_progress` for a person to cancel.
    pub async fn claim_entry(&self, id: &str) -> Result<ClaimResult> {
        clawboard_core::check_id(id).map_err(|e| Error::config("entry id", format!("{id:?}: {e}")))?;
        let key = format!("{}_entries/{id}", crate::fence::CLAIMS_PREFIX);
        let doc = ClaimDoc {
            task_id: format!("_entries/{id}"),
            node: self.sync.node.clone(),
            generation: 1,
            claimed_at: now_text(),
            taken_from: None,
            renewed_at: None,
        };
        let body = Bytes::from(serde_json::to_vec_pretty(&doc).map_err(|e| Error::io(&key, e.into()))?);
        self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
        let meta = crate::remote::hashed(&body);
        let put =
            self.sync.retry(|| self.sync.remote.put(&key, Body::Bytes(body.clone()), &meta, &Condition::Absent)).await;
        match put {
            Ok(PutOutcome::Stored { .. }) => return Ok(ClaimResult::Won { generation: 1 }),
            Ok(PutOutcome::BodyChanged) => {}
            Err(e) if e.failure == Failure::PreconditionFailed => {}
            Err(e) => return Err(e.into()),
        }
        let got = self.sync.get_checked(&key).await?;
        let owner = match got {
            Some((bytes, _)) => {
                serde_json::from_slice::<ClaimDoc>(&bytes)
                    .map_err(|e| Error::io(&key, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?
                    .node
            }
            None => {
                return Err(Error::config("entry claim", format!("{key} was refused as existing but cannot be read")));
            }
        };
        Ok(if owner == self.sync.node { ClaimResult::Won { generation: 1 } } else { ClaimResult::Lost { owner } })
    }

    /// Who holds `task` now, from this node's point of view.
    pub async fn check_claim(&self, task: &str) -> Result<ClaimResult> {
        match self.claim_of(task).await? {
            Some((doc, _)) if doc.node == self.sync.node => {
                remember_generation(&self.sync.root, task, doc.generation)?;
                Ok(ClaimResult::Won { generation: doc.generation })
            }
            Some((doc, _)) => {
                self.sync.lease.forget(task);
                Ok(ClaimResult::Lost { owner: doc.node })
            }
            // Never claimed (e.g. claimed only locally before sync was on): claim it now.
            None => Box::pin(self.claim(task)).await,
        }
    }

    /// This node holds `task` (again): its fence marker, if any, is archived to
    /// `.clawboard/fenced-archive/{task}-{time}/` (what it kept stays there) and its
    /// directory is pushed again.
    pub fn unfence(&self, task: &str) -> Result<()> {
        let marker = fenced_dir(&self.sync.root).join(task);
        if !marker.is_dir() {
            return Ok(());
        }
        let archive = self.sync.root.join(".clawboard/fenced-archive");
        std::fs::create_dir_all(&archive).map_err(|e| Error::io(&archive, e))?;
        let dest = archive.join(format!("{task}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ")));
        std::fs::rename(&marker, &dest).map_err(|e| Error::io(&marker, e))?;
        tracing::info!(task, kept = %dest.display(), "this node holds the task again: unfenced");
        Ok(())
    }

    /// Takes `task` over from `from`, whose heartbeat object was found unchanged
    /// (ETag `stale_beat`) for the lease: `If-Match` on the claim's ETag, so one taker
    /// wins. Between reading the claim and writing it, `from`'s heartbeat is read
    /// again: if it changed, `from` is back (it renews its claims before going on)
    /// and nothing is taken. `None` when the claim is not `from`'s anymore or `from` is back.
    pub async fn take_over(&self, task: &str, from: &str, stale_beat: &str) -> Result<Option<ClaimResult>> {
        let epoch = self.sync.lease.epoch();
        let Some((doc, etag)) = self.claim_of(task).await? else { return Ok(None) };
        if doc.node != from {
            return Ok(None);
        }
        let key = format!("{NODES_PREFIX}{from}.json");
        self.sync.counts.get.fetch_add(1, Ordering::Relaxed);
        let beat = self.sync.retry(|| self.sync.remote.get(&key)).await?;
        if beat.is_none_or(|(_, info)| info.etag.as_deref() != Some(stale_beat)) {
            tracing::info!(task, from, "not taken over: the node's heartbeat changed (it is back)");
            return Ok(None);
        }
        let next = ClaimDoc {
            task_id: task.to_owned(),
            node: self.sync.node.clone(),
            generation: doc.generation + 1,
            claimed_at: now_text(),
            taken_from: Some(from.to_owned()),
            renewed_at: None,
        };
        if self.put_claim(&next, Condition::Matches(etag)).await? {
            self.sync.lease.confirm(task, epoch);
            return Ok(Some(ClaimResult::Won { generation: next.generation }));
        }
        // A retried request that had landed finds the claim already ours.
        match self.claim_of(task).await? {
            Some((d, _)) if d.node == self.sync.node => {
                remember_generation(&self.sync.root, task, d.generation)?;
                self.sync.lease.confirm(task, epoch);
                Ok(Some(ClaimResult::Won { generation: d.generation }))
            }
            Some((d, _)) => Ok(Some(ClaimResult::Lost { owner: d.node })),
            None => Ok(None),
        }
    }

    /// This node lost `task`: never push its directory again, and put back the
    /// bucket's version of every file this node changed there (this node's versions
    /// are kept under `.clawboard/fenced/{task}/`); conflict copies of this node's
    /// versions there are withdrawn ([`crate::copy`]). Returns how many files moved.
    pub async fn fence(&self, task: &str) -> Result<usize> {
        self.sync.lease.forget(task);
        let _guards = self.sync.exclusive().await?;
        self.sync.load_state()?;
        let moved = crate::fence::fence_locked(&self.sync, task).await?;
        // The delete of a withdrawn conflict copy goes into the change log at once
        // (or with the next push or pull, which flush the outbox first).
        if let Err(e) = self.sync.flush_log().await {
            tracing::warn!(task, "the change log is written with the next push or pull: {e}");
        }
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::remote::META_HASH;
    use crate::testing::{Flaky, node};

    /// Claims and heartbeats are written with their hash, so a read that pairs one
    /// write's bytes with the next one's ETag (a server that reads an object beside
    /// its write, as s3s-fs may) is refused and read again: a taker never writes
    /// `If-Match` over a claim it read as another node's.
    #[tokio::test]
    async fn a_claim_read_torn_between_two_writes_is_refused_and_read_again() {
        let d = tempfile::tempdir().unwrap();
        let flaky = Flaky { key: "_claims/t1".into(), ..Flaky::new(&d.path().join("bucket")) };
        let a = node(flaky.clone(), &d.path().join("a"), "a");
        assert!(a.cluster.heartbeat(Heartbeat::default()).await.unwrap());
        assert!(matches!(a.cluster.claim("t1").await.unwrap(), ClaimResult::Won { generation: 1 }));
        for key in ["_claims/t1", "_nodes/a.json"] {
            let (bytes, info) = flaky.inner.get(key).await.unwrap().unwrap();
            assert_eq!(info.metadata.get(META_HASH), Some(&blake3::hash(&bytes).to_hex().to_string()), "{key}");
        }
        let before = ClaimDoc { node: "b".into(), ..a.cluster.claim_of("t1").await.unwrap().unwrap().0 };
        *flaky.torn.lock().unwrap() = Some(Bytes::from(serde_json::to_vec_pretty(&before).unwrap()));
        // The torn read is refused; the claim is read again, whole.
        assert_eq!(a.cluster.claim_of("t1").await.unwrap().unwrap().0.node, "a");
        assert!(flaky.torn.lock().unwrap().is_none(), "the torn bytes were read");
    }

    /// Two writes interleaved for good (s3s-fs stores data and metadata apart):
    /// the bytes of one claim under the other's hash, on every read. The claim is
    /// written again whole, as the node its bytes name, so the task is not stuck.
    #[tokio::test]
    async fn a_claim_torn_for_good_is_written_again_whole_as_its_bytes_say() {
        let d = tempfile::tempdir().unwrap();
        let flaky = Flaky::new(&d.path().join("bucket"));
        let a = node(flaky.clone(), &d.path().join("a"), "a");
        assert!(a.cluster.heartbeat(Heartbeat::default()).await.unwrap());
        assert!(matches!(a.cluster.claim("t1").await.unwrap(), ClaimResult::Won { generation: 1 }));
        let mine = a.cluster.claim_of("t1").await.unwrap().unwrap().0;
        let theirs = serde_json::to_vec_pretty(&ClaimDoc { node: "b".into(), ..mine.clone() }).unwrap();
        let ours = serde_json::to_vec_pretty(&mine).unwrap();
        let torn_meta = crate::remote::hashed(&ours);
        flaky
            .inner
            .put("_claims/t1", Body::Bytes(Bytes::from(theirs.clone())), &torn_meta, &Condition::None)
            .await
            .unwrap();
        let (doc, _) = a.cluster.claim_of("t1").await.unwrap().unwrap();
        assert_eq!(doc.node, "b", "the bytes name the holder");
        let (bytes, info) = flaky.inner.get("_claims/t1").await.unwrap().unwrap();
        assert_eq!(bytes.as_ref(), theirs.as_slice());
        assert_eq!(info.metadata.get(META_HASH), Some(&blake3::hash(&bytes).to_hex().to_string()), "whole again");
        assert!(matches!(a.cluster.renew("t1").await.unwrap(), ClaimResult::Lost { .. }));
    }
}
