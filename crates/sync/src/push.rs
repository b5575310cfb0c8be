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

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use clawboard_core::index::Stamp;
use clawboard_core::journal::{self, ChangeKind, Cursor, Origin, is_ignored};
use clawboard_core::lock::Lock;
use futures_util::StreamExt;
use serde::Serialize;

use crate::error::{Error, Failure, RemoteError, Result};
use crate::log::{LogEntry, Op, Outbox};
use crate::remote::{
    Body, Condition, META_HASH, META_HLC, META_MTIME, META_NODE, META_VV, Metadata, PutOutcome, Remote,
};
use crate::report::{ProcessTotals, PullReport, PushReport, RequestCounts, StatusFile, now_text};
use crate::settings::SyncSettings;
use crate::state::{PushState, Pushed};
use crate::version::{self, Clock, Vv};

/// Journal entries read per batch; the cursor moves once per batch.
const BATCH: usize = 20_000;
/// Uploads of one file that keeps changing before push leaves it for the next run.
const CHANGING_TRIES: usize = 5;
/// Key prefixes the bucket uses for its own bookkeeping (change log, claims, nodes).
pub const RESERVED_PREFIXES: [&str; 3] = ["_log/", "_claims/", "_nodes/"];
/// Files each node keeps for itself and never syncs: `shared/node-status.json` is
/// folded from the per-node heartbeats in `_nodes/`, so it never conflicts.
/// Files dropped straight into `inbox/` are taken by the node they were dropped on
/// (and never reach another node's intake).
/// `roles/active.json` lists the role instances running on this node.
pub const LOCAL_ONLY: [&str; 2] = ["shared/node-status.json", "roles/active.json"];

/// This process's and every other process's exclusion from pushing and pulling:
/// the in-process mutex and the lock on `.clawboard/sync/push.lock`.
pub(crate) type Guards<'a> = (tokio::sync::MutexGuard<'a, ()>, File);

/// Requests sent, by operation.
#[derive(Debug, Default)]
pub struct Counts {
    pub put: AtomicU64,
    pub get: AtomicU64,
    pub head: AtomicU64,
    pub list: AtomicU64,
    pub delete: AtomicU64,
}

impl Counts {
    pub fn snapshot(&self) -> RequestCounts {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            put: n(&self.put),
            get: n(&self.get),
            head: n(&self.head),
            list: n(&self.list),
            delete: n(&self.delete),
        }
    }
}

/// Live progress of the current push, for a progress bar.
#[derive(Debug, Default)]
pub struct Progress {
    pub planned: AtomicU64,
    pub done: AtomicU64,
    pub bytes: AtomicU64,
}

