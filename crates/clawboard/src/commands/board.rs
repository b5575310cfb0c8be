//! `clawboard board …`: a task's blackboard (seed 000) from the command line. A
//! person works on the tree directly; a running role passes `--token` (or has
//! `CLAWBOARD_TOKEN`) and the request goes to the daemon, which takes its role,
//! task and component type from the token and applies the zone table.

use std::io::Read;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawboard_board::request::{Ctx, Request, execute};
use clawboard_board::{BoardPath, Caller, ErrorEntry};
use clawboard_core::Timestamp;
use serde_json::Value;

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::config::Settings;
use crate::output;

/// A task's board: read, write, slice, history (seed 000)
#[derive(Debug, Subcommand)]
#[command(after_help = "Without --token you act as a person on the tree (any zone; while a daemon
runs, your writes go through it). A running role
passes its token (CLAWBOARD_TOKEN) and may only do what seed 000's zone table
gives its component type (config/acl.toml [zones.*]; docs/BOARD.md).

Examples:
  clawboard board set t1 meta.intent 'Write about AI tools'
  clawboard board get t1 content.hook
  clawboard board slice t1 --scope meta.intent,content.hook.selected --max-tokens 200
  clawboard board history t1 content.hook.variants")]
pub enum BoardCommand {
    Get(GetArgs),
    Set(SetArgs),
    AppendError(AppendErrorArgs),
    StepStatus(StepStatusArgs),
    Slice(SliceArgs),
    Snapshot(TaskArgs),
    History(HistoryArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TokenArg {
    /// A role instance's token: the daemon applies the zone table [env: CLAWBOARD_TOKEN]
    #[arg(long, env = "CLAWBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Print the board, a zone (meta, content, control) or one path in it
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  clawboard board get t1\n  clawboard board get t1 meta.constraints.word_count")]
pub struct GetArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// `zone` or `zone.key.nested`; without it, the whole board (snapshot)
    pub path: Option<String>,
    #[command(flatten)]
    pub token: TokenArg,
}

/// Write one value: write_meta, write_content or write_control by the path's zone
#[derive(Debug, Args)]
#[command(after_help = "VALUE is JSON (42, [\"a\"], {\"k\": 1}); text that is not JSON is taken as a
string where the board holds a string. `-` reads it from standard input.

Examples:
  clawboard board set t1 meta.platform xiaohongshu
  clawboard board set t1 content.hook.variants '[{\"type\":\"numeric\",\"content\":\"5 tools\",\"score\":85}]'
  clawboard board set t1 control.quality_scores.virality 82")]
pub struct SetArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// The board path: `zone.key.nested` (meta, content or control)
    pub path: String,
    /// The value: JSON, or text where the board holds a string; `-` reads standard input
    pub value: String,
    #[command(flatten)]
    pub token: TokenArg,
}

/// append_error: add an entry to control.errors
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  clawboard board append-error t1 --step body --type component_timeout --message 'body-worker took 60 s'"
)]
pub struct AppendErrorArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// The step the error belongs to (`control.errors[].step_id`)
    #[arg(long)]
    pub step: String,
    /// What kind of error (`component_timeout`, `sensitive_filter_failed` …)
    #[arg(long = "type")]
    pub error_type: String,
    /// What happened, in words
    #[arg(long)]
    pub message: String,
    #[command(flatten)]
    pub token: TokenArg,
}

/// update_step_status: pending, running, completed, failed or skipped
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  clawboard board step-status t1 title completed")]
pub struct StepStatusArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// The step's id (a key of `control.step_status`)
    pub step: String,
    /// pending, running, completed, failed or skipped
    pub status: String,
    #[command(flatten)]
    pub token: TokenArg,
}

/// get_slice: the part of the board a scope or template names, within a budget
#[derive(Debug, Args)]
#[command(after_help = "A role with --token and no --scope/--template gets its own configured slice.

Examples:
  clawboard board slice t1 --scope meta.intent,meta.platform,meta.style --max-tokens 150
  clawboard board slice t1 --template body_generation")]
pub struct SliceArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// Scope items, comma-separated (`meta.intent,content.hook.*`, or `all`)
    #[arg(long, value_delimiter = ',', conflicts_with = "template")]
    pub scope: Vec<String>,
    /// A slice template by id (config/templates/ID.json, or [board] templates)
    #[arg(long)]
    pub template: Option<String>,
    /// The slice's budget in o200k tokens; the compression ladder brings it within
    #[arg(long)]
    pub max_tokens: Option<u64>,
    #[command(flatten)]
    pub token: TokenArg,
}

