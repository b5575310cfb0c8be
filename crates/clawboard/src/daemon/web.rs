//! The review page: server-rendered HTML on `web.listen` (loopback unless
//! `web.allow_remote`), a little plain JS that polls for changes every 2 seconds,
//! and form POSTs to approve or reject.
//!
//! Access needs the human token: open `/?token=T` once (the daemon answers with a
//! random session cookie, `SameSite=Strict` and `HttpOnly`, and a clean URL), or send
//! `Authorization: Bearer T`.
//! POSTs also need the page's CSRF token and, when the browser sends them, a
//! same-origin `Origin` and `Sec-Fetch-Site`. `/metrics` is here too (same token).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use clawboard_core::Store;
use clawboard_core::formats::{Decision, Level};
use clawboard_records::escalations::{self, DecideError};
use clawboard_records::review::{self, EscalationFile, Filter, TaskView};
use serde::Deserialize;

use super::DaemonState;

mod entries;
mod render;
mod task;

use render::fragment;

/// The session cookie: a random id made at login, known only to this daemon run
/// (the token itself never goes into a cookie, which every port of the host would see).
pub const COOKIE: &str = "clawboard_session";
/// At most this many sessions are remembered; beyond it, the oldest logins are forgotten.
const MAX_SESSIONS: usize = 1000;
/// Where the daemon writes the address it listens on (the port may be 0 in the config).
use crate::local::WEB_ADDR_FILE as ADDR_FILE;

pub struct Web {
    pub daemon: Arc<DaemonState>,
    pub store: Store,
    pub token: String,
    pub csrf: String,
    /// Session ids handed out by `/?token=`, oldest first.
    pub sessions: clawboard_core::lock::Lock<std::collections::VecDeque<String>>,
}

use clawboard_core::token::constant_time_eq;

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == COOKIE).then_some(v)
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

/// The refusal of a token that is not the human's (a wrong or old one, the person
/// token, a role's).
const BAD_TOKEN: &str = "the token is not valid; `clawboard web token` prints the right one";

impl Web {
    /// Why the request is not the human's, if it is not: it carries no token or
    /// session, or one that does not match (told apart in the log).
    fn unauthorized(&self, headers: &HeaderMap) -> Option<&'static str> {
        if let Some(t) = bearer(headers) {
            return (!constant_time_eq(t.as_bytes(), self.token.as_bytes())).then_some(BAD_TOKEN);
        }
        let Some(session) = cookie_token(headers) else { return Some("no token given") };
        let known = self.sessions.lock().iter().any(|k| constant_time_eq(k.as_bytes(), session.as_bytes()));
        (!known).then_some(
            "the session is not valid (the daemon restarted since you opened the page, or the cookie is not one it \
             handed out); open the URL `clawboard web token` prints again",
        )
    }

    /// The refusal of a request that is not the human's; `None` lets it through.
    fn gate(&self, headers: &HeaderMap) -> Option<Response> {
        self.unauthorized(headers).map(|why| self.refuse(why))
    }

    fn new_session(&self) -> String {
        let id = clawboard_core::id::random_hex(32);
        let mut s = self.sessions.lock();
        if s.len() >= MAX_SESSIONS {
            s.pop_front();
        }
        s.push_back(id.clone());
        id
    }

    fn refuse(&self, why: &str) -> Response {
        self.refuse_with(StatusCode::UNAUTHORIZED, why)
    }

    fn refuse_with(&self, status: StatusCode, why: &str) -> Response {
        self.daemon.counters.web_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("web: refused a request: {why}");
        let nonce = new_nonce();
        let body = render::refusal(&nonce, "This page needs the human token", why);
        with_csp(&nonce, (status, Html(body.into_string())).into_response())
    }

    /// The refusal of a form POST without the token, from another site, or without
    /// the page's CSRF token; `None` lets it through.
    fn refuse_post(&self, headers: &HeaderMap, csrf: &str) -> Option<Response> {
        if let Some(refused) = self.gate(headers) {
            return Some(refused);
        }
        self.cross_site(headers, csrf).map(|why| self.refuse_with(StatusCode::FORBIDDEN, why))
    }

    /// A POST from another site, or without the page's CSRF token, is refused. The
    /// page's own forms are same-origin; `Sec-Fetch-Site: none` (a request the user
    /// typed, or one from a bookmark or another program) is no form of the page.
    fn cross_site(&self, headers: &HeaderMap, csrf: &str) -> Option<&'static str> {
        if !constant_time_eq(csrf.as_bytes(), self.csrf.as_bytes()) {
            return Some("the form's CSRF token is missing or wrong; reload the page");
        }
        let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        if site.is_some_and(|s| s != "same-origin") {
            return Some("a request from another site, or not from the page (Sec-Fetch-Site is not same-origin)");
        }
        // A browser that hides the origin sends `null`; it is trusted only when the
        // browser vouched above that the request is same-origin.
        if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())
            && !(origin == "null" && site == Some("same-origin"))
        {
            let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let same = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) == Some(host);
            if !same {
                return Some("the request's Origin is not this page");
            }
        }
        None
    }
}

