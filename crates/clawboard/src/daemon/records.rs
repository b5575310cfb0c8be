//! The GM's records and the evolution reports, kept by the daemon:
//! - `gm/pm-performance.json` is recomputed from `tasks/` when tasks ended here (checked
//!   every 5 s) and every 5 minutes (for tasks other nodes ended); it is written only
//!   when it changed.
//! - Each `[reports]` schedule writes the period that contains the day before (a run
//!   just after midnight, Monday or the 1st writes the day, week or month that just
//!   ended). Every schedule keeps its own next time, so two due in the same minute
//!   both run.
//!
//! A failure is logged and the loop goes on.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clawboard_core::Store;
use clawboard_roles::reports::{self, Kind, Period};
use clawboard_sync::Schedule;
use tokio::sync::watch;

use super::dispatch::Dispatcher;
use crate::config::review::ReportsResolved;

const GM_CHECK: Duration = Duration::from_secs(5);
const GM_REFRESH: Duration = Duration::from_secs(300);

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

    fn ended(&self) -> u64 {
        self.dispatcher.completed.load(Ordering::SeqCst) + self.dispatcher.failed.load(Ordering::SeqCst)
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
        let mut seen_ended = u64::MAX; // refresh once at start
        let mut last_refresh = tokio::time::Instant::now();
        loop {
            let ended = self.ended();
            if ended != seen_ended || last_refresh.elapsed() >= GM_REFRESH {
                seen_ended = ended;
                last_refresh = tokio::time::Instant::now();
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
            let until_report =
                next.iter().flatten().min().and_then(|t| (*t - Utc::now()).to_std().ok()).unwrap_or(GM_CHECK);
            tokio::select! {
                _ = clawboard_roles::runner::fired(&mut stop) => {
                    // Count what ended since the last check before the daemon stops.
                    if self.ended() != seen_ended {
                        let _ = tokio::task::spawn_blocking(self.refresh_gm()).await;
                    }
                    return Ok(());
                }
                _ = tokio::time::sleep(until_report.min(GM_CHECK)) => {}
            }
        }
    }
}
