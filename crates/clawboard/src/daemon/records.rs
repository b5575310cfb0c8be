//! The GM's records and the evolution reports, kept by the daemon:
//! - `gm/pm-performance.json` is recomputed from `tasks/` at start, when a task ends
//!   here, and when a pull brought files (tasks other nodes ended), at most once per
//!   5 s; it is written only when it changed. Nothing here wakes on a timer while
//!   nothing happens.
//! - Each `[reports]` schedule writes the period that contains the day before (a run
//!   just after midnight, Monday or the 1st writes the day, week or month that just
//!   ended). Every schedule keeps its own next time, so two due in the same minute
//!   both run.
//!
//! A failure is logged and the worker goes on.

use std::sync::Arc;
use std::time::Duration;

use clawboard_core::Store;
use clawboard_records::reports::{self, Kind, Period};
use tokio::time::Instant;

use super::Parts;
use super::dispatch::Dispatcher;
use super::jobs::{Clock, JobResult, Runner, Scheduled, Worker, sleep_until_some};
use crate::config::retention::RetentionResolved;
use crate::config::review::ReportsResolved;

/// The least time between two recomputations of the GM's records (a burst of ended
/// tasks is counted once).
const GM_SPACING: Duration = Duration::from_secs(5);

/// The report files, the GM's records and the journal's compaction.
pub fn install(jobs: &mut Runner, p: &Parts) {
    let s = p.settings;
    let records = Records::new(p.store.clone(), p.dispatcher.clone(), &s.review.reports, s.retention.clone(), p.clock);
    jobs.worker("records", records);
}

pub struct Records {
    store: Store,
    dispatcher: Arc<Dispatcher>,
    clock: Clock,
    /// The report kinds on, each with its next time.
    reports: Vec<(Kind, Scheduled)>,
    /// When the GM's records are due (once at start; then when poked), and the
    /// earliest time the next recomputation may run.
    gm_due: Option<Instant>,
    gm_earliest: Instant,
    /// Where the retention policy is: the reports say which counts it cut short.
    retention: RetentionResolved,
    /// What the last recomputation read of each task (see `EndedCache`).
    gm_cache: Arc<std::sync::Mutex<clawboard_records::gm::EndedCache>>,
}

impl Records {
    pub fn new(
        store: Store,
        dispatcher: Arc<Dispatcher>,
        reports: &ReportsResolved,
        retention: RetentionResolved,
        clock: Clock,
    ) -> Records {
        let reports = if reports.enabled {
            vec![
                (Kind::Daily, Scheduled::new(reports.daily.clone(), clock)),
                (Kind::Weekly, Scheduled::new(reports.weekly.clone(), clock)),
                (Kind::Monthly, Scheduled::new(reports.monthly.clone(), clock)),
            ]
        } else {
            Vec::new()
        };
        let now = Instant::now();
        Records {
            store,
            dispatcher,
            clock,
            reports,
            gm_due: Some(now),
            gm_earliest: now,
            retention,
            gm_cache: Arc::default(),
        }
    }

    /// Updates `gm/pm-performance.json`; a failure (or a panic) is returned.
    async fn refresh_gm(&mut self) -> anyhow::Result<()> {
        self.gm_due = None;
        self.gm_earliest = Instant::now() + GM_SPACING;
        let store = self.store.clone();
        let engine = self.dispatcher.engine.clone();
        let cache = self.gm_cache.clone();
        let refresh = move || {
            let cfg = engine.roles();
            let pm_for = |t: &clawboard_core::formats::Task| cfg.lifecycle.pm_for_type.get(&t.kind).cloned();
            // Held by this thread alone: a poisoned cache (a panic mid-refresh) is started afresh.
            let mut cache = cache.lock().unwrap_or_else(|p| {
                let mut c = p.into_inner();
                *c = clawboard_records::gm::EndedCache::default();
                c
            });
            clawboard_records::gm::refresh_performance(&store, pm_for, &mut cache, || engine.stopping())
        };
        match tokio::task::spawn_blocking(refresh).await {
            Ok(Ok(Some(true))) => tracing::debug!("gm/pm-performance.json updated"),
            Ok(Ok(Some(false) | None)) => {}
            Ok(Err(e)) => anyhow::bail!("cannot update gm/pm-performance.json: {e}"),
            Err(e) => anyhow::bail!("the GM records update panicked: {e}"),
        }
        Ok(())
    }

