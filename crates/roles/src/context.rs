//! The one JSON document a role receives (stdin for a command, POST body for HTTP).
//! Built in one function so the context slicer can replace it.

use clawboard_core::formats::Task;
use clawboard_core::{RelPath, Store, layout};
use serde_json::{Map, Value, json};

use crate::config::RoleConfig;

/// What a step tells its role beyond the task itself.
#[derive(Debug, Clone, Default)]
pub struct StepInfo {
    /// `pm`, `team`, `validator`, `harvest`.
    pub kind: &'static str,
    pub step: String,
    pub iteration: u32,
    pub max_iterations: u32,
    /// Step-specific fields (team so far, the result to validate, the last validation …).
    pub extra: Map<String, Value>,
    /// A blueprint step's own slice, retries and fallback, in place of its role's.
    pub plan: Option<StepPlan>,
    /// The shape its reply must have; `None`: the one its `kind` prints.
    pub reply: Option<crate::reply::ReplyShape>,
}

/// What a blueprint step sets for itself (seed 001) instead of taking it from its
/// role's config: the slice, the retries, and the one fallback (none: none at all).
#[derive(Debug, Clone, Default)]
pub struct StepPlan {
    pub scope: Option<Vec<String>>,
    pub template: Option<String>,
    pub max_tokens: Option<u64>,
    pub retries: u32,
    pub fallback: Option<String>,
}

/// The context for `role_id` at `step`: the task (its assignment), the step, the
/// task files the role `reads` that `may_read` allows (its R cells; a refused one is
/// named under `filesRefused` with the rule), and the step's own fields.
pub fn build(
    store: &Store,
    task: &Task,
    role_id: &str,
    role: &RoleConfig,
    info: &StepInfo,
    may_read: &dyn Fn(&str) -> Result<(), String>,
) -> Value {
    let mut files = Map::new();
    let mut refused = Map::new();
    for name in &role.reads {
        let Ok(rel) = RelPath::new(&layout::task_file(task.task_id.as_str(), name)) else { continue };
        // A link would hand over whatever it points at, which the rule did not look at.
        let linked = std::fs::symlink_metadata(store.path(&rel)).is_ok_and(|m| m.file_type().is_symlink());
        let decision =
            if linked { Err("a symbolic link: never given to a role".to_owned()) } else { may_read(&rel.to_string()) };
        if let Err(rule) = decision {
            tracing::warn!(role = role_id, file = %rel, %rule, "not in the role's context: its access rules do not let it read the file");
            refused.insert(name.clone(), Value::String(rule));
            continue;
        }
        let Ok(bytes) = store.read_bytes(&rel) else { continue };
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        files.insert(name.clone(), value);
    }
    assemble(task, role_id, info, files, refused)
}

/// The context of [`build`], from the task files already read (`files`) and
/// those refused with their rule.
pub fn assemble(
    task: &Task,
    role_id: &str,
    info: &StepInfo,
    files: Map<String, Value>,
    refused: Map<String, Value>,
) -> Value {
    let mut ctx = json!({
        "task": task,
        "role": role_id,
        "step": info.step,
        "kind": info.kind,
        "iteration": info.iteration,
        "maxIterations": info.max_iterations,
        "files": files,
    });
    if !refused.is_empty()
        && let Some(obj) = ctx.as_object_mut()
    {
        obj.insert("filesRefused".into(), Value::Object(refused));
    }
    if let Some(obj) = ctx.as_object_mut() {
        obj.extend(info.extra.clone());
    }
    ctx
}

/// The context of a role handed a slice of the board (seed 003): the step, and the
/// slice with its counted tokens and budget, instead of the task and its files.
/// A blueprint step (seed 001) also gets its own small fields (`step_id`,
/// `round`, `candidate` …); a seed-002 step's fields (the team so far …) are
/// exactly what a slice replaces, so they are left out.
pub fn sliced(task_id: &str, role_id: &str, info: &StepInfo, slice: &Value, tokens: u64, budget: Option<u64>) -> Value {
    let mut ctx = json!({
        "taskId": task_id,
        "role": role_id,
        "step": info.step,
        "kind": info.kind,
        "iteration": info.iteration,
        "maxIterations": info.max_iterations,
        "slice": slice,
        "sliceTokens": tokens,
        "budget": budget,
        "tokenizer": clawboard_board::tokens::TOKENIZER,
    });
    if info.plan.is_some()
        && let Some(o) = ctx.as_object_mut()
    {
        o.extend(info.extra.clone());
    }
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_the_role_may_read_are_in_its_context() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let task: Task = serde_json::from_value(json!({
            "taskId": "t1", "type": "coding", "description": "d", "status": "running", "priority": "normal",
            "createdAt": "2026-11-22T10:00:00Z", "createdBy": "human"
        }))
        .unwrap();
        for (name, body) in [("a.json", "{\"a\":1}"), ("b.md", "bee")] {
            store.write_bytes(&RelPath::new(&format!("tasks/t1/{name}")).unwrap(), body.as_bytes()).unwrap();
        }
        let role: RoleConfig =
            serde_json::from_value(json!({"command": ["true"], "reads": ["a.json", "b.md"]})).unwrap();
        let may_read =
            |p: &str| if p.ends_with(".md") { Err("[dirs.\"tasks/\"] worker = \"W\"".to_owned()) } else { Ok(()) };
        let ctx = build(&store, &task, "w", &role, &StepInfo::default(), &may_read);
        assert_eq!(ctx["files"], json!({"a.json": {"a": 1}}));
        assert_eq!(ctx["filesRefused"], json!({"b.md": "[dirs.\"tasks/\"] worker = \"W\""}));
        assert_eq!(ctx["task"]["taskId"], "t1", "the assignment itself is always given");
        let all = build(&store, &task, "w", &role, &StepInfo::default(), &|_| Ok(()));
        assert_eq!(all["files"]["b.md"], "bee");
        assert!(all.get("filesRefused").is_none());
        // A link inside the tree (here to gm/, which the rule for tasks/ never saw) is not followed.
        store.write_bytes(&RelPath::new("gm/secret.md").unwrap(), b"gm only").unwrap();
        std::os::unix::fs::symlink(d.path().join("gm/secret.md"), d.path().join("tasks/t1/c.md")).unwrap();
        let role: RoleConfig = serde_json::from_value(json!({"command": ["true"], "reads": ["c.md"]})).unwrap();
        let linked = build(&store, &task, "w", &role, &StepInfo::default(), &|_| Ok(()));
        assert_eq!(linked["filesRefused"]["c.md"], "a symbolic link: never given to a role");
        assert!(linked["files"].get("c.md").is_none());
    }
}
