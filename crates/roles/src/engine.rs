//! The task lifecycle (seed 002): pending → running → PM picks the team → the team
//! runs in priority order → result → validation (the team iterates while it fails,
//! up to `max_iterations`) → memory harvest → completed (or failed).
//!
//! Everything needed to resume lives in the task directory: a step is done when it
//! has an attempt with status `ok`, so a restarted daemon continues each task from
//! its last finished step, and no step that finished runs again.

mod board;
pub mod step;

use std::sync::Arc;

use clawboard_core::formats::{
    Contribution, Member, MemoryHarvest, MemoryQueue, PmDecision, QueueEntry, QueueStatus, Task, TaskResult,
    TaskStatus, TeamComposition, Validation, ValidationResult,
};
use clawboard_core::lock::Lock;
use clawboard_core::{Error, Id, RelPath, Store, Timestamp, layout};
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, watch};

use crate::attempts::{self, Attempt};
use crate::claims;
use crate::config::RolesConfig;
use crate::context::StepInfo;
use crate::escalations;
use crate::output::{HarvestOutput, PmOutput, ValidatorOutput, WorkerOutput, check_harvest};
use crate::status_page::{self, Progress};

/// How a drive of a task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed,
    Failed(String),
    /// Waiting for decisions on these escalations.
    Held(Vec<String>),
    /// The daemon is stopping; the task resumes on the next start.
    Stopped,
    /// Another node took the task over: this node stopped and wrote nothing more.
    Fenced,
}

/// Why a step did not produce its output.
#[derive(Debug)]
pub(crate) enum StepError {
    Failed(String),
    Held(Vec<String>),
    Stopped,
    Fenced,
    Store(Error),
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Store(e)
    }
}

/// Signals from the daemon: `stopping` (start nothing new) and `kill` (interrupt runs).
#[derive(Debug, Clone)]
pub struct Shutdown {
    pub stopping: watch::Receiver<bool>,
    pub kill: watch::Receiver<bool>,
}

impl Shutdown {
    /// Signals that never fire (for one-shot use and tests).
    pub fn never() -> Shutdown {
        let (s, stopping) = watch::channel(false);
        let (k, kill) = watch::channel(false);
        // Keep the senders alive for the life of the program: the receivers then
        // simply never change.
        std::mem::forget(s);
        std::mem::forget(k);
        Shutdown { stopping, kill }
    }
}

/// Runs tasks' lifecycles. Cheap to share; one per daemon.
pub struct Engine {
    pub(crate) store: Store,
    config: Lock<Arc<RolesConfig>>,
    pub(crate) roles: Arc<Semaphore>,
    pub(crate) shutdown: Shutdown,
    /// Role instances running now, for the API: (instance, role, task, step, started).
    pub(crate) instances: Lock<Vec<InstanceInfo>>,
    /// Tasks another node took over: never driven or written here again.
    fenced: Lock<std::collections::HashSet<String>>,
    /// Role runs since start, by outcome (`ok`, `failed`, `timed_out`, `interrupted`).
    runs: Lock<std::collections::BTreeMap<&'static str, u64>>,
    /// The access policy: a role's context holds only the files its R cells allow.
    /// Unset (unit tests, tools), nothing is filtered.
    acl: Lock<Option<Arc<clawboard_core::acl::Acl>>>,
    /// Slice templates by id (the seed's four unless others are loaded).
    templates: Lock<Arc<std::collections::BTreeMap<String, clawboard_board::Template>>>,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceInfo {
    pub id: String,
    pub role: String,
    pub task_id: String,
    pub step: String,
    pub started_at: String,
    /// The instance's secret (`CLAWBOARD_TOKEN`): never shown, valid while it runs.
    #[serde(skip)]
    pub token: String,
}

impl Engine {
    pub fn new(store: Store, config: RolesConfig, shutdown: Shutdown) -> Engine {
        let roles = Arc::new(Semaphore::new(config.lifecycle.max_parallel_roles));
        Engine {
            store,
            config: Lock::new(Arc::new(config)),
            roles,
            shutdown,
            instances: Lock::new(Vec::new()),
            fenced: Lock::new(Default::default()),
            runs: Lock::new(Default::default()),
            acl: Lock::new(None),
            templates: Lock::new(Arc::new(clawboard_board::template::load(None).unwrap_or_default())),
        }
    }

