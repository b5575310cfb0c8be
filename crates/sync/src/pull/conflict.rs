//! Applying a version from the bucket, and what a conflict leaves behind: the
//! winner written and pushed again with the merged history, the loser kept as a
//! conflict copy (at most `sync.max_conflict_copies` of them), an entry in
//! `gm/arbitrations.md`, and an escalation on the node whose version lost.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use clawboard_core::RelPath;
use clawboard_core::index::Stamp;

use super::{Incoming, Pull, read_plain};
use crate::error::{Error, Result};
use crate::remote::{Body, Condition, PutOutcome, Remote};
use crate::report::{Conflict, PullReport, now_text};
use crate::shared::{log_entry, sync_dir};
use crate::state::Pushed;
use crate::version::{self, Order, Vv};

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

/// Whether `conflicts.jsonl` at `path` has a conflict kept as `copy`.
fn noted(path: &std::path::Path, copy: Option<&str>) -> Result<bool> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(path, e)),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str::<Conflict>(l).ok()).any(|c| c.copy.as_deref() == copy))
}

/// The path `copy` is a conflict copy of, when it is one of `node`'s versions
/// (named by [`conflict_name`]): `gm/a.conflict-n1-20261127T033107736Z.md` → `gm/a.md`.
pub fn copy_of(copy: &str, node: &str) -> Option<String> {
    let (dir, file) = match copy.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), copy),
    };
    let (stem, rest) = file.split_once(&format!(".conflict-{node}-"))?;
    let (stamp, ext) = match rest.split_once('.') {
        Some((stamp, ext)) => (stamp, Some(ext)),
        None => (rest, None),
    };
    let stamp_like = !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit() || b == b'T' || b == b'Z');
    if stem.is_empty() || !stamp_like {
        return None;
    }
    Some(match ext {
        Some(ext) => format!("{dir}{stem}.{ext}"),
        None => format!("{dir}{stem}"),
    })
}

