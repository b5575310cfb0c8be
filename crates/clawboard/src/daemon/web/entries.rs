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
    let lanes = w.daemon.dispatcher.engine.config().lanes.clone();
    let mut shown: Vec<&Entry> = all.iter().filter(|e| waits_on_a_person(e, &lanes)).collect();
    shown.reverse();
    o.insert_str(0, &format!("<section id=\"entries\"><h2>Entries for Human ({})</h2>", shown.len()));
    if shown.is_empty() {
        o.push_str("<p class=\"empty\">No entries waiting for a person.</p>");
    } else {
        o.push_str("<table><tr><th>Entry</th><th>From</th><th>Kind</th><th>Status</th><th>Summary</th><th>Note</th><th>Updated</th><th></th></tr>");
        for e in shown.iter().take(MAX) {
            o.push_str(&row(w, &lanes, e));
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

/// Whether a person sees entry `e`: it waits on Human, it ended in `error`, or it
/// is open and no lane picks it (an actor's name or a kind no lane has, while
/// lanes are configured): it would wait for ever otherwise.
fn waits_on_a_person(e: &Entry, lanes: &entries::Lanes) -> bool {
    (e.to == entries::HUMAN && !e.status.is_final()) || e.status == EntryStatus::Error || stranded(e, lanes)
}

fn stranded(e: &Entry, lanes: &entries::Lanes) -> bool {
    !lanes.is_empty() && e.to != entries::HUMAN && !e.status.is_final() && lanes.pick(e).is_none()
}

fn row(w: &Web, lanes: &clawboard_entries::Lanes, e: &Entry) -> String {
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
        esc(&if stranded(e, lanes) {
            format!("no lane picks it: to {}, kind {}", e.to, e.kind)
        } else {
            e.note.clone().unwrap_or_default()
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_no_lane_picks_waits_on_a_person() {
        let section: entries::LanesSection = toml::from_str::<toml::Table>(
            "[lanes.doc_update]\nprojects = [\"p\"]\n[lanes.doc_update.actors.Aya]\nrole = \"aya\"\npicks = [\"ask\"]\n",
        )
        .unwrap()
        .get("lanes")
        .unwrap()
        .clone()
        .try_into()
        .unwrap();
        let lanes = entries::Lanes::resolve(section, |_| true).unwrap();
        let entry = |to: &str, kind: &str, status: EntryStatus| -> Entry {
            serde_json::from_value(serde_json::json!({
                "id": "p-x-1", "from": "Human", "to": to, "project_id": "p", "kind": kind, "status": status,
                "payload": {}, "target_docs": [], "created_at": "2026-11-27T00:00:00Z", "updated_at": "2026-11-27T00:00:00Z"
            }))
            .unwrap()
        };
        assert!(!waits_on_a_person(&entry("Aya", "ask", EntryStatus::Open), &lanes), "a lane picks it");
        assert!(waits_on_a_person(&entry("Aay", "ask", EntryStatus::Open), &lanes), "a misspelt actor");
        assert!(waits_on_a_person(&entry("Aya", "aks", EntryStatus::Open), &lanes), "a kind Aya does not pick");
        assert!(!waits_on_a_person(&entry("Aay", "ask", EntryStatus::Done), &lanes), "ended");
        assert!(waits_on_a_person(&entry("Human", "ask", EntryStatus::Open), &lanes));
        assert!(waits_on_a_person(&entry("Aya", "ask", EntryStatus::Error), &lanes));
        // Without lanes, entries are data for someone else: none is stranded.
        let none = entries::Lanes::resolve(entries::LanesSection::default(), |_| true).unwrap();
        assert!(!waits_on_a_person(&entry("Aay", "ask", EntryStatus::Open), &none));
    }
}
