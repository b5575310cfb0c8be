use clap::{Args, Subcommand};
use clawboard_core::Error;
use clawboard_core::formats::{Decision, Level};
use clawboard_records::escalations::{self, DecideError};
use clawboard_records::review::{self, Filter};
use serde::Serialize;

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output::{self, Table, truncate};

/// Review escalations: list, show, approve, reject
#[derive(Debug, Subcommand)]
#[command(after_help = "A decision is written into escalations/ID.json and appended to
gm/decisions.md. It works whether or not the daemon runs: a running daemon
resumes (approve) or fails (reject) the held task at once, a stopped one when it
starts. `escalation` is accepted as well as `escalations`.

Examples:
  clawboard escalations list --pending
  clawboard escalations show 20261121T101500.123456Z-3f2a
  clawboard escalations approve 20261121T101500.123456Z-3f2a --note \"go ahead\"
  clawboard escalations reject 20261121T101500.123456Z-3f2a --note \"not in prod\"")]
pub enum EscalationCommand {
    List(ListArgs),
    Show(ShowArgs),
    Approve(DecideArgs),
    Reject(DecideArgs),
}

/// List escalations, newest first
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard escalations list
  clawboard escalations list --pending --level critical
  clawboard escalations list --json")]
pub struct ListArgs {
    /// Only this level (critical, high, normal)
    #[arg(long, value_parser = parse_level)]
    pub level: Option<Level>,
    /// Only escalations nobody decided yet
    #[arg(long)]
    pub pending: bool,
}

/// Show one escalation with its task's context
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard escalations show 20261121T101500.123456Z-3f2a
  clawboard escalations show 20261121T101500.123456Z-3f2a --json")]
pub struct ShowArgs {
    /// The escalation id (its file name in escalations/, without .json)
    pub id: String,
}

fn parse_level(s: &str) -> Result<Level, String> {
    s.parse()
}

/// Approve or reject escalation ID
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard escalations approve 20261121T101500.123456Z-3f2a
  clawboard escalations reject 20261121T101500.123456Z-3f2a --note \"budget exceeded\"")]
pub struct DecideArgs {
    /// The escalation id (its file name in escalations/, without .json)
    pub id: String,
    /// Why; a rejected task fails with this as the reason
    #[arg(long)]
    pub note: Option<String>,
    /// Who decides (recorded as decidedBy)
    #[arg(long, default_value = "human")]
    pub by: String,
}

pub fn run(c: EscalationCommand, s: &Settings) -> anyhow::Result<u8> {
    let (decision, a) = match c {
        EscalationCommand::List(a) => return list(a, s),
        EscalationCommand::Show(a) => return show(a, s),
        EscalationCommand::Approve(a) => (Decision::Approved, a),
        EscalationCommand::Reject(a) => (Decision::Rejected, a),
    };
    let store = open_store(s)?;
    let esc = match escalations::decide(&store, &a.id, decision, &a.by, a.note.as_deref()) {
        Ok(e) => e,
        Err(DecideError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(BadInput(e.to_string()).into()),
    };
    if s.json {
        output::json(&esc)?;
    } else {
        let task = esc.task_id.as_ref().map_or(String::new(), |t| format!(" (task {t})"));
        outln!("{} escalation {}{task}.", if decision == Decision::Approved { "Approved" } else { "Rejected" }, a.id)?;
    }
    Ok(EXIT_OK)
}

fn list(a: ListArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let (entries, bad) = review::list(&store, Filter { level: a.level, pending_only: a.pending })?;
    for b in &bad {
        tracing::warn!("skipping an escalation that cannot be read: {}", b.error);
    }
    if s.json {
        output::json(&entries)?;
        return Ok(EXIT_OK);
    }
    if entries.is_empty() {
        outln!("{}", if a.pending { "No pending escalations." } else { "No escalations." })?;
        return Ok(EXIT_OK);
    }
    let now = chrono::Utc::now();
    let mut t = Table::new(&["ID", "AGE", "LEVEL", "STATE", "FROM", "TASK", "ISSUE"]);
    for e in &entries {
        let esc = &e.escalation;
        let state = match (esc.decision, esc.requires_human_approval, &esc.task_id) {
            (Some(d), _, _) => d.to_string(),
            (None, true, Some(_)) => "pending (holds task)".to_owned(),
            // An entry's run, or a person's: nothing waits on it.
            (None, true, None) => "pending (approval)".to_owned(),
            (None, false, _) => "pending".to_owned(),
        };
        t.row(vec![
            e.id.clone(),
            e.raised_at().map_or_else(|| "-".to_owned(), |at| review::age(at, now)),
            esc.level.to_string(),
            state,
            esc.from.clone(),
            esc.task_id.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string),
            truncate(&esc.issue, 60),
        ]);
    }
    out!("{}", output::printable(&t.render()))?;
    Ok(EXIT_OK)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    #[serde(flatten)]
    entry: review::EscalationFile,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<review::TaskView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_error: Option<String>,
}