impl<R: Remote> Pull<R> {
    /// Applies a version from the bucket: skip, fast-forward, or resolve a conflict.
    pub(super) async fn apply(&self, inc: Incoming, report: &mut PullReport) -> Result<()> {
        let path = inc.path.clone();
        self.sync.clock.observe(inc.record.hlc);
        let rec = self.sync.with_state(|s| Ok(s.get(&path).cloned()))?;
        let base_vv = rec.as_ref().map(|r| r.vv.clone()).unwrap_or_default();
        let order = version::compare(&inc.record.vv, &base_vv);
        if matches!(order, Order::Older | Order::Same) {
            return Ok(());
        }
        let local = self.local(&path, rec.as_ref())?;
        // A task this node lost: the claim's owner is right, whatever is here.
        if (order == Order::Newer && !local.dirty) || self.sync.is_fenced(&path) {
            // A copy of one of this node's versions, made by the node that found the
            // conflict and won it: this node's version lost, which it is told of as
            // if it had found the conflict itself.
            let lost = (rec.is_none() && !local.exists && !inc.record.deleted && inc.record.author != self.sync.node)
                .then(|| copy_of(&path, &self.sync.node))
                .flatten()
                .map(|original| Conflict {
                    path: original,
                    copy: Some(path.clone()),
                    winner: inc.record.author.clone(),
                    loser: self.sync.node.clone(),
                    at: now_text(),
                });
            self.write_version(inc, report)?;
            if let Some(conflict) = lost {
                self.note_conflict(&conflict, true).await?;
                report.conflicts.push(conflict);
            }
            return Ok(());
        }
        // Both sides changed since a common version.
        let mine = if local.dirty {
            let mtime_ms = local.stamp.map_or(0, |s| u64::try_from(s.mtime_ns / 1_000_000).unwrap_or(0));
            let hlc = self.sync.clock.tick_at(mtime_ms);
            let mut vv = base_vv.clone();
            vv.insert(self.sync.node.clone(), hlc);
            Pushed {
                hash: local.hash.clone(),
                vv,
                hlc,
                author: self.sync.node.clone(),
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
            return self.sync.with_state(|s| s.record(&path, Some(record)));
        }
        if !mine.deleted
            && !inc.record.deleted
            && let Some(theirs) = &inc.body
        {
            let abs = self.sync.root.join(&path);
            let ours = read_plain(&self.sync.root, &path)?
                .ok_or_else(|| Error::io(&abs, std::io::Error::other("not a regular file in the tree")))?;
            if let Some(both) = clawboard_core::merge::merge(&path, &ours, theirs) {
                return self.write_merged(&path, merged, both).await;
            }
        }
        // A file this node never shared loses to the bucket's version (a fresh tree's
        // defaults must not overwrite what the others have); it is kept as a copy
        // unless it is exactly the layout's initial content.
        let never_shared = rec.is_none();
        // A task's directory is written by the node that holds its claim: its
        // version wins there, whatever reached the bucket first (another node that
        // took in the same task and lost the claim may have pushed its copy).
        let claim_here = crate::shared::task_of(&path).is_some_and(|task| {
            crate::node::held_generation(&self.sync.root, task).is_some()
                && !crate::node::is_fenced(&self.sync.root, task)
        });
        let theirs_win = match (mine.deleted, inc.record.deleted) {
            _ if claim_here => false,
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
                let abs = self.sync.root.join(&path);
                Bytes::from(
                    read_plain(&self.sync.root, &path)?
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
            self.sync.with_state(|s| s.record(&path, Some(record)))?;
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
        self.note_conflict(&conflict, loser.author == self.sync.node).await?;
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
        let writer = &self.sync.writer;
        let mut record = inc.record;
        if record.deleted {
            writer.remove(&rel)?;
            report.deleted += 1;
        } else {
            let body = inc.body.unwrap_or_default();
            writer.write_bytes(&rel, &body)?;
            let abs = self.sync.root.join(&inc.path);
            let meta = std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?;
            let stamp = Stamp::of(&meta);
            record.size = stamp.size;
            record.mtime_ns = stamp.mtime_ns;
            report.applied += 1;
        }
        self.sync.with_state(|s| s.record(&inc.path, Some(record)))
    }

    /// Uploads `winner` (the local file, or a delete) with its merged history.
    async fn repush(&self, path: &str, winner: &Pushed) -> Result<()> {
        let mut record = self.sync.with_state(|s| Ok(s.get(path).cloned()))?.unwrap_or_else(|| winner.clone());
        if record.deleted {
            self.sync.counts.delete.fetch_add(1, Ordering::Relaxed);
            self.sync.retry(|| self.sync.remote.delete(path)).await?;
        } else {
            let abs = self.sync.root.join(path);
            let bytes = read_plain(&self.sync.root, path)?
                .ok_or_else(|| Error::io(&abs, std::io::Error::other("not a regular file in the tree; not pushed")))?;
            let bytes = Bytes::from(bytes);
            let meta = self.sync.metadata(&record);
            self.sync.counts.put.fetch_add(1, Ordering::Relaxed);
            let outcome = self
                .sync
                .retry(|| self.sync.remote.put(path, Body::Bytes(bytes.clone()), &meta, &Condition::None))
                .await?;
            if let PutOutcome::Stored { etag: Some(e) } = outcome {
                record.etag = e;
            }
        }
        self.sync.outbox.append(&[log_entry(path, &record)])?;
        self.sync.with_state(|s| s.record(path, Some(record)))
    }

    /// Writes a new file this node creates during a pull (a conflict copy, an
    /// escalation) and pushes it at once.
    async fn put_new_file(&self, path: &str, bytes: Bytes) -> Result<()> {
        let base = self.sync.with_state(|s| Ok(s.get(path).map(|r| r.vv.clone())))?.unwrap_or_default();
        self.write_own(path, base, bytes).await
    }

    /// Writes `bytes` at `path` as a new version by this node on top of history `vv`,
    /// records it and pushes it at once.
    async fn write_own(&self, path: &str, mut vv: Vv, bytes: Bytes) -> Result<()> {
        let writer = &self.sync.writer;
        writer.write_bytes(&RelPath::new(path)?, &bytes)?;
        let abs = self.sync.root.join(path);
        let stamp = Stamp::of(&std::fs::symlink_metadata(&abs).map_err(|e| Error::io(&abs, e))?);
        let hlc = self.sync.clock.now();
        vv.insert(self.sync.node.clone(), hlc);
        let record = Pushed {
            vv,
            hlc,
            author: self.sync.node.clone(),
            ..Pushed::file(blake3::hash(&bytes).to_hex().to_string(), stamp.size, stamp.mtime_ns)
        };
        self.sync.with_state(|s| s.record(path, Some(record.clone())))?;
        self.repush(path, &record).await
    }

    /// Keeps at most `sync.max_conflict_copies` copies of `path`: the oldest go.
    async fn cap_conflict_copies(&self, path: &str) -> Result<()> {
        let copies = self.conflict_copies(path);
        let cap = self.sync.settings.max_conflict_copies.max(1);
        if copies.len() < cap {
            return Ok(());
        }
        let writer = &self.sync.writer;
        for old in &copies[..=copies.len() - cap] {
            tracing::warn!(
                copy = old,
                "more than sync.max_conflict_copies = {cap} conflict copies; removing the oldest"
            );
            writer.remove(&RelPath::new(old)?)?;
            let hlc = self.sync.clock.now();
            let mut vv = self.sync.with_state(|s| Ok(s.get(old).map(|r| r.vv.clone())))?.unwrap_or_default();
            vv.insert(self.sync.node.clone(), hlc);
            let tomb = Pushed { vv, hlc, author: self.sync.node.clone(), deleted: true, ..Pushed::default() };
            self.sync.with_state(|s| s.record(old, Some(tomb.clone())))?;
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
        if !clawboard_core::store::real_dir(&self.sync.root, &dir) {
            return Vec::new();
        }
        let Ok(entries) = std::fs::read_dir(self.sync.root.join(&dir)) else { return Vec::new() };
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
        let dir = sync_dir(&self.sync.root);
        let path = dir.join("conflicts.jsonl");
        // One conflict, one note: both nodes may find it (each pulls the other's
        // version), and the loser also learns of it from the copy the winner made.
        if c.copy.is_some() && noted(&path, c.copy.as_deref())? {
            return Ok(());
        }
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
        let abs = self.sync.root.join(rel);
        let mut body = match read_plain(&self.sync.root, rel)? {
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
    pub(super) async fn escalate(&self, issue: &str) -> Result<()> {
        let id = format!("{}-sync-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"), self.sync.node);
        let esc = clawboard_core::formats::Escalation::raised(
            clawboard_core::formats::Level::Normal,
            format!("sync@{}", self.sync.node),
            issue,
        );
        let body = clawboard_core::store::to_pretty_json(&esc);
        self.put_new_file(&format!("escalations/{id}.json"), Bytes::from(body)).await
    }
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

    #[test]
    fn a_copy_names_its_file_and_its_node() {
        let t = (1_763_786_043_123u64 << 16) | 5;
        for path in ["gm/notes.md", "README", "a/b.tar.gz", "tasks/t1/task.json"] {
            assert_eq!(copy_of(&conflict_name(path, "node-a", t), "node-a").as_deref(), Some(path));
            assert_eq!(copy_of(&conflict_name(path, "node-a", t), "node"), None, "another node's copy");
        }
        // Node "a" is not node "a-b", whose copies also hold ".conflict-a-".
        assert_eq!(copy_of(&conflict_name("gm/x.md", "a-b", t), "a"), None);
        assert_eq!(copy_of("gm/notes.md", "node-a"), None);
        assert_eq!(copy_of("gm/.conflict-n-20251122T043403123Z.md", "n"), None);
    }
}
