//! `shared/`: files every node reads. `risk-limits.json` is changed by humans only;
//! `node-status.json` and `knowledge-sync.json` are kept by the daemons, one entry
//! per node id, so that two nodes never write the same entry.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Extra, is_empty_map};
use crate::{Id, Timestamp};

/// `shared/risk-limits.json` (风控规则, only humans may change it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskLimits {
    /// Named limits, e.g. `"maxConcurrentTasks": 4`; values are the humans' to choose.
    #[serde(default)]
    pub limits: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `shared/node-status.json`: every node the blackboard has seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Keyed by node id.
    #[serde(default)]
    pub nodes: BTreeMap<Id, NodeState>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    pub last_seen: Timestamp,
    /// clawboard version the node runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default)]
    pub running_tasks: Vec<Id>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

/// `shared/knowledge-sync.json`: where knowledge stands, per node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KnowledgeSync {
    #[serde(default)]
    pub nodes: BTreeMap<Id, NodeKnowledge>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeKnowledge {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_harvest_at: Option<Timestamp>,
    /// Commit id of the last memory-branch commit this node made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archive_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archive_commit_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archive_push_at: Option<Timestamp>,
    #[serde(flatten, skip_serializing_if = "is_empty_map")]
    pub extra: Extra,
}
