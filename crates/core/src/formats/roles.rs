//! `roles/active.json` (running role instances) and `roles/memory-queue.json`
//! (memories waiting to be returned to their roles).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::task::names;
use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

/// `roles/active.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveInstances {
    #[serde(default)]
    pub instances: Vec<Instance>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub id: Id,
    pub role: Id,
    pub task_id: Id,
    pub started_at: Timestamp,
    pub status: InstanceStatus,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceStatus {
    Running,
    Completed,
    Failed,
}
names!(InstanceStatus: Running => "running", Completed => "completed", Failed => "failed");

/// `roles/memory-queue.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQueue {
    #[serde(default)]
    pub queue: Vec<QueueEntry>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    pub task_id: Id,
    pub role_id: Id,
    pub status: QueueStatus,
    pub enqueued_at: Timestamp,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueStatus {
    Pending,
    Completed,
}
names!(QueueStatus: Pending => "pending", Completed => "completed");
