//! The push loop: on the cron schedule (default every 5 minutes), at once when a
//! task reaches `completed` or `failed`, and once at start. A run with nothing in
//! the journal since the push cursor sends no request. A failure is logged once
//! (the same error again only at debug level) and retried on the next run.

use std::sync::Arc;
use std::time::Duration;

use clawboard_sync::{AnyRemote, Pusher, Remote};
use tokio::sync::Notify;

use super::recorder::Flusher;

pub struct SyncLoop {
    pub pusher: Arc<Pusher<AnyRemote>>,
    pub task_ended: Arc<Notify>,
    pub flusher: Flusher,
}

impl SyncLoop {
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
        let settings = self.pusher.settings().clone();
        tracing::info!(remote = %self.pusher.remote().describe(), schedule = %settings.schedule.text, "sync: pushing");
        let mut last_error: Option<String> = None;
        let mut first = true;
        loop {
            if !first {
                let wait = settings.schedule.until_next();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.task_ended.notified(), if settings.push_on_task_end => {
                        tracing::debug!("sync: a task ended; pushing now");
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
            match result {
                Ok(r) => {
                    if last_error.take().is_some() {
                        tracing::info!("sync: pushing works again");
                    }
                    if r.uploaded + r.deleted > 0 {
                        tracing::info!(
                            uploaded = r.uploaded,
                            deleted = r.deleted,
                            bytes = r.bytes,
                            ms = r.elapsed_ms,
                            "sync: pushed"
                        );
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() == Some(msg.as_str()) {
                        tracing::debug!("sync: push failed again: {msg}");
                    } else {
                        tracing::error!(
                            "sync: push failed; the changes stay pending and are pushed on the next run: {msg}"
                        );
                    }
                    last_error = Some(msg);
                }
            }
        }
        Ok(())
    }
}
