//! The intake consumer of the journal (cursor `intake`): dropped task files become
//! tasks; escalation files wake held tasks. The runner stores the cursor only after
//! a batch is durably handled.
//!
//! A task file that is empty or cut short and still fresh ([`Intake::Unsettled`]) is
//! looked at again on its next close, or after [`intake::SETTLE`] of quiet; until
//! then the stored cursor stays below its entry, so a crash replays it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clawboard_blueprint::Catalog;
use clawboard_core::backoff::Backoff;
use clawboard_core::journal::{ChangeKind, Journaled, Origin};
use clawboard_core::{Error, Store};
use clawboard_roles::intake::{self, Intake};

use super::Parts;
use super::dispatch::Dispatcher;
use super::jobs::{Consumer, JobError, JobResult, Runner, sleep_until_some};

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

fn job(e: &Journaled) -> Option<Job> {
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

/// The intake consumer; with several nodes, an accepted task waits for its claim.
pub fn install(jobs: &mut Runner, p: &Parts, cluster: Option<Arc<super::cluster::Membership>>) {
    jobs.consumer("intake", IntakeConsumer::new(p.store.clone(), p.dispatcher.clone(), cluster));
}

/// The intake consumer: a runner [`Consumer`] with the cursor `intake`.
pub struct IntakeConsumer {
    pub store: Store,
    pub dispatcher: Arc<Dispatcher>,
    /// With several nodes: an accepted task is driven once its claim in the bucket is won.
    pub cluster: Option<Arc<super::cluster::Membership>>,
    /// Files that looked unfinished, by path.
    waiting: BTreeMap<String, Waiting>,
    /// When to finish the intakes an error interrupted (a full disk: the file was
    /// taken out of `inbox/` into `.clawboard/intake/`, and its task not written),
    /// and how many tries have failed since (the wait grows by [`STAGED_RETRY`]).
    staged: Option<(tokio::time::Instant, u32)>,
}

/// The wait before interrupted intakes are tried again: 2 s, doubling up to a minute.
const STAGED_RETRY: Backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(60));

impl IntakeConsumer {
    pub fn new(
        store: Store,
        dispatcher: Arc<Dispatcher>,
        cluster: Option<Arc<super::cluster::Membership>>,
    ) -> IntakeConsumer {
        IntakeConsumer { store, dispatcher, cluster, waiting: BTreeMap::new(), staged: None }
    }

    /// A task taken in: driven now, or once its claim is won. `pulled`: its
    /// `task.json` came from another node (this node wrote nothing in it).
    fn accepted(&self, id: String, pulled: bool) {
        self.dispatcher.accepted(&id);
        match &self.cluster {
            Some(c) => c.accepted(id, pulled),
            None => self.dispatcher.enqueue(id),
        }
    }

    /// Intakes to finish again soon (see `staged`), unless already due sooner;
    /// `failed`: the tries that failed so far.
    fn retry_staged(&mut self, failed: u32) {
        let due = tokio::time::Instant::now() + STAGED_RETRY.delay(failed);
        if self.staged.is_none_or(|(at, _)| due < at) {
            self.staged = Some((due, failed));
        }
    }

