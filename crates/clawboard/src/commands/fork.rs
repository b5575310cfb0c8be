//! `clawboard task fork`: a new task that starts as a recorded one stood at a step
//! (its board, attempts and slices up to there copied), and runs the rest live.

use std::collections::HashSet;

use clap::Args;
use clawboard_board::BoardPath;
use clawboard_board::ledger::{self, Handout};
use clawboard_board::ops::Op;
use clawboard_board::task_board::{Caller, Record, TaskBoard};
use clawboard_core::formats::{Task, TaskStatus};
use clawboard_core::{Error, Id, RelPath, Store, layout};
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// Start a new task from a recorded one as it stood at a step; the rest runs live
#[derive(Debug, Args)]
#[command(after_help = "The fork is a new task, tasks/NEW/, marked forked_from {task, seq, step}.
Its board is the recorded board as the step was handed it (--at), or as of history
record N (--seq); the attempts, raw replies and slices before that point are copied
and marked as recorded (forkedFrom): the engine finds those steps done and runs none
of them again, so none of their effects repeats and they spend no token. Steps from
the fork point on run live. --set writes the board first, as a person's write under
the zone table; --input gives a blueprint task another input (the meta zone is
written from it again, so the steps from the fork point on read it). The task.json is written last, pending: a running daemon takes it
like any task; --run runs it here and now (no daemon may hold the tree).

Examples:
  clawboard task fork task-20261207-101500-a1b2c3 --at bp/body
  clawboard task fork task-20261207-101500-a1b2c3 --at bp/body --set 'content.title.selected=\"秋冬护肤三件事\"'
  clawboard task fork task-20261207-101500-a1b2c3 --seq 24 --run
  clawboard task fork task-20261207-101500-a1b2c3 --at bp/title --input other-topic.json")]
pub struct ForkArgs {
    /// The recorded task's id
    #[arg(value_name = "ID")]
    pub id: String,
    /// Fork before this step (as `task replay` and the attempts name it: bp/body, iter-2/validator)
    #[arg(long, value_name = "STEP", required_unless_present = "seq", conflicts_with = "seq")]
    pub at: Option<String>,
    /// Fork after this board history record
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,
    /// Write PATH = JSON on the fork's board first (repeatable), as a person
    #[arg(long = "set", value_name = "PATH=JSON")]
    pub set: Vec<String>,
    /// A blueprint task's input for the fork (user_input, and optionally
    /// execution_config, as `clawboard run --input` takes it; - for standard input)
    #[arg(long, value_name = "FILE")]
    pub input: Option<std::path::PathBuf>,
    /// The fork's id (a new one when absent)
    #[arg(long = "id", value_name = "ID")]
    pub new_id: Option<String>,
    /// Run the fork here and now, like `clawboard run`, and print how it ended
    #[arg(long)]
    pub run: bool,
}

/// Where a fork starts.
#[derive(Debug, Clone, Serialize)]
pub struct ForkPoint {
    /// The first step that runs live.
    pub step: String,
    /// The last history record kept (0: none).
    pub seq: u64,
    /// Attempts copied (numbers below this one).
    pub first_live_attempt: u32,
}

#[derive(Debug, Serialize)]
struct Forked {
    task: String,
    forked_from: Value,
    recorded_attempts: usize,
    history_records: usize,
    slices: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<String>,
}

