//! The index: what the journal has recorded about every file (size and
//! modification time), so that a startup scan or an event-queue overflow can walk
//! the tree and emit exactly the changes the journal missed.
//!
//! It lives in memory; `.clawboard/index.json` is a snapshot taken at a journal
//! sequence number, and loading replays the journal after that number, so a stale
//! snapshot is never wrong, only slower to load.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::journal::{self, Change, ChangeKind, Journaled, Origin, is_ignored};
use crate::store::{to_pretty_json, write_atomic};

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

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Index {
    /// The journal sequence number this index reflects.
    pub seq: u64,
    pub files: HashMap<String, Stamp>,
}

const SNAPSHOT: &str = "index.json";

impl Index {
    /// Loads the snapshot from `state_dir` and replays the journal after it.
    pub fn load(state_dir: &Path, journal_dir: &Path) -> Result<Index> {
        let path = state_dir.join(SNAPSHOT);
        let mut index = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), "index snapshot unreadable ({e}); rebuilding from a full scan");
                Index::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
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

    /// Writes the snapshot atomically.
    pub fn save(&self, state_dir: &Path) -> Result<()> {
        write_atomic(state_dir, SNAPSHOT, to_pretty_json(self).as_bytes())
    }

    pub fn apply(&mut self, e: &Journaled) {
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
    pub fn change_for(&self, path: &str, now: Option<Stamp>, origin: Origin) -> Option<Change> {
        match (self.files.get(path), now) {
            (Some(old), Some(new)) if *old == new => None,
            (_, Some(new)) => Some(Change {
                path: path.to_owned(),
                kind: ChangeKind::Put,
                origin,
                size: Some(new.size),
                mtime_ns: Some(new.mtime_ns),
            }),
            (Some(_), None) => {
                Some(Change { path: path.to_owned(), kind: ChangeKind::Delete, origin, size: None, mtime_ns: None })
            }
            (None, None) => None,
        }
    }

    /// Walks `dir` (a directory under `root`, or `root` itself) and returns the changes
    /// the index does not know of: new or changed files, and, when `deletions`,
    /// files the index has under `dir` that are gone.
    pub fn scan(&self, root: &Path, dir: &Path, deletions: bool) -> Result<Vec<Change>> {
        let mut seen = std::collections::HashSet::new();
        let mut changes = Vec::new();
        if !crate::store::real_dir(root, &dir.strip_prefix(root).unwrap_or(dir).to_string_lossy()) {
            return Ok(Vec::new()); // a link to a directory: not walked into
        }
        let walker =
            walkdir::WalkDir::new(dir).follow_links(false).follow_root_links(dir == root).into_iter().filter_entry(
                |e| {
                    let rel = e.path().strip_prefix(root).unwrap_or(e.path());
                    rel.as_os_str().is_empty() || !is_ignored(&rel.to_string_lossy())
                },
            );
        for entry in walker {
            let entry = match entry {
                Ok(e) => e,
                // Vanished while walking: the watcher reports the removal.
                Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => {
                    continue;
                }
                Err(e) => {
                    let path = e.path().map(Path::to_owned).unwrap_or_else(|| dir.to_owned());
                    return Err(Error::io(path, e.into()));
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(root) else {
                continue;
            };
            let rel = rel.to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            if let Some(c) = self.change_for(&rel, Some(Stamp::of(&meta)), Origin::Local) {
                changes.push(c);
            }
            seen.insert(rel);
        }
        if deletions {
            let prefix = dir.strip_prefix(root).unwrap_or(Path::new("")).to_string_lossy().into_owned();
            for path in self.files.keys() {
                let under = prefix.is_empty() || path.starts_with(&format!("{prefix}/"));
                if under && !seen.contains(path) {
                    changes.push(Change {
                        path: path.clone(),
                        kind: ChangeKind::Delete,
                        origin: Origin::Local,
                        size: None,
                        mtime_ns: None,
                    });
                }
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changes)
    }
}

/// Brings the journal up to date with the tree by a scan, as a daemon does when it
/// starts; returns how many changes it journaled. The caller must be the journal's
/// only writer (it holds `.clawboard/daemon.lock`).
pub fn catch_up(root: &Path) -> Result<usize> {
    let state_dir = root.join(crate::layout::STATE);
    let journal_dir = state_dir.join("journal");
    let mut journal = journal::Journal::open(&journal_dir)?;
    // A lost journal: every file is journaled again (see `Journal::lost`).
    let mut index = if journal.lost() { Index::default() } else { Index::load(&state_dir, &journal_dir)? };
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
        let reloaded = Index::load(state.path(), &jdir).unwrap();
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
}
