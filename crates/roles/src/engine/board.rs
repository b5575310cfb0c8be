//! The lifecycle on the task's board (seeds 000 and 003): what the seed-002 steps
//! write there (the description into `meta.intent`, results into content, steps,
//! iterations, retries and errors into control), and the slice a role configured
//! with a `scope` or `template` is handed instead of the whole context, recorded in
//! the slice ledger with its counted tokens.

use std::sync::Arc;

use clawboard_board::ledger::{self, Usage};
use clawboard_board::slice::{self, DEFAULT_TRUNCATE_TOKENS, Spec};
use clawboard_board::{Caller, ErrorEntry, Op, Selector};
use clawboard_core::Timestamp;
use clawboard_core::formats::BoardFile;
use serde_json::{Value, json};

use super::{StepError, TaskRun};
use crate::config::RoleConfig;
use crate::context::StepInfo;

/// Cuts of a slice again when it is over its budget in the model's own count.
const MAX_RECUTS: u32 = 3;

/// A slice handed to a role, and its ledger entry.
pub(crate) struct Handed {
    pub data: Value,
    pub tokens: u64,
    pub budget: Option<u64>,
    /// As recorded (numbered, `handed`); finished when the run ends.
    pub entry: ledger::Handout,
    /// The board the slice was cut from, until [`TaskRun::count_full`] has
    /// counted it (then dropped, so that the next board write need not copy it).
    pub board: Option<Arc<BoardFile>>,
}

/// A lifecycle step as a board key: `iter-1/creator` → `iter-1-creator`; a
/// blueprint step without its `bp/`: `bp/r2/title-c1` → `r2-title-c1`.
pub(crate) fn step_key(step: &str) -> String {
    step.strip_prefix("bp/").unwrap_or(step).replace('/', "-")
}

/// True for a blueprint step the VM shows on the board itself, under its own
/// id (`Vm::show`: `running` before the run, its outcome once the output is
/// applied): the executor's status write would only restate it. A candidate, a
/// redo or a later round has a key of its own (`title-c1`), written here.
fn shown_by_vm(info: &StepInfo) -> bool {
    info.plan.is_some()
        && info.extra.get("step_id").and_then(Value::as_str).is_some_and(|id| step_key(&info.step) == id)
}

fn board_err(e: clawboard_board::Error) -> StepError {
    match e {
        clawboard_board::Error::Store(e) => StepError::Store(e),
        other => StepError::Failed(other.to_string()),
    }
}

