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
use crate::push::{Guards, Pusher, log_entry, sync_dir};
use crate::remote::{Body, Condition, META_HLC, META_NODE, META_VV, ObjectInfo, PutOutcome, Remote};
use crate::report::{Conflict, PullReport, now_text};
use crate::state::Pushed;
use crate::version::{self, Order, Vv};

mod reconcile;

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

const ARBITRATIONS: &str = clawboard_core::layout::GM_ARBITRATIONS;

/// The `gm/arbitrations.md` entry for a conflict (links are relative to `gm/`).
pub fn arbitration_entry(c: &Conflict, copy: &str) -> String {
    format!(
        "\n## {} — sync conflict on {}\n\n\
         - kept: [{}](../{}) (the version from {})\n\
         - copy: [{copy}](../{copy}) (the version from {})\n\
         - outcome: both changed concurrently; compare the two and merge by hand if needed (an escalation was raised).\n",
        c.at, c.path, c.path, c.path, c.winner, c.loser
    )
}

/// `dir/stem.conflict-{node}-{stamp}.ext`.
pub fn conflict_name(path: &str, node: &str, hlc: u64) -> String {
    let (dir, file) = match path.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), path),
    };
    let stamp = version::stamp_text(hlc).replace('.', "");
    match file.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{dir}{stem}.conflict-{node}-{stamp}.{ext}"),
        _ => format!("{dir}{file}.conflict-{node}-{stamp}"),
    }
}

