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

use std::collections::BTreeSet;
use std::sync::Arc;

use clawboard_blueprint::condition::Vars;
use clawboard_blueprint::contract::Input;
use clawboard_blueprint::format::{Blueprint, Component, Middleware, SliceOf, Step};
use clawboard_blueprint::middleware::{self as mw, MiddlewareConfig};
use clawboard_board::{BoardPath, Op};
use clawboard_core::lock::Lock;
use clawboard_records::attempts::Attempt;
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
}

/// What the VM learned on the way, for the quality report.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    pub executed: Vec<Executed>,
    pub findings: Vec<Value>,
    pub fixes: Vec<String>,
    /// Fixes, adjustments and quality rounds, in words, for `improvements_applied`.
    pub improvements: Vec<String>,
    pub errors: Vec<String>,
}

impl Journal {
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
    journal: Lock<Journal>,
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
/// (itself, a candidate, a redo), not of another step or of its filter.
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
        let started = std::time::Instant::now();
        Vm { run, bp, input, mw, filter_role, platform, journal: Lock::new(Journal::default()), started }
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
        let max_rounds = 1 + bp.repeat.as_ref().map_or(0, |l| l.max.resolve(self.input.execution_config.max_retries));
        // Non-loop steps that need a loop step wait until the loop is over.
        let after_loop = self.after_loop();
        let mut done: BTreeSet<String> = BTreeSet::new();
        let mut round = 1;
        let mut loop_over = bp.repeat.is_none();
        loop {
            if let Some(l) = &bp.repeat
                && !loop_over
                && l.steps.iter().all(|s| done.contains(s))
            {
                let state = self.run.board_state()?;
                let value = clawboard_board::ops::get(&state, &l.condition.path).cloned();
                if round < max_rounds && l.condition.eval(value.as_ref(), &self.vars()) {
                    let shown = value.map_or("nothing".to_owned(), |v| v.to_string());
                    self.journal.lock().improvements.push(format!(
                        "round {}: {} was {shown} and `{}` held, so {} ran again",
                        round + 1,
                        l.condition.path,
                        l.condition,
                        l.steps.join(", ")
                    ));
                    round += 1;
                    for s in &l.steps {
                        done.remove(s);
                    }
                    self.run.board_write(Op::write_control("iteration_count", json!(round)))?;
                    continue;
                }
                loop_over = true;
            }
            let ready: Vec<&Step> = bp
                .steps
                .iter()
                .filter(|s| !done.contains(&s.id) && s.after.iter().all(|d| done.contains(d)))
                .filter(|s| loop_over || !after_loop.contains(&s.id))
                .collect();
            if ready.is_empty() {
                if done.len() == bp.steps.len() {
                    return Ok(None);
                }
                return Err(failed(format!("blueprint {}: no step can run next (a dependency never finishes)", bp.id)));
            }
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
            let results: Vec<(&Step, Result<Outputs, StepError>)> = if self.input.execution_config.parallel_execution {
                let runs = runnable.iter().map(|s| async move { (*s, self.run_step(s, round).await) });
                futures_util::future::join_all(runs).await
            } else {
                let mut v = Vec::new();
                for s in &runnable {
                    v.push((*s, self.run_step(s, round).await));
                }
                v
            };
            let mut stop = None;
            for (s, r) in results {
                match r {
                    Ok(outs) => {
                        self.apply(s, round, &outs)?;
                        done.insert(s.id.clone());
                    }
                    Err(StepError::Failed(why)) => {
                        self.record(s, round, None, "failed")?;
                        self.journal.lock().errors.push(why.clone());
                        stop.get_or_insert(why);
                    }
                    Err(other) => return Err(other),
                }
            }
            if let Some(why) = stop {
                for s in bp.steps.iter().filter(|s| !done.contains(&s.id)) {
                    if !self.journal.lock().executed.iter().any(|e| e.step_id == s.id && e.status == "failed") {
                        self.skip(s, "an earlier step failed")?;
                    }
                }
                return Ok(Some(why));
            }
        }
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

