//! Pull: other nodes' changes, from their change-log segments, into the tree.
//!
//! For each node in `_nodes/`, the segments after this node's cursor for it are
//! listed (`start-after`) and read; each entry's object is fetched and applied
//! through the store (atomically; journaled with `origin = remote`, so it is never
//! pushed back) and recorded as the version this node now shares with the bucket.
//! A node's cursor moves past a segment only once all of it is applied and recorded.
//!
//! Versions are compared by version vector ([`crate::version`]): an older or equal
//! version is skipped, a newer one replaces a file this node did not change, and a
//! concurrent one is a conflict: the later HLC stamp wins (ties by node id), the
//! other version is kept beside it as `NAME.conflict-{node}-{stamp}.EXT`, a delete
//! never beats a modify, and the winner is pushed again with the merged history so
//! the bucket holds it. Every node resolves a conflict the same way, so all end with
//! the same file and the same conflict copy.
//!
//! A node's first pull, and a gap in a node's segments (expired while this node
//! was away), fall back to a full reconcile by listing the bucket. A pull that would delete more than
//! `sync.mass_delete_ratio` of the tree, or a bucket that lists empty while this
//! node has synced files, is refused and escalated.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use clawboard_core::RelPath;
use clawboard_core::index::Stamp;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::log::{self, LogEntry, Op, Segment};
use crate::node::NODES_PREFIX;
use crate::remote::{META_HLC, META_NODE, META_VV, ObjectInfo, Remote};
use crate::report::{PullReport, now_text};
use crate::shared::{Guards, SyncState, sync_dir};
use crate::state::Pushed;
use crate::version::{self, Order, Vv};

mod conflict;
mod reconcile;

pub use crate::copy::conflict_name;
pub use conflict::arbitration_entry;

/// Per-node cursors: the last segment seq applied, in `.clawboard/sync/pull.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cursors {
    nodes: BTreeMap<String, u64>,
}

impl Cursors {
    fn load(dir: &Path) -> Result<Cursors> {
        let path = dir.join("pull.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cursors::default()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    fn save(&self, dir: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| Error::io(dir.join("pull.json"), e.into()))?;
        clawboard_core::store::write_atomic(dir, "pull.json", &bytes)?;
        Ok(())
    }
}

/// An object as fetched: `None` when there is no such object.
type Fetched = Option<(Bytes, ObjectInfo)>;

/// A version as found in the bucket or a segment.
#[derive(Debug, Clone)]
struct Incoming {
    path: String,
    record: Pushed,
    body: Option<Bytes>,
}

/// The local file compared with its record.
struct Local {
    exists: bool,
    hash: String,
    stamp: Option<Stamp>,
    /// Changed since the record (or never recorded).
    dirty: bool,
}

/// The writing node, version vector and HLC stamp an object's metadata names (HEAD or
/// GET); `None` without clawboard metadata.
pub(crate) fn stamp_of(info: &ObjectInfo) -> Option<(String, Vv, u64)> {
    let author = info.metadata.get(META_NODE)?.clone();
    clawboard_core::check_id(&author).ok()?;
    // Objects pushed before versions existed: one version by their author.
    let (vv, hlc) = match (info.metadata.get(META_VV), info.metadata.get(META_HLC)) {
        (Some(vv), Some(hlc)) => (version::decode(vv)?, hlc.parse().ok()?),
        _ => (Vv::from([(author.clone(), 1)]), 1),
    };
    if vv.keys().any(|n| clawboard_core::check_id(n).is_err()) {
        return None;
    }
    Some((author, vv, hlc))
}

/// The version an object's metadata names; `None` without clawboard metadata.
/// `bytes` were read with [`SyncState::get_checked`]: a hash the metadata names is
/// theirs, and is not computed again.
fn version_of(info: &ObjectInfo, bytes: &[u8]) -> Option<Pushed> {
    let (author, vv, hlc) = stamp_of(info)?;
    Some(Pushed {
        hash: info.blake3().map_or_else(|| blake3::hash(bytes).to_hex().to_string(), str::to_owned),
        size: bytes.len() as u64,
        vv,
        hlc,
        author,
        etag: info.etag.clone().unwrap_or_default(),
        ..Pushed::default()
    })
}

/// The pull job: other nodes' changes, from the bucket into the tree.
pub struct Pull<R: Remote> {
    sync: Arc<SyncState<R>>,
}

impl<R: Remote> Pull<R> {
    pub fn new(sync: Arc<SyncState<R>>) -> Pull<R> {
        Pull { sync }
    }

