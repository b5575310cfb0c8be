//! A blueprint task's flow around the VM: the blueprint a task (or its PM) names,
//! the VM's run, the saved output contract, then the validator and the harvest.

use std::sync::Arc;

use clawboard_blueprint::contract::Input;
use clawboard_blueprint::format::Blueprint;
use serde_json::{Map, Value, json};

use super::{Vm, failed};
use crate::engine::{StepError, TaskRun};

impl TaskRun<'_> {
    /// The task's board as it is now (a blueprint task always keeps one).
    pub(crate) fn board_state(&self) -> Result<Arc<clawboard_core::formats::BoardFile>, StepError> {
        let Some(board) = &self.board else {
            return Err(failed(format!("task {}: a blueprint task needs its board, and it has none", self.id)));
        };
        board.load_shared().map_err(|e| match e {
            clawboard_board::Error::Store(e) => StepError::Store(e),
            other => failed(other),
        })
    }
}

impl TaskRun<'_> {
    /// The blueprint and input a task names in `task.json`, if it names one.
    pub(crate) fn blueprint_task(&self) -> Result<Option<(Arc<Blueprint>, Input)>, StepError> {
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
    pub(crate) fn input_from_task(&self, blueprint_id: &str) -> Result<Input, StepError> {
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
    pub(crate) async fn blueprint_flow(
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
        let (output, why) = match (&stopped, self.saved_output(&bp.id)) {
            (None, Some(saved)) => (saved, None),
            _ => vm.finish(stopped.as_deref()).await?,
        };
        // A partial run (a step failed for good, or the content fell short of a
        // check or the quality target) is no success: a person looks at it.
        if why.is_none() {
            vm.clear_temporary()?;
        }
        if let Some(why) = why {
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
        let rel = crate::engine::run::rel(&self.id, clawboard_core::layout::RESULT_FILE).ok()?;
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
