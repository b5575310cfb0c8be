//! Which format a file has: named by `--kind`, or inferred from where it sits in
//! the tree (`tasks/{id}/task.json` is a task, `harvest/daily/{date}.json` a daily
//! harvest …). The path also tells what some fields must equal (the task id of
//! the directory, the date in the file name).

use std::path::Path;
use std::sync::OnceLock;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::formats::*;
use crate::schema::Problem;
use crate::{Id, check_id};

/// What a file's place in the tree says about its content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathContext {
    /// `tasks/{id}/…`: the file's `taskId` must be this.
    pub task_dir: Option<String>,
    /// The file name without `.json`: the date or week of a harvest, an entry's id.
    pub stem: Option<String>,
    /// `entries/{project_id}/…`: the entry's `project_id` must be this.
    pub project_dir: Option<String>,
}

/// A typed file format.
pub trait Format: Serialize + DeserializeOwned + schemars::JsonSchema {
    const KIND: FileKind;

    /// Checks a schema cannot say (fields that must match the path, cross-field rules).
    fn check(&self, _ctx: &PathContext) -> Vec<Problem> {
        Vec::new()
    }
}

macro_rules! kinds {
    ($($variant:ident => $ty:ty, $name:literal, $doc:literal;)+) => {
        /// Every file format clawboard reads and writes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum FileKind { $($variant),+ }

        impl FileKind {
            pub const ALL: &'static [FileKind] = &[$(FileKind::$variant),+];

            /// The name used by `--kind` and for `config/schemas/{name}.schema.json`.
            pub fn name(self) -> &'static str {
                match self { $(FileKind::$variant => $name),+ }
            }

            /// Which file it is, in a few words.
            pub fn describe(self) -> &'static str {
                match self { $(FileKind::$variant => $doc),+ }
            }

            fn generate_schema(self) -> Value {
                match self { $(FileKind::$variant => schema_value::<$ty>()),+ }
            }

            fn check_typed_impl(self, value: &Value, ctx: &PathContext) -> Vec<Problem> {
                match self { $(FileKind::$variant => check_typed::<$ty>(value, ctx)),+ }
            }
        }
    };
}

kinds! {
    Task => Task, "task", "tasks/{taskId}/task.json";
    TaskSubmission => TaskSubmission, "task-submission", "a task to submit (inbox/*.json, task submit)";
    TeamComposition => TeamComposition, "team-composition", "tasks/{taskId}/team-composition.json";
    Result => TaskResult, "result", "tasks/{taskId}/result.json";
    Validation => Validation, "validation", "tasks/{taskId}/validation.json";
    MemoryHarvest => MemoryHarvest, "memory-harvest", "tasks/{taskId}/memory-harvest.json";
    ActiveInstances => ActiveInstances, "active-instances", "roles/active.json";
    MemoryQueue => MemoryQueue, "memory-queue", "roles/memory-queue.json";
    Escalation => Escalation, "escalation", "escalations/{timestamp}.json, tasks/{taskId}/escalations/*.json";
    DailyHarvest => DailyHarvest, "harvest-daily", "harvest/daily/{YYYY-MM-DD}.json";
    WeeklyHarvest => WeeklyHarvest, "harvest-weekly", "harvest/weekly/{YYYY-Www}.json";
    RiskLimits => RiskLimits, "risk-limits", "shared/risk-limits.json";
    NodeStatus => NodeStatus, "node-status", "shared/node-status.json";
    KnowledgeSync => KnowledgeSync, "knowledge-sync", "shared/knowledge-sync.json";
    PmPerformance => PmPerformance, "pm-performance", "gm/pm-performance.json";
    Board => BoardFile, "board", "tasks/{taskId}/board/board.json";
    Entry => Entry, "entry", "entries/{project_id}/{id}.json";
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FileKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FileKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown kind {s:?}; one of {}", FileKind::names()))
    }
}

fn schema_value<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().for_deserialize().into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

