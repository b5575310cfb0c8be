//! The local API: HTTP over a Unix socket in `.clawboard/api.sock` (mode 0600, so
//! only the daemon's user can connect): health, status, tasks, instances, `/metrics`
//! (Prometheus text), and `POST /v1/write`, through which a role instance writes with
//! its token under the ACL.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use clawboard_board::request::{OwnSlice, Request};
use clawboard_roles::write_policy::{self, Allowed, Writer};

use super::DaemonState;
use crate::local::socket_path;
use error::{ApiError, answer, respond};

mod entries;
mod error;

async fn health(State(s): State<Arc<DaemonState>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "root": s.root.display().to_string(),
        "startedAt": s.started_at,
    }))
}

async fn status(State(s): State<Arc<DaemonState>>) -> Json<Value> {
    let (counts, unreadable) = {
        let summary = s.tasks.lock();
        let counts: serde_json::Map<String, Value> =
            summary.counts().into_iter().map(|(st, n)| (st.as_str().to_owned(), json!(n))).collect();
        (counts, summary.unreadable().count())
    };
    Json(json!({
        "tasks": counts,
        "unreadableTasks": unreadable,
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "root": s.root.display().to_string(),
        "startedAt": s.started_at,
        "queue": s.dispatcher.stats(),
        "instances": s.dispatcher.engine.running_instances().len(),
        "journalSeq": *s.last_seq.borrow(),
    }))
}

async fn instances(State(s): State<Arc<DaemonState>>) -> Json<Value> {
    Json(json!(s.dispatcher.engine.running_instances()))
}

/// `GET /v1/tasks?limit=N&status=S&type=T&since=TIME`: the newest `limit` tasks
/// that match (100 unless given; `limit=0` for all), oldest first, and how many
/// matched, from the daemon's task summary.
#[derive(Debug, serde::Deserialize)]
struct TasksQuery {
    limit: Option<usize>,
    status: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    since: Option<String>,
}

/// The first page `GET /v1/tasks` answers without `limit`.
const TASKS_PAGE: usize = 100;

async fn tasks(
    State(s): State<Arc<DaemonState>>,
    axum::extract::Query(q): axum::extract::Query<TasksQuery>,
) -> Result<Json<Value>, ApiError> {
    let bad = |field: &str, why: String| ApiError::BadRequest(format!("/v1/tasks: {field}: {why}"));
    let query = clawboard_core::summary::Query {
        status: q.status.as_deref().map(str::parse).transpose().map_err(|e| bad("status", e))?,
        kind: q.kind.as_deref().map(str::parse).transpose().map_err(|e| bad("type", e))?,
        since: q.since.as_deref().map(crate::commands::task::parse_since).transpose().map_err(|e| bad("since", e))?,
        limit: match q.limit {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some(TASKS_PAGE),
        },
    };
    let page = query.page(s.tasks.lock().rows());
    Ok(Json(json!({ "tasks": page.tasks, "total": page.total })))
}

async fn metrics(State(s): State<Arc<DaemonState>>) -> axum::response::Response {
    metrics_response(s).await
}

/// The Prometheus text exposition of the daemon (read on a blocking thread).
pub async fn metrics_response(s: Arc<DaemonState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let text = tokio::task::spawn_blocking(move || {
        super::metrics::render(&super::metrics::Inputs {
            store: &s.store,
            latency: &s.dispatcher.intake_latency,
            runs: s.dispatcher.engine.run_counts(),
            queue: &s.dispatcher.stats(),
            sync_enabled: s.sync_enabled,
            archive_enabled: s.archive_enabled,
            notify_failures: s.counters.notify_failures.load(Ordering::Relaxed),
            web_refusals: s.counters.web_refusals.load(Ordering::Relaxed),
            acl_refusals: s.counters.acl_refusals.load(Ordering::Relaxed),
            board_refusals: s.counters.board_refusals.load(Ordering::Relaxed),
            jobs: s.jobs.jobs(),
            journal_seq: *s.last_seq.borrow(),
        })
    })
    .await;
    match text {
        Ok(t) => ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], t).into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The running role instance whose token the request carries (`Authorization: Bearer T`).
