//! One lifecycle step: find its finished attempt, or run its role with retries,
//! backoff and fallback, recording every attempt.

use clawboard_core::formats::ActiveInstances;
use clawboard_core::{RelPath, Timestamp, layout};
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use clawboard_records::escalations;
use serde::de::DeserializeOwned;

use super::{InstanceInfo, StepError, TaskRun};
use crate::context::{self, StepInfo};
use crate::output::{HarvestOutput, PmOutput, RaisedEscalation, ValidatorOutput, WorkerOutput, parse_output};
use crate::reply::{self, ReplyShape};
use crate::runner::{self, RunIdentity, RunStatus};

/// Outputs that may carry escalations.
pub(crate) trait RoleOutput: DeserializeOwned {
    fn escalations(&self) -> &[RaisedEscalation];
}

macro_rules! role_output {
    ($($t:ty),+) => {$(
        impl RoleOutput for $t {
            fn escalations(&self) -> &[RaisedEscalation] { &self.escalations }
        }
    )+};
}
role_output!(PmOutput, WorkerOutput, ValidatorOutput, HarvestOutput);

/// Longest fallback chain followed (a cycle in config ends here too).
const MAX_FALLBACKS: usize = 4;

/// How one attempt of a role ended, short of stopping the step.
enum Tried<T> {
    Done(Attempt, T),
    /// Failed (`kind` as the board's error type, e.g. `component_timeout`): retried
    /// while retries are left.
    Failed {
        kind: &'static str,
        error: String,
        /// Its role's remaining retries would fail too (see `RunOutcome::skip_retries`).
        skip_retries: bool,
        /// The reply was cut off at its completion limit.
        cut_off: bool,
    },
}