    /// Sets the slice templates roles may name.
    pub fn set_templates(&self, t: std::collections::BTreeMap<String, clawboard_board::Template>) {
        *self.templates.lock() = Arc::new(t);
    }

    pub fn templates(&self) -> Arc<std::collections::BTreeMap<String, clawboard_board::Template>> {
        self.templates.lock().clone()
    }

    /// The policy board writes are checked against (the seed's when none was set).
    pub fn board_acl(&self) -> Arc<clawboard_core::acl::Acl> {
        static SEED: std::sync::OnceLock<Option<Arc<clawboard_core::acl::Acl>>> = std::sync::OnceLock::new();
        if let Some(a) = self.acl.lock().clone() {
            return a;
        }
        SEED.get_or_init(|| clawboard_core::acl::Acl::seed().ok().map(Arc::new))
            .clone()
            .unwrap_or_else(|| Arc::new(clawboard_core::acl::Acl::empty()))
    }

    /// Sets the access policy the role contexts are filtered by.
    pub fn set_acl(&self, acl: Arc<clawboard_core::acl::Acl>) {
        *self.acl.lock() = Some(acl);
    }

    /// May `role`, running for `task`, read `path`? `Err` holds the rule that refused it.
    pub(crate) fn may_read(&self, role: &str, task: &str, path: &str) -> Result<(), String> {
        let acl = self.acl.lock().clone();
        match acl {
            Some(acl) => {
                let d = acl.check_instance(role, task, clawboard_core::acl::Op::Read, path);
                if d.allowed { Ok(()) } else { Err(d.rule) }
            }
            None => Ok(()),
        }
    }

    /// Another node holds `task_id` now: its drive stops at the next step and writes nothing more.
    pub fn fence(&self, task_id: &str) {
        self.fenced.lock().insert(task_id.to_owned());
    }

    /// This node holds `task_id` again (it took the task back over).
    pub fn unfence(&self, task_id: &str) {
        self.fenced.lock().remove(task_id);
    }

    pub fn is_fenced(&self, task_id: &str) -> bool {
        self.fenced.lock().contains(task_id)
    }

    /// The config in force; a reload takes effect at the next step.
    pub fn config(&self) -> Arc<RolesConfig> {
        self.config.lock().clone()
    }

