//! `clawboard role try`: one role run on its own, as the lifecycle would run it,
//! on a sample task or a context document; no daemon, no tree. It prints what the
//! role was handed, what it printed, and whether the lifecycle accepts it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use clawboard_core::formats::TaskSubmission;
use clawboard_core::validate::{self, read_limited};
use clawboard_core::{PathContext, Timestamp};
use clawboard_roles::trial::{self, Kind};
use serde_json::Value;

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::config::Settings;

/// Roles of the config, tried on their own
#[derive(Debug, Subcommand)]
#[command(after_help = "Examples:
  clawboard role try coding-pm --task config/examples/task.json")]
pub enum RoleCommand {
    Try(TryArgs),
}

/// Run ROLE once on a sample task (or a context document) and say whether its output is accepted
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard --config config/examples/local.toml role try coding-pm --task config/examples/task.json
  clawboard role try analyst --task task.json --json
  clawboard role try validator --task task.json --result result.json
  clawboard role try title-worker --context context.json   # a context as recorded, e.g. a sliced step's

Exit status: 0 the output is accepted, 1 it is not (the reason is printed), 2 bad input.")]
pub struct TryArgs {
    /// The role, as configured under [roles]
    pub role: String,
    /// A task.json, as dropped into inbox/: the role gets the context of its step for a new task
    #[arg(long, value_name = "FILE", conflicts_with = "context", required_unless_present = "context")]
    pub task: Option<PathBuf>,
    /// A whole context document, handed to the role as it is
    #[arg(long, value_name = "FILE")]
    pub context: Option<PathBuf>,
    /// The step it is tried at [default: the one the config gives it: a PM of a task type
    /// or a *-pm name → pm, [lifecycle] validator → validator, harvester → harvest, else team]
    #[arg(long = "as", value_name = "STEP", value_parser = ["pm", "team", "validator", "harvest"])]
    pub kind: Option<String>,
    /// The team's result a validator or harvester judges (JSON), with --task
    #[arg(long, value_name = "FILE", requires = "task")]
    pub result: Option<PathBuf>,
}

pub fn run(c: RoleCommand, s: &Settings) -> anyhow::Result<u8> {
    match c {
        RoleCommand::Try(a) => try_role(a, s),
    }
}

fn try_role(a: TryArgs, s: &Settings) -> anyhow::Result<u8> {
    let cfg = &s.roles;
    let Some(role) = cfg.roles.get(&a.role) else {
        let known: Vec<&str> = cfg.roles.keys().map(String::as_str).collect();
        let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
        return Err(BadInput(format!("role {:?} is not configured under [roles] (configured: {known})", a.role)).into());
    };
    let kind = match a.kind.as_deref() {
        Some("pm") => Kind::Pm,
        Some("team") => Kind::Team,
        Some("validator") => Kind::Validator,
        Some("harvest") => Kind::Harvest,
        _ => Kind::of(cfg, &a.role),
    };
    let context = match (&a.task, &a.context) {
        (_, Some(file)) => read_json(file, s.max_file_bytes)?,
        (Some(file), None) => {
            if role.is_sliced() {
                return Err(BadInput(format!(
                    "role {:?} is handed a slice of the task's board (its scope or template), not the task: try it with --context FILE, a sliced context (`clawboard slice preview` shows one)",
                    a.role
                ))
                .into());
            }
            let task = sample_task(file, s.max_file_bytes)?;
            let result = a.result.as_deref().map(|f| read_json(f, s.max_file_bytes)).transpose()?;
            trial::context_for(cfg, &a.role, kind, &task, result)
        }
        (None, None) => return Err(BadInput("give --task FILE or --context FILE".into()).into()),
    };
    // The run's CLAWBOARD_ROOT: a scratch directory, never the configured tree.
    let scratch = std::env::temp_dir().join(format!("clawboard-role-try-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let trial = runtime.block_on(trial::run(cfg, &a.role, kind, context, &scratch.to_string_lossy()));
    if let Err(e) = std::fs::remove_dir_all(&scratch) {
        tracing::warn!(dir = %scratch.display(), "cannot remove the scratch root: {e}");
    }
    let trial = trial.map_err(BadInput)?;
    report(&trial, s.json)?;
    Ok(if trial.accepted.is_some() { EXIT_OK } else { EXIT_FAILURE })
}

/// The task a sample file submits, checked as `inbox/` would check it.
fn sample_task(file: &std::path::Path, max: u64) -> anyhow::Result<clawboard_core::formats::Task> {
    let name = file.display().to_string();
    let bytes = read_limited(file, max)?;
    let submission: TaskSubmission = validate::parse(&name, &bytes, &PathContext::default())?;
    let id = submission.task_id.clone().unwrap_or_else(clawboard_core::id::new_task_id);
    Ok(submission.into_task(id, Timestamp::now(), "human"))
}

fn read_json(file: &std::path::Path, max: u64) -> anyhow::Result<Value> {
    let bytes = read_limited(file, max)?;
    serde_json::from_slice(&bytes).map_err(|e| BadInput(format!("{}: not JSON: {e}", file.display())).into())
}

fn report(t: &trial::Trial, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(t)?)?;
        return Ok(());
    }
    outln!("== handed to {} (step {})", t.role, t.kind.name())?;
    outln!("{}", serde_json::to_string_pretty(&t.context)?)?;
    let code = t.exit_code.map(|c| format!(", exit {c}")).unwrap_or_default();
    let status = serde_json::to_value(t.status)?;
    outln!("== it printed ({}{code}, {} ms)", status.as_str().unwrap_or("?"), t.elapsed_ms)?;
    let shown = match &t.stdout {
        Value::String(s) => s.clone(),
        v => serde_json::to_string_pretty(v)?,
    };
    outln!("{}", crate::output::printable(&shown))?;
    if !t.stderr.trim().is_empty() {
        outln!("== stderr\n{}", crate::output::printable(t.stderr.trim_end()))?;
    }
    match &t.refused {
        None => outln!("== accepted: the lifecycle reads it as a {} step's output", t.kind.name())?,
        Some(why) => outln!("== not accepted: {}", crate::output::printable(why))?,
    }
    Ok(())
}
