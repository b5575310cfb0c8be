//! One lifecycle step: find its finished attempt, or run its role through the
//! one executor (`engine/call.rs`) with the step's slice, board and progress page.

use clawboard_core::formats::ActiveInstances;
use clawboard_core::lock::Lock;
use clawboard_core::{RelPath, layout};
use clawboard_records::attempts::{self, Attempt};
use clawboard_records::escalations;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::board::Handed;
use super::call::{self, Call, Site};
use super::{InstanceInfo, StepError, TaskRun};
use crate::config::RoleConfig;
use crate::context::{self, StepInfo};
use crate::output::{HarvestOutput, PmOutput, RaisedEscalation, ValidatorOutput, WorkerOutput, parse_output};
use crate::reply::{self, ReplyShape};
use crate::runner::RunOutcome;

pub(crate) use super::call::RoleOutput;

macro_rules! role_output {
    ($($t:ty),+) => {$(
        impl RoleOutput for $t {
            fn escalations(&self) -> &[RaisedEscalation] { &self.escalations }
        }
    )+};
}
role_output!(PmOutput, WorkerOutput, ValidatorOutput, HarvestOutput);

impl TaskRun<'_> {
    /// The output of `info.step`: from its `ok` attempt if it has one, else by running
    /// `role` (then its fallbacks). `check` adds rules beyond the output's format.
    pub(crate) async fn step<T: RoleOutput + DeserializeOwned>(
        &self,
        info: &StepInfo,
        role: &str,
        check: impl Fn(&T) -> Result<(), String>,
    ) -> Result<(Attempt, T), StepError> {
        let site = StepSite { run: self, info, dir: attempts::attempts_dir(&self.id) };
        if let Some((a, out)) = call::finished(&site, &info.step, &parse_output::<T>)? {
            self.ensure_escalations(&a, out.escalations())?;
            return Ok((a, out));
        }
        self.board_step_started(info)?;
        let chain = match &info.plan {
            // A blueprint step names its one fallback itself.
            Some(plan) => std::iter::once(role.to_owned()).chain(plan.fallback.clone()).collect(),
            None => Call::fallbacks_of(&self.engine.roles(), role),
        };
        let call = Call { step: &info.step, chain, retries: info.plan.as_ref().map(|p| p.retries) };
        let accept = |stdout: &[u8]| {
            crate::output::check_scope(stdout, &self.id)
                .and_then(|()| parse_output::<T>(stdout))
                .and_then(|o| check(&o).map(|()| o))
        };
        let outcome = call::run(&site, &call, &accept).await;
        match &outcome {
            Ok(_) => self.board_step_ended(info, true)?,
            Err(StepError::Failed(_)) => self.board_step_ended(info, false)?,
            Err(_) => {}
        }
        // A blueprint step's output is applied by its VM, which sends them then.
        if info.plan.is_none() {
            self.send_spans();
        }
        outcome
    }

    /// The shape the step's reply must have: the step's own, else its kind's (a
    /// PM picks its team among the roles it was offered that do a team's work:
    /// not a PM, the validator or the harvester, nor a role that names its own
    /// `component`, as the blueprints' components do).
    fn reply_shape(&self, info: &StepInfo) -> ReplyShape {
        if let Some(shape) = &info.reply {
            return shape.clone();
        }
        let cfg = self.engine.roles();
        let lifecycle = [cfg.lifecycle.validator.as_deref(), cfg.lifecycle.harvester.as_deref()];
        let workers: Vec<String> = info
            .extra
            .get("availableRoles")
            .and_then(serde_json::Value::as_array)
            .map(|v| v.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|r| !lifecycle.contains(&Some(r.as_str())))
            .filter(|r| cfg.roles.get(r).is_some_and(|c| c.component.is_none()))
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

/// A step of a task: handed its slice (or its ACL-filtered files), its attempts
/// in `tasks/{id}/attempts/`, its progress on the status page and the board.
struct StepSite<'r, 'e> {
    run: &'r TaskRun<'e>,
    info: &'r StepInfo,
    dir: String,
}

impl Site for StepSite<'_, '_> {
    type Handed = Handed;

    fn engine(&self) -> &crate::Engine {
        self.run.engine
    }

    fn task_id(&self) -> &str {
        &self.run.id
    }

    fn records_dir(&self) -> &str {
        &self.dir
    }

    fn attempts(&self) -> &Lock<Vec<Attempt>> {
        &self.run.attempts
    }

    /// A role with a scope or template is handed its slice; over budget, the step
    /// fails before anything runs.
    async fn hand(&self, role_id: &str, role: &RoleConfig, instance: &str) -> Result<Option<Handed>, StepError> {
        let handed = self.run.slice_for(self.info, role_id, role, instance, None)?;
        self.run.fit_model_budget(self.info, role_id, role, instance, handed).await
    }

    fn context(&self, handed: Option<&Handed>, role_id: &str, role: &RoleConfig) -> Value {
        let run = self.run;
        match handed {
            Some(h) => context::sliced(&run.id, role_id, self.info, &h.data, h.tokens, h.budget),
            None => {
                let may_read = |path: &str| run.engine.may_read(role_id, &run.id, path);
                context::build(&run.engine.store, &run.task, role_id, role, self.info, &may_read)
            }
        }
    }

    fn shape(&self, cut_offs: u32) -> ReplyShape {
        self.run.reply_shape(self.info).grown(cut_offs)
    }

    /// Lists the instance (the status page, `roles/active.json`) and counts the
    /// whole board for the slice's ledger entry, while the role starts.
    fn started(&self, attempt: &Attempt, token: &str, handed: Option<&mut Handed>) -> Result<(), StepError> {
        let started = self.run.instance_started(attempt, token);
        if let Some(h) = handed {
            self.run.count_full(h);
        }
        started
    }

    fn recorded(
        &self,
        handed: Handed,
        attempt: &Attempt,
        out: &RunOutcome,
    ) -> Result<Option<clawboard_board::ledger::Handout>, StepError> {
        let ok = attempt.status == attempts::AttemptStatus::Ok;
        self.run.slice_finished(handed, ok, &out.stdout, out.usage.as_ref()).map(Some)
    }

    fn trace(&self) -> Option<crate::telemetry::SpanContext> {
        self.run.trace.as_ref().and_then(crate::telemetry::TaskTrace::root)
    }

    fn span_ended(&self, instance: &str, span: crate::telemetry::SpanData) {
        self.run.hold_span(instance, span);
    }

    fn ended(&self, instance: &str) -> Result<(), StepError> {
        self.run.instance_ended(instance)
    }

    fn succeeded(&self, attempt: &Attempt, raised: &[RaisedEscalation]) -> Result<(), StepError> {
        self.run.ensure_escalations(attempt, raised)?;
        self.run.progress(|p| p.attempts += 1);
        Ok(())
    }

    fn failed(&self, kind: &str, message: &str, error: &str, retry: u32) -> Result<(), StepError> {
        let run = self.run;
        tracing::warn!(task = %run.id, "{message}");
        run.log_error(&self.info.step, message)?;
        run.progress(|p| {
            p.attempts += 1;
            p.last_error = Some(message.to_owned());
        });
        run.board_attempt_failed(self.info, kind, error, retry)
    }
}
