//! The change log in the bucket: each node appends immutable segments
//! `_log/{node}/{seq}` (seq zero-padded, so key order is seq order) listing what
//! its pushes changed. Other nodes list a node's segments after their cursor
//! (`start-after`), so a pull costs what is new, not the size of the bucket.
//!
//! A push records each upload or delete in the local outbox
//! (`.clawboard/sync/outbox.jsonl`) as it lands; at the end of the push the outbox
//! becomes one or more segments (conditional create: a retry after a crash finds
//! its own segment and moves on), then the next seq is stored and the outbox
//! emptied. A crash anywhere repeats at most one segment, which pulls apply
//! idempotently.
//!
//! Expiry: a node deletes its own segments older than `sync.log_retention`
//! (default 7 days) once a day. A node whose cursor points before the oldest
//! segment left (away longer than that) reconciles by listing the bucket instead.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Failure, RemoteError, Result};
use crate::remote::{Body, Condition, Metadata, PutOutcome, Remote};
use crate::version::Vv;

pub const LOG_PREFIX: &str = "_log/";
/// Entries per segment at most.
const SEGMENT_ENTRIES: usize = 5_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Put,
    Delete,
}

/// One change in a segment: the version a node pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    #[serde(rename = "p")]
    pub path: String,
    pub op: Op,
    /// BLAKE3 of the content (empty for a delete).
    #[serde(rename = "h", default)]
    pub hash: String,
    #[serde(rename = "s", default)]
    pub size: u64,
    /// HLC stamp of the version.
    #[serde(rename = "t")]
    pub hlc: u64,
    /// Author of the version (the node that made the change).
    #[serde(rename = "a")]
    pub author: String,
    #[serde(rename = "v")]
    pub vv: Vv,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub node: String,
    pub seq: u64,
    pub written_at: String,
    pub entries: Vec<LogEntry>,
}

pub fn node_prefix(node: &str) -> String {
    format!("{LOG_PREFIX}{node}/")
}

pub fn segment_key(node: &str, seq: u64) -> String {
    format!("{LOG_PREFIX}{node}/{seq:020}")
}

/// The seq of a segment key (`None` for anything else under `_log/`).
pub fn seq_of(key: &str) -> Option<u64> {
    let last = key.rsplit('/').next()?;
    (last.len() == 20).then(|| last.parse().ok()).flatten()
}

/// The local outbox and the next segment number.
pub struct Outbox {
    dir: PathBuf,
}

impl Outbox {
    pub fn new(sync_dir: &Path) -> Outbox {
        Outbox { dir: sync_dir.to_owned() }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("outbox.jsonl")
    }

