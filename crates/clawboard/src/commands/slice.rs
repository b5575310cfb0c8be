//! `clawboard slice preview|history`: seed 003's `preview_slice` (what a step would
//! be handed, now or at any earlier point of the board's history) and
//! `get_slice_history` (the ledger of every slice handed out, with totals).

use clap::{Args, Subcommand};
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
#[command(after_help = "STEP is a role id, or a lifecycle step (iter-1/ROLE): the role's scope or
template and max_tokens come from its [roles.ID] entry.

Examples:
  clawboard slice preview t1 analyst --json
  clawboard slice preview t1 body-worker --at 5")]
pub struct PreviewArgs {
    pub task: String,
    pub step: String,
    /// The board as of history record SEQ (default: now)
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}

/// Every slice handed out for TASK, with its tokens, budget, rungs and the role's usage
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  clawboard slice history t1 --json")]
pub struct HistoryArgs {
    pub task: String,
}

pub fn run(c: SliceCommand, s: &Settings) -> anyhow::Result<u8> {
    let store = crate::commands::open_store(s)?;
    match c {
        SliceCommand::Preview(a) => preview(s, &store, a),
        SliceCommand::History(a) => history(s, &store, &a.task),
    }
}

fn preview(s: &Settings, store: &clawboard_core::Store, a: PreviewArgs) -> anyhow::Result<u8> {
    let role_id = a.step.rsplit('/').next().unwrap_or(&a.step);
    let role = s
        .roles
        .roles
        .get(role_id)
        .ok_or_else(|| BadInput(format!("{}: no role {role_id:?} under [roles] in the config", a.step)))?;
    let board = TaskBoard::new(store, &a.task)?;
    crate::commands::need_task(store, &a.task)?;
    let newest = board.load()?;
    let state = match a.at {
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
    let at = format!("roles.{role_id}");
    let selector =
        Selector::of(role.scope.as_deref(), role.template.as_deref(), &s.templates, &at)?.ok_or_else(|| {
            BadInput(format!(
                "role {role_id} has no scope or template under [roles.{role_id}]: in a team task it is given the \
                 whole context; a blueprint step's slice comes from the step (see `clawboard slice history {}`)",
                a.task
            ))
        })?;
    let source = selector.source();
    let scope_text = match &selector {
        Selector::Scope(sc) => json!(sc.texts()),
        Selector::Template(t) => json!({"template": t.id, "scope": t.scope.texts()}),
    };
    let spec = Spec {
        step: a.step.clone(),
        source,
        max_tokens: role.max_tokens,
        truncate_tokens: role.truncate_tokens.unwrap_or(DEFAULT_TRUNCATE_TOKENS),
    };
    let full = slice::full_tokens(&state);
    let built = slice::build(&state, &spec)?;
    let out = json!({
        "step_id": a.step, "scope": scope_text, "slice_data": built.data,
        "estimated_tokens": built.tokens, "budget": built.budget.map_or(json!("unlimited"), |b| json!(b)),
        "rungs": built.rungs, "missing": built.missing, "hash": built.hash,
        "board_seq": state.seq, "full_board_tokens": full, "tokenizer": clawboard_board::tokens::TOKENIZER,
    });
    if s.json {
        output::json(&out)?;
    } else {
        outln!("step {} (role {role_id}) on task {} at board seq {}", a.step, a.task, state.seq)?;
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
            e.outcome.clone(),
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
    Ok(EXIT_OK)
}