fn check_typed<T: Format>(value: &Value, ctx: &PathContext) -> Vec<Problem> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(typed) => typed.check(ctx),
        Err(e) => vec![Problem::new(pointer_of(e.path()), e.inner().to_string())],
    }
}

/// A serde_path_to_error path as a JSON pointer.
pub fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Unknown => {}
        }
    }
    out
}

impl FileKind {
    pub fn names() -> String {
        FileKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    }

    /// The JSON Schema (draft 2020-12) of this kind, generated from its type.
    pub fn schema(self) -> &'static Value {
        static SCHEMAS: OnceLock<Vec<Value>> = OnceLock::new();
        let all = SCHEMAS.get_or_init(|| FileKind::ALL.iter().map(|k| k.generate_schema()).collect());
        let index = FileKind::ALL.iter().position(|k| *k == self).unwrap_or(0);
        &all[index]
    }

    /// Deserializes into the kind's type and runs its own checks.
    pub fn check_typed(self, value: &Value, ctx: &PathContext) -> Vec<Problem> {
        self.check_typed_impl(value, ctx)
    }

    /// The kind a path names, and what the path says about the content.
    ///
    /// Works on any path that ends like a tree path; a `task.json` outside
    /// `tasks/{id}/`, and any `inbox/*.json`, is a submission.
    pub fn infer(path: &Path) -> Option<(FileKind, PathContext)> {
        let comps: Vec<&str> = path
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect();
        let n = comps.len();
        let at = |back: usize| -> Option<&str> { n.checked_sub(back + 1).map(|i| comps[i]) };
        let file = at(0)?;
        let stem = file.strip_suffix(".json")?.to_owned();
        let ctx = |task_dir: Option<&str>| PathContext {
            task_dir: task_dir.map(str::to_owned),
            stem: Some(stem.clone()),
            project_dir: None,
        };
        if at(2) == Some(crate::layout::ENTRIES) {
            return Some((FileKind::Entry, PathContext { project_dir: at(1).map(str::to_owned), ..ctx(None) }));
        }
        if at(2) == Some("tasks") {
            let dir = at(1);
            let kind = match file {
                "task.json" => FileKind::Task,
                "team-composition.json" => FileKind::TeamComposition,
                "result.json" => FileKind::Result,
                "validation.json" => FileKind::Validation,
                "memory-harvest.json" => FileKind::MemoryHarvest,
                _ => return None,
            };
            return Some((kind, ctx(dir)));
        }
        if at(3) == Some("tasks") && at(1) == Some("board") && file == "board.json" {
            return Some((FileKind::Board, ctx(at(2))));
        }
        if at(1) == Some("escalations") {
            let task_dir = (at(3) == Some("tasks")).then(|| at(2)).flatten();
            return Some((FileKind::Escalation, ctx(task_dir)));
        }
        let kind = match (at(2), at(1), file) {
            (_, Some("roles"), "active.json") => FileKind::ActiveInstances,
            (_, Some("roles"), "memory-queue.json") => FileKind::MemoryQueue,
            (Some("harvest"), Some("daily"), _) => FileKind::DailyHarvest,
            (Some("harvest"), Some("weekly"), _) => FileKind::WeeklyHarvest,
            (_, Some("shared"), "risk-limits.json") => FileKind::RiskLimits,
            (_, Some("shared"), "node-status.json") => FileKind::NodeStatus,
            (_, Some("shared"), "knowledge-sync.json") => FileKind::KnowledgeSync,
            (_, Some("gm"), "pm-performance.json") => FileKind::PmPerformance,
            (_, Some("inbox"), _) | (_, _, "task.json") => FileKind::TaskSubmission,
            _ => return None,
        };
        Some((kind, ctx(None)))
    }
}

fn task_id_matches(task_id: &Id, ctx: &PathContext) -> Vec<Problem> {
    match &ctx.task_dir {
        Some(dir) if dir != task_id.as_str() => {
            vec![Problem::new("/taskId", format!("{:?} does not match its directory tasks/{dir}/", task_id.as_str()))]
        }
        _ => Vec::new(),
    }
}

