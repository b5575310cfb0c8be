//! Push: the journal's changes since the push cursor, to the remote.
//!
//! For each path changed since the cursor (the last change of each path wins), a
//! file whose size and mtime match what was pushed is skipped unread; otherwise it
//! is hashed (BLAKE3) and uploaded unless the pushed hash is the same. A deleted
//! file becomes a (batch) delete. Requests run with bounded concurrency and retry
//! with exponential backoff and full jitter. Every success is recorded in the push
//! state at once; the cursor moves only after a whole batch succeeded and the state
//! is fsync'd, so a crash or an outage resumes exactly where it stopped, and what
//! was already pushed is skipped by its record, not sent again.
//!
//! Push also deletes this node's change-log segments older than
//! `sync.log_retention` ([`Push::expire_log`]): it is what writes them.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clawboard_core::index::Stamp;
use clawboard_core::journal::{self, ChangeKind, Cursor, Origin};
use clawboard_core::lock::Lock;
use futures_util::StreamExt;

use crate::error::{Error, Failure, Result};
use crate::remote::Remote;
use crate::report::{PushReport, now_text};
use crate::shared::{SyncState, sync_dir, task_of};
use crate::state::{PushState, Pushed};

mod inflight;
#[cfg(test)]
mod lost_reply_tests;
mod pending;
mod upload;

pub use crate::shared::read_status;
pub use pending::{Pending, pending, unpushed_files};

/// Journal entries read per batch; the cursor moves once per batch.
const BATCH: usize = 20_000;

/// Live progress of the current push, for a progress bar.
#[derive(Debug, Default)]
pub struct Progress {
    pub planned: AtomicU64,
    pub done: AtomicU64,
    pub bytes: AtomicU64,
}

/// The push's journal cursor, in `.clawboard/cursors/`.
pub const PUSH_CURSOR: &str = "push";

pub fn push_cursor(root: &Path) -> Cursor {
    Cursor::new(&root.join(clawboard_core::layout::CURSORS), PUSH_CURSOR)
}

enum Mode {
    Incremental,
    Full,
    Repair(Vec<String>),
}

/// One path's work.
enum Job {
    Upload(String),
    Delete(String),
}

enum Done {
    Uploaded(u64),
    /// Another node's object is already there: left for pull to resolve.
    Deferred,
    Deleted,
    Unchanged,
    Skipped(String),
}

/// The push job: this node's changes, from the journal to the bucket.
pub struct Push<R: Remote> {
    sync: Arc<SyncState<R>>,
    /// Finished tasks whose claim this process found still this node's.
    verified: Lock<HashSet<String>>,
    /// PUTs sent and not yet recorded (this process's and those a stop cut off).
    inflight: inflight::InFlight,
    pub progress: Arc<Progress>,
}

impl<R: Remote> Push<R> {
    pub fn new(sync: Arc<SyncState<R>>) -> Push<R> {
        let inflight = inflight::InFlight::new(&sync_dir(&sync.root));
        Push { sync, verified: Lock::new(HashSet::new()), inflight, progress: Arc::new(Progress::default()) }
    }

    pub fn sync(&self) -> &SyncState<R> {
        &self.sync
    }

    /// Pushes what the journal recorded since the push cursor (a full push when the
    /// journal no longer covers the cursor).
    pub async fn push(&self) -> Result<PushReport> {
        self.locked(Mode::Incremental).await
    }

    /// Pushes every file of the tree whose pushed record does not match (the first
    /// push of an existing tree; resumable, since each upload is recorded as it lands).
    pub async fn full(&self) -> Result<PushReport> {
        self.locked(Mode::Full).await
    }

    /// Uploads `paths` that exist in the tree and deletes the others from the bucket,
    /// whatever the push state says (for `verify --fix`).
    pub async fn repair(&self, paths: Vec<String>) -> Result<PushReport> {
        self.locked(Mode::Repair(paths)).await
    }

    /// Deletes this node's change-log segments older than `sync.log_retention`.
    pub async fn expire_log(&self) -> Result<usize> {
        let keep_after = chrono::Utc::now()
            - chrono::Duration::from_std(self.sync.settings.log_retention).unwrap_or(chrono::Duration::days(7));
        crate::log::expire(&self.sync.remote, &self.sync.node, keep_after).await
    }

