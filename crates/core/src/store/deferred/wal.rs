//! The write-ahead log of deferred writes (`.clawboard/wal.log`): its format,
//! appending and syncing, emptying by epoch, and the replay after a crash. The
//! format is described in `store/deferred.rs`.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layout;
use crate::store::{RelPath, Store};

/// The log file is kept at least this long (zero-filled).
const PREALLOCATED: u64 = 8 << 20;
/// The head's length: records start here.
pub(super) const HEAD: u64 = 64;

#[derive(Serialize, Deserialize)]
struct Head {
    wal: u32,
    epoch: u64,
}

#[derive(Serialize, Deserialize)]
struct Header {
    epoch: u64,
    path: String,
    len: usize,
    hash: String,
    /// The file was removed (a plain removal after a record of it): no bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    gone: bool,
}

fn hash_of(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex()[..16].to_owned()
}

/// The block records are written in with direct I/O (a multiple of every
/// logical block size in use: 512 and 4096).
const BLOCK: usize = 4096;

/// The log file, open for appending records.
pub(super) struct Wal {
    file: File,
    /// The same file opened with `O_DIRECT`, where the file system allows it:
    /// records go to the disk without the page cache. Alone, a 2 KB append and
    /// `fdatasync` took 0.11–0.14 ms at p50 this way against 0.18–0.21
    /// buffered, p99 0.42–0.96 against 0.45–1.42 (`scripts/bench/direct-write.py`,
    /// docs/BENCHMARKS.md). `None` (tmpfs refuses `O_DIRECT`): buffered writes.
    direct: Option<Direct>,
    path: PathBuf,
    epoch: u64,
    /// Where the next record goes.
    end: u64,
    /// Records appended and not yet written to the file: they go in one `write`
    /// at the next [`Wal::flush`] or [`Wal::sync`] (a step appends about six).
    buf: Vec<u8>,
    /// Appended to since the last sync.
    dirty: bool,
    /// The paths with a record in this epoch.
    logged: HashSet<String>,
}

/// Direct writes: whole blocks from block-aligned memory at block-aligned
/// offsets, so the log's last, partly used block is kept here and written
/// again with the records that follow it.
struct Direct {
    file: File,
    /// The bytes of the file from the start of `end`'s block to `end`.
    tail: Vec<u8>,
    /// Scratch memory, a block longer than needed: the block-aligned part is
    /// what is written.
    scratch: Vec<u8>,
}

impl Direct {
    /// Opens `path` for direct writes; `None` where the file system refuses them.
    fn open(path: &Path) -> Option<Direct> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).ok()?;
        Some(Direct { file, tail: Vec::new(), scratch: Vec::new() })
    }

    /// Writes `records` at `end` (the tail's block rewritten with them, the
    /// last block padded with zeros, which end a replay as unused space does),
    /// and keeps the new tail.
    fn write(&mut self, end: u64, records: &[u8]) -> std::io::Result<()> {
        let start = end - self.tail.len() as u64;
        let used = self.tail.len() + records.len();
        let len = used.div_ceil(BLOCK) * BLOCK;
        self.scratch.clear();
        self.scratch.resize(len + BLOCK, 0);
        let at = self.scratch.as_ptr().align_offset(BLOCK);
        let block = &mut self.scratch[at..at + len];
        block[..self.tail.len()].copy_from_slice(&self.tail);
        block[self.tail.len()..used].copy_from_slice(records);
        self.file.write_all_at(block, start)?;
        let kept = used - used % BLOCK;
        self.tail.clear();
        self.tail.extend_from_slice(&block[kept..used]);
        Ok(())
    }
}

impl Wal {
    /// Writes out what a crash left in the log at `store`'s root, then opens it
    /// for a new epoch (preallocated). Returns it and how many records were replayed.
    ///
    /// When opening fails (a disk without room for the preallocation), a log this
    /// call created is removed, and one that was there is cut back to its length:
    /// a failed start leaves no 8 MiB of zeros behind on a disk that is full.
    pub(super) fn open(store: &Store) -> Result<(Wal, usize)> {
        let path = store.root().join(layout::WAL);
        let (replayed, epoch) = replay(store, &path)?;
        let (file, created) = match OpenOptions::new().create_new(true).read(true).write(true).open(&path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let f = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| Error::io(&path, e))?;
                (f, false)
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let len = if created { 0 } else { file.metadata().map_err(|e| Error::io(&path, e))?.len() };
        if let Err(e) = preallocate(&file, &path) {
            undo_open(&file, &path, created, len);
            return Err(e);
        }
        let direct = Direct::open(&path);
        let mut wal = Wal::at(file, direct, path, epoch);
        if let Err(e) = wal.begin(epoch + 1) {
            undo_open(&wal.file, &wal.path, created, len);
            return Err(e);
        }
        Ok((wal, replayed))
    }

