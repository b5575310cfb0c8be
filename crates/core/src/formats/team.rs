//! The files a task's team writes: `team-composition.json` (PM), `result.json`
//! (the team), `validation.json` (the validator).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

/// `tasks/{taskId}/team-composition.json`: the PM's casting decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TeamComposition {
    pub task_id: Id,
    pub pm_decision: PmDecision,
    /// The roles to run, in `priority` order (1 first).
    pub team: Vec<Member>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Free text, e.g. `2h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_time: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PmDecision {
    pub pm_id: Id,
    pub decided_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub role: Id,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Run order: 1 runs first; equal priorities may run together.
    pub priority: u32,
    #[serde(default)]
    pub memory_loaded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<Id>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `tasks/{taskId}/result.json`: what the team produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    pub task_id: Id,
    pub produced_at: Timestamp,
    /// One paragraph a human reads first.
    pub summary: String,
    /// Files or links the team produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// What each role instance contributed, in run order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contributions: Vec<Contribution>,
    /// Which validation round produced this result (1 = first try).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// A path relative to the task directory, or a URL.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Contribution {
    pub role: Id,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<Id>,
    pub summary: String,
    /// The role's own JSON output, kept as it was printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `tasks/{taskId}/validation.json`: the validator's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub task_id: Id,
    pub validator_id: Id,
    pub validated_at: Timestamp,
    /// How many team rounds ran before this validation (1 = first try).
    pub iterations: u32,
    pub result: ValidationResult,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// Scores per criterion (`correctness`, `completeness`, `quality`, `standards` …), 0–10.
pub type Criteria = BTreeMap<String, f64>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationResult {
    /// 0–10.
    #[schemars(range(min = 0.0, max = 10.0))]
    pub score: f64,
    pub pass: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub criteria: Criteria,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub issues: Vec<Issue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Issue {
    /// e.g. `minor`, `major`, `critical`
    pub severity: String,
    pub description: String,
    /// e.g. `file:line`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}