pub fn run(a: ForkArgs, s: &Settings) -> anyhow::Result<u8> {
    let store = open_store(s)?;
    let id = Id::new(a.id.clone()).map_err(|e| BadInput(format!("task id {:?} {e}", a.id)))?;
    let rel = RelPath::new(&layout::task_file(id.as_str(), layout::TASK_FILE))?;
    let task: Task = match store.read(&rel) {
        Err(Error::NotFound { .. }) => return Err(BadInput(format!("no task {id} (looked for {rel})")).into()),
        other => other?,
    };
    let new_id = match &a.new_id {
        Some(n) => Id::new(n.clone()).map_err(|e| BadInput(format!("--id {n:?} {e}")))?,
        None => clawboard_core::id::new_task_id(),
    };
    let new_task = RelPath::new(&layout::task_file(new_id.as_str(), ""))?;
    if store.exists(&new_task) {
        return Err(BadInput(format!("--id {new_id}: a task with that id exists ({new_task})")).into());
    }
    let sets = a.set.iter().map(|x| parse_set(x)).collect::<anyhow::Result<Vec<_>>>()?;
    let input = match &a.input {
        Some(file) => Some(fork_input(&task, file, s)?),
        None => None,
    };
    let recorded = attempts::load(&store, id.as_str())?;
    let board = TaskBoard::new(&store, id.as_str())?;
    let history = if board.exists() { board.history(None)? } else { Vec::new() };
    let handouts = ledger::list(&store, id.as_str())?;
    let point = fork_point(id.as_str(), &recorded, &history, &handouts, a.at.as_deref(), a.seq)?;
    // With --run, held from here to the end: no daemon takes the fork meanwhile.
    let held = if a.run { Some(super::run::hold_root(s, "leave out --run: the daemon runs the fork")?) } else { None };
    let mut forked_from = json!({"task": id.as_str(), "seq": point.seq, "step": point.step});
    let ops = trial_edits(&board, point.seq, sets)?;
    // A blueprint's VM writes the recorded steps' results again as it resumes: the
    // edits are made by it, right before the fork's step (see `fork_edits`).
    let blueprint = task.extra.contains_key("blueprint_id");
    if blueprint && !ops.is_empty() {
        forked_from["set"] = ops.iter().map(|(p, v, _)| json!({"path": p, "value": v})).collect();
    }
    let copy = Copy { store: &store, from: id.as_str(), to: new_id.as_str() };
    let kept: Vec<&Attempt> = recorded.iter().filter(|x| x.number < point.first_live_attempt).collect();
    let edits = if blueprint { Vec::new() } else { ops.into_iter().map(|(_, _, op)| op).collect() };
    let (copied, records, slices) = copy.made(s, &kept, &history, &handouts, point.seq, edits)?;
    let mut fresh = task.clone();
    fresh.task_id = new_id.clone();
    fresh.status = TaskStatus::Pending;
    fresh.completed_at = None;
    fresh.created_at = clawboard_core::Timestamp::now();
    fresh.extra.insert("forked_from".into(), forked_from.clone());
    if let Some(input) = &input {
        // The VM writes the meta zone from the input at each drive: the steps from
        // the fork point on read the new one.
        fresh.extra.insert("user_input".into(), serde_json::to_value(&input.user_input)?);
        fresh.extra.insert("execution_config".into(), serde_json::to_value(input.execution_config)?);
    }
    // Last: the task exists for a daemon once everything it resumes from is there.
    let rel = RelPath::new(&layout::task_file(new_id.as_str(), layout::TASK_FILE))?;
    store.sync_records()?;
    store.create_bytes(&rel, clawboard_core::store::to_pretty_json(&fresh).as_bytes())?;
    list_fork(store.root(), id.as_str(), new_id.as_str())?;
    let outcome = match &held {
        Some((here, _lock)) => Some(run_fork(here, s, new_id.as_str())?),
        None => None,
    };
    let forked = Forked {
        task: new_id.to_string(),
        forked_from,
        recorded_attempts: copied,
        history_records: records,
        slices,
        outcome,
    };
    print_forked(s, &forked, id.as_str(), &point)?;
    Ok(EXIT_OK)
}

/// Each `--set` edit tried on the board as it stands at the fork point: one the
/// board would refuse is refused now, before anything is written.
fn trial_edits(board: &TaskBoard, seq: u64, sets: Vec<(BoardPath, Value)>) -> anyhow::Result<Vec<(String, Value, Op)>> {
    let mut trial = board.at(seq)?;
    let mut ops = Vec::new();
    for (path, value) in sets {
        let shown = path.to_string();
        let op = Op::set(path, value.clone()).map_err(|(p, why)| BadInput(format!("--set {p}: {why}")))?;
        op.check_value(clawboard_board::ops::DEFAULT_MAX_VALUE_BYTES)
            .and_then(|()| clawboard_board::ops::apply(&mut trial, &op))
            .map_err(|(p, why)| BadInput(format!("--set {p}: {why}")))?;
        ops.push((shown, value, op));
    }
    Ok(ops)
}

/// Runs the fork here (`--run`), on the held root: how it ended, in words.
fn run_fork(here: &clawboard_core::Store, s: &Settings, id: &str) -> anyhow::Result<String> {
    clawboard_roles::claims::claim(here, id)?;
    Ok(match super::run::drive_here(here, s, id, false)? {
        clawboard_roles::Outcome::Completed => "completed".to_owned(),
        clawboard_roles::Outcome::Failed(why) => format!("failed: {why}"),
        clawboard_roles::Outcome::Held(ids) => format!("waits for a human on {}", ids.join(", ")),
        clawboard_roles::Outcome::Stopped | clawboard_roles::Outcome::Fenced => "stopped".to_owned(),
    })
}

