//! `clawboard slice preview|history`: seed 003's `preview_slice` (what a step would
//! be handed, now or at any earlier point of the board's history) and
//! `get_slice_history` (the ledger of every slice handed out, with totals).

use clap::{Args, Subcommand};
use clawboard_blueprint::format::SliceOf;
use clawboard_board::slice::{self, DEFAULT_TRUNCATE_TOKENS, Spec};
use clawboard_board::{Selector, TaskBoard, ledger};
use serde_json::json;

use crate::cli::{BadInput, EXIT_OK};
use crate::config::Settings;
use crate::output;

/// Slices of a task's board: preview one, or read the ledger (seed 003)
#[derive(Debug, Subcommand)]
#[command(after_help = "Examples:
  clawboard slice preview t1 analyst
  clawboard slice preview t1 iter-1/body-worker --at 12
  clawboard slice history t1")]
pub enum SliceCommand {
    Preview(PreviewArgs),
    History(HistoryArgs),
}

/// What STEP's role would be handed: scope, slice data, tokens, budget, rungs
#[derive(Debug, Args)]
#[command(after_help = "STEP is a step of the blueprint TASK runs (title, or as the executor names
its runs: bp/r2/title-c1), before the run or during it: the step's scope or
template and max_tokens come from the blueprint. Otherwise STEP is a role id, or
a lifecycle step (iter-1/ROLE): the role's scope or template and max_tokens come
from its [roles.ID] entry.

Examples:
  clawboard slice preview t1 analyst --json
  clawboard slice preview t1 body-worker --at 5
  clawboard slice preview xhs-1 title")]
pub struct PreviewArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// A blueprint step of the task (title, bp/title-c1), a role id, or iter-N/ROLE
    pub step: String,
    /// The board as of history record SEQ (default: now)
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}

/// Every slice handed out for TASK, with its tokens, budget, rungs and the role's usage
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  clawboard slice history t1 --json")]
pub struct HistoryArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
}

pub fn run(c: SliceCommand, s: &Settings) -> anyhow::Result<u8> {
    let store = crate::commands::open_store(s)?;
    match c {
        SliceCommand::Preview(a) => preview(s, &store, a),
        SliceCommand::History(a) => history(s, &store, &a.task),
    }
}

/// What a preview cuts: the selector, its budget and the role that would run.
struct Plan {
    role_id: String,
    selector: Selector,
    max_tokens: Option<u64>,
    truncate_tokens: u64,
    /// `blueprint ID, step ID` for a blueprint step.
    blueprint: Option<(String, String)>,
}

fn preview(s: &Settings, store: &clawboard_core::Store, a: PreviewArgs) -> anyhow::Result<u8> {
    let board = TaskBoard::new(store, &a.task)?;
    crate::commands::need_task(store, &a.task)?;
    let newest = board.load()?;
    let mut state = match a.at {
        // A number past the history is a mistake, not the newest board by another name.
        Some(seq) if seq > newest.seq => {
            return Err(BadInput(format!(
                "--at {seq}: task {}'s board has no record {seq}; its history ends at {}",
                a.task, newest.seq
            ))
            .into());
        }
        Some(seq) => board.at(seq)?,
        None => newest,
    };
    let plan = match blueprint_plan(s, store, &a, &mut state)? {
        Some(plan) => plan,
        None => role_plan(s, &a)?,
    };
    let source = plan.selector.source();
    let scope_text = match &plan.selector {
        Selector::Scope(sc) => json!(sc.texts()),
        Selector::Template(t) => json!({"template": t.id, "scope": t.scope.texts()}),
    };
    let spec =
        Spec { step: a.step.clone(), source, max_tokens: plan.max_tokens, truncate_tokens: plan.truncate_tokens };
    let full = slice::full_tokens(&state);
    let built = slice::build(&state, &spec)?;
    let mut out = json!({
        "step_id": a.step, "role": plan.role_id, "scope": scope_text, "slice_data": built.data,
        "estimated_tokens": built.tokens, "budget": built.budget.map_or(json!("unlimited"), |b| json!(b)),
        "rungs": built.rungs, "missing": built.missing, "hash": built.hash,
        "board_seq": state.seq, "full_board_tokens": full, "tokenizer": clawboard_board::tokens::TOKENIZER,
    });
    if let Some((bp, step)) = &plan.blueprint {
        out["blueprint"] = json!({"blueprint_id": bp, "step": step});
    }
    if s.json {
        output::json(&out)?;
    } else {
        let of = plan.blueprint.as_ref().map_or(String::new(), |(bp, _)| format!(" of blueprint {bp}"));
        outln!("step {}{of} (role {}) on task {} at board seq {}", a.step, plan.role_id, a.task, state.seq)?;
        outln!("scope: {}", out["scope"])?;
        outln!("{}", serde_json::to_string_pretty(&out["slice_data"])?)?;
        outln!(
            "-- {} tokens (o200k; the whole board: {full}), budget {}, rungs {}, missing {}",
            built.tokens,
            out["budget"],
            out["rungs"],
            out["missing"]
        )?;
    }
    Ok(EXIT_OK)
}

