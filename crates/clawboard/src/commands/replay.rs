//! `clawboard task replay`: a recorded task run again in a scratch tree, every role
//! call answered from its recorded attempt, and what each step would be handed now
//! compared with what it was handed then.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use clawboard_core::formats::{Task, TaskStatus};
use clawboard_core::{Error, Id, RelPath, Store, layout};
use clawboard_records::attempts::AttemptStatus;
use clawboard_roles::replay::{self, BoardDifference, Recording, StepReport, Verdict};
use clawboard_roles::{Engine, Outcome, Shutdown};
use serde::Serialize;

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// Run a recorded task again with its recorded replies, and say which steps would now be handed something else
#[derive(Debug, Args)]
#[command(after_help = "The replay runs in a scratch tree (removed after; --into keeps it): the
original task's files are only read. Each role call is answered from the attempt the
recorded run made for the same step and role (its reply, exit status, usage and
duration): no role process starts, and no model, HTTP role, GitHub, notification or
archive is reached. Each step is reported as:
  same            handed what it was handed then
  input differs   handed something else now (a diff: - then, + now)
  input not kept  answered as then; its input was recorded before inputs were kept
  copied          a fork's step copied from the task it was forked from
  not recorded    the recorded run never reached the step: the replay stops there
                  (--live: the real role runs it)
  cut short       the recorded attempt was cut short by a crash and never ran again
The boards are then compared path by path, and the outcome with the recorded one.
Run it under an edited config (--config) to see which steps a change of a prompt,
template, scope, blueprint or budget reaches, for no tokens.
Exit status 0 when everything is the same, 1 on a difference, 2 on bad input.

Examples:
  clawboard task replay task-20261207-101500-a1b2c3
  clawboard --config edited.toml task replay task-20261207-101500-a1b2c3
  clawboard task replay task-20261207-101500-a1b2c3 --into /tmp/replayed --json
  clawboard --config edited.toml task replay --all --since 7d")]
pub struct ReplayArgs {
    /// The recorded task's id
    #[arg(value_name = "ID", required_unless_present = "all")]
    pub id: Option<String>,
    /// Replay every finished task (created since --since, if given)
    #[arg(long, conflicts_with_all = ["id", "into", "live"])]
    pub all: bool,
    /// With --all: only tasks created since then (2026-11-01, or an age: 7d)
    #[arg(long, requires = "all", value_parser = super::task::parse_since, value_name = "WHEN")]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Keep the replayed tree in DIR (new or empty) instead of removing it
    #[arg(long, value_name = "DIR")]
    pub into: Option<PathBuf>,
    /// Run the steps the recording never reached with the real roles
    #[arg(long)]
    pub live: bool,
}

/// One task's replay.
#[derive(Debug, Serialize)]
pub struct Replayed {
    pub task: String,
    /// How the recorded run ended, and how the replay did.
    pub then: String,
    pub now: String,
    pub steps: Vec<StepReport>,
    /// Recorded steps the replay never asked for (it ended, or went elsewhere, first).
    pub not_reached: Vec<String>,
    pub board: Vec<BoardDifference>,
    pub elapsed_ms: u64,
    /// What the recorded role runs took, answered here from their records.
    pub recorded_ms: u64,
    /// Role processes started and requests sent (zero unless --live).
    pub live_steps: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<PathBuf>,
}

impl Replayed {
    pub fn same(&self) -> bool {
        self.then == self.now
            && self.not_reached.is_empty()
            && self.board.is_empty()
            && self.steps.iter().all(|s| !s.verdict.differs())
    }
}

pub fn run(a: ReplayArgs, s: &Settings) -> anyhow::Result<u8> {
    clawboard_board::tokens::bpe();
    let store = open_store(s)?;
    if a.all {
        return all(&store, s, a.since);
    }
    let raw = a.id.unwrap_or_default();
    let id = Id::new(raw.clone()).map_err(|e| BadInput(format!("task id {raw:?} {e}")))?;
    let r = replay_task(&store, s, id.as_str(), a.into.as_deref(), a.live)?;
    if s.json {
        output::json(&r)?;
    } else {
        print(&r)?;
    }
    Ok(if r.same() { EXIT_OK } else { EXIT_FAILURE })
}

