//! The output contract (seed 001, strict): what a blueprint run produces, saved
//! in the task's `result.json` under `output` (and printed by `clawboard run`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use clawboard_core::formats::{Zone, zone_spec};

use crate::{Error, Result};

/// The name errors of [`Output::check`] give as the file (the contract is a
/// document of its own, wherever it is kept).
pub const OUTPUT_FILE: &str = "output.json";

/// A blueprint run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "BlueprintOutput")]
pub struct Output {
    /// How the run went, step by step.
    pub execution_result: ExecutionResult,
    /// The board's final state (黑板最终状态快照): `meta_zone`, `content_zone`, `control_zone`.
    #[schemars(schema_with = "snapshot_schema")]
    pub blackboard_snapshot: Value,
    /// Scores and the middleware's verdicts.
    pub quality_report: QualityReport,
    /// The text to publish, with one version per platform.
    pub final_content: FinalContent,
}

/// `execution_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionResult {
    /// `success`, `partial` (a step's fallback failed too) or `failed` (nothing produced).
    pub status: RunStatus,
    /// The blueprint that ran.
    pub blueprint_id: String,
    /// Every step, in the order they finished (skipped steps too).
    pub steps_executed: Vec<StepExecuted>,
    /// Prompt and completion tokens of every attempt.
    pub total_tokens_used: u64,
    /// From the first step's start to assembly.
    pub execution_time_ms: u64,
}

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Success,
    Partial,
    Failed,
}

/// One step of `steps_executed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepExecuted {
    /// The step's `id` in the blueprint.
    pub step_id: String,
    /// The role that produced the step's output (the fallback's, when it ran).
    pub component: String,
    /// `worker` or `skill`.
    pub component_type: ComponentType,
    /// `completed`, `skipped`, `failed`, or `retried` (completed after a retry or fallback).
    pub status: StepStatus,
    /// Attempts beyond the first.
    pub retries: u32,
    /// The board path the step wrote (its `output`; empty when it writes nothing).
    pub output_key: String,
    /// When the step's fallback produced its output: why the step's own role
    /// did not (its last error). Absent when the role itself answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// Whether a step ran a worker or a skill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComponentType {
    Worker,
    Skill,
}

/// How one step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Completed,
    Skipped,
    Failed,
    Retried,
}

/// `quality_report`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QualityReport {
    /// 0–100.
    #[schemars(range(min = 0.0, max = 100.0))]
    pub overall_score: f64,
    /// 0–100: `control.quality_scores.virality`, the quality gate's metric.
    #[schemars(range(min = 0.0, max = 100.0))]
    pub virality_score: f64,
    /// No listed sensitive word is left in the final content. Absent when the
    /// check did not run (then `checks_not_run` names it): never `true` unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub sensitive_filter_passed: Option<bool>,
    /// Every platform version within its platform's limits. Absent when the check
    /// did not run (`checks_not_run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub platform_compliance: Option<bool>,
    /// What the middleware changed (`sensitive word "最好" replaced by "很好" in …`).
    pub improvements_applied: Vec<String>,
    /// The final checks that did not run, and why (`sensitive_filter:
    /// execution_config.enable_middleware is false`). Absent when every check ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks_not_run: Vec<String>,
}

/// `final_content`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinalContent {
    /// The selected title (`content.hook.selected`), after the middleware.
    pub title: String,
    /// The body text, after the middleware.
    pub body: String,
    /// One per target platform.
    pub platform_versions: Vec<PlatformVersion>,
}

/// One entry of `final_content.platform_versions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlatformVersion {
    /// `xiaohongshu`, `wechat`, `twitter` or `general`.
    pub platform: String,
    /// The text as posted there.
    pub content: String,
    /// Within the platform's `hashtags_max`.
    pub hashtags: Vec<String>,
}

/// The schema of `blackboard_snapshot`: the three zones with the board's known
/// fields (seed 000), no other key.
fn snapshot_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let zones: Map<String, Value> =
        Zone::ALL.iter().map(|z| (z.key().to_owned(), zone_spec(*z).json_schema())).collect();
    let schema = json!({
        "type": "object",
        "description": "The board's final state (黑板最终状态快照): its three zones.",
        "properties": zones,
        "required": Zone::ALL.map(Zone::key),
        "additionalProperties": false,
    });
    schemars::Schema::try_from(schema).unwrap_or_default()
}

impl Output {
    /// One line per step its fallback answered (`title by fallback
    /// hook-generator: title-worker: …`): the result's summary, `clawboard
    /// run`'s report and the task page say them.
    pub fn fallbacks(&self) -> Vec<String> {
        self.execution_result
            .steps_executed
            .iter()
            .filter_map(|e| e.fallback.as_ref().map(|why| format!("{} by fallback {}: {why}", e.step_id, e.component)))
            .collect()
    }

    /// Checks what the types cannot: the snapshot is the three zone objects with
    /// the board's field types, the scores are numbers from 0 to 100.
    pub fn check(&self) -> Result<()> {
        let bad = |field: String, reason: String| Err(Error::invalid(OUTPUT_FILE, None, field, reason));
        let Some(snapshot) = self.blackboard_snapshot.as_object() else {
            return bad(
                "/blackboard_snapshot".into(),
                "must be an object with meta_zone, content_zone and control_zone".into(),
            );
        };
        if let Some(other) = snapshot.keys().find(|k| !Zone::ALL.iter().any(|z| z.key() == k.as_str())) {
            return bad(
                format!("/blackboard_snapshot/{other}"),
                "is not a zone; only meta_zone, content_zone and control_zone".into(),
            );
        }
        for zone in Zone::ALL {
            let at = format!("/blackboard_snapshot/{}", zone.key());
            match snapshot.get(zone.key()) {
                None => return bad(at, "is required".into()),
                Some(v @ Value::Object(_)) => {
                    if let Err((sub, why)) = zone_spec(zone).check(v) {
                        return bad(format!("{at}{}", sub.replace('.', "/")), why);
                    }
                }
                Some(_) => return bad(at, "must be an object".into()),
            }
        }
        let q = &self.quality_report;
        for (name, score) in [("overall_score", q.overall_score), ("virality_score", q.virality_score)] {
            if !score.is_finite() || !(0.0..=100.0).contains(&score) {
                return bad(format!("/quality_report/{name}"), format!("is {score}; it must be 0 to 100"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