fn print_forked(s: &Settings, forked: &Forked, from: &str, point: &ForkPoint) -> anyhow::Result<()> {
    if s.json {
        return output::json(forked);
    }
    outln!(
        "{} forked from {from} at step {} (board seq {}): {} attempts, {} board records, {} slices copied as recorded",
        forked.task,
        point.step,
        point.seq,
        forked.recorded_attempts,
        forked.history_records,
        forked.slices
    )?;
    match &forked.outcome {
        Some(o) => outln!("{}: {o}", forked.task)?,
        None => outln!("{}: pending; a daemon on this tree runs it (or pass --run)", forked.task)?,
    }
    Ok(())
}

/// Where the forks made of task `id` on this node are listed, one id a line.
fn forks_file(root: &std::path::Path, id: &str) -> std::path::PathBuf {
    root.join(layout::STATE).join("forks").join(id)
}

/// The forks made of task `id` on this node (for its page).
pub fn forks_of(root: &std::path::Path, id: &str) -> Vec<String> {
    std::fs::read_to_string(forks_file(root, id))
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn list_fork(root: &std::path::Path, id: &str, fork: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let path = forks_file(root, id);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    writeln!(f, "{fork}")?;
    Ok(())
}

/// `--input FILE` for a fork of blueprint task `task`, read and checked as `clawboard run` does.
fn fork_input(
    task: &Task,
    file: &std::path::Path,
    s: &Settings,
) -> anyhow::Result<clawboard_blueprint::contract::Input> {
    let Some(bp) = task.extra.get("blueprint_id").and_then(Value::as_str) else {
        return Err(BadInput(format!(
            "--input: task {} is not a blueprint task (it has no blueprint_id)",
            task.task_id
        ))
        .into());
    };
    let (shown, v) = super::run::read_input(file, s.max_file_bytes)?;
    super::run::input_of(&shown, v, bp, s)
}

/// `PATH=JSON`.
fn parse_set(text: &str) -> anyhow::Result<(BoardPath, Value)> {
    let Some((path, json)) = text.split_once('=') else {
        return Err(BadInput(format!("--set {text:?}: not PATH=JSON (content.title.selected=\"…\")")).into());
    };
    let p = BoardPath::parse(path.trim()).map_err(|e| BadInput(format!("--set {path}: {}", e.reason)))?;
    let v: Value =
        serde_json::from_str(json).map_err(|e| BadInput(format!("--set {path}: the value is not JSON: {e}")))?;
    Ok((p, v))
}

/// Where a fork of `task` starts: before step `at`'s first attempt (the board as that
/// step was handed it), or after history record `seq`. Attempts before the point are
/// kept while none of them wrote the board after it or was handed a board newer than it.
pub fn fork_point(
    task: &str,
    recorded: &[Attempt],
    history: &[Record],
    handouts: &[Handout],
    at: Option<&str>,
    seq: Option<u64>,
) -> anyhow::Result<ForkPoint> {
    let handed_at =
        |a: &Attempt| handouts.iter().find(|h| h.instance.as_deref() == Some(&a.instance_id)).map(|h| h.board_seq);
    let last_write = |a: &Attempt| {
        history.iter().filter(|r| r.actor.instance.as_deref() == Some(&a.instance_id)).map(|r| r.seq).max()
    };
    let newest = history.last().map_or(0, |r| r.seq);
    let (cut, limit) = match (at, seq) {
        (Some(step), _) => {
            let Some(first) = recorded.iter().find(|a| a.step == step) else {
                let mut steps: Vec<&str> = recorded.iter().map(|a| a.step.as_str()).collect();
                steps.dedup();
                return Err(BadInput(format!(
                    "--at {step}: task {task} never reached that step (its steps: {})",
                    steps.join(", ")
                ))
                .into());
            };
            if !recorded.iter().any(|a| a.step == step && a.status != AttemptStatus::Running)
                && first.status == AttemptStatus::Running
            {
                return Err(BadInput(format!("--at {step}: the step has not finished yet in task {task}")).into());
            }
            // The board as the step saw it; without a slice, as it stood when the step started.
            let cut = handed_at(first).unwrap_or_else(|| seq_before(history, first));
            (cut, first.number)
        }
        (None, Some(n)) => {
            if n > newest {
                return Err(BadInput(format!("--seq {n}: task {task}'s board history ends at record {newest}")).into());
            }
            (n, u32::MAX)
        }
        (None, None) => return Err(BadInput("--at STEP or --seq N is required".into()).into()),
    };
    // The first attempt past the point: handed a newer board, or writing after it.
    let past = |a: &Attempt| {
        a.number >= limit
            || handed_at(a).is_some_and(|h| if at.is_some() { h >= cut } else { h > cut })
            || last_write(a).is_some_and(|w| w > cut)
            || a.status == AttemptStatus::Running
    };
    let first_live = recorded.iter().find(|a| past(a));
    if let (None, Some(n)) = (first_live, seq) {
        return Err(
            BadInput(format!("--seq {n}: every step of task {task} was done by then: nothing is left to run")).into()
        );
    }
    Ok(ForkPoint {
        step: first_live.map_or_else(String::new, |a| a.step.clone()),
        seq: cut,
        first_live_attempt: first_live.map_or(u32::MAX, |a| a.number),
    })
}

/// The last history record written before attempt `a` started (by time: for a
/// step handed no slice).
fn seq_before(history: &[Record], a: &Attempt) -> u64 {
    let started = a.started_at.instant();
    history.iter().take_while(|r| r.at.instant() < started).last().map_or(0, |r| r.seq)
}

/// Copies parts of a recorded task into a fork.
struct Copy<'s> {
    store: &'s Store,
    from: &'s str,
    to: &'s str,
}