pub fn sync_dir(root: &Path) -> PathBuf {
    root.join(".clawboard/sync")
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

pub struct Pusher<R: Remote> {
    pub(crate) remote: Arc<R>,
    pub(crate) root: PathBuf,
    pub(crate) settings: SyncSettings,
    pub(crate) node: String,
    excludes: globset::GlobSet,
    pub(crate) state: Mutex<Option<PushState>>,
    pub(crate) clock: Clock,
    pub(crate) outbox: Outbox,
    /// Writes pulled files (with `origin = remote` when a daemon journals them).
    pub(crate) writer: Lock<clawboard_core::Store>,
    /// This process made sure `_nodes/{node}.json` exists (pullers find nodes there).
    announced: AtomicBool,
    /// Heartbeats last read, by node: (ETag, heartbeat).
    pub(crate) beats: Lock<std::collections::HashMap<String, (String, crate::node::Heartbeat)>>,
    /// ETag of the last heartbeat this process wrote.
    pub(crate) own_beat: Lock<Option<String>>,
    /// Finished tasks whose claim this process found still this node's.
    verified: Lock<HashSet<String>>,
    running: tokio::sync::Mutex<()>,
    pub counts: Arc<Counts>,
    pub progress: Arc<Progress>,
    uploaded_total: AtomicU64,
    deleted_total: AtomicU64,
}

fn build_excludes(patterns: &[String]) -> Result<globset::GlobSet> {
    let mut b = globset::GlobSetBuilder::new();
    for (i, p) in patterns.iter().enumerate() {
        let glob = globset::GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::config(format!("sync.exclude[{i}]"), format!("{p:?}: {e}")))?;
        b.add(glob);
    }
    b.build().map_err(|e| Error::config("sync.exclude", e.to_string()))
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

impl<R: Remote> Pusher<R> {
    pub fn new(remote: R, root: &Path, settings: SyncSettings, node: String) -> Result<Pusher<R>> {
        let excludes = build_excludes(&settings.exclude)?;
        let dir = sync_dir(root);
        Ok(Pusher {
            remote: Arc::new(remote),
            root: root.to_owned(),
            settings,
            node,
            excludes,
            state: Mutex::new(None),
            clock: Clock::load(&dir)?,
            outbox: Outbox::new(&dir),
            writer: Lock::new(clawboard_core::Store::unchecked(root)),
            announced: AtomicBool::new(false),
            beats: Lock::new(Default::default()),
            verified: Lock::new(HashSet::new()),
            own_beat: Lock::new(None),
            running: tokio::sync::Mutex::new(()),
            counts: Arc::new(Counts::default()),
            progress: Arc::new(Progress::default()),
            uploaded_total: AtomicU64::new(0),
            deleted_total: AtomicU64::new(0),
        })
    }

    pub fn remote(&self) -> &Arc<R> {
        &self.remote
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn settings(&self) -> &SyncSettings {
        &self.settings
    }

    /// True for paths push never sends: `.clawboard/`, temp and editor files, the
    /// configured excludes.
    pub fn is_excluded(&self, rel: &str) -> bool {
        is_ignored(rel)
            || self.excludes.is_match(rel)
            || RESERVED_PREFIXES.iter().any(|p| rel.starts_with(p))
            || LOCAL_ONLY.contains(&rel)
            || rel.strip_prefix("inbox/").is_some_and(|name| !name.contains('/') && name.ends_with(".json"))
    }

    /// Leaves out paths of tasks this node claimed and finished but no longer holds
    /// (another node took them over meanwhile, e.g. while this node was cut off or
    /// down): such a task is fenced instead. Tasks still active are checked by the
    /// daemon with every heartbeat; a finished task is checked once per process.
    async fn drop_foreign(&self, paths: Vec<String>) -> Result<Vec<String>> {
        let touched: std::collections::BTreeSet<&str> = paths.iter().filter_map(|p| task_of(p)).collect();
        let tasks: Vec<String> = touched
            .into_iter()
            .filter(|task| {
                crate::node::held_generation(&self.root, task).is_some()
                    && !self.root.join(".clawboard/active").join(task).exists()
                    && !crate::node::is_fenced(&self.root, task)
                    && !self.verified.lock().contains(*task)
            })
            .map(str::to_owned)
            .collect();
        let mut foreign = HashSet::new();
        for task in tasks {
            match self.claim_of(&task).await? {
                Some((doc, _)) if doc.node != self.node => {
                    tracing::warn!(task, owner = doc.node, "another node took this task over; not pushing into it");
                    self.fence_locked(&task).await?;
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

    /// Writes pulled files through `store` (the daemon's store, reporting to its
    /// journal with `origin = remote`).
    pub fn set_writer(&self, store: clawboard_core::Store) {
        *self.writer.lock() = store;
    }

    /// True for a path inside a task this node lost the claim on: it never pushes
    /// there again (see [`crate::cluster`]).
    pub(crate) fn is_fenced(&self, rel: &str) -> bool {
        task_of(rel).is_some_and(|task| crate::node::is_fenced(&self.root, task))
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

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Holds this process's sync mutex and the root's `push.lock` (one push or pull at a time).
    pub(crate) async fn exclusive(&self) -> Result<Guards<'_>> {
        let running = self.running.lock().await;
        let lock_path = sync_dir(&self.root).join("push.lock");
        let lock = tokio::task::spawn_blocking(move || -> Result<File> {
            if let Some(dir) = lock_path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .map_err(|e| Error::io(&lock_path, e))?;
            f.lock().map_err(|e| Error::io(&lock_path, e))?;
            Ok(f)
        })
        .await
        .map_err(|e| Error::io(&self.root, std::io::Error::other(e)))??;
        Ok((running, lock))
    }

    async fn locked(&self, mode: Mode) -> Result<PushReport> {
        let _guards = self.exclusive().await?;
        self.load_state()?;
        // What an interrupted run left in the outbox goes out before anything new is appended.
        if let Err(e) = self.flush_log().await {
            let e = Err(e.at(&self.remote.describe()));
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
            .map_err(|e| e.at(&self.remote.describe()));
        self.write_status(&result)?;
        result
    }

    pub(crate) fn load_state(&self) -> Result<()> {
        let mut guard = self.state.lock().map_err(|_| poisoned())?;
        let state = match guard.take() {
            Some(s) => s.refresh()?,
            None => PushState::load(&sync_dir(&self.root))?,
        };
        *guard = Some(state);
        Ok(())
    }

    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut PushState) -> Result<T>) -> Result<T> {
        let mut guard = self.state.lock().map_err(|_| poisoned())?;
        match guard.as_mut() {
            Some(s) => f(s),
            None => Err(Error::io("push state", std::io::Error::other("used before it was loaded"))),
        }
    }

    async fn incremental(&self) -> Result<PushReport> {
        let cursor = push_cursor(&self.root);
        let mut at = cursor.load()?;
        let journal_dir = self.root.join(clawboard_core::layout::JOURNAL);
        let mut report = PushReport { cursor: at, ..PushReport::default() };
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
                .filter(|(p, (_, origin))| *origin != Origin::Remote && !self.is_excluded(p) && !self.is_fenced(p))
                .map(|(p, _)| p)
                .collect();
            let paths = self.drop_foreign(paths).await?;
            let t = Instant::now();
            let jobs = self.plan(paths, &mut report)?;
            tracing::debug!(jobs = jobs.len(), ms = t.elapsed().as_millis() as u64, "push: planned");
            self.run(jobs, &mut report).await?;
            tracing::debug!(ms = t.elapsed().as_millis() as u64, "push: sent");
            self.with_state(PushState::sync)?;
            self.flush_log().await?;
            cursor.store(last)?;
            at = last;
            report.cursor = at;
        }
        Ok(report)
    }

    async fn full_locked(&self) -> Result<PushReport> {
        let journal_dir = self.root.join(clawboard_core::layout::JOURNAL);
        let cursor = push_cursor(&self.root);
        // Everything journaled up to now is covered by the walk that follows.
        let upto = journal::bounds(&journal_dir)?.map_or(0, |(_, newest)| newest).max(cursor.load()?);
        let mut report = PushReport { full: true, ..PushReport::default() };
        let mut paths = self.tree_files()?;
        paths.retain(|p| !self.is_fenced(p));
        let present: HashSet<&String> = paths.iter().collect();
        let gone: Vec<String> = self.with_state(|s| {
            Ok(s.live_paths().filter(|p| !present.contains(p) && !self.is_fenced(p)).cloned().collect())
        })?;
        paths.extend(gone);
        let paths = self.drop_foreign(paths).await?;
        report.entries = paths.len() as u64;
        let jobs = self.plan(paths, &mut report)?;
        self.run(jobs, &mut report).await?;
        self.with_state(PushState::sync)?;
        self.flush_log().await?;
        cursor.store(upto)?;
        report.cursor = upto;
        Ok(report)
    }

    async fn repair_locked(&self, paths: Vec<String>) -> Result<PushReport> {
        let mut report = PushReport { entries: paths.len() as u64, ..PushReport::default() };
        let mut jobs = Vec::new();
        for path in paths.into_iter().filter(|p| !self.is_fenced(p)) {
            let is_file = clawboard_core::store::plain_file(&self.root, &path).is_some();
            // The bucket does not hold what the record says: forget the content, keep
            // the history (so other nodes see the repair as a newer version, not a conflict).
            self.with_state(|s| match s.get(&path).cloned() {
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
        self.with_state(PushState::sync)?;
        self.flush_log().await?;
        Ok(report)
    }

    /// Every file of the tree that push would send (the one walk: `sync full` and verify), sorted.
    pub fn tree_files(&self) -> Result<Vec<String>> {
        let root = &self.root;
        let mut paths = Vec::new();
        let walker = walkdir::WalkDir::new(root).follow_links(false).into_iter().filter_entry(|e| {
            let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy();
            rel.is_empty() || !self.is_excluded(&rel)
        });
        for entry in walker {
            let entry = match entry {
                Ok(e) => e,
                // Vanished while walking: the journal reports the removal.
                Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => continue,
                Err(e) => {
                    let path = e.path().map(Path::to_owned).unwrap_or_else(|| root.clone());
                    return Err(Error::io(path, e.into()));
                }
            };
            if entry.file_type().is_file()
                && let Ok(rel) = entry.path().strip_prefix(root)
            {
                paths.push(rel.to_string_lossy().into_owned());
            }
        }
        paths.sort();
        Ok(paths)
    }

    /// Turns changed paths into jobs, skipping (unread) files whose size and mtime
    /// match their pushed record.
    fn plan(&self, paths: Vec<String>, report: &mut PushReport) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        self.with_state(|state| {
            for path in paths {
                let meta = clawboard_core::store::plain_file(&self.root, &path);
                match (meta, state.get(&path).and_then(Pushed::live)) {
                    (Some(m), Some(p)) if p.size == m.len() && p.mtime_ns == Stamp::of(&m).mtime_ns => {
                        report.unchanged += 1;
                    }
                    (Some(_), _) => jobs.push(Job::Upload(path)),
                    (None, Some(_)) => jobs.push(Job::Delete(path)),
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
                let r = self.upload(&path).await;
                // Whatever failed (retries spent, or a permanent error), stop starting
                // new uploads: the error is reported once, the rest waits for the next push.
                if r.is_err() {
                    abort.store(true, Ordering::SeqCst);
                }
                self.progress.done.fetch_add(1, Ordering::Relaxed);
                (path, r)
            })
            .buffer_unordered(self.settings.concurrency.max(1))
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
                .retry(|| {
                    self.counts.delete.fetch_add(1, Ordering::Relaxed);
                    self.remote.delete_many(&keys)
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

    /// Uploads one file until the bucket holds bytes that match the recorded hash.
    async fn upload(&self, path: &str) -> Result<Done> {
        let abs = self.root.join(path);
        for _ in 0..CHANGING_TRIES {
            let threshold = self.settings.multipart_threshold;
            let (root, rel) = (self.root.clone(), path.to_owned());
            let read = match tokio::task::spawn_blocking(move || read_for_upload(&root, &rel, threshold))
                .await
                .map_err(|e| Error::io(&abs, std::io::Error::other(e)))?
            {
                Ok(r) => r,
                // Unreadable (permissions, an I/O error): one file must not stop the push.
                Err(e) => return Ok(Done::Skipped(e.to_string())),
            };
            let Some((body, hash, stamp)) = read else {
                // Gone since it was planned: its delete is (or will be) in the journal.
                let pushed = self.with_state(|s| Ok(s.get(path).and_then(Pushed::live).is_some()))?;
                if pushed {
                    self.retry(|| {
                        self.counts.delete.fetch_add(1, Ordering::Relaxed);
                        self.remote.delete(path)
                    })
                    .await?;
                    self.record_deletes(&[&path.to_owned()])?;
                    return Ok(Done::Deleted);
                }
                return Ok(Done::Unchanged);
            };
            let base = self.with_state(|s| Ok(s.get(path).cloned()))?;
            if let Some(b) = base.as_ref().and_then(Pushed::live)
                && b.hash == hash
            {
                let record = Pushed { size: stamp.size, mtime_ns: stamp.mtime_ns, ..b.clone() };
                self.with_state(|s| s.record(path, Some(record)))?;
                return Ok(Done::Unchanged);
            }
            // A new version: its history is the base's plus this node's new stamp.
            let hlc = self.clock.tick_at(u64::try_from(stamp.mtime_ns / 1_000_000).unwrap_or(0));
            let mut vv = base.as_ref().map(|b| b.vv.clone()).unwrap_or_default();
            vv.insert(self.node.clone(), hlc);
            let mut record =
                Pushed { vv, hlc, author: self.node.clone(), ..Pushed::file(hash.clone(), stamp.size, stamp.mtime_ns) };
            let meta = self.metadata(&record);
            let size = body.len();
            // A path this node never shared is created only if the bucket has none: an
            // existing object is another node's version, which pull resolves first (the
            // bucket's version wins against a file that was never synced).
            let condition = match (&base, &body) {
                (Some(_), _) => Condition::None,
                (None, Body::Bytes(_)) => Condition::Absent,
                (None, Body::File { .. }) => {
                    self.counts.head.fetch_add(1, Ordering::Relaxed);
                    if self.retry(|| self.remote.head(path)).await?.is_some() {
                        return Ok(Done::Deferred);
                    }
                    Condition::None
                }
            };
            let outcome = match self
                .retry(|| {
                    self.counts.put.fetch_add(1, Ordering::Relaxed);
                    self.remote.put(path, body.clone(), &meta, &condition)
                })
                .await
            {
                Ok(o) => o,
                Err(e) if e.failure == Failure::PreconditionFailed => {
                    // Our own create whose response was lost (a retry finds it), another
                    // node's version (pull resolves it), or an object without a clawboard
                    // version (a server killed mid-write, another tool): replaced.
                    self.counts.head.fetch_add(1, Ordering::Relaxed);
                    match self.retry(|| self.remote.head(path)).await? {
                        Some(info) if info.blake3() == Some(hash.as_str()) => PutOutcome::Stored { etag: info.etag },
                        Some(info) if info.metadata.contains_key(META_VV) => return Ok(Done::Deferred),
                        _ => {
                            self.retry(|| {
                                self.counts.put.fetch_add(1, Ordering::Relaxed);
                                self.remote.put(path, body.clone(), &meta, &Condition::None)
                            })
                            .await?
                        }
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
            self.outbox.append(&[log_entry(path, &record)])?;
            self.with_state(|s| s.record(path, Some(record)))?;
            self.uploaded_total.fetch_add(1, Ordering::Relaxed);
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

    /// The object metadata that carries a version.
    pub(crate) fn metadata(&self, record: &Pushed) -> Metadata {
        let mut meta = Metadata::new();
        meta.insert(META_HASH.into(), record.hash.clone());
        meta.insert(META_NODE.into(), record.author.clone());
        meta.insert(META_MTIME.into(), record.mtime_ns.to_string());
        meta.insert(META_HLC.into(), record.hlc.to_string());
        meta.insert(META_VV.into(), version::encode(&record.vv));
        meta
    }

    /// Records deletes this node made: tombstones with a new version, in the outbox.
    fn record_deletes(&self, paths: &[&String]) -> Result<()> {
        let mut entries = Vec::new();
        self.with_state(|s| {
            for path in paths {
                let hlc = self.clock.now();
                let mut vv: Vv = s.get(path).map(|b| b.vv.clone()).unwrap_or_default();
                vv.insert(self.node.clone(), hlc);
                let record = Pushed { vv, hlc, author: self.node.clone(), deleted: true, ..Pushed::default() };
                entries.push(log_entry(path, &record));
                s.record(path, Some(record))?;
            }
            Ok(())
        })?;
        self.deleted_total.fetch_add(paths.len() as u64, Ordering::Relaxed);
        self.outbox.append(&entries)
    }

    /// Turns the outbox into change-log segments (after the push state is durable).
    pub(crate) async fn flush_log(&self) -> Result<()> {
        self.clock.save()?;
        let n = self.outbox.flush(self.remote.as_ref(), &self.node).await?;
        if n > 0 {
            self.counts.put.fetch_add(n, Ordering::Relaxed);
            if !self.announced.swap(true, Ordering::SeqCst) {
                self.announce().await?;
            }
        }
        Ok(())
    }

    /// Runs `op`, retrying retryable failures with exponential backoff and full jitter.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, RemoteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, RemoteError>>,
    {
        let mut attempt = 0u32;
        loop {
            match op().await {
                Err(e) if e.is_retryable() && attempt < self.settings.retries => {
                    let delay = backoff(self.settings.retry_base, self.settings.retry_max, attempt);
                    tracing::debug!(attempt, ?delay, "retrying: {e}");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    pub(crate) fn write_pull_status(&self, result: &Result<PullReport>) -> Result<()> {
        self.update_status(|status| match result {
            Ok(r) => {
                status.last_pull_at = Some(now_text());
                status.last_pull = Some(r.clone());
                status.last_pull_error = None;
                status.last_pull_error_at = None;
            }
            Err(e) => {
                status.last_pull_error = Some(e.to_string());
                status.last_pull_error_at = Some(now_text());
            }
        })
    }

    fn write_status(&self, result: &Result<PushReport>) -> Result<()> {
        self.update_status(|status| match result {
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

    fn update_status(&self, change: impl FnOnce(&mut StatusFile)) -> Result<()> {
        let dir = sync_dir(&self.root);
        let mut status = read_status(&self.root).unwrap_or_default();
        status.remote = self.remote.describe();
        status.node = self.node.clone();
        status.this_process = ProcessTotals {
            pid: std::process::id(),
            requests: self.counts.snapshot(),
            uploaded: self.uploaded_total.load(Ordering::Relaxed),
            deleted: self.deleted_total.load(Ordering::Relaxed),
        };
        change(&mut status);
        clawboard_core::store::write_atomic(
            &dir,
            "status.json",
            clawboard_core::store::to_pretty_json(&status).as_bytes(),
        )?;
        Ok(())
    }
}

/// The task a path belongs to (`tasks/{id}/…`).
pub(crate) fn task_of(rel: &str) -> Option<&str> {
    rel.strip_prefix("tasks/")?.split_once('/').map(|(task, _)| task)
}

/// The change-log entry for a version.
pub(crate) fn log_entry(path: &str, r: &Pushed) -> LogEntry {
    LogEntry {
        path: path.to_owned(),
        op: if r.deleted { Op::Delete } else { Op::Put },
        hash: r.hash.clone(),
        size: r.size,
        hlc: r.hlc,
        author: r.author.clone(),
        vv: r.vv.clone(),
    }
}

fn poisoned() -> Error {
    Error::io("push state", std::io::Error::other("a push panicked while holding the push state"))
}

/// `base · 2^attempt`, capped at `max`, then a uniformly random part of it (full jitter).
pub fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(20)).min(max);
    let mut r = [0u8; 8];
    let frac = match getrandom::fill(&mut r) {
        Ok(()) => (u64::from_le_bytes(r) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    };
    // Never less than half the step, so retries do spread out.
    exp.mul_f64(0.5 + frac / 2.0)
}

/// The files under `dir` (relative to `root`, e.g. `tasks/t1`) whose current content
/// the bucket does not hold as far as this node knows: never pushed, changed since
/// (size or mtime differ from the pushed record), or pushed as a delete. Files push
/// never sends (`sync.exclude`, temp files) are not counted. Symlinks are not
/// followed; one is counted, since push never sends it.
pub fn unpushed_files(root: &Path, settings: &SyncSettings, dir: &str) -> Result<Vec<String>> {
    let excludes = build_excludes(&settings.exclude)?;
    let state = PushState::records(&sync_dir(root))?;
    let mut out = Vec::new();
    let base = root.join(dir);
    for entry in walkdir::WalkDir::new(&base).follow_links(false).follow_root_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| Error::io(&base, std::io::Error::other(e.to_string())))?;
        if entry.file_type().is_dir() {
            continue;
        }
        let Some(rel) = entry.path().strip_prefix(root).ok().and_then(|r| r.to_str()).map(str::to_owned) else {
            out.push(entry.path().display().to_string());
            continue;
        };
        if is_ignored(&rel) || excludes.is_match(&rel) {
            continue;
        }
        if !entry.file_type().is_file() {
            out.push(rel);
            continue;
        }
        let meta = entry.metadata().map_err(|e| Error::io(entry.path(), std::io::Error::other(e.to_string())))?;
        let stamp = Stamp::of(&meta);
        let pushed =
            state.get(&rel).is_some_and(|r| !r.deleted && r.size == stamp.size && r.mtime_ns == stamp.mtime_ns);
        if !pushed {
            out.push(rel);
        }
    }
    Ok(out)
}

/// The status file, if a push ever ran.
pub fn read_status(root: &Path) -> Option<StatusFile> {
    let bytes = std::fs::read(sync_dir(root).join("status.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What is waiting to be pushed: journal entries after the push cursor, and the
/// age of the oldest one (from its file's mtime), a measure of lag.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub cursor: u64,
    pub newest: u64,
    pub entries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_age_secs: Option<u64>,
}

pub fn pending(root: &Path) -> Result<Pending> {
    let cursor = push_cursor(root).load()?;
    let dir = root.join(clawboard_core::layout::JOURNAL);
    let newest = journal::bounds(&dir)?.map_or(0, |(_, n)| n);
    let entries = newest.saturating_sub(cursor);
    let oldest_age_secs = if entries > 0 {
        journal::read_after(&dir, cursor, 1)?.first().and_then(|e| e.change.mtime_ns).map(|ns| {
            let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
            u64::try_from((now - ns) / 1_000_000_000).unwrap_or(0)
        })
    } else {
        None
    };
    Ok(Pending { cursor, newest, entries, oldest_age_secs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for attempt in 0..10 {
            let d = backoff(base, max, attempt);
            let step = base.saturating_mul(1 << attempt).min(max);
            assert!(d >= step / 2 && d <= step, "attempt {attempt}: {d:?} vs {step:?}");
        }
        let spread: HashSet<Duration> = (0..20).map(|_| backoff(base, max, 3)).collect();
        assert!(spread.len() > 1, "jitter varies the delay");
    }

    #[test]
    fn excludes_are_globs_on_relative_paths() {
        let mut s = SyncSettings::local_default().unwrap();
        s.exclude = vec!["**/*.log".into(), "scratch/**".into()];
        let p = Pusher::new(
            crate::dir::DirRemote::open(tempfile::tempdir().unwrap().path()).unwrap(),
            Path::new("/r"),
            s,
            "n".into(),
        )
        .unwrap();
        for path in [
            "tasks/t/run.log",
            "scratch/a/b",
            ".clawboard/x",
            "inbox/.a.swp",
            "_log/n/1",
            "inbox/t.json",
            "shared/node-status.json",
            "roles/active.json",
        ] {
            assert!(p.is_excluded(path), "{path}");
        }
        for path in ["tasks/t/task.json", "gm/decisions.md", "inbox/rejected", "inbox/rejected/t.json"] {
            assert!(!p.is_excluded(path), "{path}");
        }
        let mut s = SyncSettings::local_default().unwrap();
        s.exclude = vec!["[".into()];
        let e = Pusher::new(
            crate::dir::DirRemote::open(tempfile::tempdir().unwrap().path()).unwrap(),
            Path::new("/r"),
            s,
            "n".into(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("sync.exclude[0]"), "{e}");
    }
}