fn instance_of(s: &DaemonState, headers: &axum::http::HeaderMap) -> Option<clawboard_roles::engine::InstanceInfo> {
    s.dispatcher.engine.instance_by_token(bearer(headers))
}

/// The request's bearer token ("" without one).
fn bearer(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or_default()
}

const EXPIRED: &str = "unknown or expired token: a token is valid only while its role instance runs";

#[derive(serde::Deserialize)]
struct WriteQuery {
    path: String,
}

/// `POST /v1/write?path=P` with `Authorization: Bearer TOKEN`: a role instance writes
/// one file. The token names the instance (and so its role and task) while it runs;
/// the write policy (`clawboard_roles::write_policy`) decides. Refusals are logged
/// and counted.
async fn write(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    axum::extract::Query(q): axum::extract::Query<WriteQuery>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let inst = instance_of(&s, &headers);
    let who = inst.as_ref().map_or("?".to_owned(), |i| format!("{} (instance {}, task {})", i.role, i.id, i.task_id));
    let r = write_as(&s, inst, &q.path, &body).await;
    if r.is_ok() {
        tracing::info!(who, path = %q.path, "role wrote a file through the API");
    }
    answer(r, StatusCode::OK, &s.counters.acl_refusals, &who, &format!("write of {}", q.path))
}

/// The write of `body` to `path` by `inst`, under the write policy.
async fn write_as(
    s: &Arc<DaemonState>,
    inst: Option<clawboard_roles::engine::InstanceInfo>,
    path: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    let inst = inst.ok_or_else(|| ApiError::Unauthorized(EXPIRED.into()))?;
    let writer = Writer { role: &inst.role, task_id: &inst.task_id, instance_id: &inst.id };
    let acl = s.dispatcher.engine.board_acl();
    let now = clawboard_core::Timestamp::now();
    let allowed = write_policy::check(&acl, &s.root, s.store.max_file_bytes(), writer, path, body, now)
        .map_err(ApiError::Refused)?;
    let (store, engine) = (s.store.clone(), s.dispatcher.engine.clone());
    let Allowed { rel, body, escalation, rule } = allowed;
    let written = tokio::task::spawn_blocking(move || match escalation {
        // Recorded with the instance's attempt: one that needs approval holds the task.
        Some(id) => engine.raise_escalation(&inst, &id, || store.create_bytes(&rel, &body)),
        None => store.write_bytes(&rel, &body).map(|()| true),
    })
    .await?;
    match written {
        Ok(true) => Ok(json!({"written": path, "rule": rule})),
        Ok(false) => Err(ApiError::Unauthorized(format!(
            "{path}: {EXPIRED}; this run's attempt was recorded already, so the escalation was not raised"
        ))),
        Err(clawboard_core::Error::AlreadyExists { path }) => {
            Err(ApiError::Conflict(format!("{path} exists: an escalation is raised once, never rewritten")))
        }
        Err(e) => Err(ApiError::BadRequest(e.to_string())),
    }
}

/// `POST /v1/board` with `Authorization: Bearer TOKEN` and a JSON request: a role
/// instance reads or writes its own task's board. The role, task and component type
/// come from the token (and the role's config), never from the request; the zone
/// table decides. Refusals are logged and counted.
async fn board(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let req: Request = match clawboard_core::json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return ApiError::BadRequest(format!("the board request is not valid: {e}")).into_response(),
    };
    if clawboard_core::token::constant_time_eq(bearer(&headers).as_bytes(), s.person_token.as_bytes()) {
        return respond(board_as_person(&s, req).await, StatusCode::OK);
    }
    let inst = instance_of(&s, &headers);
    let who = inst.as_ref().map_or("?".to_owned(), |i| format!("{} (instance {}, task {})", i.role, i.id, i.task_id));
    answer(board_as_role(&s, inst, req).await, StatusCode::OK, &s.counters.board_refusals, &who, "board request")
}

