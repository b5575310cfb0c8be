//! What this node has durably pushed: path → (BLAKE3 hash, size, mtime) of the
//! object now in the bucket. Push skips a file whose size and mtime match (no read)
//! or whose hash matches (no request).
//!
//! Kept in `.clawboard/sync/`: a snapshot, `pushed.json`, and an append-only log,
//! `pushed.log`, with one JSON line per upload or delete, written as each request
//! succeeds (so a killed process loses nothing the kernel has) and fsync'd before
//! the push cursor moves. When the log outgrows the snapshot it is folded in.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::version::Vv;

/// The version of a path this node and the bucket last agreed on (pushed or
/// pulled): the local file is unchanged while its stamp or hash still match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushed {
    #[serde(rename = "h")]
    pub hash: String,
    #[serde(rename = "s")]
    pub size: u64,
    #[serde(rename = "m")]
    pub mtime_ns: i64,
    /// Version vector of this version (see [`crate::version`]).
    #[serde(rename = "v", default, skip_serializing_if = "Vv::is_empty")]
    pub vv: Vv,
    /// HLC stamp and author of this version.
    #[serde(rename = "t", default, skip_serializing_if = "is_zero")]
    pub hlc: u64,
    #[serde(rename = "a", default, skip_serializing_if = "String::is_empty")]
    pub author: String,
    /// The object's ETag, when known (a full reconcile skips objects that match).
    #[serde(rename = "e", default, skip_serializing_if = "String::is_empty")]
    pub etag: String,
    /// A tombstone: the version is a delete (kept so an older put is not applied again).
    #[serde(rename = "x", default, skip_serializing_if = "is_false")]
    pub deleted: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Pushed {
    /// The record of a file's content (no version yet).
    pub fn file(hash: String, size: u64, mtime_ns: i64) -> Pushed {
        Pushed { hash, size, mtime_ns, ..Pushed::default() }
    }

    /// The record when it is a live file (not a tombstone).
    pub fn live(&self) -> Option<&Pushed> {
        (!self.deleted).then_some(self)
    }
}

/// One line of `pushed.log`: the path, then the record's fields inline (none: no object).
#[derive(Serialize)]
struct LogLine<'a> {
    #[serde(rename = "p")]
    path: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pushed: Option<&'a Pushed>,
}

/// [`LogLine`] as read back. Spelled out rather than `#[serde(flatten)]`, which
/// buffers every line into an intermediate map first (100,000 lines, release
/// build: 129–278 ms that way, 89–129 ms this way). A record always has `h` (a
/// tombstone's is empty); a line without it says the bucket holds no object.
#[derive(Deserialize)]
struct LogLineIn {
    p: String,
    h: Option<String>,
    #[serde(default)]
    s: u64,
    #[serde(default)]
    m: i64,
    #[serde(default)]
    v: Vv,
    #[serde(default)]
    t: u64,
    #[serde(default)]
    a: String,
    #[serde(default)]
    e: String,
    #[serde(default)]
    x: bool,
}

impl LogLineIn {
    fn into_record(self) -> (String, Option<Pushed>) {
        let LogLineIn { p, h, s, m, v, t, a, e, x } = self;
        let pushed = h.map(|hash| Pushed { hash, size: s, mtime_ns: m, vv: v, hlc: t, author: a, etag: e, deleted: x });
        (p, pushed)
    }
}

#[derive(Default, Deserialize)]
struct Snapshot {
    files: HashMap<String, Pushed>,
}

/// [`Snapshot`] as written, borrowing the records (a fold of 100,000 records does
/// not hold a second copy of them).
#[derive(Serialize)]
struct SnapshotOut<'a> {
    files: &'a HashMap<String, Pushed>,
}

/// Identifies the on-disk state a [`PushState`] was loaded from, so a process can
/// tell whether another one pushed meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    snapshot: Option<(u64, i128)>,
    log_len: u64,
}

pub struct PushState {
    dir: PathBuf,
    files: HashMap<String, Pushed>,
    log: File,
    log_lines: usize,
    dirty: bool,
    seen: Fingerprint,
}

const SNAPSHOT: &str = "pushed.json";
const LOG: &str = "pushed.log";