impl TaskRun<'_> {
    /// Writes `op` as the daemon (the orchestrator), when the task keeps a board
    /// and `op` changes it (a value restated is not recorded again).
    pub(crate) fn board_write(&self, op: Result<Op, (String, String)>) -> Result<(), StepError> {
        self.board_write_as(&Caller::daemon(), op)
    }

    /// Writes `op` as `caller` (a blueprint step's role, as its component type),
    /// held to the zone table: a refusal is the step's failure, naming the rule.
    pub(crate) fn board_write_as(&self, caller: &Caller, op: Result<Op, (String, String)>) -> Result<(), StepError> {
        let Some(board) = &self.board else { return Ok(()) };
        let op = op.map_err(|(p, r)| StepError::Failed(format!("task {}: {p}: {r}", self.id)))?;
        board.write_if_changed(&self.engine.board_acl(), caller, op).map_err(board_err)?;
        Ok(())
    }

    /// The task's intent goes into `meta.intent` once.
    pub(crate) fn board_init(&self) -> Result<(), StepError> {
        let Some(board) = &self.board else { return Ok(()) };
        let acl = self.engine.board_acl();
        if board.read_meta(&acl, &Caller::daemon(), "intent").map_err(board_err)?.is_none() {
            self.board_write(Op::write_meta("intent", Value::String(self.task.description.clone())))?;
        }
        Ok(())
    }

    /// A step starts: its status, the stage, and (for team steps) the iteration.
    pub(crate) fn board_step_started(&self, info: &StepInfo) -> Result<(), StepError> {
        if self.board.is_none() {
            return Ok(());
        }
        if !shown_by_vm(info) {
            self.board_write(Op::update_step_status(&step_key(&info.step), "running"))?;
        }
        // A blueprint's VM keeps its own stage (`blueprint:ID`).
        if info.plan.is_none() {
            self.board_write(Op::write_control("current_stage", Value::String(info.kind.to_owned())))?;
        }
        if info.iteration > 0 {
            self.board_write(Op::write_control("iteration_count", json!(info.iteration)))?;
        }
        Ok(())
    }

    /// A step ended: `completed` or `failed`.
    pub(crate) fn board_step_ended(&self, info: &StepInfo, ok: bool) -> Result<(), StepError> {
        if self.board.is_none() || shown_by_vm(info) {
            return Ok(());
        }
        self.board_write(Op::update_step_status(&step_key(&info.step), if ok { "completed" } else { "failed" }))
    }

    /// An attempt failed: its error, and the step's retry count.
    pub(crate) fn board_attempt_failed(
        &self,
        info: &StepInfo,
        kind: &str,
        message: &str,
        retries: u32,
    ) -> Result<(), StepError> {
        if self.board.is_none() {
            return Ok(());
        }
        let e = ErrorEntry {
            step_id: step_key(&info.step),
            error_type: kind.to_owned(),
            message: message.chars().take(2000).collect(),
            timestamp: Timestamp::now().to_string(),
        };
        self.board_write(Ok(Op::append_error(&e)))?;
        self.board_write(Op::write_control(&format!("retries.{}", step_key(&info.step)), json!(retries)))
    }

    /// The slice for `role` at `info`, recorded in the ledger; `None` for a role
    /// without a scope or template. Over budget after every rung: the step fails
    /// (the ledger notes it as `over_budget`; nothing is sent).
    pub(crate) fn slice_for(
        &self,
        info: &StepInfo,
        role_id: &str,
        role: &RoleConfig,
        instance: &str,
        tighter: Option<u64>,
    ) -> Result<Option<Handed>, StepError> {
        let (scope, template, max_tokens) = match &info.plan {
            Some(p) => (p.scope.as_deref(), p.template.as_deref(), p.max_tokens),
            None => (role.scope.as_deref(), role.template.as_deref(), role.max_tokens),
        };
        // Cut again under a tighter o200k budget, the step's own still on the record.
        let (max_tokens, budget) = (tighter.or(max_tokens), max_tokens);
        if scope.is_none() && template.is_none() {
            return Ok(None);
        }
        // `clawboard run --full-context`: the whole board instead of the slice, no budget
        // (for measuring what slicing saves, never for production).
        let whole: Vec<String>;
        let (scope, template, max_tokens, budget) = if self.engine.roles().full_context {
            whole = clawboard_core::formats::Zone::ALL.iter().map(|z| format!("{}.*", z.name())).collect();
            (Some(whole.as_slice()), None, None, None)
        } else {
            (scope, template, max_tokens, budget)
        };
        let Some(board) = &self.board else {
            return Err(StepError::Failed(format!(
                "role {role_id} is handed a slice, but lifecycle.board is \"never\": the task keeps no board"
            )));
        };
        let templates = self.engine.templates();
        let at = format!("roles.{role_id}");
        let selector = Selector::of(scope, template, &templates, &at).map_err(|e| StepError::Failed(e.to_string()))?;
        let Some(selector) = selector else { return Ok(None) };
        let source = selector.source();
        let state = board.load_shared().map_err(board_err)?;
        let spec = Spec {
            step: info.step.clone(),
            source,
            max_tokens,
            // A cut under a tighter budget cuts long texts to half of it (room for
            // the slice's keys): one text over the budget would otherwise stay over it.
            truncate_tokens: role
                .truncate_tokens
                .unwrap_or(DEFAULT_TRUNCATE_TOKENS)
                .min(tighter.map_or(u64::MAX, |t| (t / 2).max(1))),
        };
        let (scope_text, template) = selector.describe();
        match slice::build(&state, &spec) {
            Ok(s) => {
                // The whole board's count is taken while the role runs (`count_full`).
                let mut entry = ledger::Handout::of(&s, &info.step, role_id, Some(instance), state.seq, None);
                entry.scope = scope_text;
                entry.template = template;
                entry.budget = budget;
                if let Some(t) = tighter {
                    entry.rungs.push(format!("model_count:{t}"));
                }
                ledger::record(self.engine.store(), &self.id, &mut entry).map_err(board_err)?;
                Ok(Some(Handed { data: s.data, tokens: s.tokens, budget, entry, board: Some(state) }))
            }
            Err(e @ clawboard_board::Error::OverBudget { .. }) => {
                if let clawboard_board::Error::OverBudget { size, budget, rungs, .. } = &e {
                    let empty = slice::Slice {
                        data: Value::Null,
                        tokens: *size,
                        budget: Some(*budget),
                        rungs: rungs.clone(),
                        missing: Vec::new(),
                        hash: String::new(),
                    };
                    let full = Some(self.full_count(&state));
                    let mut entry = ledger::Handout::of(&empty, &info.step, role_id, Some(instance), state.seq, full);
                    entry.scope = scope_text;
                    entry.template = template;
                    entry.outcome = "over_budget".into();
                    ledger::record(self.engine.store(), &self.id, &mut entry).map_err(board_err)?;
                }
                let msg = e.to_string();
                self.log_error(&info.step, &msg)?;
                self.board_attempt_failed(info, "slice_over_budget", &msg, 0)?;
                Err(StepError::Failed(msg))
            }
            Err(e) => Err(board_err(e)),
        }
    }

    /// For a model whose provider counts tokens: the slice's count in the model's
    /// own tokens goes into its ledger entry, and a slice over its budget in that
    /// count is cut again under a tighter o200k budget (the one it had, scaled by
    /// the two counts), at most [`MAX_RECUTS`] times; the superseded entries are
    /// kept as `recut`. Still over: the step fails as over budget, nothing sent.
    pub(crate) async fn fit_model_budget(
        &self,
        info: &StepInfo,
        role_id: &str,
        role: &RoleConfig,
        instance: &str,
        mut handed: Option<Handed>,
    ) -> Result<Option<Handed>, StepError> {
        let Some(llm) = role.llm.as_ref() else { return Ok(handed) };
        for cut in 0..=MAX_RECUTS {
            let Some(h) = handed.as_mut() else { return Ok(None) };
            let text = h.data.to_string();
            // A replay asks no server anything: the count recorded for the same slice, if any.
            let counted = match self.engine.recording() {
                Some(r) => r.model_tokens(instance, &h.entry.hash),
                None => crate::runner::count_model_tokens(llm, &text).await,
            };
            let Some(n) = counted else { return Ok(handed) };
            h.entry.model_tokens = Some(n);
            let Some(budget) = h.budget.filter(|b| n > *b) else { return Ok(handed) };
            if cut == MAX_RECUTS {
                break;
            }
            // Under the budget in the model's count too, as far as the ratio tells.
            let tighter = budget.saturating_mul(h.tokens) / n.max(1);
            let tighter = tighter.min(h.tokens.saturating_sub(1)).max(1);
            let mut superseded = h.entry.clone();
            superseded.outcome = "recut".into();
            ledger::finish(self.engine.store(), &self.id, &superseded).map_err(board_err)?;
            tracing::info!(task = %self.id, step = %info.step, model_tokens = n, budget, tighter, "the slice is over its budget in the model's count; cutting again");
            handed = self.slice_for(info, role_id, role, instance, Some(tighter))?;
        }
        let n = handed.as_ref().and_then(|h| h.entry.model_tokens).unwrap_or(0);
        let msg = format!(
            "step {}: the slice is over its budget in the model's own count ({n} tokens of {}) after {MAX_RECUTS} cuts",
            info.step, llm.model
        );
        if let Some(h) = handed {
            let mut entry = h.entry;
            entry.outcome = "over_budget".into();
            ledger::finish(self.engine.store(), &self.id, &entry).map_err(board_err)?;
        }
        self.log_error(&info.step, &msg)?;
        self.board_attempt_failed(info, "slice_over_budget", &msg, 0)?;
        Err(StepError::Failed(msg))
    }

    /// The whole board's tokens (what full-context passing would send), once per
    /// board seq: parallel steps and competing candidates cut at one seq share it.
    fn full_count(&self, board: &BoardFile) -> u64 {
        let mut known = self.full_tokens.lock();
        match *known {
            Some((seq, n)) if seq == board.seq => n,
            _ => {
                let n = slice::full_tokens(board);
                *known = Some((board.seq, n));
                n
            }
        }
    }

    /// Counts the board `handed` was cut from into its ledger entry: called while
    /// the role runs, so a step's path does not grow with the board.
    pub(crate) fn count_full(&self, handed: &mut Handed) {
        if let Some(board) = handed.board.take() {
            handed.entry.full_tokens = Some(self.full_count(&board));
        }
    }

    /// The run of a sliced role ended: its outcome, reported usage and the whole
    /// board's count go into the ledger.
    /// `usage` is what the run reported apart from its stdout (kept also when it failed).
    pub(crate) fn slice_finished(
        &self,
        mut handed: Handed,
        ok: bool,
        stdout: &[u8],
        usage: Option<&Value>,
    ) -> Result<ledger::Handout, StepError> {
        self.count_full(&mut handed);
        let mut entry = handed.entry;
        entry.usage = serde_json::from_slice::<Value>(stdout)
            .ok()
            .as_ref()
            .and_then(Usage::from_output)
            .or_else(|| usage.and_then(Usage::from_usage));
        entry.outcome = if ok { "ok" } else { "failed" }.to_owned();
        ledger::finish(self.engine.store(), &self.id, &entry).map_err(board_err)?;
        Ok(entry)
    }

    /// The ledger's totals into `result.json` (`tokens`) and `status.md`, when any
    /// slice was handed out; the prompt and completion tokens spent.
    pub(crate) fn record_token_totals(&self) -> Result<Option<(u64, u64)>, clawboard_core::Error> {
        let entries = match ledger::list(self.engine.store(), &self.id) {
            Ok(e) => e,
            Err(clawboard_board::Error::Store(e)) => return Err(e),
            Err(e) => {
                tracing::warn!(task = %self.id, "the slice ledger cannot be read: {e}");
                return Ok(None);
            }
        };
        if entries.is_empty() {
            return Ok(None);
        }
        let t = ledger::totals(&entries);
        let r = clawboard_core::RelPath::new(&clawboard_core::layout::task_file(
            &self.id,
            clawboard_core::layout::RESULT_FILE,
        ))?;
        if self.engine.store().exists(&r) {
            self.engine.store().update_json(&r, |res: &mut clawboard_core::formats::TaskResult| {
                let mut tokens = json!({
                    "tokenizer": clawboard_board::tokens::TOKENIZER,
                    "slices": t.slices,
                    "sliceTokens": t.slice_tokens,
                    "fullContextTokens": t.full_tokens,
                    "promptTokens": t.prompt_tokens,
                    "completionTokens": t.completion_tokens,
                });
                // A fork: what the steps it copied had spent in the recorded task.
                if t.reused_slices > 0 {
                    tokens["reused"] = json!({
                        "slices": t.reused_slices,
                        "promptTokens": t.reused_prompt_tokens,
                        "completionTokens": t.reused_completion_tokens,
                    });
                }
                res.extra.insert("tokens".into(), tokens);
            })?;
        }
        let spent = (t.prompt_tokens, t.completion_tokens);
        self.progress(|p| p.tokens = Some(t));
        Ok(Some(spent))
    }
}