impl TaskRun<'_> {
    /// The output of `info.step`: from its `ok` attempt if it has one, else by running
    /// `role` (then its fallbacks). `check` adds rules beyond the output's format.
    pub(crate) async fn step<T: RoleOutput>(
        &self,
        info: &StepInfo,
        role: &str,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(Attempt, T), StepError> {
        let finished =
            self.attempts.lock().iter().rev().find(|a| a.step == info.step && a.status == AttemptStatus::Ok).cloned();
        if let Some(a) = finished {
            let stdout = attempts::read_stdout(&self.engine.store, &self.id, &a)?;
            match parse_output::<T>(&stdout) {
                Ok(out) => {
                    self.ensure_escalations(&a, out.escalations())?;
                    return Ok((a, out));
                }
                Err(e) => {
                    tracing::warn!(task = %self.id, step = %info.step, "finished attempt's output no longer parses ({e}); running the step again")
                }
            }
        }
        self.board_step_started(info)?;
        let outcome = self.run_chain(info, role, &check).await;
        match &outcome {
            Ok(_) => self.board_step_ended(info, true)?,
            Err(StepError::Failed(_)) => self.board_step_ended(info, false)?,
            Err(_) => {}
        }
        outcome
    }

    /// Runs `role`, its retries, then its fallbacks, until one attempt succeeds.
    async fn run_chain<T: RoleOutput>(
        &self,
        info: &StepInfo,
        role: &str,
        check: &impl Fn(&T) -> Result<(), String>,
    ) -> Result<(Attempt, T), StepError> {
        let cfg = self.engine.config();
        let mut chain = vec![role.to_owned()];
        match &info.plan {
            // A blueprint step names its one fallback itself.
            Some(plan) => chain.extend(plan.fallback.clone()),
            None => {
                while let Some(next) = chain.last().and_then(|r| cfg.roles.get(r)).and_then(|r| r.fallback.clone()) {
                    if chain.contains(&next) || chain.len() > MAX_FALLBACKS {
                        break;
                    }
                    chain.push(next);
                }
            }
        }
        let mut last_error = String::new();
        // Why earlier attempts of this step were refused, told to the next one.
        let mut feedback: Vec<String> = Vec::new();
        // Replies cut off at their completion limit: each retry gets twice the room.
        let mut cut_offs = 0;
        for (n, role_id) in chain.iter().enumerate() {
            let Some(role_cfg) = cfg.roles.get(role_id) else {
                last_error = format!("role {role_id:?} is not configured under [roles]");
                continue;
            };
            if n > 0 {
                tracing::info!(task = %self.id, step = %info.step, "falling back from {} to {role_id}", chain[n - 1]);
            }
            let retries = info.plan.as_ref().map_or(role_cfg.max_retries, |p| p.retries);
            for retry in 0..=retries {
                if *self.engine.shutdown.stopping.borrow() {
                    return Err(StepError::Stopped);
                }
                if retry > 0 {
                    let delay = role_cfg.retry_backoff.saturating_mul(1 << (retry - 1).min(16));
                    let mut stopping = self.engine.shutdown.stopping.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = runner::fired(&mut stopping) => return Err(StepError::Stopped),
                    }
                }
                match self.attempt::<T>(info, role_id, role_cfg, check, &feedback, cut_offs).await? {
                    Tried::Done(attempt, output) => return Ok((attempt, output)),
                    Tried::Failed { kind, error, skip_retries, cut_off } => {
                        cut_offs += u32::from(cut_off);
                        self.board_attempt_failed(info, kind, &error, retry + 1)?;
                        feedback.push(error.clone());
                        last_error = error;
                        if skip_retries {
                            tracing::info!(task = %self.id, step = %info.step, "{role_id}: its retries are skipped (its server asked for a longer wait)");
                            break;
                        }
                    }
                }
            }
        }
        Err(StepError::Failed(format!("step {} failed: {last_error}", info.step)))
    }

    /// Runs `role` once. An error stops the step; [`Tried::Failed`] is an attempt
    /// that may be retried.
    async fn attempt<T: RoleOutput>(
        &self,
        info: &StepInfo,
        role_id: &str,
        role: &crate::config::RoleConfig,
        check: &impl Fn(&T) -> Result<(), String>,
        feedback: &[String],
        cut_offs: u32,
    ) -> Result<Tried<T>, StepError> {
        let store = &self.engine.store;
        let _permit = self.engine.roles.clone().acquire_owned().await.map_err(|_| StepError::Stopped)?;
        if self.engine.is_fenced(&self.id) {
            return Err(StepError::Fenced);
        }
        let instance_id = format!("inst-{}", clawboard_core::id::random_hex(6));
        // A role with a scope or template is handed its slice; over budget, the step
        // fails before anything runs.
        let handed = self.slice_for(info, role_id, role, &instance_id, None)?;
        let mut handed = self.fit_model_budget(info, role_id, role, &instance_id, handed).await?;
        let mut attempt = Attempt {
            number: 0,
            step: info.step.clone(),
            role: role_id.to_owned(),
            instance_id: instance_id.clone(),
            started_at: Timestamp::now(),
            status: AttemptStatus::Running,
            ended_at: None,
            exit_code: None,
            error: None,
            elapsed_ms: None,
            escalations: Vec::new(),
        };
        // Number and register in one critical section: parallel roles of a step
        // group must never share a number.
        {
            let mut v = self.attempts.lock();
            attempt.number = v.iter().map(|a| a.number).max().unwrap_or(0) + 1;
            v.push(attempt.clone());
        }
        let number = attempt.number;
        attempts::save(store, &self.id, &attempt)?;
        // Every record so far (this attempt's, its slice's, the board's) durable
        // in one sync before the role can act: a crash from here on finds it.
        let sync_started = std::time::Instant::now();
        store.sync_records()?;
        let sync_us = sync_started.elapsed().as_micros();

        let may_read = |path: &str| self.engine.may_read(role_id, &self.id, path);
        let mut ctx = match &handed {
            Some(h) => context::sliced(&self.id, role_id, info, &h.data, h.tokens, h.budget),
            None => context::build(store, &self.task, role_id, role, info, &may_read),
        };
        if let Some(o) = ctx.as_object_mut() {
            o.insert("instanceId".into(), instance_id.clone().into());
            o.insert("attempt".into(), number.into());
            if !feedback.is_empty() {
                o.insert("feedback".into(), feedback.into());
            }
        }
        let who = RunIdentity {
            root: store.root().display().to_string(),
            task_id: self.id.clone(),
            role: role_id.to_owned(),
            instance_id: instance_id.clone(),
            // 128 bits from the OS; without OS randomness no token (none matches an empty one).
            token: clawboard_core::token::secret_hex(16).unwrap_or_default(),
            sandbox: self.engine.config().sandbox.for_role(role),
        };
        tracing::debug!(task = %self.id, step = %info.step, role = role_id, sync_us, "starting a run");
        let mut kill = self.engine.shutdown.kill.clone();
        let context_bytes = serde_json::to_vec(&ctx).unwrap_or_default();
        // The process starts at the run's first poll; the bookkeeping (status.md,
        // roles/active.json, the whole board's count for the ledger) is done while
        // it runs, not before it starts.
        // The token is valid while the role runs, not a moment longer, whatever happens
        // next (an early return, or this future dropped).
        let shape = self.reply_shape(info).grown(cut_offs);
        let revoke = Revoke(self.engine, who.token.clone());
        let (out, started) = tokio::join!(runner::run_shaped(role, &context_bytes, &shape, &who, &mut kill), async {
            let started = self.instance_started(&attempt, &who.token);
            if let Some(h) = handed.as_mut() {
                self.count_full(h);
            }
            started
        });
        drop(revoke);
        tracing::debug!(task = %self.id, step = %info.step, "the run ended");
        started?;
        if self.engine.is_fenced(&self.id) {
            // Taken over while the role ran: its result is not this node's to write.
            self.instance_ended(&instance_id)?;
            return Err(StepError::Fenced);
        }

        let mut parsed = None;
        attempt.status = out.status.into();
        attempt.error = out.error.clone();
        attempt.exit_code = out.exit_code;
        if out.status == RunStatus::Exited {
            let parsed_output = crate::output::check_scope(&out.stdout, &self.id)
                .and_then(|()| parse_output::<T>(&out.stdout))
                .and_then(|o| check(&o).map(|()| o));
            match parsed_output {
                Ok(o) => {
                    attempt.escalations = o.escalations().iter().map(|_| escalations::new_id()).collect();
                    parsed = Some(o);
                }
                Err(e) => {
                    attempt.status = AttemptStatus::Failed;
                    attempt.error = Some(format!("invalid output: {e}"));
                }
            }
        }
        // Then the ones it raised through the API while it ran (after the output's,
        // which `ensure_escalations` pairs with the output by position).
        attempt.escalations.extend(self.engine.take_raised(&instance_id));
        attempt.ended_at = Some(Timestamp::now());
        attempt.elapsed_ms = Some(u64::try_from(out.elapsed.as_millis()).unwrap_or(u64::MAX));
        // Output first, record second: an `ok` record always has its output beside it.
        attempts::save_output(store, &self.id, &attempt, &out.stdout, &out.stderr)?;
        attempts::save(store, &self.id, &attempt)?;
        if let Some(h) = handed {
            self.slice_finished(h, attempt.status == AttemptStatus::Ok, &out.stdout, out.usage.as_ref())?;
        }
        self.engine.count_run(attempt.status);
        if let Some(slot) = self.attempts.lock().iter_mut().find(|a| a.number == number) {
            *slot = attempt.clone();
        }
        self.instance_ended(&instance_id)?;

        match (attempt.status, parsed) {
            (AttemptStatus::Ok, Some(o)) => {
                self.ensure_escalations(&attempt, o.escalations())?;
                self.progress(|p| p.attempts += 1);
                Ok(Tried::Done(attempt, o))
            }
            (AttemptStatus::Interrupted, _) => Err(StepError::Stopped),
            (_, _) => {
                let err = attempt.error.clone().unwrap_or_else(|| "failed".into());
                let tail = attempts::tail(&out.stderr, 2000);
                let msg = format!(
                    "{} ({role_id}, attempt {number}, {}): {err}{}",
                    info.step,
                    attempt.file_stem(),
                    if tail.is_empty() { String::new() } else { format!("\nstderr: {tail}") }
                );
                tracing::warn!(task = %self.id, "{msg}");
                self.log_error(&info.step, &msg)?;
                self.progress(|p| {
                    p.attempts += 1;
                    p.last_error = Some(msg.clone());
                });
                let kind = match attempt.status {
                    AttemptStatus::TimedOut => "component_timeout",
                    _ if err.starts_with("invalid output: sensitive_filter_failed") => "sensitive_filter_failed",
                    _ if err.starts_with("invalid output: platform_compliance_failed") => "platform_compliance_failed",
                    _ if err.starts_with("invalid output") => "invalid_output",
                    _ => "attempt_failed",
                };
                Ok(Tried::Failed {
                    kind,
                    error: format!("{role_id}: {err}"),
                    skip_retries: out.skip_retries,
                    cut_off: out.cut_off,
                })
            }
        }
    }

    /// The shape the step's reply must have: the step's own, else its kind's (a
    /// PM picks its team among the roles it was offered that do a team's work:
    /// not a PM, the validator or the harvester, nor a role that names its own
    /// `component` or `reply_schema`, as the blueprints' components do).
    fn reply_shape(&self, info: &StepInfo) -> ReplyShape {
        if let Some(shape) = &info.reply {
            return shape.clone();
        }
        let cfg = self.engine.config();
        let lifecycle = [cfg.lifecycle.validator.as_deref(), cfg.lifecycle.harvester.as_deref()];
        let workers: Vec<String> = info
            .extra
            .get("availableRoles")
            .and_then(serde_json::Value::as_array)
            .map(|v| v.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| !lifecycle.contains(&Some(r.as_str())))
            .filter(|r| {
                cfg.roles
                    .get(r)
                    .is_some_and(|c| c.component.is_none() && c.llm.as_ref().is_none_or(|l| l.reply_schema.is_none()))
            })
            .filter(|r| {
                clawboard_core::acl::Component::default_for_role(r).0 != clawboard_core::acl::Component::Orchestrator
            })
            .collect();
        reply::team_step(info.kind, &workers)
    }

    /// Makes sure the escalation files an attempt raised exist.
    fn ensure_escalations(&self, a: &Attempt, raised: &[RaisedEscalation]) -> Result<(), StepError> {
        for (id, e) in a.escalations.iter().zip(raised) {
            escalations::raise(&self.engine.store, id, &a.role, &self.id, e)?;
        }
        Ok(())
    }

    fn instance_started(&self, a: &Attempt, token: &str) -> Result<(), StepError> {
        let info = InstanceInfo {
            id: a.instance_id.clone(),
            role: a.role.clone(),
            task_id: self.id.clone(),
            step: a.step.clone(),
            started_at: a.started_at.clone(),
            token: token.to_owned(),
        };
        // Before the token works: every escalation it raises is kept for the attempt.
        self.engine.open_raised(&info.id);
        self.engine.instances.lock().push(info.clone());
        self.progress(|p| {
            p.step = a.step.clone();
            p.iteration = a
                .step
                .strip_prefix("iter-")
                .and_then(|s| s.split('/').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(p.iteration);
            p.running.push((info.id.clone(), info.role.clone(), info.step.clone(), info.started_at.to_string()));
        });
        self.engine.write_active_instances()?;
        Ok(())
    }

    fn instance_ended(&self, instance_id: &str) -> Result<(), StepError> {
        // Taken already when the attempt was recorded; dropped here on the other ways out.
        self.engine.take_raised(instance_id);
        self.engine.instances.lock().retain(|i| i.id != instance_id);
        self.page.lock().running.retain(|r| r.0 != instance_id);
        self.engine.write_active_instances()?;
        Ok(())
    }
}

/// Removes every instance from `roles/active.json` (at daemon start all are stale).
/// The file is a view of the instances running in this process, written without
/// fsync: one a power loss left unreadable is replaced by an empty list.
pub fn clear_active_instances(store: &clawboard_core::Store) -> Result<usize, clawboard_core::Error> {
    let rel = RelPath::new(layout::ACTIVE_INSTANCES)?;
    let cleared = store.update_view_json(&rel, |act: &mut ActiveInstances| {
        let n = act.instances.len();
        act.instances.clear();
        n
    });
    match cleared {
        Err(clawboard_core::Error::Invalid(why)) => {
            tracing::warn!("roles/active.json was unreadable ({why}); starting it afresh");
            store.write_view(&rel, clawboard_core::store::to_pretty_json(&ActiveInstances::default()).as_bytes())?;
            Ok(0)
        }
        other => other,
    }
}

/// Revokes a role instance's token when dropped.
struct Revoke<'e>(&'e crate::Engine, String);

impl Drop for Revoke<'_> {
    fn drop(&mut self) {
        self.0.revoke_token(&self.1);
    }
}