fn fingerprint(dir: &Path) -> Result<Fingerprint> {
    let snap = match fs::metadata(dir.join(SNAPSHOT)) {
        Ok(m) => {
            let mtime = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            Some((m.len(), mtime.map_or(0, |d| d.as_nanos() as i128)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(dir.join(SNAPSHOT), e)),
    };
    let log_len = match fs::metadata(dir.join(LOG)) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(Error::io(dir.join(LOG), e)),
    };
    Ok(Fingerprint { snapshot: snap, log_len })
}

impl PushState {
    /// Loads the state in `dir` (`.clawboard/sync`), creating it if needed; a log line
    /// torn by a crash is cut off.
    pub fn load(dir: &Path) -> Result<PushState> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mut files = read_snapshot(dir)?;
        let log_path = dir.join(LOG);
        let mut log = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(&log_path, e))?;
        let (good, lines) = replay(BufReader::new(&mut log), &log_path, &mut files)?;
        if log.metadata().map_err(|e| Error::io(&log_path, e))?.len() != good {
            tracing::warn!(file = %log_path.display(), "cutting off a push-log line torn by a crash");
            log.set_len(good).map_err(|e| Error::io(&log_path, e))?;
        }
        let seen = fingerprint(dir)?;
        Ok(PushState { dir: dir.to_owned(), files, log, log_lines: lines, dirty: false, seen })
    }

    /// The records as they stand, for a reader that is not the pusher (the retention
    /// guard): never creates, appends to or cuts the log; a torn last line, which may
    /// be a line the pusher is writing right now, is simply not read.
    pub fn records(dir: &Path) -> Result<HashMap<String, Pushed>> {
        let mut files = read_snapshot(dir)?;
        let log_path = dir.join(LOG);
        match fs::File::open(&log_path) {
            Ok(f) => {
                replay(BufReader::new(f), &log_path, &mut files)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&log_path, e)),
        }
        Ok(files)
    }

    /// Reloads when another process changed the state since this one last saw it.
    pub fn refresh(self) -> Result<PushState> {
        if fingerprint(&self.dir)? == self.seen { Ok(self) } else { PushState::load(&self.dir) }
    }

    pub fn get(&self, path: &str) -> Option<&Pushed> {
        self.files.get(path)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.files.keys()
    }

    /// Paths whose record is a live file (not a tombstone).
    pub fn live_paths(&self) -> impl Iterator<Item = &String> {
        self.files.iter().filter(|(_, p)| !p.deleted).map(|(k, _)| k)
    }

    /// Every record.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Pushed)> {
        self.files.iter()
    }

    /// Records that the bucket now holds `pushed` at `path` (`None`: no object).
    /// Reaches the kernel at once; durable after [`PushState::sync`].
    pub fn record(&mut self, path: &str, pushed: Option<Pushed>) -> Result<()> {
        if self.files.get(path) == pushed.as_ref() {
            return Ok(());
        }
        let mut line = serde_json::to_vec(&LogLine { path, pushed: pushed.as_ref() })
            .map_err(|e| Error::io(self.dir.join(LOG), e.into()))?;
        line.push(b'\n');
        self.log.write_all(&line).map_err(|e| Error::io(self.dir.join(LOG), e))?;
        self.seen.log_len += line.len() as u64;
        self.log_lines += 1;
        self.dirty = true;
        match pushed {
            Some(p) => self.files.insert(path.to_owned(), p),
            None => self.files.remove(path),
        };
        Ok(())
    }

    /// Makes every record so far durable; folds the log into the snapshot once the
    /// log holds at least as many lines as there are records (and 10,000): every
    /// load replays the log, so a `sync full` of a large tree, which writes one line
    /// per file, ends with a fold.
    pub fn sync(&mut self) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        self.log.sync_data().map_err(|e| Error::io(self.dir.join(LOG), e))?;
        self.dirty = false;
        if self.log_lines > 10_000 && self.log_lines >= self.files.len() {
            let bytes = serde_json::to_vec(&SnapshotOut { files: &self.files })
                .map_err(|e| Error::io(self.dir.join(SNAPSHOT), e.into()))?;
            clawboard_core::store::write_atomic(&self.dir, SNAPSHOT, &bytes)?;
            // The snapshot holds everything the log did: an interrupted truncate only replays.
            self.log.set_len(0).map_err(|e| Error::io(self.dir.join(LOG), e))?;
            self.log.sync_all().map_err(|e| Error::io(self.dir.join(LOG), e))?;
            self.log_lines = 0;
            self.seen = fingerprint(&self.dir)?;
        }
        Ok(())
    }
}

