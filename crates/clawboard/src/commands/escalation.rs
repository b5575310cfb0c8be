use clap::{Args, Subcommand};
use clawboard_core::formats::Decision;
use clawboard_roles::escalations::{self, DecideError};

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// Decide escalations that hold tasks
#[derive(Debug, Subcommand)]
#[command(after_help = "A decision is written into escalations/ID.json and appended to
gm/decisions.md. It works whether or not the daemon runs: a running daemon
resumes (approve) or fails (reject) the held task at once, a stopped one when it
starts.

Examples:
  clawboard escalation approve 20261121T101500.123456Z-3f2a --note \"go ahead\"
  clawboard escalation reject 20261121T101500.123456Z-3f2a --note \"not in prod\"")]
pub enum EscalationCommand {
    Approve(DecideArgs),
    Reject(DecideArgs),
}

/// Approve or reject escalation ID
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard escalation approve 20261121T101500.123456Z-3f2a
  clawboard escalation reject 20261121T101500.123456Z-3f2a --note \"budget exceeded\"")]
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
        println!("{} escalation {}{task}.", if decision == Decision::Approved { "Approved" } else { "Rejected" }, a.id);
    }
    Ok(EXIT_OK)
}