/// STEP as a role (or a lifecycle step `iter-1/ROLE`) with a scope or template.
fn role_plan(s: &Settings, a: &PreviewArgs) -> anyhow::Result<Plan> {
    let role_id = a.step.rsplit('/').next().unwrap_or(&a.step);
    let role = s
        .roles
        .roles
        .get(role_id)
        .ok_or_else(|| BadInput(format!("{}: no role {role_id:?} under [roles] in the config", a.step)))?;
    let at = format!("roles.{role_id}");
    let selector =
        Selector::of(role.scope.as_deref(), role.template.as_deref(), &s.templates, &at)?.ok_or_else(|| {
            BadInput(format!(
                "role {role_id} has no scope or template under [roles.{role_id}]: in a team task it is given the \
                 whole context; a blueprint step's slice comes from the step (see `clawboard slice history {}`)",
                a.task
            ))
        })?;
    Ok(Plan {
        role_id: role_id.to_owned(),
        selector,
        max_tokens: role.max_tokens,
        truncate_tokens: role.truncate_tokens.unwrap_or(DEFAULT_TRUNCATE_TOKENS),
        blueprint: None,
    })
}

/// A step id as the executor names its runs (`bp/r2/title-c1`, `bp/title-redo1`)
/// reduced to the blueprint's step id (`title`).
fn blueprint_step_id(step: &str) -> &str {
    let mut id = step.strip_prefix("bp/").unwrap_or(step);
    if let Some((round, rest)) = id.split_once('/')
        && round.len() > 1
        && round.starts_with('r')
        && round[1..].bytes().all(|b| b.is_ascii_digit())
    {
        id = rest;
    }
    for tag in ["-c", "-redo"] {
        if let Some(at) = id.rfind(tag)
            && id[at + tag.len()..].bytes().all(|b| b.is_ascii_digit())
            && id.len() > at + tag.len()
        {
            id = &id[..at];
        }
    }
    id
}