    /// The log in `file` at epoch `epoch`, nothing appended yet.
    fn at(file: File, direct: Option<Direct>, path: PathBuf, epoch: u64) -> Wal {
        Wal { file, direct, path, epoch, end: HEAD, buf: Vec::new(), dirty: false, logged: HashSet::new() }
    }

    /// Appends one record (durable at the next [`Wal::sync`]; in the file at
    /// the next [`Wal::flush`]); returns the log's length in use.
    pub(super) fn append(&mut self, path: &str, bytes: &[u8]) -> Result<u64> {
        self.append_change(path, Some(bytes))
    }

    /// Appends the removal of `path` (see [`Wal::append`]).
    pub(super) fn append_gone(&mut self, path: &str) -> Result<u64> {
        self.append_change(path, None)
    }

    fn append_change(&mut self, path: &str, bytes: Option<&[u8]>) -> Result<u64> {
        encode_into(&mut self.buf, self.epoch, path, bytes).map_err(|e| Error::io(&self.path, e))?;
        if !self.logged.contains(path) {
            self.logged.insert(path.to_owned());
        }
        self.dirty = true;
        Ok(self.end + self.buf.len() as u64)
    }

    /// True when `path` has a record in this epoch.
    pub(super) fn has_logged(&self, path: &str) -> bool {
        self.logged.contains(path)
    }

    /// Writes the appended records to the file (not synced). A record's plain
    /// file is written only after this: a process killed at any point leaves
    /// in the log every record whose file it wrote, as a power loss would not.
    pub(super) fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let written = match &mut self.direct {
            Some(d) => match d.write(self.end, &self.buf) {
                Ok(()) => true,
                // Refused after all (a file system that opens but cannot write
                // so): buffered from here on, these records included.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!(
                        "{}: direct writes refused ({e}); writing it through the page cache",
                        self.path.display()
                    );
                    self.direct = None;
                    false
                }
                Err(e) => return Err(Error::io(&self.path, e)),
            },
            None => false,
        };
        if !written {
            self.file.write_all_at(&self.buf, self.end).map_err(|e| Error::io(&self.path, e))?;
        }
        self.end += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// The appended records written and made durable: one `write` and one
    /// `fdatasync`, if anything was appended since the last.
    pub(super) fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.flush()?;
            self.file.sync_data().map_err(|e| Error::io(&self.path, e))?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Empties the log: the next epoch begins (its records are void from here).
    pub(super) fn empty(&mut self) -> Result<()> {
        self.begin(self.epoch + 1)
    }

    /// Starts epoch `epoch`: the head written and synced, the records after it void.
    fn begin(&mut self, epoch: u64) -> Result<()> {
        let mut head =
            serde_json::to_vec(&Head { wal: 1, epoch }).map_err(|e| Error::io(&self.path, std::io::Error::other(e)))?;
        head.resize(HEAD as usize - 1, b' ');
        head.push(b'\n');
        self.file.write_all_at(&head, 0).map_err(|e| Error::io(&self.path, e))?;
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))?;
        self.epoch = epoch;
        self.end = HEAD;
        self.buf.clear();
        self.dirty = false;
        self.logged.clear();
        if let Some(d) = &mut self.direct {
            // The first block holds the head: records written there carry it.
            d.tail = head;
        }
        Ok(())
    }
}

