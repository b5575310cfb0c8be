//! `clawboard entry github`: the GitHub bridge of entries from the command line.
//! `sync` runs it once, as the daemon's `github` job does on `github.schedule`,
//! and prints what it did.

use clap::{Args, Subcommand};
use clawboard_github::{Client, Report, bridge};

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// The GitHub bridge: entries as issue comments (docs/ENTRIES.md)
#[derive(Debug, Subcommand)]
#[command(after_help = "The issues, the repository and the token are [github] in the config; the
daemon runs the same sync on github.schedule when github.enabled is true.

Examples:
  clawboard entry github sync
  clawboard entry github sync --json")]
pub enum GithubCommand {
    Sync(SyncArgs),
}

/// Run the bridge once: import the configured issues' entry comments, post and edit the local entries' comments
#[derive(Debug, Args)]
#[command(after_help = "Reads [github] in the config (repository, issues, the token from
github.token_env or github.token_file); runs whether or not github.enabled is set
(that starts the daemon's job). A comment that is not a valid entry is reported
and skipped; a refused token, a rate limit longer than github.max_wait or a
network failure ends the run with an error (exit code 2 for the token or the
config, 1 otherwise).

Examples:
  GITHUB_TOKEN=… clawboard entry github sync
  clawboard entry github sync --json")]
pub struct SyncArgs {}

pub fn run(c: GithubCommand, s: &Settings) -> anyhow::Result<u8> {
    match c {
        GithubCommand::Sync(_) => sync(s),
    }
}

/// A configuration or token error is bad input (exit code 2); anything else a failure.
fn user_error(e: clawboard_github::Error) -> anyhow::Error {
    if e.is_config() { BadInput(e.to_string()).into() } else { e.into() }
}

fn sync(s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    if s.github.issues.is_empty() {
        return Err(BadInput("no issues to bridge: set github.issues in the config (numbers or a label)".into()).into());
    }
    let mut client = Client::new(&s.github, bridge::state_dir(store.root())).map_err(user_error)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = runtime
        .block_on(bridge::sync(&store, &s.lanes, &s.github, &mut client, chrono::Utc::now()))
        .map_err(user_error)?;
    if s.json {
        output::json(&report)?;
    } else {
        out!("{}", output::printable(&human(&report)))?;
    }
    Ok(EXIT_OK)
}

fn human(r: &Report) -> String {
    let mut out = format!("GitHub {}\n", r.summary());
    for (what, items) in [
        ("imported", &r.imported),
        ("updated from", &r.updated),
        ("posted to", &r.posted),
        ("edited on", &r.edited),
        ("recorded from", &r.recorded),
    ] {
        for i in items {
            out.push_str(&format!("  {} {what} issue #{} (comment {})\n", i.id, i.issue, i.comment));
        }
    }
    for k in &r.skipped {
        let mut at = Vec::new();
        if let Some(n) = k.issue {
            at.push(format!("issue #{n}"));
        }
        if let Some(c) = k.comment {
            at.push(format!("comment {c}"));
        }
        if let Some(e) = &k.entry {
            at.push(format!("entry {e}"));
        }
        let at = if at.is_empty() { String::new() } else { format!(" ({})", at.join(", ")) };
        out.push_str(&format!("  skipped{at}: {}\n", k.reason));
    }
    out
}
