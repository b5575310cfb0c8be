//! The page's HTML: pending escalations as cards (capped per level), the newest
//! tasks, decisions and entries, and the page's style and script.

use super::*;

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

pub(super) fn task_line(t: &TaskView) -> String {
    let mut parts = vec![format!("{} · {} priority", t.status, t.priority)];
    if let Some(s) = &t.step {
        parts.push(format!("step {s}"));
    }
    if let (Some(i), Some(s)) = (t.iterations, t.score) {
        parts.push(format!("iteration {i}, score {s}"));
    }
    esc(&parts.join(" · "))
}

pub(super) fn card(w: &Web, e: &EscalationFile, now: chrono::DateTime<chrono::Utc>) -> String {
    let x = &e.escalation;
    let id = esc(&e.id);
    let age = e.raised_at().map_or_else(|| "?".to_owned(), |t| review::age(t, now));
    let mut task = String::new();
    if let Some(tid) = &x.task_id {
        match review::load_task(&w.store, tid.as_str()) {
            Ok(t) => {
                task = format!(
                    "<div class=\"task\"><div><b>Task {}</b>: {}</div><div class=\"muted\">{}</div>{}</div>",
                    esc(&t.task_id),
                    esc(&t.title),
                    task_line(&t),
                    t.result_summary
                        .as_deref()
                        .map(|s| format!(
                            "<div class=\"summary\">Latest result: {}</div>",
                            esc(&crate::output::truncate(s, 300))
                        ))
                        .unwrap_or_default()
                )
            }
            Err(err) => {
                task = format!("<div class=\"task muted\">Task {}: {}</div>", esc(tid.as_str()), esc(&err.to_string()))
            }
        }
    }
    let holds = match (x.requires_human_approval, &x.task_id) {
        (true, Some(_)) => "<span class=\"holds\">holds its task</span>",
        (true, None) => "<span class=\"holds\">needs approval</span>",
        (false, _) => "",
    };
    let suggested = x
        .suggested_action
        .as_deref()
        .map(|s| format!("<p class=\"suggested\">Suggested: {}</p>", esc(&clip(s, MAX_SUGGESTED))))
        .unwrap_or_default();
    format!(
        "<article class=\"esc {level}\" id=\"esc-{id}\" data-id=\"{id}\">\
         <div class=\"meta\"><span class=\"badge {level}\">{level}</span> <code>{id}</code> · {age} ago · from {from} {holds}</div>\
         <p class=\"issue\">{issue}</p>{suggested}{task}\
         <form method=\"post\" action=\"/escalations/{id}/approve\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <textarea name=\"note\" rows=\"2\" placeholder=\"Note (optional; a rejected task fails with it)\"></textarea>\
         <div class=\"buttons\"><button type=\"submit\" class=\"approve\" formaction=\"/escalations/{id}/approve\">Approve</button>\
         <button type=\"submit\" class=\"reject\" formaction=\"/escalations/{id}/reject\">Reject</button></div></form></article>",
        level = x.level,
        from = esc(&clip(&x.from, MAX_FROM)),
        issue = esc(&clip(&x.issue, MAX_ISSUE)),
        csrf = esc(&w.csrf),
    )
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

/// `s` cut to `max` characters, with `…` when it was cut. Line breaks stay: the
/// page shows an issue's lines.
pub(super) fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((end, _)) if s[end..].chars().nth(1).is_some() => format!("{}…", &s[..end]).into(),
        _ => s.into(),
    }
}

