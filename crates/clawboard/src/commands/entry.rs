//! `clawboard entry`: blackboard entries (seed 004) from the command line: write,
//! list, show, move through their lifecycle, and turn into and out of the
//! GitHub-comment form.

use std::io::Read;

use clap::{Args, Subcommand};
use clawboard_core::formats::Extra;
use clawboard_core::{Id, Timestamp};
use clawboard_entries::{self as entries, Entry, EntryStatus, Filter, TargetDoc};

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output::{self, Table, truncate};

mod github;

/// Blackboard entries: addressed messages between roles (seed 004)
#[derive(Debug, Subcommand)]
#[command(after_help = "An entry is a file, entries/PROJECT/ID.json. Only its from actor, its to
actor or Human may change its status (--as says who you are); see docs/ENTRIES.md.

Examples:
  clawboard entry new --project vpm-mini --from Human --to Aya \\
      --kind doc_update_proposal_request --summary \"reflect phase 2\" --target-doc STATE/current_state.md
  clawboard entry list --to Aya --status open
  clawboard entry status vpm-mini-human-1 in_progress --as Aya
  clawboard entry render vpm-mini-human-1
  clawboard entry parse comment.md
  clawboard entry github sync")]
pub enum EntryCommand {
    New(Box<NewArgs>),
    List(ListArgs),
    Show(ShowArgs),
    Status(StatusArgs),
    Cancel(CancelArgs),
    Render(RenderArgs),
    Parse(ParseArgs),
    #[command(subcommand)]
    Github(github::GithubCommand),
}

/// Write a new entry (status open)
#[derive(Debug, Args)]
#[command(after_help = "The id is PROJECT-SOURCE-N (the next free N) unless --id gives one; SOURCE is
--source, else the writer's name in lower case.

Examples:
  clawboard entry new --project vpm-mini --from Human --to Aya --kind doc_update_proposal_request \\
      --summary \"reflect phase 2\" --target-doc STATE/current_state.md --source issue571
  clawboard entry new --file entry.json")]
pub struct NewArgs {
    /// A whole entry as JSON (a file, or - for standard input) instead of the flags
    #[arg(long, conflicts_with_all = ["project", "from", "to", "kind", "summary", "details", "refs", "task", "target_doc", "issue", "id", "source", "note"])]
    pub file: Option<String>,
    /// The project it belongs to (a key of the entry's id: PROJECT-SOURCE-N)
    #[arg(long, required_unless_present = "file")]
    pub project: Option<String>,
    /// Who writes it
    #[arg(long, required_unless_present = "file")]
    pub from: Option<String>,
    /// Who it is for
    #[arg(long, required_unless_present = "file")]
    pub to: Option<String>,
    /// Its kind (the lane's: request, proposal, review …; docs/ENTRIES.md)
    #[arg(long, required_unless_present = "file")]
    pub kind: Option<String>,
    /// payload.summary
    #[arg(long)]
    pub summary: Option<String>,
    /// payload.details, a JSON object
    #[arg(long)]
    pub details: Option<String>,
    /// payload.refs, a JSON object
    #[arg(long)]
    pub refs: Option<String>,
    /// The task it is about (payload.task_id; the task's page on the review site lists it)
    #[arg(long, value_name = "TASK_ID")]
    pub task: Option<String>,
    /// A document it is about, `PATH` or `PATH#SECTION` (repeat for several)
    #[arg(long = "target-doc")]
    pub target_doc: Vec<String>,
    /// The GitHub issue it belongs to (source_issue; the id's source defaults to issueN)
    #[arg(long)]
    pub issue: Option<u64>,
    /// Its id (default: PROJECT-SOURCE-N)
    #[arg(long)]
    pub id: Option<String>,
    /// What it came from, for the id (an issue, a run)
    #[arg(long)]
    pub source: Option<String>,
    /// A note kept with its first status (`status_history[0].note`)
    #[arg(long)]
    pub note: Option<String>,
}

/// List entries, oldest first
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard entry list
  clawboard entry list --project vpm-mini --to Aya --status open
  clawboard entry list --kind doc_update_review_request --json")]
pub struct ListArgs {
    /// Only this project's entries
    #[arg(long)]
    pub project: Option<String>,
    /// Only the entries for this actor
    #[arg(long)]
    pub to: Option<String>,
    /// Only entries of this kind
    #[arg(long)]
    pub kind: Option<String>,
    /// open, in_progress, done, error or canceled
    #[arg(long, value_parser = parse_status)]
    pub status: Option<EntryStatus>,
}

/// Show one entry as JSON
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard entry show vpm-mini-docupdate-issue571-1")]
pub struct ShowArgs {
    /// The entry's id
    pub id: String,
}

/// Move an entry to another status
#[derive(Debug, Args)]
#[command(after_help = "Allowed: open -> in_progress -> done, open -> done, open or in_progress ->
error or canceled.