#[derive(Deserialize)]
struct PageQuery {
    token: Option<String>,
    decided: Option<String>,
    outcome: Option<String>,
    error: Option<String>,
    /// An entry closed on the page (with `outcome`).
    entry: Option<String>,
}

async fn page(State(w): State<Arc<Web>>, headers: HeaderMap, Query(q): Query<PageQuery>) -> Response {
    if let Some(t) = &q.token {
        if !constant_time_eq(t.as_bytes(), w.token.as_bytes()) {
            return w.refuse(BAD_TOKEN);
        }
        // Keep the token out of the address bar and the history: a session cookie, then a clean URL.
        let mut r = Redirect::to("/").into_response();
        let cookie = format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", w.new_session());
        match HeaderValue::from_str(&cookie) {
            Ok(v) => r.headers_mut().insert(header::SET_COOKIE, v),
            Err(e) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot set the session cookie: {e}"))
                    .into_response();
            }
        };
        return r;
    }
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    let flash = match (&q.decided, &q.outcome, &q.error) {
        (_, _, Some(e)) => Some(render::flash(e, true)),
        (None, Some(o), None) if q.entry.is_some() => {
            Some(render::flash(&format!("Entry {} {o}.", q.entry.as_deref().unwrap_or("")), false))
        }
        (Some(id), Some(o), None) => Some(render::flash(&format!("Escalation {id} {o}."), false)),
        _ => None,
    };
    let content = w.blocking(fragment).await;
    w.page("clawboard review", flash, "/fragment", content)
}

impl Web {
    /// `render` run on a blocking thread (it reads the tree); a panic in it is
    /// said on the page instead.
    async fn blocking(self: &Arc<Self>, render: impl FnOnce(&Web) -> maud::Markup + Send + 'static) -> maud::Markup {
        let w = self.clone();
        tokio::task::spawn_blocking(move || render(&w)).await.unwrap_or_else(|e| render::unreadable("the page", &e))
    }

    /// A whole page of the site around `content` (refreshed from `content_src`).
    fn page(&self, title: &str, flash: Option<maud::Markup>, content_src: &str, content: maud::Markup) -> Response {
        let nonce = new_nonce();
        let root = self.daemon.root.display().to_string();
        let page = render::page(&nonce, title, &root, flash, content_src, content);
        with_csp(&nonce, Html(page.into_string()).into_response())
    }
}

async fn fragment_route(State(w): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    Html(w.blocking(fragment).await.into_string()).into_response()
}

/// The journal's last sequence number: the page fetches the fragment when it moves.
async fn version(State(w): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    w.daemon.last_seq.borrow().to_string().into_response()
}

#[derive(Deserialize)]
pub(super) struct DecideForm {
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub csrf: String,
}

