//! `clawboard run BLUEPRINT --input FILE`: one blueprint task (seed 001) run to
//! its end in this process, without a daemon, on the configured tree; prints the
//! output contract. The task is an ordinary task of the tree (its board, slices,
//! attempts and result stay under `tasks/{id}/`), claimed before it is written so
//! no daemon takes it; a run cut short is resumed by the next daemon start.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use clawboard_blueprint::contract::{INPUT_KEYS, Input};
use clawboard_core::formats::{Priority, Task, TaskStatus, TaskType};
use clawboard_core::{RelPath, Timestamp, layout};
use clawboard_roles::{Engine, Outcome, Shutdown};
use serde_json::{Map, Value};

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::config::Settings;
use crate::local::{RootLock, try_lock_root};

/// Run one blueprint task here and now, and print its output contract
#[derive(Debug, Args)]
#[command(after_help = "FILE holds the input contract of seed 001 (user_input, and optionally
execution_config), or just the user_input object; - reads standard input.
The blueprint's roles come from the config's [roles] (the shipped example:
config/examples/blueprints.toml). The task stays in the tree under tasks/ID/.
Exit status 0 when the run succeeded, 1 when it ended partial or failed.

Examples:
  clawboard --config config/examples/blueprints.toml --root /tmp/bb run xiaohongshu_viral --input topic.json
  echo '{\"topic\": \"秋冬护肤\", \"platform\": \"xiaohongshu\"}' | clawboard run xiaohongshu_viral --input -")]
pub struct RunArgs {
    /// The blueprint's id (xiaohongshu_viral, wechat_longform, twitter_thread, deep_analysis, or one of [blueprints] dir)
    pub blueprint: String,
    /// The input (a JSON file; - for standard input)
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Hand every step the whole board instead of its slice, with no budget: to
    /// measure what slicing saves (the slice ledger records both), not for use
    #[arg(long)]
    pub full_context: bool,
}

/// Reads FILE (or stdin) as one JSON object, at most `max` bytes.
pub(crate) fn read_input(file: &std::path::Path, max: u64) -> anyhow::Result<(String, Value)> {
    use std::io::Read;
    let shown = if file.as_os_str() == "-" { "standard input".to_owned() } else { file.display().to_string() };
    let mut bytes = Vec::new();
    let reader: Box<dyn Read> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(file).map_err(|e| BadInput(format!("{shown}: cannot read the input: {e}")))?)
    };
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| BadInput(format!("{shown}: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(BadInput(format!("{shown}: the input is over the limit of {max} bytes")).into());
    }
    let v = clawboard_core::json::parse_value(&bytes).map_err(|e| match e {
        clawboard_core::json::JsonError::Syntax(e) => BadInput(format!("{shown}: not JSON: {e}")),
        dup => BadInput(format!("{shown}: {dup}")),
    })?;
    if !v.is_object() {
        return Err(BadInput(format!("{shown}: /: the input must be a JSON object")).into());
    }
    Ok((shown, v))
}

/// The input contract from FILE's object and the blueprint named on the command line.
pub(crate) fn input_of(shown: &str, v: Value, blueprint: &str, s: &Settings) -> anyhow::Result<Input> {
    let mut obj = match v {
        Value::Object(o) if o.contains_key("user_input") => o,
        Value::Object(o) if o.keys().any(|k| INPUT_KEYS.contains(&k.as_str())) => {
            // Half of each form: `execution_config` beside the request's own fields.
            let key = o.keys().find(|k| INPUT_KEYS.contains(&k.as_str())).map_or("", String::as_str);
            return Err(BadInput(format!(
                "{shown}: /user_input: is required beside /{key} (give {{\"user_input\": {{\"topic\": ...}}, \"{key}\": ...}}, or the request alone)"
            ))
            .into());
        }
        other => {
            let mut o = Map::new();
            o.insert("user_input".into(), other);
            o
        }
    };
    // The file is the input contract and nothing else: a key beside its three is
    // a mistake (`execution_confg` would run on the defaults).
    if let Some(key) = obj.keys().find(|k| !INPUT_KEYS.contains(&k.as_str())) {
        return Err(BadInput(format!(
            "{shown}: /{key}: is not a field of the input (its fields: {})",
            INPUT_KEYS.join(", ")
        ))
        .into());
    }
    match obj.get("blueprint_id") {
        Some(Value::String(id)) if id != blueprint => {
            return Err(BadInput(format!(
                "{shown}: /blueprint_id: {id:?} differs from the blueprint named on the command line ({blueprint:?})"
            ))
            .into());
        }
        Some(Value::String(_)) | None => {
            obj.insert("blueprint_id".into(), Value::String(blueprint.to_owned()));
        }
        Some(other) => {
            return Err(BadInput(format!("{shown}: /blueprint_id: is {other}, not a string")).into());
        }
    }
    if let Some(why) = s.blueprints.unavailable.get(blueprint) {
        return Err(BadInput(format!(
            "blueprint {blueprint:?} cannot run with this config: {why}\n(its roles are in config/examples/blueprints.toml: pass --config config/examples/blueprints.toml)"
        ))
        .into());
    }
    Input::from_value(shown, &Value::Object(obj), &s.blueprints.ids()).map_err(|e| BadInput(e.to_string()).into())
}