    pub fn sync(&self) -> &SyncState<R> {
        &self.sync
    }

    /// Applies what other nodes pushed since this node's cursors. `allow_mass_delete`
    /// overrides the mass-delete guard (after a human checked).
    pub async fn pull(&self, allow_mass_delete: bool) -> Result<PullReport> {
        let mut guards = Some(self.sync.exclusive().await?);
        self.sync.load_state()?;
        let started = Instant::now();
        let result = match self.sync.flush_log().await {
            Ok(()) => self.pull_locked(allow_mass_delete, &mut guards).await,
            Err(e) => Err(e),
        };
        let result = result.map(|mut r| {
            r.elapsed_ms = started.elapsed().as_millis() as u64;
            r
        });
        let result = result.map_err(|e| e.at(&self.sync.remote.describe()));
        self.write_pull_status(&result)?;
        result
    }

    /// Raises a `normal` escalation about sync (e.g. a refused pull) and pushes it.
    pub async fn raise(&self, issue: &str) -> Result<()> {
        let _guards = self.sync.exclusive().await?;
        self.sync.load_state()?;
        self.sync.flush_log().await?;
        self.escalate(issue).await?;
        self.sync.with_state(crate::state::PushState::sync)?;
        self.sync.flush_log().await
    }

    /// Node ids with a heartbeat object.
    pub async fn nodes(&self) -> Result<Vec<String>> {
        self.sync.counts.list.fetch_add(1, Ordering::Relaxed);
        let objects = crate::remote::list_all(&self.sync.remote, NODES_PREFIX).await?;
        Ok(objects
            .iter()
            .filter_map(|o| o.key.strip_prefix(NODES_PREFIX)?.strip_suffix(".json").map(str::to_owned))
            .collect())
    }

