//! One file's upload, and the record of deletes: the part of a push that talks
//! to the bucket per path.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use clawboard_core::index::Stamp;

use super::{Done, Push};
use crate::error::{Error, Failure, RemoteError, Result};
use crate::remote::{Body, Condition, META_MTIME, META_VV, ObjectInfo, PutOutcome, Remote};
use crate::shared::log_entry;
use crate::state::Pushed;
use crate::version::Vv;

/// Uploads of one file that keeps changing before push leaves it for the next run.
const CHANGING_TRIES: usize = 5;

/// What a create that found an object already at its path comes to.
enum Existing {
    /// Put (or found the same bytes there): record this outcome.
    Put(PutOutcome),
    /// Nothing more to do for the path now.
    Done(Done),
    /// The object was this node's own unrecorded write, adopted: upload again.
    Again,
}

/// Reads a file for upload: the bytes (small files) or a file body (large ones),
/// its BLAKE3 hash, and its stamp before reading. `None` when it is gone or not a file.
/// Only a regular file reached through real directories is read: never through a
/// symbolic link, never a FIFO.
fn read_for_upload(root: &Path, rel: &str, threshold: u64) -> std::io::Result<Option<(Body, String, Stamp)>> {
    let abs = root.join(rel);
    let abs = abs.as_path();
    let mut f = match clawboard_core::store::open_plain(root, rel) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    let stamp = Stamp::of(&meta);
    if meta.len() <= threshold {
        let mut buf = Vec::with_capacity(meta.len() as usize);
        f.read_to_end(&mut buf)?;
        let hash = blake3::hash(&buf).to_hex().to_string();
        Ok(Some((Body::Bytes(Bytes::from(buf)), hash, stamp)))
    } else {
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(&mut f)?;
        let hash = hasher.finalize().to_hex().to_string();
        Ok(Some((Body::File { path: abs.to_owned(), size: meta.len(), blake3: hash.clone() }, hash, stamp)))
    }
}

impl<R: Remote> Push<R> {
    /// Uploads one file until the bucket holds bytes that match the recorded hash.
    pub(super) async fn upload(&self, path: &str) -> Result<Done> {
        let abs = self.sync.root.join(path);
        for _ in 0..CHANGING_TRIES {
            let threshold = self.sync.settings.multipart_threshold;
            let (root, rel) = (self.sync.root.clone(), path.to_owned());
            let read = match tokio::task::spawn_blocking(move || read_for_upload(&root, &rel, threshold))
                .await
                .map_err(|e| Error::io(&abs, std::io::Error::other(e)))?
            {
                Ok(r) => r,
                // Unreadable (permissions, an I/O error): one file must not stop the push.
                Err(e) => return Ok(Done::Skipped(e.to_string())),
            };
            let Some((body, hash, stamp)) = read else { return self.gone(path).await };
            let base = self.sync.with_state(|s| Ok(s.get(path).cloned()))?;
            if let Some(b) = base.as_ref().and_then(Pushed::live)
                && b.hash == hash
            {
                let record = Pushed { size: stamp.size, mtime_ns: stamp.mtime_ns, ..b.clone() };
                self.sync.with_state(|s| s.record(path, Some(record)))?;
                return Ok(Done::Unchanged);
            }
            // A new version: its history is the base's plus this node's new stamp.
            let hlc = self.sync.clock.tick_at(u64::try_from(stamp.mtime_ns / 1_000_000).unwrap_or(0));
            let mut vv = base.as_ref().map(|b| b.vv.clone()).unwrap_or_default();
            vv.insert(self.sync.node.clone(), hlc);
            let mut record = Pushed {
                vv,
                hlc,
                author: self.sync.node.clone(),
                ..Pushed::file(hash.clone(), stamp.size, stamp.mtime_ns)
            };
            let size = body.len();
            // A path this node never shared is created only if the bucket has none: an
            // existing object is another node's version, which pull resolves first (the
            // bucket's version wins against a file that was never synced).
            let condition = match (&base, &body) {
                (Some(_), _) => Condition::None,
                (None, Body::Bytes(_)) => Condition::Absent,
                (None, Body::File { .. }) => {
                    self.sync.counts.head.fetch_add(1, Ordering::Relaxed);
                    match self.sync.retry(|| self.sync.remote.head(path)).await? {
                        Some(info) if self.adopt(path, &info)? => continue,
                        Some(info) if self.left_by_previous_holder(path, &info).await? => {
                            self.over_unlogged(path, &info, &mut record);
                            Condition::None
                        }
                        Some(_) => return Ok(Done::Deferred),
                        None => Condition::None,
                    }
                }
            };
            self.inflight.note(path, record.hlc)?;
            let meta = self.sync.metadata(&record);
            let outcome = match self
                .sync
                .retry(|| {
                    self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
                    self.sync.remote.put(path, body.clone(), &meta, &condition)
                })
                .await
            {
                Ok(o) => o,
                Err(e) if e.failure == Failure::PreconditionFailed => {
                    match self.over_existing(path, &body, &mut record, (&hash, stamp)).await? {
                        Existing::Put(o) => o,
                        Existing::Done(done) => return Ok(done),
                        Existing::Again => continue,
                    }
                }
                Err(e) => return Err(e.into()),
            };
            if outcome == PutOutcome::BodyChanged {
                tracing::debug!(path, "changed while being uploaded; uploading again");
                continue;
            }
            // The object now holds exactly the bytes hashed (read before the upload,
            // or checked while streaming), so the record is true even if the file
            // changed since; a change means one more upload, right now.
            if let PutOutcome::Stored { etag: Some(e) } = outcome {
                record.etag = e;
            }
            self.sync.outbox.append(&[log_entry(path, &record)])?;
            self.sync.with_state(|s| s.record(path, Some(record)))?;
            self.inflight.forget(path);
            self.sync.uploaded_total.fetch_add(1, Ordering::Relaxed);
            self.progress.bytes.fetch_add(size, Ordering::Relaxed);
            let now = std::fs::symlink_metadata(&abs).ok().map(|m| Stamp::of(&m));
            if now.is_none_or(|n| n == stamp) {
                return Ok(Done::Uploaded(size));
            }
            tracing::debug!(path, "changed during the upload; uploading again");
        }
        Err(Error::Remote(RemoteError::new(
            Failure::Retryable,
            "PUT",
            path,
            format!("kept changing while being uploaded ({CHANGING_TRIES} tries); left for the next push"),
        )))
    }

