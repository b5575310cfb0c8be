//! Reading the archive back: `archive status`, `archive log`, and whether a
//! task's memory is archived (the retention guard asks).

use std::path::Path;

use chrono::{TimeZone, Utc};
use git2::{Oid, Repository};

use super::{Archive, LogEntry, STATUS, Status, StatusFile, git_err, redact, rfc3339};
use crate::Result;

/// The branch head the remote last accepted, if the repository still has it.
fn pushed_head(repo: &Repository, status: &StatusFile) -> Option<Oid> {
    status.last_pushed.as_deref().and_then(|p| Oid::from_str(p).ok()).filter(|p| repo.find_commit(*p).is_ok())
}

/// True when the remote is known to have commit `id`: `id` is one of `known` or an
/// ancestor of one.
fn reaches(repo: &Repository, known: &[Oid], id: Oid) -> bool {
    known.iter().any(|k| *k == id || repo.graph_descendant_of(*k, id).unwrap_or(false))
}

/// Whether a task's memory is archived (see [`Archive::task_archived`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Archived {
    Yes,
    /// Not yet, and why.
    NotYet(String),
}

impl Archive {
    /// `clawboard archive status`.
    pub fn status(&self) -> Result<Status> {
        let file: StatusFile = self.read_json(STATUS);
        let path = self.repo_path();
        let mut status = Status {
            repository: path.display().to_string(),
            branch: self.settings.branch.clone(),
            remote: self.settings.remote.as_deref().map(redact),
            head: None,
            commits: 0,
            pending: 0,
            file,
        };
        if !path.join("HEAD").exists() {
            return Ok(status);
        }
        let repo = self.repo()?;
        let Some(head) = self.head(&repo)? else { return Ok(status) };
        status.head = Some(head.to_string());
        let g = || git_err(&path, "walk the history");
        let mut walk = repo.revwalk().map_err(g())?;
        walk.push(head).map_err(g())?;
        status.commits = walk.count();
        if self.settings.remote.is_some() {
            let mut walk = repo.revwalk().map_err(g())?;
            walk.push(head).map_err(g())?;
            for known in self.on_remote(&repo, &status.file) {
                walk.hide(known).map_err(g())?;
            }
            status.pending = walk.count();
        }
        Ok(status)
    }

    /// The heads the remote is known to have: the one it last accepted from this
    /// node, and its own head as last fetched or pushed (`refs/remotes/origin/{branch}`),
    /// which holds the other nodes' commits this node merged. What either reaches is
    /// on the remote; the rest of the branch is pending.
    fn on_remote(&self, repo: &Repository, file: &StatusFile) -> Vec<Oid> {
        let fetched = repo.refname_to_id(&self.tracking_ref()).ok().filter(|id| repo.find_commit(*id).is_ok());
        let mut known: Vec<Oid> = pushed_head(repo, file).into_iter().chain(fetched).collect();
        known.dedup();
        known
    }

