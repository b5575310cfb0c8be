//! The one shape of every background job of the daemon (after garage's `Worker`
//! with `work` and `wait_for_work`, watchexec's single `JoinSet` and mini-redis's
//! shutdown signal). A job is one of two kinds:
//!
//! - a [`Worker`] does a round of work, then waits for the next: its schedule's next
//!   time or a wake-up. The runner adds the shutdown.
//! - a [`Consumer`] follows the change journal from its durable cursor
//!   (`.clawboard/cursors/{name}`). The runner reads the entries after it, on one
//!   path for the replay after a crash and for live changes (woken by the
//!   recorder's last sequence number), hands them over in order, and stores the
//!   cursor only up to what the consumer says is durable.
//!
//! The runner owns the `JoinSet` of all jobs (nothing is spawned detached), logs a
//! repeated error once, backs a failing job off (on top of its own schedule), stops
//! the daemon when a job fails critically, panics or ends on its own, keeps a row
//! per job for `/metrics`, and keeps the list of cursors that journal compaction
//! honours: a cursor file no job registered is removed at start, so a consumer
//! turned off never holds compaction back.
//!
//! Time is tokio's (so tests run under `tokio::time::pause`); jobs that follow a
//! calendar read it from a [`Clock`] they are given.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clawboard_core::backoff::Backoff;
use clawboard_core::journal::{Cursor, Journaled, Tail};
use clawboard_core::lock::Lock;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Why a round of a job failed.
#[derive(Debug)]
pub enum JobError {
    /// Logged (once while it repeats) and tried again after a back-off.
    Retry(anyhow::Error),
    /// Stops the daemon.
    Critical(anyhow::Error),
}

impl<E> From<E> for JobError
where
    anyhow::Error: From<E>,
{
    fn from(e: E) -> JobError {
        JobError::Retry(anyhow::Error::from(e))
    }
}

pub type JobResult = Result<(), JobError>;

/// A job that works in rounds.
pub trait Worker: Send + 'static {
    /// Returns when the next round is due (the first call: when the first is).
    fn wait_for_work(&mut self) -> impl Future<Output = ()> + Send;
    /// One round. Dropped at its next await point when the daemon stops.
    fn work(&mut self) -> impl Future<Output = JobResult> + Send;
    /// The daemon stops (after the last round ended or was dropped).
    fn stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A job that follows the change journal.
