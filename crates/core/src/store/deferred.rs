//! Deferred writes: a record is durable once it is appended to the store's
//! write-ahead log (`.clawboard/wal.log`) and the log is synced; its plain file is
//! written afterwards, off the writer's path, by one background thread.
//!
//! Why: a role step records about six small files (its attempt, its slice-ledger
//! entry and its board history, each when the step starts and when it ends). As
//! plain atomic writes each costs a temp file, an fsync, a rename and an fsync of
//! the directory (1–1.5 ms on this machine's disk). Here a step's records are
//! gathered in memory and cost one `write` and one `fdatasync` for the whole
//! group, the way SQLite's WAL commits a transaction.
//!
//! The rules that keep it as safe as the plain writes:
//! - A deferred record is durable when [`Deferred::sync`] returns. The engine
//!   syncs before it starts a role process, and every plain durable write of the
//!   store syncs first, so nothing written after a record (a task marked
//!   `completed`, an escalation, a role's side effects) survives a crash without it.
//! - The writer thread puts every appended record into the log file (written,
//!   not synced) before it writes any file: a killed process never leaves a
//!   file whose record the replay would write over with an older one.
//! - Until its file is written, the record is served from memory: reads, `exists`
//!   and directory listings of this store see it. Other processes see the file a
//!   few milliseconds later; [`Deferred::settle`] waits for every file.
//! - A plain write of a path with a pending record waits for that record's file
//!   first, so an older record never lands over a newer plain write. A plain
//!   change (write, removal, rename) of a path the log has a record of in this
//!   epoch is logged too, and synced, before it is made: a replay after a
//!   crash ends at the change. (Before, a task's `running` record was replayed
//!   over its plain `completed`.)
//! - After a crash, the next process that enables deferred writes on the tree
//!   writes every record in the log to its file (the last one per path, then one
//!   `syncfs`) before it does anything else, then empties the log: [`replay`].
//! - [`Deferred::checkpoint`] (at a clean stop, and when the log passes 4 MiB)
//!   waits for the files, fsyncs them and their directories, and empties the log
//!   (starts a new epoch).
//!
//! Views (`board.json`, `status.md`, `roles/active.json`) take the same path
//! without the log: they are rebuilt from records and need no durability.
//!
//! Log format: a 64-byte head `{"wal":1,"epoch":E}` (padded with spaces, ending
//! in a newline), then per record a header line `{"epoch":E,"path":P,"len":N,
//! "hash":H}`, the N bytes, a newline. H is the first 16 hex digits of the BLAKE3
//! hash of the bytes. A removal is a record with `"gone":true` and no bytes. The file is kept at least 8 MiB long, zero-filled past the
//! records: records overwrite blocks that already exist, so syncing one changes
//! no file metadata (no size, no new blocks) and is a data write alone: no inode
//! write, and on a journaling file system no journal commit. An
//! empty log is a new epoch, not a shorter file: a record of another epoch, zeros,
//! or a record cut short by a crash (or whose hash does not match) ends the
//! replay: it was never synced, so no one was told it was written.
//!
//! Records are written with direct I/O (`O_DIRECT`) where the file system
//! allows it (not tmpfs): whole 4 KiB blocks from aligned memory, the last
//! block's used part written again with the records after it, zeros past the
//! end. The sync is then the disk's cache flush alone, with no page-cache
//! writeback before it (the buffered sync's writeback was ~50 µs of CPU per
//! step, docs/BENCHMARKS.md).

mod wal;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{RelPath, Store};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::layout;
pub(crate) use wal::replay_and_close;
use wal::{HEAD, Wal};

