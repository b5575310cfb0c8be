//! What the jobs' unit tests share: a tree with its journal, a runner on it under
//! a paused tokio clock, settings from a config text.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clawboard_core::Store;
use clawboard_core::journal::{Change, ChangeKind, Cursor, Journal as Log, Origin};
use tokio::sync::watch;

use super::{JobStats, JournalFeed, Registry, Runner};

pub fn put(path: &str) -> Change {
    Change { path: path.into(), kind: ChangeKind::Put, origin: Origin::Local, size: None, mtime_ns: None }
}

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub log: Log,
    pub last_seq: watch::Sender<u64>,
    pub stop: watch::Sender<bool>,
    pub runner: Runner,
    pub cursors: PathBuf,
}

/// A new tree (`Store::init`), its journal, and a runner following it.
pub fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(dir.path()).unwrap();
    let journal_dir = dir.path().join(clawboard_core::layout::JOURNAL);
    let cursors = dir.path().join(clawboard_core::layout::CURSORS);
    let log = Log::open(&journal_dir).unwrap();
    let (last_seq, seq_rx) = watch::channel(log.last_seq());
    let (stop, stop_rx) = watch::channel(false);
    let journal = JournalFeed { dir: journal_dir, cursors: cursors.clone(), last_seq: seq_rx };
    let runner = Runner::new(stop_rx, Arc::new(Registry::default()), journal);
    Setup { dir, store, log, last_seq, stop, runner, cursors }
}

impl Setup {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Journals puts of `paths` (as the recorder would) and wakes the consumers.
    pub fn append(&mut self, paths: &[&str]) {
        self.log.append(paths.iter().map(|p| put(p)).collect()).unwrap();
        self.last_seq.send_replace(self.log.last_seq());
    }

    pub fn cursor(&self, name: &str) -> u64 {
        Cursor::new(&self.cursors, name).load().unwrap()
    }

    pub fn stats(&self, job: &str) -> Arc<JobStats> {
        self.runner.registry.jobs().into_iter().find(|(n, _)| *n == job).unwrap().1
    }

    pub fn rounds(&self, job: &str) -> u64 {
        self.stats(job).rounds.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn failing(&self, job: &str) -> bool {
        self.stats(job).failing.load(std::sync::atomic::Ordering::Relaxed) == 1
    }

    /// Stops the jobs and waits for them; each must end cleanly.
    pub async fn stop(&mut self) {
        self.stop.send_replace(true);
        while let Some((name, r)) = self.runner.join_next().await {
            r.unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }
}

/// Waits in real time (tokio's paused clock stands still meanwhile) until `cond`
/// holds, for work on blocking threads: up to 10 s.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..2_000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        tokio::task::yield_now().await;
    }
    panic!("timed out waiting for {what}");
}

/// Settings as the daemon resolves them from `config` (a TOML text) for `root`.
pub fn settings(root: &Path, config: &str) -> crate::config::Settings {
    use clap::Parser;
    let file = root.join("clawboard-test.toml");
    std::fs::write(&file, config).unwrap();
    let (root, file) = (root.display().to_string(), file.display().to_string());
    let args = crate::cli::Cli::parse_from(["clawboard", "--root", &root, "--config", &file, "status"]).global;
    crate::config::resolve(&args, &crate::config::Env::from_pairs(&[("HOME", "/nonexistent")])).unwrap()
}

pub fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().with_timezone(&Utc)
}

/// A sync client of node `node` for the tree of `s`, on the directory bucket
/// `bucket`, with sync settings from `[sync]` lines `extra`.
pub fn client(s: &Setup, node: &str, bucket: &Path, extra: &str) -> clawboard_sync::Client<clawboard_sync::AnyRemote> {
    let config = format!("[sync]\nenabled = true\ndir = \"{}\"\n{extra}", bucket.display());
    let settings = settings(s.root(), &config);
    let remote = clawboard_sync::AnyRemote::Dir(clawboard_sync::dir::DirRemote::open(bucket).unwrap());
    clawboard_sync::Client::open(remote, s.root(), settings.sync, node.to_owned(), s.store.clone()).unwrap()
}

/// A dispatcher whose engine has no roles (nothing queued is driven unless its `run` is).
pub fn dispatcher(s: &Setup) -> Arc<crate::daemon::dispatch::Dispatcher> {
    let engine = Arc::new(clawboard_roles::Engine::new(
        s.store.clone(),
        clawboard_roles::RolesConfig::default(),
        clawboard_roles::Shutdown::never(),
    ));
    crate::daemon::dispatch::Dispatcher::new(engine)
}