/// snapshot(): the three zones
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  clawboard board snapshot t1 --json")]
pub struct TaskArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    #[command(flatten)]
    pub token: TokenArg,
}

/// Every write, in order (those touching PATH only, if given): seq, time, actor, component, op, path, value
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  clawboard board history t1\n  clawboard board history t1 content.hook --json")]
pub struct HistoryArgs {
    /// The task's id (its directory under tasks/)
    pub task: String,
    /// Only the writes at, inside or above this board path (`content.hook`)
    pub path: Option<String>,
    #[command(flatten)]
    pub token: TokenArg,
}

fn value_of(text: &str, path: &str) -> anyhow::Result<Value> {
    let text = if text == "-" {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("reading the value from standard input")?;
        String::from_utf8(bytes)
            .map_err(|e| BadInput(format!("{path}: the value on standard input is not UTF-8 text ({e})")))?
    } else {
        text.to_owned()
    };
    let why = match clawboard_core::json::parse_value(text.as_bytes()) {
        Ok(v) => return Ok(v),
        Err(
            bad @ (clawboard_core::json::JsonError::DuplicateKey { .. }
            | clawboard_core::json::JsonError::BigInteger { .. }),
        ) => {
            return Err(BadInput(format!("{path}: {bad}")).into());
        }
        Err(clawboard_core::json::JsonError::Syntax(e)) => e,
    };
    // Plain text where the board holds a string (or anything, for an unknown key),
    // unless it was meant as JSON: an object, an array or a quoted string that
    // does not parse is a mistake to say, not text to store.
    let meant_json = matches!(text.trim_start().chars().next(), Some('{' | '[' | '"'));
    let holds_text =
        BoardPath::parse(path).ok().and_then(|p| clawboard_board::ops::spec_at(&p).ok()).is_some_and(|t| {
            matches!(t, None | Some(clawboard_core::formats::Ty::Str | clawboard_core::formats::Ty::Enum(_)))
        });
    if holds_text && !meant_json {
        Ok(Value::String(text.trim_end_matches('\n').to_owned()))
    } else {
        Err(BadInput(format!("{path}: the value is not valid JSON ({why}): quote text as '\"…\"', or write JSON"))
            .into())
    }
}

pub fn run(c: BoardCommand, s: &Settings) -> anyhow::Result<u8> {
    let (req, token) = match c {
        BoardCommand::Get(a) => {
            (Request { task: a.task, op: "get".into(), path: a.path, ..Default::default() }, a.token)
        }
        BoardCommand::Set(a) => {
            let value = value_of(&a.value, &a.path)?;
            (
                Request {
                    task: a.task,
                    op: "set".into(),
                    path: Some(a.path),
                    value: Some(value),
                    ..Default::default()
                },
                a.token,
            )
        }
        BoardCommand::AppendError(a) => {
            let error = ErrorEntry {
                step_id: a.step,
                error_type: a.error_type,
                message: a.message,
                timestamp: Timestamp::now().to_string(),
            };
            (Request { task: a.task, op: "append_error".into(), error: Some(error), ..Default::default() }, a.token)
        }
        BoardCommand::StepStatus(a) => (
            Request {
                task: a.task,
                op: "step_status".into(),
                step: Some(a.step),
                status: Some(a.status),
                ..Default::default()
            },
            a.token,
        ),
        BoardCommand::Slice(a) => (
            Request {
                task: a.task,
                op: "slice".into(),
                scope: a.scope,
                template: a.template,
                max_tokens: a.max_tokens,
                ..Default::default()
            },
            a.token,
        ),
        BoardCommand::Snapshot(a) => (Request { task: a.task, op: "snapshot".into(), ..Default::default() }, a.token),
        BoardCommand::History(a) => {
            (Request { task: a.task, op: "history".into(), path: a.path, ..Default::default() }, a.token)
        }
    };
    let given = token.token.filter(|t| !t.trim().is_empty());
    if given.is_none()
        && let Some(instance) = std::env::var("CLAWBOARD_INSTANCE_ID").ok().filter(|i| !i.trim().is_empty())
    {
        // A role's run has its token; without it, the call would be a person's
        // (the daemon's person token), with a person's rights on every zone.
        return Err(BadInput(format!(
            "CLAWBOARD_TOKEN is empty, but this process runs as role instance {instance} (CLAWBOARD_INSTANCE_ID): a role writes with its run's token"
        ))
        .into());
    }
    let answer = match given {
        Some(t) => crate::commands::write::post(s, "/v1/board", &t, &serde_json::to_vec(&req)?)?,
        None => match through_daemon(s, &req)? {
            Some(answer) => answer,
            None => {
                let store = crate::commands::open_store(s)?;
                let (acl, _) = crate::config::engine::load_acl(s)?;
                let ctx = Ctx { store: &store, acl: &acl, templates: &s.templates, own: None };
                execute(&ctx, &Caller::human(), &req).map_err(|e| -> anyhow::Error {
                    if e.is_bad_input() { BadInput(e.to_string()).into() } else { e.into() }
                })?
            }
        },
    };
    print_answer(s, &req, &answer)
}

