//! The sync workers. `push` sends this node's changes: once at start, on the cron
//! schedule (default every 5 minutes) and at once when a task reaches `completed`
//! or `failed`; once a day it deletes this node's expired change-log segments.
//! `pull` applies the other nodes' changes: once at start and on the schedule, and
//! lists only the change-log segments after this node's cursors. Neither starts
//! before the cluster checked this node's claims. A run with nothing new sends no
//! push request. A failure is retried on the next run (the runner logs it once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clawboard_core::Store;
use clawboard_sync::{AnyRemote, Remote};
use tokio::sync::{Notify, watch};

use super::Parts;
use super::cluster::{AcceptedClaims, Beat, Claims, Membership};
use super::jobs::{JobResult, Runner, Scheduled, Worker};
use super::recorder::Flusher;

/// With `[sync]` on: the cluster's jobs (its claims, the heartbeat), push and
/// pull; the cluster is returned for intake and lanes, and claimed tasks resume
/// once it confirmed this node still holds them. Without it, the `active` tasks
/// are queued at once.
pub async fn install(
    jobs: &mut Runner,
    p: &Parts<'_>,
    pulled: Store,
    flusher: Flusher,
    active: Vec<String>,
) -> anyhow::Result<Option<Arc<Membership>>> {
    let Some(node) = p.state.node.clone() else {
        for id in active {
            p.dispatcher.enqueue(id);
        }
        return Ok(None);
    };
    let (s, root) = (p.settings, &p.state.root);
    let remote = AnyRemote::open(&s.sync.backend, root).await.map_err(crate::cli::sync_error)?;
    let client =
        clawboard_sync::Client::open(remote, root, s.sync.clone(), node, pulled).map_err(crate::cli::sync_error)?;
    let c = Membership::new(client.cluster, client.pull.clone(), p.dispatcher.clone(), p.store.clone());
    jobs.worker("claims", Claims::new(c.clone()));
    jobs.worker("accepted-claims", AcceptedClaims::new(c.clone()));
    jobs.worker("heartbeat", Beat::new(c.clone()));
    let ended = p.dispatcher.task_ended.clone();
    jobs.worker("push", PushJob::new(client.push, ended, flusher, c.checked.subscribe(), p.clock, c.steps.clone()));
    // The push keeps its own cursor; compaction honours it.
    p.state.jobs.add_cursor(clawboard_sync::PUSH_CURSOR);
    if s.sync.pull {
        let due = p.dispatcher.records_due.clone();
        jobs.worker("pull", PullJob::new(client.pull, due, c.checked.subscribe(), p.clock));
    }
    Ok(Some(c))
}

