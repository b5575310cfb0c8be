//! The store: the one API every write to the tree goes through.
//!
//! - Writes are atomic: a temp file in the same directory, fsync, rename, fsync of
//!   the directory. A reader sees the old file or the new one, never half a file.
//! - Writers of the same path are serialized by an advisory lock (`File::lock`) on one
//!   of a fixed set of lock files in `.clawboard/locks/`.
//! - Paths are relative to the root, made of plain names only, and never lead out of
//!   the root through a symlink.
//! - A temp file left by a crash is removed by [`Store::recover`] on the next start.
//! - Reads parse through the typed formats ([`crate::validate`]).

mod atomic;
mod deferred;
mod locks;
mod paths;

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::Serialize;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::formats::Task;
use crate::index::Stamp;
use crate::journal::Origin;
use crate::kind::{FileKind, Format};
use crate::layout;
use crate::validate::{self, DEFAULT_MAX_FILE_BYTES};

pub use atomic::{TEMP_MARK, is_temp_name, process_alive};
pub use paths::{RelPath, open_plain, plain_file, real_dir, real_dirs};

/// True if a file modified at `mtime` was written less than `within` ago (or at
/// most `within` ahead of this clock: a little skew): a writer may still be at it.
/// A time further ahead (a file copied with its mtime from a machine whose clock
/// is fast, or a clock set back) says nothing of a writer: waiting for it would
/// hold the file until this clock catches up.
pub fn modified_within(mtime: std::time::SystemTime, within: std::time::Duration) -> bool {
    match mtime.elapsed() {
        Ok(age) => age < within,
        Err(ahead) => ahead.duration() <= within,
    }
}

/// JSON as clawboard writes it: two-space indent, trailing newline.
pub fn to_pretty_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Serializing our own types to a String cannot fail (no non-string map keys).
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    s.push('\n');
    s
}

/// Atomically replaces `dir/name` (outside the tree's locks: for the daemon's own
/// state files, which have one writer).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    atomic::write(dir, std::ffi::OsStr::new(name), bytes)
}

/// [`write_atomic`] without its fsyncs: readers see the old file or the new one,
/// whole, but a power loss may take it back. Many such files are made durable
/// together by one `syncfs` ([`sync_file_system`]).
pub fn write_atomic_unsynced(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    atomic::write_observed(dir, std::ffi::OsStr::new(name), bytes, atomic::Sync::View, &mut |_| {})
}

/// Everything written to the file system `dir` is on, made durable (`syncfs(2)`).
pub fn sync_file_system(dir: &Path) -> Result<()> {
    let d = fs::File::open(dir).map_err(|e| Error::io(dir, e))?;
    nix::unistd::syncfs(&d).map_err(|e| Error::io(dir, std::io::Error::from(e)))
}

/// Creates `dir/name` with `bytes` (file mode `mode`) only if it does not exist, whole
/// or not at all: temp file, fsync, hard link. Two processes racing to create it agree
/// on one content. Returns false (and writes nothing) when the file was already there.
pub fn create_atomic(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<bool> {
    atomic::create(dir, std::ffi::OsStr::new(name), bytes, mode, false)
}

/// Replaces `dir/name` with `bytes` (file mode `mode`) atomically: temp file, fsync,
/// rename. For a state file that must never be readable by others, even briefly.
pub fn replace_atomic_with_mode(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
    atomic::create(dir, std::ffi::OsStr::new(name), bytes, mode, true).map(|_| ())
}

/// What `init` did.
#[derive(Debug, Default, Serialize)]
pub struct InitReport {
    pub root: PathBuf,
    /// Directories and files created, relative to the root; empty on a second run.
    pub created: Vec<String>,
    /// Leftover temp files from a crash that were removed.
    pub removed_temp_files: Vec<String>,
}

/// A blackboard tree on disk.
#[derive(Clone)]
pub struct Store {
    root: PathBuf,
    max_file_bytes: u64,
    sink: Option<Arc<dyn ChangeSink>>,
    origin: Origin,
    /// Set by [`Store::with_deferred_writes`]: shared by every clone.
    deferred: Option<Arc<deferred::Deferred>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).field("origin", &self.origin).finish_non_exhaustive()
    }
}

/// Where the store reports its own writes, so they reach the change journal with
/// the right origin whichever arrives first: the report or the watcher's event.
pub trait ChangeSink: Send + Sync {
    /// `path` is about to become a file with `stamp`, written by `origin`.
    fn expect(&self, path: &str, stamp: Stamp, origin: Origin);
    /// `path` was written or removed by `origin`.
    fn changed(&self, path: &str, origin: Origin);
}

