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
use tokio::time::Instant;

use super::jobs::{Clock, JobResult, Scheduled, Worker};
use crate::config::ArchiveResolved;

pub struct Memory {
    archive: Arc<Archive>,
    harvest: HarvestSettings,
    harvest_due: Scheduled,
    archive_due: Scheduled,
    retry: Duration,
    /// The delay of the last retry, while runs fail; and when the next run is due.
    retrying: Option<Duration>,
    next_run: Instant,
    /// Whether the round that is due archives too (or only harvests).
    archive_now: bool,
}

impl Memory {
    pub fn new(archive: Archive, settings: &ArchiveResolved, clock: Clock) -> Memory {
        let archive_due = Scheduled::new(settings.schedule.clone(), clock);
        let remote = archive.settings().remote.as_deref().map(clawboard_archive::repo::redact);
        tracing::info!(
            schedule = %settings.schedule.text,
            remote = remote.as_deref().unwrap_or("none (local commits)"),
            "archive: memory branch {}",
            archive.settings().branch
        );
        let mut m = Memory {
            next_run: archive_due.instant().unwrap_or_else(Instant::now),
            archive: Arc::new(archive),
            harvest: settings.harvest.clone(),
            harvest_due: Scheduled::new(settings.harvest_schedule.clone(), clock),
            archive_due,
            retry: settings.retry,
            retrying: None,
            archive_now: false,
        };
        match m.archive.status() {
            Ok(st) if st.pending > 0 || st.file.last_error.is_some() => {
                tracing::info!(pending = st.pending, "archive: the last run did not finish; retrying in {:?}", m.retry);
                m.retrying = Some(m.retry);
                m.next_run = m.next_run.min(Instant::now() + m.retry);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("archive: cannot read its status: {e}"),
        }
        m
    }

    /// Runs `f` on a blocking thread (git and the tree are synchronous).
    async fn blocking<T: Send + 'static>(&self, f: impl FnOnce(&Archive) -> T + Send + 'static) -> anyhow::Result<T> {
        let archive = self.archive.clone();
        Ok(tokio::task::spawn_blocking(move || f(&archive)).await?)
    }

    async fn harvest(&self) -> anyhow::Result<()> {
        let settings = self.harvest.clone();
        match self.blocking(move |a| a.harvest(chrono::Utc::now(), &settings, None)).await? {
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
        Ok(())
    }
}

impl Worker for Memory {
    async fn wait_for_work(&mut self) {
        self.archive_now = tokio::select! {
            () = tokio::time::sleep_until(self.next_run) => true,
            () = self.harvest_due.wait() => false,
        };
        // Every round harvests: the harvest's next time moves on if it has come.
        self.harvest_due.advance();
    }

    /// Harvests; archives too when that is due. A failed archive is retried after
    /// `archive.retry`, doubling, but never later than the next scheduled run.
    async fn work(&mut self) -> JobResult {
        self.harvest().await?;
        if !self.archive_now {
            return Ok(());
        }
        let outcome = self.blocking(|a| a.run(chrono::Utc::now())).await?;
        self.archive_due.advance();
        let scheduled = self.archive_due.instant().unwrap_or_else(|| Instant::now() + Duration::from_secs(300));
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
                self.retrying = None;
                self.next_run = scheduled;
                Ok(())
            }
            Err(e) => {
                let delay = self.retrying.map_or(self.retry, |r| r.saturating_mul(2));
                tracing::debug!("archive: retrying in {delay:?}");
                self.retrying = Some(delay);
                self.next_run = scheduled.min(Instant::now() + delay);
                Err(anyhow::anyhow!("archive failed; the commits are kept and retried: {e}").into())
            }
        }
    }

    /// A run in progress is told to end at its next step, and is not waited for.
    async fn stop(&mut self) {
        self.archive.stop_flag().store(true, Ordering::SeqCst);
    }
}
