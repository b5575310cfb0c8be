//! The review page's entries section (seed 004): entries addressed to Human that
//! are not closed, and entries that ended in `error`, beside the escalations; a
//! person closes one (`done`) or cancels it with a form POST.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use clawboard_core::Store;
use clawboard_entries::{self as entries, Entry, EntryStatus, Filter};

use maud::{Markup, html};

use super::render::unreadable;
use super::{DecideForm, Web};

/// Entries shown, at most (newest first).
const MAX: usize = 50;

/// The section's HTML.
pub fn section(w: &Web) -> Markup {
    let listed = entries::list(&w.store, &Filter::default());
    let lanes = w.daemon.dispatcher.engine.config().lanes.clone();
    let (all, broken) = listed.as_ref().map_or((&[][..], &[][..]), |(a, b)| (&a[..], &b[..]));
    let mut shown: Vec<&Entry> = all.iter().filter(|e| waits_on_a_person(e, &lanes)).collect();
    shown.reverse();
    html! {
        section #entries {
            h2 { "Entries for Human (" (shown.len()) ")" }
            @if let Err(e) = &listed { (unreadable("entries/", e)) }
            @if shown.is_empty() {
                p.empty { "No entries waiting for a person." }
            } @else {
                table {
                    tr { th { "Entry" } th { "From" } th { "Kind" } th { "Status" } th { "Summary" } th { "Note" } th { "Updated" } th {} }
                    @for e in shown.iter().take(MAX) { (row(w, &lanes, e)) }
                }
                @if shown.len() > MAX { p.muted { "… and " (shown.len() - MAX) " older (clawboard entry list --to Human)." } }
            }
            @if !broken.is_empty() {
                details.bad { summary { "Unreadable entry files" } ul { @for b in broken { li { (b) } } } }
            }
        }
    }
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

/// An entry's summary (`payload.summary`, by convention), if it has one.
pub(super) fn summary(e: &Entry) -> &str {
    e.payload.get("summary").and_then(|s| s.as_str()).unwrap_or_default()
}

fn row(w: &Web, lanes: &clawboard_entries::Lanes, e: &Entry) -> Markup {
    let id = e.id.as_str();
    let note = if stranded(e, lanes) {
        format!("no lane picks it: to {}, kind {}", e.to, e.kind)
    } else {
        e.note.clone().unwrap_or_default()
    };
    let st = e.status.as_str();
    html! {
        tr.entry-row data-id=(id) {
            td { code { (id) } }
            td { (e.from) }
            td { (e.kind) }
            td class={ "status " (st) } { (st) }
            td { (crate::output::truncate(summary(e), 200)) }
            td { (note) }
            td { (e.updated_at.as_str()) }
            td {
                @if !e.status.is_final() {
                    form method="post" action={ "/entries/" (id) "/done" } {
                        input type="hidden" name="csrf" value=(w.csrf);
                        button type="submit" .approve { "Done" }
                        button type="submit" .reject formaction={ "/entries/" (id) "/cancel" } { "Cancel" }
                    }
                }
            }
        }
    }
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
