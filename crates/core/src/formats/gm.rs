//! `gm/pm-performance.json` (PM历史表现): how each PM's tasks went.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, is_empty_map};

fn is_zero(n: &u64) -> bool {
    *n == 0
}
use crate::{Id, Timestamp};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PmPerformance {
    /// Keyed by PM role id.
    #[serde(default)]
    pub pms: BTreeMap<Id, PmRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PmRecord {
    pub tasks: u64,
    pub completed: u64,
    pub failed: u64,
    /// completed / (completed + failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_rate: Option<f64>,
    /// How many tasks had a validation: the count the two means cover.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub validated_tasks: u64,
    /// Mean final validation score of the PM's validated tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_score: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_iterations: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task_at: Option<Timestamp>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}
