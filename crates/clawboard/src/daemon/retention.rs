//! Retention on `retention.schedule` (hourly): read `retention.yaml` (so an edit
//! takes effect at the next run; SIGHUP checks it at once), plan with the bucket and
//! archive guard, delete what is due through the daemon's store so every deletion is
//! journaled and pushed as a delete. A bad policy file is logged, naming the key, and
//! the run deletes nothing.

use clawboard_core::Store;
use tokio::sync::watch;

use crate::config::Settings;

pub struct RetentionLoop {
    pub store: Store,
    pub settings: Settings,
}

impl RetentionLoop {
    fn once(&self) -> anyhow::Result<()> {
        let (policy, source) = self.settings.retention.policy()?;
        let guard = crate::commands::retention::TreeGuard::new(&self.settings, &self.store)?;
        let plan = clawboard_core::retention::plan(&self.store, &policy, chrono::Utc::now(), &guard)?;
        if plan.delete.is_empty() && plan.held.is_empty() {
            tracing::debug!(policy = %source, "retention: nothing due");
            return Ok(());
        }
        for item in &plan.held {
            tracing::info!(item = %item.subject.label(), why = item.held.as_deref().unwrap_or(""), "retention: held back");
        }
        let report = clawboard_core::retention::execute(&self.store, &plan, false, &guard)?;
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

    pub async fn run(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let me = std::sync::Arc::new(self);
        loop {
            tokio::select! {
                _ = clawboard_roles::runner::fired(&mut stop) => return Ok(()),
                _ = tokio::time::sleep(me.settings.retention.schedule.until_next()) => {}
            }
            let m = me.clone();
            match tokio::task::spawn_blocking(move || m.once()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("retention: {e:#}; nothing deleted this run"),
                Err(e) => tracing::error!("retention: the run panicked: {e}"),
            }
            // Past the schedule's second, so it does not fire twice.
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}