/// The records of the last snapshot (none before the first).
fn read_snapshot(dir: &Path) -> Result<HashMap<String, Pushed>> {
    let snap_path = dir.join(SNAPSHOT);
    match fs::read(&snap_path) {
        Ok(b) => Ok(serde_json::from_slice::<Snapshot>(&b)
            .map_err(|e| Error::io(&snap_path, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?
            .files),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(Error::io(&snap_path, e)),
    }
}

/// Applies the log's complete lines to `files`; returns the bytes and lines read
/// (stopping at the first torn or unreadable line).
fn replay(mut reader: impl BufRead, log_path: &Path, files: &mut HashMap<String, Pushed>) -> Result<(u64, usize)> {
    let mut good = 0u64;
    let mut lines = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| Error::io(log_path, e))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        let Ok(l) = serde_json::from_slice::<LogLineIn>(&line) else { break };
        match l.into_record() {
            (path, Some(p)) => files.insert(path, p),
            (path, None) => files.remove(&path),
        };
        good += n as u64;
        lines += 1;
    }
    Ok((good, lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(h: &str) -> Option<Pushed> {
        Some(Pushed::file(h.into(), 1, 2))
    }

    #[test]
    fn records_survive_a_reload_and_a_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PushState::load(d.path()).unwrap();
        s.record("a", p("h1")).unwrap();
        s.record("b", p("h2")).unwrap();
        s.record("a", None).unwrap();
        s.sync().unwrap();
        drop(s);
        let mut f = OpenOptions::new().append(true).open(d.path().join(LOG)).unwrap();
        f.write_all(b"{\"p\":\"c\",\"h\":").unwrap();
        let s = PushState::load(d.path()).unwrap();
        assert_eq!(s.get("a"), None);
        assert_eq!(s.get("b"), p("h2").as_ref());
        assert_eq!(s.get("c"), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn folds_the_log_into_the_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PushState::load(d.path()).unwrap();
        for i in 0..10_001 {
            s.record("same", p(&format!("h{i}"))).unwrap();
        }
        s.sync().unwrap();
        assert_eq!(fs::metadata(d.path().join(LOG)).unwrap().len(), 0);
        let s = PushState::load(d.path()).unwrap();
        assert_eq!(s.get("same"), p("h10000").as_ref());
    }

    #[test]
    fn every_field_of_a_record_survives_the_log() {
        let d = tempfile::tempdir().unwrap();
        let full = Pushed {
            hash: "ab".repeat(32),
            size: 1978,
            mtime_ns: -5,
            vv: [("n1".to_owned(), 7), ("n2".to_owned(), 9)].into_iter().collect(),
            hlc: 9,
            author: "n2".into(),
            etag: "e1".into(),
            deleted: false,
        };
        let tomb = Pushed { hash: String::new(), deleted: true, vv: full.vv.clone(), ..Pushed::default() };
        let mut s = PushState::load(d.path()).unwrap();
        s.record("a", Some(full.clone())).unwrap();
        s.record("b", Some(tomb.clone())).unwrap();
        s.record("c", p("h")).unwrap();
        s.record("c", None).unwrap();
        s.sync().unwrap();
        let log = fs::read_to_string(d.path().join(LOG)).unwrap();
        assert_eq!(log.lines().last(), Some(r#"{"p":"c"}"#), "a removal is the path alone");
        let s = PushState::load(d.path()).unwrap();
        assert_eq!(s.get("a"), Some(&full));
        assert_eq!(s.get("b"), Some(&tomb));
        assert_eq!(s.get("c"), None);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn a_push_of_every_file_ends_with_a_fold() {
        let d = tempfile::tempdir().unwrap();
        let mut s = PushState::load(d.path()).unwrap();
        for i in 0..10_001 {
            s.record(&format!("f{i}"), p("h")).unwrap();
        }
        s.sync().unwrap();
        assert_eq!(fs::metadata(d.path().join(LOG)).unwrap().len(), 0, "one line per record: folded");
        let s = PushState::load(d.path()).unwrap();
        assert_eq!(s.len(), 10_001);
        assert_eq!(s.get("f10000"), p("h").as_ref());
    }

    #[test]
    fn refresh_sees_another_writer() {
        let d = tempfile::tempdir().unwrap();
        let mine = PushState::load(d.path()).unwrap();
        let mut other = PushState::load(d.path()).unwrap();
        other.record("x", p("h")).unwrap();
        other.sync().unwrap();
        let mine = mine.refresh().unwrap();
        assert_eq!(mine.get("x"), p("h").as_ref());
    }
}