/// STEP as a step of the blueprint TASK runs (`blueprint_id` in its task.json,
/// or the blueprint the board says it is running), with the step's own scope or
/// template and budget (seed 003's `preview_slice(step_id, blueprint, blackboard)`).
/// Before the run has written the input to the board, the board is previewed as
/// the run's first step will find it: the input's meta written in.
fn blueprint_plan(
    s: &Settings,
    store: &clawboard_core::Store,
    a: &PreviewArgs,
    state: &mut clawboard_core::formats::BoardFile,
) -> anyhow::Result<Option<Plan>> {
    let file = clawboard_core::layout::task_file(&a.task, clawboard_core::layout::TASK_FILE);
    let task: clawboard_core::formats::Task = store.read(&clawboard_core::RelPath::new(&file)?)?;
    let input = clawboard_blueprint::contract::Input::from_task_extra(&file, &task.extra, &s.blueprints.ids())
        .map_err(|e| BadInput(e.to_string()))?;
    let running = state
        .control_zone
        .get("current_stage")
        .and_then(serde_json::Value::as_str)
        .and_then(|v| v.strip_prefix("blueprint:"))
        .map(str::to_owned);
    let Some(bp_id) = input.as_ref().map(|i| i.blueprint_id.clone()).or(running) else { return Ok(None) };
    let bp = s.blueprints.get(&bp_id).map_err(|why| BadInput(format!("{file}: /blueprint_id: {why}")))?;
    let Some(step) = bp.step(blueprint_step_id(&a.step)) else {
        if s.roles.roles.contains_key(a.step.rsplit('/').next().unwrap_or(&a.step)) {
            return Ok(None);
        }
        let ids: Vec<&str> = bp.steps.iter().map(|x| x.id.as_str()).collect();
        return Err(BadInput(format!(
            "{}: blueprint {bp_id} (task {}) has no step {:?}; its steps: {}",
            a.step,
            a.task,
            blueprint_step_id(&a.step),
            ids.join(", ")
        ))
        .into());
    };
    if let Some(input) = &input
        && state.meta_zone.is_empty()
    {
        for (path, value) in input.meta_writes() {
            if let Some(key) = path.strip_prefix("meta.") {
                state.meta_zone.insert(key.to_owned(), value);
            }
        }
    }
    let (scope, template) = match &step.slice {
        SliceOf::Scope(v) => (Some(v.as_slice()), None),
        SliceOf::Template(t) => (None, Some(t.as_str())),
    };
    let at = format!("{}: steps.{}", bp.file, step.id);
    let selector = Selector::of(scope, template, &s.templates, &at)?
        .ok_or_else(|| BadInput(format!("{at}: the step has no scope or template")))?;
    let role = s.roles.roles.get(&step.role);
    Ok(Some(Plan {
        role_id: step.role.clone(),
        selector,
        max_tokens: step.max_tokens,
        truncate_tokens: role.and_then(|r| r.truncate_tokens).unwrap_or(DEFAULT_TRUNCATE_TOKENS),
        blueprint: Some((bp.id.clone(), step.id.clone())),
    }))
}

fn history(s: &Settings, store: &clawboard_core::Store, task: &str) -> anyhow::Result<u8> {
    clawboard_core::check_id(task).map_err(|e| BadInput(format!("task {task:?}: {e}")))?;
    crate::commands::need_task(store, task)?;
    let entries = ledger::list(store, task)?;
    let totals = ledger::totals(&entries);
    if s.json {
        output::json(&json!({"task": task, "entries": entries, "totals": totals}))?;
        return Ok(EXIT_OK);
    }
    let mut t = output::Table::new(&[
        "#", "at", "step", "role", "tokens", "model", "budget", "board", "rungs", "usage", "outcome",
    ]);
    for e in &entries {
        t.row(vec![
            e.n.to_string(),
            e.at.to_string(),
            e.step.clone(),
            e.role.clone(),
            e.tokens.to_string(),
            e.model_tokens.map_or("-".into(), |n| n.to_string()),
            e.budget.map_or("-".into(), |b| b.to_string()),
            e.full_tokens.map_or("-".into(), |n| n.to_string()),
            if e.rungs.is_empty() { "-".into() } else { e.rungs.join(",") },
            e.usage.map_or("-".into(), |u| format!("{}+{}", u.prompt_tokens, u.completion_tokens)),
            if e.reused { format!("{} (recorded)", e.outcome) } else { e.outcome.clone() },
        ]);
    }
    out!("{}", t.render())?;
    let model = if totals.model_tokens > 0 {
        format!("; {} in the model's own tokens", totals.model_tokens)
    } else {
        String::new()
    };
    outln!(
        "total: {} slices, {} o200k tokens handed (the whole board each time: {}){model}; roles report {} prompt + {} completion tokens",
        totals.slices,
        totals.slice_tokens,
        totals.full_tokens,
        totals.prompt_tokens,
        totals.completion_tokens
    )?;
    if totals.reused_slices > 0 {
        outln!(
            "reused: {} slices of the steps a fork copied as recorded (their roles reported {} prompt + {} completion tokens there, none here)",
            totals.reused_slices,
            totals.reused_prompt_tokens,
            totals.reused_completion_tokens
        )?;
    }
    Ok(EXIT_OK)
}
