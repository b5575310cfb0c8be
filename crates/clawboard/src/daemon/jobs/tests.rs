//! The runner under a paused tokio clock.

use std::sync::Mutex;

use tokio::time::Instant;

use super::testing::setup;
use super::*;

/// A worker due every `every`, woken early by `wake`; it fails on the rounds `fail` names.
struct Ticker {
    every: Duration,
    next: Instant,
    wake: Arc<tokio::sync::Notify>,
    rounds: Arc<Mutex<Vec<Duration>>>,
    started: Instant,
    fail: Vec<(usize, bool)>,
    stopped: Arc<Mutex<bool>>,
}

impl Worker for Ticker {
    async fn wait_for_work(&mut self) {
        tokio::select! {
            () = tokio::time::sleep_until(self.next) => {}
            () = self.wake.notified() => {}
        }
    }

    async fn work(&mut self) -> JobResult {
        let n = {
            let mut r = self.rounds.lock().unwrap();
            r.push(self.started.elapsed());
            r.len()
        };
        self.next = Instant::now() + self.every;
        match self.fail.iter().find(|(i, _)| *i == n) {
            Some((_, true)) => Err(JobError::Critical(anyhow::anyhow!("the disk is gone"))),
            Some((_, false)) => Err(anyhow::anyhow!("the bucket does not answer").into()),
            None => Ok(()),
        }
    }

    async fn stop(&mut self) {
        *self.stopped.lock().unwrap() = true;
    }
}

fn ticker(every: Duration, fail: Vec<(usize, bool)>) -> (Ticker, Arc<Mutex<Vec<Duration>>>, Arc<tokio::sync::Notify>) {
    let rounds = Arc::new(Mutex::new(Vec::new()));
    let wake = Arc::new(tokio::sync::Notify::new());
    let t = Ticker {
        every,
        next: Instant::now(),
        wake: wake.clone(),
        rounds: rounds.clone(),
        started: Instant::now(),
        fail,
        stopped: Arc::new(Mutex::new(false)),
    };
    (t, rounds, wake)
}

