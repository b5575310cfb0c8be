//! Retention (seed 002 "清理策略"): the policy in `retention.yaml`, and the plan of
//! what it deletes now.
//!
//! Age always comes from the data, never from a file's mtime:
//! - a task's `completedAt` (also set when it failed);
//! - the end of the period named by a harvest's or a report's file name (the daily
//!   harvest `2026-11-01.json` is 7 days old at 2026-11-09T00:00Z);
//! - a memory-queue entry's `enqueuedAt`.
//!
//! An item goes when its age is at least the rule's duration. A task still `pending`
//! or `running` never goes. A task that may go is first shown to a [`Guard`], which
//! holds it back until its content is safe elsewhere (the bucket, the archive).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use crate::formats::{Entry, EntryStatus, MemoryQueue, QueueStatus, Task, TaskStatus};
use crate::{Error, RelPath, Store, layout};

/// The embedded default: the repository's `retention.yaml`, the seed's policy.
pub const DEFAULT_POLICY: &str = include_str!("../../../retention.yaml");

/// How long a kind of item is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Permanent,
    /// `immediate` is `For(0)`.
    For(Duration),
}

impl Keep {
    /// `30 days`, `24 hours`, `1 year`, `permanent`, `immediate` (or the seed's
    /// `immediate delete`).
    pub fn parse(s: &str) -> Result<Keep, String> {
        match s.trim() {
            "permanent" | "forever" | "never" => Ok(Keep::Permanent),
            "immediate" | "immediate delete" | "immediately" => Ok(Keep::For(Duration::ZERO)),
            other => {
                let d = crate::duration::parse_duration(other)
                    .map_err(|e| format!("{e}; or \"permanent\" (never delete) or \"immediate\" (delete at once)"))?;
                // "6m" is six minutes, not six months: under an hour is a mistake here.
                if d < Duration::from_secs(3600) {
                    return Err(format!(
                        "{other:?} is under an hour; write hours, days, weeks or years (e.g. \"180 days\"), or \"immediate\""
                    ));
                }
                Ok(Keep::For(d))
            }
        }
    }

    pub fn describe(self) -> String {
        match self {
            Keep::Permanent => "permanent".into(),
            Keep::For(d) if d.is_zero() => "immediate".into(),
            Keep::For(d) => human(d),
        }
    }
}

/// `30 days`, `24 hours`, `90 minutes`, `1 year`: the largest whole unit.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    let units = [(365 * 86_400, "year"), (86_400, "day"), (3600, "hour"), (60, "minute"), (1, "second")];
    for (size, name) in units {
        if s >= size && s.is_multiple_of(size) {
            let n = s / size;
            return format!("{n} {name}{}", if n == 1 { "" } else { "s" });
        }
    }
    format!("{} ms", d.as_millis())
}

/// One line of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Rule {
    TasksCompleted,
    TasksFailed,
    HarvestDaily,
    HarvestWeekly,
    ReportsDaily,
    ReportsWeekly,
    ReportsMonthly,
    QueuePending,
    QueueCompleted,
    EntriesDone,
    EntriesCanceled,
}

impl Rule {
    pub const ALL: [Rule; 11] = [
        Rule::TasksCompleted,
        Rule::TasksFailed,
        Rule::HarvestDaily,
        Rule::HarvestWeekly,
        Rule::ReportsDaily,
        Rule::ReportsWeekly,
        Rule::ReportsMonthly,
        Rule::QueuePending,
        Rule::QueueCompleted,
        Rule::EntriesDone,
        Rule::EntriesCanceled,
    ];

    /// (section, key) in `retention.yaml`.
    pub fn key(self) -> (&'static str, &'static str) {
        match self {
            Rule::TasksCompleted => ("tasks", "completed"),
            Rule::TasksFailed => ("tasks", "failed"),
            Rule::HarvestDaily => ("harvest", "daily"),
            Rule::HarvestWeekly => ("harvest", "weekly"),
            Rule::ReportsDaily => ("reports", "daily"),
            Rule::ReportsWeekly => ("reports", "weekly"),
            Rule::ReportsMonthly => ("reports", "monthly"),
            Rule::QueuePending => ("memory-queue", "pending"),
            Rule::QueueCompleted => ("memory-queue", "completed"),
            Rule::EntriesDone => ("entries", "done"),
            Rule::EntriesCanceled => ("entries", "canceled"),
        }
    }

    /// `retention.tasks.completed`.
    pub fn name(self) -> String {
        let (s, k) = self.key();
        format!("retention.{s}.{k}")
    }

