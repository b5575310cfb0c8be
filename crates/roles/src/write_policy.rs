//! What a running role instance may write through the daemon's API (`POST
//! /v1/write?path=P`), decided before anything is written: the ACL allows it;
//! the file is not one the task lifecycle owns (its records, its board, an
//! entry); no symlink lies on the way; it fits the size limit; a known file
//! kind is valid. Under `escalations/` only a new escalation a human will see:
//! the role never decides one, and its `from`, `taskId`, `createdAt` and
//! `instanceId` are set from the instance, never taken from the role.
//!
//! [`check`] returns the bytes to store or a typed [`Refusal`]; the daemon maps
//! each to its HTTP status in one place.

use std::path::Path;

use clawboard_core::acl::{Acl, Op};
use clawboard_core::{FileKind, RelPath, Timestamp, layout};

/// Who writes: the running instance its token names.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub role: &'a str,
    pub task_id: &'a str,
    pub instance_id: &'a str,
}

/// A write the policy lets through.
#[derive(Debug)]
pub struct Allowed {
    pub rel: RelPath,
    /// What to store (an escalation as rewritten for the instance).
    pub body: Vec<u8>,
    /// The escalation's id when the file is one (it is created, never replaced).
    pub escalation: Option<String>,
    /// The ACL rule that allowed it.
    pub rule: String,
}

/// Why a write is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The ACL says no.
    #[error("{role} may not write {path:?}: {why}")]
    Acl { role: String, path: String, why: String, rule: String },
    /// One of the task lifecycle's own files, or an entry.
    #[error("{0}")]
    LifecycleOwned(String),
    #[error("{0} is a symlink: role writes never go through one")]
    Symlink(String),
    #[error("{path}: over the {limit} limit")]
    TooLarge { path: String, limit: String },
    /// Not a path inside the root (`..`, absolute, empty parts).
    #[error("{0}")]
    BadPath(String),
    /// Not a valid file of its kind, or not where an escalation can be.
    #[error("{0}")]
    Invalid(String),
    /// An escalation that carries a decision.
    #[error("{0}: decision, decidedBy and decidedAt are a human's to write")]
    Decides(String),
}

impl Refusal {
    /// The rule that refused it, when one did.
    pub fn rule(&self) -> Option<&str> {
        match self {
            Refusal::Acl { rule, .. } => Some(rule),
            Refusal::LifecycleOwned(_) => Some("the task lifecycle's own files"),
            _ => None,
        }
    }

    /// A refusal of what the role may do (logged and counted), not a file that
    /// is broken or too large.
    pub fn is_denial(&self) -> bool {
        !matches!(self, Refusal::TooLarge { .. } | Refusal::Invalid(_))
    }
}

/// Decides `w`'s write of `body` to `path` under `root`.
pub fn check(
    acl: &Acl,
    root: &Path,
    max_bytes: u64,
    w: Writer<'_>,
    path: &str,
    body: &[u8],
    now: Timestamp,
) -> Result<Allowed, Refusal> {
    let d = acl.check_instance(w.role, w.task_id, Op::Write, path);
    if !d.allowed {
        let (role, path, why) = (w.role.to_owned(), path.to_owned(), d.why.join("; "));
        return Err(Refusal::Acl { role, path, why, rule: d.rule });
    }
    if let Some(why) = lifecycle_owned(path) {
        return Err(Refusal::LifecycleOwned(why));
    }
    if let Some(link) = symlink_on_the_way(root, path) {
        return Err(Refusal::Symlink(link));
    }
    if body.len() as u64 > max_bytes {
        let limit = clawboard_core::validate::human_bytes(max_bytes);
        return Err(Refusal::TooLarge { path: path.to_owned(), limit });
    }
    let rel = RelPath::new(path).map_err(|e| Refusal::BadPath(e.to_string()))?;
    let escalation = if path.starts_with(&format!("{}/", layout::ESCALATIONS)) {
        let id = clawboard_records::escalations::id_of_path(path).map_err(|e| Refusal::Invalid(e.to_string()))?;
        Some(id.to_owned())
    } else {
        None
    };
    if let Some((kind, ctx)) = FileKind::infer(Path::new(path))
        && let Err(problems) = clawboard_core::validate::check_bytes(body, kind, &ctx)
    {
        let msg = problems.iter().map(|p| format!("{path}: {p}")).collect::<Vec<_>>().join("\n");
        return Err(Refusal::Invalid(msg));
    }
    let body = match escalation {
        Some(_) => raised_by(w, path, body, now)?,
        None => body.to_vec(),
    };
    Ok(Allowed { rel, body, escalation, rule: d.rule })
}

