//! This node as the other sync modules see it: its heartbeat object in the bucket
//! (`_nodes/{node}.json`), and what it keeps on disk about the tasks it claimed
//! (`.clawboard/cluster/claims/`) and lost (`.clawboard/fenced/`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const NODES_PREFIX: &str = "_nodes/";

/// `_nodes/{node}.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub node: String,
    pub seen_at: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default)]
    pub pid: u32,
    /// Tasks with a role running now.
    #[serde(default)]
    pub running_tasks: Vec<String>,
    /// Tasks this node has claimed and not finished (running, queued or held).
    #[serde(default)]
    pub active_tasks: Vec<String>,
    /// This node's `sync.lease` in ms (written by [`crate::Cluster::heartbeat`]):
    /// a taker waits at least this long (see [`crate::lease`]). Absent from
    /// heartbeats of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

impl Heartbeat {
    /// How long another node waits, with its own `lease`, before it takes this
    /// node's tasks over: the longer of the two.
    pub fn lease_for_takers(&self, lease: std::time::Duration) -> std::time::Duration {
        self.lease_ms.map_or(lease, |ms| lease.max(std::time::Duration::from_millis(ms)))
    }
}

pub(crate) fn fenced_dir(root: &Path) -> PathBuf {
    root.join(clawboard_core::layout::FENCED)
}

/// True once this node lost `task`'s claim.
pub fn is_fenced(root: &Path, task: &str) -> bool {
    clawboard_core::layout::is_fenced(root, task)
}

/// The claim generation this node holds for `task` (`.clawboard/cluster/claims/`).
pub fn held_generation(root: &Path, task: &str) -> Option<u64> {
    std::fs::read_to_string(root.join(".clawboard/cluster/claims").join(task)).ok()?.trim().parse().ok()
}

pub(crate) fn remember_generation(root: &Path, task: &str, generation: u64) -> Result<()> {
    let dir = root.join(".clawboard/cluster/claims");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    clawboard_core::store::write_atomic(&dir, task, format!("{generation}\n").as_bytes())?;
    Ok(())
}
