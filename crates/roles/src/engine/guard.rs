//! Several nodes on one bucket: the engine acts on a task only while this node
//! holds its claim. The daemon hands the engine a [`ClaimGuard`]; before a role
//! starts, the engine waits until the guard says the claim is held (confirmed under
//! a live lease: after a restart, or a lapse of the heartbeats, the claim is renewed
//! first); before a role's result is applied and before the task's end is written,
//! it confirms the claim again (from the lease while that holds, otherwise from the
//! bucket). A task whose claim another node holds is fenced: nothing
//! more is run or written for it here. After a step that ended well, the guard may
//! hold the next one back until the step's records are pushed (`sync.push_each_step`). Without a guard (one node, `clawboard run`),
//! nothing waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{Engine, StepError};
use crate::runner;

/// Whether this node may act on a task it drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Its claim is this node's, confirmed under a live lease.
    Yes,
    /// Not known now (the lease lapsed, the claim not renewed yet, the bucket out of reach).
    Wait,
    /// Another node holds the claim.
    Lost,
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the daemon knows about this node's claims (see the module docs).
pub trait ClaimGuard: Send + Sync {
    /// From what this node knows now, without asking the bucket.
    fn hold(&self, task_id: &str) -> Hold;
    /// Before a write: `Yes` while the lease proves the claim, otherwise the
    /// bucket's answer; `Lost` has fenced the task.
    fn confirm<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Hold>;
    /// Resolves when [`ClaimGuard::hold`] may answer differently.
    fn changed(&self) -> BoxFuture<'_, ()>;
    /// A step of `task_id` ended well: resolves once the step may be followed
    /// (with `sync.push_each_step`, once its records are in the bucket).
    fn step_done<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, ()>;
}

impl Engine {
    /// Acts on tasks only while `guard` says this node holds their claim.
    pub fn set_claim_guard(&self, guard: Arc<dyn ClaimGuard>) {
        *self.guard.lock() = Some(guard);
    }

    fn guard_for(&self, task_id: &str) -> Option<Arc<dyn ClaimGuard>> {
        // A lane's entry call has no task (entries are claimed once, never taken over).
        if task_id.is_empty() { None } else { self.guard.lock().clone() }
    }

    /// Waits until this node may act on `task_id`: `Fenced` if another node holds
    /// it, `Stopped` if the daemon stops meanwhile.
    pub(crate) async fn held(&self, task_id: &str) -> Result<(), StepError> {
        let Some(guard) = self.guard_for(task_id) else { return Ok(()) };
        let mut stopping = self.shutdown.stopping.clone();
        let mut told = false;
        loop {
            if self.is_fenced(task_id) {
                return Err(StepError::Fenced);
            }
            // Subscribed before asking, so a change in between is not missed.
            let changed = guard.changed();
            match guard.hold(task_id) {
                Hold::Yes => return Ok(()),
                Hold::Lost => {
                    self.fence(task_id);
                    return Err(StepError::Fenced);
                }
                Hold::Wait => {}
            }
            if !told {
                tracing::info!(task = task_id, "waiting until this node's claim on the task is confirmed");
                told = true;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = runner::fired(&mut stopping) => return Err(StepError::Stopped),
            }
        }
    }

    /// A step of `task_id` ended well: waits until the next may start (see
    /// [`ClaimGuard::step_done`]); `Stopped` if the daemon stops meanwhile.
    pub(crate) async fn step_done(&self, task_id: &str) -> Result<(), StepError> {
        let Some(guard) = self.guard_for(task_id) else { return Ok(()) };
        let mut stopping = self.shutdown.stopping.clone();
        tokio::select! {
            () = guard.step_done(task_id) => Ok(()),
            () = runner::fired(&mut stopping) => Err(StepError::Stopped),
        }
    }

    /// Confirms that this node still holds `task_id` (waiting while that cannot
    /// be known): before a role's result is applied, and before the task's end.
    pub(crate) async fn confirmed(&self, task_id: &str) -> Result<(), StepError> {
        let Some(guard) = self.guard_for(task_id) else { return Ok(()) };
        loop {
            if self.is_fenced(task_id) {
                return Err(StepError::Fenced);
            }
            match guard.confirm(task_id).await {
                Hold::Yes => return Ok(()),
                Hold::Lost => {
                    self.fence(task_id);
                    return Err(StepError::Fenced);
                }
                Hold::Wait => self.held(task_id).await?,
            }
        }
    }
}