    /// Writes `value` at `path` as the daemon, unless it is there already.
    fn put(&self, path: &str, value: Value) -> Result<(), StepError> {
        let p = BoardPath::parse(path).map_err(|e| failed(format!("{path}: {}", e.reason)))?;
        let state = self.run.board_state()?;
        if clawboard_board::ops::get(&state, &p) == Some(&value) {
            return Ok(());
        }
        self.run.board_write(Op::set(p, value))
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
        self.journal.lock().executed.push(Executed {
            step_id: s.id.clone(),
            role,
            component,
            status,
            retries: u32::try_from(retries).unwrap_or(u32::MAX),
            output_key: s.output.as_ref().map(ToString::to_string).unwrap_or_default(),
        });
        self.show(
            &s.id,
            match status {
                "retried" => "completed",
                other => other,
            },
        )
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
        self.show(&s.id, "running")?;
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
            return Err(failed(format!("step {}: every one of its {n} candidates failed: {}", s.id, lost.join("; "))));
        }
        for why in lost {
            self.journal.lock().errors.push(format!("a candidate of {} was dropped: {why}", s.id));
        }
        Ok(ok)
    }

    /// The output check of a step's attempt: the value fits its board path, and
    /// passes the middleware after the middleware's own fixes (else the attempt
    /// fails as `sensitive_filter_failed` / `platform_compliance_failed` and is retried).
    fn check(&self, s: &Step, o: &BlueprintOutput, candidate: bool) -> Result<(), String> {
        let Some(path) = &s.output else { return Ok(()) };
        let Some(value) = &o.output else {
            return Err(format!("stdout /output: missing; step {} writes its output to {path}", s.id));
        };
        if candidate {
            if value.get("content").and_then(Value::as_str).is_none() {
                return Err("stdout /output/content: a competing candidate prints {\"content\": TEXT, ...}".into());
            }
            if o.score.is_none_or(|x| !x.is_finite()) {
                return Err("stdout /score: a competing candidate needs a number to be selected by".into());
            }
        }
        let (fixed, _) = self.fixed(s, path, value, candidate.then_some(0))?;
        if !candidate {
            Op::set(path.clone(), fixed)
                .and_then(|op| op.check_value(clawboard_board::ops::DEFAULT_MAX_VALUE_BYTES))
                .map_err(|(at, why)| format!("stdout /output: {at}: {why}"))?;
        }
        Ok(())
    }

    /// The value after the middleware's fixes, with its findings and notes; `Err`
    /// when a check still fails after them.
    /// `variant`: the candidate's place among the variants, for a competing step.
    fn fixed(
        &self,
        s: &Step,
        path: &BoardPath,
        value: &Value,
        variant: Option<usize>,
    ) -> Result<(Value, Fixes), String> {
        let mut fixes = Fixes::default();
        if !self.middleware_on() {
            return Ok((value.clone(), fixes));
        }
        let at = match variant {
            Some(i) => format!("{path}.variants.{i}"),
            None => path.to_string(),
        };
        // A filter role, when configured, checks instead (after the attempt: `filter_by_role`).
        let f = if self.filter_role.is_some() {
            mw::Filtered { value: value.clone(), findings: Vec::new(), passed: true }
        } else {
            mw::sensitive_filter(&self.mw, &self.platform, &at, value)
        };
        if !f.passed {
            // In fix_note's words (`sensitive word "X" in PATH (no replacement configured)`),
            // which the retried role is told as its feedback.
            let left: Vec<String> = f.findings.iter().filter(|x| !x.fixed).map(mw::fix_note).collect();
            return Err(format!("sensitive_filter_failed: {}; rewrite without it", left.join("; ")));
        }
        fixes.notes.extend(f.findings.iter().map(mw::fix_note));
        fixes.findings.extend(f.findings.iter().filter_map(|x| serde_json::to_value(x).ok()));
        let mut v = f.value;
        if s.middleware.contains(&Middleware::PlatformCompliance) {
            let (adjusted, notes, failures) = self.comply(path, &v);
            if !failures.is_empty() {
                return Err(format!("platform_compliance_failed: {}", failures.join("; ")));
            }
            v = adjusted;
            fixes.adjustments = notes;
        }
        Ok((v, fixes))
    }

    /// Platform compliance of a step's output at `path`: each version of a
    /// `platform_versions` map by its own platform; any other output (a title,
    /// a body, hashtags, a thread) by the task's platform. Titles and hashtag
    /// lists are cut; the rest fails.
    fn comply(&self, path: &BoardPath, value: &Value) -> (Value, Vec<String>, Vec<String>) {
        let mut out = value.clone();
        let mut notes = Vec::new();
        let mut failures = Vec::new();
        let mut check = |platform: &str, v: &mut Value, key: Option<&str>| {
            let parts = match key {
                Some(k) => parts_of_output(k, v),
                None => parts_of(v),
            };
            let checked = mw::platform_compliance(&self.mw, platform, &parts);
            notes.extend(checked.adjustments.clone());
            failures.extend(checked.failures.clone());
            match key {
                Some(k) => write_output_parts(k, &checked.parts, v),
                None => write_parts(&checked.parts, v),
            }
        };
        match path.keys.first().map(String::as_str) {
            Some("platform_versions") if path.zone == clawboard_core::formats::Zone::Content => {
                if let Some(map) = out.as_object_mut() {
                    for (platform, version) in map.iter_mut() {
                        check(platform, version, None);
                    }
                }
            }
            Some(key) => check(&self.platform, &mut out, Some(key)),
            None => {}
        }
        (out, notes, failures)
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
                self.put(&format!("{path}.variants"), Value::Array(variants))?;
                self.put(&format!("{path}.selected"), json!(content))?;
                self.put(&format!("{path}.title"), json!(content))?;
                tracing::debug!(task = %self.run.id, step = %s.id, "selected {} with score {score}", a.step);
                Some(a)
            }
            (Some(path), None) => {
                let (a, o) = outs.first().ok_or_else(|| failed(format!("step {}: no output", s.id)))?;
                let v = o.output.clone().unwrap_or(Value::Null);
                let (fixed, fx) = self.fixed(s, path, &v, None).map_err(failed)?;
                self.note(fx)?;
                self.put(&path.to_string(), fixed)?;
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

    /// Adds a step's middleware findings to the journal and to `control.sensitive_filter`.
    fn note(&self, fx: Fixes) -> Result<(), StepError> {
        if fx.findings.is_empty() && fx.adjustments.is_empty() {
            return Ok(());
        }
        let found = !fx.findings.is_empty();
        {
            let mut j = self.journal.lock();
            j.findings.extend(fx.findings);
            j.improve(fx.notes.iter().cloned());
            j.fixes.extend(fx.notes);
            j.improve(fx.adjustments);
        }
        if found { self.write_filter_record(true) } else { Ok(()) }
    }

    /// The filter role's verdict on `value` written at `target` (an executor step
    /// of its own, `…/filter`, handed `target` and the platform): the value as
    /// fixed, or why it was refused.
    pub(crate) async fn role_check(
        &self,
        role: &str,
        step: &str,
        round: u32,
        target: &BoardPath,
        value: Value,
    ) -> Result<Result<Value, String>, StepError> {
        // The value goes on the board for the filter to read; the fixed one replaces it.
        self.put(&target.to_string(), value.clone())?;
        let mut extra = Map::new();
        extra.insert("blueprint_id".into(), json!(self.bp.id));
        extra.insert("checks".into(), json!(target.to_string()));
        extra.insert("platform".into(), json!(self.platform));
        let info = StepInfo {
            kind: "blueprint",
            step: format!("{step}/filter"),
            iteration: round,
            max_iterations: round,
            extra,
            plan: Some(StepPlan {
                scope: Some(vec![target.to_string(), "meta.platform".into()]),
                template: None,
                max_tokens: None,
                retries: self.input.execution_config.max_retries,
                fallback: None,
            }),
        };
        let (_, verdict) = self
            .run
            .step::<BlueprintOutput>(&info, role, |o| match o.output.as_ref().and_then(|v| v.get("passed")) {
                Some(Value::Bool(_)) => Ok(()),
                _ => Err("stdout /output/passed: a filter role prints {\"output\": {\"passed\": BOOL, ...}}".into()),
            })
            .await?;
        let v = verdict.output.unwrap_or_default();
        let findings: Vec<Value> = v.get("findings").and_then(Value::as_array).cloned().unwrap_or_default();
        let notes: Vec<String> = v
            .get("fixes_applied")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        let passed = v.get("passed").and_then(Value::as_bool).unwrap_or(false);
        {
            let mut j = self.journal.lock();
            j.findings.extend(findings.iter().cloned());
            j.improve(notes.iter().cloned());
            j.fixes.extend(notes);
        }
        self.write_filter_record(passed)?;
        if !passed {
            let left: Vec<String> = findings
                .iter()
                .filter(|f| f.get("fixed").and_then(Value::as_bool) != Some(true))
                .map(|f| {
                    format!(
                        "sensitive word {} in {}",
                        f.get("word").unwrap_or(&Value::Null),
                        f.get("path").unwrap_or(&Value::Null)
                    )
                })
                .collect();
            return Ok(Err(format!("{} (the filter role {role} refused the output)", left.join(", "))));
        }
        let key = target.keys.last().cloned().unwrap_or_default();
        Ok(Ok(v.get("fixed").and_then(|f| f.get(&key)).cloned().unwrap_or(value)))
    }

    /// A step's outputs through the filter role: fixed in place, or why refused.
    async fn filter_by_role(
        &self,
        role: &str,
        s: &Step,
        round: u32,
        redo: u32,
        outs: &mut Outputs,
    ) -> Result<Option<String>, StepError> {
        let Some(path) = &s.output else { return Ok(None) };
        let name = step_name(&self.bp, s, round, None, redo);
        if s.compete.is_some() {
            let target = BoardPath::parse(&format!("{path}.variants")).map_err(|e| failed(e.reason))?;
            let raw: Vec<Value> = outs
                .iter()
                .map(|(_, o)| {
                    let mut v = o.output.clone().unwrap_or_default();
                    if let Some(m) = v.as_object_mut() {
                        m.insert("score".into(), json!(o.score.unwrap_or(0.0)));
                    }
                    v
                })
                .collect();
            match self.role_check(role, &name, round, &target, Value::Array(raw)).await? {
                Err(why) => Ok(Some(why)),
                Ok(fixed) => {
                    for ((_, o), f) in outs.iter_mut().zip(fixed.as_array().cloned().unwrap_or_default()) {
                        o.output = Some(f);
                    }
                    Ok(None)
                }
            }
        } else {
            let raw = outs.first().and_then(|(_, o)| o.output.clone()).unwrap_or_default();
            match self.role_check(role, &name, round, path, raw).await? {
                Err(why) => Ok(Some(why)),
                Ok(fixed) => {
                    if let Some((_, o)) = outs.first_mut() {
                        o.output = Some(fixed);
                    }
                    Ok(None)
                }
            }
        }
    }

    /// The filter's record on the board: every finding so far, all fixed.
    fn write_filter_record(&self, passed: bool) -> Result<(), StepError> {
        let (findings, fixes) = {
            let j = self.journal.lock();
            (j.findings.clone(), j.fixes.clone())
        };
        self.put("control.sensitive_filter", json!({"passed": passed, "findings": findings, "fixes_applied": fixes}))
    }
}