/// A person's board write while a daemon runs the tree goes through it (with
/// the token it keeps in `.clawboard/person-token`): the daemon holds its own
/// newest records in memory for a few milliseconds before their files are
/// written, and a write numbered from the files alone could take one of their
/// numbers. `None`: no daemon answers, so the write goes to the files.
fn through_daemon(s: &Settings, req: &Request) -> anyhow::Result<Option<Value>> {
    if !matches!(req.op.as_str(), "set" | "append_error" | "step_status") {
        return Ok(None);
    }
    let body = serde_json::to_vec(req)?;
    let token_file = s.root.join(clawboard_core::layout::PERSON_TOKEN);
    // Twice: a daemon that started since the token was read has a new one.
    for _ in 0..2 {
        let token = match std::fs::read_to_string(&token_file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", token_file.display())),
        };
        let Some((status, status_line, json)) =
            crate::commands::write::request_if_running(s, "/v1/board", &token, &body)?
        else {
            return Ok(None);
        };
        let error =
            || json["error"].as_str().map_or_else(|| format!("the daemon answered {status_line}"), str::to_owned);
        match status {
            200 => return Ok(Some(json)),
            401 => continue,
            403 | 422 => return Err(BadInput(error()).into()),
            _ => anyhow::bail!("{}", error()),
        }
    }
    anyhow::bail!("the daemon refused the token in {}; is another daemon starting?", token_file.display())
}

fn print_answer(s: &Settings, req: &Request, a: &Value) -> anyhow::Result<u8> {
    if s.json {
        output::json(a)?;
        return Ok(if req.op == "get" && a.get("present") == Some(&Value::Bool(false)) {
            EXIT_FAILURE
        } else {
            EXIT_OK
        });
    }
    match req.op.as_str() {
        "get" if req.path.is_some() => {
            if a["present"] == Value::Bool(false) {
                eprintln!("{}: not on the board of task {}", req.path.as_deref().unwrap_or(""), req.task);
                return Ok(EXIT_FAILURE);
            }
            outln!("{}", serde_json::to_string_pretty(&a["value"])?)?;
        }
        "set" | "append_error" | "step_status" => {
            let r = &a["record"];
            outln!(
                "#{} {} {} (by {})",
                r["seq"],
                r["op"].as_str().unwrap_or(""),
                r["path"].as_str().unwrap_or(""),
                r["actor"]["role"].as_str().unwrap_or("")
            )?;
        }
        "history" => {
            let mut t = output::Table::new(&["seq", "at", "actor", "component", "op", "path", "value"]);
            for r in a["records"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let actor = match r["actor"]["instance"].as_str() {
                    Some(i) => format!("{} ({i})", r["actor"]["role"].as_str().unwrap_or("")),
                    None => r["actor"]["role"].as_str().unwrap_or("").to_owned(),
                };
                t.row(vec![
                    r["seq"].to_string(),
                    r["at"].as_str().unwrap_or("").to_owned(),
                    actor,
                    r["component"].as_str().unwrap_or("").to_owned(),
                    r["op"].as_str().unwrap_or("").to_owned(),
                    r["path"].as_str().unwrap_or("").to_owned(),
                    output::truncate(&output::printable(&r["value"].to_string()), 60),
                ]);
            }
            out!("{}", t.render())?;
        }
        "slice" => {
            outln!("{}", serde_json::to_string_pretty(&a["slice"])?)?;
            let budget = a["budget"].as_u64().map_or("unlimited".to_owned(), |b| b.to_string());
            outln!(
                "-- {} tokens (o200k), budget {budget}, rungs {}, missing {}",
                a["tokens"],
                a["rungs"],
                a["missing"]
            )?;
        }
        _ => outln!("{}", serde_json::to_string_pretty(a)?)?,
    }
    Ok(EXIT_OK)
}