    fn seed(self) -> Keep {
        let days = |n: u64| Keep::For(Duration::from_secs(n * 86_400));
        match self {
            Rule::TasksCompleted | Rule::ReportsDaily | Rule::EntriesDone => days(30),
            Rule::TasksFailed | Rule::HarvestDaily | Rule::EntriesCanceled => days(7),
            Rule::HarvestWeekly => days(90),
            Rule::ReportsWeekly => days(365),
            Rule::ReportsMonthly => Keep::Permanent,
            Rule::QueuePending => Keep::For(Duration::from_secs(24 * 3600)),
            Rule::QueueCompleted => Keep::For(Duration::ZERO),
        }
    }
}

/// The policy: how long each [`Rule`]'s items are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    keep: BTreeMap<Rule, Keep>,
}

/// A policy file that cannot be used, naming the file, the key and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {reason}")]
pub struct PolicyError {
    pub file: String,
    pub key: String,
    pub reason: String,
}

impl Default for Policy {
    /// The seed's policy.
    fn default() -> Policy {
        Policy { keep: Rule::ALL.iter().map(|r| (*r, r.seed())).collect() }
    }
}

impl Policy {
    pub fn keep(&self, r: Rule) -> Keep {
        self.keep.get(&r).copied().unwrap_or(r.seed())
    }
}

/// What a plan entry is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Subject {
    /// The task's whole directory, `tasks/{id}/`.
    Task { id: String },
    /// One file (a harvest or a report).
    File { path: String },
    /// One entry of `roles/memory-queue.json` (its status and time tell it from
    /// another entry of the same task and role).
    QueueEntry { task_id: String, role_id: String, status: String, enqueued_at: String },
}

impl Subject {
    /// How it reads in a table.
    pub fn label(&self) -> String {
        match self {
            Subject::Task { id } => format!("{}/{id}/", layout::TASKS),
            Subject::File { path } => path.clone(),
            Subject::QueueEntry { task_id, role_id, .. } => format!("roles/memory-queue.json [{task_id} {role_id}]"),
        }
    }
}

/// One item the policy covers, and what becomes of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    pub subject: Subject,
    pub rule: Rule,
    /// `retention.tasks.completed: 30 days`.
    pub because: String,
    /// The time its age counts from.
    pub since: DateTime<Utc>,
    pub age_secs: i64,
    /// Why it is held back, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// What a run would do now.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Due, and safe to delete.
    pub delete: Vec<Item>,
    /// Due, but held back (not yet in the bucket or the archive).
    pub held: Vec<Item>,
    /// Items the policy covers that are not due yet (or are permanent).
    pub kept: usize,
    /// Files skipped because their name or content says nothing about their age.
    pub skipped: Vec<String>,
}

/// Holds back tasks whose content is not safe elsewhere yet.
pub trait Guard {
    /// `Err(why)` holds the task back.
    fn task(&self, id: &str) -> Result<(), String>;
}

/// No bucket, no archive: nothing to wait for.
pub struct NoGuard;

impl Guard for NoGuard {
    fn task(&self, _: &str) -> Result<(), String> {
        Ok(())
    }
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    d.and_time(chrono::NaiveTime::MIN).and_utc()
}

/// The end of the period a harvest or report file name names, if it names one.
pub fn period_end(rule: Rule, stem: &str) -> Option<DateTime<Utc>> {
    let day = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
    match rule {
        Rule::HarvestDaily | Rule::ReportsDaily => day(stem).map(|d| midnight(d + chrono::Duration::days(1))),
        Rule::HarvestWeekly | Rule::ReportsWeekly => {
            crate::kind::parse_iso_week(stem).map(|monday| midnight(monday + chrono::Duration::days(7)))
        }
        Rule::ReportsMonthly => {
            let first = day(&format!("{stem}-01")).filter(|_| stem.len() == 7)?;
            first.checked_add_months(chrono::Months::new(1)).map(midnight)
        }
        _ => None,
    }
}

/// Whether an item of `rule` whose age counts from `since` is due at `now`.
pub fn due(policy: &Policy, rule: Rule, since: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    match policy.keep(rule) {
        Keep::Permanent => false,
        Keep::For(d) => chrono::Duration::from_std(d).is_ok_and(|d| now - since >= d),
    }
}

/// What the policy deletes now from the tree of `store`.
pub fn plan(store: &Store, policy: &Policy, now: DateTime<Utc>, guard: &dyn Guard) -> Result<Plan, Error> {
    plan_with(store, policy, now, guard, None)
}