/// A platform version's parts, as platform compliance checks them.
pub(crate) fn parts_of(version: &Value) -> mw::Parts {
    let text = |k: &str| version.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let list = |k: &str| {
        version
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
    };
    mw::Parts {
        title: text("title"),
        body: text("body"),
        hashtags: list("hashtags").unwrap_or_default(),
        thread: list("thread"),
    }
}

/// Writes adjusted parts back into a platform version (only the fields it has).
pub(crate) fn write_parts(parts: &mw::Parts, version: &mut Value) {
    let Some(v) = version.as_object_mut() else { return };
    if v.contains_key("title") {
        v.insert("title".into(), json!(parts.title));
    }
    if v.contains_key("hashtags") {
        v.insert("hashtags".into(), json!(parts.hashtags));
    }
}

/// The parts of a step's output at `content.KEY` that platform compliance
/// checks: a hook's title, a body's text, hashtags, a thread.
fn parts_of_output(key: &str, v: &Value) -> mw::Parts {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let list = |v: &Value| v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect());
    let mut p = mw::Parts { title: String::new(), body: String::new(), hashtags: Vec::new(), thread: None };
    match key {
        "hook" => p.title = text("selected").or_else(|| text("title")).or_else(|| text("content")).unwrap_or_default(),
        "body" => {
            p.body = text("content").or_else(|| v.as_str().map(str::to_owned)).unwrap_or_default();
            // A body is not a tweet: tweets are a thread's or a platform version's.
            p.thread = Some(Vec::new());
        }
        "hashtags" => p.hashtags = list(v).unwrap_or_default(),
        "thread" => p.thread = list(v),
        _ => {}
    }
    p
}

