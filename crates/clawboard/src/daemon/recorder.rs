//! The journal's single writer: turns watcher events, rescans and the store's own
//! writes into journal entries, keeps the index, and publishes the last sequence
//! number, which wakes the consumers (they read the journal). Runs on its own thread: it stats files and fsyncs, which must not
//! block the async runtime, and the notify callback only `try_send`s to it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Instant;

use anyhow::Context;
use clawboard_core::index::{Index, Stamp};
use clawboard_core::journal::{Change, Journal, Origin, is_ignored};
use clawboard_core::lock::Lock;
use clawboard_core::store::ChangeSink;
use clawboard_core::summary::TaskSummary;
use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{EventKind, EventKindMask, Watcher};
use tokio::sync::watch;

use super::jobs::Registry;
use watches::{Verifier, Watches};

mod watches;

/// Capacity of the channel into the recorder; when the watcher finds it full, the
/// recorder falls back to a rescan (as on the kernel's own queue overflow).
const CHANNEL: usize = 1 << 16;
/// How long after a new directory is first scanned it is scanned again (see `State::run`).
const NEW_DIR_RESCAN: std::time::Duration = std::time::Duration::from_millis(200);
/// A file a new directory's scan finds that was written less than this long ago, and
/// has not been closed, may still be open for writing (`mkdir t && cat > t/task.json`,
/// in several `write(2)` calls): it is journaled at its close event, or once it has
/// been this quiet for writers that keep it open.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);
/// What the watcher asks the kernel for: a file created, removed, renamed, or
/// closed after writing. Never an open, a read, a write(2) or a change of
/// metadata: every directory a scan opens would be an event (two: one on it, one
/// on its parent), and a scan of a tree past the kernel's queue (16,384 events
/// by default) would overflow the queue it recovers from, again and again.
const EVENTS: EventKindMask = EventKindMask::CREATE
    .union(EventKindMask::REMOVE)
    .union(EventKindMask::MODIFY_NAME)
    .union(EventKindMask::ACCESS_CLOSE);
/// Index snapshot after this many journaled changes (and at shutdown).
const SNAPSHOT_EVERY: usize = 20_000;
/// A snapshot (the index's freezing with it) at most this long after the first
/// change it would take in, however few changes came.
const SNAPSHOT_AFTER: std::time::Duration = std::time::Duration::from_secs(900);
/// How long a pass over the unwatched directories takes ([`watches::Verifier`]),
/// from one pass's start to the next's; and the first, after a start.
const VERIFY_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
const FIRST_VERIFY: std::time::Duration = std::time::Duration::from_secs(900);
/// Group commit: after a commit, the next waits this long, gathering what comes
/// meanwhile. A change after a quiet spell is journaled at once; the files of a
/// busy daemon, which its deferred writer writes one after another, are
/// journaled a few at a time: one fdatasync each, instead of one per file
/// (about fifty per task of ten steps), each competing with the steps' own
/// syncs for the disk, and each waking every consumer.
const GROUP_COMMIT: std::time::Duration = std::time::Duration::from_millis(5);

pub enum Msg {
    Fs(notify::Result<notify::Event>),
    Own(String, Origin),
    /// Answered once everything sent before it is journaled.
    Flush(std::sync::mpsc::Sender<()>),
    Stop,
}

/// Waits until the recorder has journaled every change sent to it so far (the
/// store's own writes included), e.g. before a push reads the journal.
#[derive(Clone)]
pub struct Flusher {
    tx: SyncSender<Msg>,
}

impl Flusher {
    /// Blocks until flushed, or `timeout`; false on timeout or a stopped recorder.
    pub fn flush(&self, timeout: std::time::Duration) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx.send(Msg::Flush(tx)).is_ok() && rx.recv_timeout(timeout).is_ok()
    }
}

#[cfg(test)]
impl Flusher {
    /// A flusher with no recorder behind it: every flush is answered at once.
    pub fn answering() -> Flusher {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        std::thread::spawn(move || {
            for msg in rx {
                if let Msg::Flush(done) = msg {
                    let _ = done.send(());
                }
            }
        });
        Flusher { tx }
    }
}

/// What the rest of the daemon sees of the recorder.
pub struct Recorder {
    tx: SyncSender<Msg>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    /// The last journaled sequence number: consumers wake when it moves.
    pub last_seq: watch::Receiver<u64>,
    /// Every task's row, as of the last journaled change.
    pub tasks: Arc<Lock<TaskSummary>>,
}