    async fn list_after(&self, prefix: &str, after: Option<String>) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        let mut after = after;
        loop {
            self.sync.counts.list.fetch_add(1, Ordering::Relaxed);
            let page = self.sync.retry(|| self.sync.remote.list(prefix, after.as_deref(), 1000)).await?;
            out.extend(page.objects);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    async fn get(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>> {
        Ok(self.sync.get_checked(key).await?)
    }

    async fn pull_locked<'a>(&'a self, allow_mass_delete: bool, guards: &mut Option<Guards<'a>>) -> Result<PullReport> {
        let dir = sync_dir(&self.sync.root);
        if !dir.join("pull.json").exists() {
            // A node's first pull lists the bucket: objects pushed before the change log
            // existed (or expired from it) are in no segment this node could read.
            return self.reconcile(allow_mass_delete, Cursors::default(), guards).await;
        }
        let mut cursors = Cursors::load(&dir)?;
        let mut report = PullReport::default();
        let mut pending: Vec<Segment> = Vec::new();
        for node in self.nodes().await? {
            if node == self.sync.node {
                continue;
            }
            let at = cursors.nodes.get(&node).copied().unwrap_or(0);
            let after = (at > 0).then(|| log::segment_key(&node, at));
            let listed = self.list_after(&log::node_prefix(&node), after).await?;
            let mut expect = at + 1;
            for o in listed {
                let Some(seq) = log::seq_of(&o.key) else { continue };
                if seq != expect {
                    tracing::warn!(
                        node,
                        cursor = at,
                        found = seq,
                        "the change log no longer covers this node's cursor; reconciling by listing"
                    );
                    return self.reconcile(allow_mass_delete, cursors, guards).await;
                }
                expect += 1;
                let Some((bytes, _)) = self.get(&o.key).await? else {
                    tracing::warn!(
                        key = o.key,
                        "a segment vanished while being read (expired); reconciling by listing"
                    );
                    return self.reconcile(allow_mass_delete, cursors, guards).await;
                };
                match serde_json::from_slice::<Segment>(&bytes) {
                    Ok(s) if s.node == node && s.seq == seq => pending.push(s),
                    Ok(_) | Err(_) => {
                        tracing::warn!(key = o.key, "not a change-log segment; skipped");
                        report.skipped.push(format!("{}: not a change-log segment", o.key));
                        // Still counts as read: an unreadable segment must not stall the node forever.
                        pending.push(Segment { node: node.clone(), seq, written_at: String::new(), entries: vec![] });
                    }
                }
            }
        }
        // The guard, before anything is applied.
        let mut last: HashMap<&str, &LogEntry> = HashMap::new();
        for s in &pending {
            for e in &s.entries {
                last.insert(e.path.as_str(), e);
            }
        }
        let deletes = last
            .values()
            .filter(|e| e.op == Op::Delete && self.sync.root.join(&e.path).is_file() && !self.sync.is_excluded(&e.path))
            .count();
        self.guard_deletes(deletes, allow_mass_delete)?;
        for seg in pending {
            report.segments += 1;
            let mut latest: BTreeMap<String, LogEntry> = BTreeMap::new();
            for e in seg.entries {
                latest.insert(e.path.clone(), e);
            }
            // Objects are fetched `sync.concurrency` at a time and applied in order as
            // they arrive. A remote failure stops the pull (the cursor stays before this
            // segment); a local one (a path that cannot be written here) skips the entry.
            let mut fetched = futures_util::stream::iter(latest.into_values())
                .map(|e| async move {
                    let got = if self.wants(&e) { self.get(&e.path).await.map(Some) } else { Ok(None) };
                    (e, got)
                })
                .buffered(self.sync.settings.concurrency.max(1));
            while let Some((e, got)) = fetched.next().await {
                let path = e.path.clone();
                match self.apply_entry(e, got?, &mut report).await {
                    Ok(()) => {}
                    Err(err @ (Error::Remote(_) | Error::At { .. })) => return Err(err),
                    Err(err) => {
                        tracing::warn!(path, "not applied: {err}");
                        report.skipped.push(format!("{path}: {err}"));
                    }
                }
            }
            self.sync.with_state(crate::state::PushState::sync)?;
            cursors.nodes.insert(seg.node.clone(), seg.seq);
            cursors.save(&dir)?;
        }
        self.sync.flush_log().await?;
        Ok(report)
    }

    /// Refuses to delete more than the configured share of the synced tree.
    fn guard_deletes(&self, deletes: usize, allow: bool) -> Result<()> {
        if allow || deletes == 0 {
            return Ok(());
        }
        let tracked = self.sync.with_state(|s| Ok(s.live_paths().count()))?;
        let ratio = self.sync.settings.mass_delete_ratio;
        if deletes >= 10 && deletes as f64 > ratio * tracked as f64 {
            return Err(Error::Refused {
                reason: format!(
                    "it would delete {deletes} of {tracked} synced files, more than sync.mass_delete_ratio = {ratio}"
                ),
            });
        }
        Ok(())
    }

    /// True for an entry whose object pull must fetch (a put newer than what is known).
    fn wants(&self, e: &LogEntry) -> bool {
        e.op == Op::Put
            && !self.sync.is_excluded(&e.path)
            && RelPath::new(&e.path).is_ok()
            && self
                .sync
                .with_state(|s| Ok(s.get(&e.path).map(|r| r.vv.clone()).unwrap_or_default()))
                .is_ok_and(|known| !matches!(version::compare(&e.vv, &known), Order::Older | Order::Same))
    }

    /// One segment entry, with its object when [`Self::wants`] fetched it: apply it.
    async fn apply_entry(&self, e: LogEntry, fetched: Option<Fetched>, report: &mut PullReport) -> Result<()> {
        if clawboard_core::check_id(&e.author).is_err() || e.vv.keys().any(|n| clawboard_core::check_id(n).is_err()) {
            report.skipped.push(format!("{}: not a valid node id in the entry", e.path));
            return Ok(());
        }
        self.sync.clock.observe(e.hlc);
        if self.sync.is_excluded(&e.path) || RelPath::new(&e.path).is_err() {
            report.skipped.push(format!("{}: not a path pull writes", e.path));
            return Ok(());
        }
        let known = self.sync.with_state(|s| Ok(s.get(&e.path).map(|r| r.vv.clone()).unwrap_or_default()))?;
        if matches!(version::compare(&e.vv, &known), Order::Older | Order::Same) {
            return Ok(());
        }
        let incoming = match e.op {
            Op::Delete => Incoming {
                path: e.path.clone(),
                record: Pushed { vv: e.vv, hlc: e.hlc, author: e.author, deleted: true, ..Pushed::default() },
                body: None,
            },
            Op::Put => {
                // The bucket holds the newest version pushed; it may be later than the entry.
                let got = match fetched {
                    Some(got) => got,
                    None => self.get(&e.path).await?,
                };
                let Some((bytes, info)) = got else {
                    return Ok(()); // deleted since: a later entry says so
                };
                let record = match version_of(&info, &bytes) {
                    Some(r) => r,
                    None if blake3::hash(&bytes).to_hex().as_str() == e.hash => Pushed {
                        hash: e.hash.clone(),
                        size: e.size,
                        vv: e.vv,
                        hlc: e.hlc,
                        author: e.author,
                        ..Pushed::default()
                    },
                    None => {
                        report.skipped.push(format!("{}: the object has no clawboard version", e.path));
                        return Ok(());
                    }
                };
                Incoming { path: e.path.clone(), record, body: Some(bytes) }
            }
        };
        self.apply(incoming, report).await
    }

    /// The local file against its record.
    fn local(&self, path: &str, rec: Option<&Pushed>) -> Result<Local> {
        let abs = self.sync.root.join(path);
        // A file reached through a link is not this tree's: it is as good as absent.
        let meta = clawboard_core::store::plain_file(&self.sync.root, path);
        let live = rec.and_then(Pushed::live);
        Ok(match (meta, live) {
            (None, None) => Local { exists: false, hash: String::new(), stamp: None, dirty: false },
            (None, Some(_)) => Local { exists: false, hash: String::new(), stamp: None, dirty: true },
            (Some(m), Some(r)) if Stamp::of(&m).size == r.size && Stamp::of(&m).mtime_ns == r.mtime_ns => {
                Local { exists: true, hash: r.hash.clone(), stamp: Some(Stamp::of(&m)), dirty: false }
            }
            (Some(m), r) => {
                let bytes = read_plain(&self.sync.root, path)?.ok_or_else(|| {
                    Error::io(&abs, std::io::Error::other("changed into something other than a regular file"))
                })?;
                let hash = blake3::hash(&bytes).to_hex().to_string();
                let dirty = r.is_none_or(|r| r.hash != hash);
                Local { exists: true, hash, stamp: Some(Stamp::of(&m)), dirty }
            }
        })
    }

    fn write_pull_status(&self, result: &Result<PullReport>) -> Result<()> {
        self.sync.update_status(|status| match result {
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
}

/// The bytes of `root/rel` if it is a regular file reached through real directories
/// (never a link, never a FIFO); `None` when it is not such a file.
fn read_plain(root: &std::path::Path, rel: &str) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let abs = root.join(rel);
    let Some(mut f) = clawboard_core::store::open_plain(root, rel).map_err(|e| Error::io(&abs, e))? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| Error::io(&abs, e))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod failure_tests;