/// A role raises an escalation; it never decides one, never speaks for another
/// role or task, and never says when it was raised.
fn raised_by(w: Writer<'_>, path: &str, body: &[u8], now: Timestamp) -> Result<Vec<u8>, Refusal> {
    let mut e: clawboard_core::formats::Escalation =
        clawboard_core::json::from_slice(body).map_err(|e| Refusal::Invalid(format!("{path}: {e}")))?;
    if e.decision.is_some() || e.decided_by.is_some() || e.decided_at.is_some() {
        return Err(Refusal::Decides(path.to_owned()));
    }
    e.from = w.role.to_owned();
    e.task_id = clawboard_core::Id::new(w.task_id.to_owned()).ok();
    e.created_at = Some(now);
    e.instance_id = Some(w.instance_id.to_owned());
    Ok(clawboard_core::store::to_pretty_json(&e).into_bytes())
}

/// Why `path` is the task lifecycle's own file (written by the engine only), if it is.
fn lifecycle_owned(path: &str) -> Option<String> {
    if path.starts_with("entries/") {
        return Some(format!(
            "{path} is a blackboard entry: a role writes entries through POST /v1/entries, which sets their from"
        ));
    }
    let rest = path.strip_prefix("tasks/")?;
    let (_, file) = rest.split_once('/')?;
    if file == "board" || file.starts_with("board/") {
        return Some(format!(
            "{path} is the task's board: a role changes it with `clawboard board`, under the zone table"
        ));
    }
    let owned = layout::TASK_FILES.contains(&file)
        || file == "errors.log"
        || file == "attempts"
        || file.starts_with("attempts/");
    owned.then(|| format!("{path} is written by the task's lifecycle only (the engine), never by a role"))
}