    /// Replaces the config (SIGHUP). Raising `max_parallel_roles` adds permits at once.
    pub fn reload(&self, new: RolesConfig) {
        let old = self.config();
        if new.lifecycle.max_parallel_roles > old.lifecycle.max_parallel_roles {
            self.roles.add_permits(new.lifecycle.max_parallel_roles - old.lifecycle.max_parallel_roles);
        }
        *self.config.lock() = Arc::new(new);
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn count_run(&self, status: crate::attempts::AttemptStatus) {
        use crate::attempts::AttemptStatus as S;
        let name = match status {
            S::Ok => "ok",
            S::Failed => "failed",
            S::TimedOut => "timed_out",
            S::Interrupted => "interrupted",
            S::Running => return,
        };
        *self.runs.lock().entry(name).or_default() += 1;
    }

    /// Role runs since the engine started, by outcome.
    pub fn run_counts(&self) -> Vec<(&'static str, u64)> {
        self.runs.lock().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The running instance whose token is `token` (compared in constant time with
    /// every live token); none once the instance ended.
    pub fn instance_by_token(&self, token: &str) -> Option<InstanceInfo> {
        let v = self.instances.lock();
        let mut found = None;
        for i in v.iter() {
            if crate::constant_time_eq(i.token.as_bytes(), token.as_bytes()) && !i.token.is_empty() {
                found = Some(i.clone());
            }
        }
        found
    }

    /// Makes `token` invalid (its instance ended).
    pub(crate) fn revoke_token(&self, token: &str) {
        for i in self.instances.lock().iter_mut().filter(|i| i.token == token) {
            i.token.clear();
        }
    }

    pub fn running_instances(&self) -> Vec<InstanceInfo> {
        self.instances.lock().clone()
    }

    /// Drives `task_id` as far as it can go now. An `Err` is a storage failure: the
    /// task stays active and is resumed later.
    pub async fn drive(&self, task_id: &str) -> Result<Outcome, Error> {
        if self.is_fenced(task_id) {
            return Ok(Outcome::Fenced);
        }
        let task_rel = RelPath::new(&layout::task_file(task_id, layout::TASK_FILE))?;
        let mut task: Task = self.store.read(&task_rel)?;
        if matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
            claims::finish(&self.store, task_id)?;
            return Ok(if task.status == TaskStatus::Completed {
                Outcome::Completed
            } else {
                Outcome::Failed("already failed".into())
            });
        }
        let cfg = self.config();
        let mut run = TaskRun::open(self, task.clone(), &cfg)?;
        if task.status == TaskStatus::Pending {
            task.status = TaskStatus::Running;
            run.task = task.clone();
        }
        // pending → running is written while the first role starts, not before: a
        // crash in between leaves `pending`, which resumes the same way.
        let mark_running = async {
            if run.task.status == TaskStatus::Running
                && self.store.read::<Task>(&task_rel).is_ok_and(|t| t.status == TaskStatus::Pending)
            {
                self.store.write_json(&task_rel, &run.task)?;
            }
            Ok::<(), Error>(())
        };
        let (result, marked) = tokio::join!(run.lifecycle(&cfg), mark_running);
        marked?;
        if self.is_fenced(task_id) {
            return Ok(Outcome::Fenced);
        }
        let outcome = match result {
            Ok(()) => {
                run.record_token_totals()?;
                task.status = TaskStatus::Completed;
                task.completed_at = Some(Timestamp::now());
                self.store.write_json(&task_rel, &task)?;
                run.task = task;
                run.progress(|p| {
                    p.step = "done".into();
                    p.outcome = Some("completed".into());
                    p.held_by.clear();
                });
                claims::finish(&self.store, task_id)?;
                Outcome::Completed
            }
            Err(StepError::Failed(reason)) => {
                run.write_partial_result(&reason)?;
                run.record_token_totals()?;
                task.status = TaskStatus::Failed;
                task.completed_at = Some(Timestamp::now());
                self.store.write_json(&task_rel, &task)?;
                run.task = task;
                run.log_error("task", &reason)?;
                run.progress(|p| {
                    p.outcome = Some("failed".into());
                    p.last_error = Some(reason.clone());
                    p.held_by.clear();
                });
                claims::finish(&self.store, task_id)?;
                Outcome::Failed(reason)
            }
            Err(StepError::Held(ids)) => {
                run.progress(|p| p.held_by = ids.clone());
                Outcome::Held(ids)
            }
            Err(StepError::Stopped) => Outcome::Stopped,
            Err(StepError::Fenced) => return Ok(Outcome::Fenced),
            Err(StepError::Store(e)) => return Err(e),
        };
        run.flush_status();
        Ok(outcome)
    }
}

/// One drive of one task.
pub(crate) struct TaskRun<'e> {
    pub(crate) engine: &'e Engine,
    pub(crate) task: Task,
    pub(crate) id: String,
    pub(crate) attempts: Lock<Vec<Attempt>>,
    pub(crate) page: Lock<Progress>,
    /// The task's board, when the config keeps boards.
    pub(crate) board: Option<clawboard_board::TaskBoard>,
}

fn rel(task_id: &str, file: &str) -> Result<RelPath, Error> {
    RelPath::new(&layout::task_file(task_id, file))
}

impl<'e> TaskRun<'e> {
    fn open(engine: &'e Engine, task: Task, cfg: &RolesConfig) -> Result<TaskRun<'e>, Error> {
        let id = task.task_id.to_string();
        let mut loaded = attempts::load(&engine.store, &id)?;
        // Attempts a crash cut short: record them as interrupted.
        for a in loaded.iter_mut().filter(|a| a.status == attempts::AttemptStatus::Running) {
            a.status = attempts::AttemptStatus::Interrupted;
            a.error = Some("interrupted: the daemon stopped while this ran".into());
            a.ended_at = Some(Timestamp::now());
            attempts::save(&engine.store, &id, a)?;
        }
        let page =
            Progress { max_iterations: cfg.lifecycle.max_iterations, attempts: loaded.len(), ..Progress::default() };
        // The id is a checked task id, so the board always opens.
        let board = cfg.keeps_boards().then(|| clawboard_board::TaskBoard::new(&engine.store, &id).ok()).flatten();
        Ok(TaskRun { engine, task, id, attempts: Lock::new(loaded), page: Lock::new(page), board })
    }

    /// Changes the progress page and writes it.
    pub(crate) fn progress(&self, change: impl FnOnce(&mut Progress)) {
        change(&mut self.page.lock());
        self.flush_status();
    }

    fn flush_status(&self) {
        let text = status_page::render(&self.task, &self.page.lock());
        if let Ok(r) = rel(&self.id, layout::STATUS_FILE)
            && let Err(e) = self.engine.store.write_bytes(&r, text.as_bytes())
        {
            tracing::warn!(task = %self.id, "cannot write status.md: {e}");
        }
    }

    /// Appends a line to the task's `errors.log`.
    pub(crate) fn log_error(&self, step: &str, msg: &str) -> Result<(), Error> {
        let line = format!("{} {step}: {}\n", Timestamp::now(), msg.replace('\n', "\n    "));
        escalations::append_text(&self.engine.store, &rel(&self.id, "errors.log")?, &line)
    }

    /// Waits on undecided escalations that need approval; fails on a rejected one.
    fn check_holds(&self, attempt: &Attempt) -> Result<(), StepError> {
        let mut waiting = Vec::new();
        for id in &attempt.escalations {
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

    async fn lifecycle(&self, cfg: &RolesConfig) -> Result<(), StepError> {
        let max = cfg.lifecycle.max_iterations;
        self.board_init()?;
        // 1. The PM picks the team.
        let pm = match (&self.task.assigned_pm, cfg.lifecycle.pm_for_type.get(&self.task.kind)) {
            (Some(pm), _) => pm.to_string(),
            (None, Some(pm)) => pm.clone(),
            (None, None) => {
                return Err(StepError::Failed(format!(
                    "no PM for this task: set assignedPM in task.json or lifecycle.pm_for_type.{} in the config",
                    self.task.kind
                )));
            }
        };
        let workers: Vec<String> = cfg.roles.keys().cloned().collect();
        let info = StepInfo {
            kind: "pm",
            step: "pm".into(),
            iteration: 0,
            max_iterations: max,
            extra: obj(json!({"availableRoles": workers})),
        };
        let roles = cfg.roles.clone();
        let (pm_attempt, pm_out) = self
            .step::<PmOutput>(&info, &pm, move |o| {
                if o.team.is_empty() {
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
            self.engine.store.write_json(&team_rel, &self.team_composition(&pm, &pm_out)?)?;
        }
        let mut groups: Vec<(u32, Vec<String>)> = Vec::new();
        let mut picks = pm_out.team.clone();
        picks.sort_by_key(|m| m.priority);
        for m in picks {
            match groups.last_mut() {
                Some((p, roles)) if *p == m.priority => roles.push(m.role),
                _ => groups.push((m.priority, vec![m.role])),
            }
        }

        // 2. The team runs, the validator judges, the team iterates.
        let mut last_validation: Option<Value> = None;
        for i in 1..=max {
            let mut done: Vec<(Attempt, WorkerOutput)> = Vec::new();
            for (_, group) in &groups {
                let previous: Vec<Value> = done
                    .iter()
                    .map(|(a, o)| json!({"role": a.role, "summary": o.summary, "output": o.output}))
                    .collect();
                let extra = obj(json!({"team": pm_out.team, "previous": previous, "validation": last_validation}));
                let steps = group.iter().map(|role| {
                    let info = StepInfo {
                        kind: "team",
                        step: format!("iter-{i}/{role}"),
                        iteration: i,
                        max_iterations: max,
                        extra: extra.clone(),
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
                            json!({"summary": o.summary, "output": o.output, "iteration": i}),
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
            let result = self.ensure_result(i, &done)?;
            let Some(validator) = &cfg.lifecycle.validator else { break };
            let info = StepInfo {
                kind: "validator",
                step: format!("iter-{i}/validator"),
                iteration: i,
                max_iterations: max,
                extra: obj(json!({"result": result, "team": pm_out.team})),
            };
            let (va, vo) = self
                .step::<ValidatorOutput>(&info, validator, |o| {
                    if (0.0..=10.0).contains(&o.score) {
                        Ok(())
                    } else {
                        Err(format!("stdout /score: {} is not within 0 and 10", o.score))
                    }
                })
                .await?;
            self.check_holds(&va)?;
            self.ensure_validation(i, &va, &vo)?;
            self.board_write(clawboard_board::Op::write_control(
                "validation",
                json!({"iteration": i, "score": vo.score, "pass": vo.pass}),
            ))?;
            if vo.pass {
                break;
            }
            if i == max {
                let issues: Vec<String> = vo.issues.iter().map(|x| x.description.clone()).collect();
                let team: Vec<String> = pm_out.team.iter().map(|m| m.role.clone()).collect();
                let d = crate::gm::Disagreement {
                    task: &self.task,
                    pm: &pm,
                    validator,
                    team: &team,
                    iterations: max,
                    score: vo.score,
                    issues: &issues,
                };
                if let Err(e) = crate::gm::record_disagreement(&self.engine.store, &d) {
                    tracing::warn!(task = %self.id, "cannot write gm/arbitrations.md: {e}");
                }
                return Err(StepError::Failed(format!(
                    "validation failed {max} times (last score {}); issues: {}",
                    vo.score,
                    vo.issues.iter().map(|x| x.description.as_str()).collect::<Vec<_>>().join("; ")
                )));
            }
            last_validation = Some(
                json!({"iteration": i, "score": vo.score, "pass": vo.pass, "issues": vo.issues, "suggestions": vo.suggestions}),
            );
        }

        // 3. Memory harvest.
        if let Some(harvester) = &cfg.lifecycle.harvester {
            let result = self
                .engine
                .store
                .read_bytes(&rel(&self.id, layout::RESULT_FILE)?)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let info = StepInfo {
                kind: "harvest",
                step: "harvest".into(),
                iteration: 0,
                max_iterations: max,
                extra: obj(json!({"result": result, "team": pm_out.team})),
            };
            let (ha, ho) = self.step::<HarvestOutput>(&info, harvester, check_harvest).await?;
            self.check_holds(&ha)?;
            self.ensure_harvest(&ho)?;
        }
        Ok(())
    }

    fn team_composition(&self, pm: &str, out: &PmOutput) -> Result<TeamComposition, StepError> {
        let id = |s: &str| Id::new(s).map_err(|e| StepError::Failed(format!("role id {s:?} {e}")));
        Ok(TeamComposition {
            task_id: self.task.task_id.clone(),
            pm_decision: PmDecision {
                pm_id: id(pm)?,
                decided_at: Timestamp::now(),
                reasoning: out.reasoning.clone(),
                extra: Map::new(),
            },
            team: out
                .team
                .iter()
                .map(|m| {
                    Ok(Member {
                        role: id(&m.role)?,
                        reason: m.reason.clone(),
                        priority: m.priority,
                        memory_loaded: false,
                        instance_id: None,
                        extra: Map::new(),
                    })
                })
                .collect::<Result<_, StepError>>()?,
            workflow: out.workflow.clone(),
            estimated_time: out.estimated_time.clone(),
            extra: Map::new(),
        })
    }

    fn ensure_result(&self, iteration: u32, done: &[(Attempt, WorkerOutput)]) -> Result<TaskResult, StepError> {
        let r = rel(&self.id, layout::RESULT_FILE)?;
        if let Ok(existing) = self.engine.store.read::<TaskResult>(&r)
            && existing.iteration == Some(iteration)
        {
            return Ok(existing);
        }
        let result = TaskResult {
            task_id: self.task.task_id.clone(),
            produced_at: Timestamp::now(),
            summary: done.iter().map(|(a, o)| format!("{}: {}", a.role, o.summary)).collect::<Vec<_>>().join("\n"),
            artifacts: done.iter().flat_map(|(_, o)| o.artifacts.clone()).collect(),
            contributions: done
                .iter()
                .map(|(a, o)| Contribution {
                    role: Id::new(a.role.clone()).unwrap_or_else(|_| self.task.task_id.clone()),
                    instance_id: Id::new(a.instance_id.clone()).ok(),
                    summary: o.summary.clone(),
                    output: o.output.clone(),
                    extra: Map::new(),
                })
                .collect(),
            iteration: Some(iteration),
            extra: Map::new(),
        };
        self.engine.store.write_json(&r, &result)?;
        Ok(result)
    }

    fn ensure_validation(&self, iteration: u32, a: &Attempt, o: &ValidatorOutput) -> Result<(), StepError> {
        let r = rel(&self.id, layout::VALIDATION_FILE)?;
        self.progress(|p| {
            if !p.scores.iter().any(|(i, _, _)| *i == iteration) {
                p.scores.push((iteration, o.score, o.pass));
            }
        });
        if let Ok(existing) = self.engine.store.read::<Validation>(&r)
            && existing.iterations == iteration
        {
            return Ok(());
        }
        let v = Validation {
            task_id: self.task.task_id.clone(),
            validator_id: Id::new(a.role.clone()).map_err(|e| StepError::Failed(format!("validator id {e}")))?,
            validated_at: Timestamp::now(),
            iterations: iteration,
            result: ValidationResult {
                score: o.score,
                pass: o.pass,
                criteria: o.criteria.clone(),
                issues: o.issues.clone(),
                suggestions: o.suggestions.clone(),
                extra: Map::new(),
            },
            extra: Map::new(),
        };
        self.engine.store.write_json(&r, &v)?;
        Ok(())
    }

    fn ensure_harvest(&self, o: &HarvestOutput) -> Result<(), StepError> {
        let r = rel(&self.id, layout::HARVEST_FILE)?;
        if !self.engine.store.exists(&r) {
            let h = MemoryHarvest {
                task_id: self.task.task_id.clone(),
                harvested_at: Timestamp::now(),
                experiences: o.experiences.clone(),
                cross_pollination_candidates: o.cross_pollination_candidates.clone(),
                extra: Map::new(),
            };
            self.engine.store.write_json(&r, &h)?;
        }
        let queue = RelPath::new(layout::MEMORY_QUEUE)?;
        let task_id = self.task.task_id.clone();
        let roles: Vec<Id> = o.experiences.iter().map(|e| e.role_id.clone()).collect();
        self.engine.store.update_json(&queue, |q: &mut MemoryQueue| {
            for role in roles {
                if !q.queue.iter().any(|e| e.task_id == task_id && e.role_id == role) {
                    q.queue.push(QueueEntry {
                        task_id: task_id.clone(),
                        role_id: role,
                        status: QueueStatus::Pending,
                        enqueued_at: Timestamp::now(),
                        extra: Map::new(),
                    });
                }
            }
        })?;
        Ok(())
    }

    /// A failed task keeps what its team produced, marked partial, with the reason.
    fn write_partial_result(&self, reason: &str) -> Result<(), Error> {
        let r = rel(&self.id, layout::RESULT_FILE)?;
        let mut result = match self.engine.store.read::<TaskResult>(&r) {
            Ok(r) => r,
            Err(_) => TaskResult {
                task_id: self.task.task_id.clone(),
                produced_at: Timestamp::now(),
                summary: String::new(),
                artifacts: Vec::new(),
                contributions: Vec::new(),
                iteration: None,
                extra: Map::new(),
            },
        };
        result.extra.insert("partial".into(), Value::Bool(true));
        result.extra.insert("error".into(), Value::String(reason.to_owned()));
        if result.summary.is_empty() {
            result.summary = format!("failed: {reason}");
        }
        self.engine.store.write_json(&r, &result)
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
