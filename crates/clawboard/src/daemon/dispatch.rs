//! Which tasks are driven when: a FIFO queue, each claimed task at most once in it,
//! driven by the `dispatch` job at most `lifecycle.max_tasks` at a time (the drives
//! are tasks of its own `JoinSet`); a drive that could not run is queued again
//! after [`RETRY`]; the held tasks wait on escalations. A queued task costs a
//! string, not a parked async task.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clawboard_core::lock::Lock;
use clawboard_roles::{Engine, Outcome};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::jobs::{sleep_until_some, stopped};

/// After a drive that could not run (the tree unreadable, a bug), the task is
/// queued again this much later.
const RETRY: Duration = Duration::from_secs(5);

/// What a drive task returns: its task and how the drive ended.
type Drive = (String, Result<Outcome, clawboard_core::Error>);

pub struct Dispatcher {
    pub engine: Arc<Engine>,
    queue: Lock<VecDeque<String>>,
    /// Queued or being driven: a task is never in the queue twice.
    queued: Lock<HashSet<String>>,
    /// Tasks to queue again once their time comes (see [`RETRY`]).
    retries: Lock<Vec<(Instant, String)>>,
    wake: Notify,
    held: Lock<HashMap<String, String>>,
    /// Tasks being driven.
    running: watch::Sender<usize>,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    /// Notified when a task reaches `completed` or `failed` (sync pushes at once).
    pub task_ended: Arc<Notify>,
    /// Notified when tasks ended here or were pulled from other nodes: the GM's
    /// records are due (see `records.rs`).
    pub records_due: Arc<Notify>,
    /// When intake accepted each task not driven yet, for the latency histogram.
    accepted_at: Lock<HashMap<String, std::time::Instant>>,
    pub intake_latency: super::metrics::Histogram,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueStats {
    pub waiting: usize,
    pub running: usize,
    pub held: usize,
    pub completed_since_start: u64,
    pub failed_since_start: u64,
}

impl Dispatcher {
    pub fn new(engine: Arc<Engine>) -> Arc<Dispatcher> {
        Arc::new(Dispatcher {
            engine,
            queue: Lock::new(VecDeque::new()),
            queued: Lock::new(HashSet::new()),
            retries: Lock::new(Vec::new()),
            wake: Notify::new(),
            held: Lock::new(HashMap::new()),
            running: watch::channel(0).0,
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            task_ended: Arc::new(Notify::new()),
            records_due: Arc::new(Notify::new()),
            accepted_at: Lock::new(HashMap::new()),
            intake_latency: super::metrics::Histogram::new(super::metrics::LATENCY_BUCKETS),
        })
    }

    /// The config changed: `lifecycle.max_tasks` is read again (fewer take effect
    /// as drives end).
    pub fn resize(&self) {
        self.wake.notify_one();
    }

    /// Drives queued tasks, at most `lifecycle.max_tasks` at once, until `stop`;
    /// then waits for the drives under way (the engine tells them to stop, and
    /// kills their roles after the grace period).
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let mut drives: JoinSet<Drive> = JoinSet::new();
        let mut driving: HashMap<tokio::task::Id, String> = HashMap::new();
        loop {
            while drives.len() < self.engine.roles().lifecycle.max_tasks {
                let next = self.queue.lock().pop_front();
                let Some(task_id) = next else { break };
                let accepted = self.accepted_at.lock().remove(&task_id);
                if let Some(at) = accepted {
                    self.intake_latency.observe(at.elapsed());
                }
                tracing::debug!(task = %task_id, "driving");
                self.running.send_modify(|n| *n += 1);
                let engine = self.engine.clone();
                let id = task_id.clone();
                let handle = drives.spawn(async move {
                    let outcome = engine.drive(&id).await;
                    (id, outcome)
                });
                driving.insert(handle.id(), task_id);
            }
            let next_retry = self.retries.lock().iter().map(|(at, _)| *at).min();
            tokio::select! {
                () = self.wake.notified() => {}
                Some(done) = drives.join_next_with_id() => self.drive_ended(done, &mut driving),
                () = sleep_until_some(next_retry) => self.retry_due(),
                () = stopped(&mut stop) => break,
            }
        }
        while let Some(done) = drives.join_next_with_id().await {
            self.drive_ended(done, &mut driving);
        }
        Ok(())
    }

