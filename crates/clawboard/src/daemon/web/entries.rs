//! The review page's entries section (seed 004): entries addressed to Human that
//! are not closed, and entries that ended in `error`, beside the escalations; a
//! person closes one (`done`) or cancels it with a form POST.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use clawboard_core::Store;
use clawboard_entries::{self as entries, Entry, EntryStatus, Filter};

use super::{DecideForm, Web, esc};

/// Entries shown, at most (newest first).
const MAX: usize = 50;

/// The section's HTML.
pub fn section(w: &Web) -> String {
    let mut o = String::new();
    let (all, broken) = entries::list(&w.store, &Filter::default()).unwrap_or_else(|e| {
        o.push_str(&format!("<p class=\"flash error\">Cannot read entries/: {}</p>", esc(&e.to_string())));
        Default::default()
    });
    let mut shown: Vec<&Entry> = all
        .iter()
        .filter(|e| (e.to == entries::HUMAN && !e.status.is_final()) || e.status == EntryStatus::Error)
        .collect();
    shown.reverse();
    o.insert_str(0, &format!("<section id=\"entries\"><h2>Entries for Human ({})</h2>", shown.len()));
    if shown.is_empty() {
        o.push_str("<p class=\"empty\">No entries waiting for a person.</p>");
    } else {
        o.push_str("<table><tr><th>Entry</th><th>From</th><th>Kind</th><th>Status</th><th>Summary</th><th>Note</th><th>Updated</th><th></th></tr>");
        for e in shown.iter().take(MAX) {
            o.push_str(&row(w, e));
        }
        o.push_str("</table>");
        if shown.len() > MAX {
            o.push_str(&format!(
                "<p class=\"muted\">… and {} older (clawboard entry list --to Human).</p>",
                shown.len() - MAX
            ));
        }
    }
    if !broken.is_empty() {
        o.push_str("<details class=\"bad\"><summary>Unreadable entry files</summary><ul>");
        for b in &broken {
            o.push_str(&format!("<li>{}</li>", esc(&b.to_string())));
        }
        o.push_str("</ul></details>");
    }
    o.push_str("</section>");
    o
}

fn row(w: &Web, e: &Entry) -> String {
    let id = esc(e.id.as_str());
    let summary = e.payload.get("summary").and_then(|s| s.as_str()).unwrap_or_default();
    let buttons = if e.status.is_final() {
        String::new()
    } else {
        format!(
            "<form method=\"post\" action=\"/entries/{id}/done\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button type=\"submit\" class=\"approve\">Done</button>\
             <button type=\"submit\" class=\"reject\" formaction=\"/entries/{id}/cancel\">Cancel</button></form>",
            csrf = esc(&w.csrf)
        )
    };
    format!(
        "<tr class=\"entry-row\" data-id=\"{id}\"><td><code>{id}</code></td><td>{}</td><td>{}</td><td class=\"status {st}\">{st}</td><td>{}</td><td>{}</td><td>{}</td><td>{buttons}</td></tr>",
        esc(&e.from),
        esc(&e.kind),
        esc(&crate::output::truncate(summary, 200)),
        esc(e.note.as_deref().unwrap_or("")),
        esc(e.updated_at.as_str()),
        st = e.status.as_str(),
    )
}

/// `POST /entries/{id}/done|cancel`: Human closes an entry.
pub async fn act(
    State(w): State<Arc<Web>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(f): Form<DecideForm>,
) -> Response {
    if let Some(refused) = w.refuse_post(&headers, &f.csrf) {
        return refused;
    }
    let status = match action.as_str() {
        "done" => EntryStatus::Done,
        "cancel" => EntryStatus::Canceled,
        _ => return (StatusCode::NOT_FOUND, "done or cancel").into_response(),
    };
    let store: Store = w.store.clone();
    let id2 = id.clone();
    let note = Some(f.note.trim().to_owned()).filter(|n| !n.is_empty());
    let result = tokio::task::spawn_blocking(move || {
        entries::set_status(&store, &id2, entries::HUMAN, status, note, chrono::Utc::now())
    })
    .await;
    let back = |q: String| Redirect::to(&format!("/?{q}")).into_response();
    match result {
        Ok(Ok(_)) => {
            tracing::info!(entry = %id, %status, "closed on the web page");
            back(format!("entry={}&outcome={status}", crate::output::percent_encode(&id)))
        }
        Ok(Err(e)) => back(format!("error={}", crate::output::percent_encode(&e.to_string()))),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