Examples:
  clawboard entry status vpm-mini-docupdate-issue571-1 in_progress --as Aya
  clawboard entry status vpm-mini-docupdate-issue571-1 done --as Aya --note \"proposal written\"")]
pub struct StatusArgs {
    /// The entry's id
    pub id: String,
    /// in_progress, done, error or canceled
    #[arg(value_parser = parse_status)]
    pub status: EntryStatus,
    /// The actor making the change (its from, its to, or Human)
    #[arg(long = "as", default_value = entries::HUMAN)]
    pub actor: String,
    /// Why, kept with the change in its status history
    #[arg(long)]
    pub note: Option<String>,
}

/// Cancel an entry (status canceled)
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard entry cancel vpm-mini-docupdate-issue571-1 --note \"no longer needed\"")]
pub struct CancelArgs {
    /// The entry's id
    pub id: String,
    /// The actor canceling it (its from, its to, or Human)
    #[arg(long = "as", default_value = entries::HUMAN)]
    pub actor: String,
    /// Why, kept with the change in its status history
    #[arg(long)]
    pub note: Option<String>,
}

/// Print an entry in its GitHub-comment form
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard entry render vpm-mini-docupdate-issue571-1
  clawboard entry render vpm-mini-docupdate-issue571-1 --marker blackboard:release_v1")]
pub struct RenderArgs {
    /// The entry's id
    pub id: String,
    /// The marker of line 1 (default: the marker of the entry's lane in [lanes], else
    /// blackboard:doc_update_v1)
    #[arg(long)]
    pub marker: Option<String>,
}

/// Read an entry from a GitHub comment (a file, or - for standard input)
#[derive(Debug, Args)]
#[command(after_help = "Prints the entry as JSON; with --add, also writes it to the tree.

Examples:
  clawboard entry parse comment.md
  pbpaste | clawboard entry parse - --add")]
pub struct ParseArgs {
    /// The comment's text: a file, or - for standard input
    pub file: String,
    /// Write the entry to the tree as well
    #[arg(long)]
    pub add: bool,
}

fn parse_status(s: &str) -> Result<EntryStatus, String> {
    s.parse()
}

pub fn run(c: EntryCommand, s: &Settings) -> anyhow::Result<u8> {
    match c {
        EntryCommand::New(a) => new(*a, s),
        EntryCommand::List(a) => list(a, s),
        EntryCommand::Show(a) => show(a, s),
        EntryCommand::Status(a) => change(s, &a.id, a.status, &a.actor, a.note),
        EntryCommand::Cancel(a) => change(s, &a.id, EntryStatus::Canceled, &a.actor, a.note),
        EntryCommand::Render(a) => render(a, s),
        EntryCommand::Parse(a) => parse(a, s),
        EntryCommand::Github(c) => github::run(c, s),
    }
}

/// The text of `file`, or of standard input for `-`.
fn read_input(file: &str) -> anyhow::Result<String> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(file).map_err(|e| BadInput(format!("{file}: {e}")))?;
    }
    Ok(text)
}

fn object(flag: &str, text: &str) -> anyhow::Result<serde_json::Value> {
    use clawboard_core::json::{JsonError, parse_value};
    match parse_value(text.as_bytes()) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(BadInput(format!("--{flag}: must be a JSON object")).into()),
        Err(JsonError::Syntax(e)) => Err(BadInput(format!("--{flag}: not JSON: {e}")).into()),
        Err(dup) => Err(BadInput(format!("--{flag}: {dup}")).into()),
    }
}

fn bad_field(field: &str, value: &str, why: impl std::fmt::Display) -> anyhow::Error {
    BadInput(format!("entry field {field}: {value:?} {why}")).into()
}

/// `PATH` or `PATH#SECTION`.
fn target_doc(text: &str) -> TargetDoc {
    match text.split_once('#') {
        Some((path, section)) if !section.is_empty() => {
            TargetDoc::Section { path: path.to_owned(), section: Some(section.to_owned()), extra: Extra::new() }
        }
        _ => TargetDoc::Path(text.to_owned()),
    }
}

