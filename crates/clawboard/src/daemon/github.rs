//! The GitHub bridge on `github.schedule` (every 5 minutes): one run of
//! `clawboard_github::sync` a round, through the daemon's store, so the entries it
//! imports are journaled (and picked by their lane) like any other write. A failed
//! run (a refused token, a rate limit longer than `github.max_wait`, the network)
//! is logged once while it repeats and tried again at the next time; the token is
//! read at every run, so fixing or rotating it needs no restart. A comment skipped
//! (not an entry, say) is logged as a warning when it is first skipped, not at
//! every run.

use std::collections::BTreeSet;
use std::sync::Arc;

use clawboard_core::Store;
use clawboard_entries::Lanes;
use clawboard_github::{Api, Client, GithubSettings};

use super::Parts;
use super::jobs::{Clock, JobResult, Runner, Scheduled, Worker};

/// The bridge, when `[github]` is on; it reads the lanes of the config in force at each run.
pub fn install(jobs: &mut Runner, p: &Parts) -> anyhow::Result<()> {
    if !p.settings.github.enabled {
        return Ok(());
    }
    let engine = p.dispatcher.engine.clone();
    let lanes: LanesNow = Arc::new(move || engine.config().lanes.clone());
    jobs.worker("github", Github::open(p.store.clone(), lanes, p.settings.github.clone(), p.clock)?);
    Ok(())
}

/// The lanes in force now (the engine's config: a reload takes effect at the next run).
pub type LanesNow = Arc<dyn Fn() -> Arc<Lanes> + Send + Sync>;

pub struct Github<A: Api> {
    store: Store,
    lanes: LanesNow,
    settings: GithubSettings,
    api: A,
    due: Scheduled,
    clock: Clock,
    /// What the last run skipped, to warn of each once.
    skipped: BTreeSet<String>,
}

impl Github<Client> {
    /// The bridge of the configured repository. A token that cannot be read is
    /// logged now (every run fails until it is fixed), not a reason to stop.
    pub fn open(store: Store, lanes: LanesNow, settings: GithubSettings, clock: Clock) -> anyhow::Result<Self> {
        let api = Client::new(&settings, clawboard_github::state_dir(store.root()))?;
        let repository = settings.repository()?.to_string();
        match settings.token() {
            Ok(_) => tracing::info!(repository, schedule = %settings.schedule.text, "github bridge on"),
            Err(e) => tracing::error!(repository, "github: {e}; every run fails until it is fixed"),
        }
        Ok(Github::new(store, lanes, settings, api, clock))
    }
}

impl<A: Api + 'static> Github<A> {
    pub fn new(store: Store, lanes: LanesNow, settings: GithubSettings, api: A, clock: Clock) -> Self {
        let due = Scheduled::new(settings.schedule.clone(), clock);
        Github { store, lanes, settings, api, due, clock, skipped: BTreeSet::new() }
    }
}

impl<A: Api + 'static> Worker for Github<A> {
    async fn wait_for_work(&mut self) {
        self.due.wait().await
    }

    async fn work(&mut self) -> JobResult {
        self.due.advance();
        let now = self.clock.now();
        let lanes = (self.lanes)();
        let report = clawboard_github::sync(&self.store, &lanes, &self.settings, &mut self.api, now)
            .await
            .map_err(|e| anyhow::anyhow!("github: {e}"))?;
        let changed = report.imported.len()
            + report.updated.len()
            + report.posted.len()
            + report.edited.len()
            + report.recorded.len();
        let mut skipped = BTreeSet::new();
        for k in &report.skipped {
            let line = format!(
                "issue {}, comment {}, entry {}: {}",
                k.issue.map_or("-".into(), |n| n.to_string()),
                k.comment.map_or("-".into(), |n| n.to_string()),
                k.entry.as_deref().unwrap_or("-"),
                k.reason
            );
            if !self.skipped.contains(&line) {
                tracing::warn!("github: skipped {line}");
            }
            skipped.insert(line);
        }
        self.skipped = skipped;
        if changed > 0 {
            tracing::info!("github: {}", report.summary());
        } else {
            tracing::debug!("github: {}", report.summary());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clawboard_github::MemoryApi;

    use super::*;
    use crate::daemon::jobs::testing::{at, settings, setup, until};

    const CONFIG: &str =
        "[github]\nenabled = true\nrepository = \"o/r\"\nschedule = \"0 * * * * *\"\nissues = [{ numbers = [7] }]\n";

    fn comment(id: &str) -> String {
        let text = format!(
            r#"{{"id": "{id}", "from": "Human", "to": "Aya", "project_id": "p", "kind": "k", "status": "open",
                "payload": {{}}, "target_docs": [], "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}}"#
        );
        let e: clawboard_entries::Entry = serde_json::from_str(&text).unwrap();
        clawboard_entries::render(&e, clawboard_entries::DEFAULT_MARKER)
    }

    #[tokio::test(start_paused = true)]
    async fn the_bridge_runs_on_its_schedule_and_a_refused_token_fails_rounds_until_it_is_fixed() {
        let mut s = setup();
        let settings = settings(s.root(), CONFIG);
        let gh = MemoryApi::new();
        gh.issue(7, &[]);
        gh.comment(7, &comment("e1"));
        let clock = Clock::tokio(at("2026-01-01T00:00:30Z"));
        let lanes = Arc::new(settings.lanes.clone());
        let w =
            Github::new(s.store.clone(), Arc::new(move || lanes.clone()), settings.github.clone(), gh.clone(), clock);
        s.runner.worker("github", w);
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert_eq!(s.rounds("github"), 0, "not before the schedule's time");
        tokio::time::sleep(Duration::from_secs(2)).await;
        until("the first round", || s.rounds("github") == 1).await;
        assert!(!s.failing("github"));
        assert!(clawboard_entries::find(&s.store, "e1").unwrap().is_some(), "the comment's entry was imported");

        gh.refuse(true);
        gh.comment(7, &comment("e2"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        until("the second round", || s.rounds("github") == 2).await;
        assert!(s.failing("github"), "a refused token fails the round");
        assert!(clawboard_entries::find(&s.store, "e2").unwrap().is_none());
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(s.rounds("github"), 2, "the next round is the next minute, not a retry");

        gh.refuse(false);
        tokio::time::sleep(Duration::from_secs(31)).await;
        until("the third round", || s.rounds("github") == 3).await;
        assert!(!s.failing("github"));
        assert!(clawboard_entries::find(&s.store, "e2").unwrap().is_some());
        s.stop().await;
    }
}
