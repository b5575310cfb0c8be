//! The extraction: which files of the tree feed the archive, and the files each one
//! becomes under `memory/` on the branch (documented in `docs/ARCHIVE.md`).
//!
//! | source | on the branch |
//! | --- | --- |
//! | `tasks/{taskId}/memory-harvest.json` | `memory/roles/{roleId}/{taskId}.json` per role, and a line per candidate in `memory/cross-pollination/{fromRole}--{toRole}.jsonl` |
//! | `harvest/daily/*.json`, `harvest/weekly/*.json` | `memory/harvest/daily/…`, `memory/harvest/weekly/…` |
//! | `gm/decisions.md`, `gm/arbitrations.md` | `memory/gm/…` |
//! | `reports/{daily,weekly,monthly}/*` | `memory/reports/…` |
//! | `entries/{project}/{id}.json`, once done, error or canceled | `memory/entries/{project}/{id}.json` |

use std::collections::BTreeMap;
use std::path::Path;

use clawboard_core::formats::{DailyHarvest, MemoryHarvest, WeeklyHarvest};
use clawboard_core::{RelPath, Store, layout};
use serde_json::{Value, json};

use crate::Error;
use crate::source::{Stamp, real_dir};

/// How a file on the branch takes a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The new content replaces the old.
    Replace,
    /// JSON lines: the sorted union of the old and new lines (nothing is ever dropped).
    Lines,
}

/// A file on the branch.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub path: String,
    pub bytes: Vec<u8>,
    pub merge: Merge,
}

/// The `merge` rule of a path on the branch.
pub fn merge_of(path: &str) -> Merge {
    if path.starts_with("memory/cross-pollination/") && path.ends_with(".jsonl") {
        Merge::Lines
    } else {
        Merge::Replace
    }
}

/// The sorted union of two sets of lines, one per line, ending with a newline.
pub fn union_lines(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut lines: std::collections::BTreeSet<&[u8]> = std::collections::BTreeSet::new();
    for l in a.split(|c| *c == b'\n').chain(b.split(|c| *c == b'\n')) {
        if !l.is_empty() {
            lines.insert(l);
        }
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    for l in lines {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

/// Every source file in the tree with its stamp (regular files only: a symlink is
/// never followed), sorted by path.
pub fn scan(root: &Path) -> Result<BTreeMap<String, Stamp>, Error> {
    let mut out = BTreeMap::new();
    let tasks = root.join(layout::TASKS);
    let task_names = if real_dir(root, layout::TASKS) { names(&tasks)? } else { Vec::new() };
    for (name, kind) in task_names {
        if clawboard_core::check_id(&name).is_err() || !kind.is_dir() {
            continue;
        }
        let dir = tasks.join(&name);
        if let Ok(meta) = std::fs::symlink_metadata(dir.join(layout::HARVEST_FILE))
            && meta.is_file()
        {
            out.insert(layout::task_file(&name, layout::HARVEST_FILE), Stamp::of(&meta));
        }
    }
    let dirs = [
        layout::HARVEST_DAILY,
        layout::HARVEST_WEEKLY,
        layout::REPORTS_DAILY,
        layout::REPORTS_WEEKLY,
        layout::REPORTS_MONTHLY,
    ];
    for dir in dirs {
        let files = files_in(root, dir)?;
        out.extend(files);
    }
    if real_dir(root, layout::ENTRIES) {
        for (project, kind) in names(&root.join(layout::ENTRIES))? {
            if clawboard_core::check_id(&project).is_ok() && kind.is_dir() {
                let files = files_in(root, &format!("{}/{project}", layout::ENTRIES))?;
                out.extend(files.into_iter().filter(|(p, _)| p.ends_with(".json")));
            }
        }
    }
    for file in [layout::GM_DECISIONS, layout::GM_ARBITRATIONS] {
        if real_dir(root, layout::GM)
            && let Ok(meta) = std::fs::symlink_metadata(root.join(file))
            && meta.is_file()
        {
            out.insert(file.to_owned(), Stamp::of(&meta));
        }
    }
    Ok(out)
}

/// True when `source`, a file [`scan`] found before, is gone from the tree for sure:
/// the directory it was found under (`tasks`, `harvest`, `reports`, `entries`, `gm`)
/// is there, and the file is not (or a directory on its way no longer is one). A
/// source that only cannot be seen now (an I/O or permission error, a symlink loop,
/// its top directory missing or replaced by a link for a moment) is not gone.
pub fn gone(root: &Path, source: &str) -> bool {
    let top = source.split('/').next().unwrap_or(source);
    if top == source || !real_dir(root, top) {
        return false;
    }
    match std::fs::symlink_metadata(root.join(source)) {
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory),
    }
}

/// The names in a directory (none when it does not exist), skipping names that are
/// not UTF-8, hidden, editor or temp files.
fn names(dir: &Path) -> Result<Vec<(String, std::fs::FileType)>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if name.starts_with('.') || name.ends_with('~') || clawboard_core::store::is_temp_name(&name) {
            continue;
        }
        // The entry's own type (never a symlink's target), without another syscall.
        let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        out.push((name, kind));
    }
    Ok(out)
}

