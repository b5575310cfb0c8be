//! One drive of one task: its attempts so far, its progress page and board, and the
//! lifecycle's steps in order (PM, the team by priority, the validator, iterations,
//! the harvest), each one skipped when it has an `ok` attempt.

use std::sync::Arc;

use clawboard_core::formats::Task;
use clawboard_core::lock::Lock;
use clawboard_core::{Error, RelPath, Timestamp, layout};
use clawboard_records::attempts::{self, Attempt};
use clawboard_records::{escalations, gm};
use serde_json::{Map, Value, json};

use super::{Engine, StepError, board};
use crate::config::RolesConfig;
use crate::context::StepInfo;
use crate::output::{HarvestOutput, PmOutput, TeamPick, ValidatorOutput, WorkerOutput, check_harvest};
use crate::status_page::{self, Progress};

/// One drive of one task.
pub(crate) struct TaskRun<'e> {
    pub(crate) engine: &'e Engine,
    pub(crate) task: Task,
    pub(crate) id: String,
    pub(crate) attempts: Lock<Vec<Attempt>>,
    /// What `status.md` shows; rendered by `status` off the step's path.
    pub(crate) page: Arc<Lock<Progress>>,
    /// The task's board, when the config keeps boards.
    pub(crate) board: Option<clawboard_board::TaskBoard>,
    /// Writes `status.md` off the step's path.
    status: super::page::PageWriter,
    /// The whole board's size in tokens at a seq (every slice's ledger entry
    /// states it; counted once per board version, not once per slice).
    pub(crate) full_tokens: Lock<Option<(u64, u64)>>,
    /// The task's trace (`trace.json`), when spans are exported.
    pub(crate) trace: Option<crate::telemetry::TaskTrace>,
    /// Role runs' spans waiting for their board writes to be counted.
    unsent: Lock<Unsent>,
}

/// Ended role-run spans not sent yet, and the board writes counted so far.
#[derive(Default)]
struct Unsent {
    spans: Vec<(String, crate::telemetry::SpanData)>,
    /// History records up to this seq are counted in `writes`.
    counted: u64,
    /// Board records written per instance.
    writes: std::collections::HashMap<String, u64>,
}

pub(super) fn rel(task_id: &str, file: &str) -> Result<RelPath, Error> {
    RelPath::new(&layout::task_file(task_id, file))
}

impl Drop for TaskRun<'_> {
    /// Spans still held (a step that stopped or failed early) are sent.
    fn drop(&mut self) {
        self.send_spans();
    }
}

