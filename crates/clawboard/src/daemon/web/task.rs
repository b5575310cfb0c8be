//! The task page, `/tasks/{id}`: the task's facts, its board's three zones, its
//! role runs as a timeline (candidates, loop rounds, retries, fallbacks), the
//! slice ledger as a chart per step (the slice's tokens, the whole board's, what
//! the model and the provider counted, the budget), and the task's escalations
//! and entries. Live like the home page: the script refreshes the content from
//! `/tasks/{id}/fragment` whenever the tree changes.
//!
//! An entry belongs to a task when its payload (or the entry itself) names the
//! task in `task_id` or `taskId`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use clawboard_board::TaskBoard;
use clawboard_board::ledger::{self, Handout};
use clawboard_core::Store;
use clawboard_core::formats::Entry;
use clawboard_core::formats::{BoardFile, Zone};
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use clawboard_records::review::{self, EscalationFile, Filter, TaskView};
use maud::{Markup, html};
use serde_json::Value;

use super::Web;
use super::render::{self, clip, unreadable};

/// Characters of a board value shown, at most (the rest: `clawboard board get`).
const MAX_VALUE: usize = 2000;
/// Role runs and ledger entries drawn, at most (the newest are kept).
const MAX_ROWS: usize = 200;

/// `GET /tasks/{id}`.
pub(super) async fn page(State(w): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    let src = format!("{}/fragment", render::task_href(&id));
    match loaded(&w, id).await {
        Ok((title, content)) => w.page(&title, None, &src, content),
        Err(why) => {
            // Refreshed like any task page: the task shows once it arrives.
            let mut r = w.page("No such task · clawboard", None, &src, missing(&why));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    }
}

/// `GET /tasks/{id}/fragment`: the page's content, for its live refresh (for a
/// task not there, the page's own content saying so).
pub(super) async fn fragment(State(w): State<Arc<Web>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Some(refused) = w.gate(&headers) {
        return refused;
    }
    match loaded(&w, id).await {
        Ok((_, content)) => Html(content.into_string()).into_response(),
        Err(why) => Html(missing(&why).into_string()).into_response(),
    }
}

/// The page's title and content, or why there is no such task.
async fn loaded(w: &Arc<Web>, id: String) -> Result<(String, Markup), String> {
    let store = w.store.clone();
    let loaded = tokio::task::spawn_blocking(move || TaskPage::load(&store, &id)).await;
    match loaded {
        Ok(Ok(p)) => Ok((format!("{} · clawboard", p.view.task_id), content(&p))),
        Ok(Err(why)) => Err(why),
        Err(e) => Err(format!("reading the task failed: {e}")),
    }
}

fn missing(why: &str) -> Markup {
    html! {
        section #task {
            h2 { "No such task" }
            p #missing { (why) }
            p { a href="/" { "All tasks" } }
        }
    }
}

/// What the page shows of one task; each part read on its own, so a part that
/// cannot be read is said in its place and the rest still shows.
struct TaskPage {
    view: TaskView,
    board: Result<Option<BoardFile>, String>,
    attempts: Result<Vec<Attempt>, String>,
    ledger: Result<Vec<Handout>, String>,
    escalations: Result<Vec<EscalationFile>, String>,
    entries: Result<Vec<Entry>, String>,
    /// `forked_from` of its task.json: the task, step and board seq it was forked at.
    forked_from: Option<Value>,
    /// The forks made of it on this node.
    forks: Vec<String>,
}

impl TaskPage {
    fn load(store: &Store, id: &str) -> Result<TaskPage, String> {
        clawboard_core::check_id(id).map_err(|e| format!("{id:?} is not a task id: it {e}"))?;
        let view = review::load_task(store, id).map_err(|e| match e {
            clawboard_core::Error::NotFound { .. } => format!("there is no task {id} (no tasks/{id}/task.json)"),
            e => format!("task {id}: {e}"),
        })?;
        Ok(TaskPage {
            view,
            board: TaskBoard::new(store, id)
                .and_then(|b| if b.exists() { b.load().map(Some) } else { Ok(None) })
                .map_err(|e| e.to_string()),
            attempts: attempts::load(store, id).map_err(|e| e.to_string()),
            ledger: ledger::list(store, id).map_err(|e| e.to_string()),
            escalations: review::list(store, Filter::default())
                .map(|(all, _)| {
                    all.into_iter()
                        .filter(|e| e.escalation.task_id.as_ref().is_some_and(|t| t.as_str() == id))
                        .collect()
                })
                .map_err(|e| e.to_string()),
            entries: clawboard_entries::list(store, &clawboard_entries::Filter::default())
                .map(|(all, _)| all.into_iter().filter(|e| names_task(e, id)).collect())
                .map_err(|e| e.to_string()),
            forked_from: clawboard_core::RelPath::new(&clawboard_core::layout::task_file(id, "task.json"))
                .ok()
                .and_then(|r| store.read::<clawboard_core::formats::Task>(&r).ok())
                .and_then(|t| t.extra.get("forked_from").cloned()),
            forks: crate::commands::fork::forks_of(store.root(), id),
        })
    }
}

