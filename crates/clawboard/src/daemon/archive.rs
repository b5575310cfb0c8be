//! The memory loops: the harvests on `harvest.schedule` (hourly), the archive on
//! `archive.schedule` (every 6 hours: harvest, extract, commit, push). A failed run
//! is retried after `archive.retry`, doubling, but never later than the next
//! scheduled run. Both run on blocking threads: git and the tree are synchronous.

use std::sync::Arc;
use std::time::Duration;

use clawboard_archive::{Archive, HarvestSettings};
use clawboard_sync::Schedule;
use tokio::sync::watch;

pub struct ArchiveLoop {
    pub archive: Arc<Archive>,
    pub harvest: HarvestSettings,
    pub schedule: Schedule,
    pub harvest_schedule: Schedule,
    pub retry: Duration,
}

impl ArchiveLoop {
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let remote = self.archive.settings().remote.as_deref().map(clawboard_archive::repo::redact);
        tracing::info!(
            schedule = %self.schedule.text,
            remote = remote.as_deref().unwrap_or("none (local commits)"),
            "archive: memory branch {}",
            self.archive.settings().branch
        );
        // After a failure: the next retry's delay and when it is due.
        let mut retry: Option<(Duration, tokio::time::Instant)> = None;
        let mut last_error: Option<String> = None;
        loop {
            let scheduled = self.schedule.until_next();
            let archive_in = retry
                .map_or(scheduled, |(_, at)| at.saturating_duration_since(tokio::time::Instant::now()).min(scheduled));
            let archive_now = tokio::select! {
                _ = tokio::time::sleep(archive_in) => true,
                _ = tokio::time::sleep(self.harvest_schedule.until_next()) => false,
                _ = clawboard_roles::runner::fired(&mut stop) => return Ok(()),
            };
            let (archive, settings) = (self.archive.clone(), self.harvest.clone());
            let harvest =
                tokio::task::spawn_blocking(move || archive.harvest(chrono::Utc::now(), &settings, None)).await?;
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
            let archive = self.archive.clone();
            let outcome = tokio::task::spawn_blocking(move || archive.run(chrono::Utc::now())).await?;
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
                }
                Err(e) => {
                    let next = retry.map_or(self.retry, |(r, _)| r.saturating_mul(2));
                    let msg = e.to_string();
                    if last_error.as_deref() == Some(msg.as_str()) {
                        tracing::debug!("archive failed again: {msg}");
                    } else {
                        tracing::error!("archive failed; the commits are kept and retried in {next:?}: {msg}");
                    }
                    last_error = Some(msg);
                    retry = Some((next, tokio::time::Instant::now() + next));
                }
            }
        }
    }
}