/// [`plan`], the tasks' statuses and completion times taken from `summary`
/// when given (kept by a running daemon) instead of read from every `task.json`.
pub fn plan_with(
    store: &Store,
    policy: &Policy,
    now: DateTime<Utc>,
    guard: &dyn Guard,
    summary: Option<&crate::summary::TaskSummary>,
) -> Result<Plan, Error> {
    let mut p = Planner { policy, now, guard, plan: Plan::default() };
    match summary {
        Some(s) => p.summarized_tasks(s),
        None => p.tasks(store)?,
    }
    p.period_files(store)?;
    p.memory_queue(store)?;
    p.entries(store)?;
    Ok(p.plan)
}

/// A plan being made: each item considered against the policy at `now`.
struct Planner<'a> {
    policy: &'a Policy,
    now: DateTime<Utc>,
    guard: &'a dyn Guard,
    plan: Plan,
}

impl Planner<'_> {
    /// Kept if not yet due; else deleted, or held when `guarded` and the guard
    /// holds the task (not yet in the bucket or the archive).
    fn consider(&mut self, subject: Subject, rule: Rule, since: DateTime<Utc>, guarded: bool) {
        if !due(self.policy, rule, since, self.now) {
            self.plan.kept += 1;
            return;
        }
        let held = match (&subject, guarded) {
            (Subject::Task { id }, true) => self.guard.task(id).err(),
            _ => None,
        };
        let item = Item {
            because: format!("{}: {}", rule.name(), self.policy.keep(rule).describe()),
            subject,
            rule,
            since,
            age_secs: (self.now - since).num_seconds(),
            held: held.clone(),
        };
        if held.is_some() { self.plan.held.push(item) } else { self.plan.delete.push(item) }
    }

    /// Finished tasks, aged from `completedAt`; pending and running ones are never deleted.
    fn tasks(&mut self, store: &Store) -> Result<(), Error> {
        for (dir, task) in store.tasks()? {
            let task: Task = match task {
                Ok(t) => t,
                Err(e) => {
                    self.plan.skipped.push(format!("tasks/{dir}/: {e}"));
                    continue;
                }
            };
            self.task(dir, task.status, task.completed_at.as_ref());
        }
        Ok(())
    }

    /// [`Planner::tasks`] from the summary's rows.
    fn summarized_tasks(&mut self, summary: &crate::summary::TaskSummary) {
        let mut unreadable: Vec<(&str, &str)> = summary.unreadable().collect();
        unreadable.sort_unstable();
        for (dir, why) in unreadable {
            self.plan.skipped.push(format!("tasks/{dir}/: {why}"));
        }
        let mut rows: Vec<&crate::summary::TaskRow> = summary.rows().collect();
        rows.sort_unstable_by(|a, b| a.task_id.cmp(&b.task_id));
        for row in rows {
            self.task(row.task_id.clone(), row.status, row.completed_at.as_ref());
        }
    }

    fn task(&mut self, dir: String, status: TaskStatus, completed_at: Option<&crate::Timestamp>) {
        let rule = match status {
            TaskStatus::Completed => Rule::TasksCompleted,
            TaskStatus::Failed => Rule::TasksFailed,
            TaskStatus::Pending | TaskStatus::Running => return, // never deleted
        };
        match completed_at {
            Some(t) => self.consider(Subject::Task { id: dir }, rule, t.instant().with_timezone(&Utc), true),
            None => self.plan.skipped.push(format!("tasks/{dir}/: {status} without completedAt: its age is unknown")),
        }
    }

    /// Harvest and report files, aged from the end of the period their name names.
    fn period_files(&mut self, store: &Store) -> Result<(), Error> {
        for (dir, ext, daily, weekly, monthly) in [
            (layout::HARVEST, "json", Rule::HarvestDaily, Rule::HarvestWeekly, None),
            (layout::REPORTS, "md", Rule::ReportsDaily, Rule::ReportsWeekly, Some(Rule::ReportsMonthly)),
        ] {
            for (sub, rule) in [("daily", Some(daily)), ("weekly", Some(weekly)), ("monthly", monthly)] {
                let Some(rule) = rule else { continue };
                for name in period_names(store, dir, sub, &mut self.plan.skipped)? {
                    let rel = format!("{dir}/{sub}/{name}");
                    let Some(stem) = name.strip_suffix(&format!(".{ext}")) else { continue };
                    match period_end(rule, stem) {
                        Some(end) => self.consider(Subject::File { path: rel }, rule, end, false),
                        None => self.plan.skipped.push(format!("{rel}: the name is not a {sub} period")),
                    }
                }
            }
        }
        Ok(())
    }

    /// The memory queue's entries, aged from when they were queued.
    fn memory_queue(&mut self, store: &Store) -> Result<(), Error> {
        let queue_rel = RelPath::new(crate::layout::MEMORY_QUEUE)?;
        match store.read::<MemoryQueue>(&queue_rel) {
            Ok(q) => {
                for e in q.queue {
                    let rule = match e.status {
                        QueueStatus::Pending => Rule::QueuePending,
                        QueueStatus::Completed => Rule::QueueCompleted,
                    };
                    let subject = Subject::QueueEntry {
                        task_id: e.task_id.to_string(),
                        role_id: e.role_id.to_string(),
                        status: queue_status(e.status).to_owned(),
                        enqueued_at: e.enqueued_at.to_string(),
                    };
                    self.consider(subject, rule, e.enqueued_at.instant().with_timezone(&Utc), false);
                }
            }
            Err(Error::NotFound { .. }) => {}
            Err(e) => self.plan.skipped.push(format!("roles/memory-queue.json: {e}")),
        }
        Ok(())
    }

    /// Entries that ended (done or canceled), aged from their last change; open,
    /// in-progress and error entries stay until someone acts on them. The last
    /// entry of each id counter stays too ([`entries::counter_tops`]).
    fn entries(&mut self, store: &Store) -> Result<(), Error> {
        let files = entries::files(store, &mut self.plan.skipped)?;
        let tops = entries::counter_tops(&files);
        for rel in files {
            let entry: Entry = match store.read(&RelPath::new(&rel)?) {
                Ok(e) => e,
                Err(e) => {
                    self.plan.skipped.push(format!("{rel}: {e}"));
                    continue;
                }
            };
            let rule = match entry.status {
                EntryStatus::Done => Rule::EntriesDone,
                EntryStatus::Canceled => Rule::EntriesCanceled,
                EntryStatus::Open | EntryStatus::InProgress | EntryStatus::Error => continue,
            };
            if tops.contains(&rel) {
                self.plan.kept += 1;
                continue;
            }
            self.consider(Subject::File { path: rel }, rule, entry.updated_at.instant().with_timezone(&Utc), false);
        }
        Ok(())
    }
}