impl Store {
    /// Creates whatever part of the layout is missing; changes nothing that exists.
    pub fn init(root: &Path) -> Result<(Store, InitReport)> {
        let mut report = InitReport::default();
        if fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) && !root.exists() {
            let to = fs::read_link(root).map(|t| t.display().to_string()).unwrap_or_default();
            return Err(Error::UnsafePath {
                path: root.display().to_string(),
                reason: format!("is a symbolic link to {to:?}, which does not exist; create it, or give another root"),
            });
        }
        if !root.exists() {
            fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
            report.created.push(".".into());
        }
        let canonical = fs::canonicalize(root).map_err(|e| Error::io(root, e))?;
        if !canonical.is_dir() {
            return Err(Error::UnsafePath { path: root.display().to_string(), reason: "is not a directory".into() });
        }
        // Every place of the layout first, so that a clash stops init before it
        // has made anything (not half a tree).
        for dir in layout::DIRS {
            let p = canonical.join(dir);
            if fs::symlink_metadata(&p).is_ok_and(|m| !m.is_dir()) {
                return Err(Error::UnsafePath {
                    path: p.display().to_string(),
                    reason: format!("is in the way: the tree needs a directory {dir}/ there"),
                });
            }
        }
        let store = Store {
            root: canonical,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            sink: None,
            origin: Origin::Daemon,
            deferred: None,
        };
        for dir in layout::DIRS {
            let rel = RelPath::new(dir)?;
            if store.ensure_dir(&rel)? {
                report.created.push(format!("{dir}/"));
            }
        }
        for (file, content) in layout::initial_files() {
            match store.create_bytes(&RelPath::new(file)?, content.as_bytes()) {
                Ok(()) => report.created.push(file.to_owned()),
                Err(Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        report.removed_temp_files = store.recover()?;
        report.root = store.root.clone();
        Ok((store, report))
    }

    /// Opens an initialized tree.
    pub fn open(root: &Path) -> Result<Store> {
        let canonical = match fs::canonicalize(root) {
            Ok(p) => p,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotInitialized { root: root.to_owned() });
            }
            Err(e) => return Err(Error::io(root, e)),
        };
        if !canonical.join(layout::STATE).is_dir() {
            return Err(Error::NotInitialized { root: root.to_owned() });
        }
        Ok(Store {
            root: canonical,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            sink: None,
            origin: Origin::Daemon,
            deferred: None,
        })
    }