/// The author, version vector and HLC stamp an object's metadata names (HEAD or
/// GET); `None` without clawboard metadata.
fn stamp_of(info: &ObjectInfo) -> Option<(String, Vv, u64)> {
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
fn version_of(info: &ObjectInfo, bytes: &[u8]) -> Option<Pushed> {
    let (author, vv, hlc) = stamp_of(info)?;
    Some(Pushed {
        hash: blake3::hash(bytes).to_hex().to_string(),
        size: bytes.len() as u64,
        vv,
        hlc,
        author,
        etag: info.etag.clone().unwrap_or_default(),
        ..Pushed::default()
    })
}

impl<R: Remote> Pusher<R> {
    /// Applies what other nodes pushed since this node's cursors. `allow_mass_delete`
    /// overrides the mass-delete guard (after a human checked).
    pub async fn pull(&self, allow_mass_delete: bool) -> Result<PullReport> {
        let mut guards = Some(self.exclusive().await?);
        self.load_state()?;
        let started = Instant::now();
        let result = match self.flush_log().await {
            Ok(()) => self.pull_locked(allow_mass_delete, &mut guards).await,
            Err(e) => Err(e),
        };
        let result = result.map(|mut r| {
            r.elapsed_ms = started.elapsed().as_millis() as u64;
            r
        });
        let result = result.map_err(|e| e.at(&self.remote.describe()));
        self.write_pull_status(&result)?;
        result
    }

    /// Raises a `normal` escalation about sync (e.g. a refused pull) and pushes it.
    pub async fn raise(&self, issue: &str) -> Result<()> {
        let _guards = self.exclusive().await?;
        self.load_state()?;
        self.flush_log().await?;
        self.escalate(issue).await?;
        self.with_state(crate::state::PushState::sync)?;
        self.flush_log().await
    }

    /// Node ids with a heartbeat object.
    pub async fn nodes(&self) -> Result<Vec<String>> {
        self.counts.list.fetch_add(1, Ordering::Relaxed);
        let objects = crate::remote::list_all(self.remote.as_ref(), NODES_PREFIX).await?;
        Ok(objects
            .iter()
            .filter_map(|o| o.key.strip_prefix(NODES_PREFIX)?.strip_suffix(".json").map(str::to_owned))
            .collect())
    }

    async fn list_after(&self, prefix: &str, after: Option<String>) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        let mut after = after;
        loop {
            self.counts.list.fetch_add(1, Ordering::Relaxed);
            let page = self.retry(|| self.remote.list(prefix, after.as_deref(), 1000)).await?;
            out.extend(page.objects);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    async fn get(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>> {
        self.counts.get.fetch_add(1, Ordering::Relaxed);
        Ok(self.retry(|| self.remote.get(key)).await?)
    }

    async fn pull_locked<'a>(&'a self, allow_mass_delete: bool, guards: &mut Option<Guards<'a>>) -> Result<PullReport> {
        let dir = sync_dir(&self.root);
        if !dir.join("pull.json").exists() {
            // A node's first pull lists the bucket: objects pushed before the change log
            // existed (or expired from it) are in no segment this node could read.
            return self.reconcile(allow_mass_delete, Cursors::default(), guards).await;
        }
        let mut cursors = Cursors::load(&dir)?;
        let mut report = PullReport::default();
        let mut pending: Vec<Segment> = Vec::new();
        for node in self.nodes().await? {
            if node == self.node {
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
            .filter(|e| e.op == Op::Delete && self.root.join(&e.path).is_file() && !self.is_excluded(&e.path))
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
                .buffered(self.settings.concurrency.max(1));
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
            self.with_state(crate::state::PushState::sync)?;
            cursors.nodes.insert(seg.node.clone(), seg.seq);
            cursors.save(&dir)?;
        }
        self.flush_log().await?;
        Ok(report)
    }

    /// Refuses to delete more than the configured share of the synced tree.
    fn guard_deletes(&self, deletes: usize, allow: bool) -> Result<()> {
        if allow || deletes == 0 {
            return Ok(());
        }
        let tracked = self.with_state(|s| Ok(s.live_paths().count()))?;
        let ratio = self.settings.mass_delete_ratio;
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
            && !self.is_excluded(&e.path)
            && RelPath::new(&e.path).is_ok()
            && self
                .with_state(|s| Ok(s.get(&e.path).map(|r| r.vv.clone()).unwrap_or_default()))
                .is_ok_and(|known| !matches!(version::compare(&e.vv, &known), Order::Older | Order::Same))
    }

    /// One segment entry, with its object when [`Self::wants`] fetched it: apply it.
    async fn apply_entry(&self, e: LogEntry, fetched: Option<Fetched>, report: &mut PullReport) -> Result<()> {
        if clawboard_core::check_id(&e.author).is_err() || e.vv.keys().any(|n| clawboard_core::check_id(n).is_err()) {
            report.skipped.push(format!("{}: not a valid node id in the entry", e.path));
            return Ok(());
        }
        self.clock.observe(e.hlc);
        if self.is_excluded(&e.path) || RelPath::new(&e.path).is_err() {
            report.skipped.push(format!("{}: not a path pull writes", e.path));
            return Ok(());
        }
        let known = self.with_state(|s| Ok(s.get(&e.path).map(|r| r.vv.clone()).unwrap_or_default()))?;
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
        let abs = self.root.join(path);
        // A file reached through a link is not this tree's: it is as good as absent.
        let meta = clawboard_core::store::plain_file(&self.root, path);
        let live = rec.and_then(Pushed::live);
        Ok(match (meta, live) {
            (None, None) => Local { exists: false, hash: String::new(), stamp: None, dirty: false },
            (None, Some(_)) => Local { exists: false, hash: String::new(), stamp: None, dirty: true },
            (Some(m), Some(r)) if Stamp::of(&m).size == r.size && Stamp::of(&m).mtime_ns == r.mtime_ns => {
                Local { exists: true, hash: r.hash.clone(), stamp: Some(Stamp::of(&m)), dirty: false }
            }
            (Some(m), r) => {
                let bytes = read_plain(&self.root, path)?.ok_or_else(|| {
                    Error::io(&abs, std::io::Error::other("changed into something other than a regular file"))
                })?;
                let hash = blake3::hash(&bytes).to_hex().to_string();
                let dirty = r.is_none_or(|r| r.hash != hash);
                Local { exists: true, hash, stamp: Some(Stamp::of(&m)), dirty }
            }
        })
    }

    /// Applies a version from the bucket: skip, fast-forward, or resolve a conflict.
    async fn apply(&self, inc: Incoming, report: &mut PullReport) -> Result<()> {
        let path = inc.path.clone();
        self.clock.observe(inc.record.hlc);
        let rec = self.with_state(|s| Ok(s.get(&path).cloned()))?;
        let base_vv = rec.as_ref().map(|r| r.vv.clone()).unwrap_or_default();
        let order = version::compare(&inc.record.vv, &base_vv);
        if matches!(order, Order::Older | Order::Same) {
            return Ok(());
        }
        let local = self.local(&path, rec.as_ref())?;
        // A task this node lost: the claim's owner is right, whatever is here.
        if (order == Order::Newer && !local.dirty) || self.is_fenced(&path) {
            return self.write_version(inc, report);
        }
        // Both sides changed since a common version.
        let mine = if local.dirty {
            let mtime_ms = local.stamp.map_or(0, |s| u64::try_from(s.mtime_ns / 1_000_000).unwrap_or(0));
            let hlc = self.clock.tick_at(mtime_ms);
            let mut vv = base_vv.clone();
            vv.insert(self.node.clone(), hlc);
            Pushed {
                hash: local.hash.clone(),
                vv,
                hlc,
                author: self.node.clone(),
                deleted: !local.exists,
                ..Pushed::default()
            }
        } else {
            rec.clone().unwrap_or_default()
        };
        let mut merged: Vv = mine.vv.clone();
        version::merge(&mut merged, &inc.record.vv);
        let same_content = mine.deleted == inc.record.deleted && (mine.deleted || mine.hash == inc.record.hash);
        if same_content {
            // Same bytes (or both deleted): the incoming version, on top of what this
            // node had shared (not the local edit's fresh stamp, which no one else saw).
            let mut shared = base_vv.clone();
            version::merge(&mut shared, &inc.record.vv);
            let stamp = local.stamp;
            let record = Pushed {
                vv: shared,
                size: stamp.map_or(0, |s| s.size),
                mtime_ns: stamp.map_or(0, |s| s.mtime_ns),
                ..inc.record
            };
            return self.with_state(|s| s.record(&path, Some(record)));
        }
        if !mine.deleted
            && !inc.record.deleted
            && let Some(theirs) = &inc.body
        {
            let abs = self.root.join(&path);
            let ours = read_plain(&self.root, &path)?
                .ok_or_else(|| Error::io(&abs, std::io::Error::other("not a regular file in the tree")))?;
            if let Some(both) = clawboard_core::merge::merge(&path, &ours, theirs) {
                return self.write_merged(&path, merged, both).await;
            }
        }
        // A file this node never shared loses to the bucket's version (a fresh tree's
        // defaults must not overwrite what the others have); it is kept as a copy
        // unless it is exactly the layout's initial content.
        let never_shared = rec.is_none();
        let theirs_win = match (mine.deleted, inc.record.deleted) {
            (true, false) => true,
            (false, true) => false,
            _ if never_shared => true,
            _ => (inc.record.hlc, inc.record.author.as_str()) > (mine.hlc, mine.author.as_str()),
        };
        let initial_default = never_shared
            && clawboard_core::layout::initial_files()
                .iter()
                .any(|(p, content)| *p == path && blake3::hash(content.as_bytes()).to_hex().as_str() == mine.hash);
        let (winner, loser) = if theirs_win { (&inc.record, &mine) } else { (&mine, &inc.record) };
        let copy = (!loser.deleted && !initial_default).then(|| conflict_name(&path, &loser.author, loser.hlc));
        if initial_default {
            return self
                .write_version(Incoming { path, record: Pushed { vv: merged, ..inc.record }, body: inc.body }, report);
        }
        tracing::warn!(path, winner = %winner.author, loser = %loser.author, copy = ?copy, "sync conflict");
        if let Some(copy) = &copy {
            let bytes = if theirs_win {
                let abs = self.root.join(&path);
                Bytes::from(
                    read_plain(&self.root, &path)?
                        .ok_or_else(|| Error::io(&abs, std::io::Error::other("not a regular file in the tree")))?,
                )
            } else {
                inc.body.clone().unwrap_or_default()
            };
            self.cap_conflict_copies(&path).await?;
            self.put_new_file(copy, bytes).await?;
        }
        let winner = Pushed { vv: merged, ..winner.clone() };
        if theirs_win {
            self.write_version(Incoming { path: path.clone(), record: winner.clone(), body: inc.body }, report)?;
        } else {
            let stamp = self.local(&path, None)?.stamp;
            let record = Pushed {
                size: stamp.map_or(0, |s| s.size),
                mtime_ns: stamp.map_or(0, |s| s.mtime_ns),
                ..winner.clone()
            };
            self.with_state(|s| s.record(&path, Some(record)))?;
        }
        // The bucket may hold the loser (pushed last): push the winner with both histories.
        self.repush(&path, &winner).await?;
        let conflict = Conflict {
            path: path.clone(),
            copy: copy.clone(),
            winner: winner.author.clone(),
            loser: loser.author.clone(),
            at: now_text(),
        };
        self.note_conflict(&conflict, loser.author == self.node).await?;
        report.conflicts.push(conflict);
        Ok(())
    }

    /// Writes the merge of two concurrent versions as a new version descending from both.
    async fn write_merged(&self, path: &str, vv: Vv, bytes: Vec<u8>) -> Result<()> {
        tracing::info!(path, "merged concurrent changes");
        self.write_own(path, vv, Bytes::from(bytes)).await
    }

    /// Writes (or deletes) a version into the tree and records it.
    fn write_version(&self, inc: Incoming, report: &mut PullReport) -> Result<()> {
        let rel = RelPath::new(&inc.path)?;
        let writer = self.writer.lock().clone();
        let mut record = inc.record;
        if record.deleted {
            writer.remove(&rel)?;
            report.deleted += 1;
        } else {
            let body = inc.body.unwrap_or_default();
            writer.write_bytes(&rel, &body)?;
            let abs = self.root.join(&inc.path);
            let meta = std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?;
            let stamp = Stamp::of(&meta);
            record.size = stamp.size;
            record.mtime_ns = stamp.mtime_ns;
            report.applied += 1;
        }
        self.with_state(|s| s.record(&inc.path, Some(record)))
    }

    /// Uploads `winner` (the local file, or a delete) with its merged history.
    async fn repush(&self, path: &str, winner: &Pushed) -> Result<()> {
        let mut record = self.with_state(|s| Ok(s.get(path).cloned()))?.unwrap_or_else(|| winner.clone());
        if record.deleted {
            self.counts.delete.fetch_add(1, Ordering::Relaxed);
            self.retry(|| self.remote.delete(path)).await?;
        } else {
            let abs = self.root.join(path);
            let bytes = read_plain(&self.root, path)?
                .ok_or_else(|| Error::io(&abs, std::io::Error::other("not a regular file in the tree; not pushed")))?;
            let bytes = Bytes::from(bytes);
            let meta = self.metadata(&record);
            self.counts.put.fetch_add(1, Ordering::Relaxed);
            let outcome =
                self.retry(|| self.remote.put(path, Body::Bytes(bytes.clone()), &meta, &Condition::None)).await?;
            if let PutOutcome::Stored { etag: Some(e) } = outcome {
                record.etag = e;
            }
        }
        self.outbox.append(&[log_entry(path, &record)])?;
        self.with_state(|s| s.record(path, Some(record)))
    }

    /// Writes a new file this node creates during a pull (a conflict copy, an
    /// escalation) and pushes it at once.
    pub(crate) async fn put_new_file(&self, path: &str, bytes: Bytes) -> Result<()> {
        let base = self.with_state(|s| Ok(s.get(path).map(|r| r.vv.clone())))?.unwrap_or_default();
        self.write_own(path, base, bytes).await
    }

    /// Writes `bytes` at `path` as a new version by this node on top of history `vv`,
    /// records it and pushes it at once.
    async fn write_own(&self, path: &str, mut vv: Vv, bytes: Bytes) -> Result<()> {
        let writer = self.writer.lock().clone();
        writer.write_bytes(&RelPath::new(path)?, &bytes)?;
        let abs = self.root.join(path);
        let stamp = Stamp::of(&std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?);
        let hlc = self.clock.now();
        vv.insert(self.node.clone(), hlc);
        let record = Pushed {
            vv,
            hlc,
            author: self.node.clone(),
            ..Pushed::file(blake3::hash(&bytes).to_hex().to_string(), stamp.size, stamp.mtime_ns)
        };
        self.with_state(|s| s.record(path, Some(record.clone())))?;
        self.repush(path, &record).await
    }

    /// Keeps at most `sync.max_conflict_copies` copies of `path`: the oldest go.
    async fn cap_conflict_copies(&self, path: &str) -> Result<()> {
        let copies = self.conflict_copies(path);
        let cap = self.settings.max_conflict_copies.max(1);
        if copies.len() < cap {
            return Ok(());
        }
        let writer = self.writer.lock().clone();
        for old in &copies[..=copies.len() - cap] {
            tracing::warn!(
                copy = old,
                "more than sync.max_conflict_copies = {cap} conflict copies; removing the oldest"
            );
            writer.remove(&RelPath::new(old)?)?;
            let hlc = self.clock.now();
            let mut vv = self.with_state(|s| Ok(s.get(old).map(|r| r.vv.clone())))?.unwrap_or_default();
            vv.insert(self.node.clone(), hlc);
            let tomb = Pushed { vv, hlc, author: self.node.clone(), deleted: true, ..Pushed::default() };
            self.with_state(|s| s.record(old, Some(tomb.clone())))?;
            self.repush(old, &tomb).await?;
        }
        Ok(())
    }

    /// Conflict copies of `path` in the tree, oldest first (by the stamp in the name).
    fn conflict_copies(&self, path: &str) -> Vec<String> {
        let probe = conflict_name(path, "\u{1}", 0);
        let (dir, file) = probe.rsplit_once('/').map_or((String::new(), probe.as_str()), |(d, f)| (format!("{d}/"), f));
        let Some((head, tail)) = file.split_once('\u{1}') else { return Vec::new() };
        let stamp0 = version::stamp_text(0).replace('.', "");
        let tail = tail.trim_start_matches('-').trim_start_matches(stamp0.as_str()).to_owned();
        if !clawboard_core::store::real_dir(&self.root, &dir) {
            return Vec::new();
        }
        let Ok(entries) = std::fs::read_dir(self.root.join(&dir)) else { return Vec::new() };
        let mut found: Vec<(String, String)> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(head) && n.ends_with(&tail) && n.len() > head.len() + tail.len())
            .map(|n| {
                let middle = &n[head.len()..n.len() - tail.len()];
                let stamp = middle.rsplit('-').next().unwrap_or("").to_owned();
                (stamp, format!("{dir}{n}"))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, p)| p).collect()
    }

    /// Records a conflict for `sync status`, and (on the node whose version lost)
    /// raises a `normal` escalation.
    async fn note_conflict(&self, c: &Conflict, escalate: bool) -> Result<()> {
        let dir = sync_dir(&self.root);
        let path = dir.join("conflicts.jsonl");
        let mut line = serde_json::to_vec(c).map_err(|e| Error::io(&path, e.into()))?;
        line.push(b'\n');
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&line))
            .map_err(|e| Error::io(&path, e))?;
        if !escalate {
            return Ok(());
        }
        let issue = match &c.copy {
            Some(copy) => format!(
                "sync conflict on {}: this node's version and {}'s changed concurrently; {}'s version won and the other is kept as {copy}. Compare the two and merge by hand if needed.",
                c.path, c.winner, c.winner
            ),
            None => format!(
                "sync conflict on {}: a delete lost against a change by {}; the file was kept",
                c.path, c.winner
            ),
        };
        self.escalate(&issue).await?;
        // Secondary to the escalation: a failure is logged, not raised.
        if let Some(copy) = &c.copy
            && !c.path.starts_with(ARBITRATIONS.trim_end_matches(".md"))
            && let Err(e) = self.note_arbitration(c, copy).await
        {
            tracing::warn!(path = %c.path, "cannot add the conflict to {ARBITRATIONS}: {e}");
        }
        Ok(())
    }

    /// Appends the conflict to `gm/arbitrations.md`, with links to both versions, and
    /// pushes it. A conflict on that file itself adds no entry, so an entry can never
    /// cause the next one.
    async fn note_arbitration(&self, c: &Conflict, copy: &str) -> Result<()> {
        let rel = ARBITRATIONS;
        let abs = self.root.join(rel);
        let mut body = match read_plain(&self.root, rel)? {
            Some(b) => b,
            None if std::fs::symlink_metadata(&abs).is_err() => b"# Arbitrations\n".to_vec(),
            None => {
                return Err(Error::io(&abs, std::io::Error::other("not a regular file (a link?); no entry added")));
            }
        };
        body.extend_from_slice(arbitration_entry(c, copy).as_bytes());
        self.put_new_file(rel, Bytes::from(body)).await
    }

    /// Writes `escalations/{id}.json` (level normal, from `sync@{node}`) and pushes it.
    pub(crate) async fn escalate(&self, issue: &str) -> Result<()> {
        let id = format!("{}-sync-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"), self.node);
        let esc = clawboard_core::formats::Escalation::raised(
            clawboard_core::formats::Level::Normal,
            format!("sync@{}", self.node),
            issue,
        );
        let body = clawboard_core::store::to_pretty_json(&esc);
        self.put_new_file(&format!("escalations/{id}.json"), Bytes::from(body)).await
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
mod tests {
    use super::*;

    #[test]
    fn conflict_names_keep_the_extension_and_sort_by_time() {
        let t = (1_763_786_043_123u64 << 16) | 5;
        assert_eq!(conflict_name("gm/notes.md", "node-a", t), "gm/notes.conflict-node-a-20251122T043403123Z.md");
        assert_eq!(conflict_name("README", "n", t), "README.conflict-n-20251122T043403123Z");
        assert_eq!(conflict_name(".hidden", "n", t), ".hidden.conflict-n-20251122T043403123Z");
        assert_eq!(conflict_name("a/b.tar.gz", "n", t), "a/b.tar.conflict-n-20251122T043403123Z.gz");
        assert!(conflict_name("x.md", "n", t) < conflict_name("x.md", "n", t + (1 << 16)));
    }
}

#[cfg(test)]
mod failure_tests;