    async fn locked(&self, mode: Mode) -> Result<PushReport> {
        let _guards = self.sync.exclusive().await?;
        self.sync.load_state()?;
        self.inflight.load()?;
        // What an interrupted run left in the outbox goes out before anything new is appended.
        if let Err(e) = self.sync.flush_log().await {
            let e = Err(e.at(&self.sync.remote.describe()));
            self.write_status(&e)?;
            return e;
        }
        let started = Instant::now();
        self.progress.planned.store(0, Ordering::Relaxed);
        self.progress.done.store(0, Ordering::Relaxed);
        self.progress.bytes.store(0, Ordering::Relaxed);
        let result = match mode {
            Mode::Incremental => self.incremental().await,
            Mode::Full => self.full_locked().await,
            Mode::Repair(paths) => self.repair_locked(paths).await,
        };
        let result = result
            .map(|mut r| {
                r.elapsed_ms = started.elapsed().as_millis() as u64;
                r
            })
            .map_err(|e| e.at(&self.sync.remote.describe()));
        // What stays unrecorded (a failed upload's PUT may have landed) is kept for the next push.
        let result = match self.inflight.save() {
            Ok(()) => result,
            Err(e) if result.is_ok() => Err(e),
            Err(e) => {
                tracing::warn!("{e}");
                result
            }
        };
        self.write_status(&result)?;
        result
    }

    fn write_status(&self, result: &Result<PushReport>) -> Result<()> {
        self.sync.update_status(|status| match result {
            Ok(r) => {
                status.last_push_at = Some(now_text());
                status.last_push = Some(r.clone());
                status.last_error = None;
                status.last_error_at = None;
            }
            Err(e) => {
                status.last_error = Some(e.to_string());
                status.last_error_at = Some(now_text());
            }
        })
    }

    async fn incremental(&self) -> Result<PushReport> {
        let cursor = push_cursor(&self.sync.root);
        let mut at = cursor.load()?;
        let journal_dir = self.sync.root.join(clawboard_core::layout::JOURNAL);
        let mut report = PushReport { cursor: at, ..PushReport::default() };
        if crate::binding::full_pending(&sync_dir(&self.sync.root)) {
            tracing::info!(remote = %self.sync.remote.describe(), "pushing the whole tree to the new remote");
            return self.full_locked().await;
        }
        if let Some((oldest, _)) = journal::bounds(&journal_dir)?
            && oldest > at + 1
        {
            tracing::warn!(cursor = at, oldest, "the journal no longer covers the push cursor; pushing the whole tree");
            return self.full_locked().await;
        }
        loop {
            let batch = journal::read_after(&journal_dir, at, BATCH)?;
            let Some(last) = batch.last().map(|e| e.seq) else { break };
            report.entries += batch.len() as u64;
            let mut latest: BTreeMap<String, (ChangeKind, Origin)> = BTreeMap::new();
            for e in batch {
                latest.insert(e.change.path, (e.change.kind, e.change.origin));
            }
            let paths: Vec<String> = latest
                .into_iter()
                .filter(|(p, (_, origin))| {
                    *origin != Origin::Remote && !self.sync.is_excluded(p) && !self.sync.is_fenced(p)
                })
                .map(|(p, _)| p)
                .collect();
            let paths = self.drop_foreign(paths).await?;
            let t = Instant::now();
            let jobs = self.plan(paths, &mut report)?;
            tracing::debug!(jobs = jobs.len(), ms = t.elapsed().as_millis() as u64, "push: planned");
            self.run(jobs, &mut report).await?;
            tracing::debug!(ms = t.elapsed().as_millis() as u64, "push: sent");
            self.sync.with_state(PushState::sync)?;
            self.sync.flush_log().await?;
            cursor.store(last)?;
            at = last;
            report.cursor = at;
        }
        Ok(report)
    }