/// The names of the regular files in `{dir}/{sub}/`, sorted; none if it does
/// not exist. A symlinked directory is not followed (and noted in `skipped`).
fn period_names(store: &Store, dir: &str, sub: &str, skipped: &mut Vec<String>) -> Result<Vec<String>, Error> {
    let path = store.root().join(dir).join(sub);
    let linked = [store.root().join(dir), path.clone()]
        .iter()
        .any(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()));
    if linked {
        skipped.push(format!("{dir}/{sub}/: a symlink, not followed"));
        return Ok(Vec::new());
    }
    let entries = match std::fs::read_dir(&path) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let mut names: Vec<String> = Vec::new();
    for e in entries {
        let e = e.map_err(|err| Error::io(&path, err))?;
        // Never follow a symlink; only regular files are the policy's.
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if let Some(n) = e.file_name().to_str() {
            names.push(n.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// What a run deleted.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    pub tasks: usize,
    pub files: usize,
    pub queue_entries: usize,
    /// Held items deleted because of `--force`.
    pub forced: usize,
    /// Items that could not be deleted, with the reason.
    pub failed: Vec<String>,
}

/// Deletes the plan's `delete` items (and, with `force`, its `held` ones) through the
/// store, so each deletion is journaled and reaches the bucket as a delete. A
/// symlink inside a task directory is removed, never followed. Each task is checked
/// again just before it goes (still ended, and, unless forced, still passing the
/// guard): the tree may have changed since the plan.
pub fn execute(store: &Store, plan: &Plan, force: bool, guard: &dyn Guard) -> Result<RunReport, Error> {
    let mut report = RunReport::default();
    let items = plan.delete.iter().chain(plan.held.iter().filter(|_| force));
    let mut queue_drop: Vec<Subject> = Vec::new();
    for item in items {
        if item.held.is_some() {
            report.forced += 1;
            tracing::warn!(item = %item.subject.label(), why = item.held.as_deref().unwrap_or(""), "--force: deleting an item retention held back");
        }
        let outcome = match &item.subject {
            Subject::Task { id } => match still_due(store, id, item.held.is_none() || !force, guard) {
                Err(why) => {
                    report.failed.push(format!("{}: kept: {why}", item.subject.label()));
                    continue;
                }
                Ok(()) => remove_task_dir(store, id).map(|()| report.tasks += 1),
            },
            Subject::File { path } => match store.remove(&RelPath::new(path)?) {
                Ok(()) | Err(Error::NotFound { .. }) => {
                    report.files += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            },
            Subject::QueueEntry { .. } => {
                queue_drop.push(item.subject.clone());
                Ok(())
            }
        };
        if let Err(e) = outcome {
            report.failed.push(format!("{}: {e}", item.subject.label()));
        }
    }
    if !queue_drop.is_empty() {
        let rel = RelPath::new(crate::layout::MEMORY_QUEUE)?;
        let dropped = store.update_json(&rel, |q: &mut MemoryQueue| {
            let before = q.queue.len();
            // Exactly the entries planned: another of the same task and role (a
            // younger one, pending) is not one of them.
            q.queue.retain(|e| {
                !queue_drop.iter().any(|d| {
                    matches!(d, Subject::QueueEntry { task_id, role_id, status, enqueued_at }
                        if e.task_id.as_str() == task_id && e.role_id.as_str() == role_id
                            && queue_status(e.status) == status && e.enqueued_at.to_string() == *enqueued_at)
                })
            });
            before - q.queue.len()
        });
        match dropped {
            Ok(n) => report.queue_entries = n,
            Err(e) => report.failed.push(format!("roles/memory-queue.json: {e}")),
        }
    }
    Ok(report)
}

fn queue_status(s: QueueStatus) -> &'static str {
    match s {
        QueueStatus::Pending => "pending",
        QueueStatus::Completed => "completed",
    }
}

/// Whether task `id` may still go: it is still ended and, when `guarded`, the guard
/// still passes it.
fn still_due(store: &Store, id: &str, guarded: bool, guard: &dyn Guard) -> Result<(), String> {
    let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE)).map_err(|e| e.to_string())?;
    match store.read::<Task>(&rel) {
        Ok(t) if matches!(t.status, TaskStatus::Completed | TaskStatus::Failed) => {}
        Ok(t) => return Err(format!("it is {} again", t.status)),
        Err(e) => return Err(format!("task.json cannot be read now: {e}")),
    }
    if guarded { guard.task(id) } else { Ok(()) }
}