/// Whether entry `e` names task `id` (`task_id` or `taskId`, in its payload or itself).
fn names_task(e: &Entry, id: &str) -> bool {
    ["task_id", "taskId"]
        .iter()
        .any(|k| [e.payload.get(*k), e.extra.get(*k)].into_iter().flatten().any(|v| v.as_str() == Some(id)))
}

fn content(p: &TaskPage) -> Markup {
    html! {
        (facts(&p.view))
        @if let Some(f) = &p.forked_from {
            @let from = f["task"].as_str().unwrap_or("?");
            p #forked-from {
                "Forked from " a href={ "/tasks/" (from) } { code { (from) } }
                " at step " code { (f["step"].as_str().unwrap_or("?")) } " (board seq " (f["seq"]) "): "
                "the runs before it are that task's, recorded, not run here."
            }
        }
        @if !p.forks.is_empty() {
            p #forks {
                "Forks of this task: "
                @for (i, f) in p.forks.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={ "/tasks/" (f) } { code { (f) } }
                }
            }
        }
        section #board {
            h2 { "Board" }
            @match &p.board {
                Err(e) => (unreadable("the board", e)),
                Ok(None) => p.empty { "This task has no board: none of its roles has a scope or a template." },
                Ok(Some(b)) => (zones(b)),
            }
        }
        section #steps {
            @match &p.attempts {
                Err(e) => { h2 { "Steps" } (unreadable("the role runs", e)) },
                Ok(runs) => (timeline(runs)),
            }
        }
        section #ledger {
            h2 { "Slice ledger" }
            @match &p.ledger {
                Err(e) => (unreadable("the slice ledger", e)),
                Ok(l) if l.is_empty() => p.empty { "No slices handed: no role of this task reads the board through a scope or a template." },
                Ok(l) => (ledger_chart(l)),
            }
        }
        (escalations(&p.escalations))
        (entries(&p.entries))
    }
}

fn facts(t: &TaskView) -> Markup {
    let dash = || "–".to_owned();
    html! {
        section #task data-id=(t.task_id) {
            h2 { "Task " code { (t.task_id) } }
            p.issue #title { (clip(&t.title, 500)) }
            dl.facts {
                dt { "Status" } dd #status class={ "status " (t.status) } { (t.status) }
                dt { "Type" } dd { (t.kind) }
                dt { "Priority" } dd { (t.priority) }
                dt { "PM" } dd { (t.pm.clone().unwrap_or_else(dash)) }
                dt { "Created" } dd { (t.created_at) }
                dt { "Completed" } dd { (t.completed_at.as_ref().map_or_else(dash, ToString::to_string)) }
                dt { "Latest step" } dd { (t.step.clone().unwrap_or_else(dash)) }
                dt { "Role runs" } dd { (t.attempts) }
                @if let (Some(i), Some(s)) = (t.iterations, t.score) {
                    dt { "Iterations" } dd { (i) ", latest score " (s) @if t.pass == Some(true) { " ✓" } }
                }
                @if let Some(s) = &t.result_summary { dt { "Result" } dd #result { (clip(s, 1000)) } }
                @for f in &t.fallbacks { dt { "Fallback" } dd.fallback { (clip(f, 1000)) } }
            }
        }
    }
}

