//! The memory loops: the harvests on `harvest.schedule` (hourly), the archive on
//! `archive.schedule` (every 6 hours: harvest, extract, commit, push). A failed run
//! (or commits left unpushed when the daemon starts) is retried after
//! `archive.retry`, doubling, but never later than the next scheduled run. Both run
//! on blocking threads: git and the tree are synchronous. On stop, a run in progress
//! is told to end at its next step and is not waited for.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clawboard_archive::{Archive, HarvestSettings};
use clawboard_sync::Schedule;
use tokio::sync::watch;
use tokio::time::Instant;

pub struct ArchiveLoop {
    pub archive: Arc<Archive>,
    pub harvest: HarvestSettings,
    pub schedule: Schedule,
    pub harvest_schedule: Schedule,
    pub retry: Duration,
}

impl ArchiveLoop {
    /// Runs `f` on a blocking thread; `None` when the daemon is stopping first (the
    /// archive is then told to stop at its next step).
    async fn blocking<T: Send + 'static>(
        &self,
        stop: &mut watch::Receiver<bool>,
        f: impl FnOnce(&Archive) -> T + Send + 'static,
    ) -> anyhow::Result<Option<T>> {
        let archive = self.archive.clone();
        let handle = tokio::task::spawn_blocking(move || f(&archive));
        tokio::select! {
            r = handle => Ok(Some(r?)),
            _ = clawboard_roles::runner::fired(stop) => {
                self.archive.stop_flag().store(true, Ordering::SeqCst);
                Ok(None)
            }
        }
    }

    pub async fn run(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let remote = self.archive.settings().remote.as_deref().map(clawboard_archive::repo::redact);
        tracing::info!(
            schedule = %self.schedule.text,
            remote = remote.as_deref().unwrap_or("none (local commits)"),
            "archive: memory branch {}",
            self.archive.settings().branch
        );
        // The delay of the last retry, while runs fail; and when the next run is due.
        let mut retry: Option<Duration> = None;
        let mut next_run = Instant::now() + self.schedule.until_next();
        match self.archive.status() {
            Ok(st) if st.pending > 0 || st.file.last_error.is_some() => {
                tracing::info!(
                    pending = st.pending,
                    "archive: the last run did not finish; retrying in {:?}",
                    self.retry
                );
                retry = Some(self.retry);
                next_run = next_run.min(Instant::now() + self.retry);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("archive: cannot read its status: {e}"),
        }
        let mut last_error: Option<String> = None;
        loop {
            let archive_now = tokio::select! {
                _ = tokio::time::sleep_until(next_run) => true,
                _ = tokio::time::sleep(self.harvest_schedule.until_next()) => false,
                _ = clawboard_roles::runner::fired(&mut stop) => return Ok(()),
            };
            let settings = self.harvest.clone();
            let Some(harvest) =
                self.blocking(&mut stop, move |a| a.harvest(chrono::Utc::now(), &settings, None)).await?
            else {
                return Ok(());
            };
            match harvest {
                Ok(h) => {
                    if !h.written.is_empty() || h.queue_completed > 0 {
                        tracing::info!(written = ?h.written, queue_completed = h.queue_completed, "harvest: done");
                    }
                    for p in h.problems {
                        tracing::warn!("harvest: skipped {p}");
                    }
                }
                Err(e) => tracing::error!("harvest failed: {e}"),
            }
            if !archive_now {
                continue;
            }
            let Some(outcome) = self.blocking(&mut stop, |a| a.run(chrono::Utc::now())).await? else {
                return Ok(());
            };
            let scheduled = Instant::now() + self.schedule.until_next();
            match outcome {
                Ok(r) => {
                    if let Some(id) = &r.commit.commit {
                        tracing::info!(commit = %id, changed = r.commit.changed, ms = r.commit.elapsed_ms, "archive: committed");
                    }
                    if let Some(p) = r.push.as_ref().and_then(|p| p.pushed.as_ref().map(|id| (id, p))) {
                        tracing::info!(head = %p.0, attempts = p.1.attempts, merges = p.1.merges, "archive: pushed");
                    }
                    for p in &r.commit.problems {
                        tracing::error!("archive: {p}");
                    }
                    if last_error.take().is_some() {
                        tracing::info!("archive: works again");
                    }
                    retry = None;
                    next_run = scheduled;
                }
                Err(e) => {
                    let delay = retry.map_or(self.retry, |r| r.saturating_mul(2));
                    let msg = e.to_string();
                    if last_error.as_deref() == Some(msg.as_str()) {
                        tracing::debug!("archive failed again: {msg}");
                    } else {
                        tracing::error!("archive failed; the commits are kept and retried in {delay:?}: {msg}");
                    }
                    last_error = Some(msg);
                    retry = Some(delay);
                    next_run = scheduled.min(Instant::now() + delay);
                }
            }
        }
    }
}