    async fn full_locked(&self) -> Result<PushReport> {
        let journal_dir = self.sync.root.join(clawboard_core::layout::JOURNAL);
        let cursor = push_cursor(&self.sync.root);
        // Everything journaled up to now is covered by the walk that follows.
        let upto = journal::bounds(&journal_dir)?.map_or(0, |(_, newest)| newest).max(cursor.load()?);
        let mut report = PushReport { full: true, ..PushReport::default() };
        let mut paths = self.sync.tree_files()?;
        paths.retain(|p| !self.sync.is_fenced(p));
        let present: HashSet<&String> = paths.iter().collect();
        let gone: Vec<String> = self.sync.with_state(|s| {
            Ok(s.live_paths().filter(|p| !present.contains(p) && !self.sync.is_fenced(p)).cloned().collect())
        })?;
        // And those never recorded whose PUT may have landed (see `inflight`).
        let planned: HashSet<&String> = gone.iter().collect();
        let sent: Vec<String> = self
            .inflight
            .paths()
            .into_iter()
            .filter(|p| {
                !present.contains(p) && !planned.contains(p) && !self.sync.is_excluded(p) && !self.sync.is_fenced(p)
            })
            .collect();
        paths.extend(gone);
        paths.extend(sent);
        let paths = self.drop_foreign(paths).await?;
        report.entries = paths.len() as u64;
        let jobs = self.plan(paths, &mut report)?;
        self.run(jobs, &mut report).await?;
        self.sync.with_state(PushState::sync)?;
        self.sync.flush_log().await?;
        cursor.store(upto)?;
        crate::binding::full_done(&sync_dir(&self.sync.root))?;
        report.cursor = upto;
        Ok(report)
    }

    async fn repair_locked(&self, paths: Vec<String>) -> Result<PushReport> {
        let mut report = PushReport { entries: paths.len() as u64, ..PushReport::default() };
        let mut jobs = Vec::new();
        for path in paths {
            if self.sync.is_fenced(&path) {
                // Said, so that a verify whose repair fixed less than it found tells why.
                tracing::warn!(path, "not repaired: its task is fenced (another node holds it)");
                continue;
            }
            let is_file = clawboard_core::store::plain_file(&self.sync.root, &path).is_some();
            // The bucket does not hold what the record says: forget the content, keep
            // the history (so other nodes see the repair as a newer version, not a conflict).
            self.sync.with_state(|s| match s.get(&path).cloned() {
                Some(r) => {
                    s.record(&path, Some(Pushed { hash: String::new(), size: u64::MAX, etag: String::new(), ..r }))
                }
                None => Ok(()),
            })?;
            if is_file {
                jobs.push(Job::Upload(path));
            } else {
                jobs.push(Job::Delete(path));
            }
        }
        self.progress.planned.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        self.run(jobs, &mut report).await?;
        self.sync.with_state(PushState::sync)?;
        self.sync.flush_log().await?;
        Ok(report)
    }

    /// Leaves out paths of tasks this node claimed and finished but no longer holds
    /// (another node took them over meanwhile, e.g. while this node was cut off or
    /// down): such a task is fenced instead. Tasks still active are checked by the
    /// daemon with every heartbeat; a finished task is checked once per process.
    async fn drop_foreign(&self, paths: Vec<String>) -> Result<Vec<String>> {
        let touched: std::collections::BTreeSet<&str> = paths.iter().filter_map(|p| task_of(p)).collect();
        let root = &self.sync.root;
        let lease = &self.sync.lease;
        let mut tasks = Vec::new();
        for task in touched {
            if crate::node::held_generation(root, task).is_none() || crate::node::is_fenced(root, task) {
                continue;
            }
            if root.join(clawboard_core::layout::ACTIVE).join(task).exists() {
                // An active task is pushed into only under this node's live lease on
                // it (the daemon's; see `crate::lease`): after a lapse it may have been
                // taken over, which the claim check finds before the next push.
                if lease.enforced() && !lease.holds(task) {
                    return Err(Error::Unconfirmed { task: task.to_owned() });
                }
            } else if !self.verified.lock().contains(task) {
                tasks.push(task.to_owned());
            }
        }
        let mut foreign = HashSet::new();
        for task in tasks {
            match crate::fence::claim_of(&self.sync, &task).await? {
                Some((doc, _)) if doc.node != self.sync.node => {
                    tracing::warn!(task, owner = doc.node, "another node took this task over; not pushing into it");
                    crate::fence::fence_locked(&self.sync, &task).await?;
                    foreign.insert(task);
                }
                _ => {
                    self.verified.lock().insert(task);
                }
            }
        }
        if foreign.is_empty() {
            return Ok(paths);
        }
        Ok(paths.into_iter().filter(|p| task_of(p).is_none_or(|t| !foreign.contains(t))).collect())
    }