pub trait Consumer: Send + 'static {
    /// Entries after the last ones handled, in order. An error hands the same
    /// entries again after the back-off.
    fn handle(&mut self, batch: Vec<Journaled>) -> impl Future<Output = JobResult> + Send;
    /// Up to which entry the work is durable, given that every entry up to
    /// `handled` was handled: the cursor is never stored past it.
    fn durable(&self, handled: u64) -> u64 {
        handled
    }
    /// Returns when work of its own is due (a file to look at again, a
    /// notification that finished). Never, by default.
    fn wait_for_work(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// That work; the cursor is stored after it.
    fn work(&mut self) -> impl Future<Output = JobResult> + Send {
        async { Ok(()) }
    }
    /// At the daemon's stop, before the cursor is stored the last time: work
    /// of its own in progress ends (or is given up) here. Nothing, by default.
    fn stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Wall-clock time for jobs that follow a calendar (cron schedules, report
/// periods). Under a paused tokio clock it moves with tokio's time.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    System,
    /// `at` was the wall-clock time at the tokio instant `since`.
    Tokio {
        at: DateTime<Utc>,
        since: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that starts at `at` now and follows tokio's (possibly paused) time.
    #[cfg_attr(not(test), expect(dead_code, reason = "for tests under a paused clock"))]
    pub fn tokio(at: DateTime<Utc>) -> Clock {
        Clock::Tokio { at, since: tokio::time::Instant::now() }
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Tokio { at, since } => {
                *at + chrono::Duration::from_std(since.elapsed()).unwrap_or(chrono::Duration::MAX)
            }
        }
    }

    /// How long from now until `at` (zero if it passed).
    pub fn until(&self, at: DateTime<Utc>) -> Duration {
        (at - self.now()).to_std().unwrap_or_default()
    }

    /// The tokio instant of the next time of `schedule` (in five minutes if it has none).
    #[cfg_attr(not(test), expect(dead_code, reason = "for tests under a paused clock"))]
    pub fn next(&self, schedule: &clawboard_sync::Schedule) -> tokio::time::Instant {
        let wait = schedule.next_after(self.now()).map_or(Duration::from_secs(300), |t| self.until(t));
        tokio::time::Instant::now() + wait
    }
}

/// The next time of a cron schedule, kept so that a round that ends within the
/// second it started never runs twice for it.
pub struct Scheduled {
    pub schedule: clawboard_sync::Schedule,
    clock: Clock,
    at: Option<DateTime<Utc>>,
}

impl Scheduled {
    pub fn new(schedule: clawboard_sync::Schedule, clock: Clock) -> Scheduled {
        let at = schedule.next_after(clock.now());
        Scheduled { schedule, clock, at }
    }

    /// The tokio instant of the next time (`None`: the schedule has none).
    pub fn instant(&self) -> Option<tokio::time::Instant> {
        self.at.map(|at| tokio::time::Instant::now() + self.clock.until(at))
    }

    /// Sleeps until the next time (forever if there is none).
    pub async fn wait(&self) {
        sleep_until_some(self.instant()).await
    }

    /// Whether the next time has come. A time less than [`EARLY`] ahead counts:
    /// a timer on the monotonic clock can fire a little before the wall clock
    /// reaches the time it was set for.
    pub fn is_due(&self) -> bool {
        self.at.is_some_and(|at| at <= self.clock.now() + EARLY)
    }

    /// Moves on past the next time if it has come; otherwise it stays.
    pub fn advance(&mut self) {
        if let Some(at) = self.at
            && self.is_due()
        {
            self.at = self.schedule.next_after(at.max(self.clock.now()));
        }
    }
}

/// See [`Scheduled::is_due`].
const EARLY: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// Sleeps until `at`, or forever if there is nothing to wait for (a `select!` arm
/// for the next due time of a job that may have none).
pub async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Logs an error once while it repeats (again only at debug level), and says so
/// when it stops.
#[derive(Default)]
pub struct Repeated {
    last: Option<String>,
}

impl Repeated {
    /// `msg` names what failed (the job is a field of the line).
    pub fn failed(&mut self, job: &str, msg: String) {
        if self.last.as_deref() == Some(msg.as_str()) {
            tracing::debug!(job, "again: {msg}");
        } else {
            tracing::error!(job, "{msg}");
        }
        self.last = Some(msg);
    }

    pub fn ok(&mut self, job: &str) {
        if self.last.take().is_some() {
            tracing::info!(job, "{job} works again");
        }
    }
}

/// The wait after a failed round of a job, before it tries again.
pub const JOB_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// One job's row in `/metrics`.
#[derive(Default, Debug)]
pub struct JobStats {
    pub rounds: AtomicU64,
    pub failures: AtomicU64,
    /// 1 while the last round failed.
    pub failing: AtomicU64,
    /// A consumer's last handled entry (0 for a worker).
    pub position: AtomicU64,
    pub consumer: bool,
}

/// The jobs and cursors of a daemon, shared with `/metrics` and journal compaction.
#[derive(Default)]
pub struct Registry {
    jobs: Lock<Vec<(&'static str, Arc<JobStats>)>>,
    cursors: Lock<BTreeSet<String>>,
}

impl Registry {
    fn add(&self, name: &'static str, consumer: bool) -> Arc<JobStats> {
        let stats = Arc::new(JobStats { consumer, ..JobStats::default() });
        self.jobs.lock().push((name, stats.clone()));
        stats
    }

    /// Names a cursor that journal compaction honours.
    pub fn add_cursor(&self, name: &str) {
        self.cursors.lock().insert(name.to_owned());
    }

    pub fn cursors(&self) -> Vec<String> {
        self.cursors.lock().iter().cloned().collect()
    }

    pub fn jobs(&self) -> Vec<(&'static str, Arc<JobStats>)> {
        self.jobs.lock().clone()
    }

    /// The slowest registered cursor in `dir` (`None` with none registered).
    pub fn slowest(&self, dir: &Path) -> clawboard_core::Result<Option<u64>> {
        let mut slowest = None;
        for name in self.cursors() {
            let at = Cursor::new(dir, &name).load()?;
            slowest = Some(slowest.map_or(at, |s: u64| s.min(at)));
        }
        Ok(slowest)
    }
}

/// What a consumer reads the journal with.
#[derive(Clone)]
pub struct JournalFeed {
    pub dir: PathBuf,
    pub cursors: PathBuf,
    /// The recorder's last sequence number.
    pub last_seq: watch::Receiver<u64>,
}

/// Entries handed to a consumer at once, at most.
const BATCH: usize = 10_000;
/// Entries handled between two writes of a cursor while nothing forces one.
const CURSOR_EVERY: u64 = 1_000;

pub struct Runner {
    set: JoinSet<anyhow::Result<()>>,
    names: std::collections::HashMap<tokio::task::Id, &'static str>,
    stop: watch::Receiver<bool>,
    registry: Arc<Registry>,
    journal: JournalFeed,
    /// The wait after a failed round of a job ([`JOB_BACKOFF`]).
    pub backoff: Backoff,
}

/// Resolves when `stop` says so (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    clawboard_roles::runner::fired(stop).await
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = stopped(stop) => true,
    }
}

