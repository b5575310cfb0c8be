//! The memory loops: the harvests on `harvest.schedule` (hourly), the archive on
//! `archive.schedule` (every 6 hours: harvest, extract, commit, push). A failed run
//! (or commits left unpushed when the daemon starts) is retried after
//! `archive.retry`, doubling, but never later than the next scheduled run. Both run
//! on a thread of their own: git and the tree are synchronous. On stop, a run in
//! progress is told to end at its next step and waited for [`STOP_WAIT`] at most: a
//! git request to a remote that never answers cannot be interrupted (libgit2 has no
//! timeout clawboard can set), and the runtime does not wait for that thread, so the
//! daemon still exits.

use std::sync::Arc;
use std::time::Duration;

use clawboard_archive::{Archive, ArchiveConfig, HarvestSettings};
use clawboard_core::backoff::Backoff;
use tokio::time::Instant;

use super::Parts;
use super::jobs::{Clock, JobResult, Runner, Scheduled, Worker};

/// The longest wait before a failed archive run is tried again.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);

/// How long a stopping daemon waits for an archive run to end at its next step.
/// The daemon's whole stop stays under the 5 s docs/ARCHIVE.md promises: the rest
/// of it (the store's checkpoint, the journal) takes well under a second.
pub const STOP_WAIT: Duration = Duration::from_secs(3);

/// The memory loops, when `[archive]` is on.
pub fn install(jobs: &mut Runner, p: &Parts) {
    let (true, Some(node)) = (p.settings.archive.enabled, p.node) else { return };
    let a = &p.settings.archive;
    let archive = Archive::new(p.store.clone(), a.settings.clone(), node.to_owned());
    jobs.worker("archive", Memory::new(archive, a, p.clock));
}

pub struct Memory {
    archive: Arc<Archive>,
    /// Resolves when the thread of the run in progress (or the last one) ends.
    finished: Option<tokio::sync::oneshot::Receiver<()>>,
    harvest: HarvestSettings,
    harvest_due: Scheduled,
    archive_due: Scheduled,
    /// The wait before a failed run is tried again: `archive.retry`, doubling.
    retry: Backoff,
    /// Runs that failed in a row; and when the next run is due.
    failures: u32,
    next_run: Instant,
    /// Whether the round that is due archives too (or only harvests).
    archive_now: bool,
}

impl Memory {
    pub fn new(archive: Archive, settings: &ArchiveConfig, clock: Clock) -> Memory {
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
            finished: None,
            harvest: settings.harvest.clone(),
            harvest_due: Scheduled::new(settings.harvest_schedule.clone(), clock),
            archive_due,
            retry: Backoff::new(settings.retry, MAX_RETRY_WAIT.max(settings.retry)),
            failures: 0,
            archive_now: false,
        };
        match m.archive.status() {
            Ok(st) if st.pending > 0 || st.file.last_error.is_some() => {
                let delay = m.retry.delay(0);
                tracing::info!(pending = st.pending, "archive: the last run did not finish; retrying in {delay:?}");
                m.failures = 1;
                m.next_run = m.next_run.min(Instant::now() + delay);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("archive: cannot read its status: {e}"),
        }
        m
    }