impl Format for Task {
    const KIND: FileKind = FileKind::Task;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let mut p = task_id_matches(&self.task_id, ctx);
        if let Some(dir) = &ctx.task_dir
            && let Err(e) = check_id(dir)
        {
            p.push(Problem::new("", format!("directory name tasks/{dir:?} is not a valid task id: it {e}")));
        }
        p
    }
}

impl Format for TaskSubmission {
    const KIND: FileKind = FileKind::TaskSubmission;
    fn check(&self, _: &PathContext) -> Vec<Problem> {
        let mut p = Vec::new();
        if let Some(s) = self.status
            && s != TaskStatus::Pending
        {
            p.push(Problem::new(
                "/status",
                format!("a new task must be \"pending\" (or leave status out), not {:?}", s.as_str()),
            ));
        }
        // The task's own fields that only clawboard sets: kept as extra fields they would
        // land in task.json and clash with (or forge) the real ones.
        if self.extra.contains_key("completedAt") {
            p.push(Problem::new("/completedAt", "is set by clawboard when the task ends; a new task has none"));
        }
        p
    }
}

macro_rules! task_file {
    ($($ty:ty => $kind:ident),+) => {$(
        impl Format for $ty {
            const KIND: FileKind = FileKind::$kind;
            fn check(&self, ctx: &PathContext) -> Vec<Problem> {
                task_id_matches(&self.task_id, ctx)
            }
        }
    )+};
}
task_file!(TeamComposition => TeamComposition, TaskResult => Result, Validation => Validation, MemoryHarvest => MemoryHarvest);

impl Format for Escalation {
    const KIND: FileKind = FileKind::Escalation;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let mut p = match &self.task_id {
            Some(id) => task_id_matches(id, ctx),
            None => Vec::new(),
        };
        let decided = [self.decided_by.is_some(), self.decided_at.is_some()];
        if self.decision.is_some() && decided.contains(&false) {
            p.push(Problem::new("/decision", "a decision needs decidedBy and decidedAt"));
        }
        if self.decision.is_none() && decided.contains(&true) {
            p.push(Problem::new("/decision", "decidedBy/decidedAt are set but decision is missing"));
        }
        p
    }
}

fn period_matches(field: &str, value: &str, ctx: &PathContext, valid: bool, shape: &str) -> Vec<Problem> {
    let mut p = Vec::new();
    if !valid {
        p.push(Problem::new(format!("/{field}"), format!("{value:?} is not a valid {shape}")));
    }
    if let Some(stem) = &ctx.stem
        && stem != value
    {
        p.push(Problem::new(format!("/{field}"), format!("{value:?} does not match the file name {stem}.json")));
    }
    p
}

impl Format for DailyHarvest {
    const KIND: FileKind = FileKind::DailyHarvest;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let valid = chrono::NaiveDate::parse_from_str(&self.date, "%Y-%m-%d").is_ok();
        period_matches("date", &self.date, ctx, valid, "date (YYYY-MM-DD)")
    }
}

impl Format for WeeklyHarvest {
    const KIND: FileKind = FileKind::WeeklyHarvest;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let valid = parse_iso_week(&self.week).is_some();
        period_matches("week", &self.week, ctx, valid, "ISO week (YYYY-Www)")
    }
}

/// The Monday of an ISO week written `YYYY-Www`.
pub fn parse_iso_week(s: &str) -> Option<chrono::NaiveDate> {
    let (year, week) = s.split_once("-W")?;
    if week.len() != 2 {
        return None;
    }
    chrono::NaiveDate::from_isoywd_opt(year.parse().ok()?, week.parse().ok()?, chrono::Weekday::Mon)
}

impl Format for BoardFile {
    const KIND: FileKind = FileKind::Board;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let mut p = task_id_matches(&self.task_id, ctx);
        p.extend(self.type_problems());
        p
    }
}

