//! The blueprint VM (seed 001) on the one step executor: each blueprint step (and
//! each competing candidate) is one [`TaskRun::step`], so it gets the executor's
//! attempt records, retries with backoff, fallback, timeouts, instance tokens,
//! access rules and resume; the VM adds what seed 001 adds around a step: the
//! step's own slice of the board, the middleware (in the output check, so a refused
//! output is a failed attempt and is retried), the selector of competing
//! candidates, conditions and the loop of an adaptive blueprint.
//!
//! Everything the VM writes to the board is a pure function of the steps' outputs,
//! applied in a fixed order, so a drive resumed after a crash (finished steps are
//! read back from their attempts, not run) writes the same board.
//!
//! Phase 4, the output contract, is in `blueprint/assemble.rs`.

mod assemble;
mod flow;
mod middleware;

pub(crate) use middleware::parts_of;

use std::collections::BTreeSet;
use std::sync::Arc;

use clawboard_blueprint::condition::Vars;
use clawboard_blueprint::contract::Input;
use clawboard_blueprint::format::{Blueprint, Component, Middleware, SliceOf, Step};
use clawboard_blueprint::middleware::MiddlewareConfig;
use clawboard_board::{BoardPath, Caller, Op};
use clawboard_core::lock::Lock;
use clawboard_records::attempts::{Attempt, AttemptStatus};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::step::RoleOutput;
use super::{StepError, TaskRun};
use crate::context::{StepInfo, StepPlan};
use crate::output::RaisedEscalation;

/// What a blueprint step's role prints: `output` goes to the step's board path,
/// `score` is read by the `max_score` selector.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BlueprintOutput {
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub escalations: Vec<RaisedEscalation>,
}

impl RoleOutput for BlueprintOutput {
    fn escalations(&self) -> &[RaisedEscalation] {
        &self.escalations
    }
}

/// The outputs of a finished step: one, or its candidates that passed.
type Outputs = Vec<(Attempt, BlueprintOutput)>;

/// One execution of a step, for the output contract's `steps_executed`.
#[derive(Debug, Clone)]
pub(crate) struct Executed {
    pub step_id: String,
    pub role: String,
    pub component: Component,
    /// `completed`, `retried`, `failed`, `skipped`.
    pub status: &'static str,
    pub retries: u32,
    pub output_key: String,
    /// Why the step's own role did not produce the output its fallback did.
    pub fallback: Option<String>,
}

/// What the VM learned on the way, for the quality report.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    pub executed: Vec<Executed>,
    pub findings: Vec<Value>,
    pub fixes: Vec<String>,
    /// Fixes, adjustments and quality rounds, in words, for `improvements_applied`.
    pub improvements: Vec<String>,
    pub errors: Vec<String>,
}

impl Learned {
    /// Adds improvements not noted yet (a loop round fixes the same word again).
    pub(crate) fn improve(&mut self, notes: impl IntoIterator<Item = String>) {
        for n in notes {
            if !self.improvements.contains(&n) {
                self.improvements.push(n);
            }
        }
    }
}

/// One run of a blueprint for a task.
pub(crate) struct Vm<'r, 'e> {
    run: &'r TaskRun<'e>,
    bp: Arc<Blueprint>,
    input: Input,
    mw: Arc<MiddlewareConfig>,
    /// The role that replaces the built-in sensitive-word filter, if any.
    filter_role: Option<String>,
    platform: String,
    /// The platforms a version is written for: the task's, then the others
    /// (`user_input.platforms`, else the blueprint's `targets`).
    targets: Vec<String>,
    journal: Lock<Learned>,
    started: std::time::Instant,
}

/// The executor's name of a step: `bp/title`, `bp/r2/title`, `bp/title-c2`,
/// and `bp/title-redo1` when a filter role refused its first output.
fn step_name(bp: &Blueprint, step: &Step, round: u32, candidate: Option<u32>, redo: u32) -> String {
    let mut name =
        if round > 1 && bp.in_loop(&step.id) { format!("bp/r{round}/{}", step.id) } else { format!("bp/{}", step.id) };
    if redo > 0 {
        name.push_str(&format!("-redo{redo}"));
    }
    if let Some(k) = candidate {
        name.push_str(&format!("-c{k}"));
    }
    name
}