/// For a process that does not defer its writes but serves a tree where one
/// that did may have crashed: writes the log's records to their files and
/// empties the log (a new epoch), so that none is replayed over newer writes later.
pub(crate) fn replay_and_close(store: &Store) -> Result<usize> {
    let path = store.root().join(layout::WAL);
    let (replayed, epoch) = replay(store, &path)?;
    if epoch == 0 {
        return Ok(0); // no log, or one that never had a record
    }
    let file = OpenOptions::new().write(true).open(&path).map_err(|e| Error::io(&path, e))?;
    let mut wal = Wal::at(file, None, path, epoch);
    wal.empty()?;
    Ok(replayed)
}

/// One record as it goes into the log.
#[cfg(test)]
pub(super) fn encode(epoch: u64, path: &str, bytes: &[u8]) -> Vec<u8> {
    let mut rec = Vec::new();
    encode_into(&mut rec, epoch, path, Some(bytes)).expect("a header serializes");
    rec
}

/// Appends one record, as it goes into the log, to `out`: `path`'s new
/// content, or its removal (`None`).
fn encode_into(out: &mut Vec<u8>, epoch: u64, path: &str, bytes: Option<&[u8]>) -> std::io::Result<()> {
    let content = bytes.unwrap_or_default();
    let header =
        Header { epoch, path: path.to_owned(), len: content.len(), hash: hash_of(content), gone: bytes.is_none() };
    serde_json::to_writer(&mut *out, &header)?;
    out.push(b'\n');
    out.extend_from_slice(content);
    out.push(b'\n');
    Ok(())
}

/// After a failed [`Wal::open`]: removes the log if that call created it, else cuts
/// it back to `len` (what it added is zeros). A failure here is logged: the error
/// that made the open fail is the one the caller sees.
fn undo_open(file: &File, path: &Path, created: bool, len: u64) {
    let undone = if created {
        std::fs::remove_file(path).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
    } else {
        file.set_len(len)
    };
    match undone {
        Ok(()) if created => tracing::info!("{}: removed the log this failed start created", path.display()),
        Ok(()) => {}
        Err(e) => tracing::warn!("{}: cannot undo after a failed start: {e}", path.display()),
    }
}