/// A person's `clawboard board` while the daemon runs: as on the files (any
/// task, any zone), but numbered with the daemon's own records.
async fn board_as_person(s: &Arc<DaemonState>, req: Request) -> Result<Value, ApiError> {
    tracing::info!(task = %req.task, op = %req.op, path = req.path.as_deref().unwrap_or(""), "a person's board write");
    let v = execute_board(s, clawboard_board::Caller::human(), req, None).await?.map_err(|e| match e {
        e @ clawboard_board::Error::Refused { .. } => ApiError::forbidden(e.to_string()),
        e => board_error(e),
    })?;
    // What the person reads next (`clawboard board get`, `history`) is read from
    // the files: written before the answer, not up to a deferred batch later.
    let store = s.store.clone();
    tokio::task::spawn_blocking(move || store.settle())
        .await
        .map_err(|e| ApiError::Internal(format!("writing the board's files: {e}")))?;
    Ok(v)
}

/// A role instance's request on its own task's board: the role, task and
/// component type come from the token (and the role's config), never from the
/// request; the zone table decides.
async fn board_as_role(
    s: &Arc<DaemonState>,
    inst: Option<clawboard_roles::engine::InstanceInfo>,
    req: Request,
) -> Result<Value, ApiError> {
    let inst = inst.ok_or_else(|| ApiError::Unauthorized(EXPIRED.into()))?;
    if req.task != inst.task_id {
        return Err(ApiError::Forbidden {
            message: format!(
                "task {}: a role works on its own task's board only (its token is for {})",
                req.task, inst.task_id
            ),
            rule: Some("[scope] own task".into()),
        });
    }
    let cfg = s.dispatcher.engine.roles();
    let role_cfg = cfg.roles.get(&inst.role).cloned();
    let (component, how) = match &role_cfg {
        Some(r) => r.component_of(&inst.role),
        None => clawboard_core::acl::Component::default_for_role(&inst.role),
    };
    let caller = clawboard_board::Caller::role(&inst.role, &inst.id, component, how);
    let own = role_cfg.filter(|r| r.is_sliced()).map(|r| OwnSlice {
        scope: r.scope,
        template: r.template,
        max_tokens: r.max_tokens,
        truncate_tokens: r.truncate_tokens,
    });
    execute_board(s, caller, req, own).await?.map_err(|e| match e {
        clawboard_board::Error::Refused { task, path, decision } => ApiError::Forbidden {
            message: format!("task {task}: {path}: {} may not: {}", inst.role, decision.why.join("; ")),
            rule: Some(decision.rule),
        },
        e => board_error(e),
    })
}

/// A board error other than a refusal: bad input (422) or a failure (500).
fn board_error(e: clawboard_board::Error) -> ApiError {
    if e.is_bad_input() { ApiError::Unprocessable(e.to_string()) } else { ApiError::Internal(e.to_string()) }
}

/// Runs one board request on the daemon's store (off the async workers).
async fn execute_board(
    s: &Arc<DaemonState>,
    caller: clawboard_board::Caller,
    req: Request,
    own: Option<OwnSlice>,
) -> Result<clawboard_board::Result<Value>, ApiError> {
    let state = s.clone();
    let engine = s.dispatcher.engine.clone();
    tokio::task::spawn_blocking(move || {
        let templates = engine.templates();
        let acl = engine.board_acl();
        let ctx = clawboard_board::request::Ctx { store: &state.store, acl: &acl, templates: &templates, own };
        clawboard_board::request::execute(&ctx, &caller, &req)
    })
    .await
    .map_err(ApiError::from)
}

/// Serves the API until `stop` fires.
pub async fn serve(state: Arc<DaemonState>, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
    let path = socket_path(&state.root);
    // We hold the daemon lock, so a socket left here is stale.
    let _ = std::fs::remove_file(&path);
    let listener =
        tokio::net::UnixListener::bind(&path).with_context(|| format!("binding the API socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 600 {}", path.display()))?;
    let app = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/status", get(status))
        .route("/v1/tasks", get(tasks))
        .route("/v1/instances", get(instances))
        .route("/metrics", get(metrics))
        .route("/v1/write", axum::routing::post(write))
        .route("/v1/board", axum::routing::post(board))
        .route("/v1/entries", axum::routing::post(entries::create))
        .route("/v1/entries/status", axum::routing::post(entries::status))
        .layer(axum::extract::DefaultBodyLimit::max(
            usize::try_from(state.store.max_file_bytes()).unwrap_or(usize::MAX).saturating_add(1),
        ))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { clawboard_roles::runner::fired(&mut stop).await })
        .await
        .context("serving the API")?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}