fn zones(b: &BoardFile) -> Markup {
    html! {
        div.zones {
            @for z in Zone::ALL {
                div.zone id={ "zone-" (z.name()) } {
                    h3 { (z.name()) " zone" }
                    @if b.zone(z).is_empty() { p.empty { "empty" } }
                    dl {
                        @for (k, v) in b.zone(z) {
                            dt { (k) }
                            dd data-key={ (z.name()) "." (k) } { (value_text(v)) }
                        }
                    }
                }
            }
        }
        p.muted {
            "Board at write " (b.seq)
            @if let Some(at) = &b.updated_at { ", " (at) }
            "; its history: " code { "clawboard board history " (b.task_id.as_str()) }
        }
    }
}

/// A board value as text: a string as it is, anything else as indented JSON; cut
/// to [`MAX_VALUE`] characters.
fn value_text(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        v => serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("(not shown: {e})")),
    };
    clip(&text, MAX_VALUE).into_owned()
}

// --- the timeline -------------------------------------------------------------

/// Where a run sits among its step's runs: its loop round, candidate, redo,
/// whether it retried a failed run of its role or fell back from another role,
/// and whether it is a fork's copy of the forked task's run (`recorded`).
fn run_tags(runs: &[Attempt], i: usize) -> Vec<String> {
    let a = &runs[i];
    let mut tags = Vec::new();
    let segments: Vec<&str> = a.step.split('/').collect();
    for s in &segments {
        if let Some(n) = s.strip_prefix('r').filter(|n| is_number(n)) {
            tags.push(format!("round {n}"));
        } else if let Some(n) = s.strip_prefix("iter-").filter(|n| is_number(n)) {
            tags.push(format!("iteration {n}"));
        }
    }
    let last = segments.last().copied().unwrap_or_default();
    if let Some(n) = number_after(last, "-redo") {
        tags.push(format!("redo {n}"));
    }
    if let Some(n) = number_after(last, "-c") {
        tags.push(format!("candidate {n}"));
    }
    let earlier: Vec<&Attempt> = runs[..i].iter().filter(|b| b.step == a.step).collect();
    let retries = earlier.iter().filter(|b| b.role == a.role).count();
    if retries > 0 {
        tags.push(format!("retry {retries}"));
    }
    if let Some(first) = earlier.first().filter(|b| b.role != a.role) {
        tags.push(format!("fallback from {}", first.role));
    }
    if let Some(from) = &a.forked_from {
        tags.push(format!("recorded in {from}"));
    }
    tags
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit())
}

/// The number after the last `tag` in `s`, when digits follow it up to the end
/// or up to the next `-`.
fn number_after<'a>(s: &'a str, tag: &str) -> Option<&'a str> {
    let at = s.rfind(tag)? + tag.len();
    let rest = &s[at..];
    let n = rest.split('-').next().unwrap_or_default();
    is_number(n).then_some(n)
}

fn status_name(s: AttemptStatus) -> &'static str {
    match s {
        AttemptStatus::Running => "running",
        AttemptStatus::Ok => "ok",
        AttemptStatus::Failed => "failed",
        AttemptStatus::TimedOut => "timedout",
        AttemptStatus::Interrupted => "interrupted",
    }
}

/// The chart's geometry: a label column, then the bars.
const CHART_W: f64 = 1000.0;
const LABEL_W: f64 = 300.0;
const BARS_W: f64 = 560.0;

fn millis(t: &clawboard_core::Timestamp) -> i64 {
    t.instant().timestamp_millis()
}

