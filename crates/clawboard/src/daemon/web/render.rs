//! The review site's HTML, rendered with maud: every value spliced into a page is
//! escaped, unless wrapped in `PreEscaped`, which only the site's own constant
//! style and script are. The home page: pending escalations as cards (capped per
//! level), entries for Human, recent decisions and the newest tasks.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::*;

/// A page of the site: the header, an optional flash, and `content`, which the
/// page's script refreshes from `content_src` whenever the tree changes.
pub(super) fn page(
    nonce: &str,
    title: &str,
    root: &str,
    flash: Option<Markup>,
    content_src: &str,
    content: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style nonce=(nonce) { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { a href="/" { "clawboard review" } }
                    span.root { (root) }
                    span #live .live { "live" }
                }
                main {
                    @if let Some(f) = flash { (f) }
                    div #content data-src=(content_src) { (content) }
                }
                script nonce=(nonce) { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

/// The page a refused request gets, saying why.
pub(super) fn refusal(nonce: &str, heading: &str, why: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "clawboard: " (heading) }
                style nonce=(nonce) { (PreEscaped(STYLE)) }
            }
            body {
                main {
                    h1 { (heading) }
                    p #refused { (why) }
                    p { "On the machine that runs the daemon, run " code { "clawboard web token" } " and open the URL it prints." }
                }
            }
        }
    }
}

/// The line at the top of the page after a form was sent.
pub(super) fn flash(text: &str, error: bool) -> Markup {
    html! { p #flash class=(if error { "flash error" } else { "flash" }) { (text) } }
}

/// A part of the page that could not be read, said in its place.
pub(super) fn unreadable(what: &str, e: &dyn std::fmt::Display) -> Markup {
    html! { p.flash.error { "Cannot read " (what) ": " (e) } }
}

/// The task page's address.
pub(super) fn task_href(id: &str) -> String {
    format!("/tasks/{}", crate::output::percent_encode(id))
}

pub(super) fn task_line(t: &TaskView) -> String {
    let mut parts = vec![format!("{} · {} priority", t.status, t.priority)];
    if let Some(s) = &t.step {
        parts.push(format!("step {s}"));
    }
    if let (Some(i), Some(s)) = (t.iterations, t.score) {
        parts.push(format!("iteration {i}, score {s}"));
    }
    parts.join(" · ")
}

fn card_task(w: &Web, tid: &str) -> Markup {
    match review::load_task(&w.store, tid) {
        Ok(t) => html! {
            div.task {
                div { b { "Task " a href=(task_href(&t.task_id)) { (t.task_id) } } ": " (t.title) }
                div.muted { (task_line(&t)) }
                @if let Some(s) = &t.result_summary {
                    div.summary { "Latest result: " (crate::output::truncate(s, 300)) }
                }
            }
        },
        Err(err) => html! { div.task.muted { "Task " (tid) ": " (err) } },
    }
}

pub(super) fn card(w: &Web, e: &EscalationFile, now: chrono::DateTime<chrono::Utc>) -> Markup {
    let x = &e.escalation;
    let age = e.raised_at().map_or_else(|| "?".to_owned(), |t| review::age(t, now));
    let holds = match (x.requires_human_approval, &x.task_id) {
        (true, Some(_)) => Some("holds its task"),
        (true, None) => Some("needs approval"),
        (false, _) => None,
    };
    let level = x.level.as_str();
    html! {
        article class={ "esc " (level) } id={ "esc-" (e.id) } data-id=(e.id) {
            div.meta {
                span class={ "badge " (level) } { (level) } " " code { (e.id) } " · " (age) " ago · from " (clip(&x.from, MAX_FROM))
                @if let Some(h) = holds { " " span.holds { (h) } }
            }
            p.issue { (clip(&x.issue, MAX_ISSUE)) }
            @if let Some(s) = &x.suggested_action { p.suggested { "Suggested: " (clip(s, MAX_SUGGESTED)) } }
            @if let Some(tid) = &x.task_id { (card_task(w, tid.as_str())) }
            form method="post" action={ "/escalations/" (e.id) "/approve" } {
                input type="hidden" name="csrf" value=(w.csrf);
                textarea name="note" rows="2" placeholder="Note (optional; a rejected task fails with it)" {}
                div.buttons {
                    button type="submit" .approve formaction={ "/escalations/" (e.id) "/approve" } { "Approve" }
                    button type="submit" .reject formaction={ "/escalations/" (e.id) "/reject" } { "Reject" }
                }
            }
        }
    }
}

/// Pending escalations shown per level, at most (newest first): a role may raise
/// any number, and the page stays small however many it raises.
pub(super) const MAX_PENDING: usize = 20;
/// Characters of an escalation's issue, suggested action and `from` shown, at most.
pub(super) const MAX_ISSUE: usize = 1000;
pub(super) const MAX_SUGGESTED: usize = 500;
pub(super) const MAX_FROM: usize = 100;
/// Unreadable escalation files named, at most.
pub(super) const MAX_BAD: usize = 20;
/// Tasks listed on the home page, at most (newest first).
const MAX_TASKS: usize = 100;

/// `s` cut to `max` characters, with `…` when it was cut. Line breaks stay: the
/// page shows an issue's lines.
pub(super) fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((end, _)) if s[end..].chars().nth(1).is_some() => format!("{}…", &s[..end]).into(),
        _ => s.into(),
    }
}

