//! Committing trees: the branch is built straight from blobs and trees (no work
//! tree, no index on disk); a run commits only when the extracted tree differs
//! from the head's, and moves the branch only from where it found it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use chrono::{DateTime, Utc};
use git2::{ObjectType, Oid, Repository, Signature, Tree};
use serde::{Deserialize, Serialize};

use super::{Archive, CommitReport, SOURCES, git_err, rfc3339};
use crate::extract::{self, Merge};
use crate::source::Stamp;
use crate::{Error, Result};

/// The sources cache: each source's stamp when its outputs went into `commit`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Sources {
    #[serde(default)]
    commit: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, Stamp>,
}

/// A repository's first commit writes its objects to memory (a mempack backend) and
/// then to disk as one pack file, before any reference points at them: one file
/// instead of one per object (10,000 on a big first archive). Later commits write
/// loose objects: a mempack dump holds every object its commits reach, the whole
/// tree again, which is only right when the tree is all new.
pub(super) struct Pack<'o> {
    pub(super) odb: &'o git2::Odb<'o>,
    pub(super) mem: Option<git2::Mempack<'o>>,
}

impl Pack<'_> {
    fn flush(&self, repo: &Repository, path: &Path) -> Result<()> {
        use std::io::Write;
        let Some(mem) = &self.mem else { return Ok(()) };
        let g = || git_err(path, "write the pack");
        let mut buf = git2::Buf::new();
        mem.dump(repo, &mut buf).map_err(g())?;
        let mut w = self.odb.packwriter().map_err(g())?;
        w.write_all(&buf).map_err(|e| Error::io(path, e))?;
        w.commit().map_err(g())?;
        mem.reset().map_err(g())
    }
}