impl<'e> TaskRun<'e> {
    pub(super) fn open(engine: &'e Engine, task: Task, cfg: &RolesConfig) -> Result<TaskRun<'e>, Error> {
        let id = task.task_id.to_string();
        let mut loaded = attempts::load(&engine.store, &id)?;
        // Attempts a crash cut short: record them as interrupted, with the escalations
        // they raised through the API before the crash (which hold the task once their
        // step has run again, as if the record had listed them).
        let cut: Vec<String> = loaded
            .iter()
            .filter(|a| a.status == attempts::AttemptStatus::Running)
            .map(|a| a.instance_id.clone())
            .collect();
        let raised = if cut.is_empty() { Vec::new() } else { escalations::raised_by(&engine.store, &id, &cut)? };
        let trace = super::spans::open_trace(engine, &task, &id);
        for a in loaded.iter_mut().filter(|a| a.status == attempts::AttemptStatus::Running) {
            for (_, e) in raised.iter().filter(|(i, _)| *i == a.instance_id) {
                if !a.escalations.contains(e) {
                    a.escalations.push(e.clone());
                }
            }
            a.status = attempts::AttemptStatus::Interrupted;
            a.error = Some("interrupted: the daemon stopped while this ran".into());
            a.ended_at = Some(Timestamp::now());
            attempts::save(&engine.store, &id, a)?;
        }
        let cut_short: Vec<&Attempt> = loaded.iter().filter(|a| cut.contains(&a.instance_id)).collect();
        super::spans::interrupted(trace.as_ref(), &id, &cut_short);
        if task.status == clawboard_core::formats::TaskStatus::Running {
            super::spans::resumed(trace.as_ref(), &id, cut_short.len());
        }
        let page =
            Progress { max_iterations: cfg.lifecycle.max_iterations, attempts: loaded.len(), ..Progress::default() };
        // The id is a checked task id, so the board always opens.
        // A blueprint task (or a writing task a PM may hand to a blueprint) always keeps one.
        let blueprints = task.extra.contains_key("blueprint_id")
            || (task.kind == clawboard_core::formats::TaskType::Writing && !engine.blueprints().blueprints.is_empty());
        let board = (cfg.keeps_boards() || blueprints)
            .then(|| clawboard_board::TaskBoard::new(&engine.store, &id).ok().map(clawboard_board::TaskBoard::cached))
            .flatten();
        let page = Arc::new(Lock::new(page));
        let render = {
            let (task, page) = (task.clone(), Arc::clone(&page));
            move || status_page::render(&task, &page.lock())
        };
        let status =
            super::page::PageWriter::new(engine.store.clone(), rel(&id, layout::STATUS_FILE)?, id.clone(), render);
        Ok(TaskRun {
            engine,
            task,
            id,
            attempts: Lock::new(loaded),
            page,
            board,
            status,
            full_tokens: Lock::new(None),
            trace,
            unsent: Lock::new(Unsent::default()),
        })
    }

    /// Keeps instance `instance`'s ended span until [`TaskRun::send_spans`].
    pub(crate) fn hold_span(&self, instance: &str, span: crate::telemetry::SpanData) {
        self.unsent.lock().spans.push((instance.to_owned(), span));
    }

    /// Sends the role-run spans held so far, each with the board records its
    /// instance wrote (read from the board's history since the last count). A
    /// history that cannot be read sends them without the count.
    pub(crate) fn send_spans(&self) {
        let mut unsent = self.unsent.lock();
        if unsent.spans.is_empty() {
            return;
        }
        let records = match &self.board {
            Some(b) => b.history_since(unsent.counted),
            None => Ok(Vec::new()),
        };
        let counted = match records {
            Ok(records) => {
                for r in records {
                    unsent.counted = unsent.counted.max(r.seq);
                    if let Some(i) = r.actor.instance {
                        *unsent.writes.entry(i).or_default() += 1;
                    }
                }
                true
            }
            Err(e) => {
                tracing::debug!(task = %self.id, "role-run spans sent without their board writes: {e}");
                false
            }
        };
        for (instance, span) in std::mem::take(&mut unsent.spans) {
            let writes = unsent.writes.get(&instance).copied().unwrap_or(0);
            if counted {
                super::spans::sent_with_writes(span, writes);
            } else {
                crate::telemetry::emit(span);
            }
        }
    }

    /// Changes the progress page and has it written (off this thread: see `page.rs`).
    pub(crate) fn progress(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.page.lock());
        self.status.changed();
    }

    /// Writes the progress page now: on disk when this returns.
    pub(super) fn flush_status(&self) {
        self.status.flush();
    }

    /// Appends a line to the task's `errors.log`.
    pub(crate) fn log_error(&self, step: &str, msg: &str) -> Result<(), Error> {
        let line = format!("{} {step}: {}\n", Timestamp::now(), msg.replace('\n', "\n    "));
        self.engine.store.append_text(&rel(&self.id, layout::ERRORS_FILE)?, &line)
    }

