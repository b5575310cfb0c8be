//! The task summary: one row per task (its status, type, priority, creation and
//! completion times, the start of its description), kept by the daemon's journal
//! thread from the journal, so that `status`, `task list`, the API's task list
//! and retention answer from it instead of reading every `task.json`.
//!
//! Like the index it is a snapshot at a journal sequence number
//! (`.clawboard/tasks.json`, written with the index's) plus the journal after
//! it: [`TaskSummary::load`] reads both, re-reading the `task.json` of each task
//! the journal names since. It is exact while a daemon runs (everything written
//! to the tree is journaled within milliseconds); without one, changes made since
//! the daemon stopped are not journaled, and callers read the tasks instead.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::{Priority, Task, TaskStatus, TaskType};
use crate::journal::{self, ChangeKind, Journaled};
use crate::store::write_atomic;
use crate::time::Timestamp;

const SNAPSHOT: &str = "tasks.json";
/// How much of a description a row keeps.
const DESCRIPTION_CHARS: usize = 120;

/// One task as the summary keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRow {
    pub task_id: String,
    pub status: TaskStatus,
    #[serde(rename = "type")]
    pub kind: TaskType,
    pub priority: Priority,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// The description's first [`DESCRIPTION_CHARS`] characters.
    pub description: String,
}

impl TaskRow {
    pub fn of(task: &Task) -> TaskRow {
        TaskRow {
            task_id: task.task_id.to_string(),
            status: task.status,
            kind: task.kind,
            priority: task.priority,
            created_at: task.created_at.clone(),
            completed_at: task.completed_at.clone(),
            description: task.description.chars().take(DESCRIPTION_CHARS).collect(),
        }
    }
}

/// What the summary knows of a task directory: its row, or why its `task.json`
/// does not read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Entry {
    Task(TaskRow),
    Unreadable(String),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(into = "Snapshot", from = "Snapshot")]
pub struct TaskSummary {
    /// The journal sequence number it reflects.
    pub seq: u64,
    tasks: HashMap<String, Entry>,
}

