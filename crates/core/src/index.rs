//! The index: what the journal has recorded about every file (size and
//! modification time), so that a startup scan or an event-queue overflow can walk
//! the tree and emit exactly the changes the journal missed.
//!
//! It lives in memory; `.clawboard/index.json` is a snapshot taken at a journal
//! sequence number, and loading replays the journal after that number, so a stale
//! snapshot is never wrong, only slower to load. Task directories that stopped
//! changing are frozen out of memory (see [`Index`]).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::journal::{self, Change, ChangeKind, Journaled, Origin, is_ignored};
use crate::store::write_atomic;

/// Size and modification time (ns since the epoch) of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i64,
}

impl Stamp {
    pub fn of(meta: &fs::Metadata) -> Stamp {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Stamp { size: meta.len(), mtime_ns }
    }
}

/// The index. Files of finished work are most of a month's tree and never
/// change again; a task directory (`tasks/{id}`) none of whose files changed for
/// [`FREEZE_AFTER`] is *frozen* at a snapshot: its files' stamps move to a record
/// of their own (`.clawboard/frozen/{id}.json`) and the index keeps only their
/// count and a digest. A scan compares a frozen directory by its digest; any
/// change under it (a journal entry, an event, a digest that differs) thaws it
/// first, from its record, so every answer stays exact.
#[derive(Debug, Default)]
pub struct Index {
    /// The journal sequence number this index reflects.
    pub seq: u64,
    /// The stamps of every file outside frozen directories.
    files: HashMap<String, Stamp>,
    /// Frozen task directories, by path (`tasks/{id}`).
    frozen: HashMap<String, Frozen>,
    /// Where frozen directories' records are kept; `None`: nothing is frozen.
    state_dir: Option<PathBuf>,
    /// Directories thawed since the last snapshot: their records go once the
    /// snapshot that no longer lists them is written.
    thawed: HashSet<String>,
    /// Records on disk may be stale (the snapshot was lost): the next snapshot
    /// removes every record it does not list.
    sweep: bool,
    /// Directories thawed, and frozen, since the watcher last asked
    /// ([`Index::take_thawed`], [`Index::take_frozen`]): it watches the first
    /// again and may stop watching the second.
    thawed_now: Vec<String>,
    frozen_now: Vec<String>,
}

/// A frozen task directory: how many files it holds and their digest ([`digest`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Frozen {
    files: u32,
    digest: String,
}

/// The snapshot as written (`files` and `frozen` borrowed) and read.
#[derive(Serialize)]
struct SnapshotOut<'a> {
    seq: u64,
    files: &'a HashMap<String, Stamp>,
    frozen: &'a HashMap<String, Frozen>,
}

#[derive(Deserialize)]
struct SnapshotIn {
    seq: u64,
    files: HashMap<String, Stamp>,
    #[serde(default)]
    frozen: HashMap<String, Frozen>,
}

/// A frozen directory's record: the stamps of its files.
#[derive(Deserialize)]
struct Record {
    files: HashMap<String, Stamp>,
}

#[derive(Serialize)]
struct RecordOut<'a> {
    files: &'a HashMap<&'a str, Stamp>,
}

const SNAPSHOT: &str = "index.json";
/// Frozen directories' records, under the state directory.
const FROZEN_DIR: &str = "frozen";
/// A task directory none of whose files changed for this long is frozen at the next snapshot.
pub const FREEZE_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The task directory (`tasks/{id}`) a path is in, if any (the directory itself included).
fn task_dir(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("tasks/")?;
    let id_len = rest.find('/').unwrap_or(rest.len());
    (id_len > 0).then(|| &path[..6 + id_len])
}

/// The digest of a directory's files: their paths, sizes and modification times,
/// in path order.
fn digest<'a>(files: impl IntoIterator<Item = (&'a str, Stamp)>) -> (u32, String) {
    let mut sorted: Vec<(&str, Stamp)> = files.into_iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut h = blake3::Hasher::new();
    for (path, stamp) in &sorted {
        h.update(path.as_bytes());
        h.update(&[0]);
        h.update(&stamp.size.to_le_bytes());
        h.update(&stamp.mtime_ns.to_le_bytes());
    }
    let n = u32::try_from(sorted.len()).unwrap_or(u32::MAX);
    (n, h.finalize().to_hex()[..32].to_owned())
}

