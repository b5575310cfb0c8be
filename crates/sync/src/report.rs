//! What a push or a pull reports, and the status file `sync status` reads
//! (`.clawboard/sync/status.json`): shared by push, pull and the command line.

use serde::{Deserialize, Serialize};

/// Now, as status files, reports and heartbeats write it (RFC 3339, ms, UTC).
pub(crate) fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Requests sent (attempts, retries included), by operation.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RequestCounts {
    pub put: u64,
    pub get: u64,
    pub head: u64,
    pub list: u64,
    pub delete: u64,
}

/// What the process that last wrote the status file did since it started.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessTotals {
    pub pid: u32,
    pub requests: RequestCounts,
    /// Uploads that succeeded (a file the bucket already had is never sent again).
    pub uploaded: u64,
    pub deleted: u64,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PushReport {
    /// A full push (a walk of the tree) rather than the journal's changes.
    pub full: bool,
    pub entries: u64,
    pub uploaded: u64,
    pub deleted: u64,
    /// Changed paths found already pushed (same size and mtime, or same hash).
    pub unchanged: u64,
    /// New files whose path another node had already pushed: left for pull to resolve.
    #[serde(default)]
    pub deferred: u64,
    pub bytes: u64,
    pub cursor: u64,
    pub elapsed_ms: u64,
    /// Files that could not be read (`path: reason`): left out of this push rather
    /// than holding back every other change; pushed when they change again, or by
    /// `sync full` / `sync verify --fix`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PullReport {
    /// A full reconcile by listing (the log did not cover this node's cursor).
    pub full: bool,
    pub segments: u64,
    pub applied: u64,
    pub deleted: u64,
    /// Conflict copies written (`path → copy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Conflict>,
    /// Entries left out (`path: reason`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    pub path: String,
    /// Where the losing version is kept (none when the loser was a delete).
    pub copy: Option<String>,
    pub winner: String,
    pub loser: String,
    pub at: String,
}

/// What `sync status` shows; kept in `.clawboard/sync/status.json`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFile {
    pub remote: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_push_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_push: Option<PushReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
    #[serde(default)]
    pub this_process: ProcessTotals,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pull_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pull: Option<PullReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pull_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pull_error_at: Option<String>,
}
