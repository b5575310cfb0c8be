//! Typed file formats: one serde type per file the seed (002) defines, plus the
//! files it names without a format (result.json, harvests, shared/*, pm-performance),
//! whose formats are ours and documented in `config/schemas/`.
//!
//! Every struct keeps fields it does not know in `extra`, so a person's additions
//! survive a read-modify-write round trip. Field names are the seed's (camelCase).

mod board;
mod entry;
mod escalation;
mod generated;
mod gm;
mod harvest;
mod roles;
mod shared;
mod task;
mod team;

pub use board::{BoardFile, STEP_STATES, Ty, Zone, board_schema, zone_spec};
pub use entry::{Entry, EntryStatus, MAX_NAME_LEN, SourceRef, TargetDoc, name_problem};
pub use escalation::{Decision, Escalation, Level};
pub use generated::{is_sealed, seal};
pub use gm::{PmPerformance, PmRecord};
pub use harvest::{
    Cell, CrossPollination, DailyHarvest, Experience, HarvestedCell, HarvestedPollination, MemoryHarvest, WeeklyHarvest,
};
pub use roles::{ActiveInstances, Instance, InstanceStatus, MemoryQueue, QueueEntry, QueueStatus};
pub use shared::{KnowledgeSync, NodeKnowledge, NodeState, NodeStatus, RiskLimits};
pub use task::{Priority, Task, TaskContext, TaskStatus, TaskSubmission, TaskType};
pub use team::{
    Artifact, Contribution, Criteria, Issue, Member, PmDecision, TaskResult, TeamComposition, Validation,
    ValidationResult,
};

/// Fields a file has that its type does not name; kept verbatim.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// `skip_serializing_if` helper for `extra`-style maps and lists.
pub(crate) fn is_empty_map(m: &Extra) -> bool {
    m.is_empty()
}
