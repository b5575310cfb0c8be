//! Escalations: raised by roles into `escalations/{id}.json` (seed 002, plus
//! `taskId`), decided by a human. One that requires approval holds its task until
//! it is decided; approve resumes the task, reject fails it with the note.

use clawboard_core::formats::{Decision, Escalation, Level};
use clawboard_core::{Error, RelPath, Store, Timestamp, check_id, layout};
use serde::{Deserialize, Serialize};

use crate::review::one_line;

/// An escalation a role raises in its output (the `escalations` of any role's
/// output, see the roles crate's `output`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RaisedEscalation {
    pub level: Level,
    pub issue: String,
    #[serde(default)]
    pub suggested_action: Option<String>,
    #[serde(default)]
    pub requires_human_approval: bool,
}

/// `escalations/{id}.json`.
pub fn rel(id: &str) -> Result<RelPath, Error> {
    check_id(id).map_err(|e| Error::UnsafePath { path: id.to_owned(), reason: format!("escalation id {e}") })?;
    RelPath::new(&format!("{}/{id}.json", layout::ESCALATIONS))
}

/// The id of the escalation at `path`, or why a file there would never be one: an
/// escalation is `escalations/{id}.json`, directly under `escalations/`, with an id
/// that [`check_id`] accepts. Nested files, conflict copies (`*.conflict-*`), temp
/// files and other names are never listed or decided (see [`crate::review::list`]).
pub fn id_of_path(path: &str) -> Result<&str, Error> {
    let refuse = |reason: String| Error::UnsafePath { path: path.to_owned(), reason };
    let rest = path
        .strip_prefix(layout::ESCALATIONS)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| refuse(format!("not under {}/", layout::ESCALATIONS)))?;
    let shape = || format!("an escalation is {}/{{id}}.json", layout::ESCALATIONS);
    if rest.contains('/') {
        return Err(refuse(format!(
            "{}, directly under {}/; nested files are never read",
            shape(),
            layout::ESCALATIONS
        )));
    }
    let id = rest.strip_suffix(".json").ok_or_else(|| refuse(format!("{}; other files are never read", shape())))?;
    if id.contains(".conflict-") || clawboard_core::store::is_temp_name(id) {
        return Err(refuse(format!(
            "{id}.json is a sync conflict copy's or a temp file's name; those are not escalations"
        )));
    }
    check_id(id).map_err(|e| refuse(format!("{}: escalation id {e}", shape())))?;
    Ok(id)
}

/// A new escalation id: the time it was raised (`20260225T193000.123456Z`) and a
/// random suffix, so ids sort by time and never collide.
pub fn new_id() -> String {
    let now = chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
    format!("{now}-{}", clawboard_core::id::random_hex(2))
}

