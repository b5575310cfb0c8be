//! Which tasks are driven when: a queue in front of `lifecycle.max_tasks` slots,
//! each claimed task at most once in it, and the held tasks waiting on escalations.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clawboard_roles::{Engine, Outcome};
use tokio::sync::Semaphore;

pub struct Dispatcher {
    pub engine: Arc<Engine>,
    slots: Arc<Semaphore>,
    slots_total: AtomicUsize,
    queued: Mutex<HashSet<String>>,
    held: Mutex<HashMap<String, String>>,
    pub waiting: AtomicUsize,
    pub running: AtomicUsize,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
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
    pub fn new(engine: Arc<Engine>, stopping: tokio::sync::watch::Receiver<bool>) -> Arc<Dispatcher> {
        let n = engine.config().lifecycle.max_tasks;
        Arc::new(Dispatcher {
            engine,
            slots: Arc::new(Semaphore::new(n)),
            slots_total: AtomicUsize::new(n),
            queued: Mutex::new(HashSet::new()),
            held: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stopping,
        })
    }

    /// After a config reload: more task slots take effect at once (fewer do not).
    pub fn resize(&self) {
        let want = self.engine.config().lifecycle.max_tasks;
        let have = self.slots_total.load(Ordering::SeqCst);
        if want > have {
            self.slots.add_permits(want - have);
            self.slots_total.store(want, Ordering::SeqCst);
        }
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            waiting: self.waiting.load(Ordering::SeqCst),
            running: self.running.load(Ordering::SeqCst),
            held: self.held.lock().map(|h| h.values().collect::<HashSet<_>>().len()).unwrap_or(0),
            completed_since_start: self.completed.load(Ordering::SeqCst),
            failed_since_start: self.failed.load(Ordering::SeqCst),
        }
    }

    /// Drives `task_id` as soon as a slot is free (no-op if it is already queued).
    pub fn enqueue(self: &Arc<Self>, task_id: String) {
        if !self.queued.lock().is_ok_and(|mut q| q.insert(task_id.clone())) {
            return;
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            let permit = me.slots.clone().acquire_owned().await;
            me.waiting.fetch_sub(1, Ordering::SeqCst);
            if permit.is_err() || *me.stopping.borrow() {
                me.forget(&task_id);
                return;
            }
            me.running.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(task = %task_id, "driving");
            let outcome = me.engine.drive(&task_id).await;
            me.running.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            me.forget(&task_id);
            match outcome {
                Ok(Outcome::Completed) => {
                    me.completed.fetch_add(1, Ordering::SeqCst);
                    tracing::info!(task = %task_id, "completed");
                }
                Ok(Outcome::Failed(why)) => {
                    me.failed.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(task = %task_id, "failed: {why}");
                }
                Ok(Outcome::Held(ids)) => {
                    tracing::info!(task = %task_id, escalations = ?ids, "held until a human decides");
                    if let Ok(mut h) = me.held.lock() {
                        for id in ids {
                            h.insert(id, task_id.clone());
                        }
                    }
                }
                Ok(Outcome::Stopped) => tracing::info!(task = %task_id, "stopped; resumes on the next start"),
                Err(e) => {
                    tracing::error!(task = %task_id, "cannot drive the task: {e:#}; retrying in 5 s");
                    let again = me.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        if !*again.stopping.borrow() {
                            again.enqueue(task_id);
                        }
                    });
                }
            }
        });
    }

    fn forget(&self, task_id: &str) {
        if let Ok(mut q) = self.queued.lock() {
            q.remove(task_id);
        }
    }

    /// An escalation file changed: a task held by it is driven again.
    pub fn escalation_changed(self: &Arc<Self>, escalation_id: &str) {
        let task = self.held.lock().ok().and_then(|mut h| h.remove(escalation_id));
        if let Some(task) = task {
            if let Ok(mut h) = self.held.lock() {
                h.retain(|_, t| *t != task);
            }
            self.enqueue(task);
        }
    }
}