impl Index {
    /// An empty index whose snapshots are kept in `state_dir` (and may freeze).
    pub fn new(state_dir: &Path) -> Index {
        Index { state_dir: Some(state_dir.to_owned()), sweep: true, ..Index::default() }
    }

    /// Loads the snapshot from `state_dir` and replays the journal after it.
    pub fn load(state_dir: &Path, journal_dir: &Path) -> Result<Index> {
        let path = state_dir.join(SNAPSHOT);
        let mut index = match fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<SnapshotIn>(&bytes) {
                // `sweep`: a record written just before a crash, which no snapshot names, goes.
                Ok(s) => Index {
                    seq: s.seq,
                    files: s.files,
                    frozen: s.frozen,
                    state_dir: Some(state_dir.to_owned()),
                    sweep: true,
                    ..Index::default()
                },
                Err(e) => {
                    tracing::warn!(file = %path.display(), "index snapshot unreadable ({e}); rebuilding from a full scan");
                    Index::new(state_dir)
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::new(state_dir),
            Err(e) => return Err(Error::io(&path, e)),
        };
        loop {
            let batch = journal::read_after(journal_dir, index.seq, 10_000)?;
            if batch.is_empty() {
                break;
            }
            for e in &batch {
                index.apply(e);
            }
        }
        Ok(index)
    }

    /// Freezes the task directories that have been quiet for [`FREEZE_AFTER`],
    /// then writes the snapshot atomically: the records it names are written
    /// before it, the records it no longer names removed after it.
    pub fn save(&mut self, state_dir: &Path) -> Result<()> {
        if self.state_dir.is_some() {
            self.freeze_quiet(state_dir, std::time::SystemTime::now())?;
        }
        let snapshot = SnapshotOut { seq: self.seq, files: &self.files, frozen: &self.frozen };
        let bytes = serde_json::to_vec(&snapshot).map_err(|e| Error::io(state_dir.join(SNAPSHOT), e.into()))?;
        write_atomic(state_dir, SNAPSHOT, &bytes)?;
        self.remove_stale_records(state_dir)
    }

    /// How many files the index knows of, frozen ones included.
    pub fn len(&self) -> usize {
        self.files.len() + self.frozen.values().map(|f| f.files as usize).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stamp the index has for `path` (thawing its directory if frozen).
    pub fn stamp(&mut self, path: &str) -> Option<Stamp> {
        self.thaw_for(path);
        self.files.get(path).copied()
    }

    /// How many task directories are frozen.
    pub fn frozen_dirs(&self) -> usize {
        self.frozen.len()
    }

    /// Whether the task directory `task` (`tasks/{id}`) is frozen.
    pub fn is_frozen(&self, task: &str) -> bool {
        self.frozen.contains_key(task)
    }

    /// The frozen task directories.
    pub fn frozen(&self) -> impl Iterator<Item = &str> {
        self.frozen.keys().map(String::as_str)
    }

    /// The task directories thawed since the last call.
    pub fn take_thawed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.thawed_now)
    }

    /// The task directories frozen since the last call.
    pub fn take_frozen(&mut self) -> Vec<String> {
        std::mem::take(&mut self.frozen_now)
    }

    pub fn apply(&mut self, e: &Journaled) {
        self.thaw_for(&e.change.path);
        match e.change.kind {
            ChangeKind::Put => {
                let stamp = Stamp { size: e.change.size.unwrap_or(0), mtime_ns: e.change.mtime_ns.unwrap_or(0) };
                self.files.insert(e.change.path.clone(), stamp);
            }
            ChangeKind::Delete => {
                self.files.remove(&e.change.path);
            }
        }
        self.seq = self.seq.max(e.seq);
    }

    /// The change that `path` now having `now` (None: gone) would be, if any.
    pub fn change_for(&mut self, path: &str, now: Option<Stamp>, origin: Origin) -> Option<Change> {
        self.thaw_for(path);
        self.known_change(path, now, origin)
    }