/// Waits until the cluster checked this node's claims (nothing is pushed or pulled before).
async fn checked(checked: &mut watch::Receiver<bool>) {
    if checked.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Steps waiting for their records to be pushed (`sync.push_each_step`): each
/// asks for a push and waits for one that started after it asked to send
/// everything. A push that fails is retried; the steps wait meanwhile.
#[derive(Debug)]
pub struct StepPushes {
    wake: Notify,
    /// Push rounds started.
    started: AtomicU64,
    /// The newest round that ended with everything sent.
    done: watch::Sender<u64>,
}

impl Default for StepPushes {
    fn default() -> Self {
        StepPushes { wake: Notify::new(), started: AtomicU64::new(0), done: watch::channel(0).0 }
    }
}

impl StepPushes {
    /// Resolves once a push that started after this call sent everything.
    pub async fn pushed(&self) {
        let after = self.started.load(Ordering::SeqCst);
        let mut done = self.done.subscribe();
        self.wake.notify_one();
        // The sender lives as long as `self`.
        let _ = done.wait_for(|d| *d > after).await;
    }
}

pub struct PushJob {
    push: Arc<clawboard_sync::Push<AnyRemote>>,
    task_ended: Arc<Notify>,
    steps: Arc<StepPushes>,
    flusher: Flusher,
    checked: watch::Receiver<bool>,
    due: Scheduled,
    first: bool,
    last_expiry: Option<tokio::time::Instant>,
}

impl PushJob {
    pub fn new(
        push: Arc<clawboard_sync::Push<AnyRemote>>,
        task_ended: Arc<Notify>,
        flusher: Flusher,
        checked: watch::Receiver<bool>,
        clock: super::jobs::Clock,
        steps: Arc<StepPushes>,
    ) -> PushJob {
        let settings = push.sync().settings();
        tracing::info!(remote = %push.sync().remote().describe(), schedule = %settings.schedule.text, "sync: pushing and pulling");
        let due = Scheduled::new(settings.schedule.clone(), clock);
        PushJob { push, task_ended, steps, flusher, checked, due, first: true, last_expiry: None }
    }
}

impl PushJob {
    /// Pushes. A push refused because a claim is not confirmed under this
    /// node's lease yet (a task taken in before the first heartbeat after a
    /// start landed, or waiting for its renewal) is tried again each time the
    /// lease changes, for up to one lease period, before it counts as a failure.
    async fn push_confirmed(&self) -> clawboard_sync::Result<clawboard_sync::PushReport> {
        let sync = self.push.sync();
        let mut changed = sync.lease.subscribe();
        let until = tokio::time::Instant::now() + sync.settings().lease;
        loop {
            match self.push.push().await {
                Err(clawboard_sync::Error::Unconfirmed { task }) if tokio::time::Instant::now() < until => {
                    tracing::debug!(task, "sync: a claim is not confirmed yet; pushing once it is");
                    match tokio::time::timeout_at(until, changed.changed()).await {
                        Ok(Ok(())) => {}
                        // The lease is gone (stopping), or did not change in time: one last try.
                        _ => return self.push.push().await,
                    }
                }
                r => return r,
            }
        }
    }
}

impl Worker for PushJob {
    async fn wait_for_work(&mut self) {
        if std::mem::take(&mut self.first) {
            return checked(&mut self.checked).await;
        }
        let on_task_end = self.push.sync().settings().push_on_task_end;
        tokio::select! {
            () = self.due.wait() => self.due.advance(),
            () = self.task_ended.notified(), if on_task_end => tracing::debug!("sync: a task ended; pushing now"),
            () = self.steps.wake.notified() => tracing::debug!("sync: a step ended; pushing now"),
        }
    }

    async fn work(&mut self) -> JobResult {
        let round = self.steps.started.fetch_add(1, Ordering::SeqCst) + 1;
        // Every write made so far (a task's last files included) into the journal first.
        let flusher = self.flusher.clone();
        let flushed = tokio::task::spawn_blocking(move || flusher.flush(Duration::from_secs(10))).await?;
        if !flushed {
            tracing::warn!("sync: the journal did not catch up within 10 s; pushing what it has");
        }
        // Dropped at the stop: an interrupted push resumes from its cursor; what landed is
        // recorded, or known by its in-flight note when the stop came between the two.
        let r = self
            .push_confirmed()
            .await
            .map_err(|e| anyhow::anyhow!("sync: push failed; retried on the next run: {e}"))?;
        self.steps.done.send_modify(|d| *d = (*d).max(round));
        if r.uploaded + r.deleted > 0 {
            tracing::info!(
                uploaded = r.uploaded,
                deleted = r.deleted,
                bytes = r.bytes,
                ms = r.elapsed_ms,
                "sync: pushed"
            );
        }
        if self.last_expiry.is_none_or(|t| t.elapsed() > Duration::from_secs(24 * 3600)) {
            self.last_expiry = Some(tokio::time::Instant::now());
            match self.push.expire_log().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(segments = n, "sync: expired old change-log segments"),
                Err(e) => tracing::warn!("sync: cannot expire old change-log segments: {e}"),
            }
        }
        Ok(())
    }
}

pub struct PullJob {
    pull: Arc<clawboard_sync::Pull<AnyRemote>>,
    /// Poked when a pull brought files: tasks other nodes ended count in the GM's records.
    records_due: Arc<Notify>,
    checked: watch::Receiver<bool>,
    due: Scheduled,
    first: bool,
    /// The last refusal escalated (a refusal is escalated once while it repeats).
    refused: Option<String>,
}