fn timeline(all: &[Attempt]) -> Markup {
    let runs = &all[all.len().saturating_sub(MAX_ROWS)..];
    let now = chrono::Utc::now().timestamp_millis();
    let end_of = |a: &Attempt| a.ended_at.as_ref().map_or(now, millis);
    let t0 = runs.iter().map(|a| millis(&a.started_at)).min().unwrap_or(now);
    let t1 = runs.iter().map(end_of).max().unwrap_or(now);
    let span = (t1 - t0).max(1) as f64;
    let row = 20.0;
    let height = row * runs.len() as f64 + 28.0;
    let x = |ms: i64| LABEL_W + (ms - t0) as f64 / span * BARS_W;
    html! {
        h2 { "Steps (" (all.len()) " role runs)" }
        @if runs.is_empty() {
            p.empty { "No role has run yet." }
        } @else {
            @if all.len() > runs.len() { p.muted { "The newest " (runs.len()) " of " (all.len()) " runs." } }
            svg.chart #timeline viewBox={ "0 0 " (CHART_W) " " (height) } role="img"
                aria-label="Each role run from its start to its end" {
                @for (i, a) in runs.iter().enumerate() {
                    @let y = row * i as f64 + 4.0;
                    @let (start, end) = (millis(&a.started_at), end_of(a));
                    @let tags = run_tags(runs, i);
                    @let status = status_name(a.status);
                    g.run data-step=(a.step) data-status=(status) data-tags=(tags.join(",")) {
                        text.label x="4" y=(y + 12.0) { (clip(&format!("{} · {}", a.step, a.role), 46)) }
                        rect class={ "run-" (status) } x=(fmt(x(start))) y=(y) width=(fmt((x(end) - x(start)).max(2.0))) height="14" {
                            title { (a.step) " · " (a.role) ": " (status) ", " (end - start) " ms" @if let Some(e) = &a.error { " — " (clip(e, 300)) } }
                        }
                        text.num x=(fmt(x(end) + 4.0)) y=(y + 12.0) { (duration(end - start)) @for t in &tags { " · " (t) } }
                    }
                }
                line.axis x1=(LABEL_W) x2=(LABEL_W + BARS_W) y1=(height - 20.0) y2=(height - 20.0) {}
                text.num x=(LABEL_W) y=(height - 6.0) { "0 s" }
                text.num x=(LABEL_W + BARS_W - 40.0) y=(height - 6.0) { (duration(t1 - t0)) }
            }
            (runs_table(runs))
        }
    }
}

fn runs_table(runs: &[Attempt]) -> Markup {
    html! {
        details {
            summary { "The runs as a table" }
            table #runs {
                tr { th { "#" } th { "Step" } th { "Role" } th { "Status" } th { "Started" } th { "Took" } th { "Where it sits" } th { "Error" } }
                @for (i, a) in runs.iter().enumerate() {
                    tr {
                        td { (a.number) }
                        td { code { (a.step) } }
                        td { (a.role) }
                        td class={ "status " (status_name(a.status)) } { (status_name(a.status)) }
                        td { (a.started_at) }
                        td { (a.elapsed_ms.map_or_else(|| "–".to_owned(), |ms| duration(ms as i64))) }
                        td { (run_tags(runs, i).join(", ")) }
                        td { (clip(a.error.as_deref().unwrap_or(""), 300)) }
                    }
                }
            }
        }
    }
}

fn duration(ms: i64) -> String {
    if ms < 1000 { format!("{ms} ms") } else { format!("{:.1} s", ms as f64 / 1000.0) }
}

/// A coordinate with one decimal: enough for a chart, short in the page.
fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

// --- the ledger -----------------------------------------------------------------

/// The bars of one ledger entry: (class, what, tokens).
fn bars(e: &Handout) -> Vec<(&'static str, &'static str, u64)> {
    let mut b = vec![("bar-slice", "slice (o200k)", e.tokens)];
    if let Some(n) = e.model_tokens {
        b.push(("bar-model", "slice (the model's own tokens)", n));
    }
    if let Some(u) = e.usage {
        b.push(("bar-provider", "prompt (provider's count)", u.prompt_tokens));
    }
    if let Some(n) = e.full_tokens {
        b.push(("bar-full", "whole board (o200k)", n));
    }
    b
}

