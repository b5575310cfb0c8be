//! Retention on `retention.schedule` (hourly): read `retention.yaml` (so an edit
//! takes effect at the next run; SIGHUP checks it at once), plan with the bucket and
//! archive guard, delete what is due through the daemon's store so every deletion is
//! journaled and pushed as a delete. A bad policy file is logged, naming the key, and
//! the run deletes nothing; the runner logs it once while it repeats.

use std::sync::Arc;

use clawboard_core::Store;
use clawboard_core::lock::Lock;
use clawboard_core::summary::TaskSummary;

use super::Parts;
use super::jobs::{Clock, JobResult, Runner, Scheduled, Worker};
use crate::config::Settings;

/// The retention runs, when `[retention]` is on. A policy that does not read is
/// logged now; until it is fixed, no run deletes anything.
pub fn install(jobs: &mut Runner, p: &Parts) {
    let s = p.settings;
    if !s.retention.enabled {
        return;
    }
    match s.retention.policy() {
        Ok((_, source)) => tracing::info!(policy = %source, schedule = %s.retention.schedule.text, "retention on"),
        Err(e) => tracing::error!("retention: {e}; fix it: until then no retention run deletes anything"),
    }
    let r = Retention::new(p.store.clone(), s.clone(), p.clock).with_tasks(p.state.tasks.clone());
    jobs.worker("retention", r);
}

pub struct Retention {
    store: Store,
    settings: Arc<Settings>,
    due: Scheduled,
    /// The daemon's task summary: tasks are aged from it, not from every `task.json`.
    tasks: Option<Arc<Lock<TaskSummary>>>,
}

impl Retention {
    pub fn new(store: Store, settings: Settings, clock: Clock) -> Retention {
        let due = Scheduled::new(settings.retention.schedule.clone(), clock);
        Retention { store, settings: Arc::new(settings), due, tasks: None }
    }

    pub fn with_tasks(self, tasks: Arc<Lock<TaskSummary>>) -> Retention {
        Retention { tasks: Some(tasks), ..self }
    }

    fn once(store: &Store, settings: &Settings, tasks: Option<&Lock<TaskSummary>>) -> anyhow::Result<()> {
        let (policy, source) = settings.retention.policy()?;
        let guard = crate::retention::TreeGuard::new(settings, store)?;
        // A copy: the guard's look at each task due must not hold up the journal thread.
        let summary = tasks.map(|t| t.lock().clone());
        let plan = clawboard_core::retention::plan_with(store, &policy, chrono::Utc::now(), &guard, summary.as_ref())?;
        if plan.delete.is_empty() && plan.held.is_empty() {
            tracing::debug!(policy = %source, "retention: nothing due");
        } else {
            Self::execute(store, &plan, &guard, &source)?;
        }
        // Entries deleted here, or on another node and pulled as deletes.
        match clawboard_entries::handling::prune(store) {
            Ok(0) => {}
            Ok(records) => tracing::info!(records, "retention: the lane records of entries that are gone removed"),
            Err(e) => tracing::warn!("retention: the lane records of entries that are gone not pruned: {e}"),
        }
        Ok(())
    }

    fn execute(
        store: &Store,
        plan: &clawboard_core::retention::Plan,
        guard: &crate::retention::TreeGuard,
        source: &str,
    ) -> anyhow::Result<()> {
        for item in &plan.held {
            tracing::info!(item = %item.subject.label(), why = item.held.as_deref().unwrap_or(""), "retention: held back");
        }
        let report = clawboard_core::retention::execute(store, plan, false, guard)?;
        tracing::info!(
            policy = %source,
            tasks = report.tasks,
            files = report.files,
            queue_entries = report.queue_entries,
            held = plan.held.len(),
            "retention: deleted what was due"
        );
        for f in &report.failed {
            tracing::warn!("retention: not deleted: {f}");
        }
        Ok(())
    }
}

impl Worker for Retention {
    async fn wait_for_work(&mut self) {
        self.due.wait().await
    }

    async fn work(&mut self) -> JobResult {
        self.due.advance();
        let (store, settings, tasks) = (self.store.clone(), self.settings.clone(), self.tasks.clone());
        tokio::task::spawn_blocking(move || Self::once(&store, &settings, tasks.as_deref()))
            .await?
            .map_err(|e| anyhow::anyhow!("retention: {e:#}; nothing deleted this run"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::daemon::jobs::testing::{at, settings, setup, until};

    #[tokio::test(start_paused = true)]
    async fn retention_runs_on_its_schedule_and_a_bad_policy_fails_rounds_until_it_is_fixed() {
        let mut s = setup();
        let policy = s.root().join("retention.yaml");
        std::fs::write(&policy, "tasks: [").unwrap();
        let config = format!("[retention]\nschedule = \"0 * * * * *\"\nfile = \"{}\"\n", policy.display());
        let settings = settings(s.root(), &config);
        let r = Retention::new(s.store.clone(), settings, Clock::tokio(at("2026-01-01T00:00:30Z")));
        s.runner.worker("retention", r);
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert_eq!(s.rounds("retention"), 0, "not before the schedule's time");
        tokio::time::sleep(Duration::from_secs(2)).await;
        until("the first round", || s.rounds("retention") == 1).await;
        assert!(s.failing("retention"), "a bad policy fails the round");
        std::fs::write(&policy, clawboard_core::retention::DEFAULT_POLICY).unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(s.rounds("retention"), 1, "the next round is the next minute, not a retry");
        tokio::time::sleep(Duration::from_secs(31)).await;
        until("the second round", || s.rounds("retention") == 2).await;
        assert!(!s.failing("retention"));
        s.stop().await;
    }
}