    /// `path` was planned but is gone (or no regular file) now: its delete is (or
    /// will be) in the journal. Its object is deleted here if this node had pushed it.
    async fn gone(&self, path: &str) -> Result<Done> {
        tracing::debug!(path, "not uploaded: not a regular file in the tree (any more)");
        let mut pushed = self.sync.with_state(|s| Ok(s.get(path).and_then(Pushed::live).is_some()))?;
        if !pushed && self.inflight.has(path) {
            // A PUT of it may have landed, unrecorded, before the file went.
            self.sync.counts.head.fetch_add(1, Ordering::Relaxed);
            match self.sync.retry(|| self.sync.remote.head(path)).await? {
                Some(info) => pushed = self.adopt(path, &info)?,
                None => self.inflight.forget(path),
            }
        }
        if !pushed {
            return Ok(Done::Unchanged);
        }
        self.sync
            .retry(|| {
                self.sync.counts.delete.fetch_add(1, Ordering::Relaxed);
                self.sync.remote.delete(path)
            })
            .await?;
        self.record_deletes(&[&path.to_owned()])?;
        Ok(Done::Deleted)
    }

    /// A create of `path` found an object there: our own create whose response
    /// was lost (a retry finds it), another node's version (pull resolves it), or
    /// an object without a clawboard version (a server killed mid-write, another
    /// tool): replaced. `hash` and `stamp` are those of the bytes in `body`.
    async fn over_existing(
        &self,
        path: &str,
        body: &Body,
        record: &mut Pushed,
        (hash, stamp): (&str, Stamp),
    ) -> Result<Existing> {
        self.sync.counts.head.fetch_add(1, Ordering::Relaxed);
        let Some(info) = self.sync.retry(|| self.sync.remote.head(path)).await? else {
            return Ok(Existing::Put(self.put_over(path, body, record).await?));
        };
        if info.blake3() == Some(hash) {
            return Ok(match crate::pull::stamp_of(&info) {
                // Another node's version of the very same bytes (two fresh trees, two
                // nodes that made one file alike): it is this file's version too.
                // Recording one of our own instead would leave two histories of one
                // file, neither holding the other, and the next change on either side
                // a false conflict.
                Some((author, vv, hlc)) if author != self.sync.node => {
                    self.sync.clock.observe(hlc);
                    let etag = info.etag.clone().unwrap_or_default();
                    let file = Pushed::file(hash.to_owned(), stamp.size, stamp.mtime_ns);
                    let theirs = Pushed { vv, hlc, author, etag, ..file };
                    self.sync.with_state(|s| s.record(path, Some(theirs)))?;
                    self.inflight.forget(path);
                    Existing::Done(Done::Unchanged)
                }
                _ => Existing::Put(PutOutcome::Stored { etag: info.etag }),
            });
        }
        if self.adopt(path, &info)? {
            return Ok(Existing::Again);
        }
        if self.left_by_previous_holder(path, &info).await? {
            self.over_unlogged(path, &info, record);
        } else if info.metadata.contains_key(META_VV) {
            return Ok(Existing::Done(Done::Deferred));
        }
        Ok(Existing::Put(self.put_over(path, body, record).await?))
    }