    /// Whether the memory of task `task_id` is safely archived: everything extraction
    /// makes of its `memory-harvest.json` (`memory/roles/{role}/{task}.json`, and
    /// its lines of `memory/cross-pollination/{from}--{to}.jsonl`) is in the branch
    /// head the remote accepted (with `archive.remote`), or in the local head
    /// (without). A task without a harvest has nothing to archive.
    pub fn task_archived(&self, task_id: &str) -> Result<Archived> {
        let rel = clawboard_core::RelPath::new(&clawboard_core::layout::task_file(
            task_id,
            clawboard_core::layout::HARVEST_FILE,
        ))?;
        let harvest: clawboard_core::formats::MemoryHarvest = match self.store.read(&rel) {
            Ok(h) => h,
            Err(clawboard_core::Error::NotFound { .. }) => return Ok(Archived::Yes),
            Err(e) => return Ok(Archived::NotYet(format!("its memory harvest cannot be read: {e}"))),
        };
        let wanted = match crate::extract::task_outputs(&harvest, None) {
            Ok(w) => w,
            Err(e) => return Ok(Archived::NotYet(format!("its memory harvest cannot be archived: {e}"))),
        };
        if wanted.is_empty() {
            return Ok(Archived::Yes);
        }
        let path = self.repo_path();
        if !path.join("HEAD").exists() {
            return Ok(Archived::NotYet("its memory harvest is not archived yet (no archive commit so far)".into()));
        }
        let repo = self.repo()?;
        let (target, what) = if self.settings.remote.is_some() {
            let status: StatusFile = self.read_json(STATUS);
            (pushed_head(&repo, &status), "a pushed archive commit")
        } else {
            (self.head(&repo)?, "an archive commit")
        };
        let Some(target) = target else {
            return Ok(Archived::NotYet(format!("its memory harvest is not in {what} yet (nothing pushed so far)")));
        };
        let tree = repo.find_commit(target).and_then(|c| c.tree()).map_err(git_err(&path, "read the archived tree"))?;
        // A role's file is there; a candidate's line is in its file (the union of
        // every task's lines).
        let archived = |o: &crate::extract::Output| {
            let Ok(entry) = tree.get_path(Path::new(&o.path)) else { return false };
            match o.merge {
                crate::extract::Merge::Replace => true,
                crate::extract::Merge::Lines => repo.find_blob(entry.id()).is_ok_and(|blob| {
                    let have: std::collections::HashSet<&[u8]> = blob.content().split(|b| *b == b'\n').collect();
                    o.bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).all(|l| have.contains(l))
                }),
            }
        };
        let missing: Vec<&String> = wanted.iter().filter(|o| !archived(o)).map(|o| &o.path).collect();
        match missing.first() {
            None => Ok(Archived::Yes),
            Some(first) => Ok(Archived::NotYet(format!(
                "its memory harvest is not in {what} yet ({} of {} files missing, e.g. {first})",
                missing.len(),
                wanted.len()
            ))),
        }
    }

    /// The newest `n` commits of the branch.
    pub fn log(&self, n: usize) -> Result<Vec<LogEntry>> {
        let path = self.repo_path();
        if !path.join("HEAD").exists() {
            return Ok(Vec::new());
        }
        let repo = self.repo()?;
        let Some(head) = self.head(&repo)? else { return Ok(Vec::new()) };
        let g = || git_err(&path, "walk the history");
        let known = self.on_remote(&repo, &self.read_json::<StatusFile>(STATUS));
        let mut walk = repo.revwalk().map_err(g())?;
        walk.push(head).map_err(g())?;
        walk.set_sorting(git2::Sort::TIME | git2::Sort::TOPOLOGICAL).map_err(g())?;
        let mut out = Vec::new();
        for id in walk.take(n) {
            let id = id.map_err(g())?;
            let c = repo.find_commit(id).map_err(g())?;
            let tree = c.tree().map_err(g())?;
            let parent = c.parents().next().and_then(|p| p.tree().ok());
            let files =
                repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), None).map(|d| d.deltas().len()).map_err(g())?;
            let time = Utc.timestamp_opt(c.time().seconds(), 0).single().map(rfc3339).unwrap_or_default();
            out.push(LogEntry {
                id: id.to_string(),
                time,
                author: c.author().name().unwrap_or("?").to_owned(),
                message: c.summary().unwrap_or("").to_owned(),
                files,
                pushed: reaches(&repo, &known, id),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A task whose harvest names a role id with `--` cannot be archived (its
    /// cross-pollination file would be ambiguous): retention is told why and holds it;
    /// the other tasks are archived.
    #[test]
    fn a_task_whose_harvest_cannot_be_archived_is_held_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = clawboard_core::Store::init(d.path()).unwrap();
        for (task, from) in [("t1", "a"), ("t2", "a--b")] {
            let dir = d.path().join("tasks").join(task);
            std::fs::create_dir_all(&dir).unwrap();
            let h = serde_json::json!({
                "taskId": task, "harvestedAt": "2026-11-20T10:00:00Z",
                "experiences": [{"roleId": "w", "cells": [{"type": "insight", "content": "c", "value": 0.5}]}],
                "crossPollinationCandidates": [{"fromRole": from, "toRole": "c", "pattern": "p", "value": 0.5}],
            });
            std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec(&h).unwrap()).unwrap();
        }
        let archive = Archive::new(store, crate::ArchiveSettings::default(), "n1".into());
        let report = archive.run(Utc::now()).unwrap();
        assert!(
            report.commit.problems.iter().any(|p| p.contains("fromRole: \"a--b\"")),
            "{:?}",
            report.commit.problems
        );
        assert_eq!(archive.task_archived("t1").unwrap(), Archived::Yes);
        match archive.task_archived("t2").unwrap() {
            Archived::NotYet(why) => assert!(why.starts_with("its memory harvest cannot be archived: "), "{why}"),
            Archived::Yes => panic!("t2 is not archived"),
        }
    }
}