/// The summary as `.clawboard/tasks.json` holds it: a row an array, no key twice
/// (a month's 50,000 tasks in 7 MB, not 13).
#[derive(Serialize, Deserialize)]
struct Snapshot {
    seq: u64,
    rows: Vec<SnapshotRow>,
    #[serde(default)]
    unreadable: Vec<(String, String)>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotRow(String, TaskStatus, TaskType, Priority, Timestamp, Option<Timestamp>, String);

impl From<TaskSummary> for Snapshot {
    fn from(s: TaskSummary) -> Snapshot {
        let (mut rows, mut unreadable) = (Vec::new(), Vec::new());
        for (id, e) in s.tasks {
            match e {
                Entry::Task(r) => rows.push(SnapshotRow(
                    r.task_id,
                    r.status,
                    r.kind,
                    r.priority,
                    r.created_at,
                    r.completed_at,
                    r.description,
                )),
                Entry::Unreadable(why) => unreadable.push((id, why)),
            }
        }
        Snapshot { seq: s.seq, rows, unreadable }
    }
}

impl From<Snapshot> for TaskSummary {
    fn from(s: Snapshot) -> TaskSummary {
        let mut tasks: HashMap<String, Entry> = s
            .rows
            .into_iter()
            .map(|SnapshotRow(task_id, status, kind, priority, created_at, completed_at, description)| {
                let row = TaskRow { task_id, status, kind, priority, created_at, completed_at, description };
                (row.task_id.clone(), Entry::Task(row))
            })
            .collect();
        tasks.extend(s.unreadable.into_iter().map(|(id, why)| (id, Entry::Unreadable(why))));
        TaskSummary { seq: s.seq, tasks }
    }
}

/// The task id of a journaled path that is a task's `task.json`.
fn task_of(path: &str) -> Option<&str> {
    let id = path.strip_prefix("tasks/")?.strip_suffix("/task.json")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

impl TaskSummary {
    /// Reads the snapshot in `state_dir` and the journal after it (`root` is the
    /// tree whose `task.json` files are read again for the tasks the journal
    /// names). `None` when there is no snapshot, it does not read, or the journal
    /// no longer holds what followed it (compacted, or lost and renumbered).
    pub fn load(root: &Path, state_dir: &Path, journal_dir: &Path) -> Result<Option<TaskSummary>> {
        let path = state_dir.join(SNAPSHOT);
        let mut summary: TaskSummary = match fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(file = %path.display(), "task summary unreadable ({e}); not used");
                    return Ok(None);
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let first = journal::read_after(journal_dir, summary.seq, 1)?;
        if first.first().is_some_and(|e| e.seq > summary.seq + 1) {
            return Ok(None);
        }
        loop {
            let batch = journal::read_after(journal_dir, summary.seq, 10_000)?;
            if batch.is_empty() {
                break;
            }
            summary.apply(root, &batch);
        }
        Ok(Some(summary))
    }

    /// Every task's `task.json` read from the tree, as of journal sequence `seq`.
    pub fn rebuild(root: &Path, seq: u64) -> Result<TaskSummary> {
        let dir = root.join(crate::layout::TASKS);
        let mut summary = TaskSummary { seq, tasks: HashMap::new() };
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(summary),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Some(id) = entry.file_name().to_str() {
                summary.read(root, id);
            }
        }
        Ok(summary)
    }

    /// Follows journaled changes: a `task.json` put is read again, a delete drops its task.
    pub fn apply(&mut self, root: &Path, entries: &[Journaled]) {
        let mut touched: HashMap<&str, ChangeKind> = HashMap::new();
        for e in entries {
            if let Some(id) = task_of(&e.change.path) {
                touched.insert(id, e.change.kind);
            }
            self.seq = self.seq.max(e.seq);
        }
        for (id, kind) in touched {
            match kind {
                ChangeKind::Delete => {
                    self.tasks.remove(id);
                }
                ChangeKind::Put => self.read(root, id),
            }
        }
    }

    /// Reads `tasks/{id}/task.json` into the summary (gone: the task is dropped).
    fn read(&mut self, root: &Path, id: &str) {
        let path = root.join(crate::layout::task_file(id, crate::layout::TASK_FILE));
        match fs::read(&path) {
            Ok(bytes) => {
                // Keyed and listed by its directory, which is the task's id.
                let entry = match serde_json::from_slice::<Task>(&bytes) {
                    Ok(t) => Entry::Task(TaskRow { task_id: id.to_owned(), ..TaskRow::of(&t) }),
                    Err(e) => Entry::Unreadable(e.to_string()),
                };
                self.tasks.insert(id.to_owned(), entry);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.tasks.remove(id);
            }
            Err(e) => {
                self.tasks.insert(id.to_owned(), Entry::Unreadable(e.to_string()));
            }
        }
    }

    /// Writes the snapshot atomically.
    pub fn save(&self, state_dir: &Path) -> Result<()> {
        let bytes = serde_json::to_vec(self).map_err(|e| Error::io(state_dir.join(SNAPSHOT), e.into()))?;
        write_atomic(state_dir, SNAPSHOT, &bytes)
    }

    /// Every readable task's row, in no order.
    pub fn rows(&self) -> impl Iterator<Item = &TaskRow> {
        self.tasks.values().filter_map(|e| match e {
            Entry::Task(t) => Some(t),
            Entry::Unreadable(_) => None,
        })
    }

    /// The task directories whose `task.json` does not read, with why.
    pub fn unreadable(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tasks.iter().filter_map(|(id, e)| match e {
            Entry::Unreadable(why) => Some((id.as_str(), why.as_str())),
            Entry::Task(_) => None,
        })
    }

    /// Whether task `id` has ended (`completed` or `failed`): its directory
    /// changes only when someone acts on it again.
    pub fn finished(&self, id: &str) -> bool {
        matches!(self.tasks.get(id), Some(Entry::Task(r)) if matches!(r.status, TaskStatus::Completed | TaskStatus::Failed))
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Tasks by status, in [`TaskStatus::ALL`]'s order.
    pub fn counts(&self) -> Vec<(TaskStatus, usize)> {
        TaskStatus::ALL.iter().map(|s| (*s, self.rows().filter(|r| r.status == *s).count())).collect()
    }
}

/// A page of tasks: which ones, and how many matched in all.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub tasks: Vec<TaskRow>,
    /// How many tasks matched the filters.
    pub total: usize,
}

/// Which tasks a list shows.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub status: Option<TaskStatus>,
    pub kind: Option<TaskType>,
    /// Only tasks created at or after this instant.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many: the newest that match; `None`: all.
    pub limit: Option<usize>,
}

impl Query {
    pub fn matches(&self, r: &TaskRow) -> bool {
        self.status.is_none_or(|s| r.status == s)
            && self.kind.is_none_or(|k| r.kind == k)
            && self.since.is_none_or(|t| r.created_at.instant() >= t)
    }

