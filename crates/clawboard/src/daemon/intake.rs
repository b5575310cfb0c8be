//! The intake consumer of the journal: replays from its durable cursor at start,
//! then takes live entries. Dropped task files become tasks; escalation files wake
//! held tasks. The cursor advances only after a batch is durably handled.
//!
//! A task file that is empty or cut short and still fresh ([`Intake::Unsettled`]) is
//! looked at again on its next close, or after [`intake::SETTLE`] of quiet; until
//! then the stored cursor stays below its entry, so a crash replays it.

use std::collections::BTreeMap;
use std::sync::Arc;

use clawboard_core::Store;
use clawboard_core::journal::{ChangeKind, Cursor, Entry, Origin, read_after};
use clawboard_roles::intake::{self, Intake};
use tokio::sync::mpsc::UnboundedReceiver;

use super::dispatch::Dispatcher;

/// What an entry asks of intake.
#[derive(Clone)]
enum Job {
    Inbox(String),
    TaskFile(String),
    /// A `task.json` pulled from another node.
    PulledTask(String),
    Escalation(String),
}

impl Job {
    /// The file a job is about, for the jobs that can wait (see [`Intake::Unsettled`]).
    fn file(&self) -> Option<String> {
        match self {
            Job::Inbox(name) => Some(format!("inbox/{name}")),
            Job::TaskFile(id) => Some(format!("tasks/{id}/task.json")),
            Job::PulledTask(_) | Job::Escalation(_) => None,
        }
    }
}

/// A job whose file looked unfinished: its entry's sequence number (the cursor is
/// stored below it) and when to try again.
struct Waiting {
    seq: u64,
    job: Job,
    due: tokio::time::Instant,
}

fn job(e: &Entry) -> Option<Job> {
    if e.change.kind != ChangeKind::Put || e.change.origin == Origin::Daemon {
        return None;
    }
    let parts: Vec<&str> = e.change.path.split('/').collect();
    match parts.as_slice() {
        ["inbox", name] if name.ends_with(".json") => Some(Job::Inbox((*name).to_owned())),
        ["tasks", id, "task.json"] if e.change.origin == Origin::Remote => Some(Job::PulledTask((*id).to_owned())),
        ["tasks", id, "task.json"] => Some(Job::TaskFile((*id).to_owned())),
        ["escalations", name] => name.strip_suffix(".json").map(|id| Job::Escalation(id.to_owned())),
        _ => None,
    }
}

/// Entries between two writes of the cursor file.
const CURSOR_EVERY: u64 = 1_000;

pub struct IntakeConsumer {
    pub store: Store,
    pub dispatcher: Arc<Dispatcher>,
    pub cursor: Cursor,
    /// With several nodes: an accepted task is driven once its claim in the bucket is won.
    pub cluster: Option<Arc<super::cluster::Cluster>>,
}

impl IntakeConsumer {
    /// Handles entries after the cursor; returns the new cursor. The cursor file is
    /// written every [`CURSOR_EVERY`] entries and at the end, always after the work
    /// it covers is durable, and never past a waiting job's entry. Intake is
    /// idempotent (a taken inbox file is gone, a claimed task is not claimed again),
    /// so the few entries a crash replays cost nothing but a look.
    async fn handle(
        &self,
        entries: Vec<Entry>,
        cursor: u64,
        stored: &mut u64,
        waiting: &mut BTreeMap<String, Waiting>,
    ) -> anyhow::Result<u64> {
        let entries: Vec<Entry> = entries.into_iter().filter(|e| e.seq > cursor).collect();
        let Some(last) = entries.last().map(|e| e.seq) else { return Ok(cursor) };
        let jobs: Vec<(u64, Job)> = entries.iter().filter_map(|e| Some((e.seq, job(e)?))).collect();
        if !jobs.is_empty() {
            tracing::debug!(jobs = jobs.len(), "intake batch");
            self.run_jobs(jobs, waiting).await?;
        }
        self.maybe_store(last, stored, waiting, false)?;
        Ok(last)
    }