fn ledger_chart(all: &[Handout]) -> Markup {
    let entries = &all[all.len().saturating_sub(MAX_ROWS)..];
    let max =
        entries.iter().flat_map(|e| bars(e).into_iter().map(|(_, _, n)| n).chain(e.budget)).max().unwrap_or(1).max(1)
            as f64;
    let x = |n: u64| LABEL_W + n as f64 / max * BARS_W;
    let bar_h = 8.0;
    let heights: Vec<f64> = entries.iter().map(|e| bars(e).len() as f64 * (bar_h + 2.0) + 10.0).collect();
    let height: f64 = heights.iter().sum::<f64>() + 6.0;
    let mut y = 4.0;
    html! {
        (ledger_totals(all))
        p.legend {
            span { i.bar-slice {} "slice handed (o200k)" }
            span { i.bar-model {} "slice in the model's own tokens" }
            span { i.bar-provider {} "prompt tokens the provider counted" }
            span { i.bar-full {} "the whole board (what full context would send)" }
            span { i.budget {} "budget" }
        }
        svg.chart #ledger-chart viewBox={ "0 0 " (CHART_W) " " (height) } role="img"
            aria-label="Per step: the slice's tokens beside the whole board's, the provider's count and the budget" {
            @for (e, h) in entries.iter().zip(&heights) {
                @let top = { let t = y; y += h; t };
                g.step data-step=(e.step) data-n=(e.n) data-outcome=(e.outcome) {
                    text.label x="4" y=(fmt(top + 10.0)) { (clip(&format!("#{} {} · {}", e.n, e.step, e.role), 44)) }
                    @if !matches!(e.outcome.as_str(), "ok" | "handed") {
                        text.num x="4" y=(fmt(top + 22.0)) { (e.outcome) }
                    }
                    @for (k, (class, what, n)) in bars(e).into_iter().enumerate() {
                        @let by = top + k as f64 * (bar_h + 2.0);
                        rect class=(class) x=(LABEL_W) y=(fmt(by)) width=(fmt((x(n) - LABEL_W).max(1.0))) height=(bar_h) {
                            title { (what) ": " (n) " tokens" }
                        }
                        text.num x=(fmt(x(n) + 4.0)) y=(fmt(by + bar_h)) { (n) }
                    }
                    @if let Some(b) = e.budget {
                        line.budget x1=(fmt(x(b))) x2=(fmt(x(b))) y1=(fmt(top - 1.0)) y2=(fmt(top + h - 9.0)) {
                            title { "budget: " (b) " tokens" }
                        }
                    }
                }
            }
        }
        (ledger_table(entries))
    }
}

fn ledger_totals(all: &[Handout]) -> Markup {
    let t = ledger::totals(all);
    let share =
        (t.full_tokens > 0).then(|| format!(" ({:.0} %)", t.slice_tokens as f64 * 100.0 / t.full_tokens as f64));
    html! {
        p #ledger-totals {
            (t.slices) " slices handed: " b { (t.slice_tokens) } " o200k tokens, against "
            (t.full_tokens) " for the whole board each time" (share.unwrap_or_default()) "."
            @if t.model_tokens > 0 { " In the model's own tokens: " (t.model_tokens) "." }
            @if t.prompt_tokens + t.completion_tokens > 0 {
                " The provider counted " (t.prompt_tokens) " prompt + " (t.completion_tokens) " completion tokens."
            }
        }
    }
}

fn ledger_table(entries: &[Handout]) -> Markup {
    let dash = || "–".to_owned();
    html! {
        details {
            summary { "The ledger as a table (" code { "clawboard slice history" } ")" }
            table #ledger-table {
                tr { th { "#" } th { "Step" } th { "Role" } th { "Slice" } th { "Model" } th { "Budget" } th { "Board" } th { "Provider" } th { "Rungs" } th { "Missing" } th { "Outcome" } }
                @for e in entries {
                    tr data-step=(e.step) {
                        td { (e.n) }
                        td { code { (e.step) } }
                        td { (e.role) }
                        td { (e.tokens) }
                        td { (e.model_tokens.map_or_else(dash, |n| n.to_string())) }
                        td { (e.budget.map_or_else(dash, |n| n.to_string())) }
                        td { (e.full_tokens.map_or_else(dash, |n| n.to_string())) }
                        td { (e.usage.map_or_else(dash, |u| format!("{} + {}", u.prompt_tokens, u.completion_tokens))) }
                        td { (e.rungs.join(", ")) }
                        td { (e.missing.join(", ")) }
                        td { (e.outcome) }
                    }
                }
            }
        }
    }
}

// --- escalations and entries ------------------------------------------------------