impl PullJob {
    pub fn new(
        pull: Arc<clawboard_sync::Pull<AnyRemote>>,
        records_due: Arc<Notify>,
        checked: watch::Receiver<bool>,
        clock: super::jobs::Clock,
    ) -> PullJob {
        let due = Scheduled::new(pull.sync().settings().schedule.clone(), clock);
        PullJob { pull, records_due, checked, due, first: true, refused: None }
    }
}

impl Worker for PullJob {
    async fn wait_for_work(&mut self) {
        if std::mem::take(&mut self.first) {
            return checked(&mut self.checked).await;
        }
        self.due.wait().await;
        self.due.advance();
    }

    async fn work(&mut self) -> JobResult {
        let result = self.pull.pull(false).await;
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                if let clawboard_sync::Error::Refused { reason } = &e
                    && self.refused.as_deref() != Some(reason.as_str())
                {
                    self.refused = Some(reason.clone());
                    let issue = format!("sync pull refused on node {}: {reason}", self.pull.sync().node());
                    if let Err(e) = self.pull.raise(&issue).await {
                        tracing::error!("sync: cannot raise the escalation: {e}");
                    }
                }
                return Err(anyhow::anyhow!("sync: pull failed; retried on the next run: {e}").into());
            }
        };
        self.refused = None;
        if r.applied + r.deleted > 0 {
            self.records_due.notify_one();
            tracing::info!(
                applied = r.applied,
                deleted = r.deleted,
                segments = r.segments,
                conflicts = r.conflicts.len(),
                "sync: pulled"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::jobs::Clock;
    use crate::daemon::jobs::testing::{at, client, dispatcher, setup, until};

    #[tokio::test(start_paused = true)]
    async fn push_waits_for_the_claim_check_then_runs_at_start_on_task_end_and_on_schedule_and_pull_brings_it() {
        let bucket = tempfile::tempdir().unwrap();
        let mut a = setup();
        let mut b = setup();
        let every_minute = "schedule = \"0 * * * * *\"\n";
        let (pa, pb) =
            (client(&a, "a", bucket.path(), every_minute).push, client(&b, "b", bucket.path(), every_minute).pull);
        let clock = Clock::tokio(at("2026-01-01T00:00:30Z"));
        let (checked, checked_rx) = watch::channel(false);
        let ended = Arc::new(Notify::new());
        let push = PushJob::new(pa, ended.clone(), Flusher::answering(), checked_rx.clone(), clock, Arc::default());
        a.runner.worker("push", push);
        let records_due = dispatcher(&b).records_due.clone();
        b.runner.worker("pull", PullJob::new(pb, records_due.clone(), checked_rx, clock));
        std::fs::write(a.root().join("shared/note.md"), "from a\n").unwrap();
        a.append(&["shared/note.md"]);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!((a.rounds("push"), b.rounds("pull")), (0, 0), "nothing before the claims are checked");
        checked.send_replace(true);
        until("the first push", || a.rounds("push") == 1).await;
        until("the first pull", || b.rounds("pull") == 1).await;
        // The pull may have run before the push landed: the scheduled one brings it.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(b.rounds("pull"), 1, "the next pull is the schedule's, at 00:01:00");
        std::fs::write(a.root().join("shared/late.md"), "after a task\n").unwrap();
        a.append(&["shared/late.md"]);
        ended.notify_one();
        tokio::time::sleep(Duration::from_millis(10)).await;
        until("the push on task end", || a.rounds("push") == 2).await;
        tokio::time::sleep(Duration::from_secs(20)).await;
        until("the scheduled pull", || b.rounds("pull") == 2).await;
        assert!(!a.failing("push") && !b.failing("pull"));
        assert_eq!(std::fs::read_to_string(b.root().join("shared/note.md")).unwrap(), "from a\n");
        assert_eq!(std::fs::read_to_string(b.root().join("shared/late.md")).unwrap(), "after a task\n");
        until("the scheduled push", || a.rounds("push") == 3).await;
        a.stop().await;
        b.stop().await;
    }
}
