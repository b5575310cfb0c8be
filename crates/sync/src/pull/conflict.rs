//! Applying a version from the bucket, and what a conflict leaves behind: the
//! winner written and pushed again with the merged history, the loser kept as a
//! conflict copy (at most `sync.max_conflict_copies` of them), an entry in
//! `gm/arbitrations.md`, and an escalation on the node whose version lost.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use clawboard_core::RelPath;
use clawboard_core::index::Stamp;

use super::{Incoming, Pull, read_plain};
use crate::copy::{conflict_name, copy_of, kept_path};
use crate::error::{Error, Result};
use crate::remote::{Body, Condition, PutOutcome, Remote};
use crate::report::{Conflict, PullReport, now_text};
use crate::shared::{log_entry, sync_dir};
use crate::state::Pushed;
use crate::version::{self, Order, Vv};

const ARBITRATIONS: &str = clawboard_core::layout::GM_ARBITRATIONS;

/// The `gm/arbitrations.md` entry for a conflict (links are relative to `gm/`).
/// `withdrawn`: the copy was taken out of a task the loser lost (see
/// [`crate::copy`]) and is kept on the loser only.
pub fn arbitration_entry(c: &Conflict, copy: &str, withdrawn: bool) -> String {
    let copy_line = match kept_path(copy).filter(|_| withdrawn) {
        Some(kept) => format!(
            "- copy: `{kept}` on {} only (the version from {}; {} holds the task's claim, so the copy was taken out of the task's directory)",
            c.loser, c.loser, c.winner
        ),
        None => format!("- copy: [{copy}](../{copy}) (the version from {})", c.loser),
    };
    format!(
        "\n## {} — sync conflict on {}\n\n\
         - kept: [{}](../{}) (the version from {})\n\
         {copy_line}\n\
         - outcome: both changed concurrently; compare the two and merge by hand if needed (an escalation was raised).\n",
        c.at, c.path, c.path, c.path, c.winner
    )
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
        // Concurrent versions in a task this node believes it holds: the bucket's
        // claim decides. Another node's claim there means this node lost the task
        // while it was down or cut off: it fences it now, and the holder's version
        // is written below.
        if (order != Order::Newer || local.dirty)
            && let Some(task) = crate::shared::task_of(&path)
            && let Some(owner) = self.lost_unawares(task).await?
        {
            tracing::warn!(task, owner, path, "a conflict in a task another node holds now: fencing it here");
            crate::fence::fence_locked(&self.sync, task).await?;
        }
        // A task this node lost: the claim's owner is right, whatever is here.
        if (order == Order::Newer && !local.dirty) || self.sync.is_fenced(&path) {
            let fresh_copy = rec.is_none() && !local.exists;
            return self.take_theirs(inc, fresh_copy, report).await;
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
        // This node took in the task too, and another node holds its claim: the
        // holder's version is the task's, and this node's leaves the directory.
        if !claim_here
            && !mine.deleted
            && !inc.record.deleted
            && self.took_in_and_lost(&path, &mine.vv).await?
            && let Some(bytes) = read_plain(&self.sync.root, &path)?
            && crate::copy::can_keep(&self.sync.root, &conflict_name(&path, &self.sync.node, mine.hlc), &bytes)
        {
            return self.lose_taken_in(inc, &mine, bytes, report).await;
        }
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
        let loser = loser.clone();
        let winner = Pushed { vv: merged, ..winner.clone() };
        self.keep_both(inc, winner, loser, theirs_win, copy, report).await
    }

    /// A real conflict: `winner` (history merged) is kept under the path, the loser
    /// as the conflict copy `copy` (none for a delete), the winner pushed again, and
    /// the conflict noted (escalated on the node whose version lost).
    async fn keep_both(
        &self,
        inc: Incoming,
        winner: Pushed,
        loser: Pushed,
        theirs_win: bool,
        copy: Option<String>,
        report: &mut PullReport,
    ) -> Result<()> {
        let path = inc.path.clone();
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
        self.note_conflict(&conflict, loser.author == self.sync.node, false).await?;
        report.conflicts.push(conflict);
        Ok(())
    }

    /// The node that holds `task` in the bucket, when this node believes it holds
    /// it (its local claim, not fenced) but does not: it was taken over while this
    /// node was down or cut off. Under a live [lease](crate::lease) on the task the
    /// bucket is not asked (no one can have taken it).
    async fn lost_unawares(&self, task: &str) -> Result<Option<String>> {
        let root = &self.sync.root;
        if crate::node::held_generation(root, task).is_none()
            || crate::node::is_fenced(root, task)
            || (self.sync.lease.enforced() && self.sync.lease.holds(task))
        {
            return Ok(None);
        }
        Ok(crate::fence::claim_of(&self.sync, task).await?.map(|(doc, _)| doc.node).filter(|n| *n != self.sync.node))
    }

    /// Writes the incoming version as it is (a newer one, or any in a fenced task).
    /// When it is a copy of one of this node's versions that lost a conflict
    /// (`fresh_copy`: a path this node never had), the loss is noted here, and in a
    /// task this node lost the copy is withdrawn rather than written.
    async fn take_theirs(&self, inc: Incoming, fresh_copy: bool, report: &mut PullReport) -> Result<()> {
        let path = inc.path.clone();
        // A copy of one of this node's versions, made by the node that found the
        // conflict and won it: this node's version lost, which it is told of as
        // if it had found the conflict itself.
        let lost = (fresh_copy && !inc.record.deleted && inc.record.author != self.sync.node)
            .then(|| copy_of(&path, &self.sync.node))
            .flatten()
            .map(|original| Conflict {
                path: original,
                copy: Some(path.clone()),
                winner: inc.record.author.clone(),
                loser: self.sync.node.clone(),
                at: now_text(),
            });
        let Some(conflict) = lost else { return self.write_version(inc, report) };
        // In a task this node lost, the copy does not stay in the holder's
        // directory: its bytes are kept here and it is withdrawn (crate::copy).
        // Noted first: a crash in between applies the entry again, noted once.
        let body = inc.body.clone().unwrap_or_default();
        let fenced = self.sync.is_fenced(&path);
        let own = self.sync.with_state(|s| Ok(s.get(&conflict.path).cloned()))?.filter(|r| !r.deleted);
        let took_in = match own {
            Some(own) if !fenced => self.took_in_and_lost(&conflict.path, &own.vv).await?,
            _ => false,
        };
        let withdraw = (fenced || took_in) && crate::copy::can_keep(&self.sync.root, &path, &body);
        self.note_conflict(&conflict, true, withdraw).await?;
        if took_in && let Some(task) = crate::shared::task_of(&path) {
            crate::fence::fence_locked(&self.sync, task).await?;
        }
        let withdrawn = withdraw && crate::copy::withdraw(&self.sync, &path, &body, &inc.record.vv).await?;
        if !withdrawn {
            self.write_version(inc, report)?;
        }
        // The pull's report says where this node's version is now.
        let copy = if withdrawn { kept_path(&path) } else { conflict.copy };
        report.conflicts.push(Conflict { copy, ..conflict });
        Ok(())
    }

    /// Whether this node took in the task `original` belongs to and lost its claim
    /// without knowing it yet (it never checked: a task submitted with no daemon
    /// running, or one the pull made `completed` before intake looked at it):
    /// `original` is the task's `task.json`, this node's version of it (history
    /// `vv`) is one it created itself (the history names no other node), and the
    /// task's claim in the bucket is another node's. Such a node fences the task,
    /// as its claim check would. A version made on top of another node's (a person
    /// editing the task on a node that never took it in) is not one.
    async fn took_in_and_lost(&self, original: &str, vv: &Vv) -> Result<bool> {
        let Some(task) = crate::shared::task_of(original) else { return Ok(false) };
        let node = self.sync.node.as_str();
        if original != clawboard_core::layout::task_file(task, clawboard_core::layout::TASK_FILE)
            || vv.is_empty()
            || vv.keys().any(|n| n != node)
            || crate::node::held_generation(&self.sync.root, task).is_some()
        {
            return Ok(false);
        }
        Ok(crate::fence::claim_of(&self.sync, task).await?.is_some_and(|(doc, _)| doc.node != node))
    }

    /// This node's version `mine` of a task's `task.json` (it took the task in) meets
    /// the holder's (`inc`): the holder's is written, this node's is kept under the
    /// fence marker as the copy it would have been (none is made in the task's
    /// directory), the conflict is escalated here, and the task is fenced. `bytes`:
    /// this node's version, which the caller made sure can be kept.
    async fn lose_taken_in(&self, inc: Incoming, mine: &Pushed, bytes: Vec<u8>, report: &mut PullReport) -> Result<()> {
        let path = inc.path.clone();
        let copy = conflict_name(&path, &self.sync.node, mine.hlc);
        tracing::warn!(path, winner = %inc.record.author, "sync conflict in a task another node holds; this node's version leaves it");
        crate::copy::keep(&self.sync.root, &copy, &bytes)?;
        let conflict = Conflict {
            path: path.clone(),
            copy: Some(copy),
            winner: inc.record.author.clone(),
            loser: self.sync.node.clone(),
            at: now_text(),
        };
        self.note_conflict(&conflict, true, true).await?;
        self.write_version(inc, report)?;
        if let Some(task) = crate::shared::task_of(&path) {
            crate::fence::fence_locked(&self.sync, task).await?;
        }
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
    /// raises a `normal` escalation. `withdrawn`: the copy is kept on this node only,
    /// taken out of a task it lost (see [`crate::copy`]).
    async fn note_conflict(&self, c: &Conflict, escalate: bool, withdrawn: bool) -> Result<()> {
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
        let kept = c.copy.as_deref().and_then(kept_path).filter(|_| withdrawn);
        let issue = match (&c.copy, kept) {
            (Some(_), Some(kept)) => format!(
                "sync conflict on {}: {} holds the task's claim, so its version stays; this node's version (it took in the task too, or ran it before losing the claim) is kept here only, as {kept} (not synced), and its conflict copy was taken out of the task's directory. Compare the two if they may differ (one task id given to two different tasks?).",
                c.path, c.winner
            ),
            (Some(copy), None) => format!(
                "sync conflict on {}: this node's version and {}'s changed concurrently; {}'s version won and the other is kept as {copy}. Compare the two and merge by hand if needed.",
                c.path, c.winner, c.winner
            ),
            (None, _) => format!(
                "sync conflict on {}: a delete lost against a change by {}; the file was kept",
                c.path, c.winner
            ),
        };
        self.escalate(&issue).await?;
        // Secondary to the escalation: a failure is logged, not raised.
        if let Some(copy) = &c.copy
            && !c.path.starts_with(ARBITRATIONS.trim_end_matches(".md"))
            && let Err(e) = self.note_arbitration(c, copy, withdrawn).await
        {
            tracing::warn!(path = %c.path, "cannot add the conflict to {ARBITRATIONS}: {e}");
        }
        Ok(())
    }

    /// Appends the conflict to `gm/arbitrations.md`, with links to both versions, and
    /// pushes it. A conflict on that file itself adds no entry, so an entry can never
    /// cause the next one.
    async fn note_arbitration(&self, c: &Conflict, copy: &str, withdrawn: bool) -> Result<()> {
        let rel = ARBITRATIONS;
        let abs = self.sync.root.join(rel);
        let mut body = match read_plain(&self.sync.root, rel)? {
            Some(b) => b,
            None if std::fs::symlink_metadata(&abs).is_err() => b"# Arbitrations\n".to_vec(),
            None => {
                return Err(Error::io(&abs, std::io::Error::other("not a regular file (a link?); no entry added")));
            }
        };
        body.extend_from_slice(arbitration_entry(c, copy, withdrawn).as_bytes());
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