/// Everything under the home page's header: pending escalations by level, entries
/// for Human, recent decisions, tasks.
pub(super) fn fragment(w: &Web) -> Markup {
    let now = chrono::Utc::now();
    let listed = review::list(&w.store, Filter::default());
    let (all, bad) = listed.as_ref().map_or((&[][..], &[][..]), |(a, b)| (&a[..], &b[..]));
    html! {
        @if let Err(e) = &listed { (unreadable("escalations/", e)) }
        (pending(w, all, bad, now))
        (entries::section(w))
        (decided(all))
        (tasks(w))
    }
}

fn pending(w: &Web, all: &[EscalationFile], bad: &[review::Unreadable], now: chrono::DateTime<chrono::Utc>) -> Markup {
    let pending: Vec<&EscalationFile> = all.iter().filter(|e| e.is_pending()).collect();
    html! {
        section #escalations {
            h2 { "Pending escalations (" (pending.len()) ")" }
            @if pending.is_empty() { p.empty { "No pending escalations." } }
            @for level in [Level::Critical, Level::High, Level::Normal] {
                @let group: Vec<&&EscalationFile> = pending.iter().filter(|e| e.escalation.level == level).collect();
                @if !group.is_empty() {
                    h3 class=(level.as_str()) { (capitalized(level.as_str())) " (" (group.len()) ")" }
                    @for e in group.iter().take(MAX_PENDING) { (card(w, e, now)) }
                    @if group.len() > MAX_PENDING {
                        p.muted.more {
                            "… and " (group.len() - MAX_PENDING) " older " (level.as_str())
                            " (clawboard escalations list --pending --level " (level.as_str()) ")."
                        }
                    }
                }
            }
            @if !bad.is_empty() {
                details.bad {
                    summary { "Unreadable escalation files" }
                    ul {
                        @for b in bad.iter().take(MAX_BAD) { li { (clip(&b.error, MAX_ISSUE)) } }
                        @if bad.len() > MAX_BAD { li { "… and " (bad.len() - MAX_BAD) " more (clawboard escalations list)." } }
                    }
                }
            }
        }
    }
}

fn decided(all: &[EscalationFile]) -> Markup {
    let mut decided: Vec<&EscalationFile> = all.iter().filter(|e| !e.is_pending()).collect();
    decided.sort_by(|a, b| {
        b.escalation
            .decided_at
            .as_ref()
            .map(|t| t.instant())
            .cmp(&a.escalation.decided_at.as_ref().map(|t| t.instant()))
    });
    html! {
        section #decided {
            h2 { "Recent decisions" }
            @if decided.is_empty() {
                p.empty { "None yet." }
            } @else {
                table {
                    tr { th { "Escalation" } th { "Level" } th { "Decision" } th { "By" } th { "When" } th { "Note" } }
                    @for e in decided.iter().take(10) {
                        @let x = &e.escalation;
                        @let decision = x.decision.map_or("", Decision::as_str);
                        tr.decided data-id=(e.id) {
                            td { code { (e.id) } }
                            td { (x.level.as_str()) }
                            td class=(decision) { (decision) }
                            td { (x.decided_by.as_deref().unwrap_or("")) }
                            td { (x.decided_at.as_ref().map_or("", |t| t.as_str())) }
                            td { (clip(x.note.as_deref().unwrap_or(""), MAX_SUGGESTED)) }
                        }
                    }
                }
            }
        }
    }
}

