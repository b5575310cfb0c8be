//! Which tasks are driven when: a FIFO queue served by `lifecycle.max_tasks`
//! workers, each claimed task at most once in it, and the held tasks waiting on
//! escalations. A queued task costs a string, not a parked async task.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use clawboard_core::lock::Lock;
use clawboard_roles::{Engine, Outcome};
use tokio::sync::Notify;

pub struct Dispatcher {
    pub engine: Arc<Engine>,
    queue: Lock<VecDeque<String>>,
    /// Queued or being driven: a task is never in the queue twice.
    queued: Lock<HashSet<String>>,
    wake: Notify,
    workers: AtomicUsize,
    held: Lock<HashMap<String, String>>,
    pub running: AtomicUsize,
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
    stopping: tokio::sync::watch::Receiver<bool>,
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
    /// A dispatcher with its workers started.
    pub fn new(engine: Arc<Engine>, stopping: tokio::sync::watch::Receiver<bool>) -> Arc<Dispatcher> {
        let d = Self::without_workers(engine, stopping);
        d.resize();
        d
    }

    fn without_workers(engine: Arc<Engine>, stopping: tokio::sync::watch::Receiver<bool>) -> Arc<Dispatcher> {
        Arc::new(Dispatcher {
            engine,
            queue: Lock::new(VecDeque::new()),
            queued: Lock::new(HashSet::new()),
            wake: Notify::new(),
            workers: AtomicUsize::new(0),
            held: Lock::new(HashMap::new()),
            running: AtomicUsize::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            task_ended: Arc::new(Notify::new()),
            records_due: Arc::new(Notify::new()),
            accepted_at: Lock::new(HashMap::new()),
            intake_latency: super::metrics::Histogram::new(super::metrics::LATENCY_BUCKETS),
            stopping,
        })
    }

    /// Starts workers up to `lifecycle.max_tasks` (after a reload: more take effect
    /// at once; fewer need a restart).
    pub fn resize(self: &Arc<Self>) {
        let want = self.engine.config().lifecycle.max_tasks;
        while self.workers.load(Ordering::SeqCst) < want {
            self.workers.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(self.clone().worker());
        }
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            waiting: self.queue.lock().len(),
            running: self.running.load(Ordering::SeqCst),
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

    async fn worker(self: Arc<Self>) {
        let mut stopping = self.stopping.clone();
        loop {
            if *stopping.borrow() {
                return;
            }
            let next = self.queue.lock().pop_front();
            let Some(task_id) = next else {
                tokio::select! {
                    _ = self.wake.notified() => continue,
                    _ = clawboard_roles::runner::fired(&mut stopping) => return,
                }
            };
            self.running.fetch_add(1, Ordering::SeqCst);
            let accepted = self.accepted_at.lock().remove(&task_id);
            if let Some(at) = accepted {
                self.intake_latency.observe(at.elapsed());
            }
            tracing::debug!(task = %task_id, "driving");
            let outcome = self.engine.drive(&task_id).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            self.queued.lock().remove(&task_id);
            self.finished(task_id, outcome);
        }
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
                    clawboard_roles::escalations::load(self.engine.store(), id).is_ok_and(|e| e.decision.is_some())
                });
                if let Some(id) = decided {
                    self.escalation_changed(id);
                }
            }
            Ok(Outcome::Stopped) => tracing::info!(task = %task_id, "stopped; resumes on the next start"),
            Ok(Outcome::Fenced) => tracing::warn!(task = %task_id, "another node runs this task now; stopped here"),
            Err(e) => {
                tracing::error!(task = %task_id, "cannot drive the task: {e:#}; retrying in 5 s");
                let again = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    if !*again.stopping.borrow() {
                        again.enqueue(task_id);
                    }
                });
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
    use clawboard_roles::escalations;
    use clawboard_roles::output::RaisedEscalation;

    fn dispatcher(dir: &std::path::Path) -> Arc<Dispatcher> {
        let (store, _) = clawboard_core::Store::init(dir).unwrap();
        let engine = Arc::new(Engine::new(store, Default::default(), clawboard_roles::Shutdown::never()));
        let (_tx, stopping) = tokio::sync::watch::channel(false);
        Dispatcher::without_workers(engine, stopping)
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