/// Writes cut parts back into a step's output at `content.KEY`.
fn write_output_parts(key: &str, p: &mw::Parts, v: &mut Value) {
    match (key, v) {
        ("hook", Value::Object(m)) => {
            for k in ["selected", "title", "content"] {
                if m.contains_key(k) {
                    m.insert(k.into(), json!(p.title));
                }
            }
        }
        ("hashtags", v @ Value::Array(_)) => *v = json!(p.hashtags),
        _ => {}
    }
}

/// What the middleware did to one value.
#[derive(Debug, Default)]
struct Fixes {
    findings: Vec<Value>,
    notes: Vec<String>,
    adjustments: Vec<String>,
}

impl TaskRun<'_> {
    /// The task's board as it is now (a blueprint task always keeps one).
    pub(crate) fn board_state(&self) -> Result<clawboard_core::formats::BoardFile, StepError> {
        let Some(board) = &self.board else {
            return Err(failed(format!("task {}: a blueprint task needs its board, and it has none", self.id)));
        };
        board.load().map_err(|e| match e {
            clawboard_board::Error::Store(e) => StepError::Store(e),
            other => failed(other),
        })
    }
}

impl TaskRun<'_> {
    /// The blueprint and input a task names in `task.json`, if it names one.
    pub(super) fn blueprint_task(&self) -> Result<Option<(Arc<Blueprint>, Input)>, StepError> {
        let catalog = self.engine.blueprints();
        let file = rel_task_file(&self.id);
        let Some(input) = Input::from_task_extra(&file, &self.task.extra, &catalog.ids()).map_err(failed)? else {
            return Ok(None);
        };
        let bp = catalog.get(&input.blueprint_id).map_err(|why| failed(format!("{file}: /blueprint_id: {why}")))?;
        Ok(Some((bp, input)))
    }

    /// The input for a blueprint a PM named: the task's description is the topic;
    /// `user_input` and `execution_config` in `task.json`, if any, are used as given.
    pub(super) fn input_from_task(&self, blueprint_id: &str) -> Result<Input, StepError> {
        let mut v = Map::new();
        v.insert("blueprint_id".into(), json!(blueprint_id));
        let user =
            self.task.extra.get("user_input").cloned().unwrap_or_else(|| json!({"topic": self.task.description}));
        v.insert("user_input".into(), user);
        if let Some(c) = self.task.extra.get("execution_config") {
            v.insert("execution_config".into(), c.clone());
        }
        Input::from_value(&rel_task_file(&self.id), &Value::Object(v), &[blueprint_id]).map_err(failed)
    }

    /// A blueprint task: the VM's four phases, the output contract as the result,
    /// then the validator (once) and the memory harvest, as for any task.
    pub(super) async fn blueprint_flow(
        &self,
        cfg: &crate::config::RolesConfig,
        bp: Arc<Blueprint>,
        input: Input,
    ) -> Result<(), StepError> {
        let catalog = self.engine.blueprints();
        let vm = Vm::new(self, bp.clone(), input, catalog.middleware.clone(), catalog.filter_role.clone());
        let stopped = vm.execute().await?;
        // A drive resumed after the contract was saved (a crash during the validator
        // or the harvest) keeps that one: it is the result the validator judged.
        let output = match (&stopped, self.saved_output(&bp.id)) {
            (None, Some(saved)) => saved,
            _ => vm.finish(stopped.as_deref()).await?,
        };
        if let Some(why) = stopped {
            let status = serde_json::to_value(output.execution_result.status).unwrap_or_default();
            return Err(failed(format!("blueprint {} ended {status}: {why}", bp.id)));
        }
        let team: Vec<Value> =
            bp.steps.iter().map(|s| json!({"role": s.role, "step": s.id, "component": s.component.name()})).collect();
        if let Some(validator) = &cfg.lifecycle.validator {
            let result = serde_json::to_value(&output).map_err(failed)?;
            let (_, vo) = self.validate(validator, 1, 1, json!({"result": {"output": result}, "team": team})).await?;
            if !vo.pass {
                return Err(failed(format!(
                    "the validator failed the blueprint's result (score {}): {}",
                    vo.score,
                    vo.issues.iter().map(|x| x.description.as_str()).collect::<Vec<_>>().join("; ")
                )));
            }
        }
        self.harvest(cfg, Value::Array(team)).await
    }
}