/// The first existing component of `path` (under `root`) that is a symlink.
fn symlink_on_the_way(root: &Path, path: &str) -> Option<String> {
    let mut at = root.to_path_buf();
    let mut shown = String::new();
    for part in path.split('/') {
        at.push(part);
        if !shown.is_empty() {
            shown.push('/');
        }
        shown.push_str(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Some(shown),
            Ok(_) => {}
            Err(_) => return None, // the rest does not exist yet
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Writer<'static> = Writer { role: "creator-code", task_id: "t1", instance_id: "i-1" };

    fn seed() -> Acl {
        Acl::seed().unwrap()
    }

    fn now() -> Timestamp {
        Timestamp::parse("2026-11-28T10:00:00Z").unwrap()
    }

    fn try_write(root: &Path, path: &str, body: &[u8]) -> Result<Allowed, Refusal> {
        check(&seed(), root, 1 << 20, W, path, body, now())
    }

    #[test]
    fn a_worker_writes_in_its_own_task_and_nowhere_else() {
        let root = tempfile::tempdir().unwrap();
        let ok = try_write(root.path(), "tasks/t1/notes.md", b"mine").unwrap();
        assert_eq!(
            (ok.rel.as_path(), ok.body.as_slice(), ok.escalation),
            (Path::new("tasks/t1/notes.md"), &b"mine"[..], None)
        );
        assert!(!ok.rule.is_empty());
        let e = try_write(root.path(), "tasks/t2/notes.md", b"theirs").unwrap_err();
        assert!(
            matches!(&e, Refusal::Acl { role, path, .. } if role == "creator-code" && path == "tasks/t2/notes.md"),
            "{e}"
        );
        assert!(e.is_denial() && e.rule().is_some());
        assert!(matches!(try_write(root.path(), "gm/decisions.md", b"x"), Err(Refusal::Acl { .. })));
    }

    #[test]
    fn the_lifecycles_own_files_and_entries_are_refused_whatever_the_acl_says() {
        let root = tempfile::tempdir().unwrap();
        let open =
            Acl::parse("open", &clawboard_core::acl::DEFAULT_ACL.replace("worker = \"-\"", "worker = \"RW\"")).unwrap();
        for path in [
            "tasks/t1/result.json",
            "tasks/t1/attempts/0001-w.json",
            "tasks/t1/board/history.jsonl",
            "tasks/t1/errors.log",
        ] {
            let e = check(&open, root.path(), 1 << 20, W, path, b"{}", now()).unwrap_err();
            assert!(matches!(e, Refusal::LifecycleOwned(_)), "{path}: {e:?}");
            assert!(e.is_denial());
        }
        let e = lifecycle_owned("entries/p/e1.json").unwrap();
        assert!(e.contains("POST /v1/entries"), "{e}");
        assert_eq!(lifecycle_owned("tasks/t1/notes.md"), None);
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("tasks/t1")).unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("tasks/t1/out")).unwrap();
        let e = try_write(root.path(), "tasks/t1/out/passwd", b"x").unwrap_err();
        assert_eq!(e, Refusal::Symlink("tasks/t1/out".into()));
        assert_eq!(e.to_string(), "tasks/t1/out is a symlink: role writes never go through one");
    }

    #[test]
    fn too_large_and_invalid_files_are_failures_not_denials() {
        let root = tempfile::tempdir().unwrap();
        let big = check(&seed(), root.path(), 4, W, "tasks/t1/notes.md", b"12345", now()).unwrap_err();
        assert!(matches!(&big, Refusal::TooLarge { limit, .. } if limit == "4 bytes"), "{big}");
        assert!(!big.is_denial());
        // A path that climbs out is the ACL's path rules' to refuse, before any table.
        let climb = try_write(root.path(), "tasks/t1/notes.md/../../t1/x", b"x").unwrap_err();
        assert_eq!(climb.rule(), Some("path rules (before any table)"), "{climb:?}");
        assert!(climb.is_denial());
    }

    #[test]
    fn an_escalation_is_raised_for_the_instance_and_never_decided() {
        let root = tempfile::tempdir().unwrap();
        let path = "escalations/20261128T100000.000000Z-ab12.json";
        let body = br#"{"level":"high","from":"someone-else","issue":"need a key","requiresHumanApproval":false,"taskId":"t9"}"#;
        let ok = try_write(root.path(), path, body).unwrap();
        assert_eq!(ok.escalation.as_deref(), Some("20261128T100000.000000Z-ab12"));
        let e: serde_json::Value = serde_json::from_slice(&ok.body).unwrap();
        assert_eq!(
            (e["from"].as_str(), e["taskId"].as_str(), e["instanceId"].as_str()),
            (Some("creator-code"), Some("t1"), Some("i-1"))
        );
        assert_eq!(e["createdAt"], "2026-11-28T10:00:00Z");
        let decided = br#"{"level":"high","from":"w","issue":"x","decision":"approved","decidedBy":"human","decidedAt":"2026-11-21T10:00:00Z"}"#;
        assert_eq!(try_write(root.path(), path, decided).unwrap_err(), Refusal::Decides(path.into()));
        let nested = try_write(root.path(), "escalations/a/b.json", body).unwrap_err();
        assert!(matches!(nested, Refusal::Invalid(_)), "{nested:?}");
        let broken = try_write(root.path(), path, b"{\"level\": 3}").unwrap_err();
        assert!(matches!(broken, Refusal::Invalid(_)), "{broken}");
    }
}