/// Everything under the header: pending escalations by level, recent decisions, tasks.
pub(super) fn fragment(w: &Web) -> String {
    let now = chrono::Utc::now();
    let mut o = String::new();
    let (all, bad) = review::list(&w.store, Filter::default()).unwrap_or_else(|e| {
        o.push_str(&format!("<p class=\"flash error\">Cannot read escalations/: {}</p>", esc(&e.to_string())));
        Default::default()
    });
    let pending: Vec<&EscalationFile> = all.iter().filter(|e| e.is_pending()).collect();
    o.push_str(&format!("<section id=\"escalations\"><h2>Pending escalations ({})</h2>", pending.len()));
    if pending.is_empty() {
        o.push_str("<p class=\"empty\">No pending escalations.</p>");
    }
    for level in [Level::Critical, Level::High, Level::Normal] {
        let group: Vec<&&EscalationFile> = pending.iter().filter(|e| e.escalation.level == level).collect();
        if group.is_empty() {
            continue;
        }
        o.push_str(&format!("<h3 class=\"{level}\">{} ({})</h3>", capitalized(level.as_str()), group.len()));
        for e in group.iter().take(MAX_PENDING) {
            o.push_str(&card(w, e, now));
        }
        if group.len() > MAX_PENDING {
            o.push_str(&format!(
                "<p class=\"muted more\">… and {} older {level} (clawboard escalations list --pending --level {level}).</p>",
                group.len() - MAX_PENDING
            ));
        }
    }
    if !bad.is_empty() {
        o.push_str("<details class=\"bad\"><summary>Unreadable escalation files</summary><ul>");
        for b in bad.iter().take(MAX_BAD) {
            o.push_str(&format!("<li>{}</li>", esc(&clip(&b.error, MAX_ISSUE))));
        }
        if bad.len() > MAX_BAD {
            o.push_str(&format!("<li>… and {} more (clawboard escalations list).</li>", bad.len() - MAX_BAD));
        }
        o.push_str("</ul></details>");
    }
    o.push_str("</section>");
    o.push_str(&entries::section(w));
    o.push_str("<section id=\"decided\"><h2>Recent decisions</h2>");
    let mut decided: Vec<&EscalationFile> = all.iter().filter(|e| !e.is_pending()).collect();
    decided.sort_by(|a, b| {
        b.escalation
            .decided_at
            .as_ref()
            .map(|t| t.instant())
            .cmp(&a.escalation.decided_at.as_ref().map(|t| t.instant()))
    });
    if decided.is_empty() {
        o.push_str("<p class=\"empty\">None yet.</p>");
    } else {
        o.push_str(
            "<table><tr><th>Escalation</th><th>Level</th><th>Decision</th><th>By</th><th>When</th><th>Note</th></tr>",
        );
        for e in decided.iter().take(10) {
            let x = &e.escalation;
            o.push_str(&format!(
                "<tr class=\"decided\" data-id=\"{}\"><td><code>{}</code></td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&e.id),
                esc(&e.id),
                x.level,
                x.decision.map_or("", Decision::as_str),
                x.decision.map_or("", Decision::as_str),
                esc(x.decided_by.as_deref().unwrap_or("")),
                esc(x.decided_at.as_ref().map_or("", |t| t.as_str())),
                esc(&clip(x.note.as_deref().unwrap_or(""), MAX_SUGGESTED)),
            ));
        }
        o.push_str("</table>");
    }
    o.push_str("</section><section id=\"tasks\"><h2>Tasks</h2>");
    const MAX: usize = 100;
    let (tasks, total) = review::tasks(&w.store, |_| true, MAX).unwrap_or_else(|e| {
        o.push_str(&format!("<p class=\"flash error\">Cannot read tasks/: {}</p>", esc(&e.to_string())));
        Default::default()
    });
    if tasks.is_empty() {
        o.push_str("<p class=\"empty\">No tasks.</p>");
    } else {
        o.push_str("<table><tr><th>Task</th><th>Title</th><th>Type</th><th>Status</th><th>Step</th><th>Iterations</th><th>Score</th><th>PM</th><th>Created</th></tr>");
        for t in &tasks {
            o.push_str(&format!(
                "<tr class=\"task-row\" data-id=\"{id}\"><td><code>{id}</code></td><td>{}</td><td>{}</td><td class=\"status {}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&crate::output::truncate(&t.title, 80)),
                esc(&t.kind),
                t.status,
                t.status,
                esc(t.step.as_deref().unwrap_or("–")),
                t.iterations.map_or_else(|| "–".to_owned(), |i| i.to_string()),
                t.score.map_or_else(|| "–".to_owned(), |s| format!("{s}{}", if t.pass == Some(true) { " ✓" } else { "" })),
                esc(t.pm.as_deref().unwrap_or("–")),
                t.created_at.instant().format("%Y-%m-%d %H:%M"),
                id = esc(&t.task_id),
            ));
        }
        o.push_str("</table>");
        if total > MAX {
            o.push_str(&format!("<p class=\"muted\">… and {} older (clawboard task list).</p>", total - MAX));
        }
    }
    o.push_str("</section>");
    o
}

pub(super) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

pub(super) const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2328;background:#f6f7f9}\
header{display:flex;gap:1em;align-items:baseline;padding:.6em 1.2em;background:#1d2328;color:#fff}\
header h1{font-size:1.1em;margin:0}.root{opacity:.7;font-size:.85em}.live{margin-left:auto;font-size:.8em;opacity:.8}\
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
.empty{color:#6b7580}code{font-size:.9em}";

/// Polls `/version` every 2 s; when the tree changed (or every 30 s, for the ages),
/// fetches the fragment and swaps it in unless the reviewer is typing a note.
pub(super) const SCRIPT: &str = "\
(function(){var c=document.getElementById('content'),live=document.getElementById('live'),seen=null,at=Date.now();\
function typing(){var a=document.activeElement;if(a&&a.tagName==='TEXTAREA')return true;\
var t=c.querySelectorAll('textarea');for(var i=0;i<t.length;i++){if(t[i].value)return true}return false}\
function get(u){return fetch(u,{credentials:'same-origin'}).then(function(r){if(!r.ok)throw new Error(r.status);return r.text()})}\
function poll(){get('/version').then(function(v){live.textContent='live · '+new Date().toLocaleTimeString();\
if(v===seen&&Date.now()-at<30000)return;return get('/fragment').then(function(h){\
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