    /// A store on `root` as given, not checked to be initialized (for a tool handed
    /// a tree it writes into, e.g. sync applying pulled files).
    pub fn unchecked(root: &Path) -> Store {
        Store {
            root: root.to_owned(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            sink: None,
            origin: Origin::Daemon,
            deferred: None,
        }
    }

    /// Sets the size above which files are refused before parsing.
    pub fn with_max_file_bytes(mut self, max: u64) -> Self {
        self.max_file_bytes = max;
        self
    }

    /// Reports every write to `sink`, as made by `origin`.
    pub fn with_sink(mut self, sink: Arc<dyn ChangeSink>, origin: Origin) -> Self {
        self.sink = Some(sink);
        self.origin = origin;
        self
    }

    /// Turns on deferred writes (see `store/deferred.rs`) for this store and its
    /// clones: first writes whatever a crash left in `.clawboard/wal.log` to its
    /// files, then starts the thread that writes files off the writers' path. For
    /// the one process that serves the tree (the daemon, or `clawboard run`),
    /// after it holds the tree's lock and before it reads any task.
    pub fn with_deferred_writes(mut self) -> Result<Store> {
        if self.deferred.is_none() {
            self.deferred = Some(Arc::new(deferred::Deferred::start(self.clone())?));
        }
        Ok(self)
    }

    /// Writes out what a crashed process with deferred writes left in
    /// `.clawboard/wal.log`, and empties the log: for a process that serves the
    /// tree without deferred writes (the daemon), before it reads any task.
    pub fn replay_records(root: &Path) -> Result<usize> {
        deferred::replay_and_close(&Store::open(root)?)
    }

    /// Writes a record that must survive a crash once [`Store::sync_records`]
    /// returns: appended to the write-ahead log now, its file written shortly after
    /// (this store reads it back at once). Without deferred writes, a plain
    /// durable write. Takes no path lock (the caller may hold one whose stripe
    /// is the same): the caller serializes writers of `rel`.
    pub fn write_record(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        match &self.deferred {
            Some(d) => d.write(rel, bytes, true),
            None => self.write_locked(rel, bytes),
        }
    }

    /// [`Store::write_record`] only if nothing is at `rel` yet
    /// ([`Error::AlreadyExists`] otherwise, a pending record counting): durable
    /// once [`Store::sync_records`] returns, so that many files created together
    /// share one sync. Without deferred writes, [`Store::create_bytes`].
    pub fn create_record(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        let Some(d) = &self.deferred else { return self.create_bytes(rel, bytes) };
        let _lock = self.lock(rel)?;
        if self.exists(rel) {
            return Err(Error::AlreadyExists { path: rel.to_string() });
        }
        d.write(rel, bytes, true)
    }

    /// True when [`Store::write_record`] appends to the write-ahead log (see
    /// [`Store::with_deferred_writes`]).
    pub fn defers_writes(&self) -> bool {
        self.deferred.is_some()
    }

    /// [`Store::write_record`] as JSON.
    pub fn write_record_json<T: Serialize>(&self, rel: &RelPath, value: &T) -> Result<()> {
        self.write_record(rel, to_pretty_json(value).as_bytes())
    }

    /// Makes every record written so far durable: one fdatasync of the log, if
    /// any record was appended since the last one.
    pub fn sync_records(&self) -> Result<()> {
        match &self.deferred {
            Some(d) => d.sync(),
            None => Ok(()),
        }
    }

    /// Waits until every deferred file is on disk (written, not fsynced), so
    /// that other processes see them.
    pub fn settle(&self) {
        if let Some(d) = &self.deferred {
            d.settle();
        }
    }

    /// Waits for the deferred files, fsyncs them, and empties the log (at a
    /// clean stop).
    pub fn checkpoint(&self) -> Result<()> {
        match &self.deferred {
            Some(d) => d.checkpoint(),
            None => Ok(()),
        }
    }

    /// Before a plain write, rename or removal: `changes` are the paths it
    /// touches with their new content (`None`: removed). Pending files of the
    /// same paths are written first; a path the write-ahead log has a record of
    /// gets the change logged too (or a replay after a crash would bring the
    /// record back over it); then the log is synced, for a durable change or
    /// one that was logged, so that nothing written after a record survives a
    /// crash without it.
    fn before_plain(&self, changes: &[(&RelPath, Option<&[u8]>)], durable: bool) -> Result<()> {
        let Some(d) = &self.deferred else { return Ok(()) };
        for (r, _) in changes {
            if d.is_pending(r) {
                d.settle_path(r);
            }
        }
        let mut logged = false;
        for (r, next) in changes {
            logged |= d.supersede(r, *next)?;
        }
        if durable || logged {
            d.sync()?;
        }
        Ok(())
    }

    /// The names in the directory `rel_dir` (relative to the root), including
    /// files still pending as deferred writes; a missing directory has none.
    pub fn list_names(&self, rel_dir: &str) -> Result<Vec<String>> {
        let dir = self.root.join(rel_dir);
        let mut names = match fs::read_dir(&dir) {
            Ok(entries) => {
                let mut v = Vec::new();
                for e in entries {
                    let e = e.map_err(|e| Error::io(&dir, e))?;
                    if let Some(n) = e.file_name().to_str() {
                        v.push(n.to_owned());
                    }
                }
                v
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        if let Some(d) = &self.deferred {
            names.extend(d.names_in(rel_dir));
        }
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }

    /// The numbers of the numbered records `N.json` in `rel_dir`, in order (as
    /// [`Store::list_names`]; a temp file of an atomic write, or any other name, is
    /// not a record).
    pub fn list_numbered(&self, rel_dir: &str) -> Result<Vec<u64>> {
        let mut ns: Vec<u64> = self
            .list_names(rel_dir)?
            .iter()
            .filter_map(|n| n.strip_suffix(".json").and_then(|n| n.parse().ok()))
            .collect();
        ns.sort_unstable();
        Ok(ns)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    /// The absolute path of `rel` (no checks; for display and for readers outside the store).
    pub fn path(&self, rel: &RelPath) -> PathBuf {
        self.root.join(rel.as_path())
    }

    /// Writes `bytes` to `rel` atomically, creating parent directories.
    pub fn write_bytes(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        let _lock = self.lock(rel)?;
        self.write_locked(rel, bytes)
    }

    /// Writes a view, a file rebuilt from durable records (a task's `status.md`):
    /// atomically like [`Store::write_bytes`], but without waiting for the disk
    /// (no fsync). A killed process loses nothing; a power loss may leave an older
    /// version, or an empty file, until the next write.
    /// With deferred writes, the file is written off the caller's path.
    pub fn write_view(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        if let Some(d) = &self.deferred {
            return d.write(rel, bytes, false);
        }
        let _lock = self.lock(rel)?;
        self.write_view_locked(rel, bytes)
    }

    /// [`Store::write_view`] for a caller that already holds `rel`'s [`Store::lock`].
    pub fn write_view_locked(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        if let Some(d) = &self.deferred {
            return d.write(rel, bytes, false);
        }
        let dir = self.safe_dir(rel, true)?;
        self.write_in(&dir, rel, bytes, atomic::Sync::View)
    }

    /// [`Store::write_bytes`] for a caller that already holds `rel`'s [`Store::lock`].
    pub fn write_bytes_locked(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        self.write_locked(rel, bytes)
    }

    /// Writes `value` as JSON to `rel` atomically.
    pub fn write_json<T: Serialize>(&self, rel: &RelPath, value: &T) -> Result<()> {
        self.write_bytes(rel, to_pretty_json(value).as_bytes())
    }

    /// Writes `bytes` to `rel` only if nothing is there yet ([`Error::AlreadyExists`] otherwise).
    pub fn create_bytes(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        let _lock = self.lock(rel)?;
        if self.deferred.is_some() && self.exists(rel) {
            return Err(Error::AlreadyExists { path: rel.to_string() });
        }
        self.before_plain(&[(rel, Some(bytes))], true)?;
        let dir = self.safe_dir(rel, true)?;
        match fs::symlink_metadata(dir.join(rel.file_name())) {
            Ok(_) => Err(Error::AlreadyExists { path: rel.to_string() }),
            Err(e) if e.kind() == ErrorKind::NotFound => atomic::write(&dir, rel.file_name(), bytes),
            Err(e) => Err(Error::io(self.path(rel), e)),
        }
    }

    /// Appends `text` to a text file atomically (read, add, replace) under its lock,
    /// creating the file if it is missing (the GM's logs, a task's `errors.log`).
    pub fn append_text(&self, rel: &RelPath, text: &str) -> Result<()> {
        let _lock = self.lock(rel)?;
        let mut body = match self.read_bytes(rel) {
            Ok(b) => b,
            Err(Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        body.extend_from_slice(text.as_bytes());
        self.write_locked(rel, &body)
    }

    /// Reads, changes and writes back a JSON file under its lock; unknown fields survive.
    pub fn update_json<T: Format, R>(&self, rel: &RelPath, change: impl FnOnce(&mut T) -> R) -> Result<R> {
        self.update(rel, change, atomic::Sync::Durable)
    }

    /// [`Store::update_json`] for a view ([`Store::write_view`]: no fsync).
    pub fn update_view_json<T: Format, R>(&self, rel: &RelPath, change: impl FnOnce(&mut T) -> R) -> Result<R> {
        self.update(rel, change, atomic::Sync::View)
    }

    fn update<T: Format, R>(&self, rel: &RelPath, change: impl FnOnce(&mut T) -> R, sync: atomic::Sync) -> Result<R> {
        let _lock = self.lock(rel)?;
        let mut value: T = self.read(rel)?;
        let out = change(&mut value);
        match (&self.deferred, sync) {
            (Some(d), atomic::Sync::View) => d.write(rel, to_pretty_json(&value).as_bytes(), false)?,
            _ => {
                let dir = self.safe_dir(rel, true)?;
                self.write_in(&dir, rel, to_pretty_json(&value).as_bytes(), sync)?;
            }
        }
        Ok(out)
    }

    /// Reads the raw bytes of `rel`, refusing files over the size limit.
    pub fn read_bytes(&self, rel: &RelPath) -> Result<Vec<u8>> {
        if let Some(bytes) = self.deferred.as_ref().and_then(|d| d.read(rel)) {
            return Ok(bytes.to_vec());
        }
        let path = self.resolve_existing(rel)?;
        validate::read_tree_file(&path, self.max_file_bytes).map_err(|e| match e {
            Error::Invalid(mut refused) => {
                refused.file = rel.to_string();
                Error::Invalid(refused)
            }
            other => other,
        })
    }

    /// Reads and checks `rel` as a `T`, with the rules its path implies.
    pub fn read<T: Format>(&self, rel: &RelPath) -> Result<T> {
        let bytes = self.read_bytes(rel)?;
        let ctx = FileKind::infer(rel.as_path()).map(|(_, c)| c).unwrap_or_default();
        validate::parse(&rel.to_string(), &bytes, &ctx)
    }

    pub fn exists(&self, rel: &RelPath) -> bool {
        self.deferred.as_ref().is_some_and(|d| d.is_pending(rel)) || fs::symlink_metadata(self.path(rel)).is_ok()
    }

    /// Creates the directory `rel` (and parents); true if it was missing.
    pub fn ensure_dir(&self, rel: &RelPath) -> Result<bool> {
        let existed = self.path(rel).is_dir();
        self.safe_dir_all(rel.as_path(), true)?;
        Ok(!existed)
    }

    /// Every task directory with its parsed `task.json` (or why it could not be read).
    pub fn tasks(&self) -> Result<Vec<(String, Result<Task>)>> {
        let dir = self.root.join(layout::TASKS);
        let entries = fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !entry.file_type().map_err(|e| Error::io(entry.path(), e))?.is_dir() {
                continue;
            }
            let rel = RelPath::new(&layout::task_file(&name, layout::TASK_FILE));
            let task = rel.and_then(|rel| self.read::<Task>(&rel));
            if matches!(task, Err(Error::NotFound { .. })) {
                continue; // a directory without its task.json yet
            }
            out.push((name, task));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Removes temp files that writers which are no longer running left behind.
    pub fn recover(&self) -> Result<Vec<String>> {
        atomic::remove_stale_temps(&self.root)
    }

    fn write_locked(&self, rel: &RelPath, bytes: &[u8]) -> Result<()> {
        let dir = self.safe_dir(rel, true)?;
        self.write_in(&dir, rel, bytes, atomic::Sync::Durable)
    }

    fn write_in(&self, dir: &Path, rel: &RelPath, bytes: &[u8], sync: atomic::Sync) -> Result<()> {
        self.before_plain(&[(rel, Some(bytes))], sync == atomic::Sync::Durable)?;
        let path = rel.to_string();
        match &self.sink {
            None => atomic::write_observed(dir, rel.file_name(), bytes, sync, &mut |_| {}),
            Some(sink) => {
                atomic::write_observed(dir, rel.file_name(), bytes, sync, &mut |stamp| {
                    sink.expect(&path, stamp, self.origin)
                })?;
                sink.changed(&path, self.origin);
                Ok(())
            }
        }
    }

    /// Moves `from` to `to` (same filesystem, atomic), creating `to`'s directory.
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> Result<()> {
        // `to` with a record in the log: the moved content is logged as its own.
        let moved = match &self.deferred {
            Some(d) if d.is_logged(to) => Some(self.read_bytes(from)?),
            _ => None,
        };
        self.before_plain(&[(from, None), (to, moved.as_deref())], true)?;
        let src = self.resolve_existing(from)?;
        let dir = self.safe_dir(to, true)?;
        let dst = dir.join(to.file_name());
        if let Some(sink) = &self.sink {
            let meta = fs::symlink_metadata(&src).map_err(|e| Error::io(&src, e))?;
            sink.expect(&to.to_string(), Stamp::of(&meta), self.origin);
        }
        fs::rename(&src, &dst).map_err(|e| Error::io(&src, e))?;
        fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(&dir, e))?;
        if let Some(sink) = &self.sink {
            sink.changed(&from.to_string(), self.origin);
            sink.changed(&to.to_string(), self.origin);
        }
        Ok(())
    }

    /// Removes the file `rel`; a file already gone is not an error.
    pub fn remove(&self, rel: &RelPath) -> Result<()> {
        self.before_plain(&[(rel, None)], false)?;
        // Through the directories the way writes go: never into a link out of the root.
        let dir = match self.safe_dir(rel, false) {
            Ok(d) => d,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = dir.join(rel.file_name());
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, e)),
        }
        if let Some(sink) = &self.sink {
            sink.changed(&rel.to_string(), self.origin);
        }
        Ok(())
    }
}

#[cfg(test)]
mod modified_within_tests {
    use std::time::{Duration, SystemTime};

    use super::modified_within;

    #[test]
    fn a_time_far_ahead_is_not_a_writer_at_work() {
        let within = Duration::from_secs(2);
        let now = SystemTime::now();
        assert!(modified_within(now, within), "just written");
        assert!(modified_within(now + Duration::from_secs(1), within), "a little skew");
        assert!(!modified_within(now - Duration::from_secs(3), within), "settled");
        assert!(!modified_within(now + Duration::from_secs(3600), within), "an hour ahead: settled, not held");
    }
}
