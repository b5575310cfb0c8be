use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawboard_core::formats::{Task, TaskStatus, TaskSubmission, TaskType};
use clawboard_core::summary::{Page, Query, TaskRow, TaskSummary};
use clawboard_core::validate::{self, read_limited};
use clawboard_core::{Error, Id, PathContext, RelPath, Store, Timestamp, layout};
use serde::Serialize;

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output::{self, Table, truncate};

/// Submit, list and show tasks
#[derive(Debug, Subcommand)]
#[command(after_help = "Examples:
  clawboard task submit config/examples/task.json
  clawboard task list --status running
  clawboard task show task-20260225-001
  clawboard task replay task-20260225-001
  clawboard task fork task-20260225-001 --at iter-2/validator")]
pub enum TaskCommand {
    Submit(SubmitArgs),
    List(ListArgs),
    Show(ShowArgs),
    Replay(super::replay::ReplayArgs),
    Fork(super::fork::ForkArgs),
}

/// Validate a task and write it to tasks/{taskId}/task.json
#[derive(Debug, Args)]
#[command(after_help = "taskId (task-YYYYMMDD-HHMMSS-xxxxxx), createdAt (now), createdBy (human),
priority (normal) and status (pending) are filled in when absent.

Examples:
  clawboard task submit config/examples/task.json
  echo '{\"type\":\"research\",\"description\":\"Compare X and Y\"}' | clawboard task submit -")]
pub struct SubmitArgs {
    /// The task file, or - for standard input
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
}

/// List the newest tasks (50 unless told), oldest first
#[derive(Debug, Args)]
#[command(after_help = "While a daemon runs, the list comes from its task summary (no task.json
is read); otherwise every task.json is read.

Examples:
  clawboard task list
  clawboard task list --status pending --type coding
  clawboard task list --since 2d --limit 500
  clawboard task list --since 2026-11-01 --all --json")]
pub struct ListArgs {
    /// Only tasks with this status
    #[arg(long, value_parser = parse_enum::<TaskStatus>)]
    pub status: Option<TaskStatus>,
    /// Only tasks of this type
    #[arg(long = "type", value_parser = parse_enum::<TaskType>, value_name = "TYPE")]
    pub kind: Option<TaskType>,
    /// Only tasks created since then: a time (2026-11-01, 2026-11-01T08:00:00Z) or an age (2h, 7d)
    #[arg(long, value_parser = parse_since, value_name = "WHEN")]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Show the newest N that match
    #[arg(long, default_value_t = 50, value_name = "N", conflicts_with = "all")]
    pub limit: usize,
    /// Show every task that matches
    #[arg(long)]
    pub all: bool,
}

/// `--since`: an RFC 3339 time, a date (midnight UTC), or an age before now (`2h`, `7d`).
pub fn parse_since(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    use chrono::{NaiveDate, Utc};
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map_or_else(Utc::now, |t| t.and_utc()));
    }
    let age = clawboard_core::duration::parse_duration(s)
        .map_err(|_| format!("{s:?} is not a time (2026-11-01, 2026-11-01T08:00:00Z) nor an age (2h, 7d)"))?;
    let age = chrono::Duration::from_std(age).map_err(|_| format!("{s:?} is too long ago"))?;
    Utc::now().checked_sub_signed(age).ok_or_else(|| format!("{s:?} is too long ago"))
}

/// Show one task and which of its files exist
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard task show task-20260225-001
  clawboard task show task-20260225-001 --json")]
pub struct ShowArgs {
    /// The task id
    #[arg(value_name = "ID")]
    pub id: String,
}

fn parse_enum<T: std::str::FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

pub fn run(c: TaskCommand, s: &Settings) -> anyhow::Result<u8> {
    match c {
        TaskCommand::Submit(a) => submit(a, s),
        TaskCommand::List(a) => list(a, s),
        TaskCommand::Show(a) => show(a, s),
        TaskCommand::Replay(a) => super::replay::run(a, s),
        TaskCommand::Fork(a) => super::fork::run(a, s),
    }
}