    /// Runs jobs; a job whose file looks unfinished goes (or stays) in `waiting`,
    /// under the older of its sequence numbers.
    async fn run_jobs(&self, jobs: Vec<(u64, Job)>, waiting: &mut BTreeMap<String, Waiting>) -> anyhow::Result<()> {
        let store = self.store.clone();
        let outcomes = tokio::task::spawn_blocking(move || {
            jobs.into_iter()
                .map(|(seq, job)| {
                    let outcome = match &job {
                        Job::Inbox(name) => intake::take_inbox_file(&store, name),
                        Job::TaskFile(id) => intake::take_task_file(&store, id),
                        Job::PulledTask(id) => intake::take_pulled_task(&store, id),
                        Job::Escalation(_) => Ok(Intake::Ignored("an escalation")),
                    };
                    (seq, job, outcome)
                })
                .collect::<Vec<_>>()
        })
        .await?;
        for (seq, job, outcome) in outcomes {
            if let Some(file) = job.file() {
                match outcome {
                    Ok(Intake::Unsettled) => {
                        let due = tokio::time::Instant::now() + intake::SETTLE;
                        tracing::debug!(file, "not finished yet; looking again on its next close or when quiet");
                        let w = waiting.entry(file).or_insert(Waiting { seq, job: job.clone(), due });
                        w.due = due;
                        continue;
                    }
                    _ => {
                        waiting.remove(&file);
                    }
                }
            }
            match (job, outcome) {
                (Job::Escalation(id), _) => self.dispatcher.escalation_changed(&id),
                (_, Ok(Intake::Accepted(id))) => {
                    self.dispatcher.accepted(&id);
                    match &self.cluster {
                        Some(c) => {
                            let c = c.clone();
                            tokio::spawn(async move { c.accepted(id).await });
                        }
                        None => self.dispatcher.enqueue(id),
                    }
                }
                (_, Ok(_)) => {}
                // One bad file must not stop intake: it is logged and skipped.
                (_, Err(e)) => tracing::error!("intake: {e:#}"),
            }
        }
        Ok(())
    }

    /// Runs the waiting jobs that are due.
    async fn retry_due(&self, waiting: &mut BTreeMap<String, Waiting>) -> anyhow::Result<()> {
        let now = tokio::time::Instant::now();
        let due: Vec<(u64, Job)> = waiting.values().filter(|w| w.due <= now).map(|w| (w.seq, w.job.clone())).collect();
        // Out of the list while they run; the unsettled ones come back with their seq.
        for (_, job) in &due {
            if let Some(f) = job.file() {
                waiting.remove(&f);
            }
        }
        self.run_jobs(due, waiting).await
    }

    /// Stores the cursor every [`CURSOR_EVERY`] entries (or now, if `force`), never
    /// at or past a waiting job's entry.
    fn maybe_store(
        &self,
        last: u64,
        stored: &mut u64,
        waiting: &BTreeMap<String, Waiting>,
        force: bool,
    ) -> anyhow::Result<()> {
        let storable = waiting.values().map(|w| w.seq.saturating_sub(1)).fold(last, u64::min);
        if storable > *stored && (force || storable - *stored >= CURSOR_EVERY) {
            self.cursor.store(storable)?;
            *stored = storable;
        }
        Ok(())
    }

    /// Replays what the journal holds after the cursor, then follows `live`.
    pub async fn run(
        self,
        mut live: UnboundedReceiver<Vec<Entry>>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let mut cursor = self.cursor.load()?;
        let mut stored = cursor;
        let mut waiting = BTreeMap::new();
        let journal_dir = self.store.root().join(clawboard_core::layout::JOURNAL);
        loop {
            let batch = read_after(&journal_dir, cursor, 10_000)?;
            if batch.is_empty() {
                break;
            }
            cursor = self.handle(batch, cursor, &mut stored, &mut waiting).await?;
        }
        loop {
            let next = waiting.values().map(|w| w.due).min();
            tokio::select! {
                batch = live.recv() => match batch {
                    Some(b) => cursor = self.handle(b, cursor, &mut stored, &mut waiting).await?,
                    None => break,
                },
                () = super::sleep_until_some(next) => {
                    self.retry_due(&mut waiting).await?;
                    self.maybe_store(cursor, &mut stored, &waiting, false)?;
                }
                _ = clawboard_roles::runner::fired(&mut stop) => break,
            }
        }
        self.maybe_store(cursor, &mut stored, &waiting, true)
    }
}