    fn known_change(&self, path: &str, now: Option<Stamp>, origin: Origin) -> Option<Change> {
        match (self.files.get(path), now) {
            (Some(old), Some(new)) if *old == new => None,
            (_, Some(new)) => Some(Change {
                path: path.to_owned(),
                kind: ChangeKind::Put,
                origin,
                size: Some(new.size),
                mtime_ns: Some(new.mtime_ns),
            }),
            (Some(_), None) => Some(delete(path)),
            (None, None) => None,
        }
    }

    /// Walks `dir` (a directory under `root`, or `root` itself) and returns the changes
    /// the index does not know of: new or changed files, and, when `deletions`,
    /// files the index has under `dir` that are gone. A frozen directory is
    /// compared by its digest, and thawed only when that differs.
    pub fn scan(&mut self, root: &Path, dir: &Path, deletions: bool) -> Result<Vec<Change>> {
        self.scan_with(root, dir, deletions, true)
    }

    /// [`Index::scan`], taking every frozen directory it meets as unchanged
    /// without walking it: a start that leaves them to [`Index::verify_frozen`].
    /// A frozen directory that is gone is still found (its deletions).
    pub fn scan_trusting_frozen(&mut self, root: &Path, dir: &Path, deletions: bool) -> Result<Vec<Change>> {
        self.scan_with(root, dir, deletions, false)
    }

    /// Compares the frozen directory `task` with the tree: nothing when its
    /// digest holds; else it is thawed and its changes returned (every file's
    /// deletion when the directory is gone).
    pub fn verify_frozen(&mut self, root: &Path, task: &str) -> Result<Vec<Change>> {
        if !self.frozen.contains_key(task) {
            return Ok(Vec::new());
        }
        if !crate::store::real_dir(root, task) {
            let mut known = self.thaw(task);
            known.sort();
            return Ok(known.iter().map(|p| delete(p)).collect());
        }
        let files = files_under(root, task)?;
        let mut changes = self.compare_frozen(task, files, true);
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }

    /// The deletions of every file the index has under `rel_dir`, once that
    /// directory is gone (an unwatched directory removed whole gives one event).
    pub fn removed_dir(&mut self, root: &Path, rel_dir: &str) -> Vec<Change> {
        if crate::store::real_dir(root, rel_dir) {
            return Vec::new();
        }
        let mut changes = self.gone_under(rel_dir, &HashSet::new(), &HashSet::new());
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes
    }