/// The recorded task `id` of `store`, checked for a replay.
fn recorded_task(store: &Store, s: &Settings, id: &str) -> anyhow::Result<Task> {
    let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE))?;
    let task: Task = match store.read(&rel) {
        Err(Error::NotFound { .. }) => return Err(BadInput(format!("no task {id} (looked for {rel})")).into()),
        other => other?,
    };
    if let Some(bp) = task.extra.get("blueprint_id").and_then(|v| v.as_str())
        && s.blueprints.get(bp).is_err()
    {
        return Err(BadInput(format!(
            "{rel}: /blueprint_id: blueprint {bp:?} is not in this config (its blueprints: {})",
            s.blueprints.ids().join(", ")
        ))
        .into());
    }
    Ok(task)
}

/// Replays task `id` of `store` in a scratch tree (`into`, else a temporary one).
pub fn replay_task(store: &Store, s: &Settings, id: &str, into: Option<&Path>, live: bool) -> anyhow::Result<Replayed> {
    let task = recorded_task(store, s, id)?;
    let recording = Arc::new(Recording::load(store, id, live)?);
    let scratch = Scratch::new(into, store.root())?;
    let (copy, _) = Store::init(scratch.path())?;
    seed(store, &copy, &task, &recording)?;
    let (config, _) = crate::config::engine::build(s)?;
    let engine = Engine::new(copy.clone(), config, Shutdown::never()).replaying(recording.clone());
    // A replay is a trace of its own, linked to the original's.
    crate::telemetry::install(s.telemetry.as_ref(), store.root(), s.node_id.as_deref())?;
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = runtime.block_on(engine.drive(id))?;
    copy.settle();
    crate::telemetry::flush(crate::telemetry::FLUSH_AT_EXIT);
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let steps = recording.steps();
    let not_reached =
        recording.unused().iter().map(|a| format!("{} ({}, attempt {})", a.step, a.role, a.number)).collect();
    let board = replay::compare_boards(store, &copy, id)?;
    let recorded_ms = steps.iter().filter_map(|s| s.recorded_ms).sum();
    let live_steps = steps.iter().filter(|s| s.verdict == Verdict::Live).count();
    Ok(Replayed {
        task: id.to_owned(),
        then: ended(&task, store, id),
        now: match outcome {
            Outcome::Completed => "completed".into(),
            Outcome::Failed(_) => "failed".into(),
            Outcome::Held(ids) => format!("held on {}", ids.join(", ")),
            Outcome::Stopped | Outcome::Fenced => "stopped".into(),
        },
        steps,
        not_reached,
        board,
        elapsed_ms,
        recorded_ms,
        live_steps,
        tree: scratch.kept(),
    })
}

/// How the recorded task stands: `completed`, `failed`, or held / running.
fn ended(task: &Task, store: &Store, id: &str) -> String {
    match task.status {
        TaskStatus::Completed => "completed".into(),
        TaskStatus::Failed => "failed".into(),
        _ => {
            let attempts = clawboard_records::attempts::load(store, id).unwrap_or_default();
            let raised: Vec<String> = attempts.iter().flat_map(|a| a.escalations.clone()).collect();
            let open: Vec<String> = raised
                .into_iter()
                .filter(|e| clawboard_records::escalations::load(store, e).is_ok_and(|x| x.decision.is_none()))
                .collect();
            if open.is_empty() { "stopped".into() } else { format!("held on {}", open.join(", ")) }
        }
    }
}