fn files_in(root: &Path, dir: &str) -> Result<Vec<(String, Stamp)>, Error> {
    let mut out = Vec::new();
    if !real_dir(root, dir) {
        return Ok(out);
    }
    for (name, kind) in names(&root.join(dir))? {
        if !kind.is_file() || name.ends_with(".swp") || name.contains(".conflict-") {
            continue;
        }
        if let Ok(meta) = std::fs::symlink_metadata(root.join(dir).join(&name))
            && meta.is_file()
        {
            out.push((format!("{dir}/{name}"), Stamp::of(&meta)));
        }
    }
    Ok(out)
}

/// The files `source` becomes on the branch. A file over `limit` bytes, or one that
/// does not parse, is refused with an error naming it.
pub fn extract(store: &Store, source: &str, limit: u64) -> Result<Vec<Output>, Error> {
    let path = store.root().join(source);
    let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
    if meta.len() > limit {
        return Err(Error::TooLarge { path: source.to_owned(), size: meta.len(), limit });
    }
    let rel = RelPath::new(source)?;
    if let Some(task) = source.strip_prefix("tasks/").and_then(|s| s.strip_suffix("/memory-harvest.json")) {
        let i = crate::source::read_input(store, task)?;
        return task_outputs(&i.harvest, i.task_type.map(|t| t.to_string()));
    }
    // Up to the archive's own limit (above the store's default), checked above.
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    if source.starts_with("entries/") {
        // An entry is archived once it is closed: the branch keeps how it ended,
        // after retention removed it from the tree.
        let entry: clawboard_core::formats::Entry = store.read(&rel)?;
        if !entry.status.is_final() {
            return Ok(Vec::new());
        }
    }
    // A harvest is the archive's own output: checked up to the archive's limit, not
    // the store's (a busy day's harvest may pass 16 MiB).
    let own = || store.clone().with_max_file_bytes(limit);
    if source.starts_with("harvest/daily/") {
        own().read::<DailyHarvest>(&rel)?;
    } else if source.starts_with("harvest/weekly/") {
        own().read::<WeeklyHarvest>(&rel)?;
    }
    Ok(vec![Output { path: format!("memory/{source}"), bytes, merge: Merge::Replace }])
}

/// The file of the candidates `from` can teach `to`:
/// `memory/cross-pollination/{from}--{to}.jsonl`. Role ids hold no `--` (a configured
/// one cannot), so each name belongs to one pair; an id with `--` is refused with the
/// reason, since `a--b` + `c` and `a` + `b--c` would share a file.
pub fn pollination_file(from: &str, to: &str) -> Result<String, String> {
    match [from, to].into_iter().find(|id| id.contains("--")) {
        Some(id) => Err(format!(
            "{id:?} contains \"--\", which joins the two role ids in memory/cross-pollination/{{fromRole}}--{{toRole}}.jsonl \
             (a role id cannot contain it); not archived"
        )),
        None => Ok(format!("memory/cross-pollination/{from}--{to}.jsonl")),
    }
}

