//! Writes the evolution reports on the `[reports]` schedules: each run writes the
//! period that contains the day before (so a run just after midnight, Monday or
//! the 1st writes the day, week or month that just ended).

use clawboard_core::Store;
use clawboard_roles::reports::{self, Kind, Period};
use clawboard_sync::Schedule;
use tokio::sync::watch;

use crate::config::review::ReportsResolved;

pub struct ReportLoop {
    pub store: Store,
    pub config: ReportsResolved,
}

impl ReportLoop {
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
        let plan: [(Kind, &Schedule); 3] = [
            (Kind::Daily, &self.config.daily),
            (Kind::Weekly, &self.config.weekly),
            (Kind::Monthly, &self.config.monthly),
        ];
        loop {
            let (kind, wait) = plan
                .iter()
                .map(|(k, s)| (*k, s.until_next()))
                .min_by_key(|(_, w)| *w)
                .unwrap_or((Kind::Daily, std::time::Duration::from_secs(3600)));
            tokio::select! {
                _ = clawboard_roles::runner::fired(&mut stop) => return Ok(()),
                _ = tokio::time::sleep(wait) => {}
            }
            let now = chrono::Utc::now();
            let period = Period::containing(kind, (now - chrono::Duration::days(1)).date_naive());
            let store = self.store.clone();
            match tokio::task::spawn_blocking(move || reports::write(&store, period, now)).await? {
                Ok(rel) => tracing::info!(report = %rel, "report written"),
                Err(e) => tracing::warn!("the {} report for {} failed: {e}", kind.name(), period.name()),
            }
            // Past the minute of the schedule, so it does not fire twice.
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}
