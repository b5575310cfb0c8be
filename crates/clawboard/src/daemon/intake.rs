//! The intake consumer of the journal: replays from its durable cursor at start,
//! then takes live entries. Dropped task files become tasks; escalation files wake
//! held tasks. The cursor advances only after a batch is durably handled.

use std::sync::Arc;

use clawboard_core::Store;
use clawboard_core::journal::{ChangeKind, Cursor, Entry, Origin, read_after};
use clawboard_roles::intake::{self, Intake};
use tokio::sync::mpsc::UnboundedReceiver;

use super::dispatch::Dispatcher;

/// What an entry asks of intake.
enum Job {
    Inbox(String),
    TaskFile(String),
    /// A `task.json` pulled from another node.
    PulledTask(String),
    Escalation(String),
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
    /// it covers is durable. Intake is idempotent (a taken inbox file is gone, a
    /// claimed task is not claimed again), so the few entries a crash replays cost
    /// nothing but a look.
    async fn handle(&self, entries: Vec<Entry>, cursor: u64, stored: &mut u64) -> anyhow::Result<u64> {
        let entries: Vec<Entry> = entries.into_iter().filter(|e| e.seq > cursor).collect();
        let Some(last) = entries.last().map(|e| e.seq) else { return Ok(cursor) };
        let jobs: Vec<Job> = entries.iter().filter_map(job).collect();
        if jobs.is_empty() {
            self.maybe_store(last, stored)?;
            return Ok(last);
        }
        tracing::debug!(jobs = jobs.len(), "intake batch");
        let store = self.store.clone();
        let (accepted, escalations) =
            tokio::task::spawn_blocking(move || -> anyhow::Result<(Vec<String>, Vec<String>)> {
                let mut accepted = Vec::new();
                let mut escalations = Vec::new();
                for job in jobs {
                    let outcome = match job {
                        Job::Inbox(name) => intake::take_inbox_file(&store, &name),
                        Job::TaskFile(id) => intake::take_task_file(&store, &id),
                        Job::PulledTask(id) => intake::take_pulled_task(&store, &id),
                        Job::Escalation(id) => {
                            escalations.push(id);
                            continue;
                        }
                    };
                    match outcome {
                        Ok(Intake::Accepted(id)) => accepted.push(id),
                        Ok(_) => {}
                        // One bad file must not stop intake: it is logged and skipped.
                        Err(e) => tracing::error!("intake: {e:#}"),
                    }
                }
                Ok((accepted, escalations))
            })
            .await??;
        for id in accepted {
            self.dispatcher.accepted(&id);
            match &self.cluster {
                Some(c) => {
                    let c = c.clone();
                    tokio::spawn(async move { c.accepted(id).await });
                }
                None => self.dispatcher.enqueue(id),
            }
        }
        for id in escalations {
            self.dispatcher.escalation_changed(&id);
        }
        self.maybe_store(last, stored)?;
        Ok(last)
    }

    fn maybe_store(&self, last: u64, stored: &mut u64) -> anyhow::Result<()> {
        if last - *stored >= CURSOR_EVERY {
            self.cursor.store(last)?;
            *stored = last;
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
        let journal_dir = self.store.root().join(".clawboard/journal");
        loop {
            let batch = read_after(&journal_dir, cursor, 10_000)?;
            if batch.is_empty() {
                break;
            }
            cursor = self.handle(batch, cursor, &mut stored).await?;
        }
        loop {
            tokio::select! {
                batch = live.recv() => match batch {
                    Some(b) => cursor = self.handle(b, cursor, &mut stored).await?,
                    None => break,
                },
                _ = clawboard_roles::runner::fired(&mut stop) => break,
            }
        }
        if cursor != stored {
            self.cursor.store(cursor)?;
        }
        Ok(())
    }
}