/// True when the executor's step `name` is a run of the step named `base`
/// (itself, a candidate, a redo, a platform's version `-for-wechat`), not of
/// another step or of its filter.
fn is_run_of(name: &str, base: &str) -> bool {
    let Some(mut rest) = name.strip_prefix(base) else { return false };
    for tag in ["-redo", "-c"] {
        if let Some(r) = rest.strip_prefix(tag) {
            let digits = r.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                return false;
            }
            rest = &r[digits..];
        }
    }
    rest.is_empty()
        || rest.strip_prefix("-for-").is_some_and(|p| clawboard_blueprint::middleware::PLATFORMS.contains(&p))
}

/// Where the blueprint's loop is: the round running, the most it may run, and
/// whether it is over (always, for a blueprint without a loop).
struct Rounds {
    round: u32,
    max: u32,
    over: bool,
}

fn failed(e: impl std::fmt::Display) -> StepError {
    StepError::Failed(e.to_string())
}

impl<'r, 'e> Vm<'r, 'e> {
    pub(crate) fn new(
        run: &'r TaskRun<'e>,
        bp: Arc<Blueprint>,
        input: Input,
        mw: Arc<MiddlewareConfig>,
        filter_role: Option<String>,
    ) -> Self {
        let platform = input.platform().as_str().to_owned();
        let targets = input.targets(&bp.targets).iter().map(|p| p.as_str().to_owned()).collect();
        let started = std::time::Instant::now();
        Vm { run, bp, input, mw, filter_role, platform, targets, journal: Lock::new(Learned::default()), started }
    }

    fn vars(&self) -> Vars {
        let c = &self.input.execution_config;
        Vars { quality_threshold: c.quality_threshold, max_retries: c.max_retries }
    }

    fn middleware_on(&self) -> bool {
        self.input.execution_config.enable_middleware
    }

    /// Phases 1–3: the board initialised, every step run (or skipped) in
    /// dependency order, the loop iterated while its condition holds. `Ok` carries
    /// the reason the run stopped short, if a step failed for good.
    pub(crate) async fn execute(&self) -> Result<Option<String>, StepError> {
        self.init_board()?;
        let bp = self.bp.clone();
        // Non-loop steps that need a loop step wait until the loop is over.
        let after_loop = self.after_loop();
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut rounds = Rounds {
            round: 1,
            max: 1 + bp.repeat.as_ref().map_or(0, |l| l.max.resolve(self.input.execution_config.max_retries)),
            over: bp.repeat.is_none(),
        };
        loop {
            if self.next_round(&mut rounds, &mut done)? {
                continue;
            }
            let ready: Vec<&Step> = bp
                .steps
                .iter()
                .filter(|s| !done.contains(&s.id) && s.after.iter().all(|d| done.contains(d)))
                .filter(|s| rounds.over || !after_loop.contains(&s.id))
                .collect();
            if ready.is_empty() {
                if done.len() == bp.steps.len() {
                    return Ok(None);
                }
                return Err(failed(format!("blueprint {}: no step can run next (a dependency never finishes)", bp.id)));
            }
            let runnable = self.runnable(ready, &mut done)?;
            self.fork_edits(&runnable, rounds.round)?;
            let results = self.run_steps(&runnable, rounds.round).await;
            if let Some(why) = self.settle(results, rounds.round, &mut done)? {
                for s in bp.steps.iter().filter(|s| !done.contains(&s.id)) {
                    if !self.journal.lock().executed.iter().any(|e| e.step_id == s.id && e.status == "failed") {
                        self.skip(s, "an earlier step failed")?;
                    }
                }
                return Ok(Some(why));
            }
        }
    }

    /// A fork's board edits (`forked_from.set` in `task.json`, a person's writes),
    /// made as the step it was forked at is about to run: after the steps before
    /// it wrote their (recorded) results again, so the edits are what it is handed.
    /// Made again on each drive that reaches the step, so a resumed fork reads the same.
    fn fork_edits(&self, runnable: &[&Step], round: u32) -> Result<(), StepError> {
        let Some(fork) = self.run.task.extra.get("forked_from") else { return Ok(()) };
        let (Some(at), Some(sets)) =
            (fork.get("step").and_then(Value::as_str), fork.get("set").and_then(Value::as_array))
        else {
            return Ok(());
        };
        let here = runnable.iter().any(|s| is_run_of(at, &step_name(&self.bp, s, round, None, 0)));
        if !here {
            return Ok(());
        }
        for set in sets {
            let path = set.get("path").and_then(Value::as_str).unwrap_or_default();
            let value = set.get("value").cloned().unwrap_or(Value::Null);
            self.put_as(&Caller::human(), path, value)?;
        }
        Ok(())
    }