    fn drive_ended(
        self: &Arc<Self>,
        done: Result<(tokio::task::Id, Drive), tokio::task::JoinError>,
        driving: &mut HashMap<tokio::task::Id, String>,
    ) {
        let (task_id, outcome) = match done {
            Ok((id, (task_id, outcome))) => {
                driving.remove(&id);
                (task_id, outcome)
            }
            Err(e) => {
                let Some(task_id) = driving.remove(&e.id()) else { return };
                tracing::error!(task = %task_id, "the drive panicked: {e}; retrying in {RETRY:?}");
                self.running.send_modify(|n| *n = n.saturating_sub(1));
                self.queued.lock().remove(&task_id);
                self.retries.lock().push((Instant::now() + RETRY, task_id));
                return;
            }
        };
        self.running.send_modify(|n| *n = n.saturating_sub(1));
        self.queued.lock().remove(&task_id);
        self.finished(task_id, outcome);
    }

    /// Queues the tasks whose retry is due.
    fn retry_due(&self) {
        let now = Instant::now();
        let due: Vec<String> = {
            let mut retries = self.retries.lock();
            let (due, later) = retries.drain(..).partition(|(at, _)| *at <= now);
            *retries = later;
            due.into_iter().map(|(_, t): (Instant, String)| t).collect()
        };
        for task in due {
            self.enqueue(task);
        }
    }

