//! The local API: HTTP over a Unix socket in `.clawboard/api.sock` (mode 0600, so
//! only the daemon's user can connect): health, status, tasks, instances, `/metrics`
//! (Prometheus text), and `POST /v1/write`, through which a role instance writes with
//! its token under the ACL.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::DaemonState;

mod entries;

pub const SOCKET: &str = ".clawboard/api.sock";

pub fn socket_path(root: &Path) -> PathBuf {
    root.join(SOCKET)
}

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
    Json(json!({
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

async fn tasks(State(s): State<Arc<DaemonState>>) -> Json<Value> {
    let store = s.dispatcher.engine.store().clone();
    let list = tokio::task::spawn_blocking(move || {
        store
            .tasks()
            .map(|ts| {
                ts.into_iter()
                    .filter_map(|(_, t)| t.ok())
                    .map(|t| {
                        json!({
                            "taskId": t.task_id, "status": t.status, "type": t.kind, "priority": t.priority,
                            "createdAt": t.created_at, "completedAt": t.completed_at,
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    })
    .await
    .unwrap_or_default();
    Json(json!(list))
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

/// Why `path` is the task lifecycle's own file (written by the engine only), if it is.
fn daemon_owned(path: &str) -> Option<String> {
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
    let owned = clawboard_core::layout::TASK_FILES.contains(&file)
        || file == "errors.log"
        || file == "attempts"
        || file.starts_with("attempts/");
    owned.then(|| format!("{path} is written by the task's lifecycle only (the engine), never by a role"))
}

/// The first existing component of `path` (under `root`) that is a symlink.
fn symlink_on_the_way(root: &std::path::Path, path: &str) -> Option<String> {
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
/// the ACL decides; a known file kind must be valid. Refusals are logged and counted.
async fn write(
    State(s): State<Arc<DaemonState>>,
    headers: axum::http::HeaderMap,
    axum::extract::Query(q): axum::extract::Query<WriteQuery>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let fail = |status: StatusCode, msg: String, rule: Option<String>| {
        (status, Json(json!({"error": msg, "rule": rule}))).into_response()
    };
    let refuse = |status: StatusCode, who: &str, msg: String, rule: Option<String>| {
        s.counters.acl_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(who, path = %q.path, "write refused: {msg}");
        fail(status, msg, rule)
    };
    let Some(inst) = instance_of(&s, &headers) else {
        return refuse(StatusCode::UNAUTHORIZED, "?", EXPIRED.into(), None);
    };
    let who = format!("{} (instance {}, task {})", inst.role, inst.id, inst.task_id);
    let d = s.dispatcher.engine.board_acl().check_instance(
        &inst.role,
        &inst.task_id,
        clawboard_core::acl::Op::Write,
        &q.path,
    );
    if !d.allowed {
        let msg = format!("{} may not write {:?}: {}", inst.role, q.path, d.why.join("; "));
        return refuse(StatusCode::FORBIDDEN, &who, msg, Some(d.rule));
    }
    if let Some(why) = daemon_owned(&q.path) {
        return refuse(StatusCode::FORBIDDEN, &who, why, Some("the task lifecycle's own files".into()));
    }
    if let Some(link) = symlink_on_the_way(&s.root, &q.path) {
        let msg = format!("{link} is a symlink: role writes never go through one");
        return refuse(StatusCode::FORBIDDEN, &who, msg, None);
    }
    if body.len() as u64 > s.store.max_file_bytes() {
        let limit = clawboard_core::validate::human_bytes(s.store.max_file_bytes());
        return fail(StatusCode::PAYLOAD_TOO_LARGE, format!("{}: over the {limit} limit", q.path), None);
    }
    let rel = match clawboard_core::RelPath::new(&q.path) {
        Ok(r) => r,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &who, e.to_string(), None),
    };
    // Under escalations/, only a file a human will see and can decide.
    let escalation = if q.path.starts_with("escalations/") {
        match clawboard_records::escalations::id_of_path(&q.path) {
            Ok(id) => Some(id.to_owned()),
            Err(e) => return fail(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), None),
        }
    } else {
        None
    };
    if let Some((kind, ctx)) = clawboard_core::FileKind::infer(std::path::Path::new(&q.path))
        && let Err(problems) = clawboard_core::validate::check_bytes(&body, kind, &ctx)
    {
        let msg = problems.iter().map(|p| format!("{}: {p}", q.path)).collect::<Vec<_>>().join("\n");
        return fail(StatusCode::UNPROCESSABLE_ENTITY, msg, None);
    }
    // A role raises an escalation; it never decides one, never speaks for another
    // role or task, never says when it was raised, and never rewrites one.
    let body = if escalation.is_some() {
        let mut e: clawboard_core::formats::Escalation = match clawboard_core::json::from_slice(&body) {
            Ok(e) => e,
            Err(e) => return fail(StatusCode::UNPROCESSABLE_ENTITY, format!("{}: {e}", q.path), None),
        };
        if e.decision.is_some() || e.decided_by.is_some() || e.decided_at.is_some() {
            let msg = format!("{}: decision, decidedBy and decidedAt are a human's to write", q.path);
            return refuse(StatusCode::FORBIDDEN, &who, msg, None);
        }
        e.from = inst.role.clone();
        e.task_id = clawboard_core::Id::new(inst.task_id.clone()).ok();
        e.created_at = Some(clawboard_core::Timestamp::now());
        e.instance_id = Some(inst.id.clone());
        axum::body::Bytes::from(clawboard_core::store::to_pretty_json(&e))
    } else {
        body
    };
    let store = s.store.clone();
    let path = q.path.clone();
    let engine = s.dispatcher.engine.clone();
    let instance = inst.clone();
    let written = tokio::task::spawn_blocking(move || match escalation {
        // Recorded with the instance's attempt: one that needs approval holds the task.
        Some(id) => engine.raise_escalation(&instance, &id, || store.create_bytes(&rel, &body)),
        None => store.write_bytes(&rel, &body).map(|()| true),
    });
    match written.await {
        Ok(Err(clawboard_core::Error::AlreadyExists { path })) => {
            fail(StatusCode::CONFLICT, format!("{path} exists: an escalation is raised once, never rewritten"), None)
        }
        Ok(Ok(false)) => refuse(
            StatusCode::UNAUTHORIZED,
            &who,
            format!("{path}: {EXPIRED}; this run's attempt was recorded already, so the escalation was not raised"),
            None,
        ),
        Ok(Ok(true)) => {
            tracing::info!(who, path = %path, "role wrote a file through the API");
            (StatusCode::OK, Json(json!({"written": path, "rule": d.rule}))).into_response()
        }
        Ok(Err(e)) => fail(StatusCode::BAD_REQUEST, e.to_string(), None),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None),
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
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let fail = |status: StatusCode, msg: String, rule: Option<String>| {
        (status, Json(json!({"error": msg, "rule": rule}))).into_response()
    };
    let refuse = |status: StatusCode, who: &str, msg: String, rule: Option<String>| {
        s.counters.board_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(who, "board request refused: {msg}");
        fail(status, msg, rule)
    };
    let req: crate::commands::board::Request = match clawboard_core::json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return fail(StatusCode::BAD_REQUEST, format!("the board request is not valid: {e}"), None),
    };
    if clawboard_core::token::constant_time_eq(bearer(&headers).as_bytes(), s.person_token.as_bytes()) {
        // A person's `clawboard board` while the daemon runs: as on the files
        // (any task, any zone), but numbered with the daemon's own records.
        tracing::info!(task = %req.task, op = %req.op, path = req.path.as_deref().unwrap_or(""), "a person's board write");
        return match execute_board(&s, clawboard_board::Caller::human(), req, None).await {
            Ok(Ok(v)) => {
                // What the person reads next (`clawboard board get`, `history`) is
                // read from the files: written before the answer, not up to a
                // deferred batch later.
                let store = s.store.clone();
                match tokio::task::spawn_blocking(move || store.settle()).await {
                    Ok(()) => (StatusCode::OK, Json(v)).into_response(),
                    Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, format!("writing the board's files: {e}"), None),
                }
            }
            Ok(Err(e @ clawboard_board::Error::Refused { .. })) => fail(StatusCode::FORBIDDEN, e.to_string(), None),
            Ok(Err(e)) if e.is_bad_input() => fail(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), None),
            Ok(Err(e)) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None),
            Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None),
        };
    }
    let Some(inst) = instance_of(&s, &headers) else {
        return refuse(StatusCode::UNAUTHORIZED, "?", EXPIRED.into(), None);
    };
    let who = format!("{} (instance {}, task {})", inst.role, inst.id, inst.task_id);
    if req.task != inst.task_id {
        let msg =
            format!("task {}: a role works on its own task's board only (its token is for {})", req.task, inst.task_id);
        return refuse(StatusCode::FORBIDDEN, &who, msg, Some("[scope] own task".into()));
    }
    let cfg = s.dispatcher.engine.roles();
    let role_cfg = cfg.roles.get(&inst.role).cloned();
    let (component, how) = match &role_cfg {
        Some(r) => r.component_of(&inst.role),
        None => clawboard_core::acl::Component::default_for_role(&inst.role),
    };
    let caller = clawboard_board::Caller::role(&inst.role, &inst.id, component, how);
    let own = role_cfg.filter(|r| r.is_sliced()).map(|r| crate::commands::board::OwnSlice {
        scope: r.scope,
        template: r.template,
        max_tokens: r.max_tokens,
        truncate_tokens: r.truncate_tokens,
    });
    match execute_board(&s, caller, req, own).await {
        Ok(Ok(v)) => (StatusCode::OK, Json(v)).into_response(),
        Ok(Err(clawboard_board::Error::Refused { task, path, decision })) => {
            let msg = format!("task {task}: {path}: {} may not: {}", inst.role, decision.why.join("; "));
            refuse(StatusCode::FORBIDDEN, &who, msg, Some(decision.rule))
        }
        Ok(Err(e)) if e.is_bad_input() => fail(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), None),
        Ok(Err(e)) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), None),
    }
}

/// Runs one board request on the daemon's store (off the async workers).
async fn execute_board(
    s: &Arc<DaemonState>,
    caller: clawboard_board::Caller,
    req: crate::commands::board::Request,
    own: Option<crate::commands::board::OwnSlice>,
) -> Result<clawboard_board::Result<serde_json::Value>, tokio::task::JoinError> {
    let state = s.clone();
    let engine = s.dispatcher.engine.clone();
    tokio::task::spawn_blocking(move || {
        let templates = engine.templates();
        let acl = engine.board_acl();
        let ctx = crate::commands::board::Ctx { store: &state.store, acl: &acl, templates: &templates, own };
        crate::commands::board::execute(&ctx, &caller, &req)
    })
    .await
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

/// A GET on the API of the daemon running on `root`, if one answers.
pub fn get_json(root: &Path, path: &str) -> Option<Value> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket_path(root)).ok()?;
    let timeout = Some(std::time::Duration::from_secs(3));
    s.set_read_timeout(timeout).ok()?;
    s.set_write_timeout(timeout).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: clawboard\r\n\r\n").as_bytes()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then_some(()).or_else(|| head.starts_with("HTTP/1.1 200").then_some(()))?;
    serde_json::from_str(body).ok()
}
