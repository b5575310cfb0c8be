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
}

/// The context for `role_id` at `step`: the task, the step, the task files the role
/// `reads`, and the step's own fields.
pub fn build(store: &Store, task: &Task, role_id: &str, role: &RoleConfig, info: &StepInfo) -> Value {
    let mut files = Map::new();
    for name in &role.reads {
        let Ok(rel) = RelPath::new(&layout::task_file(task.task_id.as_str(), name)) else { continue };
        let Ok(bytes) = store.read_bytes(&rel) else { continue };
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        files.insert(name.clone(), value);
    }
    let mut ctx = json!({
        "task": task,
        "role": role_id,
        "step": info.step,
        "kind": info.kind,
        "iteration": info.iteration,
        "maxIterations": info.max_iterations,
        "files": files,
    });
    if let Some(obj) = ctx.as_object_mut() {
        obj.extend(info.extra.clone());
    }
    ctx
}