/// Extends the log to [`PREALLOCATED`] bytes of written zeros (not a sparse
/// hole: writing into a hole allocates blocks, which is a metadata change).
fn preallocate(file: &File, path: &Path) -> Result<()> {
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len >= PREALLOCATED {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = len;
    while at < PREALLOCATED {
        let n = (PREALLOCATED - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at).map_err(|e| Error::io(path, e))?;
        at += n;
    }
    file.sync_all().map_err(|e| Error::io(path, e))
}

/// Writes every whole record of the log's current epoch to its file, then
/// makes them durable. Returns how many records the log held, and the epoch
/// (0 for no log).
///
/// Each path gets its last record alone (a record replaces the whole file, so
/// the earlier ones change nothing the last does not), written without an
/// fsync of its own; one `syncfs` of the root's file system then makes them
/// all durable before the caller empties the log. A crash in between leaves
/// the log as it was, and the next replay writes the same files again. (A
/// durable write per record cost two fsyncs each: 3,287 records after a
/// `kill -9` under load took 8.6 s, and the daemon's API was not up meanwhile.)
fn replay(store: &Store, wal_path: &Path) -> Result<(usize, u64)> {
    let raw = match File::open(wal_path) {
        Ok(mut f) => read_used(&mut f).map_err(|e| Error::io(wal_path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(Error::io(wal_path, e)),
    };
    let records = parse(&raw);
    let n = records.list.len();
    let last: HashMap<&str, usize> = records.list.iter().enumerate().map(|(i, (path, _))| (path.as_str(), i)).collect();
    let (mut written, mut skipped) = (0, 0);
    for (i, (path, bytes)) in records.list.iter().enumerate() {
        let bad = |e: Error| Error::UnsafePath {
            path: layout::WAL.to_owned(),
            reason: format!("cannot replay record {} ({path:?}): {e}", i + 1),
        };
        let rel = RelPath::new(path).map_err(bad)?;
        if last.get(path.as_str()) != Some(&i) {
            continue;
        }
        // A task this node lost since (fenced): its files are the holder's now.
        if layout::task_of(path).is_some_and(|task| layout::is_fenced(store.root(), task)) {
            skipped += 1;
            continue;
        }
        match bytes {
            Some(bytes) => store.write_view(&rel, bytes).map_err(bad)?,
            None => store.remove(&rel).map_err(bad)?,
        }
        written += 1;
    }
    if written > 0 {
        sync_file_system(store.root())?;
    }
    if n > 0 {
        tracing::info!(
            records = n,
            files = written,
            fenced = skipped,
            "wrote the records a crash left in {} (but those of tasks another node holds now)",
            layout::WAL
        );
    }
    Ok((n, records.epoch))
}

/// `syncfs(2)` of the file system `root` is on: every file and directory
/// change made so far reaches the disk.
fn sync_file_system(root: &Path) -> Result<()> {
    let dir = File::open(root).map_err(|e| Error::io(root, e))?;
    nix::unistd::syncfs(&dir).map_err(|e| Error::io(root, std::io::Error::from(e)))
}

/// The first read of the log at a replay: the head and, in the common case
/// (a log emptied at the last clean stop, or a crash a few steps in), every
/// record. The rest of the 8 MiB is zeros, which the replay need not read.
const FIRST_READ: u64 = 64 << 10;

/// The log's bytes from its start through its last record (and a little
/// more): read [`FIRST_READ`] bytes, and four times as many again while the
/// records run on past what was read. The whole file only when they fill it.
fn read_used(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut want = FIRST_READ;
    loop {
        let have = raw.len() as u64;
        (&mut *file).take(want - have).read_to_end(&mut raw)?;
        if (raw.len() as u64) < want || !parse(&raw).cut {
            return Ok(raw);
        }
        want = want.saturating_mul(4);
    }
}

pub(super) struct Parsed<'a> {
    pub(super) epoch: u64,
    /// Each record: its path, and its content (`None`: the file was removed).
    pub(super) list: Vec<(String, Option<&'a [u8]>)>,
    /// The records may go on past the end of the bytes parsed: they ended
    /// inside a record, or too close to their end to tell.
    pub(super) cut: bool,
}

/// The longest header line a record may have.
const MAX_HEADER: usize = 8192;

pub(super) fn parse(raw: &[u8]) -> Parsed<'_> {
    let mut list = Vec::new();
    let head = raw.get(..HEAD as usize).and_then(|h| serde_json::from_slice::<Head>(h).ok());
    let Some(Head { wal: 1, epoch }) = head else {
        return Parsed { epoch: 0, list, cut: raw.len() < HEAD as usize };
    };
    let mut at = HEAD as usize;
    let cut = loop {
        if at >= raw.len() {
            break true;
        }
        let Some(nl) = raw[at..].iter().take(MAX_HEADER).position(|b| *b == b'\n') else {
            break raw.len() - at < MAX_HEADER;
        };
        let Ok(h) = serde_json::from_slice::<Header>(&raw[at..at + nl]) else { break false };
        let start = at + nl + 1;
        let Some(end) = start.checked_add(h.len) else { break false };
        if h.epoch != epoch {
            break false;
        }
        if end >= raw.len() {
            break true;
        }
        if raw[end] != b'\n' {
            break false;
        }
        let bytes = &raw[start..end];
        if hash_of(bytes) != h.hash || (h.gone && !bytes.is_empty()) {
            break false;
        }
        list.push((h.path, (!h.gone).then_some(bytes)));
        at = end + 1;
    };
    Parsed { epoch, list, cut }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    pub(in crate::store) fn log(epoch: u64, records: &[(&str, &[u8])]) -> Vec<u8> {
        let mut raw = serde_json::to_vec(&Head { wal: 1, epoch }).unwrap();
        raw.resize(HEAD as usize - 1, b' ');
        raw.push(b'\n');
        for (p, b) in records {
            raw.extend(encode(epoch, p, b));
        }
        raw
    }

    #[test]
    fn records_written_across_blocks_read_back_whole_directly_or_through_the_page_cache() {
        for direct in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (store, _) = Store::init(dir.path()).unwrap();
            let (mut wal, _) = Wal::open(&store).unwrap();
            if !direct {
                wal.direct = None;
            }
            let body = |i: usize| vec![b'a' + (i % 26) as u8; (i * 997) % 5000 + 1];
            // An epoch emptied after 40 records, then 160 more in the next one,
            // written a few at a time, some synced, as the engine does.
            for i in 0..200 {
                if i == 40 {
                    wal.empty().unwrap();
                }
                wal.append(&format!("tasks/t/{i}.json"), &body(i)).unwrap();
                match i % 7 {
                    0 => wal.sync().unwrap(),
                    3 => wal.flush().unwrap(),
                    _ => {}
                }
            }
            wal.sync().unwrap();
            let raw = std::fs::read(dir.path().join(layout::WAL)).unwrap();
            let p = parse(&raw);
            assert_eq!(p.list.len(), 160, "direct {direct}");
            for (n, (path, bytes)) in p.list.iter().enumerate() {
                assert_eq!(path, &format!("tasks/t/{}.json", n + 40), "direct {direct}");
                assert_eq!(*bytes, Some(&body(n + 40)[..]), "direct {direct}");
            }
        }
    }

    #[test]
    fn a_replay_reads_the_records_and_not_the_zeros_after_them() {
        // Record sizes chosen so that the records end well inside the first
        // read, just past it, straddling it, and far past it (four reads).
        for (count, size) in [(3, 700), (12, 5000), (13, 5000), (1, 70_000), (60, 20_000)] {
            let dir = tempfile::tempdir().unwrap();
            let (store, _) = Store::init(dir.path()).unwrap();
            let (mut wal, _) = Wal::open(&store).unwrap();
            let body = |i: usize| vec![b'a' + (i % 26) as u8; size];
            for i in 0..count {
                wal.append(&format!("tasks/t/{i}.json"), &body(i)).unwrap();
            }
            wal.sync().unwrap();
            let path = dir.path().join(layout::WAL);
            let whole = std::fs::read(&path).unwrap();
            assert_eq!(whole.len() as u64, PREALLOCATED);
            let used = read_used(&mut File::open(&path).unwrap()).unwrap();
            let (a, b) = (parse(&whole), parse(&used));
            assert_eq!(b.list.len(), count, "{count} of {size} bytes");
            assert_eq!(a.list, b.list, "{count} of {size} bytes");
            assert!(!b.cut, "{count} of {size} bytes");
            let records = whole.len() - whole.iter().rev().take_while(|b| **b == 0).count();
            // Each read four times the last: at most four times what was needed.
            let bound = (4 * (records + MAX_HEADER)).max(FIRST_READ as usize);
            assert!(used.len() >= records && used.len() <= bound, "read {} for {records}", used.len());
            assert!(used.len() < whole.len(), "read all {} for {records}", whole.len());
        }
        // Records that fill the file: all of it is read, and all are found.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.log");
        let mut raw = log(5, &[]);
        let mut n = 0;
        while raw.len() < 300_000 {
            raw.extend(encode(5, &format!("tasks/t/{n}.json"), &[b'x'; 999]));
            n += 1;
        }
        std::fs::write(&path, &raw).unwrap();
        let used = read_used(&mut File::open(&path).unwrap()).unwrap();
        assert_eq!(used.len(), raw.len());
        assert_eq!(parse(&used).list.len(), n);
    }

    #[test]
    fn a_replay_writes_nothing_into_a_task_another_node_holds_now() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        let raw = log(
            1,
            &[
                ("tasks/lost/attempts/0001-w.json", b"mine"),
                ("tasks/kept/attempts/0001-w.json", b"mine too"),
                ("gm/notes.md", b"notes"),
            ],
        );
        let path = dir.path().join(layout::WAL);
        std::fs::write(&path, &raw).unwrap();
        // Fenced after the records were made (taken over while this node was down).
        std::fs::create_dir_all(dir.path().join(layout::FENCED).join("lost")).unwrap();
        replay(&store, &path).unwrap();
        assert!(!dir.path().join("tasks/lost/attempts/0001-w.json").exists());
        assert_eq!(std::fs::read(dir.path().join("tasks/kept/attempts/0001-w.json")).unwrap(), b"mine too");
        assert_eq!(std::fs::read(dir.path().join("gm/notes.md")).unwrap(), b"notes");
    }

    #[test]
    fn a_replay_leaves_each_file_as_its_last_record_says() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join("tasks/t")).unwrap();
        std::fs::write(dir.path().join("tasks/t/removed.json"), b"before").unwrap();
        let (mut wal, _) = Wal::open(&store).unwrap();
        for i in 0..50 {
            wal.append("tasks/t/attempt.json", format!("{{\"n\":{i}}}").as_bytes()).unwrap();
        }
        wal.append("tasks/t/removed.json", b"written").unwrap();
        wal.append_gone("tasks/t/removed.json").unwrap();
        wal.append_gone("tasks/t/back.json").unwrap();
        wal.append("tasks/t/back.json", b"again").unwrap();
        wal.sync().unwrap();
        drop(wal);
        let path = dir.path().join(layout::WAL);
        assert_eq!(replay(&store, &path).unwrap().0, 54);
        assert_eq!(std::fs::read(dir.path().join("tasks/t/attempt.json")).unwrap(), b"{\"n\":49}");
        assert!(!dir.path().join("tasks/t/removed.json").exists());
        assert_eq!(std::fs::read(dir.path().join("tasks/t/back.json")).unwrap(), b"again");
    }

    #[test]
    fn parse_says_when_the_bytes_may_end_inside_a_record() {
        let raw = log(3, &[("tasks/t/a.json", b"{\"n\":1}\n"), ("tasks/t/b.json", b"two")]);
        // Cut anywhere: the whole records before the cut, and "cut".
        for end in HEAD as usize..raw.len() {
            let p = parse(&raw[..end]);
            assert!(p.cut, "cut at {end}");
            assert!(p.list.len() < 2, "cut at {end}");
        }
        assert!(parse(&raw[..10]).cut);
        // Followed by plenty of zeros, another epoch's record, or a bad hash: the end.
        for tail in [vec![0; MAX_HEADER], encode(2, "tasks/t/old.json", b"old"), {
            let mut r = encode(3, "tasks/t/c.json", b"ccc");
            let i = r.len() - 2;
            r[i] ^= 1;
            r
        }] {
            let mut v = raw.clone();
            v.extend(&tail);
            let p = parse(&v);
            assert_eq!((p.list.len(), p.cut), (2, false));
        }
        // A few zeros only: maybe a header line longer than they are.
        let mut v = raw.clone();
        v.extend([0; 100]);
        assert!(parse(&v).cut);
    }

    #[test]
    fn parse_reads_whole_records_of_its_epoch_and_stops_at_anything_else() {
        let raw = log(3, &[("tasks/t/a.json", b"{\"n\":1}\n"), ("tasks/t/b.json", b"two\nlines")]);
        let p = parse(&raw);
        assert_eq!(p.epoch, 3);
        assert_eq!(p.list.len(), 2);
        assert_eq!(p.list[1], ("tasks/t/b.json".to_owned(), Some(&b"two\nlines"[..])));
        // A removal: a record without bytes.
        let mut gone = raw.clone();
        let mut rec = Vec::new();
        encode_into(&mut rec, 3, "tasks/t/a.json", None).unwrap();
        gone.extend(&rec);
        assert_eq!(parse(&gone).list[2], ("tasks/t/a.json".to_owned(), None));
        // One that claims bytes all the same is not a record: the replay ends before it.
        let forged = String::from_utf8(rec).unwrap().replace("\"len\":0", "\"len\":1").replacen("\n\n", "\nx\n", 1);
        let mut bad_gone = raw.clone();
        bad_gone.extend(forged.as_bytes());
        assert_eq!(parse(&bad_gone).list.len(), 2);

        // Cut anywhere inside a third record, or zeros after it: the first two.
        let third = encode(3, "tasks/t/c.json", b"third");
        for cut in 0..third.len() {
            let mut torn = raw.clone();
            torn.extend_from_slice(&third[..cut]);
            torn.extend_from_slice(&[0; 100]);
            assert_eq!(parse(&torn).list.len(), 2, "cut at {cut}");
        }
        // A record left from an earlier epoch (the log was emptied since) is void.
        let mut stale = raw.clone();
        stale.extend(encode(2, "tasks/t/old.json", b"old"));
        assert_eq!(parse(&stale).list.len(), 2);
        // A flipped byte in a record's content: the replay stops before it.
        let mut bad = raw.clone();
        let i = bad.len() - 3;
        bad[i] ^= 1;
        assert_eq!(parse(&bad).list.len(), 1);
        // No head (a new, zero-filled log): nothing.
        assert_eq!(parse(&[0; 4096]).list.len(), 0);
    }
}