/// Removes `tasks/{id}/`: every file through the store (journaled), symlinks as
/// links, `task.json` last (a run cut short leaves a task that is still seen, and
/// retried), then the emptied directories, deepest first.
fn remove_task_dir(store: &Store, id: &str) -> Result<(), Error> {
    crate::check_id(id).map_err(|e| Error::UnsafePath { path: id.to_owned(), reason: format!("task id {e}") })?;
    let dir = store.root().join(layout::TASKS).join(id);
    let meta = match std::fs::symlink_metadata(&dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    if !meta.is_dir() {
        return Err(Error::UnsafePath {
            path: format!("tasks/{id}"),
            reason: "not a directory (a symlink?); left alone".into(),
        });
    }
    let mut dirs = Vec::new();
    let task_file = dir.join(layout::TASK_FILE);
    for entry in walkdir::WalkDir::new(&dir).follow_links(false).contents_first(true) {
        let entry = entry.map_err(|e| Error::io(&dir, std::io::Error::other(e.to_string())))?;
        let path = entry.path();
        let ft = entry.file_type();
        if ft.is_dir() {
            dirs.push(path.to_owned());
            continue;
        }
        if path == task_file {
            continue;
        }
        let rel = path.strip_prefix(store.root()).ok().and_then(|r| r.to_str()).and_then(|r| RelPath::new(r).ok());
        match (ft.is_file(), rel) {
            (true, Some(rel)) => match store.remove(&rel) {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            },
            // A symlink, FIFO or a name that is not UTF-8: removed itself, never followed.
            _ => std::fs::remove_file(path).map_err(|e| Error::io(path, e))?,
        }
    }
    match store.remove(&RelPath::new(&layout::task_file(id, layout::TASK_FILE))?) {
        Ok(()) | Err(Error::NotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    for d in dirs {
        match std::fs::remove_dir(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&d, e)),
        }
    }
    Ok(())
}

mod entries;
mod policy_file;
#[cfg(test)]
mod tests;
