//! `POST /v1/entries` and `POST /v1/entries/status`: a running role writes
//! blackboard entries (seed 004) with its token. The actor it writes as comes
//! from the lanes config (the actor its role plays for the project), never from
//! the request: `from` is forced, `allowed_kinds` and the status rights apply.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use clawboard_core::formats::{Extra, SourceRef, TargetDoc};
use clawboard_core::{Id, Timestamp};
use clawboard_entries::{Entry, EntryStatus};
use clawboard_roles::engine::InstanceInfo;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::DaemonState;
use super::error::{ApiError, answer};

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

/// The caller's instance and the entry it is handling, if it handles one.
fn caller(s: &DaemonState, inst: Option<InstanceInfo>) -> Result<(InstanceInfo, Option<Entry>), ApiError> {
    let inst = inst.ok_or_else(|| ApiError::Unauthorized(super::EXPIRED.into()))?;
    let handled =
        inst.step.strip_prefix("entry ").and_then(|id| clawboard_entries::read(&s.store, id).ok()).map(|(_, e)| e);
    Ok((inst, handled))
}

/// `who` for the log: the role and its instance, or `?` without a running one.
fn who(inst: Option<&InstanceInfo>) -> String {
    inst.map_or("?".to_owned(), |i| format!("{} (instance {})", i.role, i.id))
}

/// A failure of the entries library: the request's fault (`bad`), or the daemon's.
fn entries_error(e: clawboard_entries::Error, bad: fn(String) -> ApiError) -> ApiError {
    if e.is_bad_input() { bad(e.to_string()) } else { ApiError::Internal(e.to_string()) }
}

pub async fn create(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let inst = super::instance_of(&s, &headers);
    let who = who(inst.as_ref());
    let r = create_as(&s, inst, &body).await.map(|e| {
        tracing::info!(who, entry = %e.id, to = e.to, kind = e.kind, "role wrote an entry through the API");
        json!({"id": e.id, "from": e.from, "project_id": e.project_id})
    });
    answer(r, StatusCode::CREATED, &s.counters.acl_refusals, &who, "entry request")
}

/// The entry `inst` asks for in `body`, written as the actor its role plays.
async fn create_as(s: &Arc<DaemonState>, inst: Option<InstanceInfo>, body: &[u8]) -> Result<Entry, ApiError> {
    let (inst, handled) = caller(s, inst)?;
    let req: NewEntry = clawboard_core::json::from_slice(body)
        .map_err(|e| ApiError::Unprocessable(format!("the entry request is not valid: {e}")))?;
    let Some(project) = req.project_id.clone().or_else(|| handled.as_ref().map(|h| h.project_id.to_string())) else {
        return Err(ApiError::Unprocessable("project_id: required (the role is not handling an entry)".into()));
    };
    let Some(pick) = s.dispatcher.engine.config().lanes.actor_of_role(&inst.role, &project) else {
        return Err(ApiError::forbidden(format!(
            "role {} plays no actor in a lane of project {project}: see [lanes] in the config",
            inst.role
        )));
    };
    if !pick.config.allowed_kinds.contains(&req.kind) {
        return Err(ApiError::forbidden(format!(
            "kind: {} may not write {:?} entries (allowed_kinds of lanes.{}.actors.{})",
            pick.actor, req.kind, pick.lane, pick.actor
        )));
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
        let mut entry = Entry {
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
        // Two roles writing at once may pick the same id: the later moves on.
        clawboard_entries::create_picked(&store, &mut entry)?;
        Ok(entry)
    })
    .await?;
    made.map_err(|e| entries_error(e, ApiError::Unprocessable))
}

pub async fn status(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let inst = super::instance_of(&s, &headers);
    let who = who(inst.as_ref());
    let r = status_as(&s, inst, &body).await;
    answer(r, StatusCode::OK, &s.counters.acl_refusals, &who, "entry request")
}

/// The status change `inst` asks for in `body`, made as the actor its role plays.
async fn status_as(s: &Arc<DaemonState>, inst: Option<InstanceInfo>, body: &[u8]) -> Result<Value, ApiError> {
    let (inst, _) = caller(s, inst)?;
    let req: StatusChange = clawboard_core::json::from_slice(body)
        .map_err(|e| ApiError::Unprocessable(format!("the status request is not valid: {e}")))?;
    let (_, entry) = clawboard_entries::read(&s.store, &req.id).map_err(|e| entries_error(e, ApiError::NotFound))?;
    let Some(pick) = s.dispatcher.engine.config().lanes.actor_of_role(&inst.role, entry.project_id.as_str()) else {
        return Err(ApiError::forbidden(format!(
            "role {} plays no actor in a lane of project {}",
            inst.role, entry.project_id
        )));
    };
    let store = s.store.clone();
    let actor = pick.actor.clone();
    let done = tokio::task::spawn_blocking(move || {
        clawboard_entries::set_status(&store, &req.id, &actor, req.status, req.note, chrono::Utc::now())
    })
    .await?;
    match done {
        Ok(e) => Ok(json!({"id": e.id, "status": e.status, "updated_at": e.updated_at})),
        Err(e @ clawboard_entries::Error::NotAllowed { .. }) => Err(ApiError::forbidden(e.to_string())),
        Err(e) => Err(entries_error(e, ApiError::Conflict)),
    }
}