fn show(a: ShowArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let escalation = match escalations::load(&store, &a.id) {
        Err(Error::NotFound { .. }) => {
            return Err(BadInput(format!("no escalation {0} (looked for escalations/{0}.json)", a.id)).into());
        }
        other => other?,
    };
    let entry = review::EscalationFile { id: a.id.clone(), escalation };
    let (task, task_error) = match &entry.escalation.task_id {
        None => (None, None),
        Some(id) => match review::load_task(&store, id.as_str()) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let shown = Shown { entry, task, task_error };
    if s.json {
        output::json(&shown)?;
        return Ok(EXIT_OK);
    }
    out!("{}", output::printable(&render_shown(&shown, chrono::Utc::now())))?;
    Ok(EXIT_OK)
}

fn render_shown(shown: &Shown, now: chrono::DateTime<chrono::Utc>) -> String {
    use std::fmt::Write;
    let e = &shown.entry.escalation;
    let mut out = String::new();
    let raised = shown.entry.raised_at().map_or_else(
        || "-".to_owned(),
        |at| format!("{} ({} ago)", at.format("%Y-%m-%d %H:%M:%S UTC"), review::age(at, now)),
    );
    let _ = writeln!(out, "Escalation {}", shown.entry.id);
    let _ = writeln!(out, "  level:     {}", e.level);
    let _ = writeln!(out, "  from:      {}", e.from);
    let _ = writeln!(out, "  raised:    {raised}");
    let _ = writeln!(
        out,
        "  approval:  {}",
        match (e.requires_human_approval, &e.task_id) {
            (true, Some(_)) => "required (holds its task)",
            (true, None) => "required (no task waits on it)",
            (false, _) => "not required",
        }
    );
    match (e.decision, &e.decided_by, &e.decided_at) {
        (Some(d), by, at) => {
            let by = by.as_deref().unwrap_or("?");
            let at = at.as_ref().map_or("?", |t| t.as_str());
            let _ = writeln!(out, "  decision:  {d} by {by} at {at}");
            if let Some(n) = &e.note {
                let _ = writeln!(out, "  note:      {n}");
            }
        }
        (None, _, _) => {
            let _ = writeln!(out, "  decision:  pending");
        }
    }
    let _ = writeln!(out, "\nIssue:\n  {}", e.issue.replace('\n', "\n  "));
    if let Some(s) = &e.suggested_action {
        let _ = writeln!(out, "\nSuggested action:\n  {}", s.replace('\n', "\n  "));
    }
    match (&e.task_id, &shown.task, &shown.task_error) {
        (Some(_), Some(t), _) => {
            let _ = writeln!(out, "\nTask {}: {}", t.task_id, t.title);
            let _ = writeln!(out, "  status:    {} ({}, {} priority)", t.status, t.kind, t.priority);
            if let Some(step) = &t.step {
                let _ = writeln!(out, "  step:      {step} ({} role runs)", t.attempts);
            }
            if let (Some(i), Some(score)) = (t.iterations, t.score) {
                let verdict = if t.pass == Some(true) { "pass" } else { "fail" };
                let _ = writeln!(out, "  validated: iteration {i}, score {score}, {verdict}");
            }
            if let Some(sum) = &t.result_summary {
                let _ = writeln!(out, "  result:    {}", truncate(sum, 200));
            }
        }
        (Some(id), None, err) => {
            let _ = writeln!(out, "\nTask {id}: {}", err.as_deref().unwrap_or("not found"));
        }
        (None, _, _) => {}
    }
    if e.decision.is_none() {
        let id = &shown.entry.id;
        let _ = writeln!(
            out,
            "\nDecide:\n  clawboard escalations approve {id} --note \"…\"\n  clawboard escalations reject {id} --note \"…\""
        );
    }
    out
}