/// The store's [`ChangeSink`]: expectations first, then a message to the recorder.
pub struct Sink {
    tx: SyncSender<Msg>,
    expected: Arc<Lock<HashMap<String, (Stamp, Origin)>>>,
}

impl ChangeSink for Sink {
    fn expect(&self, path: &str, stamp: Stamp, origin: Origin) {
        self.expected.lock().insert(path.to_owned(), (stamp, origin));
    }

    fn changed(&self, path: &str, origin: Origin) {
        // Blocking send: a full channel slows writers down rather than losing changes.
        let _ = self.tx.send(Msg::Own(path.to_owned(), origin));
    }
}

fn inotify_hint(e: &notify::Error) -> String {
    match e.kind {
        notify::ErrorKind::MaxFilesWatch => format!(
            "{e}: the system ran out of inotify watches; raise the limit, e.g. \
             `sudo sysctl fs.inotify.max_user_watches=1048576` (and put it in /etc/sysctl.d/ to keep it)"
        ),
        _ => e.to_string(),
    }
}

struct State {
    root: PathBuf,
    journal: Journal,
    index: Index,
    state_dir: PathBuf,
    expected: Arc<Lock<HashMap<String, (Stamp, Origin)>>>,
    /// The cursors compaction honours.
    registry: Arc<Registry>,
    overflow: Arc<AtomicBool>,
    since_snapshot: usize,
    last_seq: watch::Sender<u64>,
    /// Kept with the index, from the same journal entries.
    tasks: Arc<Lock<TaskSummary>>,
    /// [`GROUP_COMMIT`] (longer in a test).
    group_commit: std::time::Duration,
    /// When the first change not in a snapshot was journaled.
    unsaved_since: Option<Instant>,
    /// [`SNAPSHOT_AFTER`] (shorter in a test).
    snapshot_after: std::time::Duration,
    /// The pass over the directories `watches` leaves out.
    verifier: Verifier,
    /// Owned by the thread that reads its events: they live as long as they are
    /// read, and follow what appears and what freezes (see [`watches`]).
    watches: Watches,
}

impl Recorder {
    /// Starts watching `root`, scans it against the index (emitting what was missed
    /// while no daemon ran), and starts the recorder thread.
    pub fn start(root: &Path, registry: Arc<Registry>) -> anyhow::Result<(Recorder, Arc<Sink>)> {
        let state_dir = root.join(".clawboard");
        let journal_dir = state_dir.join("journal");
        let journal = Journal::open(&journal_dir)?;
        // A lost journal: the snapshot lists files whose entries are gone (a file
        // dropped just before would never be journaled); the scan below finds all.
        let index = if journal.lost() { Index::new(&state_dir) } else { Index::load(&state_dir, &journal_dir)? };
        let tasks = Arc::new(Lock::new(task_summary(root, &state_dir, &journal)?));
        let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL);
        let overflow = Arc::new(AtomicBool::new(false));
        let (cb_tx, cb_overflow) = (tx.clone(), overflow.clone());
        // A link to a directory is never watched into: what it points at is not the tree.
        let factory: watches::Factory = Box::new(move || {
            let (tx, overflow) = (cb_tx.clone(), cb_overflow.clone());
            notify::RecommendedWatcher::new(
                move |res| match tx.try_send(Msg::Fs(res)) {
                    Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                    Err(TrySendError::Full(_)) => overflow.store(true, Ordering::SeqCst),
                },
                notify::Config::default().with_follow_symlinks(false).with_event_kinds(EVENTS),
            )
        });
        // Watch first, then scan: a change during the scan is seen by one or both,
        // and the index drops the duplicate. A finished task's frozen directory is
        // neither watched nor walked now: the first pass of the verifier compares
        // them within FIRST_VERIFY.
        let started = Instant::now();
        let unwatched: HashSet<String> = {
            let summary = tasks.lock();
            index.frozen().filter(|t| summary.finished(t.trim_start_matches("tasks/"))).map(str::to_owned).collect()
        };
        let watches = Watches::start(root, factory, unwatched)?;
        let watched_ms = started.elapsed().as_millis() as u64;
        let expected = Arc::new(Lock::new(HashMap::new()));
        let (last_seq, last_seq_rx) = watch::channel(journal.last_seq());
        let mut state = State {
            root: root.to_owned(),
            journal,
            index,
            state_dir,
            expected: expected.clone(),
            registry,
            overflow,
            since_snapshot: 0,
            last_seq,
            tasks: tasks.clone(),
            group_commit: GROUP_COMMIT,
            unsaved_since: None,
            snapshot_after: SNAPSHOT_AFTER,
            verifier: Verifier::new(VERIFY_EVERY, FIRST_VERIFY),
            watches,
        };
        let started = Instant::now();
        let missed = state.scan_tree()?;
        let scanned_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            files = state.index.len(),
            frozen_dirs = state.index.frozen_dirs(),
            unwatched_dirs = state.watches.unwatched().len(),
            watched_ms,
            scanned_ms,
            "tree watched and scanned"
        );
        if !missed.is_empty() {
            tracing::info!(changes = missed.len(), "startup scan found changes made while no daemon ran");
        }
        state.commit(missed)?;
        let thread = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || state.run(rx))
            .context("starting the journal thread")?;
        let sink = Arc::new(Sink { tx: tx.clone(), expected });
        Ok((Recorder { tx, thread: Some(thread), last_seq: last_seq_rx, tasks }, sink))
    }

    pub fn flusher(&self) -> Flusher {
        Flusher { tx: self.tx.clone() }
    }

    /// Stops the thread after it has journaled everything sent so far; saves the index.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.tx.send(Msg::Stop);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => anyhow::bail!("the journal thread panicked"),
            None => Ok(()),
        }
    }
}