/// The newest tasks, from the daemon's task summary (only they are read).
fn tasks(w: &Web) -> Markup {
    let page = clawboard_core::summary::Query { limit: Some(MAX_TASKS), ..Default::default() }
        .page(w.daemon.tasks.lock().rows());
    let views = review::task_views(&w.store, page.tasks.iter().rev().map(|r| r.task_id.as_str()));
    let listed: Result<_, clawboard_core::Error> = Ok((views, page.total));
    html! {
        section #tasks {
            h2 { "Tasks" }
            @match &listed {
                Err(e) => (unreadable("tasks/", e)),
                Ok((tasks, _)) if tasks.is_empty() => p.empty { "No tasks." },
                Ok((tasks, total)) => {
                    table {
                        tr { th { "Task" } th { "Title" } th { "Type" } th { "Status" } th { "Step" } th { "Iterations" } th { "Score" } th { "PM" } th { "Created" } }
                        @for t in tasks {
                            tr.task-row data-id=(t.task_id) {
                                td { a href=(task_href(&t.task_id)) { code { (t.task_id) } } }
                                td { (crate::output::truncate(&t.title, 80)) }
                                td { (t.kind) }
                                td class={ "status " (t.status) } { (t.status) }
                                td { (t.step.as_deref().unwrap_or("–")) }
                                td { (t.iterations.map_or_else(|| "–".to_owned(), |i| i.to_string())) }
                                td { (t.score.map_or_else(|| "–".to_owned(), |s| format!("{s}{}", if t.pass == Some(true) { " ✓" } else { "" }))) }
                                td { (t.pm.as_deref().unwrap_or("–")) }
                                td { (t.created_at.instant().format("%Y-%m-%d %H:%M")) }
                            }
                        }
                    }
                    @if *total > MAX_TASKS { p.muted { "… and " (total - MAX_TASKS) " older (clawboard task list)." } }
                }
            }
        }
    }
}

pub(super) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

