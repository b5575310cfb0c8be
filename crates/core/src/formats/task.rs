use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

/// What kind of work a task is; picks the PM when `assignedPM` is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    Coding,
    Writing,
    Research,
    Quant,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    #[default]
    Pending,
    Running,
    Completed,
    Failed,
}

macro_rules! names {
    ($t:ty: $($v:ident => $s:literal),+) => {
        impl $t {
            /// Every value, in the seed's order.
            pub const ALL: &'static [$t] = &[$(<$t>::$v),+];
            /// The name as written in the files.
            pub fn as_str(self) -> &'static str {
                match self { $(<$t>::$v => $s),+ }
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($s => Ok(<$t>::$v),)+
                    _ => Err(format!(
                        "{s:?} is not one of {}",
                        [$($s),+].join(", ")
                    )),
                }
            }
        }
    };
}
pub(crate) use names;

names!(TaskType: Coding => "coding", Writing => "writing", Research => "research", Quant => "quant");
names!(Priority: High => "high", Normal => "normal", Low => "low");
names!(TaskStatus: Pending => "pending", Running => "running", Completed => "completed", Failed => "failed");

/// Where a task came from (seed: `context`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskContext {
    /// e.g. `telegram`, `claude-code`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `tasks/{taskId}/task.json`: a task as stored on the blackboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Also the name of the task's directory.
    pub task_id: Id,
    #[serde(rename = "type")]
    pub kind: TaskType,
    pub description: String,
    pub priority: Priority,
    /// Who asked: `assistant`, `human`, a role id …
    pub created_by: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The PM role that composes the team; mapped from `type` when absent.
    #[serde(rename = "assignedPM", default, skip_serializing_if = "Option::is_none")]
    pub assigned_pm: Option<Id>,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<TaskContext>,
    /// Set when the task reaches `completed` or `failed`; retention ages from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// A task as a person or assistant submits it (`task submit`, `inbox/*.json`):
/// `taskId`, `createdAt`, `createdBy`, `priority` and `status` may be left out and
/// are filled in on submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSubmission {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Id>,
    #[serde(rename = "type")]
    pub kind: TaskType,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    #[serde(rename = "assignedPM", default, skip_serializing_if = "Option::is_none")]
    pub assigned_pm: Option<Id>,
    /// Must be `pending` (or absent) for a new task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<TaskContext>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

impl TaskSubmission {
    /// The stored task, with what was left out filled in.
    pub fn into_task(self, task_id: Id, now: Timestamp, created_by: &str) -> Task {
        Task {
            task_id,
            kind: self.kind,
            description: self.description,
            priority: self.priority.unwrap_or_default(),
            created_by: self.created_by.unwrap_or_else(|| created_by.to_owned()),
            created_at: self.created_at.unwrap_or(now),
            deadline: self.deadline,
            assigned_pm: self.assigned_pm,
            status: TaskStatus::Pending,
            context: self.context,
            completed_at: None,
            extra: self.extra,
        }
    }
}