    fn scan_with(&mut self, root: &Path, dir: &Path, deletions: bool, walk_frozen: bool) -> Result<Vec<Change>> {
        let rel_dir = dir.strip_prefix(root).unwrap_or(dir).to_string_lossy().into_owned();
        if !crate::store::real_dir(root, &rel_dir) {
            return Ok(Vec::new()); // a link to a directory: not walked into
        }
        if let Some(task) = task_dir(&rel_dir) {
            let task = task.to_owned();
            self.thaw(&task); // a scan inside a frozen directory: something changed there
        }
        let mut found = Vec::new();
        let mut frozen_seen = Vec::new();
        walk(root, dir, &self.frozen, &mut found, &mut frozen_seen)?;
        // Each frozen directory is walked and compared on its own, so a month of
        // them never holds its files' stamps in memory at once.
        let mut changes = Vec::new();
        let mut seen = HashSet::with_capacity(found.len());
        for (rel, stamp) in found {
            if let Some(c) = self.known_change(&rel, Some(stamp), Origin::Local) {
                changes.push(c);
            }
            seen.insert(rel);
        }
        let mut frozen_present = HashSet::new();
        for task in frozen_seen {
            if walk_frozen {
                let files = files_under(root, &task)?;
                changes.extend(self.compare_frozen(&task, files, deletions));
            }
            frozen_present.insert(task);
        }
        if deletions {
            changes.extend(self.gone_under(&rel_dir, &seen, &frozen_present));
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }

    /// A frozen directory's files as a scan found them: nothing when its digest
    /// is the same; else it is thawed and compared file by file.
    fn compare_frozen(&mut self, task: &str, files: Vec<(String, Stamp)>, deletions: bool) -> Vec<Change> {
        let same = self.frozen.get(task).is_some_and(|f| {
            let (n, d) = digest(files.iter().map(|(p, s)| (p.as_str(), *s)));
            f.files == n && f.digest == d
        });
        if same {
            return Vec::new();
        }
        let known = self.thaw(task);
        let mut changes: Vec<Change> =
            files.iter().filter_map(|(p, s)| self.known_change(p, Some(*s), Origin::Local)).collect();
        if deletions {
            let present: HashSet<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            changes.extend(known.iter().filter(|p| !present.contains(p.as_str())).map(|p| delete(p)));
        }
        changes
    }

    /// Deletions for what the index has under `rel_dir` that a scan did not see:
    /// live files, and frozen directories that are gone whole.
    fn gone_under(&mut self, rel_dir: &str, seen: &HashSet<String>, frozen_present: &HashSet<String>) -> Vec<Change> {
        let under = |path: &str| rel_dir.is_empty() || path.starts_with(&format!("{rel_dir}/"));
        let gone_frozen: Vec<String> = self
            .frozen
            .keys()
            .filter(|t| (*t == rel_dir || under(t)) && !frozen_present.contains(*t))
            .cloned()
            .collect();
        for task in &gone_frozen {
            self.thaw(task);
        }
        // A frozen directory the scan met was compared on its own (compare_frozen).
        self.files
            .keys()
            .filter(|p| under(p) && !seen.contains(*p))
            .filter(|p| !task_dir(p).is_some_and(|t| frozen_present.contains(t)))
            .map(|p| delete(p))
            .collect()
    }

    /// Thaws the task directory `path` is in, if it is frozen.
    fn thaw_for(&mut self, path: &str) {
        if self.frozen.is_empty() {
            return;
        }
        if let Some(task) = task_dir(path).filter(|t| self.frozen.contains_key(*t)) {
            let task = task.to_owned();
            self.thaw(&task);
        }
    }

    /// Brings a frozen directory's stamps back from its record. A record that
    /// cannot be read leaves its files unknown: the next scan journals them again.
    /// Returns the paths it brought back.
    fn thaw(&mut self, task: &str) -> Vec<String> {
        let Some(frozen) = self.frozen.remove(task) else { return Vec::new() };
        self.thawed.insert(task.to_owned());
        self.thawed_now.push(task.to_owned());
        let Some(path) = self.record_path(task) else { return Vec::new() };
        let record = fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()));
        match record {
            Ok(r) => {
                let paths = r.files.keys().cloned().collect();
                self.files.extend(r.files);
                paths
            }
            Err(e) => {
                tracing::warn!(
                    file = %path.display(),
                    files = frozen.files,
                    "a frozen directory's record cannot be read ({e}); its files will be journaled again"
                );
                Vec::new()
            }
        }
    }

    fn record_path(&self, task: &str) -> Option<PathBuf> {
        let id = task.strip_prefix("tasks/")?;
        Some(self.state_dir.as_ref()?.join(FROZEN_DIR).join(format!("{id}.json")))
    }

    /// Freezes every task directory whose files are all older than [`FREEZE_AFTER`] at `now`.
    fn freeze_quiet(&mut self, state_dir: &Path, now: std::time::SystemTime) -> Result<()> {
        let cutoff = now
            .checked_sub(FREEZE_AFTER)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let mut by_task: HashMap<&str, (i64, Vec<&String>)> = HashMap::new();
        for (path, stamp) in &self.files {
            if let Some(task) = task_dir(path).filter(|t| t.len() < path.len()) {
                let (newest, paths) = by_task.entry(task).or_insert((i64::MIN, Vec::new()));
                *newest = (*newest).max(stamp.mtime_ns);
                paths.push(path);
            }
        }
        let quiet: Vec<(String, Vec<String>)> = by_task
            .into_iter()
            .filter(|(_, (newest, _))| *newest < cutoff)
            .map(|(task, (_, paths))| (task.to_owned(), paths.into_iter().cloned().collect()))
            .collect();
        if quiet.is_empty() {
            return Ok(());
        }
        let dir = state_dir.join(FROZEN_DIR);
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        // Written unsynced (a month's tree at a first start freezes tens of thousands),
        // then made durable at once, before the snapshot that names them.
        let mut records = Vec::with_capacity(quiet.len());
        for (task, paths) in &quiet {
            records.push(self.write_record(&dir, task, paths)?);
        }
        crate::store::sync_file_system(&dir)?;
        for ((task, paths), frozen) in quiet.into_iter().zip(records) {
            for p in &paths {
                self.files.remove(p.as_str());
            }
            self.thawed.remove(&task);
            self.frozen_now.push(task.clone());
            self.frozen.insert(task, frozen);
        }
        Ok(())
    }

    /// Writes the record of `task`, whose files are `paths`: what freezing it leaves in memory.
    fn write_record(&self, dir: &Path, task: &str, paths: &[String]) -> Result<Frozen> {
        let id = task.strip_prefix("tasks/").unwrap_or(task);
        let files: HashMap<&str, Stamp> =
            paths.iter().filter_map(|p| Some((p.as_str(), *self.files.get(p.as_str())?))).collect();
        let (n, d) = digest(files.iter().map(|(p, s)| (*p, *s)));
        let name = format!("{id}.json");
        let bytes =
            serde_json::to_vec(&RecordOut { files: &files }).map_err(|e| Error::io(dir.join(&name), e.into()))?;
        crate::store::write_atomic_unsynced(dir, &name, &bytes)?;
        Ok(Frozen { files: n, digest: d })
    }

    /// Removes the records of directories thawed since (or, after a lost
    /// snapshot, every record the snapshot does not name).
    fn remove_stale_records(&mut self, state_dir: &Path) -> Result<()> {
        let dir = state_dir.join(FROZEN_DIR);
        let stale: Vec<String> = if self.sweep {
            match fs::read_dir(&dir) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| {
                        n.strip_suffix(".json").is_none_or(|id| !self.frozen.contains_key(&format!("tasks/{id}")))
                    })
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(Error::io(&dir, e)),
            }
        } else {
            self.thawed
                .iter()
                .filter(|t| !self.frozen.contains_key(*t))
                .filter_map(|t| t.strip_prefix("tasks/").map(|id| format!("{id}.json")))
                .collect()
        };
        for name in stale {
            match fs::remove_file(dir.join(&name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(dir.join(&name), e)),
            }
        }
        self.thawed.clear();
        self.sweep = false;
        Ok(())
    }
}