async fn decide(
    State(w): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(f): Form<DecideForm>,
) -> Response {
    if let Some(refused) = w.refuse_post(&headers, &f.csrf) {
        return refused;
    }
    let decision = match action.as_str() {
        "approve" => Decision::Approved,
        "reject" => Decision::Rejected,
        _ => return (StatusCode::NOT_FOUND, "approve or reject").into_response(),
    };
    let note = Some(f.note.trim()).filter(|n| !n.is_empty()).map(str::to_owned);
    let store = w.store.clone();
    let id2 = id.clone();
    let result = tokio::task::spawn_blocking(move || {
        escalations::decide(&store, &id2, decision, "human (web)", note.as_deref())
    })
    .await;
    let back = |q: String| Redirect::to(&format!("/?{q}")).into_response();
    match result {
        Ok(Ok(_)) => {
            tracing::info!(escalation = %id, %decision, "decided on the web page");
            w.daemon.dispatcher.escalation_changed(&id);
            back(format!("decided={}&outcome={decision}", crate::output::percent_encode(&id)))
        }
        Ok(Err(e @ (DecideError::AlreadyDecided { .. } | DecideError::NotFound(_)))) => {
            back(format!("error={}", crate::output::percent_encode(&e.to_string())))
        }
        Ok(Err(e)) => {
            back(format!("error={}", crate::output::percent_encode(&format!("could not record the decision: {e}"))))
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn metrics(State(w): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    super::api::metrics_response(w.daemon.clone()).await
}

/// Reads the human token (creating the default token file when it is missing).
pub fn load_token(t: &crate::config::WebToken) -> anyhow::Result<String> {
    match t {
        crate::config::WebToken::Inline(s) => Ok(s.clone()),
        crate::config::WebToken::File(p) => crate::config::review::ensure_token_file(p, false).map(|(t, _)| t),
    }
}

/// Serves the page on `addr` until `stop` fires.
pub async fn serve(
    daemon: Arc<DaemonState>,
    store: Store,
    addr: SocketAddr,
    token: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("web.listen: cannot listen on {addr}"))?;
    let bound = listener.local_addr().context("web: the listener's address")?;
    let addr_file = daemon.root.join(ADDR_FILE);
    std::fs::write(&addr_file, format!("{bound}\n")).with_context(|| format!("writing {}", addr_file.display()))?;
    tracing::info!(
        "web: the review page is on http://{bound}/ (open it with ?token=…; `clawboard web token` prints it)"
    );
    let web = Arc::new(Web {
        daemon,
        store,
        token,
        csrf: clawboard_core::id::random_hex(16),
        sessions: clawboard_core::lock::Lock::new(std::collections::VecDeque::new()),
    });
    let app = Router::new()
        .route("/", get(page))
        .route("/fragment", get(fragment_route))
        .route("/version", get(version))
        .route("/tasks/{id}", get(task::page))
        .route("/tasks/{id}/fragment", get(task::fragment))
        .route("/metrics", get(metrics))
        .route("/escalations/{id}/{action}", post(decide))
        .route("/entries/{id}/{action}", post(entries::act))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(web);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { clawboard_roles::runner::fired(&mut stop).await })
        .await
        .context("serving the web page")?;
    let _ = std::fs::remove_file(&addr_file);
    Ok(())
}

/// A new nonce for one response's inline script and style: 128 random bits.
fn new_nonce() -> String {
    clawboard_core::id::random_hex(16)
}

/// The Content-Security-Policy of a response without a page of its own (the
/// fragment, `/version`, errors): no script or style at all.
const CSP: &str = "default-src 'none'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The Content-Security-Policy of a page whose own inline `<script>` and `<style>`
/// carry `nonce`: they run, and nothing else inline does (no injected `<script>`, no
/// `onerror=` or `style=` attribute).
fn csp(nonce: &str) -> String {
    format!("{CSP}; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'")
}

/// `r` with the policy of a page whose inline script and style carry `nonce`.
fn with_csp(nonce: &str, mut r: Response) -> Response {
    match HeaderValue::from_str(&csp(nonce)) {
        Ok(v) => {
            r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
            r
        }
        Err(e) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot set the page's security policy: {e}")).into_response()
        }
    }
}

/// No caching, no framing, no referrer to other sites; the page's own inline script
/// and style only (a response without a policy of its own gets [`CSP`]).
async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (k, v) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    }
    r
}

/// Counters the web page and the notifier keep, for `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub web_refusals: AtomicU64,
    pub notify_failures: AtomicU64,
    pub acl_refusals: AtomicU64,
    pub board_refusals: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_escape() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"abc", b"ab"));
        assert_eq!(crate::output::percent_encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn tokens_come_from_a_cookie_or_a_bearer_header() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; clawboard_session=xyz; b=2"));
        assert_eq!(cookie_token(&h), Some("xyz"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer  tok "));
        assert_eq!(bearer(&h), Some("tok"));
    }
}