pub(super) const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2328;background:#f6f7f9}\
header{display:flex;gap:1em;align-items:baseline;padding:.6em 1.2em;background:#1d2328;color:#fff}\
header h1{font-size:1.1em;margin:0}header a{color:inherit;text-decoration:none}.root{opacity:.7;font-size:.85em}.live{margin-left:auto;font-size:.8em;opacity:.8}\
main{max-width:1100px;margin:0 auto;padding:1em 1.2em}h2{font-size:1.15em;margin:1.2em 0 .4em}h3{font-size:1em;margin:.8em 0 .3em}\
article.esc{background:#fff;border:1px solid #d9dde2;border-left:5px solid #8a94a0;border-radius:6px;padding:.7em 1em;margin:.5em 0}\
article.critical{border-left-color:#c62828}article.high{border-left-color:#ef6c00}article.normal{border-left-color:#1565c0}\
.badge{display:inline-block;padding:0 .5em;border-radius:3px;color:#fff;font-size:.8em;text-transform:uppercase;background:#8a94a0}\
.badge.critical{background:#c62828}.badge.high{background:#ef6c00}.badge.normal{background:#1565c0}\
h3.critical{color:#c62828}h3.high{color:#ef6c00}h3.normal{color:#1565c0}\
.meta{font-size:.85em;color:#56606b}.holds{color:#c62828;font-weight:600}.issue{font-size:1.05em;white-space:pre-wrap;margin:.4em 0}\
.task{background:#f2f4f6;border-radius:4px;padding:.4em .6em;margin:.4em 0;font-size:.9em}.muted{color:#6b7580}\
textarea{width:100%;box-sizing:border-box;font:inherit;margin:.3em 0}\
button{font:inherit;padding:.3em 1.1em;border-radius:4px;border:1px solid transparent;cursor:pointer;margin-right:.5em}\
.approve{background:#2e7d32;color:#fff}.reject{background:#fff;color:#c62828;border-color:#c62828}\
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9em}th,td{text-align:left;padding:.3em .5em;border-bottom:1px solid #e4e7eb}\
.status.completed,.approved{color:#2e7d32}.status.failed,.rejected{color:#c62828}.status.running{color:#ef6c00}\
.flash{background:#e8f5e9;border:1px solid #a5d6a7;padding:.5em .8em;border-radius:4px}.flash.error{background:#ffebee;border-color:#ef9a9a}\
.empty{color:#6b7580}code{font-size:.9em}\
.zones{display:grid;grid-template-columns:repeat(3,1fr);gap:.8em}.zone{background:#fff;border:1px solid #d9dde2;border-radius:6px;padding:.4em .8em;min-width:0}\
.zone h3{margin:.2em 0 .4em}.zone dt{font-weight:600;font-size:.85em;color:#3d4852;margin-top:.4em}\
.zone dd{margin:0;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere;max-height:12em;overflow:auto}\
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;background:#fff;padding:.6em 1em;border-radius:6px;border:1px solid #d9dde2}\
dl.facts dt{color:#56606b}dl.facts dd{margin:0}\
svg.chart{width:100%;height:auto;background:#fff;border:1px solid #d9dde2;border-radius:6px;font:11px system-ui,sans-serif}\
svg .label{fill:#1d2328}svg .num{fill:#3d4852}svg .axis{stroke:#c4cad1}\
.bar-slice{fill:#1565c0}.bar-full{fill:#c4cad1}.bar-provider{fill:#ef6c00}.bar-model{fill:#6a1b9a}.budget{stroke:#c62828;stroke-width:2}\
.run-ok{fill:#2e7d32}.run-failed,.run-timedout{fill:#c62828}.run-running{fill:#ef6c00}.run-interrupted{fill:#8a94a0}\
.legend span{display:inline-block;margin-right:1.2em;font-size:.85em}.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}\
.legend i.bar-slice{background:#1565c0}.legend i.bar-full{background:#c4cad1}.legend i.bar-provider{background:#ef6c00}.legend i.bar-model{background:#6a1b9a}.legend i.budget{background:#c62828;width:.2em}\
.tag{display:inline-block;font-size:.75em;padding:0 .4em;border-radius:3px;background:#e3e7ec;margin-right:.3em}\
@media (max-width:800px){.zones{grid-template-columns:1fr}}";

/// Polls `/version` every 2 s; when the tree changed (or every 30 s, for the ages),
/// fetches the content's fragment (its `data-src`) and swaps it in unless the
/// reviewer is typing a note.
pub(super) const SCRIPT: &str = "\
(function(){var c=document.getElementById('content'),live=document.getElementById('live'),seen=null,at=Date.now();\
function typing(){var a=document.activeElement;if(a&&a.tagName==='TEXTAREA')return true;\
var t=c.querySelectorAll('textarea');for(var i=0;i<t.length;i++){if(t[i].value)return true}return false}\
function get(u){return fetch(u,{credentials:'same-origin'}).then(function(r){if(!r.ok)throw new Error(r.status);return r.text()})}\
function poll(){get('/version').then(function(v){live.textContent='live · '+new Date().toLocaleTimeString();\
if(v===seen&&Date.now()-at<30000)return;return get(c.dataset.src).then(function(h){\
if(typing())return;seen=v;at=Date.now();if(h!==c.innerHTML)c.innerHTML=h})})\
.catch(function(e){live.textContent='offline ('+e.message+')'})}poll();setInterval(poll,2000)})();";

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn long_text_is_cut_with_an_ellipsis() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(clip("任务描述任务", 5), "任务描述…");
        assert_eq!(clip("a\nb\nc", 10), "a\nb\nc");
        assert_eq!(clip("", 3), "");
    }
}