/// The task summary as the journal left it, or read anew from every `task.json`
/// (the first start, or a journal that no longer follows its snapshot).
fn task_summary(root: &Path, state_dir: &Path, journal: &Journal) -> anyhow::Result<TaskSummary> {
    let journal_dir = state_dir.join("journal");
    if !journal.lost()
        && let Some(s) = TaskSummary::load(root, state_dir, &journal_dir)?
    {
        return Ok(s);
    }
    let started = Instant::now();
    let s = TaskSummary::rebuild(root, journal.last_seq())?;
    tracing::info!(
        tasks = s.len(),
        ms = started.elapsed().as_millis() as u64,
        "task summary made from every task.json"
    );
    Ok(s)
}

/// A new file written less than [`SETTLE`] ago: perhaps still open for writing.
fn still_written(c: &Change) -> bool {
    c.kind == clawboard_core::journal::ChangeKind::Put
        && c.mtime_ns.and_then(|ns| u64::try_from(ns).ok()).is_some_and(|ns| {
            clawboard_core::store::modified_within(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns), SETTLE)
        })
}

/// What the journal thread carries from one batch to the next.
#[derive(Default)]
struct Pending {
    /// New directories to scan once more: notify reports a new directory before
    /// it adds the directory's watch, so a file created between our first scan
    /// and that watch has no event; the second scan, after the watch, finds it.
    /// In the order they are due.
    rescan_later: Vec<(Instant, PathBuf)>,
    /// Files found by such a scan while perhaps still being written (see SETTLE),
    /// with when to look at them again.
    settling: BTreeMap<String, Instant>,
    /// When the last commit was made (see GROUP_COMMIT).
    last_commit: Option<Instant>,
}

impl Pending {
    /// When the next rescan or settling file is due, if any is waiting.
    fn next_due(&self) -> Option<Instant> {
        self.rescan_later.first().map(|(t, _)| *t).into_iter().chain(self.settling.values().copied()).min()
    }

    /// The directories due for their second scan at `now`.
    fn due_dirs(&mut self, now: Instant) -> Vec<PathBuf> {
        let split = self.rescan_later.partition_point(|(t, _)| *t <= now);
        self.rescan_later.drain(..split).map(|(_, d)| d).collect()
    }

    /// A settling file that was closed is taken with its close event (it is in
    /// `paths`); one that has been quiet for SETTLE is added to `paths` now.
    fn take_quiet(&mut self, root: &Path, paths: &mut BTreeMap<String, Origin>, now: Instant) {
        self.settling.retain(|path, _| !paths.contains_key(path));
        let quiet: Vec<String> = self.settling.iter().filter(|(_, t)| **t <= now).map(|(p, _)| p.clone()).collect();
        for path in quiet {
            let busy = std::fs::symlink_metadata(root.join(&path))
                .and_then(|m| m.modified())
                .is_ok_and(|t| clawboard_core::store::modified_within(t, SETTLE));
            if busy {
                self.settling.insert(path, now + SETTLE);
            } else {
                self.settling.remove(&path);
                paths.entry(path).or_insert(Origin::Local);
            }
        }
    }
}