/// The tree, held by this process for as long as the returned lock lives, with
/// its store (deferred writes: the write-ahead log of a crashed run is replayed
/// now). Refused while a daemon serves it (`instead` says what to do).
pub fn hold_root(s: &Settings, instead: &str) -> anyhow::Result<(clawboard_core::Store, std::fs::File)> {
    let (store, _) =
        clawboard_core::Store::init(&s.root).with_context(|| format!("cannot set up {}", s.root.display()))?;
    let store = store.with_max_file_bytes(s.max_file_bytes);
    let lock = match try_lock_root(&s.root)? {
        RootLock::Taken(f) => f,
        RootLock::HeldBy(pid) => {
            return Err(BadInput(format!("a daemon (pid {pid}) serves {}: {instead}", s.root.display())).into());
        }
    };
    Ok((store.with_deferred_writes()?, lock))
}

/// Drives task `id` (claimed, its task.json written) to where it ends now, in
/// this process, on the tree `store` holds.
pub fn drive_here(
    store: &clawboard_core::Store,
    s: &Settings,
    id: &str,
    full_context: bool,
) -> anyhow::Result<Outcome> {
    let (mut config, _) = crate::config::engine::build(s)?;
    let mut roles = s.roles.clone();
    roles.full_context = full_context;
    config.roles = Arc::new(roles);
    let engine = Arc::new(Engine::new(store.clone(), config, Shutdown::never()));
    crate::telemetry::install(s.telemetry.as_ref(), store.root(), s.node_id.as_deref())?;
    // One thread drives the task: the role processes, their pipes and timers are
    // polled where the steps run, with no wake-up handed between threads, and
    // the tokenizer's caches (per thread) stay warm from step to step. Parallel
    // steps still run side by side (they wait on processes, not on this thread).
    // Against a two-thread runtime: 1.91 vs 2.23 ms per step at p50
    // (docs/BENCHMARKS.md, "Durable step overhead").
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let outcome = runtime.block_on(engine.drive(id))?;
    store.checkpoint()?;
    crate::telemetry::flush(crate::telemetry::FLUSH_AT_EXIT);
    Ok(outcome)
}

pub fn run(a: RunArgs, s: &Settings) -> anyhow::Result<u8> {
    // The tokenizer (~100 ms to load) is loaded first, not by the first step's
    // slice: loaded between that step's records and its process, it left the
    // steps after it slower too (interval 1 1.57 vs 1.38 ms at p50, p99 2.09 vs
    // 1.65 over all; docs/BENCHMARKS.md, "Durable step overhead").
    clawboard_board::tokens::bpe();
    let (shown, v) = read_input(&a.input, s.max_file_bytes)?;
    let input = input_of(&shown, v, &a.blueprint, s)?;
    if let Ok(bp) = s.blueprints.get(&a.blueprint) {
        for w in &bp.warnings {
            tracing::warn!("{w}");
        }
    }
    crate::config::check_sandbox(s)?;
    if let Err(e) = clawboard_roles::runner::close_own_proc_files() {
        tracing::warn!("cannot close /proc/{}/environ to role processes: {e}", std::process::id());
    }
    let (store, _lock) = hold_root(s, "drop the task into its inbox/ instead, or pass another --root")?;
    let id = clawboard_core::id::new_task_id();
    let mut extra = Map::new();
    extra.insert("blueprint_id".into(), Value::String(input.blueprint_id.clone()));
    extra.insert("user_input".into(), serde_json::to_value(&input.user_input)?);
    extra.insert("execution_config".into(), serde_json::to_value(input.execution_config)?);
    let task = Task {
        task_id: id.clone(),
        kind: TaskType::Writing,
        description: input.user_input.topic.clone(),
        priority: Priority::Normal,
        created_by: "clawboard run".into(),
        created_at: Timestamp::now(),
        deadline: None,
        assigned_pm: None,
        status: TaskStatus::Pending,
        context: None,
        completed_at: None,
        extra,
    };
    // Claimed first: a daemon started later resumes it rather than taking it anew.
    clawboard_roles::claims::claim(&store, id.as_str())?;
    let rel = RelPath::new(&layout::task_file(id.as_str(), layout::TASK_FILE))?;
    store.create_bytes(&rel, clawboard_core::store::to_pretty_json(&task).as_bytes())?;
    eprintln!("task {id}: blueprint {} ({})", input.blueprint_id, layout::task_file(id.as_str(), ""));

    let outcome = drive_here(&store, s, id.as_str(), a.full_context)?;
    let result: clawboard_core::formats::TaskResult =
        store.read(&RelPath::new(&layout::task_file(id.as_str(), layout::RESULT_FILE))?)?;
    if let Some(out) = result.extra.get("output") {
        outln!("{}", serde_json::to_string_pretty(out)?)?;
        // A step its fallback answered is said beside the status, whatever the status.
        let contract = serde_json::from_value::<clawboard_blueprint::contract::Output>(out.clone());
        for line in contract.map(|o| o.fallbacks()).unwrap_or_default() {
            eprintln!("task {id}: {line}");
        }
    }
    match outcome {
        Outcome::Completed => {
            eprintln!("task {id}: completed");
            Ok(EXIT_OK)
        }
        Outcome::Failed(why) => {
            eprintln!("task {id}: failed: {why}");
            Ok(EXIT_FAILURE)
        }
        Outcome::Held(ids) => {
            eprintln!("task {id}: waits for a human on {}; a daemon resumes it once decided", ids.join(", "));
            Ok(EXIT_FAILURE)
        }
        Outcome::Stopped | Outcome::Fenced => {
            eprintln!("task {id}: stopped; a daemon resumes it");
            Ok(EXIT_FAILURE)
        }
    }
}