impl Copy<'_> {
    /// Copies what the fork starts from, and makes a lifecycle fork's edits as a
    /// person on its board; on any failure removes every file of the fork.
    fn made(
        &self,
        s: &Settings,
        kept: &[&Attempt],
        history: &[Record],
        handouts: &[Handout],
        seq: u64,
        edits: Vec<Op>,
    ) -> anyhow::Result<(usize, usize, usize)> {
        let (acl, _) = crate::config::engine::load_acl(s)?;
        let made = self.all(kept, history, handouts, seq).and_then(|counts| {
            let fork_board = TaskBoard::new(self.store, self.to)?;
            for op in edits {
                fork_board.write(&acl, &Caller::human(), op).map_err(|e| BadInput(format!("--set: {e}")))?;
            }
            Ok(counts)
        });
        if made.is_err() {
            // Nothing of a fork that could not be made is left behind.
            let dir = self.store.path(&RelPath::new(&layout::task_file(self.to, ""))?);
            if let Err(rm) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), "cannot remove the fork's files: {rm}");
            }
        }
        made
    }

    /// The attempts, the history up to `seq` and the kept attempts' slices: how many of each.
    fn all(
        &self,
        kept: &[&Attempt],
        history: &[Record],
        handouts: &[Handout],
        seq: u64,
    ) -> anyhow::Result<(usize, usize, usize)> {
        let instances: HashSet<&str> = kept.iter().map(|x| x.instance_id.as_str()).collect();
        Ok((self.attempts(kept)?, self.history(history, seq)?, self.slices(handouts, &instances)?))
    }

    fn file(&self, rest: &str) -> anyhow::Result<bool> {
        let src = RelPath::new(&layout::task_file(self.from, rest))?;
        match self.store.read_bytes(&src) {
            Ok(bytes) => {
                self.store.write_record(&RelPath::new(&layout::task_file(self.to, rest))?, &bytes)?;
                Ok(true)
            }
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The attempts, each marked as the recorded task's, with its raw output and input.
    fn attempts(&self, kept: &[&Attempt]) -> anyhow::Result<usize> {
        let dir = attempts::attempts_dir(self.to);
        for a in kept {
            let mut copied = (*a).clone();
            copied.forked_from = Some(self.from.to_owned());
            for ext in ["stdout", "stderr", "input"] {
                self.file(&format!("{}/{}.{ext}", layout::ATTEMPTS_DIR, a.file_stem()))?;
            }
            attempts::save_in(self.store, &dir, &copied)?;
        }
        Ok(kept.len())
    }

    /// The history records up to `seq`, as they were (each keeps its actor).
    fn history(&self, history: &[Record], seq: u64) -> anyhow::Result<usize> {
        let kept: Vec<&Record> = history.iter().filter(|r| r.seq <= seq).collect();
        for r in &kept {
            self.file(&format!("board/history/{:010}.json", r.seq))?;
        }
        Ok(kept.len())
    }

    /// The slices handed to the kept attempts, numbered afresh, marked as reused.
    fn slices(&self, handouts: &[Handout], instances: &HashSet<&str>) -> anyhow::Result<usize> {
        let mut n = 0;
        for h in handouts.iter().filter(|h| h.instance.as_deref().is_some_and(|i| instances.contains(i))) {
            let mut copied = h.clone();
            copied.reused = true;
            ledger::record(self.store, self.to, &mut copied)?;
            n += 1;
        }
        Ok(n)
    }
}