fn delete(path: &str) -> Change {
    Change { path: path.to_owned(), kind: ChangeKind::Delete, origin: Origin::Local, size: None, mtime_ns: None }
}

/// Walks `dir`: the regular files outside frozen directories go to `found`; the
/// frozen directories met (not walked into) to `frozen_seen`.
fn walk(
    root: &Path,
    dir: &Path,
    frozen: &HashMap<String, Frozen>,
    found: &mut Vec<(String, Stamp)>,
    frozen_seen: &mut Vec<String>,
) -> Result<()> {
    let walker =
        walkdir::WalkDir::new(dir).follow_links(false).follow_root_links(dir == root).into_iter().filter_entry(|e| {
            let rel = e.path().strip_prefix(root).unwrap_or(e.path());
            let rel = rel.to_string_lossy();
            if e.file_type().is_dir() && !frozen.is_empty() && frozen.contains_key(rel.as_ref()) && e.path() != dir {
                frozen_seen.push(rel.into_owned());
                return false;
            }
            rel.is_empty() || !is_ignored(&rel)
        });
    files_of(root, dir, walker, found)
}

/// The regular files under `root/rel` (a frozen directory), with their stamps.
fn files_under(root: &Path, rel: &str) -> Result<Vec<(String, Stamp)>> {
    let mut files = Vec::new();
    let path = root.join(rel);
    let walker = walkdir::WalkDir::new(&path).follow_links(false).into_iter().filter_entry(|e| {
        let rel = e.path().strip_prefix(root).unwrap_or(e.path());
        !is_ignored(&rel.to_string_lossy())
    });
    files_of(root, &path, walker, &mut files)?;
    Ok(files)
}

/// The regular files a walk yields, with their stamps.
fn files_of<I>(root: &Path, dir: &Path, walker: I, out: &mut Vec<(String, Stamp)>) -> Result<()>
where
    I: Iterator<Item = walkdir::Result<walkdir::DirEntry>>,
{
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            // Vanished while walking: the watcher reports the removal.
            Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => continue,
            Err(e) => {
                let path = e.path().map(Path::to_owned).unwrap_or_else(|| dir.to_owned());
                return Err(Error::io(path, e.into()));
            }
        };
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else { continue };
        let rel = rel.to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        out.push((rel, Stamp::of(&meta)));
    }
    Ok(())
}