#[tokio::test(start_paused = true)]
async fn a_worker_runs_on_its_schedule_and_when_woken_until_the_stop() {
    let mut s = setup();
    let (t, rounds, wake) = ticker(Duration::from_secs(60), vec![]);
    let stopped = t.stopped.clone();
    s.runner.worker("ticker", t);
    tokio::time::sleep(Duration::from_secs(150)).await;
    assert_eq!(*rounds.lock().unwrap(), [0, 60, 120].map(Duration::from_secs));
    wake.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rounds.lock().unwrap()[3], Duration::from_secs(150));
    s.stop.send_replace(true);
    let (name, r) = s.runner.join_next().await.unwrap();
    assert_eq!(name, "ticker");
    r.unwrap();
    assert!(*stopped.lock().unwrap(), "the worker is told of the stop");
    let stats = &s.runner.registry.jobs()[0].1;
    assert_eq!(stats.rounds.load(Ordering::Relaxed), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failing_worker_is_backed_off_and_a_critical_failure_ends_it() {
    let mut s = setup();
    // Woken all the time: only the back-off spaces the failing rounds.
    let (t, rounds, _) = ticker(Duration::ZERO, vec![(1, false), (2, false), (3, false), (5, true)]);
    s.runner.backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(3));
    s.runner.worker("ticker", t);
    let (_, r) = s.runner.join_next().await.unwrap();
    let err = r.unwrap_err();
    assert_eq!(format!("{err:#}"), "ticker failed: the disk is gone");
    // Failures 1, 2 and 3 wait 1, 2 and 3 s (capped); round 4 works, round 5 is critical.
    assert_eq!(*rounds.lock().unwrap(), [0, 1, 3, 6, 6].map(Duration::from_secs));
    let stats = &s.runner.registry.jobs()[0].1;
    assert_eq!(stats.failures.load(Ordering::Relaxed), 4);
    assert_eq!(stats.failing.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn a_job_that_ends_on_its_own_or_panics_is_reported_by_name() {
    let mut s = setup();
    s.runner.spawn("server", async { Ok(()) });
    s.runner.spawn("broken", async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        panic!("bug")
    });
    let (name, r) = s.runner.join_next().await.unwrap();
    assert_eq!(name, "server");
    r.unwrap();
    let (name, r) = s.runner.join_next().await.unwrap();
    assert_eq!(name, "broken");
    assert!(format!("{:#}", r.unwrap_err()).starts_with("broken panicked"));
}

/// Records what it is handed; its work is durable only up to `held` (when set),
/// and it fails the first time it sees `bad`.
#[derive(Clone, Default)]
struct Recording {
    seen: Arc<Mutex<Vec<(u64, String)>>>,
    held: Arc<Mutex<Option<u64>>>,
    bad: Option<&'static str>,
    failed_once: Arc<Mutex<bool>>,
    due: Arc<Mutex<Option<Instant>>>,
    worked: Arc<Mutex<u32>>,
}

impl Consumer for Recording {
    async fn handle(&mut self, batch: Vec<Journaled>) -> JobResult {
        if let Some(bad) = self.bad
            && batch.iter().any(|e| e.change.path == bad)
            && !std::mem::replace(&mut *self.failed_once.lock().unwrap(), true)
        {
            return Err(anyhow::anyhow!("cannot read {bad}").into());
        }
        self.seen.lock().unwrap().extend(batch.into_iter().map(|e| (e.seq, e.change.path)));
        Ok(())
    }

    fn durable(&self, handled: u64) -> u64 {
        self.held.lock().unwrap().map_or(handled, |h| h.min(handled))
    }

    async fn wait_for_work(&mut self) {
        let due = *self.due.lock().unwrap();
        match due {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    async fn work(&mut self) -> JobResult {
        *self.due.lock().unwrap() = None;
        *self.held.lock().unwrap() = None;
        *self.worked.lock().unwrap() += 1;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_consumer_replays_after_its_cursor_then_follows_the_journal() {
    let mut s = setup();
    s.append(&["a", "b", "c"]);
    Cursor::new(&s.cursors, "rec").store(1).unwrap();
    let rec = Recording::default();
    s.runner.consumer("rec", rec.clone());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*rec.seen.lock().unwrap(), [(2, "b".to_owned()), (3, "c".to_owned())], "the replay");
    // Live entries arrive on the same path, woken by the last sequence number.
    s.append(&["d"]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(rec.seen.lock().unwrap().last(), Some(&(4, "d".to_owned())));
    // Fewer than CURSOR_EVERY entries: the cursor is written at the stop.
    assert_eq!(s.cursor("rec"), 1);
    s.stop.send_replace(true);
    s.runner.join_next().await.unwrap().1.unwrap();
    assert_eq!(s.cursor("rec"), 4);
    assert_eq!(s.runner.registry.cursors(), ["rec"]);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_cursor_never_passes_work_that_is_not_durable() {
    let mut s = setup();
    let rec = Recording::default();
    *rec.held.lock().unwrap() = Some(2);
    s.runner.consumer("rec", rec.clone());
    let many: Vec<String> = (0..1_500).map(|i| format!("f{i}")).collect();
    s.append(&many.iter().map(String::as_str).collect::<Vec<_>>());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(rec.seen.lock().unwrap().len(), 1_500);
    assert_eq!(s.cursor("rec"), 0, "held at 2: fewer than CURSOR_EVERY past the stored 0");
    // Its own work finishes what was held: the cursor moves at once.
    *rec.due.lock().unwrap() = Some(Instant::now() + Duration::from_secs(5));
    s.append(&["wake"]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(*rec.worked.lock().unwrap(), 1);
    assert_eq!(s.cursor("rec"), 1_501);
    // Held again at the stop: the stored cursor stays where the durable work ends.
    *rec.held.lock().unwrap() = Some(1_501);
    s.append(&["late"]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    s.stop.send_replace(true);
    s.runner.join_next().await.unwrap().1.unwrap();
    assert_eq!(s.cursor("rec"), 1_501);
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_is_handed_again_after_the_backoff() {
    let mut s = setup();
    let rec = Recording { bad: Some("bad"), ..Recording::default() };
    s.runner.backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(2));
    s.runner.consumer("rec", rec.clone());
    s.append(&["ok", "bad"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rec.seen.lock().unwrap().is_empty(), "the failed batch is not half taken");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(*rec.seen.lock().unwrap(), [(1, "ok".to_owned()), (2, "bad".to_owned())]);
    let stats = &s.runner.registry.jobs()[0].1;
    assert_eq!((stats.failures.load(Ordering::Relaxed), stats.failing.load(Ordering::Relaxed)), (1, 0));
    assert_eq!(stats.position.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn cursors_of_jobs_that_do_not_run_are_dropped() {
    let mut s = setup();
    for name in ["rec", "push", "notify"] {
        Cursor::new(&s.cursors, name).store(7).unwrap();
    }
    s.runner.consumer("rec", Recording::default());
    s.runner.registry.add_cursor("push");
    s.runner.drop_unregistered_cursors().unwrap();
    let mut left: Vec<String> =
        std::fs::read_dir(&s.cursors).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["push", "rec"]);
    assert_eq!(s.runner.registry.slowest(&s.cursors).unwrap(), Some(7));
}

#[tokio::test(start_paused = true)]
async fn the_clock_follows_paused_time_for_calendar_jobs() {
    let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:30Z").unwrap().with_timezone(&Utc);
    let clock = Clock::tokio(start);
    let every_minute = clawboard_sync::Schedule::parse("s", "* * * * *").unwrap();
    let at = clock.next(&every_minute);
    assert_eq!(at - Instant::now(), Duration::from_secs(30));
    tokio::time::sleep_until(at).await;
    assert_eq!(clock.now().to_rfc3339(), "2026-01-01T00:01:00+00:00");
}
