//! What a human reviewer sees: the escalations, newest first, and each task's
//! context (title, status, current step, iterations, score, latest result).
//! Shared by `clawboard escalations` and the web page.

use std::fs;

use clawboard_core::formats::{Escalation, Level, Task, TaskResult, TaskStatus, Validation};
use clawboard_core::{Error, RelPath, Store, Timestamp, layout};
use serde::Serialize;

use crate::attempts;

/// One escalation file and its id (the file name without `.json`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EscalationFile {
    pub id: String,
    #[serde(flatten)]
    pub escalation: Escalation,
}

impl EscalationFile {
    pub fn is_pending(&self) -> bool {
        self.escalation.decision.is_none()
    }

    /// When it was raised: `createdAt`, else the time its id starts with.
    pub fn raised_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        if let Some(t) = &self.escalation.created_at {
            return Some(t.instant().with_timezone(&chrono::Utc));
        }
        let stamp = self.id.get(..15)?; // 20260225T193000
        chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%S").ok().map(|t| t.and_utc())
    }
}

/// An escalation file that could not be read, with the reason.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub file: String,
    pub error: String,
}

/// Which escalations to list.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter {
    pub level: Option<Level>,
    pub pending_only: bool,
}

/// Every escalation in `escalations/`, newest first (by raise time, then id), and the
/// files that are not valid escalations. Conflict copies and temp files are skipped.
pub fn list(store: &Store, filter: Filter) -> Result<(Vec<EscalationFile>, Vec<Unreadable>), Error> {
    let dir = store.root().join(layout::ESCALATIONS);
    let read = match fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut entries = Vec::new();
    let mut bad = Vec::new();
    for item in read {
        let item = item.map_err(|e| Error::io(&dir, e))?;
        let name = item.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
        if id.starts_with('.') || id.contains(".conflict-") || !item.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match crate::escalations::load(store, id) {
            Ok(escalation) => entries.push(EscalationFile { id: id.to_owned(), escalation }),
            Err(e) => bad.push(Unreadable { file: format!("{}/{id}.json", layout::ESCALATIONS), error: e.to_string() }),
        }
    }
    entries
        .retain(|e| filter.level.is_none_or(|l| e.escalation.level == l) && (!filter.pending_only || e.is_pending()));
    entries.sort_by(|a, b| b.raised_at().cmp(&a.raised_at()).then_with(|| b.id.cmp(&a.id)));
    bad.sort_by(|a, b| a.file.cmp(&b.file));
    Ok((entries, bad))
}

/// A task as a reviewer needs it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub task_id: String,
    /// The first line of the description.
    pub title: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: TaskStatus,
    pub priority: String,
    pub created_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// The PM that composed the team, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pm: Option<String>,
    /// The step of the latest role run (`pm`, `iter-2/creator-code`, `harvest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Role runs so far.
    pub attempts: usize,
    /// Validation iterations so far, and the latest score and verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<bool>,
    /// The summary of `result.json`, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_summary: Option<String>,
    /// The blueprint steps a fallback answered, each with why its own role did
    /// not (`title by fallback hook-generator: title-worker: …`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
}

/// The first non-empty line of `text` (lines end at any [line break](is_line_break)).
pub fn first_line(text: &str) -> String {
    text.split(is_line_break).map(str::trim).find(|l| !l.is_empty()).unwrap_or_default().to_owned()
}

/// A character that ends a line somewhere: in Markdown (CommonMark's `\r`), in a
/// terminal, or in a reader that splits the way Python's `splitlines` or Unicode do.
pub fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{1c}' | '\u{1d}' | '\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `text` on one line: every [line break](is_line_break) becomes a space. Text a role
/// wrote goes into the Markdown logs (`gm/decisions.md`, `gm/arbitrations.md`) through
/// this, so it can never start a line, and so never forge an entry or a heading.
pub fn one_line(text: &str) -> String {
    text.chars().map(|c| if is_line_break(c) { ' ' } else { c }).collect()
}

fn optional<T: clawboard_core::Format>(store: &Store, task_id: &str, file: &str) -> Option<T> {
    store.read::<T>(&RelPath::new(&layout::task_file(task_id, file)).ok()?).ok()
}

/// The PM of a task: the one that composed its team, else the one it was assigned.
pub fn pm_of(team: Option<&clawboard_core::formats::TeamComposition>, task: &Task) -> Option<String> {
    team.map(|t| t.pm_decision.pm_id.to_string()).or_else(|| task.assigned_pm.as_ref().map(ToString::to_string))
}

/// The reviewer's view of a task that was read already.
pub fn task_view(store: &Store, task: &Task) -> TaskView {
    let id = task.task_id.to_string();
    let team: Option<clawboard_core::formats::TeamComposition> = optional(store, &id, layout::TEAM_FILE);
    let validation: Option<Validation> = optional(store, &id, layout::VALIDATION_FILE);
    let result: Option<TaskResult> = optional(store, &id, layout::RESULT_FILE);
    let runs = attempts::load(store, &id).unwrap_or_default();
    TaskView {
        task_id: id,
        title: first_line(&task.description),
        kind: task.kind.to_string(),
        status: task.status,
        priority: task.priority.to_string(),
        created_at: task.created_at.clone(),
        completed_at: task.completed_at.clone(),
        pm: pm_of(team.as_ref(), task),
        step: if task.status == TaskStatus::Completed {
            Some("done".to_owned())
        } else {
            runs.last().map(|a| a.step.clone())
        },
        attempts: runs.len(),
        iterations: validation.as_ref().map(|v| v.iterations),
        score: validation.as_ref().map(|v| v.result.score),
        pass: validation.as_ref().map(|v| v.result.pass),
        fallbacks: result.as_ref().map(fallbacks).unwrap_or_default(),
        result_summary: result.map(|r| r.summary),
    }
}