/// A task's memory: one file per role, and one line per cross-pollination candidate.
/// A candidate whose file name would be ambiguous ([`pollination_file`]) refuses the
/// task's harvest, naming the field, like a harvest that does not parse.
pub fn task_outputs(h: &MemoryHarvest, task_type: Option<String>) -> Result<Vec<Output>, Error> {
    let task = h.task_id.as_str();
    let mut by_role: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for e in &h.experiences {
        let cells = by_role.entry(e.role_id.as_str()).or_default();
        cells.extend(e.cells.iter().filter_map(|c| serde_json::to_value(c).ok()));
    }
    let mut out = Vec::new();
    for (role, cells) in by_role {
        let mut doc = serde_json::Map::new();
        doc.insert("taskId".into(), json!(task));
        doc.insert("roleId".into(), json!(role));
        if let Some(t) = &task_type {
            doc.insert("taskType".into(), json!(t));
        }
        doc.insert("harvestedAt".into(), json!(h.harvested_at.as_str()));
        doc.insert("cells".into(), Value::Array(cells));
        out.push(Output {
            path: format!("memory/roles/{role}/{task}.json"),
            bytes: clawboard_core::store::to_pretty_json(&doc).into_bytes(),
            merge: Merge::Replace,
        });
    }
    let mut lines: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (n, p) in h.cross_pollination_candidates.iter().enumerate() {
        let file = pollination_file(p.from_role.as_str(), p.to_role.as_str()).map_err(|why| {
            let field = if p.from_role.as_str().contains("--") { "fromRole" } else { "toRole" };
            Error::Invalid {
                path: layout::task_file(task, layout::HARVEST_FILE),
                reason: format!("/crossPollinationCandidates/{n}/{field}: {why}"),
            }
        })?;
        let line = json!({
            "taskId": task,
            "pattern": p.pattern,
            "value": p.value,
            "harvestedAt": h.harvested_at.as_str(),
        });
        let file = lines.entry(file).or_default();
        file.extend_from_slice(line.to_string().as_bytes());
        file.push(b'\n');
    }
    out.extend(lines.into_iter().map(|(path, bytes)| Output {
        bytes: union_lines(&bytes, b""),
        path,
        merge: Merge::Lines,
    }));
    Ok(out)
}

/// `memory/README.md`: what the branch holds, for whoever opens it on GitHub.
pub const README: &str = "\
# clawboard memory archive

This branch is written by clawboard (one commit per archive run, from every node
that shares the blackboard). Nothing here is ever deleted: a task's files stay
after the blackboard's retention removed the task.

- `roles/{roleId}/{taskId}.json`: what the role learned on the task (its memory
  cells: type, content, value 0-1), with the task's type and harvest time.
- `cross-pollination/{fromRole}--{toRole}.jsonl`: patterns one role could teach
  another, one JSON object per line (taskId, pattern, value, harvestedAt).
- `harvest/daily/{YYYY-MM-DD}.json`: each day's cells, deduplicated, best first.
- `harvest/weekly/{YYYY-Www}.json`: each ISO week's best cells per role.
- `gm/decisions.md`, `gm/arbitrations.md`: the GM's and the reviewers' records.
- `reports/{daily,weekly,monthly}/`: the evolution reports.