/// How long the writer thread lets a batch gather before it writes it. A step
/// writes its attempt and slice records twice (started, ended) and the views
/// several times; written a few milliseconds later, each is written once. On
/// this machine's disk, creating the temp files costs the kernel more than
/// anything else the daemon does per step, and a batch's replaced files free
/// blocks whose discards (the disk is mounted with `discard`) slow the steps'
/// syncs while they run. At 20 ms the first batch fell inside a flow of ten
/// short steps and made its syncs the slowest of the flow; at 50 ms it falls
/// after them, and under a steady load the views are rewritten 2.5 times less
/// often (docs/BENCHMARKS.md, "Durable step overhead", run 82 on). A task's
/// end still writes everything at once (`Store::settle`).
const BATCH_DELAY: Duration = Duration::from_millis(50);

/// How long after a failed write (a full disk, say) the file is tried again: a
/// second, doubling while writes keep failing, up to half a minute.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// Past this size the writer thread checkpoints the log once it is idle.
const CHECKPOINT_BYTES: u64 = 4 << 20;
/// A checkpoint fsyncs the files written so far in up to this many rounds
/// before it takes the log's lock, and stops early once a round had at most
/// [`LOCKED_FILES`] files: what is left is synced under the lock.
const UNLOCKED_ROUNDS: usize = 3;
const LOCKED_FILES: usize = 16;
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A file waiting to be written: its newest content.
struct Pending {
    bytes: Arc<[u8]>,
    version: u64,
}

#[derive(Default)]
struct Queue {
    pending: HashMap<String, Pending>,
    order: VecDeque<String>,
    queued: HashSet<String>,
    in_flight: Option<String>,
    next_version: u64,
    /// Written since the last checkpoint, not fsynced yet.
    written: BTreeSet<String>,
    /// Files the thread could not write (their records stay in the log), tried
    /// again at `retry_at`. Nobody waits for them meanwhile (see `settle`).
    failed: Vec<String>,
    retry_at: Option<Instant>,
    /// Retry rounds since the last write that worked (the [`RETRY`] wait grows).
    failures: u32,
    /// When the queue last went from empty to not: the batch is written
    /// [`BATCH_DELAY`] later, so that content replaced meanwhile is written once.
    since: Option<Instant>,
    /// The thread is writing a batch (until the queue is empty).
    draining: bool,
    /// Callers waiting for files: the thread writes at once.
    hurry: usize,
    /// Syncs of the log in progress: the thread starts no file meanwhile (unless
    /// hurried). A file it replaces frees the old file's blocks, and on a file
    /// system mounted with `discard` that waits for the disk; a sync issued
    /// meanwhile waited behind a batch's discards for 2–6 ms on this machine,
    /// against ~0.35 ms alone (docs/BENCHMARKS.md, "Durable step overhead").
    syncing: usize,
    stop: bool,
}

impl Queue {
    fn idle(&self) -> bool {
        self.order.is_empty() && self.in_flight.is_none()
    }
}

struct Shared {
    wal: Mutex<Wal>,
    queue: Mutex<Queue>,
    changed: Condvar,
    wal_path: PathBuf,
    /// The log's size (read without its lock by the writer thread).
    wal_len: AtomicU64,
    /// Records are appended to the log that are not in its file yet (see
    /// [`Wal::flush`]): the writer thread flushes them before it writes a file.
    unflushed: AtomicBool,
    /// Writes the plain files (a store without deferred writes).
    store: Store,
}

/// The deferred writes of one store and its clones (see the module header).
pub(crate) struct Deferred {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred").field("wal", &self.shared.wal_path).finish_non_exhaustive()
    }
}