    fn next(&self) -> Option<Instant> {
        self.reports.iter().filter_map(|(_, s)| s.instant()).chain(self.gm_due).min()
    }
}

impl Worker for Records {
    async fn wait_for_work(&mut self) {
        loop {
            tokio::select! {
                () = sleep_until_some(self.next()) => return,
                () = self.dispatcher.records_due.notified() => {
                    self.gm_due.get_or_insert(self.gm_earliest.max(Instant::now()));
                }
            }
        }
    }

    /// Every due record is tried; the round fails (counted and logged once by
    /// the job runner, and retried) naming what failed.
    async fn work(&mut self) -> JobResult {
        let mut failed = Vec::new();
        if self.gm_due.is_some_and(|t| t <= Instant::now())
            && let Err(e) = self.refresh_gm().await
        {
            failed.push(e.to_string());
        }
        let now = self.clock.now();
        for (kind, due) in &mut self.reports {
            if !due.is_due() {
                continue;
            }
            due.advance();
            let period = Period::containing(*kind, (now - chrono::Duration::days(1)).date_naive());
            let store = self.store.clone();
            let retention = self.retention.clone();
            match tokio::task::spawn_blocking(move || reports::write(&store, period, now, retention.kept())).await {
                Ok(Ok(rel)) => tracing::info!(report = %rel, "report written"),
                Ok(Err(e)) => failed.push(format!("the {} report for {} failed: {e}", kind.name(), period.name())),
                Err(e) => failed.push(format!("the {} report for {} panicked: {e}", kind.name(), period.name())),
            }
        }
        if failed.is_empty() { Ok(()) } else { Err(anyhow::anyhow!("{}", failed.join("; ")).into()) }
    }

    /// Counts what ended since the last run before the daemon stops.
    async fn stop(&mut self) {
        if self.gm_due.is_some()
            && let Err(e) = self.refresh_gm().await
        {
            tracing::warn!("at stop: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::jobs::testing::{at, setup, until};
    use clawboard_sync::Schedule;

    fn retention_off() -> RetentionResolved {
        RetentionResolved {
            enabled: false,
            schedule: Schedule::parse("r", "30 * * * *").unwrap(),
            file: None,
            beside_config: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn records_count_at_start_when_poked_at_most_every_5_s_and_write_reports_on_time() {
        let mut s = setup();
        let engine = Arc::new(clawboard_roles::Engine::new(
            s.store.clone(),
            clawboard_roles::RolesConfig::default(),
            clawboard_roles::Shutdown::never(),
        ));
        let dispatcher = Dispatcher::new(engine);
        let never = Schedule::parse("r", "0 0 1 1 *").unwrap();
        let reports = ReportsResolved {
            enabled: true,
            daily: Schedule::parse("r", "0 0 * * *").unwrap(),
            weekly: never.clone(),
            monthly: never,
        };
        let clock = Clock::tokio(at("2026-01-01T23:59:58Z"));
        s.runner.worker("records", Records::new(s.store.clone(), dispatcher.clone(), &reports, retention_off(), clock));
        until("the round at start", || s.rounds("records") == 1).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        until("the daily report at midnight", || s.rounds("records") == 2).await;
        assert!(s.root().join("reports/daily/2026-01-01.md").exists(), "the day that just ended");
        // Poked twice at 3 s, 2 s after the last recomputation: counted once, at 5 s.
        dispatcher.records_due.notify_one();
        dispatcher.records_due.notify_one();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(s.rounds("records"), 2);
        tokio::time::sleep(Duration::from_secs(1)).await;
        until("the recomputation", || s.rounds("records") == 3).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(s.rounds("records"), 3, "nothing wakes it while nothing happens");
        s.stop().await;
    }
}
