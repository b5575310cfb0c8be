//! One role run on its own, as the lifecycle would run it at one step, with no
//! daemon and no tree (`clawboard role try`): the context it is handed, what it
//! printed, and whether the lifecycle would accept that, and why not.

use clawboard_core::formats::Task;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::config::RolesConfig;
use crate::context::{self, StepInfo};
use crate::output::{HarvestOutput, PmOutput, ValidatorOutput, WorkerOutput, check_harvest, check_scope, parse_output};
use crate::reply::{ReplyShape, team_step};
use crate::runner::{self, RunIdentity, RunOutcome, RunStatus};

/// The lifecycle step a role is tried at (seed 002).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Pm,
    Team,
    Validator,
    Harvest,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pm => "pm",
            Kind::Team => "team",
            Kind::Validator => "validator",
            Kind::Harvest => "harvest",
        }
    }

    /// The step a role holds in `cfg`: a PM of a task type (or named `*-pm`),
    /// the validator, the harvester, else a team member.
    pub fn of(cfg: &RolesConfig, role: &str) -> Kind {
        let lc = &cfg.lifecycle;
        if lc.validator.as_deref() == Some(role) {
            Kind::Validator
        } else if lc.harvester.as_deref() == Some(role) {
            Kind::Harvest
        } else if lc.pm_for_type.values().any(|pm| pm == role) || role.ends_with("-pm") {
            Kind::Pm
        } else {
            Kind::Team
        }
    }
}

/// What a tried run produced.
#[derive(Debug, Serialize)]
pub struct Trial {
    pub role: String,
    pub kind: Kind,
    /// The document the role was handed.
    pub context: Value,
    pub status: RunStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub elapsed_ms: u64,
    /// What it printed (as JSON when it parses, else as text).
    pub stdout: Value,
    pub stderr: String,
    /// The output as the lifecycle reads it, when accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Value>,
    /// Why it is not accepted: the run's failure, or the field its output gets wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The context the lifecycle hands `role` at step `kind` of a new `task`: the
/// task, the step, and the step's own fields as they stand at its first round
/// (the roles a PM may pick; no team results yet for a worker; for a validator
/// or harvester, `result` as given).
pub fn context_for(cfg: &RolesConfig, role: &str, kind: Kind, task: &Task, result: Option<Value>) -> Value {
    let (step, extra) = match kind {
        Kind::Pm => ("pm".to_owned(), json!({"availableRoles": cfg.roles.keys().collect::<Vec<_>>()})),
        Kind::Team => (format!("iter-1/{role}"), json!({"team": [], "previous": [], "validation": null})),
        Kind::Validator => ("iter-1/validator".to_owned(), json!({"result": result, "team": []})),
        Kind::Harvest => ("harvest".to_owned(), json!({"result": result, "team": []})),
    };
    let info = StepInfo {
        kind: kind.name(),
        step,
        iteration: u32::from(kind != Kind::Pm && kind != Kind::Harvest),
        max_iterations: cfg.lifecycle.max_iterations,
        extra: extra.as_object().cloned().unwrap_or_default(),
        ..StepInfo::default()
    };
    // A fresh task has no files beside task.json for `reads` to hand over.
    context::assemble(task, role, &info, Map::new(), Map::new())
}

/// The reply shape a model role is asked for at `kind` (a PM picks among the
/// roles that do a team's work).
fn shape(cfg: &RolesConfig, kind: Kind) -> ReplyShape {
    let lc = &cfg.lifecycle;
    let workers: Vec<String> = cfg
        .roles
        .iter()
        .filter(|(id, r)| {
            Kind::of(cfg, id) == Kind::Team && lc.validator.as_deref() != Some(id.as_str()) && r.component.is_none()
        })
        .map(|(id, _)| id.clone())
        .collect();
    team_step(kind.name(), if kind == Kind::Pm { &workers } else { &[] })
}

/// Runs `role` once with `context` (from its config in `cfg`), under `root`
/// as the run's root, and judges its output as the lifecycle would.
pub async fn run(cfg: &RolesConfig, role: &str, kind: Kind, context: Value, root: &str) -> Result<Trial, String> {
    let config = cfg.roles.get(role).ok_or_else(|| {
        let known: Vec<&str> = cfg.roles.keys().map(String::as_str).collect();
        format!("role {role:?} is not configured under [roles] (configured: {})", known.join(", "))
    })?;
    let task_id = context
        .pointer("/task/taskId")
        .or_else(|| context.get("taskId"))
        .and_then(Value::as_str)
        .unwrap_or("try")
        .to_owned();
    let who = RunIdentity {
        root: root.to_owned(),
        task_id: task_id.clone(),
        role: role.to_owned(),
        instance_id: format!("{role}-try"),
        token: String::new(),
        sandbox: None,
        trace: None,
    };
    let bytes = serde_json::to_vec(&context).map_err(|e| e.to_string())?;
    let (_kill, mut rx) = tokio::sync::watch::channel(false);
    let out = runner::run_shaped(config, &bytes, &shape(cfg, kind), &who, &mut rx).await;
    let verdict = judge(cfg, kind, &out, &task_id);
    let stdout = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stdout).into_owned()));
    let (accepted, refused) = match verdict {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    Ok(Trial {
        role: role.to_owned(),
        kind,
        context,
        status: out.status,
        exit_code: out.exit_code,
        elapsed_ms: u64::try_from(out.elapsed.as_millis()).unwrap_or(u64::MAX),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        accepted,
        refused,
    })
}

/// The lifecycle's judgement of a run: it ended well, stays within its task,
/// and prints what its step reads (with the step's own rules).
fn judge(cfg: &RolesConfig, kind: Kind, out: &RunOutcome, task_id: &str) -> Result<Value, String> {
    if out.status != RunStatus::Exited {
        let why = out.error.clone().unwrap_or_else(|| format!("{:?}", out.status).to_lowercase());
        return Err(format!("the run did not succeed: {why}"));
    }
    check_scope(&out.stdout, task_id)?;
    let as_value = |v: Result<Value, serde_json::Error>| v.map_err(|e| e.to_string());
    match kind {
        Kind::Pm => {
            let o: PmOutput = parse_output(&out.stdout)?;
            if o.team.is_empty() && o.workflow.is_none() {
                return Err("stdout /team: the team is empty; name at least one role".into());
            }
            if let Some((i, m)) = o.team.iter().enumerate().find(|(_, m)| !cfg.roles.contains_key(&m.role)) {
                return Err(format!("stdout /team/{i}/role: role {:?} is not configured under [roles]", m.role));
            }
            as_value(serde_json::to_value(o))
        }
        Kind::Team => as_value(serde_json::to_value(parse_output::<WorkerOutput>(&out.stdout)?)),
        Kind::Validator => {
            let o: ValidatorOutput = parse_output(&out.stdout)?;
            if !(0.0..=10.0).contains(&o.score) {
                return Err(format!("stdout /score: {} is not within 0 and 10", o.score));
            }
            as_value(serde_json::to_value(o))
        }
        Kind::Harvest => {
            let o: HarvestOutput = parse_output(&out.stdout)?;
            check_harvest(&o)?;
            as_value(serde_json::to_value(o))
        }
    }
}