    /// Turns changed paths into jobs, skipping (unread) files whose size and mtime
    /// match their pushed record.
    fn plan(&self, paths: Vec<String>, report: &mut PushReport) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        self.sync.with_state(|state| {
            for path in paths {
                let meta = clawboard_core::store::plain_file(&self.sync.root, &path);
                match (meta, state.get(&path).and_then(Pushed::live)) {
                    (Some(m), Some(p)) if p.size == m.len() && p.mtime_ns == Stamp::of(&m).mtime_ns => {
                        report.unchanged += 1;
                    }
                    (Some(_), _) => jobs.push(Job::Upload(path)),
                    (None, Some(_)) => jobs.push(Job::Delete(path)),
                    // Never recorded, but a PUT of it was sent: the upload finds out
                    // whether it landed, and deletes it.
                    (None, None) if self.inflight.has(&path) => jobs.push(Job::Upload(path)),
                    (None, None) => {}
                }
            }
            Ok(())
        })?;
        self.progress.planned.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        Ok(jobs)
    }

    async fn run(&self, jobs: Vec<Job>, report: &mut PushReport) -> Result<()> {
        let mut uploads = Vec::new();
        let mut deletes = Vec::new();
        for job in jobs {
            match job {
                Job::Upload(p) => uploads.push(p),
                Job::Delete(p) => deletes.push(p),
            }
        }
        let abort = AtomicBool::new(false);
        let abort = &abort;
        let results: Vec<(String, Result<Done>)> = futures_util::stream::iter(uploads)
            .map(|path| async move {
                if abort.load(Ordering::SeqCst) {
                    return (path, Ok(Done::Unchanged));
                }
                let r = match self.upload(&path).await {
                    // This key alone cannot be stored: one file must not stop the push.
                    Err(Error::Remote(e)) if e.failure == Failure::KeyRefused => {
                        self.inflight.forget(&path);
                        Ok(Done::Skipped(format!("the bucket cannot store it: {e}")))
                    }
                    r => r,
                };
                // Whatever else failed (retries spent, or a permanent error), stop starting
                // new uploads: the error is reported once, the rest waits for the next push.
                if r.is_err() {
                    abort.store(true, Ordering::SeqCst);
                }
                self.progress.done.fetch_add(1, Ordering::Relaxed);
                (path, r)
            })
            .buffer_unordered(self.sync.settings.concurrency.max(1))
            .collect()
            .await;
        let mut first_error = None;
        for (path, r) in results {
            match r {
                Ok(Done::Uploaded(n)) => {
                    report.uploaded += 1;
                    report.bytes += n;
                }
                Ok(Done::Deleted) => report.deleted += 1,
                Ok(Done::Unchanged) => report.unchanged += 1,
                Ok(Done::Deferred) => {
                    tracing::debug!(path, "the bucket has another node's version; the next pull resolves it");
                    report.deferred += 1;
                }
                Ok(Done::Skipped(why)) => {
                    tracing::warn!(path, "not pushed: {why}");
                    report.skipped.push(format!("{path}: {why}"));
                }
                Err(e) => {
                    tracing::debug!(path, "push: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for chunk in deletes.chunks(1000) {
            let keys = chunk.to_vec();
            let failed = self
                .sync
                .retry(|| {
                    self.sync.counts.delete.fetch_add(1, Ordering::Relaxed);
                    self.sync.remote.delete_many(&keys)
                })
                .await?;
            let failed_keys: HashSet<&String> = failed.iter().map(|(k, _)| k).collect();
            let done: Vec<&String> = chunk.iter().filter(|k| !failed_keys.contains(k)).collect();
            self.record_deletes(&done)?;
            report.deleted += (chunk.len() - failed.len()) as u64;
            self.progress.done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if let Some((_, e)) = failed.into_iter().next() {
                return Err(e.into());
            }
        }
        Ok(())
    }
}

/// The sync directory's marker of when the log was last expired.
pub fn expired_marker(root: &Path) -> PathBuf {
    sync_dir(root).join("log-expired-at")
}