    /// Waits on undecided escalations that need approval; fails on a rejected one.
    /// The escalations are those of every attempt of `attempt`'s step: in its output,
    /// or raised through the API, where a run that failed later may have raised one.
    pub(super) fn check_holds(&self, attempt: &Attempt) -> Result<(), StepError> {
        let mut ids = attempt.escalations.clone();
        for a in self.attempts.lock().iter().filter(|a| a.step == attempt.step) {
            for id in &a.escalations {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
        }
        let mut waiting = Vec::new();
        for id in &ids {
            let e = escalations::load(&self.engine.store, id)?;
            if !e.requires_human_approval {
                continue;
            }
            match e.decision {
                None => waiting.push(id.clone()),
                Some(clawboard_core::formats::Decision::Rejected) => {
                    let why = e.note.as_deref().unwrap_or("no note given");
                    return Err(StepError::Failed(format!(
                        "escalation {id} was rejected by {}: {why}",
                        e.decided_by.as_deref().unwrap_or("a human")
                    )));
                }
                Some(clawboard_core::formats::Decision::Approved) => {}
            }
        }
        if waiting.is_empty() { Ok(()) } else { Err(StepError::Held(waiting)) }
    }

    pub(super) async fn lifecycle(&self, cfg: &RolesConfig) -> Result<(), StepError> {
        self.board_init()?;
        if let Some((bp, input)) = self.blueprint_task()? {
            return self.blueprint_flow(cfg, bp, input).await;
        }
        // 1. The PM picks the team (or names a blueprint as the workflow).
        let pm = self.pm_of(cfg)?;
        let pm_out = self.pm_step(cfg, &pm).await?;
        if let Some(bp) = pm_out.workflow.as_deref().and_then(|w| self.engine.blueprints().get(w).ok()) {
            let input = self.input_from_task(&bp.id)?;
            return self.blueprint_flow(cfg, bp, input).await;
        }
        let groups = priority_groups(&pm_out.team);

        // 2. The team runs, the validator judges, the team iterates.
        let max = cfg.lifecycle.max_iterations;
        let mut last_validation: Option<Value> = None;
        for i in 1..=max {
            let round = Round { i, max, team: &pm_out.team, validation: &last_validation };
            let done = self.team_round(&round, &groups).await?;
            let result = self.ensure_result(i, &done)?;
            let Some(validator) = &cfg.lifecycle.validator else { break };
            let (_, vo) = self.validate(validator, i, max, json!({"result": result, "team": pm_out.team})).await?;
            if vo.pass {
                break;
            }
            if i == max {
                return Err(self.disagreement(&pm, validator, &pm_out.team, max, &vo));
            }
            last_validation = Some(
                json!({"iteration": i, "score": vo.score, "pass": vo.pass, "issues": vo.issues, "suggestions": vo.suggestions}),
            );
        }

        // 3. Memory harvest.
        self.harvest(cfg, json!(pm_out.team)).await
    }

    /// The task's PM: the one it names, else the one the config names for its type.
    fn pm_of(&self, cfg: &RolesConfig) -> Result<String, StepError> {
        match (&self.task.assigned_pm, cfg.lifecycle.pm_for_type.get(&self.task.kind)) {
            (Some(pm), _) => Ok(pm.to_string()),
            (None, Some(pm)) => Ok(pm.clone()),
            (None, None) => Err(StepError::Failed(format!(
                "no PM for this task: set assignedPM in task.json or lifecycle.pm_for_type.{} in the config",
                self.task.kind
            ))),
        }
    }

    /// The PM's step: a team of configured roles (or a blueprint as the workflow),
    /// its escalations decided, and `team.json` written.
    async fn pm_step(&self, cfg: &RolesConfig, pm: &str) -> Result<PmOutput, StepError> {
        let workers: Vec<String> = cfg.roles.keys().cloned().collect();
        let info = StepInfo {
            kind: "pm",
            reply: None,
            step: "pm".into(),
            iteration: 0,
            max_iterations: cfg.lifecycle.max_iterations,
            extra: obj(json!({"availableRoles": workers})),
            plan: None,
        };
        let roles = cfg.roles.clone();
        let catalog = self.engine.blueprints();
        let (pm_attempt, pm_out) = self
            .step::<PmOutput>(&info, pm, move |o| {
                // A PM that names a blueprint as the workflow needs no team.
                if o.team.is_empty() && o.workflow.as_deref().is_none_or(|w| catalog.get(w).is_err()) {
                    return Err("stdout /team: the team is empty; name at least one role".into());
                }
                for (i, m) in o.team.iter().enumerate() {
                    if !roles.contains_key(&m.role) {
                        return Err(format!(
                            "stdout /team/{i}/role: role {:?} is not configured under [roles]",
                            m.role
                        ));
                    }
                }
                Ok(())
            })
            .await?;
        self.check_holds(&pm_attempt)?;
        let team_rel = rel(&self.id, layout::TEAM_FILE)?;
        if !self.engine.store.exists(&team_rel) {
            self.engine.store.write_json(&team_rel, &self.team_composition(pm, &pm_out)?)?;
        }
        Ok(pm_out)
    }

    /// Round `round.i` of the team: each priority group in turn, its roles at
    /// once, each handed what the groups before it returned; every result goes
    /// on the board. A group with a held escalation stops the round.
    async fn team_round(
        &self,
        round: &Round<'_>,
        groups: &[(u32, Vec<String>)],
    ) -> Result<Vec<(Attempt, WorkerOutput)>, StepError> {
        let mut done: Vec<(Attempt, WorkerOutput)> = Vec::new();
        for (_, group) in groups {
            let previous: Vec<Value> =
                done.iter().map(|(a, o)| json!({"role": a.role, "summary": o.summary, "output": o.output})).collect();
            let extra = obj(json!({"team": round.team, "previous": previous, "validation": round.validation}));
            let steps = group.iter().map(|role| {
                let info = StepInfo {
                    kind: "team",
                    reply: None,
                    step: format!("iter-{}/{role}", round.i),
                    iteration: round.i,
                    max_iterations: round.max,
                    extra: extra.clone(),
                    plan: None,
                };
                let role = role.clone();
                async move { self.step::<WorkerOutput>(&info, &role, |_| Ok(())).await }
            });
            let results = futures_util::future::join_all(steps).await;
            let mut held = Vec::new();
            for r in results {
                let (a, o) = r?;
                if self.board.is_some() {
                    let key = board::step_key(&a.role);
                    self.board_write(clawboard_board::Op::write_content(
                        "results",
                        &key,
                        json!({"summary": o.summary, "output": o.output, "iteration": round.i}),
                    ))?;
                }
                match self.check_holds(&a) {
                    Err(StepError::Held(ids)) => held.extend(ids),
                    other => other?,
                }
                done.push((a, o));
            }
            if !held.is_empty() {
                return Err(StepError::Held(held));
            }
        }
        Ok(done)
    }

    /// The validator failed the last round: recorded in `gm/` for arbitration,
    /// and the task fails with the validator's issues.
    fn disagreement(&self, pm: &str, validator: &str, picks: &[TeamPick], max: u32, vo: &ValidatorOutput) -> StepError {
        let issues: Vec<String> = vo.issues.iter().map(|x| x.description.clone()).collect();
        let team: Vec<String> = picks.iter().map(|m| m.role.clone()).collect();
        let d = gm::Disagreement {
            task: &self.task,
            pm,
            validator,
            team: &team,
            iterations: max,
            score: vo.score,
            issues: &issues,
        };
        if let Err(e) = gm::record_disagreement(&self.engine.store, &d) {
            tracing::warn!(task = %self.id, "cannot write {}: {e}", layout::GM_ARBITRATIONS);
        }
        StepError::Failed(format!(
            "validation failed {max} times (last score {}); issues: {}",
            vo.score,
            issues.join("; ")
        ))
    }
}

/// One round of the team: its number of `max`, the team the PM picked, and the
/// validator's verdict on the round before (none in the first).
struct Round<'a> {
    i: u32,
    max: u32,
    team: &'a [TeamPick],
    validation: &'a Option<Value>,
}