impl TaskRun<'_> {
    /// The successful output contract of `blueprint_id` already in `result.json`, if any.
    fn saved_output(&self, blueprint_id: &str) -> Option<clawboard_blueprint::contract::Output> {
        let rel = super::run::rel(&self.id, clawboard_core::layout::RESULT_FILE).ok()?;
        let result: clawboard_core::formats::TaskResult = self.engine.store.read(&rel).ok()?;
        let out: clawboard_blueprint::contract::Output =
            serde_json::from_value(result.extra.get("output")?.clone()).ok()?;
        let ours = out.execution_result.blueprint_id == blueprint_id
            && out.execution_result.status == clawboard_blueprint::contract::RunStatus::Success;
        ours.then_some(out)
    }
}

fn rel_task_file(task_id: &str) -> String {
    clawboard_core::layout::task_file(task_id, clawboard_core::layout::TASK_FILE)
}

#[cfg(test)]
mod tests {
    use super::is_run_of;

    #[test]
    fn runs_of_a_step_are_told_from_other_steps_and_filters() {
        for name in ["bp/title", "bp/title-c2", "bp/title-redo1", "bp/title-redo1-c3", "bp/r2/title"] {
            let base = if name.starts_with("bp/r2/") { "bp/r2/title" } else { "bp/title" };
            assert!(is_run_of(name, base), "{name}");
        }
        for name in ["bp/title/filter", "bp/title-cx", "bp/titles", "bp/title-c", "bp/title-redo-c1", "bp/r2/title"] {
            assert!(!is_run_of(name, "bp/title"), "{name}");
        }
    }
}