    /// Appends entries (reaches the kernel at once; fsync'd with the push state).
    pub fn append(&self, entries: &[LogEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let path = self.path();
        let mut buf = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut buf, e).map_err(|e| Error::io(&path, e.into()))?;
            buf.push(b'\n');
        }
        let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(|e| Error::io(&path, e))?;
        f.write_all(&buf).and_then(|()| f.sync_data()).map_err(|e| Error::io(&path, e))
    }

    /// What the outbox holds (a line torn by a crash is dropped: its change is in
    /// the push state and reaches other nodes by the next reconcile or change).
    pub fn entries(&self) -> Result<Vec<LogEntry>> {
        let path = self.path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
    }

    /// The seq the next segment gets, if `log-seq` says (`None`: never written here).
    pub fn stored_seq(&self) -> Result<Option<u64>> {
        let path = self.dir.join("log-seq");
        match fs::read_to_string(&path) {
            Ok(s) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, "not a number"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// The seq the next segment gets: `log-seq`, or (when this tree never wrote one,
    /// e.g. restored from a backup under the same node id) one past the newest
    /// segment of this node in the bucket.
    pub async fn next_seq<R: Remote>(&self, remote: &R, node: &str) -> Result<u64> {
        if let Some(n) = self.stored_seq()? {
            return Ok(n);
        }
        let listed = crate::remote::list_all(remote, &node_prefix(node)).await?;
        Ok(listed.iter().filter_map(|o| seq_of(&o.key)).max().map_or(1, |n| n + 1))
    }

    /// Writes the outbox as segments; returns how many. Only this node writes
    /// under `_log/{node}/`, and every push or pull flushes before it appends
    /// anything, so a segment that already exists holds entries of this very outbox,
    /// written before a crash (or a lost response) cut the flush short; its entries
    /// may be written once more under the next seq, which pulls apply idempotently.
    pub async fn flush<R: Remote>(&self, remote: &R, node: &str) -> Result<u64> {
        let entries = self.entries()?;
        if entries.is_empty() {
            return Ok(0);
        }
        let mut seq = self.next_seq(remote, node).await?;
        let mut written = 0;
        for chunk in entries.chunks(SEGMENT_ENTRIES) {
            let segment = Segment {
                node: node.to_owned(),
                seq,
                written_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                entries: chunk.to_vec(),
            };
            let key = segment_key(node, seq);
            let body = serde_json::to_vec(&segment).map_err(|e| Error::io(&key, e.into()))?;
            match remote.put(&key, Body::Bytes(Bytes::from(body)), &Metadata::new(), &Condition::Absent).await {
                Ok(PutOutcome::Stored { .. }) => {}
                Err(e) if e.failure == Failure::PreconditionFailed => {
                    tracing::info!(key, "segment already written before an interruption");
                }
                Ok(PutOutcome::BodyChanged) => {
                    return Err(RemoteError::new(Failure::Permanent, "PUT", &key, "unexpected body change").into());
                }
                Err(e) => return Err(e.into()),
            }
            seq += 1;
            clawboard_core::store::write_atomic(&self.dir, "log-seq", format!("{seq}\n").as_bytes())?;
            written += 1;
        }
        let path = self.path();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
        Ok(written)
    }
}

/// Deletes this node's segments last modified before `cutoff` (by the seq order:
/// segments are written in order, so it stops at the first one to keep). Returns
/// how many went.
pub async fn expire<R: Remote>(remote: &R, node: &str, keep_after: chrono::DateTime<chrono::Utc>) -> Result<usize> {
    let mut gone = 0;
    let mut after: Option<String> = None;
    loop {
        let page = remote.list(&node_prefix(node), after.as_deref(), 1000).await?;
        let mut old = Vec::new();
        let mut stop = false;
        for o in &page.objects {
            let Some((bytes, _)) = remote.get(&o.key).await? else { continue };
            let written = serde_json::from_slice::<Segment>(&bytes)
                .ok()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(&s.written_at).ok());
            match written {
                Some(t) if t < keep_after => old.push(o.key.clone()),
                _ => {
                    stop = true;
                    break;
                }
            }
        }
        // The newest segment always stays: it tells pullers where the log stands.
        if !stop && page.next.is_none() {
            old.pop();
        }
        if !old.is_empty() {
            remote.delete_many(&old).await?;
            gone += old.len();
        }
        match page.next {
            Some(n) if !stop => after = Some(n),
            _ => return Ok(gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(node: &str, seq: u64, written_at: &str) -> Vec<u8> {
        serde_json::to_vec(&Segment { node: node.into(), seq, written_at: written_at.into(), entries: vec![] }).unwrap()
    }

    #[tokio::test]
    async fn expiry_deletes_old_segments_of_this_node_only_and_keeps_the_newest() {
        let d = tempfile::tempdir().unwrap();
        let remote = crate::dir::DirRemote::open(d.path()).unwrap();
        let put = |key: String, body: Vec<u8>| {
            let remote = &remote;
            async move {
                remote.put(&key, Body::Bytes(Bytes::from(body)), &Metadata::new(), &Condition::None).await.unwrap();
            }
        };
        put(segment_key("me", 1), segment("me", 1, "2026-01-01T00:00:00Z")).await;
        put(segment_key("me", 2), segment("me", 2, "2026-01-02T00:00:00Z")).await;
        put(segment_key("me", 3), segment("me", 3, "2026-11-20T00:00:00Z")).await;
        put(segment_key("other", 1), segment("other", 1, "2026-01-01T00:00:00Z")).await;
        let cutoff = chrono::DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z").unwrap().to_utc();
        assert_eq!(expire(&remote, "me", cutoff).await.unwrap(), 2);
        let left: Vec<String> =
            crate::remote::list_all(&remote, LOG_PREFIX).await.unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(left, vec![segment_key("me", 3), segment_key("other", 1)]);
        // All old: the newest still stays (it tells pullers where the log stands).
        let later = chrono::DateTime::parse_from_rfc3339("2027-01-01T00:00:00Z").unwrap().to_utc();
        assert_eq!(expire(&remote, "me", later).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_flush_interrupted_after_its_segment_landed_does_not_write_it_twice() {
        let d = tempfile::tempdir().unwrap();
        let remote = crate::dir::DirRemote::open(&d.path().join("bucket")).unwrap();
        let outbox = Outbox::new(d.path());
        let e = LogEntry {
            path: "gm/a.md".into(),
            op: Op::Put,
            hash: "h".into(),
            size: 1,
            hlc: 7,
            author: "me".into(),
            vv: [("me".to_owned(), 7)].into(),
        };
        outbox.append(std::slice::from_ref(&e)).unwrap();
        // The segment landed, then the process died before the seq moved on.
        std::fs::write(d.path().join("log-seq"), "1\n").unwrap();
        put_raw(&remote, &segment_key("me", 1), &serde_json::to_vec(&e).unwrap()).await;
        assert_eq!(outbox.flush(&remote, "me").await.unwrap(), 1);
        assert_eq!(outbox.stored_seq().unwrap(), Some(2));
        assert!(outbox.entries().unwrap().is_empty());
        assert_eq!(outbox.flush(&remote, "me").await.unwrap(), 0, "nothing left to write");
    }

    async fn put_raw(remote: &crate::dir::DirRemote, key: &str, body: &[u8]) {
        remote.put(key, Body::Bytes(Bytes::copy_from_slice(body)), &Metadata::new(), &Condition::None).await.unwrap();
    }

    #[tokio::test]
    async fn a_tree_without_log_seq_continues_after_the_newest_segment() {
        let d = tempfile::tempdir().unwrap();
        let remote = crate::dir::DirRemote::open(&d.path().join("bucket")).unwrap();
        let outbox = Outbox::new(d.path());
        assert_eq!(outbox.next_seq(&remote, "me").await.unwrap(), 1);
        put_raw(&remote, &segment_key("me", 7), b"{}").await;
        put_raw(&remote, &segment_key("other", 9), b"{}").await;
        assert_eq!(outbox.next_seq(&remote, "me").await.unwrap(), 8);
    }

    #[test]
    fn keys_sort_by_seq() {
        assert!(segment_key("a", 9) < segment_key("a", 10));
        assert_eq!(seq_of(&segment_key("n-1", 42)), Some(42));
        assert_eq!(seq_of("_log/n/notes"), None);
    }
}