fn read_submission(file: &std::path::Path, max: u64) -> anyhow::Result<(String, Vec<u8>)> {
    if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .context("reading the task from standard input")?;
        if bytes.len() as u64 > max {
            let limit = validate::human_bytes(max);
            return Err(BadInput(format!(
                "<stdin>: /: the task is over the {limit} limit (config limits.max_file_size)"
            ))
            .into());
        }
        return Ok(("<stdin>".to_owned(), bytes));
    }
    let name = file.display().to_string();
    let bytes = read_limited(file, max)?;
    Ok((name, bytes))
}

/// Validates a submission and writes it as `tasks/{id}/task.json`; refuses a duplicate id.
pub fn submit_bytes(store: &Store, name: &str, bytes: &[u8]) -> anyhow::Result<Task> {
    let submission: TaskSubmission = validate::parse(name, bytes, &PathContext::default())?;
    let id = submission.task_id.clone().unwrap_or_else(clawboard_core::id::new_task_id);
    let task = submission.into_task(id, Timestamp::now(), "human");
    let rel = RelPath::new(&layout::task_file(task.task_id.as_str(), layout::TASK_FILE))?;
    match store.create_bytes(&rel, clawboard_core::store::to_pretty_json(&task).as_bytes()) {
        Ok(()) => Ok(task),
        Err(Error::AlreadyExists { .. }) => Err(BadInput(format!(
            "{name}: /taskId: task {:?} already exists ({rel}); remove taskId to get a new one",
            task.task_id.as_str()
        ))
        .into()),
        Err(e) => Err(e.into()),
    }
}

fn submit(a: SubmitArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let (name, bytes) = read_submission(&a.file, s.max_file_bytes)?;
    let task = submit_bytes(&store, &name, &bytes)?;
    if s.json {
        output::json(&task)?;
    } else {
        outln!("Submitted {} → {}", task.task_id, layout::task_file(task.task_id.as_str(), layout::TASK_FILE))?;
    }
    Ok(EXIT_OK)
}

/// All readable tasks matching the filters, oldest first; unreadable ones are warned about.
pub fn load_tasks(store: &Store, status: Option<TaskStatus>, kind: Option<TaskType>) -> anyhow::Result<Vec<Task>> {
    let mut tasks = Vec::new();
    for (dir, task) in store.tasks()? {
        match task {
            Ok(t) => tasks.push(t),
            Err(e) => tracing::warn!(task = %dir, "skipping a task that cannot be read: {e}"),
        }
    }
    tasks.retain(|t| status.is_none_or(|s| t.status == s) && kind.is_none_or(|k| t.kind == k));
    tasks.sort_by(|a, b| a.created_at.instant().cmp(&b.created_at.instant()).then_with(|| a.task_id.cmp(&b.task_id)));
    Ok(tasks)
}

/// The running daemon's task summary, if a daemon holds the root (it journals
/// every change, so the summary is exact); `None` otherwise.
pub fn daemon_summary(root: &std::path::Path) -> Option<TaskSummary> {
    if !crate::local::daemon_holds(root) {
        return None;
    }
    let state = root.join(layout::STATE);
    match TaskSummary::load(root, &state, &root.join(layout::JOURNAL)) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("the daemon's task summary does not read ({e}); reading every task instead");
            None
        }
    }
}

