//! The sync loop: push, then pull, on the cron schedule (default every 5 minutes),
//! at once when a task reaches `completed` or `failed` (push), and once at start.
//! A run with nothing new sends no push request; a pull lists only the change-log
//! segments after this node's cursors. A failure is logged once (the same error
//! again only at debug level) and retried on the next run. Once a day this node's
//! expired change-log segments are deleted.

use std::sync::Arc;
use std::time::Duration;

use clawboard_sync::{AnyRemote, Pusher, Remote};
use tokio::sync::{Notify, watch};

use super::recorder::Flusher;

pub struct SyncLoop {
    pub pusher: Arc<Pusher<AnyRemote>>,
    pub task_ended: Arc<Notify>,
    /// Poked when a pull brought files: tasks other nodes ended count in the GM's records.
    pub records_due: Arc<Notify>,
    pub flusher: Flusher,
    /// True once the cluster checked this node's claims (nothing is pushed before).
    pub checked: watch::Receiver<bool>,
}

/// Logs an error once; the same one again at debug level.
fn report(last: &mut Option<String>, what: &str, result: Result<(), String>) {
    match result {
        Ok(()) => {
            if last.take().is_some() {
                tracing::info!("sync: {what} works again");
            }
        }
        Err(msg) => {
            if last.as_deref() == Some(msg.as_str()) {
                tracing::debug!("sync: {what} failed again: {msg}");
            } else {
                tracing::error!("sync: {what} failed; retried on the next run: {msg}");
            }
            *last = Some(msg);
        }
    }
}

impl SyncLoop {
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        tokio::select! {
            r = self.checked.wait_for(|c| *c) => { r?; }
            _ = clawboard_roles::runner::fired(&mut stop) => return Ok(()),
        }
        let settings = self.pusher.settings().clone();
        tracing::info!(remote = %self.pusher.remote().describe(), schedule = %settings.schedule.text, "sync: pushing and pulling");
        let mut push_error: Option<String> = None;
        let mut pull_error: Option<String> = None;
        let mut first = true;
        let mut last_expiry: Option<tokio::time::Instant> = None;
        loop {
            let mut pull = true;
            if !first {
                let wait = settings.schedule.until_next();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.task_ended.notified(), if settings.push_on_task_end => {
                        tracing::debug!("sync: a task ended; pushing now");
                        pull = false;
                    }
                    _ = clawboard_roles::runner::fired(&mut stop) => break,
                }
            }
            first = false;
            // Every write made so far (a task's last files included) into the journal first.
            let flusher = self.flusher.clone();
            let flushed = tokio::task::spawn_blocking(move || flusher.flush(Duration::from_secs(10))).await?;
            if !flushed {
                tracing::warn!("sync: the journal did not catch up within 10 s; pushing what it has");
            }
            let result = tokio::select! {
                r = self.pusher.push() => r,
                // An interrupted push resumes from its cursor; what landed is recorded.
                _ = clawboard_roles::runner::fired(&mut stop) => break,
            };
            if let Ok(r) = &result
                && r.uploaded + r.deleted > 0
            {
                tracing::info!(
                    uploaded = r.uploaded,
                    deleted = r.deleted,
                    bytes = r.bytes,
                    ms = r.elapsed_ms,
                    "sync: pushed"
                );
            }
            report(&mut push_error, "push", result.map(|_| ()).map_err(|e| e.to_string()));
            if pull && settings.pull {
                let result = tokio::select! {
                    r = self.pusher.pull(false) => r,
                    _ = clawboard_roles::runner::fired(&mut stop) => break,
                };
                if let Ok(r) = &result
                    && r.applied + r.deleted > 0
                {
                    self.records_due.notify_one();
                    tracing::info!(
                        applied = r.applied,
                        deleted = r.deleted,
                        segments = r.segments,
                        conflicts = r.conflicts.len(),
                        "sync: pulled"
                    );
                }
                if let Err(e @ clawboard_sync::Error::Refused { reason }) = &result
                    && pull_error.as_deref() != Some(e.to_string().as_str())
                {
                    let issue = format!("sync pull refused on node {}: {reason}", self.pusher.node());
                    if let Err(e) = self.pusher.raise(&issue).await {
                        tracing::error!("sync: cannot raise the escalation: {e}");
                    }
                }
                report(&mut pull_error, "pull", result.map(|_| ()).map_err(|e| e.to_string()));
            }
            if last_expiry.is_none_or(|t| t.elapsed() > Duration::from_secs(24 * 3600)) {
                last_expiry = Some(tokio::time::Instant::now());
                match self.pusher.expire_log().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(segments = n, "sync: expired old change-log segments"),
                    Err(e) => tracing::warn!("sync: cannot expire old change-log segments: {e}"),
                }
            }
        }
        Ok(())
    }
}
