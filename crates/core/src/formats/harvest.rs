//! Memory: a task's `memory-harvest.json`, and the daily and weekly harvests
//! (`harvest/daily/{YYYY-MM-DD}.json`, `harvest/weekly/{YYYY-Www}.json`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, TaskType, is_empty_map};
use crate::{Id, Timestamp};

/// `tasks/{taskId}/memory-harvest.json`: what each role learned on the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryHarvest {
    pub task_id: Id,
    pub harvested_at: Timestamp,
    #[serde(default)]
    pub experiences: Vec<Experience>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cross_pollination_candidates: Vec<CrossPollination>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Experience {
    pub role_id: Id,
    #[serde(default)]
    pub cells: Vec<Cell>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// One unit of memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cell {
    /// e.g. `success`, `failure`, `insight`, `pattern`
    #[serde(rename = "type")]
    pub kind: String,
    pub content: String,
    /// 0–1: how much the memory is worth keeping.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub value: f64,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// A pattern one role could teach another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrossPollination {
    pub from_role: Id,
    pub to_role: Id,
    pub pattern: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub value: f64,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// A cell as gathered into a daily or weekly harvest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarvestedCell {
    pub role_id: Id,
    pub task_id: Id,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<TaskType>,
    #[serde(rename = "type")]
    pub kind: String,
    pub content: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub value: f64,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// A cross-pollination candidate as gathered into a harvest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarvestedPollination {
    pub task_id: Id,
    pub from_role: Id,
    pub to_role: Id,
    pub pattern: String,
    #[schemars(range(min = 0.0, max = 1.0))]
    pub value: f64,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `harvest/daily/{YYYY-MM-DD}.json` (每日收割结果).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailyHarvest {
    /// `YYYY-MM-DD`, equal to the file name.
    #[schemars(regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub date: String,
    pub generated_at: Timestamp,
    /// The tasks whose memory harvests were gathered, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<Id>,
    /// Deduplicated cells, highest value first.
    #[serde(default)]
    pub cells: Vec<HarvestedCell>,
    #[serde(default)]
    pub cross_pollination: Vec<HarvestedPollination>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `harvest/weekly/{YYYY-Www}.json` (每周精华): the week's best cells per role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeeklyHarvest {
    /// ISO week, `YYYY-Www`, equal to the file name.
    #[schemars(regex(pattern = r"^[0-9]{4}-W[0-9]{2}$"))]
    pub week: String,
    pub generated_at: Timestamp,
    /// How many cells per role were kept.
    pub top_per_role: u32,
    /// The tasks whose memory harvests were gathered, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<Id>,
    #[serde(default)]
    pub cells: Vec<HarvestedCell>,
    #[serde(default)]
    pub cross_pollination: Vec<HarvestedPollination>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}
