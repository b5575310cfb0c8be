//! `escalations/{timestamp}.json` and `tasks/{taskId}/escalations/{timestamp}.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::task::names;
use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Critical,
    High,
    Normal,
}
names!(Level: Critical => "critical", High => "high", Normal => "normal");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approved,
    Rejected,
}
names!(Decision: Approved => "approved", Rejected => "rejected");

/// An escalation a role (or the daemon) raises for a human or the GM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Escalation {
    pub level: Level,
    /// The agent or role id that raised it.
    pub from: String,
    pub issue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_action: Option<String>,
    #[serde(default)]
    pub requires_human_approval: bool,
    /// The task it is about, if any; such a task waits for the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Id>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    /// The role instance that raised it through the daemon's API while the task ran
    /// (set by the daemon). A daemon that crashed before that run's attempt was
    /// recorded finds it by this, so that it still holds its task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

impl Escalation {
    /// A new, undecided escalation created now.
    pub fn raised(level: Level, from: impl Into<String>, issue: impl Into<String>) -> Escalation {
        Escalation {
            level,
            from: from.into(),
            issue: issue.into(),
            suggested_action: None,
            requires_human_approval: false,
            task_id: None,
            created_at: Some(Timestamp::now()),
            instance_id: None,
            decision: None,
            decided_by: None,
            decided_at: None,
            note: None,
            extra: Extra::default(),
        }
    }
}
