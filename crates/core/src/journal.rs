//! The change journal: every change to the tree, in order, durable.
//!
//! Filesystem events, rescans and the daemon's own writes become [`Journaled`] changes with a
//! sequence number, appended as JSON lines to segment files in
//! `.clawboard/journal/` and fsync'd once per batch. Each consumer (intake, push,
//! audit, archive) keeps a [`Cursor`] and advances it only after its own work is
//! durable; after a crash it replays from its cursor. A line torn by a crash
//! mid-append was never acknowledged and is cut off on open.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{is_temp_name, to_pretty_json};

/// Entries per segment file before a new one is started.
pub const SEGMENT_ENTRIES: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Put,
    Delete,
}

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A person or program on this machine (seen by the watcher or a rescan).
    Local,
    /// This daemon, through the store.
    Daemon,
    /// Another node, applied by pull; never pushed back.
    Remote,
}

/// A change to be journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Relative to the root, `/`-separated.
    pub path: String,
    pub kind: ChangeKind,
    pub origin: Origin,
    /// Size and modification time (ns since the epoch) of a put, as the index records them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i64>,
}

/// A journaled change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journaled {
    pub seq: u64,
    #[serde(flatten)]
    pub change: Change,
}

/// Paths the journal never records: the daemon's state, temp files of atomic
/// writes, and editor swap/backup files (`*.swp`, `*~`, `.#*`, `*.tmp` …).
pub fn is_ignored(rel: &str) -> bool {
    if rel == crate::layout::STATE || rel.starts_with(".clawboard/") {
        return true;
    }
    let name = rel.rsplit('/').next().unwrap_or(rel);
    is_temp_name(name)
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".swo")
        || name.ends_with('~')
        || name.starts_with(".#")
        || name.ends_with(".tmp")
        || name == "4913" // vim's write test file
        || name == ".DS_Store"
}

/// The append side of the journal (one per daemon) and reads for replay.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    file: File,
    /// First sequence number of the open segment.
    segment_first: u64,
    next_seq: u64,
    /// Opened without a segment while consumers had read entries (see [`Journal::lost`]).
    lost: bool,
}

/// The highest sequence number anything beside the journal `dir` has recorded: the
/// consumers' cursors (`../cursors/*`) and the index snapshot (`../index.json`).
/// 0 when there is none, as in a new tree.
fn highest_recorded(dir: &Path) -> u64 {
    let Some(state) = dir.parent() else { return 0 };
    #[derive(Deserialize)]
    struct Seq {
        seq: u64,
    }
    let seq_of = |p: &Path| fs::read(p).ok().and_then(|b| serde_json::from_slice::<Seq>(&b).ok()).map_or(0, |s| s.seq);
    let cursors = fs::read_dir(state.join("cursors"))
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| seq_of(&e.path())).max().unwrap_or(0))
        .unwrap_or(0);
    cursors.max(seq_of(&state.join("index.json")))
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.jsonl")
}