/// The page the running daemon answers from its summary in memory (`/v1/tasks`), if one answers.
fn daemon_page(root: &std::path::Path, q: &Query) -> Option<Page> {
    let mut path = format!("/v1/tasks?limit={}", q.limit.unwrap_or(0));
    if let Some(s) = q.status {
        path.push_str(&format!("&status={s}"));
    }
    if let Some(k) = q.kind {
        path.push_str(&format!("&type={k}"));
    }
    if let Some(t) = q.since {
        path.push_str(&format!("&since={}", t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
    }
    let v = crate::local::get_json(root, &path)?;
    let tasks: Vec<TaskRow> = serde_json::from_value(v["tasks"].clone()).ok()?;
    let total = usize::try_from(v["total"].as_u64()?).ok()?;
    Some(Page { tasks, total })
}

fn list(a: ListArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let query = Query { status: a.status, kind: a.kind, since: a.since, limit: (!a.all).then_some(a.limit) };
    // The daemon's summary in memory, else its snapshot and journal, else every task.json.
    let page = match daemon_page(store.root(), &query) {
        Some(page) => page,
        None => match daemon_summary(store.root()) {
            Some(summary) => query.page(summary.rows()),
            None => {
                let rows: Vec<TaskRow> = load_tasks(&store, None, None)?.iter().map(TaskRow::of).collect();
                query.page(rows.iter())
            }
        },
    };
    if s.json {
        output::json(&page.tasks)?;
        return Ok(EXIT_OK);
    }
    if page.tasks.is_empty() {
        outln!("No tasks.")?;
        return Ok(EXIT_OK);
    }
    let mut t = Table::new(&["ID", "STATUS", "TYPE", "PRIORITY", "CREATED", "DESCRIPTION"]);
    for task in &page.tasks {
        t.row(vec![
            task.task_id.clone(),
            task.status.to_string(),
            task.kind.to_string(),
            task.priority.to_string(),
            task.created_at.instant().format("%Y-%m-%d %H:%M").to_string(),
            truncate(&task.description, 60),
        ]);
    }
    out!("{}", t.render())?;
    if page.tasks.len() < page.total {
        outln!(
            "The newest {} of {} tasks; --limit N or --all for more, --since to start later.",
            page.tasks.len(),
            page.total
        )?;
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct Shown {
    task: Task,
    /// The task's files that exist, in lifecycle order.
    files: Vec<String>,
    escalations: usize,
}

fn show(a: ShowArgs, s: &Settings) -> anyhow::Result<u8> {
    let id = Id::new(a.id.clone()).map_err(|e| BadInput(format!("task id {:?} {e}", a.id)))?;
    let store = open_store(s)?;
    let rel = RelPath::new(&layout::task_file(id.as_str(), layout::TASK_FILE))?;
    let task: Task = match store.read(&rel) {
        Err(Error::NotFound { .. }) => {
            return Err(BadInput(format!("no task {id} (looked for {rel})")).into());
        }
        other => other?,
    };
    let mut files = Vec::new();
    for f in layout::TASK_FILES {
        let rel = RelPath::new(&layout::task_file(id.as_str(), f))?;
        if store.exists(&rel) {
            files.push(f.to_string());
        }
    }
    let esc_dir = store.root().join(layout::task_file(id.as_str(), "escalations"));
    let escalations = std::fs::read_dir(&esc_dir)
        .map(|d| d.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "json")).count())
        .unwrap_or(0);
    let shown = Shown { task, files, escalations };
    if s.json {
        output::json(&shown)?;
        return Ok(EXIT_OK);
    }
    let t = &shown.task;
    outln!("{}  {}", t.task_id, t.status)?;
    outln!("  type:        {}", t.kind)?;
    outln!("  priority:    {}", t.priority)?;
    outln!("  created:     {} by {}", t.created_at, t.created_by)?;
    if let Some(d) = &t.deadline {
        outln!("  deadline:    {d}")?;
    }
    if let Some(pm) = &t.assigned_pm {
        outln!("  assignedPM:  {pm}")?;
    }
    if let Some(c) = &t.completed_at {
        outln!("  completed:   {c}")?;
    }
    if let Some(f) = t.extra.get("forked_from") {
        let attempts = clawboard_records::attempts::load(&store, id.as_str())?;
        let copied = attempts.iter().filter(|a| a.forked_from.is_some()).count();
        outln!(
            "  forked from: {} at step {} (board seq {}); {copied} attempts recorded there, {} run here",
            f["task"].as_str().unwrap_or("?"),
            f["step"].as_str().unwrap_or("?"),
            f["seq"],
            attempts.len() - copied
        )?;
    }
    outln!("  files:       {}", shown.files.join(", "))?;
    if shown.escalations > 0 {
        outln!("  escalations: {}", shown.escalations)?;
    }
    outln!("  description: {}", t.description)?;
    Ok(EXIT_OK)
}