    /// Resolves once no task is being driven.
    pub async fn idle(&self) {
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = self.running.subscribe().wait_for(|n| *n == 0).await;
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            waiting: self.queue.lock().len(),
            running: *self.running.borrow(),
            held: self.held.lock().values().collect::<HashSet<_>>().len(),
            completed_since_start: self.completed.load(Ordering::SeqCst),
            failed_since_start: self.failed.load(Ordering::SeqCst),
        }
    }

    /// Intake accepted `task_id` now: its first drive observes the intake-to-dispatch latency.
    pub fn accepted(&self, task_id: &str) {
        let mut m = self.accepted_at.lock();
        // Tasks another node runs are never driven here: do not let them pile up.
        if m.len() >= 10_000 {
            m.clear();
        }
        m.insert(task_id.to_owned(), std::time::Instant::now());
    }

    /// Queues `task_id` to be driven (no-op if it is already queued or running).
    pub fn enqueue(&self, task_id: String) {
        if !self.queued.lock().insert(task_id.clone()) {
            return;
        }
        self.queue.lock().push_back(task_id);
        self.wake.notify_one();
    }

    fn finished(self: &Arc<Self>, task_id: String, outcome: Result<Outcome, clawboard_core::Error>) {
        match outcome {
            Ok(Outcome::Completed) => {
                self.completed.fetch_add(1, Ordering::SeqCst);
                tracing::info!(task = %task_id, "completed");
                self.task_ended.notify_one();
                self.records_due.notify_one();
            }
            Ok(Outcome::Failed(why)) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(task = %task_id, "failed: {why}");
                self.task_ended.notify_one();
                self.records_due.notify_one();
            }
            Ok(Outcome::Held(ids)) => {
                tracing::info!(task = %task_id, escalations = ?ids, "held until a human decides");
                self.held.lock().extend(ids.iter().map(|id| (id.clone(), task_id.clone())));
                // A decision may have landed while the task was still being driven,
                // before it was recorded as held: look once more, now that a later
                // change would find it in `held`.
                let decided = ids.iter().find(|id| {
                    clawboard_records::escalations::load(self.engine.store(), id).is_ok_and(|e| e.decision.is_some())
                });
                if let Some(id) = decided {
                    self.escalation_changed(id);
                }
            }
            Ok(Outcome::Stopped) => tracing::info!(task = %task_id, "stopped; resumes on the next start"),
            Ok(Outcome::Fenced) => tracing::warn!(task = %task_id, "another node runs this task now; stopped here"),
            Err(e) => {
                tracing::error!(task = %task_id, "cannot drive the task: {e:#}; retrying in {RETRY:?}");
                self.retries.lock().push((Instant::now() + RETRY, task_id));
                self.wake.notify_one();
            }
        }
    }

    /// An escalation file changed: a task held by it is driven again.
    pub fn escalation_changed(&self, escalation_id: &str) {
        let task = self.held.lock().remove(escalation_id);
        if let Some(task) = task {
            self.held.lock().retain(|_, t| *t != task);
            self.enqueue(task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawboard_core::formats::{Decision, Level};
    use clawboard_records::escalations;
    use clawboard_roles::output::RaisedEscalation;

    fn dispatcher(dir: &std::path::Path) -> Arc<Dispatcher> {
        let (store, _) = clawboard_core::Store::init(dir).unwrap();
        let engine =
            Arc::new(Engine::new(store, clawboard_roles::RolesConfig::default(), clawboard_roles::Shutdown::never()));
        Dispatcher::new(engine)
    }

    /// An escalation from `task` that needs approval; returns its id.
    fn raise(d: &Dispatcher, task: &str) -> String {
        let id = escalations::new_id();
        let raised = RaisedEscalation {
            level: Level::High,
            issue: "ok?".into(),
            suggested_action: None,
            requires_human_approval: true,
        };
        escalations::raise(d.engine.store(), &id, "w", task, &raised).unwrap();
        id
    }

    #[tokio::test(start_paused = true)]
    async fn a_drive_that_cannot_run_is_queued_again_after_the_retry_delay() {
        let dir = tempfile::tempdir().unwrap();
        let d = dispatcher(dir.path());
        let (stop, stopped) = watch::channel(false);
        let run = tokio::spawn(d.clone().run(stopped));
        // No tasks/ghost/task.json: the drive cannot read its task.
        d.enqueue("ghost".into());
        crate::daemon::jobs::testing::until("the failed drive", || d.retries.lock().len() == 1).await;
        let first = d.retries.lock()[0].0;
        assert!(queued(&d).is_empty());
        tokio::time::sleep(RETRY + Duration::from_secs(1)).await;
        crate::daemon::jobs::testing::until("the second drive", || {
            d.retries.lock().first().is_some_and(|(at, _)| *at >= first + RETRY)
        })
        .await;
        d.idle().await;
        stop.send_replace(true);
        run.await.unwrap().unwrap();
    }

    fn queued(d: &Dispatcher) -> Vec<String> {
        d.queue.lock().iter().cloned().collect()
    }

    #[tokio::test]
    async fn a_decision_made_before_the_hold_was_recorded_is_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let d = dispatcher(dir.path());
        let id = raise(&d, "t1");
        // The human decides, and the change reaches the dispatcher, while the task is
        // still being driven: nothing is held yet, so nothing happens.
        escalations::decide(d.engine.store(), &id, Decision::Approved, "human", None).unwrap();
        d.escalation_changed(&id);
        assert!(queued(&d).is_empty());
        // Then the drive ends with the task held on that escalation: it is queued again at once.
        d.finished("t1".into(), Ok(Outcome::Held(vec![id.clone()])));
        assert_eq!(queued(&d), vec!["t1"]);
        assert_eq!(d.stats().held, 0);
    }

    #[tokio::test]
    async fn an_undecided_escalation_holds_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dispatcher(dir.path());
        let id = raise(&d, "t2");
        d.finished("t2".into(), Ok(Outcome::Held(vec![id.clone()])));
        assert!(queued(&d).is_empty());
        assert_eq!(d.stats().held, 1);
        d.escalation_changed(&id);
        assert_eq!(queued(&d), vec!["t2"]);
        d.enqueue("t2".into());
        assert_eq!(queued(&d), vec!["t2"], "a task is queued once");
    }
}