impl Format for Entry {
    const KIND: FileKind = FileKind::Entry;
    fn check(&self, ctx: &PathContext) -> Vec<Problem> {
        let mut p = Vec::new();
        for (field, value) in [("from", &self.from), ("to", &self.to), ("kind", &self.kind)] {
            if let Some(why) = name_problem(value) {
                p.push(Problem::new(format!("/{field}"), why));
            }
        }
        for (i, doc) in self.target_docs.iter().enumerate() {
            if doc.path().trim().is_empty() {
                p.push(Problem::new(format!("/target_docs/{i}"), "has an empty path"));
            }
        }
        if self.updated_at.instant() < self.created_at.instant() {
            p.push(Problem::new(
                "/updated_at",
                format!("{} is before created_at {}", self.updated_at, self.created_at),
            ));
        }
        if let Some(stem) = &ctx.stem
            && ctx.project_dir.is_some()
            && stem != self.id.as_str()
        {
            p.push(Problem::new("/id", format!("{:?} does not match the file name {stem}.json", self.id.as_str())));
        }
        if let Some(dir) = &ctx.project_dir
            && dir != self.project_id.as_str()
        {
            p.push(Problem::new(
                "/project_id",
                format!("{:?} does not match its directory entries/{dir}/", self.project_id.as_str()),
            ));
        }
        p
    }
}

macro_rules! plain {
    ($($ty:ty => $kind:ident),+) => {$(
        impl Format for $ty { const KIND: FileKind = FileKind::$kind; }
    )+};
}
plain!(ActiveInstances => ActiveInstances, MemoryQueue => MemoryQueue, RiskLimits => RiskLimits,
       NodeStatus => NodeStatus, KnowledgeSync => KnowledgeSync, PmPerformance => PmPerformance);

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("tasks/t1/task.json", FileKind::Task, Some("t1"))]
    #[case("/x/bb/tasks/t1/result.json", FileKind::Result, Some("t1"))]
    #[case("tasks/t1/escalations/2026.json", FileKind::Escalation, Some("t1"))]
    #[case("escalations/2026.json", FileKind::Escalation, None)]
    #[case("roles/active.json", FileKind::ActiveInstances, None)]
    #[case("harvest/daily/2026-02-25.json", FileKind::DailyHarvest, None)]
    #[case("harvest/weekly/2026-W09.json", FileKind::WeeklyHarvest, None)]
    #[case("shared/risk-limits.json", FileKind::RiskLimits, None)]
    #[case("gm/pm-performance.json", FileKind::PmPerformance, None)]
    #[case("inbox/new.json", FileKind::TaskSubmission, None)]
    #[case("tasks/t1/board/board.json", FileKind::Board, Some("t1"))]
    #[case("config/examples/task.json", FileKind::TaskSubmission, None)]
    #[case("entries/vpm-mini/e1.json", FileKind::Entry, None)]
    fn infers(#[case] path: &str, #[case] kind: FileKind, #[case] dir: Option<&str>) {
        let (k, ctx) = FileKind::infer(Path::new(path)).unwrap();
        assert_eq!(k, kind);
        assert_eq!(ctx.task_dir.as_deref(), dir);
    }

    #[rstest]
    #[case("tasks/t1/notes.json")]
    #[case("README.md")]
    #[case("shared/other.json")]
    fn does_not_guess(#[case] path: &str) {
        assert_eq!(FileKind::infer(Path::new(path)), None);
    }

    #[test]
    fn names_round_trip() {
        for k in FileKind::ALL {
            assert_eq!(k.name().parse::<FileKind>().unwrap(), *k);
        }
        assert!("nope".parse::<FileKind>().unwrap_err().contains("task-submission"));
    }

    #[test]
    fn iso_weeks() {
        assert!(parse_iso_week("2026-W09").is_some());
        assert!(parse_iso_week("2026-W53").is_some());
        assert!(parse_iso_week("2025-W53").is_none());
        assert!(parse_iso_week("2026-9").is_none());
    }
}