impl Archive {
    pub(super) fn empty_tree<'r>(&self, repo: &'r Repository) -> Result<Tree<'r>> {
        let g = git_err(&self.repo_path(), "write the empty tree");
        let id = repo.treebuilder(None).and_then(|b| b.write()).map_err(g)?;
        repo.find_tree(id).map_err(git_err(&self.repo_path(), "read the empty tree"))
    }

    /// Extracts what changed since the last run onto the branch; commits when the
    /// tree differs from the head's.
    pub(super) fn commit(&self, repo: &Repository, pack: &Pack<'_>, now: DateTime<Utc>) -> Result<CommitReport> {
        let started = std::time::Instant::now();
        let path = self.repo_path();
        let head = self.head(repo)?;
        let base = match head {
            Some(id) => repo.find_commit(id).and_then(|c| c.tree()).map_err(git_err(&path, "read the head"))?,
            None => self.empty_tree(repo)?,
        };
        let mut cache: Sources = self.read_json(SOURCES);
        // The cache holds only if its commit is in the branch's history.
        let valid = match (head, cache.commit.as_deref().and_then(|c| Oid::from_str(c).ok())) {
            (Some(h), Some(c)) => h == c || repo.graph_descendant_of(h, c).unwrap_or(false),
            _ => false,
        };
        if !valid {
            cache.sources.clear();
        }
        let t_cache = started.elapsed();
        let sources = extract::scan(self.store.root())?;
        let t_scan = started.elapsed();
        let mut report = CommitReport { sources: sources.len(), ..CommitReport::default() };
        let mut outputs = vec![extract::Output {
            path: "memory/README.md".into(),
            bytes: extract::README.as_bytes().to_vec(),
            merge: Merge::Replace,
        }];
        let mut stamped: Vec<(String, Stamp)> = Vec::new();
        // Which sources make each output: an output refused below leaves its sources
        // unstamped, so that they are read (and the refusal reported) again next run.
        let mut made_by: HashMap<String, Vec<String>> = HashMap::new();
        for (source, stamp) in &sources {
            if cache.sources.get(source) == Some(stamp) {
                continue;
            }
            report.read += 1;
            match extract::extract(&self.store, source, self.settings.max_file_bytes) {
                Ok(o) => {
                    for out in &o {
                        made_by.entry(out.path.clone()).or_default().push(source.clone());
                    }
                    outputs.extend(o);
                    stamped.push((source.clone(), *stamp));
                }
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        let t_extract = started.elapsed();
        let mut update = git2::build::TreeUpdateBuilder::new();
        // Two sources may write lines into the same file: gather them first.
        let mut merged: BTreeMap<String, (Vec<u8>, Merge)> = BTreeMap::new();
        for o in outputs {
            match merged.get_mut(&o.path) {
                Some((bytes, Merge::Lines)) => *bytes = extract::union_lines(bytes, &o.bytes),
                _ => {
                    merged.insert(o.path, (o.bytes, o.merge));
                }
            }
        }
        // Each directory's tree is read once: libgit2 does not cache large trees, and
        // a path lookup per file would parse `memory/roles/{role}/` again each time.
        let mut dirs: HashMap<String, Option<Tree<'_>>> = HashMap::new();
        for (file, (bytes, merge)) in merged {
            let (dir, name) = file.rsplit_once('/').unwrap_or(("", file.as_str()));
            let tree = dirs.entry(dir.to_owned()).or_insert_with(|| {
                base.get_path(Path::new(dir)).ok().and_then(|e| e.to_object(repo).ok()?.into_tree().ok())
            });
            let old = tree.as_ref().and_then(|t| t.get_name(name)).map(|e| e.id());
            let bytes = match (merge, old) {
                (Merge::Lines, Some(old)) => {
                    let blob = repo.find_blob(old).map_err(git_err(&path, format!("read {file}")))?;
                    extract::union_lines(blob.content(), &bytes)
                }
                _ => bytes,
            };
            if bytes.len() as u64 > self.settings.max_file_bytes {
                if let Some(sources) = made_by.get(&file) {
                    stamped.retain(|(s, _)| !sources.contains(s));
                }
                let e = Error::TooLarge { path: file, size: bytes.len() as u64, limit: self.settings.max_file_bytes };
                report.problems.push(e.to_string());
                continue;
            }
            let id = Oid::hash_object(ObjectType::Blob, &bytes).map_err(git_err(&path, "hash"))?;
            if old == Some(id) {
                continue;
            }
            repo.blob(&bytes).map_err(git_err(&path, format!("write {file}")))?;
            update.upsert(file.as_str(), id, git2::FileMode::Blob);
            report.count(&file);
        }
        let t_blobs = started.elapsed();
        let mut new_head = head;
        if report.changed > 0 {
            let tree_id = update.create_updated(repo, &base).map_err(git_err(&path, "build the tree"))?;
            if tree_id != base.id() {
                let tree = repo.find_tree(tree_id).map_err(git_err(&path, "read the tree"))?;
                let message = format!("memory: sync from {} at {}", self.node, rfc3339(now));
                let id = self.commit_tree(repo, pack, &tree, head.into_iter().collect(), &message, now)?;
                report.commit = Some(id.to_string());
                new_head = Some(id);
            }
        }
        cache.sources.extend(stamped);
        // A source gone from the tree (a task removed by retention, a report expired)
        // loses its entry, or the cache would grow forever: its files stay on the
        // branch, and retention asks the branch, not this cache. One only not seen
        // this time keeps it, so that it is not read again when it is back.
        let root = self.store.root();
        cache.sources.retain(|source, _| sources.contains_key(source) || !extract::gone(root, source));
        cache.commit = new_head.map(|h| h.to_string());
        let t_commit = started.elapsed();
        self.write_json(SOURCES, &cache)?;
        tracing::debug!(?t_cache, ?t_scan, ?t_extract, ?t_blobs, ?t_commit, total = ?started.elapsed(), "archive: commit phases");
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes a commit of `tree` and moves the branch to it, provided the branch is
    /// still where `parents[0]` says (another process moved it: an error, no loss).
    pub(super) fn commit_tree(
        &self,
        repo: &Repository,
        pack: &Pack<'_>,
        tree: &Tree<'_>,
        parents: Vec<Oid>,
        message: &str,
        now: DateTime<Utc>,
    ) -> Result<Oid> {
        let path = self.repo_path();
        let when = git2::Time::new(now.timestamp(), 0);
        let sig = Signature::new(&self.settings.author_name, &self.settings.author_email, &when)
            .map_err(git_err(&path, "the commit author (archive.author_name, archive.author_email)"))?;
        let parent_commits = parents
            .iter()
            .map(|p| repo.find_commit(*p))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(git_err(&path, "read a parent commit"))?;
        let refs: Vec<&git2::Commit<'_>> = parent_commits.iter().collect();
        let id = repo.commit(None, &sig, &sig, message, tree, &refs).map_err(git_err(&path, "commit"))?;
        pack.flush(repo, &path)?;
        self.move_branch(repo, parents.first().copied(), id, message)?;
        Ok(id)
    }

    pub(super) fn move_branch(&self, repo: &Repository, from: Option<Oid>, to: Oid, why: &str) -> Result<()> {
        let g = git_err(&self.repo_path(), "move the branch");
        match from {
            Some(old) => repo.reference_matching(&self.branch_ref(), to, true, old, why).map(|_| ()),
            None => repo.reference(&self.branch_ref(), to, false, why).map(|_| ()),
        }
        .map_err(g)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn task(root: &Path, id: &str) {
        let dir = root.join("tasks").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let h = serde_json::json!({
            "taskId": id, "harvestedAt": "2026-11-20T10:00:00Z",
            "experiences": [{"roleId": "w", "cells": [{"type": "insight", "content": id, "value": 0.5}]}],
        });
        std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec(&h).unwrap()).unwrap();
    }

    /// The cached sources but `gm/`'s two files (`Store::init` writes them; they stay).
    fn cached(root: &Path) -> Vec<String> {
        let bytes = std::fs::read(root.join(crate::repo::DIR).join(SOURCES)).unwrap();
        let s: Sources = serde_json::from_slice(&bytes).unwrap();
        let (gm, rest): (Vec<String>, Vec<String>) = s.sources.into_keys().partition(|k| k.starts_with("gm/"));
        assert_eq!(gm, ["gm/arbitrations.md", "gm/decisions.md"]);
        rest
    }

    /// `sources.json` forgets a source deleted from the tree (its files stay on the
    /// branch), but not one it only cannot see for a moment: that one is not read
    /// again when it is back.
    #[test]
    fn the_sources_cache_forgets_deleted_sources_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let (store, _) = clawboard_core::Store::init(root).unwrap();
        for id in ["t1", "t2", "t3"] {
            task(root, id);
        }
        std::fs::create_dir_all(root.join("reports/daily")).unwrap();
        std::fs::write(root.join("reports/daily/2026-11-20.md"), "# a day\n").unwrap();
        let archive = Archive::new(store, crate::ArchiveSettings::default(), "n1".into());
        let now = chrono::Utc::now();
        archive.run(now).unwrap();
        let all = [
            "reports/daily/2026-11-20.md",
            "tasks/t1/memory-harvest.json",
            "tasks/t2/memory-harvest.json",
            "tasks/t3/memory-harvest.json",
        ];
        assert_eq!(cached(root), all);

        // Retention removed t2 and the report: their entries go, their files stay.
        std::fs::remove_dir_all(root.join("tasks/t2")).unwrap();
        std::fs::remove_file(root.join("reports/daily/2026-11-20.md")).unwrap();
        let r = archive.run(now).unwrap();
        assert_eq!((r.commit.read, r.commit.commit), (0, None));
        assert_eq!(cached(root), ["tasks/t1/memory-harvest.json", "tasks/t3/memory-harvest.json"]);
        let repo = Repository::open_bare(archive.repo_path()).unwrap();
        let tree = repo.find_reference("refs/heads/memory").unwrap().peel_to_tree().unwrap();
        for kept in ["memory/roles/w/t2.json", "memory/reports/daily/2026-11-20.md"] {
            assert!(tree.get_path(Path::new(kept)).is_ok(), "{kept} left the branch");
        }

        // t3 cannot be looked at (a loop where its directory was), and tasks/ is away
        // for a moment: neither is gone, both keep their entries.
        std::fs::rename(root.join("tasks/t3"), root.join("t3.away")).unwrap();
        std::os::unix::fs::symlink("t3", root.join("tasks/t3")).unwrap();
        archive.run(now).unwrap();
        assert_eq!(cached(root), ["tasks/t1/memory-harvest.json", "tasks/t3/memory-harvest.json"]);
        std::fs::remove_file(root.join("tasks/t3")).unwrap();
        std::fs::rename(root.join("t3.away"), root.join("tasks/t3")).unwrap();
        std::fs::rename(root.join("tasks"), root.join("tasks.away")).unwrap();
        let r = archive.run(now).unwrap();
        assert_eq!(r.commit.sources, 2, "gm/ only");
        assert_eq!(cached(root), ["tasks/t1/memory-harvest.json", "tasks/t3/memory-harvest.json"]);
        std::fs::rename(root.join("tasks.away"), root.join("tasks")).unwrap();
        let r = archive.run(now).unwrap();
        assert_eq!((r.commit.sources, r.commit.read), (4, 0), "back, and not read again");
        assert_eq!(cached(root), ["tasks/t1/memory-harvest.json", "tasks/t3/memory-harvest.json"]);
    }
}