/// The PM's picks grouped by priority, lowest first; a group's roles run at once.
fn priority_groups(picks: &[TeamPick]) -> Vec<(u32, Vec<String>)> {
    let mut sorted = picks.to_vec();
    sorted.sort_by_key(|m| m.priority);
    let mut groups: Vec<(u32, Vec<String>)> = Vec::new();
    for m in sorted {
        match groups.last_mut() {
            Some((p, roles)) if *p == m.priority => roles.push(m.role),
            _ => groups.push((m.priority, vec![m.role])),
        }
    }
    groups
}

impl TaskRun<'_> {
    /// The validator's step for round `i` (`extra`: the result and the team),
    /// recorded in `validation.json` and on the board.
    pub(super) async fn validate(
        &self,
        validator: &str,
        i: u32,
        max: u32,
        extra: Value,
    ) -> Result<(Attempt, ValidatorOutput), StepError> {
        let info = StepInfo {
            kind: "validator",
            reply: None,
            step: format!("iter-{i}/validator"),
            iteration: i,
            max_iterations: max,
            extra: obj(extra),
            plan: None,
        };
        let (va, mut vo) = self
            .step::<ValidatorOutput>(&info, validator, |o| {
                if (0.0..=10.0).contains(&o.score) {
                    Ok(())
                } else {
                    Err(format!("stdout /score: {} is not within 0 and 10", o.score))
                }
            })
            .await?;
        if let Some(min) = self.engine.roles().lifecycle.pass_score {
            // The score decides (the validator's own `pass` stays in its attempt's reply).
            vo.pass = vo.score >= min;
        }
        self.check_holds(&va)?;
        self.ensure_validation(i, &va, &vo)?;
        self.board_write(clawboard_board::Op::write_control(
            "validation",
            json!({"iteration": i, "score": vo.score, "pass": vo.pass}),
        ))?;
        Ok((va, vo))
    }

    /// The memory harvest of the result, when a harvester is configured.
    pub(super) async fn harvest(&self, cfg: &RolesConfig, team: Value) -> Result<(), StepError> {
        let Some(harvester) = &cfg.lifecycle.harvester else { return Ok(()) };
        let result = self
            .engine
            .store
            .read_bytes(&rel(&self.id, layout::RESULT_FILE)?)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        let info = StepInfo {
            kind: "harvest",
            reply: None,
            step: "harvest".into(),
            iteration: 0,
            max_iterations: cfg.lifecycle.max_iterations,
            extra: obj(json!({"result": result, "team": team})),
            plan: None,
        };
        let (ha, ho) = self.step::<HarvestOutput>(&info, harvester, check_harvest).await?;
        self.check_holds(&ha)?;
        self.ensure_harvest(&ho)?;
        Ok(())
    }
}

pub(super) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