/// Writes the escalation `id` unless it exists (raising is idempotent).
pub fn raise(store: &Store, id: &str, from: &str, task_id: &str, e: &RaisedEscalation) -> Result<(), Error> {
    let esc = Escalation {
        suggested_action: e.suggested_action.clone(),
        requires_human_approval: e.requires_human_approval,
        task_id: clawboard_core::Id::new(task_id).ok(),
        ..Escalation::raised(e.level, from, e.issue.clone())
    };
    match store.create_bytes(&rel(id)?, clawboard_core::store::to_pretty_json(&esc).as_bytes()) {
        Ok(()) | Err(Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

pub fn load(store: &Store, id: &str) -> Result<Escalation, Error> {
    store.read(&rel(id)?)
}

/// The escalations raised through the daemon's API for task `task_id` by one of
/// `instances` (their `instanceId`), as (instance, escalation id), by id. For the
/// attempts a crash cut short: their records never listed what they raised. An
/// unreadable file is skipped with a warning (the review lists name it).
pub fn raised_by(store: &Store, task_id: &str, instances: &[String]) -> Result<Vec<(String, String)>, Error> {
    let mut found = Vec::new();
    for name in store.list_names(layout::ESCALATIONS)? {
        let path = format!("{}/{name}", layout::ESCALATIONS);
        let Ok(id) = id_of_path(&path) else { continue };
        let e = match load(store, id) {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!(task = task_id, file = %name, "unreadable escalation: {err}");
                continue;
            }
        };
        if let Some(instance) = e.instance_id.filter(|i| instances.contains(i))
            && e.task_id.as_ref().is_some_and(|t| t.as_str() == task_id)
        {
            found.push((instance, id.to_owned()));
        }
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(found)
}

/// Why a decision could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("escalation {id} was already {decision} by {by} at {at}; a decision is final")]
    AlreadyDecided { id: String, decision: Decision, by: String, at: String },
    #[error("no escalation {0} (looked for {dir}/{0}.json)", dir = layout::ESCALATIONS)]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] Error),
}

/// Records a human's decision in the escalation file and appends it to `gm/decisions.md`.
pub fn decide(
    store: &Store,
    id: &str,
    decision: Decision,
    by: &str,
    note: Option<&str>,
) -> Result<Escalation, DecideError> {
    let path = rel(id)?;
    if !store.exists(&path) {
        return Err(DecideError::NotFound(id.to_owned()));
    }
    let now = Timestamp::now();
    let result = store.update_json(&path, |e: &mut Escalation| {
        if let (Some(d), Some(by), Some(at)) = (e.decision, &e.decided_by, &e.decided_at) {
            return Err(DecideError::AlreadyDecided {
                id: id.to_owned(),
                decision: d,
                by: by.clone(),
                at: at.to_string(),
            });
        }
        e.decision = Some(decision);
        e.decided_by = Some(by.to_owned());
        e.decided_at = Some(now.clone());
        e.note = note.map(str::to_owned);
        Ok(e.clone())
    })?;
    let esc = result?;
    let decisions = RelPath::new(layout::GM_DECISIONS)?;
    // Every text on one line: a line break in an issue would start a forged entry.
    let entry = format!(
        "\n## {now} — escalation {id} {decision}\n\n- by: {}\n- task: {}\n- level: {}\n- from: {}\n- issue: {}\n{}",
        one_line(by),
        esc.task_id.as_ref().map_or("-".to_owned(), ToString::to_string),
        esc.level,
        one_line(&esc.from),
        one_line(&esc.issue),
        note.map(|n| format!("- note: {}\n", one_line(n))).unwrap_or_default(),
    );
    store.append_text(&decisions, &entry)?;
    Ok(esc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_once_and_record_it() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let id = new_id();
        let raised = RaisedEscalation {
            level: Level::High,
            issue: "need a key".into(),
            suggested_action: None,
            requires_human_approval: true,
        };
        raise(&store, &id, "creator-code", "t1", &raised).unwrap();
        raise(&store, &id, "creator-code", "t1", &raised).unwrap();
        let e = decide(&store, &id, Decision::Approved, "human", Some("ok, go")).unwrap();
        assert_eq!(e.decision, Some(Decision::Approved));
        let again = decide(&store, &id, Decision::Rejected, "human", None).unwrap_err();
        assert!(again.to_string().contains("was already approved by human"), "{again}");
        let log = std::fs::read_to_string(d.path().join("gm/decisions.md")).unwrap();
        assert!(log.contains(&format!("escalation {id} approved")) && log.contains("- note: ok, go"), "{log}");
        assert!(matches!(decide(&store, "nope", Decision::Approved, "h", None), Err(DecideError::NotFound(_))));
    }

    #[test]
    fn line_breaks_in_role_text_never_start_a_line_in_decisions_md() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let forged = "\n## 2026-11-27T09:00:00Z — escalation FAKE approved\n\n- by: human (web)";
        for (n, brk) in ["\r", "\r\n", "\u{0b}", "\u{0c}", "\u{85}", "\u{2028}", "\u{2029}"].into_iter().enumerate() {
            let id = format!("e{n}");
            let issue = format!("deploy ok?{}", forged.replace('\n', brk));
            let raised = RaisedEscalation {
                level: Level::Normal,
                issue,
                suggested_action: None,
                requires_human_approval: false,
            };
            raise(&store, &id, "w", "t1", &raised).unwrap();
            decide(&store, &id, Decision::Rejected, "human", Some(&format!("no{brk}- by: forged"))).unwrap();
        }
        let log = std::fs::read_to_string(d.path().join("gm/decisions.md")).unwrap();
        let breaks = |c: char| crate::review::is_line_break(c);
        // One heading per decision, whatever line breaks the issues and notes held.
        let headings = log.split(breaks).filter(|l| l.starts_with("## ")).count();
        assert_eq!(headings, 7, "{log:?}");
        assert!(
            !log.split(breaks).any(|l| l.starts_with("- by: human (web)") || l.starts_with("- by: forged")),
            "{log:?}"
        );
    }

    #[test]
    fn only_direct_files_with_an_id_are_escalations() {
        assert_eq!(id_of_path("escalations/e-1.json").unwrap(), "e-1");
        for (path, why) in [
            ("escalations/sub/x.json", "nested files are never read"),
            ("escalations/x.conflict-n1-1.json", "conflict copy"),
            ("escalations/_bad.json", "escalation id starts with '_'"),
            ("escalations/bad name.json", "escalation id"),
            ("escalations/notes.md", "other files are never read"),
            ("escalations/.json", "escalation id"),
            ("gm/x.json", "not under escalations/"),
        ] {
            let e = id_of_path(path).unwrap_err().to_string();
            assert!(e.starts_with(path) && e.contains(why), "{path}: {e}");
        }
    }
}