    /// Runs `f` on a thread of its own (git and the tree are synchronous). Not on the
    /// runtime's blocking pool: the runtime's shutdown would wait for a git request
    /// that never ends; [`Worker::stop`] waits for it instead, [`STOP_WAIT`] at most.
    async fn blocking<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Archive) -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        let archive = self.archive.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (finished, finished_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new().name("archive".into()).spawn(move || {
            // Dropped when the thread ends, however it ends: `stop` wakes.
            let _finished = finished;
            // The receiver is gone only when the daemon stopped waiting for the run.
            let _ = tx.send(f(&archive));
        })?;
        self.finished = Some(finished_rx);
        Ok(rx.await?)
    }

    /// Harvests on the archive's thread. The outer error: the thread could not
    /// run; the inner one: the harvest failed.
    async fn harvest(&mut self) -> anyhow::Result<anyhow::Result<()>> {
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
            Err(e) => return Ok(Err(anyhow::anyhow!("harvest failed: {e}"))),
        }
        Ok(Ok(()))
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
    /// `archive.retry`, doubling (up to an hour), but never later than the next
    /// scheduled run. A failed harvest does not keep the archive from running; it is the
    /// round's error (counted and logged once by the job runner) if the archive's is not.
    async fn work(&mut self) -> JobResult {
        let harvested = self.harvest().await?;
        if !self.archive_now {
            return Ok(harvested?);
        }
        let outcome = self.blocking(|a| a.run(chrono::Utc::now())).await?;
        self.archive_due.advance();
        let scheduled = self.archive_due.instant().unwrap_or_else(|| Instant::now() + Duration::from_secs(300));
        match outcome {
            Ok(r) => {
                log_commit(&r);
                if let Some(p) = r.push.as_ref().and_then(|p| p.pushed.as_ref().map(|id| (id, p))) {
                    tracing::info!(head = %p.0, attempts = p.1.attempts, merges = p.1.merges, "archive: pushed");
                }
                self.failures = 0;
                self.next_run = scheduled;
                Ok(harvested?)
            }
            Err(e) => {
                let delay = self.retry.delay(self.failures);
                tracing::debug!("archive: retrying in {delay:?}");
                self.failures = self.failures.saturating_add(1);
                self.next_run = scheduled.min(Instant::now() + delay);
                match e.report() {
                    // The error names the commit, and that its push is retried.
                    Some(r) => {
                        log_commit(r);
                        Err(anyhow::anyhow!("archive failed: {e}").into())
                    }
                    None => Err(anyhow::anyhow!("archive failed; the commits are kept and retried: {e}").into()),
                }
            }
        }
    }

    /// A run in progress is told to end at its next step, and waited for
    /// [`STOP_WAIT`] at most (one in a git request that never returns is left behind:
    /// its commits stay and are pushed after the next start).
    async fn stop(&mut self) {
        self.archive.stop();
        let Some(finished) = self.finished.take() else { return };
        // The sender is only ever dropped (when the thread ends): Err is the end.
        if tokio::time::timeout(STOP_WAIT, finished).await.is_err() {
            tracing::warn!(
                "archive: a run is still waiting for the remote after {STOP_WAIT:?}; stopping without it \
                 (its commits stay and are pushed after the next start)"
            );
        }
    }
}

/// The run's commit, if it made one, and the files it could not archive.
fn log_commit(r: &clawboard_archive::RunReport) {
    if let Some(id) = &r.commit.commit {
        let what = r.commit.summary();
        tracing::info!(commit = %id, changed = r.commit.changed, ms = r.commit.elapsed_ms, "archive: committed ({what})");
    }
    for p in &r.commit.problems {
        tracing::error!("archive: {p}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::jobs::testing::{at, setup, until};
    use clawboard_sync::Schedule;

    #[tokio::test(start_paused = true)]
    async fn a_failed_archive_is_retried_after_doubling_delays_but_never_after_its_next_scheduled_run() {
        let mut s = setup();
        // Nothing listens there: every push fails.
        let remote = "http://127.0.0.1:9/memory.git".to_owned();
        let settings = ArchiveConfig {
            enabled: true,
            schedule: Schedule::parse("archive.schedule", "0 * * * * *").unwrap(),
            retry: Duration::from_secs(1),
            settings: clawboard_archive::ArchiveSettings {
                remote: Some(remote),
                push_attempts: 1,
                ..clawboard_archive::ArchiveSettings::default()
            },
            harvest_schedule: Schedule::parse("harvest.schedule", "0 0 1 1 *").unwrap(),
            harvest: HarvestSettings::default(),
        };
        std::fs::create_dir_all(s.root().join("reports/daily")).unwrap();
        std::fs::write(s.root().join("reports/daily/2026-01-01.md"), "# a day\n").unwrap();
        let archive = Archive::new(s.store.clone(), settings.settings.clone(), "n1".to_owned());
        let clock = Clock::tokio(at("2026-01-01T00:00:30Z"));
        s.runner.worker("archive", Memory::new(archive, &settings, clock));
        // The run at 00:01:00 (30 s in) fails; retries 1, 2, 4, 8 and 16 s later; the
        // next would be 32 s later, after the run the schedule has at 00:02:00.
        let mut t = 0.0;
        for (n, at) in [30.0, 31.0, 33.0, 37.0, 45.0, 61.0, 90.0].into_iter().enumerate() {
            tokio::time::sleep(Duration::from_secs_f64(at - 0.5 - t)).await;
            assert_eq!(s.rounds("archive"), n as u64, "no run before {at} s");
            tokio::time::sleep(Duration::from_secs(1)).await;
            t = at + 0.5;
            until(&format!("the run at {at} s"), || s.rounds("archive") == n as u64 + 1).await;
            assert!(s.failing("archive"));
        }
        s.stop().await;
    }
}