fn segments(dir: &Path) -> Result<Vec<u64>> {
    let mut firsts = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if let Some(first) = e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).and_then(|n| n.parse().ok())
        {
            firsts.push(first);
        }
    }
    firsts.sort_unstable();
    Ok(firsts)
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, cutting off a torn last line.
    pub fn open(dir: &Path) -> Result<Journal> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let firsts = segments(dir)?;
        // No segment, but cursors past entries: the journal was lost (deleted under
        // a running daemon, say). Numbering goes on above what was recorded, or a
        // consumer would skip every new entry until the numbers caught up.
        let recorded = if firsts.is_empty() { highest_recorded(dir) } else { 0 };
        if recorded > 0 {
            tracing::warn!(
                journal = %dir.display(),
                "the journal is gone while its consumers had read up to entry {recorded}: numbering on from {}, \
                 and the whole tree is scanned again",
                recorded + 1
            );
        }
        let segment_first = firsts.last().copied().unwrap_or(recorded + 1);
        let path = dir.join(segment_name(segment_first));
        let mut file =
            OpenOptions::new().create(true).read(true).append(true).open(&path).map_err(|e| Error::io(&path, e))?;
        let (good_len, last_seq) = scan_segment(&path)?;
        if file.metadata().map_err(|e| Error::io(&path, e))?.len() != good_len {
            tracing::warn!(segment = %path.display(), "cutting off a journal line torn by a crash");
            file.set_len(good_len).map_err(|e| Error::io(&path, e))?;
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        file.seek(SeekFrom::End(0)).map_err(|e| Error::io(&path, e))?;
        let next_seq = last_seq.map_or(segment_first, |s| s + 1);
        Ok(Journal { dir: dir.to_owned(), file, segment_first, next_seq, lost: recorded > 0 })
    }

    /// Whether the journal was found lost on open: its index snapshot names files
    /// as of entries no longer there, so the tree must be scanned whole.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// The sequence number of the last entry (0 when empty).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Appends `changes` durably (one fsync) and returns them with their numbers.
    pub fn append(&mut self, changes: Vec<Change>) -> Result<Vec<Journaled>> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        if self.next_seq - self.segment_first >= SEGMENT_ENTRIES {
            self.rotate()?;
        }
        let mut buf = Vec::new();
        let mut out = Vec::with_capacity(changes.len());
        for change in changes {
            let entry = Journaled { seq: self.next_seq, change };
            self.next_seq += 1;
            serde_json::to_writer(&mut buf, &entry).map_err(|e| Error::io(&self.dir, e.into()))?;
            buf.push(b'\n');
            out.push(entry);
        }
        let path = self.dir.join(segment_name(self.segment_first));
        self.file.write_all(&buf).map_err(|e| Error::io(&path, e))?;
        self.file.sync_data().map_err(|e| Error::io(&path, e))?;
        Ok(out)
    }

    fn rotate(&mut self) -> Result<()> {
        self.segment_first = self.next_seq;
        let path = self.dir.join(segment_name(self.segment_first));
        self.file = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| Error::io(&path, e))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(&self.dir, e))
    }

    /// Entries with `seq > after`, oldest first, at most `max`.
    pub fn read_after(&self, after: u64, max: usize) -> Result<Vec<Journaled>> {
        read_after(&self.dir, after, max)
    }

    /// Deletes segments whose every entry is at or below `upto` (the slowest cursor).
    pub fn compact(&mut self, upto: u64) -> Result<usize> {
        let firsts = segments(&self.dir)?;
        let mut removed = 0;
        for pair in firsts.windows(2) {
            // A segment ends just before the next one starts.
            if pair[1] - 1 <= upto && pair[0] != self.segment_first {
                let path = self.dir.join(segment_name(pair[0]));
                fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Length of the whole lines in a segment and the last sequence number among them.
fn scan_segment(path: &Path) -> Result<(u64, Option<u64>)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::new(file);
    let (mut good, mut last) = (0u64, None);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| Error::io(path, e))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        match serde_json::from_slice::<Journaled>(&line) {
            Ok(e) => last = Some(e.seq),
            Err(_) => break,
        }
        good += n as u64;
    }
    Ok((good, last))
}