/// Brings the journal up to date with the tree by a scan, as a daemon does when it
/// starts; returns how many changes it journaled. The caller must be the journal's
/// only writer (it holds `.clawboard/daemon.lock`).
pub fn catch_up(root: &Path) -> Result<usize> {
    let state_dir = root.join(crate::layout::STATE);
    let journal_dir = state_dir.join("journal");
    let mut journal = journal::Journal::open(&journal_dir)?;
    // A lost journal: every file is journaled again (see `Journal::lost`).
    let mut index = if journal.lost() { Index::new(&state_dir) } else { Index::load(&state_dir, &journal_dir)? };
    let changes = index.scan(root, root, true)?;
    let n = changes.len();
    for e in journal.append(changes)? {
        index.apply(&e);
    }
    if n > 0 {
        index.save(&state_dir)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;

    /// The journal deleted (under a running daemon, say): a catch-up numbers on
    /// above every cursor and journals the whole tree again, the file dropped just
    /// before the loss too, which the old snapshot listed as known.
    #[test]
    fn a_lost_journal_numbers_on_above_the_cursors_and_is_rebuilt_whole() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let state = root.join(crate::layout::STATE);
        std::fs::create_dir_all(root.join("inbox")).unwrap();
        std::fs::write(root.join("inbox/a.json"), "{}").unwrap();
        assert_eq!(catch_up(root).unwrap(), 1);
        crate::journal::Cursor::new(&state.join("cursors"), "push").store(127).unwrap();
        std::fs::write(root.join("inbox/b.json"), "{}").unwrap();
        assert_eq!(catch_up(root).unwrap(), 1);
        std::fs::remove_dir_all(state.join("journal")).unwrap();
        assert_eq!(catch_up(root).unwrap(), 2, "both files journaled again");
        let entries = crate::journal::read_after(&state.join("journal"), 0, 10).unwrap();
        assert!(entries.iter().all(|e| e.seq > 127), "{entries:?}");
        assert_eq!(catch_up(root).unwrap(), 0, "then nothing more");
    }

    #[test]
    fn scan_emits_only_what_the_journal_missed() {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let jdir = state.path().join("journal");
        std::fs::create_dir_all(root.path().join("tasks/t1")).unwrap();
        std::fs::write(root.path().join("tasks/t1/task.json"), "{}").unwrap();
        std::fs::write(root.path().join("tasks/t1/.x.swp"), "swap").unwrap();
        std::fs::create_dir_all(root.path().join(".clawboard")).unwrap();
        std::fs::write(root.path().join(".clawboard/secret"), "x").unwrap();

        let mut index = Index::load(state.path(), &jdir).unwrap();
        let changes = index.scan(root.path(), root.path(), true).unwrap();
        assert_eq!(changes.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), vec!["tasks/t1/task.json"]);

        let mut j = Journal::open(&jdir).unwrap();
        for e in j.append(changes).unwrap() {
            index.apply(&e);
        }
        assert!(index.scan(root.path(), root.path(), true).unwrap().is_empty(), "nothing changed since");

        index.save(state.path()).unwrap();
        std::fs::write(root.path().join("gm.md"), "new").unwrap();
        std::fs::remove_file(root.path().join("tasks/t1/task.json")).unwrap();
        let mut reloaded = Index::load(state.path(), &jdir).unwrap();
        let changes = reloaded.scan(root.path(), root.path(), true).unwrap();
        let got: Vec<_> = changes.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        assert_eq!(got, vec![("gm.md", ChangeKind::Put), ("tasks/t1/task.json", ChangeKind::Delete)]);
    }

    #[test]
    fn load_replays_the_journal_after_a_stale_snapshot() {
        let state = tempfile::tempdir().unwrap();
        let jdir = state.path().join("journal");
        let mut j = Journal::open(&jdir).unwrap();
        let mut index = Index::default();
        let put = |p: &str| Change {
            path: p.into(),
            kind: ChangeKind::Put,
            origin: Origin::Local,
            size: Some(3),
            mtime_ns: Some(9),
        };
        for e in j.append(vec![put("a")]).unwrap() {
            index.apply(&e);
        }
        index.save(state.path()).unwrap();
        j.append(vec![put("b")]).unwrap();
        let loaded = Index::load(state.path(), &jdir).unwrap();
        assert_eq!(loaded.seq, 2);
        assert!(loaded.files.contains_key("a") && loaded.files.contains_key("b"));
    }

    /// A tree of two finished tasks, journaled and indexed, both frozen.
    fn frozen_tree() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Index) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_owned();
        let state = root.join(crate::layout::STATE);
        for t in ["t1", "t2"] {
            std::fs::create_dir_all(root.join(format!("tasks/{t}/attempts"))).unwrap();
            std::fs::write(root.join(format!("tasks/{t}/task.json")), "{}").unwrap();
            std::fs::write(root.join(format!("tasks/{t}/attempts/0001-pm.json")), "{}").unwrap();
        }
        std::fs::create_dir_all(root.join("gm")).unwrap();
        std::fs::write(root.join("gm/note.md"), "n").unwrap();
        assert_eq!(catch_up(&root).unwrap(), 5);
        let mut index = Index::load(&state, &state.join("journal")).unwrap();
        let later = std::time::SystemTime::now() + FREEZE_AFTER * 2;
        index.freeze_quiet(&state, later).unwrap();
        index.save(&state).unwrap();
        assert_eq!(index.frozen_dirs(), 2);
        assert_eq!((index.files.len(), index.len()), (1, 5), "only gm/note.md stays in memory");
        (d, root, state, index)
    }

    fn paths(changes: &[Change]) -> Vec<(&str, ChangeKind)> {
        changes.iter().map(|c| (c.path.as_str(), c.kind)).collect()
    }

    #[test]
    fn frozen_task_directories_leave_memory_and_a_scan_finds_them_unchanged() {
        let (_d, root, state, _) = frozen_tree();
        let mut loaded = Index::load(&state, &state.join("journal")).unwrap();
        assert_eq!((loaded.frozen_dirs(), loaded.len()), (2, 5));
        assert!(loaded.scan(&root, &root, true).unwrap().is_empty());
        assert_eq!(loaded.frozen_dirs(), 2, "an unchanged digest thaws nothing");
        assert!(state.join("frozen/t1.json").is_file());
    }

    #[test]
    fn a_change_under_a_frozen_directory_is_found_exactly() {
        let (_d, root, _state, mut index) = frozen_tree();
        std::fs::write(root.join("tasks/t1/attempts/0001-pm.json"), "{\"changed\": true}").unwrap();
        std::fs::write(root.join("tasks/t1/attempts/0002-w.json"), "{}").unwrap();
        std::fs::remove_file(root.join("tasks/t1/task.json")).unwrap();
        let changes = index.scan(&root, &root, true).unwrap();
        assert_eq!(
            paths(&changes),
            vec![
                ("tasks/t1/attempts/0001-pm.json", ChangeKind::Put),
                ("tasks/t1/attempts/0002-w.json", ChangeKind::Put),
                ("tasks/t1/task.json", ChangeKind::Delete),
            ]
        );
        assert_eq!(index.frozen_dirs(), 1, "t1 thawed, t2 still frozen");
    }

    #[test]
    fn a_scan_trusting_frozen_directories_leaves_them_to_their_verification() {
        let (_d, root, _state, mut index) = frozen_tree();
        let mut frozen = index.take_frozen();
        frozen.sort();
        assert_eq!(frozen, ["tasks/t1", "tasks/t2"], "the watcher is told what froze");
        std::fs::write(root.join("tasks/t1/attempts/0002-w.json"), "{}").unwrap();
        std::fs::write(root.join("gm/other.md"), "o").unwrap();
        let changes = index.scan_trusting_frozen(&root, &root, true).unwrap();
        assert_eq!(paths(&changes), vec![("gm/other.md", ChangeKind::Put)], "t1 is not walked");
        assert_eq!(index.frozen_dirs(), 2);
        assert!(index.verify_frozen(&root, "tasks/t2").unwrap().is_empty());
        let found = index.verify_frozen(&root, "tasks/t1").unwrap();
        assert_eq!(paths(&found), vec![("tasks/t1/attempts/0002-w.json", ChangeKind::Put)]);
        assert_eq!(index.take_thawed(), ["tasks/t1"], "the watcher is told what thawed");
        assert!(index.verify_frozen(&root, "tasks/t1").unwrap().is_empty(), "no longer frozen: nothing to verify");
        // Gone whole: every file's deletion, by the verification or by its removal's event.
        std::fs::remove_dir_all(root.join("tasks/t2")).unwrap();
        assert!(index.removed_dir(&root, "tasks/t1").is_empty(), "t1 is still there");
        let gone = index.removed_dir(&root, "tasks/t2");
        assert_eq!(
            paths(&gone),
            vec![("tasks/t2/attempts/0001-pm.json", ChangeKind::Delete), ("tasks/t2/task.json", ChangeKind::Delete)]
        );
    }

    #[test]
    fn a_frozen_directory_gone_is_deleted_by_its_verification() {
        let (_d, root, _state, mut index) = frozen_tree();
        std::fs::remove_dir_all(root.join("tasks/t2")).unwrap();
        let gone = index.verify_frozen(&root, "tasks/t2").unwrap();
        assert_eq!(
            paths(&gone),
            vec![("tasks/t2/attempts/0001-pm.json", ChangeKind::Delete), ("tasks/t2/task.json", ChangeKind::Delete)]
        );
    }

    #[test]
    fn a_frozen_directory_removed_whole_is_journaled_as_deletes() {
        let (_d, root, state, mut index) = frozen_tree();
        std::fs::remove_dir_all(root.join("tasks/t2")).unwrap();
        let changes = index.scan(&root, &root, true).unwrap();
        assert_eq!(
            paths(&changes),
            vec![("tasks/t2/attempts/0001-pm.json", ChangeKind::Delete), ("tasks/t2/task.json", ChangeKind::Delete)]
        );
        let mut j = Journal::open(&state.join("journal")).unwrap();
        for e in j.append(changes).unwrap() {
            index.apply(&e);
        }
        index.save(&state).unwrap();
        assert!(!state.join("frozen/t2.json").exists(), "the record of a directory gone goes");
        assert!(state.join("frozen/t1.json").is_file());
        assert_eq!(Index::load(&state, &state.join("journal")).unwrap().len(), 3);
    }

    #[test]
    fn a_journal_entry_under_a_frozen_directory_thaws_it() {
        let (_d, root, state, mut index) = frozen_tree();
        std::fs::write(root.join("tasks/t1/result.json"), "{}").unwrap();
        let meta = std::fs::metadata(root.join("tasks/t1/result.json")).unwrap();
        let c = index.change_for("tasks/t1/result.json", Some(Stamp::of(&meta)), Origin::Local).unwrap();
        let mut j = Journal::open(&state.join("journal")).unwrap();
        for e in j.append(vec![c]).unwrap() {
            index.apply(&e);
        }
        assert_eq!((index.frozen_dirs(), index.len()), (1, 6));
        assert!(index.stamp("tasks/t1/task.json").is_some(), "its other files came back from the record");
        // Saved now (t1 changed just now, so it stays thawed), its old record goes.
        index.save(&state).unwrap();
        assert!(!state.join("frozen/t1.json").exists());
        let mut loaded = Index::load(&state, &state.join("journal")).unwrap();
        assert_eq!(loaded.len(), 6);
        assert!(loaded.scan(&root, &root, true).unwrap().is_empty());
    }

    #[test]
    fn an_unreadable_record_leaves_its_files_to_be_journaled_again() {
        let (_d, root, state, mut index) = frozen_tree();
        std::fs::write(state.join("frozen/t1.json"), "not json").unwrap();
        std::fs::write(root.join("tasks/t1/task.json"), "{\"x\": 1}").unwrap();
        let changes = index.scan(&root, &root, true).unwrap();
        assert_eq!(
            paths(&changes),
            vec![("tasks/t1/attempts/0001-pm.json", ChangeKind::Put), ("tasks/t1/task.json", ChangeKind::Put)]
        );
    }

    #[test]
    fn task_dir_names_the_directory_of_a_task() {
        assert_eq!(task_dir("tasks/t1/board/x.json"), Some("tasks/t1"));
        assert_eq!(task_dir("tasks/t1"), Some("tasks/t1"));
        assert_eq!(task_dir("tasks/"), None);
        assert_eq!(task_dir("gm/tasks/t1"), None);
    }
}
