//! What the lifecycle writes from its attempts, once each: `team-composition.json`
//! from the PM's output, `result.json` from the team's, `validation.json` from the
//! validator's, `memory-harvest.json` and the memory-queue entries from the
//! harvester's, and the partial result a failed task keeps.

use clawboard_core::formats::{
    Contribution, Member, MemoryHarvest, MemoryQueue, PmDecision, QueueEntry, QueueStatus, TaskResult, TeamComposition,
    Validation, ValidationResult,
};
use clawboard_core::{Error, Id, RelPath, Timestamp, layout};
use clawboard_records::attempts::Attempt;
use serde_json::{Map, Value};

use super::run::rel;
use super::{StepError, TaskRun};
use crate::output::{HarvestOutput, PmOutput, ValidatorOutput, WorkerOutput};

impl TaskRun<'_> {
    pub(super) fn team_composition(&self, pm: &str, out: &PmOutput) -> Result<TeamComposition, StepError> {
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

    pub(super) fn ensure_result(
        &self,
        iteration: u32,
        done: &[(Attempt, WorkerOutput)],
    ) -> Result<TaskResult, StepError> {
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

    pub(super) fn ensure_validation(&self, iteration: u32, a: &Attempt, o: &ValidatorOutput) -> Result<(), StepError> {
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

    pub(super) fn ensure_harvest(&self, o: &HarvestOutput) -> Result<(), StepError> {
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
    pub(super) fn write_partial_result(&self, reason: &str) -> Result<(), Error> {
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