/// The sequence number a journal line starts with (`{"seq":N,`), read without
/// parsing the line; `None` when it does not start so.
fn leading_seq(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Reads entries after `after` from the journal in `dir` (a reader needs no [`Journal`]).
pub fn read_after(dir: &Path, after: u64, max: usize) -> Result<Vec<Journaled>> {
    let firsts = match segments(dir) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    let start = firsts.iter().rposition(|f| *f <= after + 1).unwrap_or(0);
    let mut out = Vec::new();
    for first in &firsts[start..] {
        let path = dir.join(segment_name(*first));
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        for line in BufReader::new(file).split(b'\n') {
            let line = line.map_err(|e| Error::io(&path, e))?;
            if leading_seq(&line).is_some_and(|seq| seq <= after) {
                continue; // a reader far into a segment skips its head unparsed
            }
            let Ok(entry) = serde_json::from_slice::<Journaled>(&line) else {
                break;
            };
            if entry.seq > after {
                out.push(entry);
                if out.len() >= max {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// A reader that follows the journal from a position: each [`Tail::read`] goes on
/// from the byte where the last one stopped, so a consumer woken for every new
/// batch reads only that batch (a fresh [`read_after`] parses the whole segment).
/// It takes only whole lines, moves on to the next segment once the writer has,
/// and finds its place again if compaction removed the segment it was in.
#[derive(Debug)]
pub struct Tail {
    dir: PathBuf,
    /// The last entry returned (or the position it started from).
    after: u64,
    /// The segment being read (its first sequence number) and the byte to go on from.
    at: Option<(u64, u64)>,
}

impl Tail {
    /// A reader of the entries after `after` in the journal in `dir`.
    pub fn new(dir: &Path, after: u64) -> Tail {
        Tail { dir: dir.to_owned(), after, at: None }
    }

    /// The last entry read (or the start position).
    pub fn position(&self) -> u64 {
        self.after
    }

    /// Up to `max` entries after the last one read, oldest first (empty when none is there yet).
    pub fn read(&mut self, max: usize) -> Result<Vec<Journaled>> {
        let mut out = Vec::new();
        while out.len() < max {
            let at = match self.at {
                Some(at) => Some(at),
                None => self.locate()?,
            };
            let Some((first, offset)) = at else { return Ok(out) };
            let path = self.dir.join(segment_name(first));
            let offset = match self.read_segment(&path, offset, max, &mut out) {
                Ok(o) => o,
                // Compacted away under the reader: everything in it was consumed.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    self.at = None;
                    if self.locate()?.is_none_or(|(f, _)| f == first) {
                        return Ok(out);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.at = Some((first, offset));
            if out.len() >= max {
                break;
            }
            // The end of this segment: the writer moved on only if a later one exists,
            // and then this one is whole (read it to its end once more first).
            let next = segments(&self.dir)?.into_iter().find(|f| *f > first);
            let Some(next) = next else { break };
            let offset = self.read_segment(&path, offset, max, &mut out)?;
            if out.len() >= max {
                self.at = Some((first, offset));
                break;
            }
            self.at = Some((next, 0));
        }
        Ok(out)
    }

    /// The segment holding the entry after `after` (reading from its start).
    /// The journal's directory gone (the tree deleted under the daemon) is an
    /// error: read as "no entries yet", a consumer told of new entries would
    /// ask again at once, forever.
    fn locate(&self) -> Result<Option<(u64, u64)>> {
        let firsts = segments(&self.dir)?;
        let i = firsts.iter().rposition(|f| *f <= self.after + 1).unwrap_or(0);
        Ok(firsts.get(i).map(|f| (*f, 0)))
    }

    /// Appends the whole lines of `path` from `offset` to `out` (up to `max` in all),
    /// skipping entries at or before the position; returns the offset after them.
    fn read_segment(&mut self, path: &Path, offset: u64, max: usize, out: &mut Vec<Journaled>) -> Result<u64> {
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        file.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(path, e))?;
        let mut reader = BufReader::new(file);
        let mut offset = offset;
        let mut line = Vec::new();
        while out.len() < max {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| Error::io(path, e))?;
            // A line still being written is taken by the next read.
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            let entry = serde_json::from_slice::<Journaled>(&line)
                .map_err(|e| Error::io(path, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
            offset += n as u64;
            if entry.seq > self.after {
                self.after = entry.seq;
                out.push(entry);
            }
        }
        Ok(offset)
    }
}

/// The sequence numbers of the oldest and newest entries the journal in `dir` still
/// holds (`None` when it holds none).
pub fn bounds(dir: &Path) -> Result<Option<(u64, u64)>> {
    let firsts = match segments(dir) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (Some(first), Some(last)) = (firsts.first(), firsts.last()) else { return Ok(None) };
    let oldest = read_after(dir, first.saturating_sub(1), 1)?.first().map(|e| e.seq);
    let (_, newest) = scan_segment(&dir.join(segment_name(*last)))?;
    // The newest segment can be empty right after a rotation.
    let newest = match newest {
        Some(n) => Some(n),
        None => {
            firsts.iter().rev().nth(1).map(|f| scan_segment(&dir.join(segment_name(*f)))).transpose()?.and_then(|s| s.1)
        }
    };
    Ok(oldest.zip(newest))
}

/// A consumer's durable position in the journal: `.clawboard/cursors/{name}`.
#[derive(Debug, Clone)]
pub struct Cursor {
    dir: PathBuf,
    name: String,
}

#[derive(Serialize, Deserialize)]
struct CursorFile {
    seq: u64,
}

impl Cursor {
    pub fn new(dir: &Path, name: &str) -> Cursor {
        Cursor { dir: dir.to_owned(), name: name.to_owned() }
    }

    /// The last sequence number the consumer finished (0 if it never ran).
    pub fn load(&self) -> Result<u64> {
        let path = self.dir.join(&self.name);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<CursorFile>(&bytes)
                .map(|c| c.seq)
                .map_err(|e| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Records `seq` as finished, durably (atomic replace).
    pub fn store(&self, seq: u64) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        crate::store::write_atomic(&self.dir, &self.name, to_pretty_json(&CursorFile { seq }).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(path: &str) -> Change {
        Change { path: path.into(), kind: ChangeKind::Put, origin: Origin::Local, size: Some(1), mtime_ns: Some(2) }
    }

    #[test]
    fn appends_numbers_and_replays() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.last_seq(), 0);
        let e = j.append(vec![put("a"), put("b")]).unwrap();
        assert_eq!((e[0].seq, e[1].seq), (1, 2));
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.last_seq(), 2);
        j.append(vec![put("c")]).unwrap();
        let after1: Vec<_> = j.read_after(1, 10).unwrap().into_iter().map(|e| e.change.path).collect();
        assert_eq!(after1, vec!["b", "c"]);
        assert_eq!(j.read_after(0, 1).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_last_line_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.append(vec![put("a")]).unwrap();
        drop(j);
        let seg = dir.path().join(segment_name(1));
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(b"{\"seq\":2,\"path\":\"b\",\"ki").unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.last_seq(), 1);
        j.append(vec![put("b")]).unwrap();
        let paths: Vec<_> = j.read_after(0, 10).unwrap().into_iter().map(|e| (e.seq, e.change.path)).collect();
        assert_eq!(paths, vec![(1, "a".to_string()), (2, "b".to_string())]);
    }

    #[test]
    fn rotates_and_compacts_below_the_slowest_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.append((0..SEGMENT_ENTRIES).map(|i| put(&format!("f{i}"))).collect()).unwrap();
        j.append(vec![put("next")]).unwrap();
        assert_eq!(segments(dir.path()).unwrap(), vec![1, SEGMENT_ENTRIES + 1]);
        assert_eq!(j.read_after(SEGMENT_ENTRIES - 1, 10).unwrap().len(), 2);
        assert_eq!(j.compact(SEGMENT_ENTRIES - 1).unwrap(), 0, "a consumer still needs the first segment");
        assert_eq!(j.compact(SEGMENT_ENTRIES).unwrap(), 1);
        assert_eq!(j.read_after(0, 10).unwrap()[0].change.path, "next");
    }

    #[test]
    fn bounds_are_the_oldest_and_newest_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(bounds(&dir.path().join("none")).unwrap(), None);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(bounds(dir.path()).unwrap(), None);
        j.append((0..SEGMENT_ENTRIES).map(|i| put(&format!("f{i}"))).collect()).unwrap();
        j.append(vec![put("next"), put("last")]).unwrap();
        assert_eq!(bounds(dir.path()).unwrap(), Some((1, SEGMENT_ENTRIES + 2)));
        j.compact(SEGMENT_ENTRIES).unwrap();
        assert_eq!(bounds(dir.path()).unwrap(), Some((SEGMENT_ENTRIES + 1, SEGMENT_ENTRIES + 2)));
    }

    #[test]
    fn a_tail_goes_on_where_it_stopped_across_segments_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let mut tail = Tail::new(dir.path(), 0);
        assert!(tail.read(10).unwrap().is_empty());
        j.append(vec![put("a"), put("b"), put("c")]).unwrap();
        let seqs = |v: Vec<Journaled>| v.into_iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(tail.read(2).unwrap()), vec![1, 2]);
        assert_eq!(seqs(tail.read(10).unwrap()), vec![3]);
        assert!(tail.read(10).unwrap().is_empty());
        // A line being written is not taken until it is whole.
        let seg = dir.path().join(segment_name(1));
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(b"{\"seq\":4,\"path\":\"d\",\"kind\":\"put\",").unwrap();
        assert!(tail.read(10).unwrap().is_empty());
        f.write_all(b"\"origin\":\"local\"}\n").unwrap();
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(seqs(tail.read(10).unwrap()), vec![4]);
        // Into the next segment, then on after the first is compacted away.
        j.append((4..SEGMENT_ENTRIES).map(|i| put(&format!("f{i}"))).collect()).unwrap();
        j.append(vec![put("next")]).unwrap();
        let rest = tail.read(usize::MAX).unwrap();
        assert_eq!(rest.len() as u64, SEGMENT_ENTRIES - 3);
        assert_eq!(tail.position(), SEGMENT_ENTRIES + 1);
        assert_eq!(j.compact(SEGMENT_ENTRIES + 1).unwrap(), 1);
        j.append(vec![put("after")]).unwrap();
        assert_eq!(seqs(tail.read(10).unwrap()), vec![SEGMENT_ENTRIES + 2]);
        // A new reader placed mid-journal starts right after its position.
        let mut late = Tail::new(dir.path(), SEGMENT_ENTRIES + 1);
        assert_eq!(seqs(late.read(10).unwrap()), vec![SEGMENT_ENTRIES + 2]);
    }

    #[test]
    fn a_tail_of_a_journal_deleted_under_it_fails_and_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let mut j = Journal::open(&journal).unwrap();
        j.append(vec![put("a")]).unwrap();
        let (mut fresh, mut reading) = (Tail::new(&journal, 0), Tail::new(&journal, 0));
        assert_eq!(reading.read(10).unwrap().len(), 1);
        std::fs::remove_dir_all(&journal).unwrap();
        for tail in [&mut fresh, &mut reading] {
            let e = tail.read(10).unwrap_err();
            assert!(e.to_string().contains("journal"), "{e}");
        }
    }

    #[test]
    fn cursors_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cursor::new(dir.path(), "intake");
        assert_eq!(c.load().unwrap(), 0);
        c.store(42).unwrap();
        assert_eq!(Cursor::new(dir.path(), "intake").load().unwrap(), 42);
    }

    #[test]
    fn ignores_state_temps_and_editor_files() {
        for p in [
            ".clawboard/journal/x",
            "inbox/.a.json.swp",
            "inbox/a.json~",
            "inbox/.#a.json",
            "x/y.tmp",
            "tasks/t/.task.json.clawboard-tmp.1.2",
        ] {
            assert!(is_ignored(p), "{p}");
        }
        for p in ["inbox/a.json", "tasks/t/task.json", "gm/decisions.md"] {
            assert!(!is_ignored(p), "{p}");
        }
    }
}
