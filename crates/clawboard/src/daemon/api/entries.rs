//! `POST /v1/entries` and `POST /v1/entries/status`: a running role writes
//! blackboard entries (seed 004) with its token. The actor it writes as comes
//! from the lanes config (the actor its role plays for the project), never from
//! the request: `from` is forced, `allowed_kinds` and the status rights apply.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use clawboard_core::formats::{Extra, SourceRef, TargetDoc};
use clawboard_core::{Id, Timestamp};
use clawboard_entries::{Entry, EntryStatus};
use serde::Deserialize;
use serde_json::json;

use super::super::DaemonState;

/// A new entry as a role asks for it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewEntry {
    /// Default: the project of the entry the role is handling.
    #[serde(default)]
    project_id: Option<String>,
    to: String,
    kind: String,
    #[serde(default)]
    payload: Extra,
    #[serde(default)]
    target_docs: Vec<TargetDoc>,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    source_issue: Option<SourceRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusChange {
    id: String,
    status: EntryStatus,
    #[serde(default)]
    note: Option<String>,
}

fn fail(status: StatusCode, msg: String) -> Response {
    (status, Json(json!({"error": msg}))).into_response()
}

/// The caller's instance and the entry it is handling, if it handles one.
fn caller(
    s: &DaemonState,
    headers: &axum::http::HeaderMap,
) -> Result<(clawboard_roles::engine::InstanceInfo, Option<Entry>), Box<Response>> {
    let Some(inst) = super::instance_of(s, headers) else {
        s.counters.acl_refusals.fetch_add(1, Ordering::Relaxed);
        return Err(Box::new(fail(StatusCode::UNAUTHORIZED, super::EXPIRED.into())));
    };
    let handled =
        inst.step.strip_prefix("entry ").and_then(|id| clawboard_entries::read(&s.store, id).ok()).map(|(_, e)| e);
    Ok((inst, handled))
}

fn refuse(s: &DaemonState, who: &str, status: StatusCode, msg: String) -> Response {
    s.counters.acl_refusals.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(who, "entry request refused: {msg}");
    fail(status, msg)
}

pub async fn create(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (inst, handled) = match caller(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let who = format!("{} (instance {})", inst.role, inst.id);
    let req: NewEntry = match clawboard_core::json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return fail(StatusCode::UNPROCESSABLE_ENTITY, format!("the entry request is not valid: {e}")),
    };
    let Some(project) = req.project_id.clone().or_else(|| handled.as_ref().map(|h| h.project_id.to_string())) else {
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "project_id: required (the role is not handling an entry)".into(),
        );
    };
    let Some(pick) = s.dispatcher.engine.config().lanes.actor_of_role(&inst.role, &project) else {
        let msg =
            format!("role {} plays no actor in a lane of project {project}: see [lanes] in the config", inst.role);
        return refuse(&s, &who, StatusCode::FORBIDDEN, msg);
    };
    if !pick.config.allowed_kinds.contains(&req.kind) {
        let msg = format!(
            "kind: {} may not write {:?} entries (allowed_kinds of lanes.{}.actors.{})",
            pick.actor, req.kind, pick.lane, pick.actor
        );
        return refuse(&s, &who, StatusCode::FORBIDDEN, msg);
    }
    let store = s.store.clone();
    let node = s.node.clone();
    let made = tokio::task::spawn_blocking(move || -> Result<Entry, clawboard_entries::Error> {
        let project_id = Id::new(&project).map_err(|e| clawboard_entries::Error::BadField {
            field: "project_id",
            value: project.clone(),
            why: e.to_string(),
        })?;
        let source_issue = req.source_issue.or_else(|| handled.as_ref().and_then(|h| h.source_issue.clone()));
        let source = match &handled {
            Some(h) if source_issue == h.source_issue => {
                clawboard_entries::handling::source(h, &pick.lane, node.as_deref())
            }
            _ => {
                let lane = pick.lane.replace('_', "");
                let base = match &source_issue {
                    Some(SourceRef::Number(n)) => format!("{lane}-issue{n}"),
                    _ => lane,
                };
                node.as_ref().map_or(base.clone(), |n| format!("{base}-{n}"))
            }
        };
        let now = Timestamp::now();
        let entry = Entry {
            id: clawboard_entries::new_id(&store, &project, &source)?,
            from: pick.actor.clone(),
            to: req.to,
            project_id,
            kind: req.kind,
            status: EntryStatus::Open,
            payload: req.payload,
            target_docs: if req.target_docs.is_empty() {
                handled.map(|h| h.target_docs).unwrap_or_default()
            } else {
                req.target_docs
            },
            created_at: now.clone(),
            updated_at: now,
            source_issue,
            source_comment_id: None,
            source_run_id: None,
            note: req.note,
            extra: Extra::new(),
        };
        clawboard_entries::create(&store, &entry)?;
        Ok(entry)
    })
    .await;
    match made {
        Ok(Ok(e)) => {
            tracing::info!(who, entry = %e.id, to = e.to, kind = e.kind, "role wrote an entry through the API");
            (StatusCode::CREATED, Json(json!({"id": e.id, "from": e.from, "project_id": e.project_id}))).into_response()
        }
        Ok(Err(e)) if e.is_bad_input() => fail(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Ok(Err(e)) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub async fn status(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (inst, _) = match caller(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let who = format!("{} (instance {})", inst.role, inst.id);
    let req: StatusChange = match clawboard_core::json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return fail(StatusCode::UNPROCESSABLE_ENTITY, format!("the status request is not valid: {e}")),
    };
    let entry = match clawboard_entries::read(&s.store, &req.id) {
        Ok((_, e)) => e,
        Err(e) if e.is_bad_input() => return fail(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(pick) = s.dispatcher.engine.config().lanes.actor_of_role(&inst.role, entry.project_id.as_str()) else {
        let msg = format!("role {} plays no actor in a lane of project {}", inst.role, entry.project_id);
        return refuse(&s, &who, StatusCode::FORBIDDEN, msg);
    };
    let store = s.store.clone();
    let actor = pick.actor.clone();
    let done = tokio::task::spawn_blocking(move || {
        clawboard_entries::set_status(&store, &req.id, &actor, req.status, req.note, chrono::Utc::now())
    })
    .await;
    match done {
        Ok(Ok(e)) => {
            (StatusCode::OK, Json(json!({"id": e.id, "status": e.status, "updated_at": e.updated_at}))).into_response()
        }
        Ok(Err(e @ clawboard_entries::Error::NotAllowed { .. })) => {
            refuse(&s, &who, StatusCode::FORBIDDEN, e.to_string())
        }
        Ok(Err(e)) if e.is_bad_input() => fail(StatusCode::CONFLICT, e.to_string()),
        Ok(Err(e)) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
