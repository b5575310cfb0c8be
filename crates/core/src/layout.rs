//! The tree (seed 002 plus `inbox/` and `.clawboard/`), by name, in one place.

use crate::formats::{ActiveInstances, KnowledgeSync, MemoryQueue, NodeStatus, PmPerformance, RiskLimits};

pub const TASKS: &str = "tasks";
pub const GM: &str = "gm";
pub const ROLES: &str = "roles";
pub const ESCALATIONS: &str = "escalations";
pub const SHARED: &str = "shared";
pub const HARVEST: &str = "harvest";
pub const HARVEST_DAILY: &str = "harvest/daily";
pub const HARVEST_WEEKLY: &str = "harvest/weekly";
pub const REPORTS: &str = "reports";
pub const REPORTS_DAILY: &str = "reports/daily";
pub const REPORTS_WEEKLY: &str = "reports/weekly";
pub const REPORTS_MONTHLY: &str = "reports/monthly";
/// Blackboard entries (seed 004): `entries/{project_id}/{id}.json`.
pub const ENTRIES: &str = "entries";
pub const INBOX: &str = "inbox";
pub const REJECTED: &str = "inbox/rejected";
/// The daemon's own state: never synced as content, never shown to roles.
pub const STATE: &str = ".clawboard";
pub const LOCKS: &str = ".clawboard/locks";
/// The change journal, and each consumer's durable position in it.
pub const JOURNAL: &str = ".clawboard/journal";
pub const CURSORS: &str = ".clawboard/cursors";
/// The write-ahead log of deferred writes (see `store/deferred.rs`).
pub const WAL: &str = ".clawboard/wal.log";
/// Tasks another node holds now (several nodes on one bucket): `{FENCED}/{taskId}/`
/// marks one, and keeps what this node had changed there. Nothing is written into
/// such a task's directory by this node (but what the holder's versions bring).
pub const FENCED: &str = ".clawboard/fenced";
/// The sync's bucket when none is configured: a local directory, written by the
/// sync's directory backend alone (never through the store).
pub const LOCAL_BUCKET: &str = ".clawboard/bucket";
/// The running daemon's token for a person's board writes (mode 600): whoever
/// can read it can write the tree's files anyway.
pub const PERSON_TOKEN: &str = ".clawboard/person-token";
/// Tasks this node ever claimed (one file each, created exclusively), and those of
/// them not finished yet, which a starting daemon resumes.
pub const CLAIMS: &str = ".clawboard/claims";
pub const ACTIVE: &str = ".clawboard/active";
/// How this node handles each entry a lane picked: `{id}.json` (claimed, lost, ran, applied).
pub const LANES_STATE: &str = ".clawboard/lanes";
/// Dropped files being taken in, renamed to `{id}@{name}`.
pub const INTAKE: &str = ".clawboard/intake";
/// The memory archive's repository and state, and the harvest's index of task files.
pub const ARCHIVE: &str = ".clawboard/archive";
pub const HARVEST_INDEX: &str = ".clawboard/harvest-index.json";
/// Layout version of the tree, for future migrations.
pub const LAYOUT_VERSION_FILE: &str = ".clawboard/layout-version";
pub const LAYOUT_VERSION: &str = "1\n";

pub const TASK_FILE: &str = "task.json";
pub const TEAM_FILE: &str = "team-composition.json";
pub const STATUS_FILE: &str = "status.md";
pub const RESULT_FILE: &str = "result.json";
pub const VALIDATION_FILE: &str = "validation.json";
pub const HARVEST_FILE: &str = "memory-harvest.json";
/// A task's lifecycle errors, one entry per line, appended.
pub const ERRORS_FILE: &str = "errors.log";
/// A task's attempt records, `attempts/{NNNN}-{role}.json` with their raw output.
pub const ATTEMPTS_DIR: &str = "attempts";

/// The role instances running now, on every node.
pub const ACTIVE_INSTANCES: &str = "roles/active.json";

/// Files every daemon updates, which sync merges rather than copies on conflict
/// (see [`crate::merge`]).
pub const MEMORY_QUEUE: &str = "roles/memory-queue.json";
pub const KNOWLEDGE_SYNC: &str = "shared/knowledge-sync.json";
pub const PM_PERFORMANCE: &str = "gm/pm-performance.json";
pub const GM_DECISIONS: &str = "gm/decisions.md";
pub const GM_ARBITRATIONS: &str = "gm/arbitrations.md";

/// Every directory `init` creates, parents first.
pub const DIRS: &[&str] = &[
    TASKS,
    GM,
    ROLES,
    ESCALATIONS,
    SHARED,
    HARVEST,
    HARVEST_DAILY,
    HARVEST_WEEKLY,
    REPORTS,
    REPORTS_DAILY,
    REPORTS_WEEKLY,
    REPORTS_MONTHLY,
    ENTRIES,
    INBOX,
    REJECTED,
    STATE,
    LOCKS,
];

/// The files a task directory may hold, in lifecycle order.
pub const TASK_FILES: &[&str] = &[TASK_FILE, TEAM_FILE, STATUS_FILE, RESULT_FILE, VALIDATION_FILE, HARVEST_FILE];

/// Every file `init` creates when missing, with its initial content.
pub fn initial_files() -> Vec<(&'static str, String)> {
    fn json<T: serde::Serialize + Default>() -> String {
        crate::store::to_pretty_json(&T::default())
    }
    vec![
        (ACTIVE_INSTANCES, json::<ActiveInstances>()),
        (MEMORY_QUEUE, json::<MemoryQueue>()),
        ("shared/risk-limits.json", json::<RiskLimits>()),
        ("shared/node-status.json", json::<NodeStatus>()),
        (KNOWLEDGE_SYNC, json::<KnowledgeSync>()),
        (PM_PERFORMANCE, json::<PmPerformance>()),
        (GM_DECISIONS, "# GM decisions\n\nOne entry per decision, newest last.\n".to_owned()),
        (GM_ARBITRATIONS, "# Arbitrations\n\nOne entry per arbitration, newest last.\n".to_owned()),
        (LAYOUT_VERSION_FILE, LAYOUT_VERSION.to_owned()),
    ]
}

/// `tasks/{id}/{file}`.
pub fn task_file(task_id: &str, file: &str) -> String {
    format!("{TASKS}/{task_id}/{file}")
}

/// The task a tree path is inside of (`tasks/{id}/…`).
pub fn task_of(rel: &str) -> Option<&str> {
    rel.strip_prefix("tasks/")?.split_once('/').map(|(task, _)| task)
}

/// True once this node lost `task_id`'s claim to another node (see [`FENCED`]).
pub fn is_fenced(root: &std::path::Path, task_id: &str) -> bool {
    !task_id.is_empty() && root.join(FENCED).join(task_id).is_dir()
}

/// `harvest/daily/{YYYY-MM-DD}.json`.
pub fn daily_harvest_file(date: &str) -> String {
    format!("{HARVEST_DAILY}/{date}.json")
}

/// `harvest/weekly/{YYYY-Www}.json`.
pub fn weekly_harvest_file(week: &str) -> String {
    format!("{HARVEST_WEEKLY}/{week}.json")
}

/// `reports/{kind}/{name}.md`: `kind` is `daily`, `weekly` or `monthly`.
pub fn report_file(kind: &str, name: &str) -> String {
    format!("{REPORTS}/{kind}/{name}.md")
}
