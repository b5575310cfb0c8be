//! The slice ledger (seed 003, `get_slice_history`): every slice handed to a role,
//! one file each in `tasks/{id}/board/slices/{n:06}.json`: the step, time, scope or
//! template, the slice's hash and o200k token count, the budget, the rungs applied,
//! what was missing, and, once the step ends, the whole board's count at the
//! slice's `board_seq` (counted while the role runs, off the step's path) and the
//! tokens the role reports using (OpenAI's `usage` shape).

use clawboard_core::{RelPath, Store, Timestamp, layout};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::slice::Slice;
use crate::task_board::BOARD_DIR;

pub const SLICES_DIR: &str = "slices";

/// What a role reports it used (`prompt_tokens`, `completion_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

impl Usage {
    /// The `usage` of a role's output, if it carries one in OpenAI's shape.
    pub fn from_output(output: &Value) -> Option<Usage> {
        Usage::from_usage(output.get("usage")?)
    }

    /// A `usage` object itself (`prompt_tokens`, `completion_tokens`).
    pub fn from_usage(u: &Value) -> Option<Usage> {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        if n("prompt_tokens").is_none() && n("completion_tokens").is_none() {
            return None;
        }
        Some(Usage {
            prompt_tokens: n("prompt_tokens").unwrap_or(0),
            completion_tokens: n("completion_tokens").unwrap_or(0),
        })
    }
}

/// One slice handed out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handout {
    pub n: u64,
    pub step: String,
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The board's history sequence number the slice was cut at.
    pub board_seq: u64,
    pub hash: String,
    pub tokenizer: String,
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u64>,
    #[serde(default)]
    pub rungs: Vec<String>,
    #[serde(default)]
    pub missing: Vec<String>,
    /// Tokens of the whole board at `board_seq`: what full-context passing would
    /// send. Counted while the role runs and recorded with the outcome; `null`
    /// while it runs, and for a run a crash cut short.
    #[serde(default)]
    pub full_tokens: Option<u64>,
    /// `handed` when given to the role; then `ok`, `failed`; or `over_budget` (never
    /// sent), or `recut`: over its budget in the model's own count, cut again (never sent).
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The slice in the model's own tokens, for a model whose provider counts
    /// them (`[llm.providers.*] count_tokens`); the budget holds in this count too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tokens: Option<u64>,
    /// Copied from the recorded task a fork was made of: handed and paid for there,
    /// not by this task (its totals count it apart, as reused).
    #[serde(default, skip_serializing_if = "is_false")]
    pub reused: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Handout {
    /// A ledger entry for `slice` (numbered when recorded).
    pub fn of(
        slice: &Slice,
        step: &str,
        role: &str,
        instance: Option<&str>,
        board_seq: u64,
        full_tokens: Option<u64>,
    ) -> Handout {
        Handout {
            n: 0,
            step: step.to_owned(),
            role: role.to_owned(),
            instance: instance.map(str::to_owned),
            at: Timestamp::now(),
            scope: Vec::new(),
            template: None,
            board_seq,
            hash: slice.hash.clone(),
            tokenizer: crate::tokens::TOKENIZER.to_owned(),
            tokens: slice.tokens,
            budget: slice.budget,
            rungs: slice.rungs.clone(),
            missing: slice.missing.clone(),
            full_tokens,
            outcome: "handed".to_owned(),
            usage: None,
            model_tokens: None,
            reused: false,
        }
    }
}

/// Totals over a task's ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub slices: u64,
    pub slice_tokens: u64,
    pub full_tokens: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The slices in the model's own tokens, over the entries that have the count.
    #[serde(skip_serializing_if = "is_zero")]
    pub model_tokens: u64,
    /// A fork's slices copied from the task it was forked from: counted here, not above.
    #[serde(skip_serializing_if = "is_zero")]
    pub reused_slices: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub reused_prompt_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub reused_completion_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn dir(task: &str) -> String {
    layout::task_file(task, &format!("{BOARD_DIR}/{SLICES_DIR}"))
}

fn rel(task: &str, n: u64) -> Result<RelPath> {
    Ok(RelPath::new(&format!("{}/{n:06}.json", dir(task)))?)
}

/// Records `entry` under the next number, which it sets.
pub fn record(store: &Store, task: &str, entry: &mut Handout) -> Result<u64> {
    let lock_rel = RelPath::new(&format!("{}/.ledger", dir(task)))?;
    let _lock = store.lock(&lock_rel)?;
    entry.n = numbers(store, task)?.last().map_or(1, |n| n + 1);
    store.write_record_json(&rel(task, entry.n)?, entry)?;
    Ok(entry.n)
}

/// Records `entry` (numbered by [`record`]) again, finished: the caller has set
/// its outcome, usage and full count. Only the run it was handed to writes an
/// entry after its number is taken, so no lock is needed.
pub fn finish(store: &Store, task: &str, entry: &Handout) -> Result<()> {
    store.write_record_json(&rel(task, entry.n)?, entry)?;
    Ok(())
}

fn read(store: &Store, r: &RelPath) -> Result<Handout> {
    let bytes = store.read_bytes(r)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::History {
        task: r.to_string(),
        file: r.to_string(),
        reason: format!("not a slice ledger entry: {e}"),
    })
}

/// Every entry of `task`'s ledger, in order.
pub fn list(store: &Store, task: &str) -> Result<Vec<Handout>> {
    numbers(store, task)?.into_iter().map(|n| read(store, &rel(task, n)?)).collect()
}

/// The entries' numbers, in order.
fn numbers(store: &Store, task: &str) -> Result<Vec<u64>> {
    Ok(store.list_numbered(&dir(task))?)
}

/// Totals over `entries` (slices never sent are not counted as sent).
pub fn totals(entries: &[Handout]) -> Totals {
    let mut t = Totals::default();
    for e in entries.iter().filter(|e| !matches!(e.outcome.as_str(), "over_budget" | "recut")) {
        if e.reused {
            t.reused_slices += 1;
            if let Some(u) = e.usage {
                t.reused_prompt_tokens += u.prompt_tokens;
                t.reused_completion_tokens += u.completion_tokens;
            }
            continue;
        }
        t.slices += 1;
        t.slice_tokens += e.tokens;
        t.full_tokens += e.full_tokens.unwrap_or(0);
        t.model_tokens += e.model_tokens.unwrap_or(0);
        if let Some(u) = e.usage {
            t.prompt_tokens += u.prompt_tokens;
            t.completion_tokens += u.completion_tokens;
        }
    }
    t
}