    /// Finishes the intakes an error interrupted, as a start does after a crash.
    async fn finish_staged(&mut self) {
        let Some((_, failed)) = self.staged.take() else { return };
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || intake::recover_staged(&store)).await {
            Ok(Ok(outcomes)) => {
                for outcome in outcomes {
                    match outcome {
                        Ok(Intake::Accepted(id)) => {
                            tracing::info!(task = %id, "finished an interrupted intake");
                            self.accepted(id, false);
                        }
                        Ok(outcome) => tracing::info!("finished an interrupted intake: {outcome:?}"),
                        Err(e) => {
                            tracing::warn!(
                                "cannot finish an interrupted intake yet ({}); trying again in {} s",
                                clawboard_core::error::chain(&e),
                                STAGED_RETRY.delay(failed + 1).as_secs()
                            );
                            self.retry_staged(failed + 1);
                        }
                    }
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    "cannot finish an interrupted intake yet ({}); trying again in {} s",
                    clawboard_core::error::chain(&e),
                    STAGED_RETRY.delay(failed + 1).as_secs()
                );
                self.retry_staged(failed + 1);
            }
            Err(e) => tracing::error!("finishing interrupted intakes panicked: {e}"),
        }
    }

    /// Runs jobs; a job whose file looks unfinished goes (or stays) in `waiting`,
    /// under the older of its sequence numbers. Intake is idempotent (a taken inbox
    /// file is gone, a claimed task is not claimed again), so the few entries a
    /// crash replays cost nothing but a look.
    async fn run_jobs(&mut self, jobs: Vec<(u64, Job)>) -> JobResult {
        let store = self.store.clone();
        let blueprints = self.dispatcher.engine.blueprints();
        let outcomes = tokio::task::spawn_blocking(move || take(&store, &blueprints, jobs))
            .await
            // A bug in intake: handing the batch again would meet it again.
            .map_err(|e| JobError::Critical(e.into()))?;
        for (seq, job, outcome) in outcomes {
            if let Some(file) = job.file() {
                match outcome {
                    Ok(Intake::Unsettled) => {
                        let due = tokio::time::Instant::now() + intake::SETTLE;
                        tracing::debug!(file, "not finished yet; looking again on its next close or when quiet");
                        let w = self.waiting.entry(file).or_insert(Waiting { seq, job: job.clone(), due });
                        w.due = due;
                        continue;
                    }
                    _ => {
                        self.waiting.remove(&file);
                    }
                }
            }
            match (job, outcome) {
                (Job::Escalation(id), _) => self.dispatcher.escalation_changed(&id),
                (job, Ok(Intake::Accepted(id))) => self.accepted(id, matches!(job, Job::PulledTask(_))),
                // Taken out of inbox/, its batch interrupted (the error was reported
                // with another of its files): finished with the staged ones.
                (_, Ok(Intake::Staged)) => self.retry_staged(0),
                (_, Ok(_)) => {}
                // One bad file must not stop intake: it is logged and skipped. A
                // dropped file it had taken out of inbox/ waits in .clawboard/intake/
                // and is tried again (a full disk may have room by then).
                (job, Err(e)) => {
                    tracing::error!("intake: {}", clawboard_core::error::chain(&e));
                    if matches!(job, Job::Inbox(_)) {
                        self.retry_staged(0);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs `jobs` on this (blocking) thread: the dropped files as one batch, their
/// syncs shared ([`intake::take_inbox_files`]), the others one by one. The
/// outcomes in the jobs' order.
fn take(store: &Store, blueprints: &Catalog, jobs: Vec<(u64, Job)>) -> Vec<(u64, Job, Result<Intake, Error>)> {
    let names: Vec<String> =
        jobs.iter().filter_map(|(_, job)| if let Job::Inbox(name) = job { Some(name.clone()) } else { None }).collect();
    let mut dropped = intake::take_inbox_files(store, &names, blueprints).into_iter();
    jobs.into_iter()
        .map(|(seq, job)| {
            let outcome = match &job {
                Job::Inbox(_) => dropped.next().unwrap_or(Ok(Intake::Ignored("gone before intake"))),
                Job::TaskFile(id) => intake::take_task_file(store, id, blueprints),
                Job::PulledTask(id) => intake::take_pulled_task(store, id),
                Job::Escalation(_) => Ok(Intake::Ignored("an escalation")),
            };
            (seq, job, outcome)
        })
        .collect()
}

impl Consumer for IntakeConsumer {
    async fn handle(&mut self, batch: Vec<Journaled>) -> JobResult {
        let jobs: Vec<(u64, Job)> = batch.iter().filter_map(|e| Some((e.seq, job(e)?))).collect();
        if !jobs.is_empty() {
            tracing::debug!(jobs = jobs.len(), "intake batch");
            self.run_jobs(jobs).await?;
        }
        Ok(())
    }

    /// Never at or past a waiting file's entry: a crash replays it.
    fn durable(&self, handled: u64) -> u64 {
        self.waiting.values().map(|w| w.seq.saturating_sub(1)).fold(handled, u64::min)
    }

    async fn wait_for_work(&mut self) {
        sleep_until_some(self.waiting.values().map(|w| w.due).chain(self.staged.map(|(at, _)| at)).min()).await
    }

    /// Looks again at the waiting files that are due, and finishes interrupted
    /// intakes when they are due.
    async fn work(&mut self) -> JobResult {
        let now = tokio::time::Instant::now();
        if self.staged.is_some_and(|(at, _)| at <= now) {
            self.finish_staged().await;
        }
        let due: Vec<(u64, Job)> =
            self.waiting.values().filter(|w| w.due <= now).map(|w| (w.seq, w.job.clone())).collect();
        // Out of the list while they run; the unsettled ones come back with their seq.
        for (_, job) in &due {
            if let Some(f) = job.file() {
                self.waiting.remove(&f);
            }
        }
        self.run_jobs(due).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::daemon::jobs::testing::{Setup, setup, until};

    /// A tree with the intake consumer running, and its dispatcher.
    fn with_intake() -> (Setup, Arc<Dispatcher>) {
        let mut s = setup();
        let engine = Arc::new(clawboard_roles::Engine::new(
            s.store.clone(),
            clawboard_roles::RolesConfig::default(),
            clawboard_roles::Shutdown::never(),
        ));
        let d = Dispatcher::new(engine);
        s.runner.consumer("intake", IntakeConsumer::new(s.store.clone(), d.clone(), None));
        (s, d)
    }

    /// A dropped task whose intake fails on the way (the task's directory cannot be
    /// made; a full disk in life) is finished a little later, without a restart.
    #[tokio::test(start_paused = true)]
    async fn an_intake_an_error_interrupted_is_finished_later() {
        let (mut s, d) = with_intake();
        let in_the_way = s.root().join("tasks/t-x");
        std::fs::write(&in_the_way, "a file where the task's directory goes").unwrap();
        let inbox = s.root().join("inbox");
        std::fs::write(inbox.join("x.json"), r#"{"taskId":"t-x","type":"coding","description":"x"}"#).unwrap();
        s.append(&["inbox/x.json"]);
        until("x taken out of inbox/", || !inbox.join("x.json").exists()).await;
        assert!(!s.root().join("tasks/t-x/task.json").exists());
        assert_eq!(d.stats().waiting, 0);
        assert!(s.root().join(".clawboard/intake/t-x@x.json").exists(), "kept for the retry");
        std::fs::remove_file(&in_the_way).unwrap();
        // Tried again after STAGED_RETRY (tokio's paused clock moves on here).
        tokio::time::sleep(STAGED_RETRY.delay(0) + Duration::from_millis(10)).await;
        until("t-x queued", || d.stats().waiting == 1).await;
        assert!(s.root().join("tasks/t-x/task.json").exists());
        s.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn intake_takes_dropped_files_and_keeps_its_cursor_below_an_unfinished_one() {
        let (mut s, d) = with_intake();
        let inbox = s.root().join("inbox");
        std::fs::write(inbox.join("a.json"), r#"{"taskId":"t-a","type":"coding","description":"x"}"#).unwrap();
        // Cut short and still being written: its mtime kept fresh, as a slow writer's.
        std::fs::write(inbox.join("b.json"), r#"{"taskId":"t-b","type":"cod"#).unwrap();
        let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let writer = {
            let (writing, b) = (writing.clone(), inbox.join("b.json"));
            std::thread::spawn(move || {
                while writing.load(std::sync::atomic::Ordering::SeqCst) {
                    let f = std::fs::File::options().write(true).open(&b).unwrap();
                    f.set_modified(std::time::SystemTime::now()).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        s.append(&["inbox/a.json", "inbox/b.json"]);
        until("t-a queued", || d.stats().waiting == 1).await;
        assert!(s.root().join("tasks/t-a/task.json").exists());
        // b is looked at again after SETTLE of quiet; the cursor is stored then, below b's entry.
        tokio::time::sleep(intake::SETTLE + Duration::from_millis(10)).await;
        until("the cursor below b", || s.cursor("intake") == 1).await;
        assert!(inbox.join("b.json").exists(), "an unfinished file is neither taken nor rejected");
        writing.store(false, std::sync::atomic::Ordering::SeqCst);
        writer.join().unwrap();
        std::fs::write(inbox.join("b.json"), r#"{"taskId":"t-b","type":"coding","description":"y"}"#).unwrap();
        s.append(&["inbox/b.json"]);
        until("t-b queued", || d.stats().waiting == 2).await;
        s.stop().await;
        assert_eq!(s.cursor("intake"), 3, "past both once b is taken");
    }
}