    /// The rows that match, oldest first (by creation, then id); with a limit,
    /// the newest `limit` of them.
    pub fn page<'a>(&self, rows: impl Iterator<Item = &'a TaskRow>) -> Page {
        let mut keyed: Vec<(chrono::DateTime<chrono::FixedOffset>, &TaskRow)> =
            rows.filter(|r| self.matches(r)).map(|r| (r.created_at.instant(), r)).collect();
        let total = keyed.len();
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.task_id.cmp(&b.1.task_id)));
        let skip = self.limit.map_or(0, |limit| total.saturating_sub(limit));
        Page { tasks: keyed[skip..].iter().map(|(_, r)| (*r).clone()).collect(), total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Change, Journal, Origin};

    fn task(id: &str, status: &str, created: &str) -> String {
        format!(
            r#"{{"taskId": "{id}", "type": "coding", "description": "d {id}", "priority": "normal", "createdBy": "human", "createdAt": "{created}", "status": "{status}"}}"#
        )
    }

    fn put(root: &Path, id: &str, body: &str) -> Change {
        let p = root.join(format!("tasks/{id}/task.json"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, body).unwrap();
        Change {
            path: format!("tasks/{id}/task.json"),
            kind: ChangeKind::Put,
            origin: Origin::Local,
            size: Some(1),
            mtime_ns: Some(1),
        }
    }

    #[test]
    fn follows_the_journal_and_survives_a_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let (root, state) = (d.path(), d.path().join(".clawboard"));
        let jdir = state.join("journal");
        let mut j = Journal::open(&jdir).unwrap();
        let mut s = TaskSummary::default();
        let e = j
            .append(vec![
                put(root, "a", &task("a", "completed", "2026-11-01T00:00:00Z")),
                put(root, "b", &task("b", "pending", "2026-11-02T00:00:00Z")),
                put(root, "bad", "{not json"),
            ])
            .unwrap();
        s.apply(root, &e);
        s.save(&state).unwrap();
        // After the snapshot: b runs, a is deleted, c arrives.
        let mut later = vec![put(root, "b", &task("b", "running", "2026-11-02T00:00:00Z"))];
        fs::remove_dir_all(root.join("tasks/a")).unwrap();
        later.push(Change {
            path: "tasks/a/task.json".into(),
            kind: ChangeKind::Delete,
            origin: Origin::Local,
            size: None,
            mtime_ns: None,
        });
        later.push(put(root, "c", &task("c", "pending", "2026-11-03T00:00:00Z")));
        j.append(later).unwrap();
        let loaded = TaskSummary::load(root, &state, &jdir).unwrap().unwrap();
        assert_eq!(loaded.seq, 6);
        let mut ids: Vec<(&str, &str)> = loaded.rows().map(|r| (r.task_id.as_str(), r.status.as_str())).collect();
        ids.sort();
        assert_eq!(ids, vec![("b", "running"), ("c", "pending")]);
        assert_eq!(loaded.unreadable().map(|(id, _)| id).collect::<Vec<_>>(), vec!["bad"]);
        let rebuilt = TaskSummary::rebuild(root, 6).unwrap();
        assert_eq!((rebuilt.seq, rebuilt.len(), rebuilt.rows().count()), (6, 3, 2));
    }

    #[test]
    fn no_snapshot_or_a_journal_that_no_longer_follows_it_is_no_summary() {
        let d = tempfile::tempdir().unwrap();
        let (root, state) = (d.path(), d.path().join(".clawboard"));
        let jdir = state.join("journal");
        let mut j = Journal::open(&jdir).unwrap();
        assert!(TaskSummary::load(root, &state, &jdir).unwrap().is_none());
        TaskSummary::default().save(&state).unwrap(); // at seq 0
        j.append(vec![put(root, "a", &task("a", "pending", "2026-11-01T00:00:00Z"))]).unwrap();
        assert_eq!(TaskSummary::load(root, &state, &jdir).unwrap().unwrap().len(), 1);
        // The journal lost: a new one numbers on above the cursors, past the snapshot.
        drop(j);
        crate::journal::Cursor::new(&state.join("cursors"), "push").store(127).unwrap();
        fs::remove_dir_all(&jdir).unwrap();
        let mut j = Journal::open(&jdir).unwrap();
        j.append(vec![put(root, "b", &task("b", "pending", "2026-11-02T00:00:00Z"))]).unwrap();
        assert!(TaskSummary::load(root, &state, &jdir).unwrap().is_none(), "entries 2-127 are not there");
    }

    #[test]
    fn a_query_pages_the_newest_and_filters() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let mut j = Journal::open(&root.join("j")).unwrap();
        let changes = (1..=9)
            .map(|i| {
                let status = if i % 3 == 0 { "failed" } else { "completed" };
                put(root, &format!("t{i}"), &task(&format!("t{i}"), status, &format!("2026-11-0{i}T00:00:00Z")))
            })
            .collect();
        let mut s = TaskSummary::default();
        s.apply(root, &j.append(changes).unwrap());
        let ids = |p: Page| (p.tasks.iter().map(|r| r.task_id.clone()).collect::<Vec<_>>(), p.total);
        assert_eq!(
            ids(Query { limit: Some(2), ..Query::default() }.page(s.rows())),
            (vec!["t8".into(), "t9".into()], 9)
        );
        let failed = Query { status: Some(TaskStatus::Failed), ..Query::default() };
        assert_eq!(ids(failed.page(s.rows())), (vec!["t3".into(), "t6".into(), "t9".into()], 3));
        let since = "2026-11-07T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        let recent = Query { since: Some(since), ..Query::default() };
        assert_eq!(ids(recent.page(s.rows())), (vec!["t7".into(), "t8".into(), "t9".into()], 3));
        assert_eq!(s.counts()[2..], [(TaskStatus::Completed, 6), (TaskStatus::Failed, 3)][..]);
    }
}