fn from_flags(a: NewArgs, store: &clawboard_core::Store) -> anyhow::Result<Entry> {
    let (Some(project), Some(from), Some(to), Some(kind)) = (a.project, a.from, a.to, a.kind) else {
        return Err(BadInput("--project, --from, --to and --kind are required without --file".into()).into());
    };
    let mut payload = Extra::new();
    if let Some(summary) = a.summary {
        payload.insert("summary".into(), summary.into());
    }
    for (flag, text) in [("details", a.details), ("refs", a.refs)] {
        if let Some(text) = text {
            payload.insert(flag.into(), object(flag, &text)?);
        }
    }
    if let Some(task) = a.task {
        clawboard_core::check_id(&task).map_err(|e| bad_field("task", &task, e))?;
        payload.insert("task_id".into(), task.into());
    }
    let id = match a.id {
        Some(id) => Id::new(&id).map_err(|e| bad_field("id", &id, e))?,
        None => {
            let source =
                a.source.or_else(|| a.issue.map(|n| format!("issue{n}"))).unwrap_or_else(|| from.to_lowercase());
            entries::new_id(store, &project, &source)?
        }
    };
    let project_id = Id::new(&project).map_err(|e| bad_field("project_id", &project, e))?;
    let now = Timestamp::now();
    Ok(Entry {
        id,
        from,
        to,
        project_id,
        kind,
        status: EntryStatus::Open,
        payload,
        target_docs: a.target_doc.into_iter().map(|d| target_doc(&d)).collect(),
        created_at: now.clone(),
        updated_at: now,
        source_issue: a.issue.map(entries::SourceRef::Number),
        source_comment_id: None,
        source_run_id: None,
        note: a.note,
        extra: Extra::new(),
    })
}

fn new(a: NewArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    // An id picked here (not given) moves on when another writer took it first.
    let picked = a.file.is_none() && a.id.is_none();
    let mut entry = match &a.file {
        Some(file) => {
            let text = read_input(file)?;
            let entry = clawboard_core::validate::parse::<Entry>(file, text.as_bytes(), &Default::default())?;
            // A new entry starts open, as the lifecycle has it: one written already
            // done, say, would never reach its addressee's lane.
            if entry.status != EntryStatus::Open {
                return Err(BadInput(format!(
                    "{file}: /status: a new entry starts open, not {}; write it open, then `clawboard entry status {} {}`",
                    entry.status, entry.id, entry.status
                ))
                .into());
            }
            entry
        }
        None => from_flags(a, &store)?,
    };
    let rel = if picked { entries::create_picked(&store, &mut entry)? } else { entries::create(&store, &entry)? };
    if s.json {
        output::json(&entry)?;
    } else {
        outln!("Wrote entry {} ({rel}): {} -> {}, {}.", entry.id, entry.from, entry.to, entry.kind)?;
    }
    Ok(EXIT_OK)
}

fn summary(e: &Entry) -> String {
    e.payload.get("summary").and_then(|v| v.as_str()).map_or_else(|| "-".to_owned(), |s| truncate(s, 50))
}

fn list(a: ListArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let filter = Filter { project: a.project, to: a.to, kind: a.kind, status: a.status };
    let (found, broken) = entries::list(&store, &filter)?;
    for b in &broken {
        tracing::warn!("skipping an entry that cannot be read: {b}");
    }
    if s.json {
        output::json(&found)?;
        return Ok(EXIT_OK);
    }
    if found.is_empty() {
        outln!("No entries.")?;
        return Ok(EXIT_OK);
    }
    let mut t = Table::new(&["ID", "STATUS", "FROM", "TO", "KIND", "UPDATED", "SUMMARY"]);
    for e in &found {
        t.row(vec![
            e.id.to_string(),
            e.status.to_string(),
            e.from.clone(),
            e.to.clone(),
            e.kind.clone(),
            e.updated_at.to_string(),
            summary(e),
        ]);
    }
    out!("{}", output::printable(&t.render()))?;
    Ok(EXIT_OK)
}

fn show(a: ShowArgs, s: &Settings) -> anyhow::Result<u8> {
    let (_, entry) = entries::read(&open_store(s)?, &a.id)?;
    output::json(&entry)?;
    Ok(EXIT_OK)
}

fn change(s: &Settings, id: &str, status: EntryStatus, actor: &str, note: Option<String>) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let entry = entries::set_status(&store, id, actor, status, note, chrono::Utc::now())?;
    if s.json {
        output::json(&entry)?;
    } else {
        outln!("Entry {id} is {status} (by {actor}, {}).", entry.updated_at)?;
    }
    Ok(EXIT_OK)
}

fn render(a: RenderArgs, s: &Settings) -> anyhow::Result<u8> {
    if let Some(m) = &a.marker
        && (!m.starts_with("blackboard:") || m.contains(char::is_whitespace) || m.contains("--"))
    {
        return Err(BadInput(format!("--marker {m:?}: a marker is blackboard:NAME, with no spaces or --")).into());
    }
    let (_, entry) = entries::read(&open_store(s)?, &a.id)?;
    let marker = a.marker.as_deref().unwrap_or_else(|| s.lanes.marker_of(&entry));
    out!("{}", entries::render(&entry, marker))?;
    Ok(EXIT_OK)
}

fn parse(a: ParseArgs, s: &Settings) -> anyhow::Result<u8> {
    let text = read_input(&a.file)?;
    let parsed = entries::parse(&text).map_err(|e| BadInput(format!("{}: {e}", a.file)))?;
    if a.add {
        entries::create(&open_store(s)?, &parsed.entry)?;
    }
    output::json(&parsed.entry)?;
    Ok(EXIT_OK)
}