    /// Puts `body` at `path` whatever the bucket holds there.
    async fn put_over(&self, path: &str, body: &Body, record: &Pushed) -> Result<PutOutcome> {
        let meta = self.sync.metadata(record);
        Ok(self
            .sync
            .retry(|| {
                self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
                self.sync.remote.put(path, body.clone(), &meta, &Condition::None)
            })
            .await?)
    }

    /// True when the bucket's object at `path` (a file this node never shared) was
    /// put by the node this node took the path's task over from, while this node
    /// drives the task under its live lease (see `crate::lease`): the object that
    /// holder sent just before it died and never recorded, which no change log
    /// names, so no pull will ever bring it. (That node keeps its bytes under its
    /// `.clawboard/fenced/` when it comes back.) Any other node's object is left to
    /// pull, where the bucket's version wins.
    async fn left_by_previous_holder(&self, path: &str, info: &ObjectInfo) -> Result<bool> {
        let lease = &self.sync.lease;
        let Some(task) = crate::shared::task_of(path).filter(|t| lease.enforced() && lease.holds(t)) else {
            return Ok(false);
        };
        let Some((author, _, _)) = crate::pull::stamp_of(info) else { return Ok(false) };
        let claim = crate::fence::claim_of(&self.sync, task).await?;
        Ok(claim
            .is_some_and(|(doc, _)| doc.node == self.sync.node && doc.taken_from.as_deref() == Some(author.as_str())))
    }

    /// This node's version of `path` goes over the object the task's previous
    /// holder left (see [`Self::left_by_previous_holder`]) as a newer version, its
    /// history holding that object's.
    fn over_unlogged(&self, path: &str, info: &ObjectInfo, record: &mut Pushed) {
        tracing::info!(path, "replacing a version the task's previous holder left unlogged in the bucket");
        if let Some((_, theirs, hlc)) = crate::pull::stamp_of(info) {
            self.sync.clock.observe(hlc);
            crate::version::merge(&mut record.vv, &theirs);
        }
    }

    /// Takes an object this node wrote but never recorded (the daemon stopped or
    /// was killed mid-request, or the reply was lost: see `inflight`) as the
    /// path's pushed version, so that the file, changed since, goes over it as a
    /// newer version, or, gone since, is deleted. Without this, push would take it
    /// for another node's and leave it to pull, which never resolves this node's
    /// own version (and a deleted file's object would stay in the bucket). False for
    /// anything else: another node's object, or one of this node's id that this
    /// tree never sent (a node set up again with the same id must not overwrite
    /// the bucket with its fresh files). Then the path's notes are dropped: the
    /// bucket holds one version of a path, and it is none of those noted.
    fn adopt(&self, path: &str, info: &ObjectInfo) -> Result<bool> {
        let ours = crate::pull::stamp_of(info)
            .filter(|(author, _, hlc)| *author == self.sync.node && self.inflight.sent(path, *hlc));
        let Some((author, mut vv, hlc)) = ours else {
            self.inflight.forget(path);
            return Ok(false);
        };
        // The versions made from here on must be newer than this one, whatever
        // the clock saved when that push ended (it may not have saved).
        self.sync.clock.observe(hlc);
        tracing::info!(
            path,
            hlc,
            "the bucket holds a version this node sent but never recorded; taking it as the pushed one"
        );
        // A tombstone's history is kept (the object may be older than the delete it records).
        if let Some(known) = self.sync.with_state(|s| Ok(s.get(path).map(|r| r.vv.clone())))? {
            crate::version::merge(&mut vv, &known);
        }
        let record = Pushed {
            hash: info.blake3().unwrap_or_default().to_owned(),
            size: info.size,
            mtime_ns: info.metadata.get(META_MTIME).and_then(|m| m.parse().ok()).unwrap_or(0),
            vv,
            hlc,
            author,
            etag: info.etag.clone().unwrap_or_default(),
            deleted: false,
        };
        self.sync.with_state(|s| s.record(path, Some(record)))?;
        self.inflight.forget(path);
        Ok(true)
    }

    /// Records deletes this node made: tombstones with a new version, in the outbox.
    pub(super) fn record_deletes(&self, paths: &[&String]) -> Result<()> {
        let mut entries = Vec::new();
        self.sync.with_state(|s| {
            for path in paths {
                let hlc = self.sync.clock.now();
                let mut vv: Vv = s.get(path).map(|b| b.vv.clone()).unwrap_or_default();
                vv.insert(self.sync.node.clone(), hlc);
                let record = Pushed { vv, hlc, author: self.sync.node.clone(), deleted: true, ..Pushed::default() };
                entries.push(log_entry(path, &record));
                s.record(path, Some(record))?;
                self.inflight.forget(path);
            }
            Ok(())
        })?;
        self.sync.deleted_total.fetch_add(paths.len() as u64, Ordering::Relaxed);
        self.sync.outbox.append(&entries)
    }
}