fn escalations(listed: &Result<Vec<EscalationFile>, String>) -> Markup {
    html! {
        section #task-escalations {
            @match listed {
                Err(e) => { h2 { "Escalations" } (unreadable("escalations/", e)) },
                Ok(list) => {
                    h2 { "Escalations (" (list.len()) ")" }
                    @if list.is_empty() { p.empty { "None." } } @else {
                        table {
                            tr { th { "Escalation" } th { "Level" } th { "From" } th { "Issue" } th { "Decision" } th { "By" } th { "Note" } }
                            @for e in list {
                                @let x = &e.escalation;
                                tr.escalation-row data-id=(e.id) {
                                    td { code { (e.id) } }
                                    td { (x.level.as_str()) }
                                    td { (clip(&x.from, render::MAX_FROM)) }
                                    td { (clip(&x.issue, render::MAX_ISSUE)) }
                                    td { (x.decision.map_or("pending", |d| d.as_str())) }
                                    td { (x.decided_by.as_deref().unwrap_or("")) }
                                    td { (clip(x.note.as_deref().unwrap_or(""), render::MAX_SUGGESTED)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn entries(listed: &Result<Vec<Entry>, String>) -> Markup {
    html! {
        section #task-entries {
            @match listed {
                Err(e) => { h2 { "Entries" } (unreadable("entries/", e)) },
                Ok(list) => {
                    h2 { "Entries (" (list.len()) ")" }
                    @if list.is_empty() { p.empty { "None names this task (an entry does with task_id in its payload)." } } @else {
                        table {
                            tr { th { "Entry" } th { "From" } th { "To" } th { "Kind" } th { "Status" } th { "Summary" } th { "Updated" } }
                            @for e in list {
                                tr.entry-row data-id=(e.id.as_str()) {
                                    td { code { (e.id.as_str()) } }
                                    td { (e.from) }
                                    td { (e.to) }
                                    td { (e.kind) }
                                    td class={ "status " (e.status.as_str()) } { (e.status.as_str()) }
                                    td { (crate::output::truncate(super::entries::summary(e), 200)) }
                                    td { (e.updated_at.as_str()) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u32, step: &str, role: &str, status: AttemptStatus) -> Attempt {
        serde_json::from_value(serde_json::json!({
            "number": n, "step": step, "role": role, "instanceId": "i", "startedAt": "2026-11-28T10:00:00Z",
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_run_is_placed_among_its_steps_runs() {
        let runs = [
            run(1, "bp/title-c1", "title-worker", AttemptStatus::Ok),
            run(2, "bp/r2/title-redo1-c3", "title-worker", AttemptStatus::Ok),
            run(3, "bp/body", "body-worker", AttemptStatus::Failed),
            run(4, "bp/body", "body-worker", AttemptStatus::Failed),
            run(5, "bp/body", "narrative-builder", AttemptStatus::Ok),
            run(6, "iter-2/creator-code", "coder", AttemptStatus::Ok),
            run(7, "bp/reader", "reader", AttemptStatus::Ok),
        ];
        let tags = |i| run_tags(&runs, i);
        assert_eq!(tags(0), ["candidate 1"]);
        assert_eq!(tags(1), ["round 2", "redo 1", "candidate 3"]);
        assert!(tags(2).is_empty());
        assert_eq!(tags(3), ["retry 1"]);
        assert_eq!(tags(4), ["fallback from body-worker"]);
        assert_eq!(tags(5), ["iteration 2"]);
        assert!(tags(6).is_empty(), "a step named r… is no round: {:?}", tags(6));
    }

    #[test]
    fn hostile_text_reaches_the_page_escaped() {
        let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";
        let mut board = BoardFile::empty(clawboard_core::Id::new("t1").unwrap());
        board.content_zone.insert(hostile.to_owned(), Value::String(hostile.to_owned()));
        let html = zones(&board).into_string();
        assert!(!html.contains("<script>") && !html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;'&amp;"));
        let runs = [run(1, hostile, hostile, AttemptStatus::Failed)];
        let html = timeline(&runs).into_string();
        assert!(!html.contains("<script>") && !html.contains("<img"), "{html}");
    }

    #[test]
    fn the_ledger_chart_draws_each_count_of_each_step_to_one_scale() {
        let e: Handout = serde_json::from_value(serde_json::json!({
            "n": 1, "step": "bp/title", "role": "title-worker", "at": "2026-11-28T10:00:00Z", "board_seq": 3,
            "hash": "h", "tokenizer": "o200k_base", "tokens": 20, "budget": 300, "full_tokens": 400,
            "outcome": "ok", "usage": {"prompt_tokens": 90, "completion_tokens": 12}, "model_tokens": 25
        }))
        .unwrap();
        assert_eq!(bars(&e).iter().map(|b| b.2).collect::<Vec<_>>(), [20, 25, 90, 400]);
        let html = ledger_chart(&[e]).into_string();
        // The whole board is the longest bar: the full width of the bars' column.
        assert!(html.contains(&format!("width=\"{}\"", fmt(BARS_W))), "{html}");
        assert!(html.contains("<b>20</b> o200k tokens, against 400 for the whole board each time (5 %)"), "{html}");
        assert!(html.contains("90 prompt + 12 completion"), "{html}");
    }
}