/// How a failed round is taken: logged once, counted; `Err` for a critical one.
fn failed(name: &str, e: JobError, stats: &JobStats, repeated: &mut Repeated) -> anyhow::Result<()> {
    stats.failures.fetch_add(1, Ordering::Relaxed);
    stats.failing.store(1, Ordering::Relaxed);
    match e {
        JobError::Critical(e) => Err(e.context(format!("{name} failed"))),
        JobError::Retry(e) => {
            repeated.failed(name, format!("{e:#}"));
            Ok(())
        }
    }
}

fn succeeded(name: &str, stats: &JobStats, repeated: &mut Repeated) {
    stats.failing.store(0, Ordering::Relaxed);
    repeated.ok(name);
}

impl Runner {
    pub fn new(stop: watch::Receiver<bool>, registry: Arc<Registry>, journal: JournalFeed) -> Runner {
        Runner { set: JoinSet::new(), names: Default::default(), stop, registry, journal, backoff: JOB_BACKOFF }
    }

    /// A task that is neither worker nor consumer (a server): it must run until the stop.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = anyhow::Result<()>> + Send + 'static) {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name);
    }

    pub fn worker(&mut self, name: &'static str, mut w: impl Worker) {
        let stats = self.registry.add(name, false);
        let backoff = self.backoff;
        let mut stop = self.stop.clone();
        self.spawn(name, async move {
            let mut repeated = Repeated::default();
            let mut failures = 0;
            loop {
                tokio::select! {
                    () = w.wait_for_work() => {}
                    () = stopped(&mut stop) => break,
                }
                let r = tokio::select! {
                    r = w.work() => r,
                    () = stopped(&mut stop) => break,
                };
                stats.rounds.fetch_add(1, Ordering::Relaxed);
                match r {
                    Ok(()) => {
                        succeeded(name, &stats, &mut repeated);
                        failures = 0;
                    }
                    Err(e) => {
                        failed(name, e, &stats, &mut repeated)?;
                        if sleep_or_stop(backoff.delay(failures), &mut stop).await {
                            break;
                        }
                        failures += 1;
                    }
                }
            }
            w.stop().await;
            Ok(())
        });
    }

    /// Runs consumer `name` from its cursor, which compaction then honours.
    pub fn consumer(&mut self, name: &'static str, mut c: impl Consumer) {
        let stats = self.registry.add(name, true);
        self.registry.add_cursor(name);
        let backoff = self.backoff;
        let mut stop = self.stop.clone();
        let mut journal = self.journal.clone();
        self.spawn(name, async move {
            let cursor = Cursor::new(&journal.cursors, name);
            let mut handled = cursor.load().with_context(|| format!("{name}: reading its journal cursor"))?;
            stats.position.store(handled, Ordering::Relaxed);
            let mut stored = handled;
            let mut tail = Tail::new(&journal.dir, handled);
            let mut repeated = Repeated::default();
            let mut failures = 0;
            let store = |upto: u64, stored: &mut u64, force: bool| -> anyhow::Result<()> {
                if upto > *stored && (force || upto - *stored >= CURSOR_EVERY) {
                    cursor.store(upto).with_context(|| format!("{name}: storing its journal cursor"))?;
                    *stored = upto;
                }
                Ok(())
            };
            loop {
                let batch = tail.read(BATCH).with_context(|| format!("{name}: reading the journal"))?;
                if let Some(last) = batch.last().map(|e| e.seq) {
                    let r = tokio::select! {
                        r = c.handle(batch) => r,
                        () = stopped(&mut stop) => break,
                    };
                    stats.rounds.fetch_add(1, Ordering::Relaxed);
                    match r {
                        Ok(()) => {
                            succeeded(name, &stats, &mut repeated);
                            failures = 0;
                            handled = last;
                            stats.position.store(handled, Ordering::Relaxed);
                            store(c.durable(handled), &mut stored, false)?;
                        }
                        Err(e) => {
                            failed(name, e, &stats, &mut repeated)?;
                            // The same entries again, after the back-off.
                            tail = Tail::new(&journal.dir, handled);
                            if sleep_or_stop(backoff.delay(failures), &mut stop).await {
                                break;
                            }
                            failures += 1;
                        }
                    }
                    continue;
                }
                tokio::select! {
                    r = async { journal.last_seq.wait_for(|last| *last > handled).await.map(|_| ()) } => {
                        // The recorder is gone: the daemon is stopping.
                        if r.is_err() {
                            break;
                        }
                    }
                    () = c.wait_for_work() => {
                        match c.work().await {
                            Ok(()) => succeeded(name, &stats, &mut repeated),
                            Err(e) => failed(name, e, &stats, &mut repeated)?,
                        }
                        store(c.durable(handled), &mut stored, true)?;
                    }
                    () = stopped(&mut stop) => break,
                }
            }
            c.stop().await;
            store(c.durable(handled), &mut stored, true)
        });
    }

    /// The next job that ended, with its name: before the stop, any end is a failure.
    pub async fn join_next(&mut self) -> Option<(&'static str, anyhow::Result<()>)> {
        let done = self.set.join_next_with_id().await?;
        Some(match done {
            Ok((id, r)) => (self.names.remove(&id).unwrap_or("a job"), r),
            Err(e) => {
                let name = self.names.remove(&e.id()).unwrap_or("a job");
                (name, Err(anyhow::anyhow!("{name} panicked: {e}")))
            }
        })
    }

    /// Removes the cursor files in `dir` that no job registered: a cursor of a
    /// consumer that is off would hold back journal compaction forever (turned on
    /// again, it starts from the journal as it then stands).
    pub fn drop_unregistered_cursors(&self) -> anyhow::Result<()> {
        let dir = &self.journal.cursors;
        let registered = self.registry.cursors();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        for e in entries {
            let e = e.with_context(|| format!("listing {}", dir.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if registered.contains(&name) || clawboard_core::store::is_temp_name(&name) {
                continue;
            }
            std::fs::remove_file(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
            tracing::info!("the {name} journal cursor belongs to nothing that runs now: dropped it");
        }
        Ok(())
    }

    /// Waits for every job to end after the stop; errors are logged.
    pub async fn finish(mut self) {
        while let Some((name, r)) = self.join_next().await {
            if let Err(e) = r {
                tracing::warn!("{name}, while stopping: {e:#}");
            }
        }
    }
}

#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests;