/// The scratch tree gets the task as it was submitted, and the recorded decisions
/// on the escalations its attempts raised.
fn seed(original: &Store, copy: &Store, task: &Task, recording: &Recording) -> anyhow::Result<()> {
    let id = task.task_id.as_str();
    let mut fresh = task.clone();
    fresh.status = TaskStatus::Pending;
    fresh.completed_at = None;
    clawboard_roles::claims::claim(copy, id)?;
    let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE))?;
    copy.create_bytes(&rel, clawboard_core::store::to_pretty_json(&fresh).as_bytes())?;
    for esc in recording.attempts().iter().flat_map(|r| r.attempt.escalations.iter()) {
        let rel = RelPath::new(&format!("{}/{esc}.json", layout::ESCALATIONS))?;
        match original.read_bytes(&rel) {
            Ok(bytes) => copy.write_bytes(&rel, &bytes)?,
            Err(Error::NotFound { .. }) => {
                tracing::warn!(escalation = %esc, "a recorded escalation's file is gone; the replay waits on it")
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Where a replay runs: a directory of the caller's (kept), or a temporary one.
enum Scratch {
    Kept(PathBuf),
    Temporary(tempfile::TempDir),
}

impl Scratch {
    fn new(into: Option<&Path>, original: &Path) -> anyhow::Result<Scratch> {
        let Some(dir) = into else {
            return Ok(Scratch::Temporary(tempfile::Builder::new().prefix("clawboard-replay-").tempdir()?));
        };
        let shown = dir.display();
        let original = original.canonicalize()?;
        if overlaps(dir, &original)? {
            return Err(BadInput(format!(
                "--into {shown}: inside the recorded tree ({}) or holding it",
                original.display()
            ))
            .into());
        }
        match std::fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
            Ok(true) => {
                Err(BadInput(format!("--into {shown}: not empty (a replay goes into a new or empty directory)")).into())
            }
            Ok(false) => Ok(Scratch::Kept(dir.to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(|e| BadInput(format!("--into {shown}: {e}")))?;
                Ok(Scratch::Kept(dir.to_owned()))
            }
            Err(e) => Err(BadInput(format!("--into {shown}: {e}")).into()),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Scratch::Kept(p) => p,
            Scratch::Temporary(t) => t.path(),
        }
    }

    fn kept(&self) -> Option<PathBuf> {
        match self {
            Scratch::Kept(p) => Some(p.clone()),
            Scratch::Temporary(_) => None,
        }
    }
}

/// Whether `dir` (which may not exist yet) is inside `original` (canonical) or holds it.
fn overlaps(dir: &Path, original: &Path) -> anyhow::Result<bool> {
    let abs = std::path::absolute(dir)?;
    // The deepest part of it that exists, resolved (links included), then the rest.
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let Some(parent) = existing.parent() else { break };
        rest.push(existing.file_name().unwrap_or_default().to_owned());
        existing = parent;
    }
    let mut resolved = existing.canonicalize().unwrap_or_else(|_| existing.to_owned());
    for part in rest.iter().rev() {
        resolved.push(part);
    }
    Ok(resolved.starts_with(original) || original.starts_with(&resolved))
}

fn print(r: &Replayed) -> anyhow::Result<()> {
    let roles_run =
        if r.live_steps == 0 { "no role run".to_owned() } else { format!("{} steps run live", r.live_steps) };
    outln!("replay of {}: {} ms ({roles_run}; the recorded runs took {} ms)", r.task, r.elapsed_ms, r.recorded_ms)?;
    for s in &r.steps {
        let status = s.status.map(status_name).unwrap_or("-");
        let n = s.recorded.map_or_else(|| "-".to_owned(), |n| format!("#{n}"));
        outln!("  {:<22} {:<18} {:>5} {:<9} {}", s.step, s.role, n, status, s.verdict.name())?;
        if let Some(d) = &s.diff {
            for line in d.lines() {
                outln!("      {line}")?;
            }
        }
    }
    for step in &r.not_reached {
        outln!("  not reached: {step}")?;
    }
    if r.board.is_empty() {
        outln!("board: the same, path by path")?;
    } else {
        outln!("board: {} paths written differently:", r.board.len())?;
        for d in &r.board {
            outln!("  {} (by {}): then {} writes, now {}", d.path, d.writers.join(", "), d.then.len(), d.now.len())?;
        }
    }
    let verdict = if r.then == r.now { "as recorded" } else { "differs" };
    outln!("outcome: {} (recorded: {}) — {verdict}", r.now, r.then)?;
    if let Some(t) = &r.tree {
        outln!("the replayed tree: {}", t.display())?;
    }
    Ok(())
}

fn status_name(s: AttemptStatus) -> &'static str {
    match s {
        AttemptStatus::Ok => "ok",
        AttemptStatus::Failed => "failed",
        AttemptStatus::TimedOut => "timed_out",
        AttemptStatus::Interrupted => "interrupted",
        AttemptStatus::Running => "running",
    }
}

/// Every finished task (since `since`) replayed; which steps changed, summed up.
fn all(store: &Store, s: &Settings, since: Option<chrono::DateTime<chrono::Utc>>) -> anyhow::Result<u8> {
    let tasks = super::task::load_tasks(store, None, None)?;
    let finished = tasks.into_iter().filter(|t| matches!(t.status, TaskStatus::Completed | TaskStatus::Failed));
    let chosen: Vec<Task> = finished.filter(|t| since.is_none_or(|at| t.created_at.instant() >= at)).collect();
    let mut results = Vec::new();
    let mut changed: std::collections::BTreeMap<String, usize> = Default::default();
    for t in &chosen {
        let id = t.task_id.as_str();
        match replay_task(store, s, id, None, false) {
            Ok(r) => {
                for step in r.steps.iter().filter(|x| x.verdict.differs()) {
                    *changed.entry(format!("{} ({})", generic(&step.step), step.verdict.name())).or_default() += 1;
                }
                results.push(serde_json::json!({"task": id, "same": r.same(), "then": r.then, "now": r.now,
                    "differing_steps": r.steps.iter().filter(|x| x.verdict.differs()).map(|x| &x.step).collect::<Vec<_>>(),
                    "board_paths": r.board.len()}));
            }
            Err(e) => results.push(serde_json::json!({"task": id, "error": format!("{e:#}")})),
        }
    }
    let differ = results.iter().filter(|r| r["same"] != true).count();
    if s.json {
        output::json(&serde_json::json!({"tasks": results, "differ": differ, "steps_changed": changed}))?;
    } else {
        for r in &results {
            let line = match (&r["error"], r["same"] == true) {
                (serde_json::Value::String(e), _) => format!("cannot replay: {e}"),
                (_, true) => "same".to_owned(),
                _ => format!(
                    "differs: steps {}; {} board paths; {} (recorded {})",
                    r["differing_steps"],
                    r["board_paths"],
                    r["now"].as_str().unwrap_or("?"),
                    r["then"].as_str().unwrap_or("?")
                ),
            };
            outln!("{}  {line}", r["task"].as_str().unwrap_or("?"))?;
        }
        outln!("{} tasks replayed, {} the same, {differ} differ", results.len(), results.len() - differ)?;
        for (step, n) in &changed {
            outln!("  {step}: {n} tasks")?;
        }
    }
    Ok(if differ == 0 { EXIT_OK } else { EXIT_FAILURE })
}

/// A step's name without its iteration or round (`iter-2/creator` → `creator`,
/// `bp/r2/title-c1` → `bp/title-c1`), to sum one step over many tasks.
fn generic(step: &str) -> String {
    let parts: Vec<&str> = step.split('/').filter(|p| !is_round(p)).collect();
    parts.join("/")
}

fn is_round(p: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    p.strip_prefix("iter-").is_some_and(digits) || p.strip_prefix('r').is_some_and(digits)
}