    /// When every step of the loop is done: starts the next round (true) if
    /// rounds remain and the loop's condition holds on the board, else ends the loop.
    fn next_round(&self, rounds: &mut Rounds, done: &mut BTreeSet<String>) -> Result<bool, StepError> {
        let Some(l) = &self.bp.repeat else { return Ok(false) };
        if rounds.over || !l.steps.iter().all(|s| done.contains(s)) {
            return Ok(false);
        }
        let state = self.run.board_state()?;
        let value = clawboard_board::ops::get(&state, &l.condition.path).cloned();
        if rounds.round < rounds.max && l.condition.eval(value.as_ref(), &self.vars()) {
            let shown = value.map_or("nothing".to_owned(), |v| v.to_string());
            self.journal.lock().improvements.push(format!(
                "round {}: {} was {shown} and `{}` held, so {} ran again",
                rounds.round + 1,
                l.condition.path,
                l.condition,
                l.steps.join(", ")
            ));
            rounds.round += 1;
            for s in &l.steps {
                done.remove(s);
            }
            self.run.board_write(Op::write_control("iteration_count", json!(rounds.round)))?;
            return Ok(true);
        }
        rounds.over = true;
        Ok(false)
    }

    /// The ready steps that run: a step whose `when` is false on the board is
    /// skipped (and done) instead.
    fn runnable<'s>(&self, ready: Vec<&'s Step>, done: &mut BTreeSet<String>) -> Result<Vec<&'s Step>, StepError> {
        let mut runnable = Vec::new();
        for s in ready {
            if let Some(c) = &s.when {
                let state = self.run.board_state()?;
                if !c.eval(clawboard_board::ops::get(&state, &c.path), &self.vars()) {
                    self.skip(s, &format!("when {c} is false"))?;
                    done.insert(s.id.clone());
                    continue;
                }
            }
            runnable.push(s);
        }
        Ok(runnable)
    }

    /// Runs `steps` of `round`, at once when the input asks for parallel execution.
    async fn run_steps<'s>(&self, steps: &[&'s Step], round: u32) -> Vec<(&'s Step, Result<Outputs, StepError>)> {
        if self.input.execution_config.parallel_execution {
            let runs = steps.iter().map(|s| async move { (*s, self.run_step(s, round).await) });
            futures_util::future::join_all(runs).await
        } else {
            let mut v = Vec::new();
            for s in steps {
                v.push((*s, self.run_step(s, round).await));
            }
            v
        }
    }

    /// Writes each result to the board and marks its step done. A result the
    /// zone table refuses to write fails its step; an escalation that needs a
    /// human holds the task after the step (replayed, not run again, once
    /// decided), as in the team flow, and a rejected one fails it. `Ok` carries
    /// the first failed step's reason.
    fn settle(
        &self,
        results: Vec<(&Step, Result<Outputs, StepError>)>,
        round: u32,
        done: &mut BTreeSet<String>,
    ) -> Result<Option<String>, StepError> {
        let mut stop = None;
        let mut held = Vec::new();
        for (s, r) in results {
            let r = match r {
                Ok(outs) => match self.apply(s, round, &outs) {
                    Ok(()) => Ok(outs),
                    Err(StepError::Failed(why)) => Err(self.unwritten(s, round, &why)?),
                    Err(other) => Err(other),
                },
                Err(e) => Err(e),
            };
            match r {
                Ok(outs) => {
                    done.insert(s.id.clone());
                    for (a, _) in &outs {
                        match self.run.check_holds(a) {
                            Err(StepError::Held(ids)) => held.extend(ids),
                            other => other?,
                        }
                    }
                }
                Err(StepError::Failed(why)) => {
                    self.record(s, round, None, "failed")?;
                    self.journal.lock().errors.push(why.clone());
                    stop.get_or_insert(why);
                }
                Err(other) => return Err(other),
            }
        }
        // The steps' outputs are on the board: their runs' spans can count them.
        self.run.send_spans();
        if !held.is_empty() {
            return Err(StepError::Held(held));
        }
        Ok(stop)
    }

    /// A step whose output could not be written (the zone table refused it): on
    /// the record as the step's error, which fails it.
    fn unwritten(&self, s: &Step, round: u32, why: &str) -> Result<StepError, StepError> {
        let why = format!("step {}: its output cannot be written: {why}", s.id);
        let step = step_name(&self.bp, s, round, None, 0);
        self.run.log_error(&step, &why)?;
        let e = clawboard_board::ErrorEntry {
            step_id: s.id.clone(),
            error_type: "write_refused".into(),
            message: why.clone(),
            timestamp: clawboard_core::Timestamp::now().to_string(),
        };
        self.run.board_write(Ok(Op::append_error(&e)))?;
        Ok(StepError::Failed(why))
    }

    /// Steps outside the loop that need (directly or through others) a loop step.
    fn after_loop(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let Some(l) = &self.bp.repeat else { return out };
        let mut changed = true;
        while changed {
            changed = false;
            for s in &self.bp.steps {
                if l.steps.contains(&s.id) || out.contains(&s.id) {
                    continue;
                }
                if s.after.iter().any(|d| l.steps.contains(d) || out.contains(d)) {
                    out.insert(s.id.clone());
                    changed = true;
                }
            }
        }
        out
    }

    /// Phase 1: the input into `meta_zone`, every step `pending` (each written once).
    fn init_board(&self) -> Result<(), StepError> {
        for (path, value) in self.input.meta_writes() {
            self.put(&path, value)?;
        }
        let state = self.run.board_state()?;
        for s in &self.bp.steps {
            let p = format!("control.step_status.{}", s.id);
            let known = BoardPath::parse(&p).ok().and_then(|p| clawboard_board::ops::get(&state, &p).cloned());
            if known.is_none() {
                self.put(&p, json!("pending"))?;
            }
        }
        self.put("control.current_stage", json!(format!("blueprint:{}", self.bp.id)))?;
        self.run.progress(|p| {
            p.blueprint =
                Some((self.bp.id.clone(), self.bp.steps.iter().map(|s| (s.id.clone(), "pending".into())).collect()))
        });
        Ok(())
    }

    /// Sets `path` to `value` as the VM (the orchestrator); a value restated is
    /// not recorded again.
    fn put(&self, path: &str, value: Value) -> Result<(), StepError> {
        self.put_as(&Caller::daemon(), path, value)
    }

    /// Sets `path` to `value` as `caller`, held to the zone table.
    fn put_as(&self, caller: &Caller, path: &str, value: Value) -> Result<(), StepError> {
        let p = BoardPath::parse(path).map_err(|e| failed(format!("{path}: {}", e.reason)))?;
        self.run.board_write_as(caller, Op::set(p, value))
    }

    /// Who writes the output of `s` that attempt `a` produced (seed 000's zone
    /// table applies): its role, as its component type: the role's own
    /// `[roles.ID] component`, else the step's kind (a worker step's role a
    /// worker; a skill step's, or a worker step's fallback skill, a skill).
    fn writer(&self, s: &Step, a: &Attempt) -> Caller {
        use clawboard_core::acl::Component as Zones;
        let kind = if a.role == s.role { s.component } else { Component::Skill };
        let own = self.run.engine.roles().roles.get(&a.role).and_then(|r| r.component);
        let (component, how) = match own {
            Some(c) => (c, format!("roles.{}.component = {:?}", a.role, c.name())),
            None => (
                match kind {
                    Component::Worker => Zones::Worker,
                    Component::Skill => Zones::Skill,
                },
                format!("the {} of step {} of blueprint {}", kind.name(), s.id, self.bp.id),
            ),
        };
        Caller::role(&a.role, &a.instance_id, component, how)
    }

    fn show(&self, step: &str, state: &str) -> Result<(), StepError> {
        self.put(&format!("control.step_status.{step}"), json!(state))?;
        self.run.progress(|p| {
            if let Some((_, rows)) = &mut p.blueprint
                && let Some(row) = rows.iter_mut().find(|r| r.0 == step)
            {
                row.1 = state.to_owned();
            }
        });
        Ok(())
    }

    fn skip(&self, s: &Step, why: &str) -> Result<(), StepError> {
        tracing::info!(task = %self.run.id, step = %s.id, "skipped: {why}");
        self.record(s, 0, None, "skipped")
    }

    /// Notes an execution of `s` (`attempt`: the one that succeeded).
    fn record(&self, s: &Step, round: u32, ok: Option<&Attempt>, status: &'static str) -> Result<(), StepError> {
        // Attempts beyond the first of each run (each candidate, each redo).
        let base = step_name(&self.bp, s, round, None, 0);
        let mut runs: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for a in self.run.attempts.lock().iter().filter(|a| is_run_of(&a.step, &base)) {
            *runs.entry(a.step.clone()).or_default() += 1;
        }
        let retries: usize = runs.values().map(|n| n - 1).sum();
        let role = ok.map_or_else(|| s.role.clone(), |a| a.role.clone());
        let component = if role == s.role { s.component } else { Component::Skill };
        let status = if status == "completed" && retries > 0 { "retried" } else { status };
        let fallback = (role != s.role).then(|| self.why_not(s, &base));
        if let Some(why) = &fallback {
            tracing::warn!(task = %self.run.id, step = %s.id, "written by the fallback {role}: {why}");
        }
        self.journal.lock().executed.push(Executed {
            step_id: s.id.clone(),
            role,
            component,
            status,
            retries: u32::try_from(retries).unwrap_or(u32::MAX),
            output_key: s.output.as_ref().map(ToString::to_string).unwrap_or_default(),
            fallback,
        });
        self.show(
            &s.id,
            match status {
                "retried" => "completed",
                other => other,
            },
        )
    }

    /// Why the step's own role produced nothing in its runs named `base`: its
    /// last error, named by the role.
    fn why_not(&self, s: &Step, base: &str) -> String {
        let attempts = self.run.attempts.lock();
        let last = attempts
            .iter()
            .rev()
            .filter(|a| a.role == s.role && is_run_of(&a.step, base))
            .find_map(|a| a.error.clone());
        match last {
            Some(e) => format!("{}: {e}", s.role),
            None => format!("{}: no output passed", s.role),
        }
    }

    fn info(&self, s: &Step, round: u32, candidate: Option<u32>, redo: u32) -> StepInfo {
        let mut extra = Map::new();
        extra.insert("blueprint_id".into(), json!(self.bp.id));
        extra.insert("step_id".into(), json!(s.id));
        extra.insert("component_type".into(), json!(s.component.name()));
        extra.insert("round".into(), json!(round));
        extra.insert("platform".into(), json!(self.platform));
        if let (Some(k), Some(n)) = (candidate, s.compete) {
            extra.insert("candidate".into(), json!(k));
            extra.insert("candidates".into(), json!(n));
        }
        let (scope, template) = match &s.slice {
            SliceOf::Scope(v) => (Some(v.clone()), None),
            SliceOf::Template(t) => (None, Some(t.clone())),
        };
        StepInfo {
            kind: "blueprint",
            reply: Some(crate::reply::blueprint_step(s.output.as_ref(), candidate.is_some(), &self.platform)),
            step: step_name(&self.bp, s, round, candidate, redo),
            iteration: round,
            max_iterations: 1 + self
                .bp
                .repeat
                .as_ref()
                .map_or(0, |l| l.max.resolve(self.input.execution_config.max_retries)),
            extra,
            plan: Some(StepPlan {
                scope,
                template,
                max_tokens: s.max_tokens,
                retries: s.retry.unwrap_or(self.input.execution_config.max_retries),
                // A competing candidate that keeps failing is dropped, not replaced.
                fallback: if candidate.is_some() { None } else { s.fallback.clone() },
            }),
        }
    }

    /// Runs `s` (its candidates at once when it competes): the outputs that
    /// passed. With a filter role, the role checks them after they pass; refused,
    /// the step runs again (`-redo1` …) told why, at most `retry` times.
    async fn run_step(&self, s: &Step, round: u32) -> Result<Outputs, StepError> {
        // A step found done after a restart is not shown running again: its
        // history stays the run's (and a replay of it matches).
        if !self.done_before(s, round) {
            self.show(&s.id, "running")?;
        }
        let role = match (&self.filter_role, &s.output) {
            (Some(r), Some(_)) if self.middleware_on() => r.clone(),
            _ => return self.produce(s, round, 0, &[]).await,
        };
        let mut feedback: Vec<String> = Vec::new();
        for redo in 0..=s.retry.unwrap_or(self.input.execution_config.max_retries) {
            let mut outs = self.produce(s, round, redo, &feedback).await?;
            match self.filter_by_role(&role, s, round, redo, &mut outs).await? {
                None => return Ok(outs),
                Some(why) => {
                    let info = self.info(s, round, None, redo);
                    self.run.log_error(&info.step, &why)?;
                    self.run.board_attempt_failed(&info, "sensitive_filter_failed", &why, redo + 1)?;
                    feedback.push(why);
                }
            }
        }
        Err(failed(format!("step {}: sensitive_filter_failed: {}", s.id, feedback.join("; "))))
    }

    /// True when a run of `s` in `round` already ended well (a resumed task).
    fn done_before(&self, s: &Step, round: u32) -> bool {
        let base = step_name(&self.bp, s, round, None, 0);
        self.run.attempts.lock().iter().any(|a| a.status == AttemptStatus::Ok && is_run_of(&a.step, &base))
    }

    /// One run of `s` (all its candidates when it competes).
    async fn produce(&self, s: &Step, round: u32, redo: u32, feedback: &[String]) -> Result<Outputs, StepError> {
        let info_for = |candidate: Option<u32>| {
            let mut info = self.info(s, round, candidate, redo);
            if !feedback.is_empty() {
                info.extra.insert("feedback".into(), json!(feedback));
            }
            info
        };
        let Some(n) = s.compete else {
            if self.fans_out(s) {
                return self.versions(s, info_for(None)).await;
            }
            let info = info_for(None);
            let r = self.run.step::<BlueprintOutput>(&info, &s.role, |o| self.check(s, o, false)).await?;
            return Ok(vec![r]);
        };
        let runs = (1..=n).map(|k| async move {
            let info = info_for(Some(k));
            self.run.step::<BlueprintOutput>(&info, &s.role, |o| self.check(s, o, true)).await
        });
        let mut ok = Vec::new();
        let mut lost = Vec::new();
        for r in futures_util::future::join_all(runs).await {
            match r {
                Ok(x) => ok.push(x),
                Err(StepError::Failed(why)) => lost.push(why),
                Err(other) => return Err(other),
            }
        }
        if ok.is_empty() {
            let why = format!("step {}: every one of its {n} candidates failed: {}", s.id, lost.join("; "));
            // Seed 001's chain: the worker failed, so its skill runs, once, as a
            // candidate of its own (`-c{n+1}`).
            let Some(skill) = &s.fallback else { return Err(failed(why)) };
            let info = info_for(Some(n + 1));
            match self.run.step::<BlueprintOutput>(&info, skill, |o| self.check(s, o, true)).await {
                Ok(x) => ok.push(x),
                Err(StepError::Failed(more)) => return Err(failed(format!("{why}; then its skill {skill}: {more}"))),
                Err(other) => return Err(other),
            }
        }
        for why in lost {
            self.journal.lock().errors.push(format!("a candidate of {} was dropped: {why}", s.id));
        }
        Ok(ok)
    }

    /// True for a step that writes every platform's version
    /// (`content.platform_versions`) when the run has more than one.
    fn fans_out(&self, s: &Step) -> bool {
        self.targets.len() > 1
            && s.output
                .as_ref()
                .is_some_and(|p| p.zone == clawboard_core::formats::Zone::Content && p.keys == ["platform_versions"])
    }

    /// Seed 001's platform adapter ×N: the step run once per target platform,
    /// at once, each told its platform (`platform` in its context, a reply of
    /// that platform's version; step `bp/adapt-for-wechat`), their versions
    /// joined into one output (as the first run's). A platform whose run fails
    /// for good fails the step.
    async fn versions(&self, s: &Step, info: StepInfo) -> Result<Outputs, StepError> {
        let runs = self.targets.iter().map(|p| {
            let mut info = info.clone();
            info.step = format!("{}-for-{p}", info.step);
            info.extra.insert("platform".into(), json!(p));
            info.reply = Some(crate::reply::blueprint_step(s.output.as_ref(), false, p));
            async move { self.run.step::<BlueprintOutput>(&info, &s.role, |o| self.check(s, o, false)).await }
        });
        let mut joined: Option<(Attempt, BlueprintOutput)> = None;
        let mut versions = Map::new();
        for (p, r) in self.targets.iter().zip(futures_util::future::join_all(runs).await) {
            let (a, o) = match r {
                Ok(x) => x,
                Err(StepError::Failed(why)) => return Err(failed(format!("step {}: the {p} version: {why}", s.id))),
                Err(other) => return Err(other),
            };
            if let Some(Value::Object(m)) = &o.output {
                versions.extend(m.clone());
            }
            joined.get_or_insert((a, o));
        }
        let Some((a, mut o)) = joined else { return Err(failed(format!("step {}: no platform to write", s.id))) };
        o.output = Some(Value::Object(versions));
        Ok(vec![(a, o)])
    }

    /// Writes a finished step's result to the board: a competing step's variants
    /// and winner, or the output after the middleware's fixes; then the findings.
    fn apply(&self, s: &Step, round: u32, outs: &[(Attempt, BlueprintOutput)]) -> Result<(), StepError> {
        let winner = match (&s.output, s.compete) {
            (Some(path), Some(_)) => {
                let mut variants = Vec::new();
                let mut best: Option<(f64, String, &Attempt)> = None;
                for (a, o) in outs {
                    let Some(v) = &o.output else { continue };
                    let (fixed, fx) = self.fixed(s, path, v, Some(variants.len())).map_err(failed)?;
                    self.note(fx)?;
                    let score = o.score.unwrap_or(0.0);
                    let content = fixed.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
                    let kind = fixed.get("type").and_then(Value::as_str).unwrap_or("candidate").to_owned();
                    variants.push(json!({"type": kind, "content": content, "score": score}));
                    if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                        best = Some((score, content, a));
                    }
                }
                let Some((score, content, a)) = best else {
                    return Err(failed(format!("step {}: no candidate", s.id)));
                };
                let by = self.writer(s, a);
                self.put_as(&by, &format!("{path}.variants"), Value::Array(variants))?;
                self.put_as(&by, &format!("{path}.selected"), json!(content))?;
                self.put_as(&by, &format!("{path}.title"), json!(content))?;
                tracing::debug!(task = %self.run.id, step = %s.id, "selected {} with score {score}", a.step);
                Some(a)
            }
            (Some(_), None) if s.output_default && outs.first().is_some_and(|(_, o)| o.output.is_none()) => {
                outs.first().map(|(a, _)| a)
            }
            (Some(path), None) => {
                let (a, o) = outs.first().ok_or_else(|| failed(format!("step {}: no output", s.id)))?;
                let v = o.output.clone().unwrap_or(Value::Null);
                let (fixed, fx) = self.fixed(s, path, &v, None).map_err(failed)?;
                self.note(fx)?;
                self.put_as(&self.writer(s, a), &path.to_string(), fixed)?;
                Some(a)
            }
            (None, _) => outs.first().map(|(a, _)| a),
        };
        if s.middleware.contains(&Middleware::QualityGate) {
            let state = self.run.board_state()?;
            let score = BoardPath::parse("control.quality_scores.virality")
                .ok()
                .and_then(|p| clawboard_board::ops::get(&state, &p).and_then(Value::as_f64));
            let threshold = self.input.execution_config.quality_threshold;
            let verdict = match score {
                Some(v) if v >= threshold => "passed",
                Some(_) => "below the threshold",
                None => "no virality score",
            };
            self.put(
                "control.quality_gate",
                json!({"round": round, "virality": score, "threshold": threshold, "verdict": verdict}),
            )?;
        }
        self.record(s, round, winner, "completed")
    }
}

#[cfg(test)]
mod tests {
    use super::is_run_of;

    #[test]
    fn runs_of_a_step_are_told_from_other_steps_and_filters() {
        assert!(is_run_of("bp/adapt-for-wechat", "bp/adapt"));
        assert!(!is_run_of("bp/adapt-for-mars", "bp/adapt"));
        for name in ["bp/title", "bp/title-c2", "bp/title-redo1", "bp/title-redo1-c3", "bp/r2/title"] {
            let base = if name.starts_with("bp/r2/") { "bp/r2/title" } else { "bp/title" };
            assert!(is_run_of(name, base), "{name}");
        }
        for name in ["bp/title/filter", "bp/title-cx", "bp/titles", "bp/title-c", "bp/title-redo-c1", "bp/r2/title"] {
            assert!(!is_run_of(name, "bp/title"), "{name}");
        }
    }
}