/// The steps of a blueprint's result (its output contract's `steps_executed`)
/// that a fallback answered, in the contract's words.
fn fallbacks(result: &TaskResult) -> Vec<String> {
    let steps = result.extra.get("output").and_then(|o| o.pointer("/execution_result/steps_executed"));
    let Some(steps) = steps.and_then(serde_json::Value::as_array) else { return Vec::new() };
    steps
        .iter()
        .filter_map(|e| {
            let text = |k: &str| e.get(k).and_then(serde_json::Value::as_str);
            Some(format!("{} by fallback {}: {}", text("step_id")?, text("component")?, text("fallback")?))
        })
        .collect()
}

/// The view of task `task_id`, or why there is none.
pub fn load_task(store: &Store, task_id: &str) -> Result<TaskView, Error> {
    let task: Task = store.read(&RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?)?;
    Ok(task_view(store, &task))
}

/// The readable tasks `keep` accepts, newest first, at most `limit` of them, with
/// their total count. Only `task.json` is read for the others: a view reads a task's
/// other files too.
pub fn tasks(store: &Store, keep: impl Fn(&Task) -> bool, limit: usize) -> Result<(Vec<TaskView>, usize), Error> {
    let mut all: Vec<Task> = store.tasks()?.into_iter().filter_map(|(_, t)| t.ok()).filter(|t| keep(t)).collect();
    all.sort_by(|a, b| b.created_at.instant().cmp(&a.created_at.instant()).then_with(|| b.task_id.cmp(&a.task_id)));
    let total = all.len();
    Ok((all.iter().take(limit).map(|t| task_view(store, t)).collect(), total))
}

/// The views of the tasks `ids` names, in that order; a task whose `task.json`
/// no longer reads (deleted since it was listed) is left out.
pub fn task_views<'a>(store: &Store, ids: impl IntoIterator<Item = &'a str>) -> Vec<TaskView> {
    ids.into_iter()
        .filter_map(|id| {
            let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE)).ok()?;
            store.read::<Task>(&rel).ok().map(|t| task_view(store, &t))
        })
        .collect()
}

/// "3m", "5h", "2d": how long ago `then` was.
pub fn age(then: chrono::DateTime<chrono::Utc>, now: chrono::DateTime<chrono::Utc>) -> String {
    let s = (now - then).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn raise(store: &Store, id: &str, level: Level, created: &str) {
        let esc = Escalation {
            created_at: Some(Timestamp::parse(created).unwrap()),
            requires_human_approval: true,
            task_id: clawboard_core::Id::new("t1").ok(),
            ..Escalation::raised(level, "creator-code", format!("issue {id}"))
        };
        store.write_json(&crate::escalations::rel(id).unwrap(), &esc).unwrap();
    }

    #[test]
    fn lists_newest_first_filters_and_names_bad_files() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        raise(&store, "a", Level::Normal, "2026-11-20T10:00:00Z");
        raise(&store, "b", Level::Critical, "2026-11-21T10:00:00Z");
        raise(&store, "c", Level::High, "2026-11-19T10:00:00Z");
        crate::escalations::decide(&store, "c", clawboard_core::formats::Decision::Approved, "human", None).unwrap();
        fs::write(d.path().join("escalations/broken.json"), "{").unwrap();
        fs::write(d.path().join("escalations/b.conflict-n2-1.json"), "{}").unwrap();
        fs::write(d.path().join("escalations/notes.txt"), "x").unwrap();
        let (all, bad) = list(&store, Filter::default()).unwrap();
        assert_eq!(all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["b", "a", "c"]);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].file, "escalations/broken.json");
        let (pending, _) = list(&store, Filter { pending_only: true, level: None }).unwrap();
        assert_eq!(pending.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["b", "a"]);
        let (crit, _) = list(&store, Filter { pending_only: false, level: Some(Level::Critical) }).unwrap();
        assert_eq!(crit.len(), 1);
    }

    #[test]
    fn raise_time_falls_back_to_the_id() {
        let e = EscalationFile {
            id: "20261121T101500.123456Z-3f2a".into(),
            escalation: Escalation { created_at: None, ..Escalation::raised(Level::High, "x", "y") },
        };
        assert_eq!(e.raised_at().unwrap().to_rfc3339(), "2026-11-21T10:15:00+00:00");
    }

    #[test]
    fn ages_read_short() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-21T12:00:00Z").unwrap().to_utc();
        assert_eq!(age(now - chrono::Duration::seconds(59), now), "59s");
        assert_eq!(age(now - chrono::Duration::minutes(61), now), "1h");
        assert_eq!(age(now - chrono::Duration::days(3), now), "3d");
        assert_eq!(age(now + chrono::Duration::days(3), now), "0s");
    }
}
