//! One request on a task's board, as `clawboard board` sends it to the daemon
//! (`POST /v1/board`) or runs it on the files: `get`, `snapshot`, `set`,
//! `append_error`, `step_status`, `history`, `slice`; every one checked against
//! the ACL's zone table for its caller.

use clawboard_core::acl::{Acl, BoardOp};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{BoardPath, Caller, Error, ErrorEntry, Op, TaskBoard};

/// One board request, as the CLI sends it to the daemon (`POST /v1/board`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub task: String,
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// What a role's own slice is, for `slice` without a scope (from its config).
pub struct OwnSlice {
    pub scope: Option<Vec<String>>,
    pub template: Option<String>,
    pub max_tokens: Option<u64>,
    pub truncate_tokens: Option<u64>,
}

/// Everything a request needs besides itself.
pub struct Ctx<'a> {
    pub store: &'a clawboard_core::Store,
    pub acl: &'a Acl,
    pub templates: &'a std::collections::BTreeMap<String, crate::Template>,
    pub own: Option<OwnSlice>,
}

/// Runs one request for `caller`; the answer is JSON.
pub fn execute(ctx: &Ctx<'_>, caller: &Caller, r: &Request) -> Result<Value, Error> {
    let board = TaskBoard::new(ctx.store, &r.task)?;
    let bad = |path: &str, reason: String| Error::Bad { task: r.task.clone(), path: path.into(), reason };
    // A board is a task's: none is read as empty, nor made, for a task that is not there.
    let file = clawboard_core::layout::task_file(&r.task, clawboard_core::layout::TASK_FILE);
    if !clawboard_core::RelPath::new(&file).is_ok_and(|t| ctx.store.exists(&t)) {
        return Err(bad("(task)", format!("there is no task {:?} (no {file})", r.task)));
    }
    let need = |what: &str| bad(&format!("({what})"), format!("the {:?} request needs {what}", r.op));
    match r.op.as_str() {
        "get" => match &r.path {
            None => Ok(board.snapshot(ctx.acl, caller)?),
            Some(p) => {
                let path = board.parse(p)?;
                let value = board.read(ctx.acl, caller, &path)?;
                Ok(json!({"path": p, "present": value.is_some(), "value": value}))
            }
        },
        "snapshot" => Ok(board.snapshot(ctx.acl, caller)?),
        "set" => {
            let p = r.path.as_deref().ok_or_else(|| need("path"))?;
            let value = r.value.clone().ok_or_else(|| need("value"))?;
            let op = Op::set(board.parse(p)?, value).map_err(|(p, why)| bad(&p, why))?;
            Ok(json!({"record": board.write(ctx.acl, caller, op)?}))
        }
        "append_error" => {
            let e = r.error.as_ref().ok_or_else(|| need("error"))?;
            Ok(json!({"record": board.append_error(ctx.acl, caller, e)?}))
        }
        "step_status" => {
            let step = r.step.as_deref().ok_or_else(|| need("step"))?;
            let status = r.status.as_deref().ok_or_else(|| need("status"))?;
            Ok(json!({"record": board.update_step_status(ctx.acl, caller, step, status)?}))
        }
        "history" => {
            let path = r.path.as_deref().map(|p| board.parse(p)).transpose()?;
            let zones: Vec<clawboard_core::formats::Zone> =
                path.as_ref().map_or(clawboard_core::formats::Zone::ALL.to_vec(), |p| vec![p.zone]);
            for z in zones {
                board.authorize(ctx.acl, caller, BoardOp::Read, &BoardPath { zone: z, keys: Vec::new() })?;
            }
            Ok(json!({"records": board.history(path.as_ref())?}))
        }
        "slice" => slice(ctx, caller, &board, r),
        other => Err(bad(
            "(op)",
            format!("unknown op {other:?}; one of get, set, append_error, step_status, slice, snapshot, history"),
        )),
    }
}

fn slice(ctx: &Ctx<'_>, caller: &Caller, board: &TaskBoard, r: &Request) -> Result<Value, Error> {
    let bad = |reason: String| Error::Bad { task: r.task.clone(), path: "(slice)".into(), reason };
    let explicit = !r.scope.is_empty() || r.template.is_some();
    let (scope, template, max_tokens, truncate) = if explicit {
        (Some(r.scope.clone()).filter(|s| !s.is_empty()), r.template.clone(), r.max_tokens, None)
    } else {
        match &ctx.own {
            // A caller may ask for less than its own budget, never more.
            Some(o) => {
                let budget = match (r.max_tokens, o.max_tokens) {
                    (Some(asked), Some(own)) => Some(asked.min(own)),
                    (asked, own) => own.or(asked),
                };
                (o.scope.clone(), o.template.clone(), budget, o.truncate_tokens)
            }
            None => return Err(bad("give --scope or --template (this caller has no slice of its own)".into())),
        }
    };
    let selector = crate::Selector::of(scope.as_deref(), template.as_deref(), ctx.templates, "request")?
        .ok_or_else(|| bad("this role has no scope or template".into()))?;
    let source = selector.source();
    // A slice other than the caller's own is a read of every zone it touches.
    if explicit {
        let zones = match source {
            crate::Source::Scope(s) => s.zones(),
            crate::Source::Template(t) => t.scope.zones(),
        };
        for z in zones {
            board.authorize(ctx.acl, caller, BoardOp::Read, &BoardPath { zone: z, keys: Vec::new() })?;
        }
    }
    let state = board.load()?;
    let spec = crate::Spec {
        step: "(slice)".into(),
        source,
        max_tokens,
        truncate_tokens: truncate.unwrap_or(crate::slice::DEFAULT_TRUNCATE_TOKENS),
    };
    let s = crate::slice::build(&state, &spec)?;
    Ok(json!({
        "slice": s.data, "tokens": s.tokens, "budget": s.budget, "rungs": s.rungs, "missing": s.missing,
        "hash": s.hash, "boardSeq": state.seq, "tokenizer": crate::tokens::TOKENIZER,
    }))
}