impl Deferred {
    /// Replays what a crash left in the log, then starts the writer thread.
    /// `store` writes the plain files (it must not defer writes itself).
    pub(crate) fn start(store: Store) -> Result<Deferred> {
        let wal_path = store.root().join(layout::WAL);
        let (wal, _) = Wal::open(&store)?;
        let shared = Arc::new(Shared {
            wal: Mutex::new(wal),
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            wal_path,
            wal_len: AtomicU64::new(0),
            unflushed: AtomicBool::new(false),
            store,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("clawboard-deferred".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::io(&shared.wal_path, e))?;
        Ok(Deferred { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Queues `bytes` for `rel`; with `logged`, appends it to the log first (durable
    /// at the next [`Deferred::sync`]); without, it is a view.
    pub(crate) fn write(&self, rel: &RelPath, bytes: &[u8], logged: bool) -> Result<()> {
        let path = rel.to_string();
        // Log order is queue order: the log's lock is held until the record is queued.
        let mut wal = lock(&self.shared.wal);
        if logged {
            let len = wal.append(&path, bytes)?;
            self.shared.wal_len.store(len, Ordering::Relaxed);
            self.shared.unflushed.store(true, Ordering::Release);
        }
        let mut q = lock(&self.shared.queue);
        q.next_version += 1;
        let version = q.next_version;
        q.pending.insert(path.clone(), Pending { bytes: Arc::from(bytes), version });
        // The thread needs waking only to start a batch's clock: while it waits
        // for one or writes one, it sees this file without being told.
        let wake = q.order.is_empty() && !q.draining && q.in_flight.is_none();
        if wake {
            q.since = Some(Instant::now());
        }
        if q.queued.insert(path.clone()) {
            q.order.push_back(path);
        }
        drop(q);
        drop(wal);
        if wake {
            self.shared.changed.notify_all();
        }
        Ok(())
    }

    /// Makes every logged record durable (one `fdatasync` if any was appended).
    pub(crate) fn sync(&self) -> Result<()> {
        let _pause = Syncing::start(&self.shared);
        let mut wal = lock(&self.shared.wal);
        self.shared.flush(&mut wal)?;
        wal.sync()
    }

    /// The pending content of `rel`, if its file is not written yet.
    pub(crate) fn read(&self, rel: &RelPath) -> Option<Arc<[u8]>> {
        lock(&self.shared.queue).pending.get(&rel.to_string()).map(|p| p.bytes.clone())
    }

    /// A plain change of `rel` is about to be made (its new content, or
    /// `None`: removed). If the log has a record of `rel` in this epoch, the
    /// change is appended to it too, so that a replay after a crash ends at
    /// the change rather than at the older record. Returns whether it was.
    pub(crate) fn supersede(&self, rel: &RelPath, next: Option<&[u8]>) -> Result<bool> {
        let path = rel.to_string();
        let mut wal = lock(&self.shared.wal);
        if !wal.has_logged(&path) {
            return Ok(false);
        }
        let len = match next {
            Some(bytes) => wal.append(&path, bytes)?,
            None => wal.append_gone(&path)?,
        };
        self.shared.wal_len.store(len, Ordering::Relaxed);
        self.shared.unflushed.store(true, Ordering::Release);
        Ok(true)
    }

    /// True when the log has a record of `rel` in this epoch.
    pub(crate) fn is_logged(&self, rel: &RelPath) -> bool {
        lock(&self.shared.wal).has_logged(&rel.to_string())
    }

    pub(crate) fn is_pending(&self, rel: &RelPath) -> bool {
        lock(&self.shared.queue).pending.contains_key(&rel.to_string())
    }

    /// Names of pending files directly in `dir` (relative to the root).
    pub(crate) fn names_in(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        lock(&self.shared.queue)
            .pending
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_owned)
            .collect()
    }

    /// Waits until every file pending now is written (not fsynced), or replaced
    /// by newer content. Files queued meanwhile are not waited for: under a steady
    /// stream of writes the queue may never be empty.
    /// A file whose write failed is not waited for: it may not be writable for a
    /// long while (a full disk), and its content is safe in the log meanwhile.
    pub(crate) fn settle(&self) {
        let mut q = self.shared.hurry();
        let now: Vec<(String, u64)> = q.pending.iter().map(|(k, p)| (k.clone(), p.version)).collect();
        while now.iter().any(|(k, v)| q.pending.get(k).is_some_and(|p| p.version == *v) && !q.failed.contains(k)) {
            q = self.shared.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        q.hurry -= 1;
    }

    /// Waits until `rel` has no pending content (its writers are serialized by the
    /// caller, so this ends), or its write failed (as [`Deferred::settle`]).
    pub(crate) fn settle_path(&self, rel: &RelPath) {
        let path = rel.to_string();
        let mut q = self.shared.hurry();
        while q.pending.contains_key(&path) && !q.failed.contains(&path) {
            q = self.shared.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        q.hurry -= 1;
    }

    /// Waits for the files, fsyncs them and their directories, and empties the log.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.shared.checkpoint(true)
    }
}

/// A sync of the log in progress (see [`Queue::syncing`]), until dropped.
struct Syncing<'a>(&'a Shared);

impl<'a> Syncing<'a> {
    fn start(shared: &'a Shared) -> Self {
        lock(&shared.queue).syncing += 1;
        Syncing(shared)
    }
}

impl Drop for Syncing<'_> {
    fn drop(&mut self) {
        let resume = {
            let mut q = lock(&self.0.queue);
            q.syncing -= 1;
            q.syncing == 0 && !q.order.is_empty()
        };
        if resume {
            self.0.changed.notify_all();
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        lock(&self.shared.queue).stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            // The thread finishes the queue first; a panic in it was logged by the hook.
            let _ = t.join();
        }
    }
}

impl Shared {
    /// The queue, with the writer thread told to write at once until the caller
    /// takes `hurry` back.
    fn hurry(&self) -> MutexGuard<'_, Queue> {
        let mut q = lock(&self.queue);
        q.hurry += 1;
        self.changed.notify_all();
        q
    }

    /// The writer thread: writes pending files oldest first, newest content each,
    /// in batches (see [`BATCH_DELAY`]).
    fn run(&self) {
        loop {
            let (path, bytes, version) = {
                let mut q = lock(&self.queue);
                loop {
                    if q.order.is_empty() {
                        q.draining = false;
                        q.since = None;
                        if q.stop {
                            return;
                        }
                        if let Some(at) = q.retry_at.filter(|_| !q.failed.is_empty()) {
                            let left = at.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                // Tried again (a full disk may have room now).
                                q.retry_at = None;
                                for p in std::mem::take(&mut q.failed) {
                                    if q.pending.contains_key(&p) && q.queued.insert(p.clone()) {
                                        q.order.push_back(p);
                                    }
                                }
                            } else {
                                q = self.changed.wait_timeout(q, left).unwrap_or_else(PoisonError::into_inner).0;
                            }
                            continue;
                        }
                        q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                        continue;
                    }
                    if q.syncing > 0 && q.hurry == 0 && !q.stop {
                        q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
                        continue;
                    }
                    let waited = q.since.map_or(BATCH_DELAY, |t| t.elapsed());
                    if !(q.draining || q.hurry > 0 || q.stop || waited >= BATCH_DELAY) {
                        q = self
                            .changed
                            .wait_timeout(q, BATCH_DELAY - waited)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                        continue;
                    }
                    q.draining = true;
                    let Some(p) = q.order.pop_front() else { continue };
                    q.queued.remove(&p);
                    if let Some(pending) = q.pending.get(&p) {
                        let job = (p.clone(), pending.bytes.clone(), pending.version);
                        q.in_flight = Some(p);
                        break job;
                    }
                }
            };
            // Without the path's lock: a writer holding it may be waiting in `settle`.
            let written = self
                .flush_log()
                .and_then(|()| RelPath::new(&path))
                .and_then(|rel| self.store.write_view_locked(&rel, &bytes));
            let checkpoint_due = {
                let mut q = lock(&self.queue);
                q.in_flight = None;
                match written {
                    Ok(()) => {
                        q.failures = 0;
                        q.failed.retain(|f| *f != path);
                        q.written.insert(path.clone());
                        if q.pending.get(&path).is_some_and(|p| p.version == version) {
                            q.pending.remove(&path);
                        }
                    }
                    Err(e) => {
                        // One retry round for every file that fails until it is due.
                        let now = Instant::now();
                        if q.retry_at.is_none() {
                            q.retry_at = Some(now + RETRY.delay(q.failures));
                            q.failures = q.failures.saturating_add(1);
                        }
                        let wait = q.retry_at.map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
                        tracing::error!(
                            "cannot write {path} from the write-ahead log (kept there and in memory; tried again in {} s): {}",
                            wait.as_secs(),
                            crate::error::chain(&e)
                        );
                        if q.pending.get(&path).is_some_and(|p| p.version == version) && !q.failed.contains(&path) {
                            q.failed.push(path);
                        }
                    }
                }
                q.order.is_empty()
            };
            self.changed.notify_all();
            if checkpoint_due
                && self.wal_len.load(Ordering::Relaxed) > CHECKPOINT_BYTES
                && let Err(e) = self.checkpoint(false)
            {
                tracing::error!("checkpoint of {} failed (the log is kept): {}", layout::WAL, crate::error::chain(&e));
            }
        }
    }

    /// Every record appended so far into the log's file, before a file is
    /// written from the queue: a record's file never exists without its record
    /// in the log (the replay after a killed process must not write an older
    /// record over it).
    fn flush_log(&self) -> Result<()> {
        if !self.unflushed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.flush(&mut lock(&self.wal))
    }

    /// `wal`'s appended records into its file (the caller holds its lock).
    fn flush(&self, wal: &mut Wal) -> Result<()> {
        wal.flush()?;
        self.unflushed.store(false, Ordering::Release);
        Ok(())
    }

    /// Makes every file written so far durable and empties the log. With
    /// `wait`, waits for the queue to empty; without (the writer thread
    /// itself), gives up if it is not empty by the end (the files synced so far
    /// stay synced; the next idle moment tries again).
    ///
    /// The files are fsynced in rounds with no lock held, records going on
    /// being appended meanwhile, and only the last few under the log's lock
    /// (which holds every append back): a checkpoint after 4 MiB of records
    /// syncs thousands of files, and holding the lock through all of them
    /// stalled every writer for as long.
    fn checkpoint(&self, wait: bool) -> Result<()> {
        for _ in 0..UNLOCKED_ROUNDS {
            let written = std::mem::take(&mut lock(&self.queue).written);
            let n = written.len();
            self.sync_files(&written)?;
            if n <= LOCKED_FILES {
                break;
            }
        }
        // No record is appended meanwhile: appends (and views) take the log's
        // lock. The writer thread does not need it (nothing is left unflushed).
        let mut wal = lock(&self.wal);
        self.flush(&mut wal)?;
        let written = {
            let mut q = lock(&self.queue);
            if !q.idle() && !wait {
                return Ok(());
            }
            q.hurry += 1;
            self.changed.notify_all();
            while !q.idle() {
                q = self.changed.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            q.hurry -= 1;
            if !q.failed.is_empty() {
                return Err(Error::io(
                    &self.wal_path,
                    std::io::Error::other(format!(
                        "{} file(s) could not be written: {}",
                        q.failed.len(),
                        q.failed.join(", ")
                    )),
                ));
            }
            std::mem::take(&mut q.written)
        };
        self.sync_files(&written)?;
        wal.empty()?;
        self.wal_len.store(HEAD, Ordering::Relaxed);
        Ok(())
    }

    /// fsyncs `written` (paths relative to the root) and their directories.
    fn sync_files(&self, written: &BTreeSet<String>) -> Result<()> {
        let root = self.store.root().to_owned();
        let mut dirs = BTreeSet::new();
        for rel in written {
            let path = root.join(rel);
            match File::open(&path) {
                Ok(f) => f.sync_all().map_err(|e| Error::io(&path, e))?,
                // Removed since (by retention, say): nothing to keep.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
            if let Some(d) = path.parent() {
                dirs.insert(d.to_owned());
            }
        }
        for d in dirs {
            match File::open(&d) {
                Ok(f) => f.sync_all().map_err(|e| Error::io(&d, e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&d, e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
