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
//! A failure is logged and the loop goes on.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clawboard_core::Store;
use clawboard_roles::reports::{self, Kind, Period};
use clawboard_sync::Schedule;
use tokio::sync::watch;
use tokio::time::Instant;

use super::dispatch::Dispatcher;
use crate::config::review::ReportsResolved;

/// The least time between two recomputations of the GM's records (a burst of ended
/// tasks is counted once).
const GM_SPACING: Duration = Duration::from_secs(5);

pub struct RecordsLoop {
    pub store: Store,
    pub dispatcher: Arc<Dispatcher>,
    pub reports: ReportsResolved,
}

impl RecordsLoop {
    fn refresh_gm(&self) -> impl FnOnce() + Send + 'static {
        let store = self.store.clone();
        let engine = self.dispatcher.engine.clone();
        move || {
            let cfg = engine.config();
            let pm_for = |t: &clawboard_core::formats::Task| cfg.lifecycle.pm_for_type.get(&t.kind).cloned();
            match clawboard_roles::gm::refresh_performance(&store, pm_for) {
                Ok(true) => tracing::debug!("gm/pm-performance.json updated"),
                Ok(false) => {}
                Err(e) => tracing::warn!("cannot update gm/pm-performance.json: {e}"),
            }
        }
    }

    pub async fn run(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let now = Utc::now();
        let plan: Vec<(Kind, &Schedule)> = if self.reports.enabled {
            vec![
                (Kind::Daily, &self.reports.daily),
                (Kind::Weekly, &self.reports.weekly),
                (Kind::Monthly, &self.reports.monthly),
            ]
        } else {
            Vec::new()
        };
        let mut next: Vec<Option<DateTime<Utc>>> = plan.iter().map(|(_, s)| s.next_after(now)).collect();
        // Due once at start; then when poked, no sooner than GM_SPACING after the last run.
        let mut gm_due = Some(Instant::now());
        let mut gm_earliest = Instant::now();
        loop {
            if gm_due.is_some_and(|t| t <= Instant::now()) {
                gm_due = None;
                gm_earliest = Instant::now() + GM_SPACING;
                if let Err(e) = tokio::task::spawn_blocking(self.refresh_gm()).await {
                    tracing::error!("the GM records update panicked: {e}");
                }
            }
            let now = Utc::now();
            for (i, (kind, schedule)) in plan.iter().enumerate() {
                if next[i].is_none_or(|t| t > now) {
                    continue;
                }
                next[i] = schedule.next_after(now);
                let period = Period::containing(*kind, (now - chrono::Duration::days(1)).date_naive());
                let store = self.store.clone();
                match tokio::task::spawn_blocking(move || reports::write(&store, period, now)).await {
                    Ok(Ok(rel)) => tracing::info!(report = %rel, "report written"),
                    Ok(Err(e)) => tracing::warn!("the {} report for {} failed: {e}", kind.name(), period.name()),
                    Err(e) => tracing::error!("the {} report for {} panicked: {e}", kind.name(), period.name()),
                }
            }
            let report_at =
                next.iter().flatten().min().map(|t| Instant::now() + (*t - Utc::now()).to_std().unwrap_or_default());
            tokio::select! {
                _ = clawboard_roles::runner::fired(&mut stop) => {
                    // Count what ended since the last run before the daemon stops.
                    if gm_due.is_some() {
                        let _ = tokio::task::spawn_blocking(self.refresh_gm()).await;
                    }
                    return Ok(());
                }
                _ = super::sleep_until_some(report_at.into_iter().chain(gm_due).min()) => {}
                _ = self.dispatcher.records_due.notified() => {
                    gm_due.get_or_insert(gm_earliest.max(Instant::now()));
                }
            }
        }
    }
}