A file named `NAME.conflict-{node}.EXT` is a version two nodes wrote differently
at the same time; both are kept.
";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn union_of_lines_is_sorted_and_keeps_every_line_once() {
        assert_eq!(union_lines(b"b\na\n", b"c\na\n"), b"a\nb\nc\n");
        assert_eq!(union_lines(b"", b""), b"");
        assert_eq!(union_lines(b"x", b""), b"x\n");
    }

    #[test]
    fn symlinks_are_never_followed_out_of_the_tree() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("daily")).unwrap();
        std::fs::write(outside.path().join("daily/secret.md"), "outside").unwrap();
        std::fs::write(outside.path().join("decisions.md"), "outside").unwrap();
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("reports")).unwrap();
        std::fs::create_dir_all(root.join("gm")).unwrap();
        std::fs::create_dir_all(root.join("harvest/weekly")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("daily"), root.join("reports/daily")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("decisions.md"), root.join("gm/decisions.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("decisions.md"), root.join("harvest/weekly/2026-W47.json"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("tasks")).unwrap();
        std::fs::write(root.join("gm/arbitrations.md"), "inside").unwrap();
        let found: Vec<String> = scan(root).unwrap().into_keys().collect();
        assert_eq!(found, ["gm/arbitrations.md"]);
    }

    fn harvest(candidates: &[(&str, &str)]) -> MemoryHarvest {
        let c: Vec<Value> =
            candidates.iter().map(|(f, t)| json!({"fromRole": f, "toRole": t, "pattern": "p", "value": 0.5})).collect();
        serde_json::from_value(json!({
            "taskId": "t1", "harvestedAt": "2026-11-20T10:00:00Z",
            "experiences": [{"roleId": "a", "cells": [{"type": "insight", "content": "c", "value": 0.5}]}],
            "crossPollinationCandidates": c,
        }))
        .unwrap()
    }

    /// `a--b` + `c` and `a` + `b--c` would share `a--b--c.jsonl`: a role id with `--`
    /// is refused, naming the file and the field; single dashes (even a trailing one) are fine.
    #[test]
    fn cross_pollination_file_names_belong_to_one_pair_of_roles() {
        for (pair, field) in [(("a--b", "c"), "0/fromRole"), (("a", "b--c"), "0/toRole")] {
            let e = task_outputs(&harvest(&[pair]), None).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("tasks/t1/memory-harvest.json: /crossPollinationCandidates/{field}: ")),
                "{e}"
            );
            assert!(e.contains("contains \"--\"") && e.contains("not archived"), "{e}");
        }
        let out = task_outputs(&harvest(&[("a-", "b"), ("a", "b-c")]), None).unwrap();
        let paths: Vec<&str> = out.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            ["memory/roles/a/t1.json", "memory/cross-pollination/a---b.jsonl", "memory/cross-pollination/a--b-c.jsonl"]
        );
    }

    #[test]
    fn only_cross_pollination_files_merge_by_lines() {
        assert_eq!(merge_of("memory/cross-pollination/a--b.jsonl"), Merge::Lines);
        assert_eq!(merge_of("memory/roles/a/t.json"), Merge::Replace);
        assert_eq!(merge_of("memory/reports/daily/x.jsonl"), Merge::Replace);
    }

    #[test]
    fn an_entry_is_archived_once_it_is_closed() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let seed =
            include_str!("../../../tests/fixtures/seed-tree/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json");
        let dir = d.path().join("entries/vpm-mini");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vpm-mini-docupdate-issue571-1.json"), seed).unwrap();
        std::fs::write(dir.join("notes.txt"), "not an entry").unwrap();
        let found: Vec<String> = scan(d.path()).unwrap().into_keys().filter(|k| k.starts_with("entries/")).collect();
        assert_eq!(found, ["entries/vpm-mini/vpm-mini-docupdate-issue571-1.json"], "no other file of entries/");
        let source = &found[0];
        assert!(extract(&store, source, 1 << 20).unwrap().is_empty(), "open: not yet");
        std::fs::write(dir.join("vpm-mini-docupdate-issue571-1.json"), seed.replace("\"open\"", "\"done\"")).unwrap();
        let out = extract(&store, source, 1 << 20).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].path, "memory/entries/vpm-mini/vpm-mini-docupdate-issue571-1.json");
        assert_eq!(out[0].merge, Merge::Replace);
    }
}