/// One batch of messages, sorted by what they ask for.
#[derive(Default)]
struct Batch {
    stop: bool,
    flushes: Vec<std::sync::mpsc::Sender<()>>,
    /// Files that changed, with who changed them.
    paths: BTreeMap<String, Origin>,
    /// Directories that appeared.
    dirs: Vec<PathBuf>,
    /// The whole tree must be rescanned (an event queue overflowed).
    rescan: bool,
}

impl State {
    fn run(mut self, rx: Receiver<Msg>) -> anyhow::Result<()> {
        let mut pending = Pending::default();
        loop {
            let next_due = [pending.next_due(), self.verifier.due(), self.snapshot_due()].into_iter().flatten().min();
            let first = match next_due {
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                },
                Some(due) => match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                    Ok(m) => Some(m),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                },
            };
            let now = Instant::now();
            let due = pending.due_dirs(now);
            let msgs = self.gather(&rx, first, pending.last_commit);
            let mut batch = self.sort(msgs);
            if batch.rescan {
                self.watches.rewatch_all()?;
            } else {
                self.watches.watch_new(&batch.dirs);
            }
            let mut changes = self.scan_new_dirs(&batch, &due, &mut pending.settling, now)?;
            pending.take_quiet(&self.root, &mut batch.paths, now);
            for dir in std::mem::take(&mut batch.dirs) {
                pending.rescan_later.push((now + NEW_DIR_RESCAN, dir));
            }
            let scanned: HashSet<String> = changes.iter().map(|c| c.path.clone()).collect();
            for (path, hint) in std::mem::take(&mut batch.paths) {
                if scanned.contains(&path) {
                    continue;
                }
                if let Some(c) = self.change_for(&path, hint) {
                    changes.push(c);
                }
            }
            if !changes.is_empty() {
                pending.last_commit = Some(Instant::now());
            }
            self.commit(changes)?;
            self.follow_thaws()?;
            self.verify_due()?;
            if self.snapshot_due().is_some_and(|t| t <= Instant::now()) {
                self.snapshot(false)?;
            }
            for done in batch.flushes {
                let _ = done.send(()); // the waiter may have given up
            }
            if batch.stop {
                break;
            }
        }
        self.snapshot(true)
    }

    /// The whole tree against the index, each frozen directory that is watched
    /// compared too; the unwatched ones are the verifier's.
    fn scan_tree(&mut self) -> anyhow::Result<Vec<Change>> {
        let mut changes = self.index.scan_trusting_frozen(&self.root, &self.root, true)?;
        let watched_frozen: Vec<String> =
            self.index.frozen().filter(|t| !self.watches.is_unwatched(t)).map(str::to_owned).collect();
        for task in watched_frozen {
            changes.extend(self.index.verify_frozen(&self.root, &task)?);
        }
        Ok(changes)
    }

    /// An unwatched directory that thawed (a change there, the daemon's own or
    /// one found) is watched again, and scanned after its watch: nothing written
    /// there meanwhile is missed. One that is gone has its files' deletions.
    fn follow_thaws(&mut self) -> anyhow::Result<()> {
        loop {
            let thawed: Vec<String> =
                self.index.take_thawed().into_iter().filter(|t| self.watches.is_unwatched(t)).collect();
            if thawed.is_empty() {
                return Ok(());
            }
            let mut changes = Vec::new();
            for task in thawed {
                if self.watches.watch_again(&task) {
                    changes.extend(self.index.scan(&self.root, &self.root.join(&task), true)?);
                } else {
                    changes.extend(self.index.removed_dir(&self.root, &task));
                }
            }
            self.commit(changes)?;
        }
    }

    /// The verifier's next few unwatched directories, if a tick is due, compared
    /// with their frozen digests.
    fn verify_due(&mut self) -> anyhow::Result<()> {
        let due = self.verifier.take(Instant::now(), self.watches.unwatched());
        if due.is_empty() {
            return Ok(());
        }
        let mut changes = Vec::new();
        for task in due.iter().filter(|t| self.watches.is_unwatched(t)) {
            changes.extend(self.index.verify_frozen(&self.root, task)?);
        }
        if !changes.is_empty() {
            tracing::info!(changes = changes.len(), "changes found in finished tasks' unwatched directories");
        }
        self.commit(changes)?;
        self.follow_thaws()
    }

    /// When a snapshot is due: [`SNAPSHOT_AFTER`] after the first change not in one.
    fn snapshot_due(&self) -> Option<Instant> {
        self.unsaved_since.map(|t| t + self.snapshot_after)
    }

    /// `first` and what follows it: within the group-commit window after the
    /// last commit, then whatever is queued already, up to a channel's worth.
    fn gather(&self, rx: &Receiver<Msg>, first: Option<Msg>, last_commit: Option<Instant>) -> Vec<Msg> {
        let mut batch: Vec<Msg> = first.into_iter().collect();
        if let Some(until) = last_commit.map(|t| t + self.group_commit).filter(|_| !batch.is_empty()) {
            while !batch.iter().any(|m| matches!(m, Msg::Stop)) && batch.len() < CHANNEL {
                match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(m) => batch.push(m),
                    Err(_) => break, // the window closed (or every sender is gone: stop below)
                }
            }
        }
        while batch.len() < CHANNEL {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        batch
    }

    fn sort(&self, msgs: Vec<Msg>) -> Batch {
        let mut batch = Batch::default();
        if self.overflow.swap(false, Ordering::SeqCst) {
            tracing::warn!("the journal's channel was full, events were dropped; rescanning the tree");
            batch.rescan = true;
        }
        for msg in msgs {
            match msg {
                Msg::Stop => batch.stop = true,
                Msg::Flush(done) => batch.flushes.push(done),
                Msg::Own(path, origin) => {
                    batch.paths.insert(path, origin);
                }
                Msg::Fs(Err(e)) => tracing::error!("file watcher: {}", inotify_hint(&e)),
                Msg::Fs(Ok(ev)) => {
                    if ev.need_rescan() && !batch.rescan {
                        tracing::warn!("the kernel's event queue overflowed; rescanning the tree");
                        batch.rescan = true;
                    }
                    self.classify(&ev, &mut batch.paths, &mut batch.dirs);
                }
            }
        }
        batch
    }

    /// The changes a rescan of the whole tree finds, or else those in the
    /// directories that appeared (their files may predate their watch) and in
    /// those due for their second scan. A file such a scan finds that may still
    /// be being written waits in `settling` instead.
    fn scan_new_dirs(
        &mut self,
        batch: &Batch,
        due: &[PathBuf],
        settling: &mut BTreeMap<String, Instant>,
        now: Instant,
    ) -> anyhow::Result<Vec<Change>> {
        if batch.rescan {
            let started = Instant::now();
            let changes = self.scan_tree()?;
            tracing::info!(changes = changes.len(), ms = started.elapsed().as_millis() as u64, "rescanned the tree");
            return Ok(changes);
        }
        let mut changes: Vec<Change> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for dir in batch.dirs.iter().chain(due) {
            for c in self.index.scan(&self.root, dir, false)? {
                if !seen.insert(c.path.clone()) {
                    continue;
                }
                if !batch.paths.contains_key(&c.path) && still_written(&c) {
                    settling.entry(c.path).or_insert(now + SETTLE);
                } else {
                    changes.push(c);
                }
            }
        }
        Ok(changes)
    }

    /// Saves the index (freezing what has been quiet) and drops journal segments
    /// that neither the index snapshot nor any consumer's cursor still needs. A
    /// finished task's directory that froze is no longer watched (but at a stop).
    fn snapshot(&mut self, stopping: bool) -> anyhow::Result<()> {
        self.index.save(&self.state_dir)?;
        self.tasks.lock().save(&self.state_dir)?;
        self.since_snapshot = 0;
        self.unsaved_since = None;
        let frozen = self.index.take_frozen();
        if !stopping {
            let finished: Vec<String> = {
                let summary = self.tasks.lock();
                frozen.into_iter().filter(|t| summary.finished(t.trim_start_matches("tasks/"))).collect()
            };
            self.watches.unwatch(finished)?;
        }
        let cursors = self.state_dir.join("cursors");
        let kept = self.index.seq.min(self.tasks.lock().seq);
        let upto = match self.registry.slowest(&cursors)? {
            Some(slowest) => slowest.min(kept),
            None => kept,
        };
        let removed = self.journal.compact(upto)?;
        if removed > 0 {
            tracing::debug!(segments = removed, upto, "compacted the journal");
        }
        Ok(())
    }

    /// The paths an event is about, if it says a file is complete, moved or gone.
    fn classify(&self, ev: &notify::Event, paths: &mut BTreeMap<String, Origin>, dirs: &mut Vec<PathBuf>) {
        if matches!(ev.kind, EventKind::Create(_) | EventKind::Modify(ModifyKind::Name(_))) {
            ev.paths.iter().for_each(|p| self.warn_if_odd(p));
        }
        let rel = |p: &Path| -> Option<String> {
            let r = p.strip_prefix(&self.root).ok()?.to_str()?.to_owned();
            (!r.is_empty() && !is_ignored(&r)).then_some(r)
        };
        let mut note = |p: &Path| {
            if let Some(r) = rel(p) {
                paths.entry(r).or_insert(Origin::Local);
            }
        };
        match ev.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) | EventKind::Remove(_) => {
                ev.paths.iter().for_each(|p| note(p))
            }
            EventKind::Modify(ModifyKind::Name(
                RenameMode::To | RenameMode::Both | RenameMode::From | RenameMode::Any,
            )) => {
                for p in &ev.paths {
                    if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
                        if rel(p).is_some() {
                            dirs.push(p.clone());
                        }
                    } else {
                        note(p);
                    }
                }
            }
            EventKind::Create(CreateKind::Folder) => {
                for p in &ev.paths {
                    if rel(p).is_some() {
                        dirs.push(p.clone());
                    }
                }
            }
            _ => {}
        }
    }

    /// A new entry the journal skips because it is not a regular file (a symbolic
    /// link, a FIFO, a socket, a device) or its name is not UTF-8: said once, in the
    /// log, naming it. It is left where it is; nothing reads it.
    fn warn_if_odd(&self, p: &Path) {
        let Ok(rel) = p.strip_prefix(&self.root) else { return };
        let Some(name) = rel.to_str() else {
            tracing::warn!(
                path = %rel.to_string_lossy(),
                "a file name that is not UTF-8; clawboard skips it (it is not taken, synced or archived): rename it"
            );
            return;
        };
        if name.is_empty() || is_ignored(name) {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(p) else { return };
        let ft = meta.file_type();
        let what = if ft.is_symlink() {
            "a symbolic link; clawboard never follows links in the tree"
        } else if ft.is_fifo() {
            "a FIFO (named pipe); clawboard reads regular files only"
        } else if ft.is_socket() || ft.is_block_device() || ft.is_char_device() {
            "a socket or device; clawboard reads regular files only"
        } else {
            return;
        };
        tracing::warn!(path = name, "{name} is {what}: it is skipped (not taken, synced or archived)");
    }

    fn change_for(&mut self, path: &str, hint: Origin) -> Option<Change> {
        // A file reached through a linked directory is not the tree's: no change at all.
        let now = match std::fs::symlink_metadata(self.root.join(path)) {
            Ok(m) if m.is_file() && clawboard_core::store::real_dirs(&self.root, path) => Some(Stamp::of(&m)),
            Ok(_) => return None,
            Err(_) => None,
        };
        let expected = self.expected.lock().remove(path);
        let origin = match (expected, now) {
            (Some((stamp, origin)), Some(n)) if stamp == n => origin,
            (Some(_), None) => hint,
            (Some(other), Some(_)) => {
                // Written again since: keep waiting for the write we expected.
                self.expected.lock().insert(path.to_owned(), other);
                hint
            }
            (None, _) => hint,
        };
        self.index.change_for(path, now, origin)
    }

    fn commit(&mut self, changes: Vec<Change>) -> anyhow::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let entries = self.journal.append(changes)?;
        tracing::debug!(entries = entries.len(), last = self.journal.last_seq(), "journaled");
        for e in &entries {
            self.index.apply(e);
        }
        self.tasks.lock().apply(&self.root, &entries);
        self.last_seq.send_replace(self.journal.last_seq());
        self.since_snapshot += entries.len();
        self.unsaved_since.get_or_insert_with(Instant::now);
        if self.since_snapshot >= SNAPSHOT_EVERY {
            self.snapshot(false)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
