//! What the recorder watches: the tree but the daemon's own state, and of
//! `tasks/` only the directories that may still change. A month of finished
//! tasks is most of a tree (50,000 directories of 111,000 at 50,000 tasks); a
//! watch on each costs the kernel's memory, the watcher's (a path per watch),
//! seconds at start and seconds more to tear down at stop. A finished task's
//! directory that is frozen (quiet for `FREEZE_AFTER`, see `clawboard_core::index`)
//! is left unwatched: a change the daemon makes there thaws it and brings its
//! watch back, and a pass over the unwatched ones ([`Verifier`]) finds a change
//! anyone else made, as Syncthing's hourly full scan backs its watcher.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use notify::{RecursiveMode, Watcher};

use super::inotify_hint;

/// Makes a watcher wired to the recorder's channel.
pub(super) type Factory = Box<dyn Fn() -> notify::Result<notify::RecommendedWatcher> + Send>;

/// Past this many directories to stop watching at once, the watcher is made
/// anew with only what stays watched: notify removes one recursive watch by
/// going over every watched path, so tens of thousands one by one (the first
/// snapshot of a month's tree) would take minutes.
const REBUILD_OVER: usize = 256;

pub(super) struct Watches {
    root: PathBuf,
    watcher: notify::RecommendedWatcher,
    factory: Factory,
    /// Task directories (`tasks/{id}`) deliberately not watched.
    unwatched: HashSet<String>,
}

impl Watches {
    /// Watches the tree under `root`, all but the task directories in `unwatched`.
    pub(super) fn start(root: &Path, factory: Factory, unwatched: HashSet<String>) -> anyhow::Result<Watches> {
        let mut watcher = factory().map_err(|e| anyhow::anyhow!(inotify_hint(&e)))?;
        watch_tree(&mut watcher, root, &unwatched)?;
        Ok(Watches { root: root.to_owned(), watcher, factory, unwatched })
    }

    /// The task directories not watched.
    pub(super) fn unwatched(&self) -> &HashSet<String> {
        &self.unwatched
    }

    pub(super) fn is_unwatched(&self, task: &str) -> bool {
        self.unwatched.contains(task)
    }

    /// Watches directories that appeared: one right under the root with all
    /// below it (`tasks/` itself alone, with each task in it), a new task directory
    /// with all below it. Deeper ones are watched by their parent's recursive watch.
    pub(super) fn watch_new(&mut self, dirs: &[PathBuf]) {
        for dir in dirs {
            if is_top_dir(dir, &self.root) {
                if is_tasks_dir(dir, &self.root) {
                    self.watch(dir, RecursiveMode::NonRecursive);
                    match task_dirs(dir) {
                        Ok(tasks) => tasks.iter().for_each(|task| self.watch(task, RecursiveMode::Recursive)),
                        Err(e) => tracing::warn!("cannot list the tasks to watch them; their changes go unseen: {e:#}"),
                    }
                } else {
                    self.watch(dir, RecursiveMode::Recursive);
                }
            } else if dir.parent().is_some_and(|p| is_tasks_dir(p, &self.root)) {
                if let Some(rel) = rel_of(dir, &self.root) {
                    self.unwatched.remove(&rel);
                }
                self.watch(dir, RecursiveMode::Recursive);
            }
        }
    }

    /// Watches the task directory `task` again (it thawed); false when it is gone.
    pub(super) fn watch_again(&mut self, task: &str) -> bool {
        if !self.unwatched.remove(task) {
            return true;
        }
        let dir = self.root.join(task);
        if !clawboard_core::store::real_dir(&self.root, task) {
            return false;
        }
        self.watch(&dir, RecursiveMode::Recursive);
        true
    }

    /// Stops watching the task directories `tasks`.
    pub(super) fn unwatch(&mut self, tasks: Vec<String>) -> anyhow::Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let many = tasks.len() > REBUILD_OVER;
        for task in tasks {
            if !many
                && let Err(e) = self.watcher.unwatch(&self.root.join(&task))
                && !matches!(e.kind, notify::ErrorKind::WatchNotFound)
            {
                tracing::warn!("file watcher: unwatching {task}: {}", inotify_hint(&e));
            }
            self.unwatched.insert(task);
        }
        if many { self.rewatch_all() } else { Ok(()) }
    }

    /// The watcher made anew with what is to be watched (after many directories
    /// froze, or an event queue overflowed), before the old one is dropped (no
    /// event falls between; one seen by both is journaled once). The old one is
    /// dropped on a thread of its own: the kernel takes seconds to tear tens of
    /// thousands of watches down.
    pub(super) fn rewatch_all(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut fresh = (self.factory)().map_err(|e| anyhow::anyhow!(inotify_hint(&e)))?;
        watch_tree(&mut fresh, &self.root, &self.unwatched)?;
        let old = std::mem::replace(&mut self.watcher, fresh);
        std::thread::Builder::new()
            .name("unwatch".into())
            .spawn(move || drop(old))
            .context("starting a thread to drop the old watcher")?;
        tracing::info!(
            unwatched = self.unwatched.len(),
            ms = started.elapsed().as_millis() as u64,
            "watching the tree anew, finished tasks' quiet directories left out"
        );
        Ok(())
    }

    fn watch(&mut self, dir: &Path, mode: RecursiveMode) {
        if let Err(e) = self.watcher.watch(dir, mode) {
            // Gone again since it appeared: its removal is an event of its parent's.
            if !matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
                && !matches!(e.kind, notify::ErrorKind::PathNotFound)
            {
                tracing::error!("file watcher: watching {}: {}", dir.display(), inotify_hint(&e));
            }
        }
    }
}

/// Watches the tree but not the daemon's own state (`.clawboard/`, whose writes would
/// wake the watcher and the journal on every heartbeat, push and journal append):
/// the root alone, each of its directories with all below it, but `tasks/`
/// alone, with each task directory in it not in `unwatched` with all below it.
fn watch_tree(
    watcher: &mut notify::RecommendedWatcher,
    root: &Path,
    unwatched: &HashSet<String>,
) -> anyhow::Result<()> {
    let watch = |w: &mut notify::RecommendedWatcher, p: &Path, mode| {
        w.watch(p, mode).map_err(|e| anyhow::anyhow!("watching {}: {}", p.display(), inotify_hint(&e)))
    };
    watch(watcher, root, RecursiveMode::NonRecursive)?;
    for dir in top_dirs(root)? {
        if !is_tasks_dir(&dir, root) {
            watch(watcher, &dir, RecursiveMode::Recursive)?;
            continue;
        }
        watch(watcher, &dir, RecursiveMode::NonRecursive)?;
        for task in task_dirs(&dir)? {
            if rel_of(&task, root).is_some_and(|rel| unwatched.contains(&rel)) {
                continue;
            }
            match watcher.watch(&task, RecursiveMode::Recursive) {
                Ok(()) => {}
                // Removed since it was listed.
                Err(e) if matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound) => {
                }
                Err(e) => return Err(anyhow::anyhow!("watching {}: {}", task.display(), inotify_hint(&e))),
            }
        }
    }
    Ok(())
}

/// The directories right under the root that are watched (all but `.clawboard/`).
pub(super) fn top_dirs(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))? {
        let p = entry.with_context(|| format!("reading {}", root.display()))?.path();
        if is_top_dir(&p, root) {
            out.push(p);
        }
    }
    Ok(out)
}

/// The task directories in `tasks` (real directories, not links).
fn task_dirs(tasks: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(tasks).with_context(|| format!("reading {}", tasks.display()))? {
        let entry = entry.with_context(|| format!("reading {}", tasks.display()))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// A real directory (not a link to one) right under `root`, other than `.clawboard/`.
pub(super) fn is_top_dir(p: &Path, root: &Path) -> bool {
    p.parent() == Some(root)
        && p.file_name().is_some_and(|n| n != clawboard_core::layout::STATE)
        && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn is_tasks_dir(p: &Path, root: &Path) -> bool {
    p.parent() == Some(root) && p.file_name().is_some_and(|n| n == "tasks")
}

fn rel_of(p: &Path, root: &Path) -> Option<String> {
    Some(p.strip_prefix(root).ok()?.to_str()?.to_owned())
}

/// The pass over the unwatched directories: each compared with its frozen
/// digest, a few at each tick, the whole set once per pass.
pub(super) struct Verifier {
    queue: Vec<String>,
    per_tick: usize,
    /// When the next tick is due; `None` while nothing is unwatched.
    due: Option<Instant>,
    /// When the pass under way began.
    began: Instant,
    /// How long a pass takes, and how long from one pass's start to the next's.
    every: Duration,
    /// How long the first pass takes (after a start: what changed meanwhile is found sooner).
    first: Option<Duration>,
}

/// How often the pass takes its next few directories.
const TICK: Duration = Duration::from_secs(1);

impl Verifier {
    pub(super) fn new(every: Duration, first: Duration) -> Verifier {
        let now = Instant::now();
        Verifier { queue: Vec::new(), per_tick: 0, due: Some(now), began: now, every, first: Some(first) }
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The directories to compare now, if a tick is due at `now`: the next few of
    /// the pass under way, or of a new pass over `unwatched` once the last ended
    /// and its interval passed.
    pub(super) fn take(&mut self, now: Instant, unwatched: &HashSet<String>) -> Vec<String> {
        if self.due.is_none_or(|d| d > now) {
            return Vec::new();
        }
        if self.queue.is_empty() {
            let span = self.first.take().unwrap_or(self.every);
            let mut all: Vec<String> = unwatched.iter().cloned().collect();
            all.sort_unstable();
            let ticks = (span.as_secs_f64() / TICK.as_secs_f64()).max(1.0);
            self.per_tick = ((all.len() as f64 / ticks).ceil() as usize).max(1);
            all.reverse(); // taken from the end, in order
            self.queue = all;
            self.began = now;
        }
        let n = self.per_tick.min(self.queue.len());
        let batch: Vec<String> = self.queue.split_off(self.queue.len() - n);
        self.due = Some(if self.queue.is_empty() { self.began + self.every } else { now + TICK });
        batch.into_iter().rev().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_covers_every_directory_once_at_its_pace_then_waits_for_the_next() {
        let unwatched: HashSet<String> = (0..25).map(|i| format!("tasks/t{i:02}")).collect();
        let mut v = Verifier::new(Duration::from_secs(3600), Duration::from_secs(10));
        let now = Instant::now();
        let mut seen = Vec::new();
        let mut at = now;
        for _ in 0..9 {
            let batch = v.take(at, &unwatched);
            assert!(batch.len() <= 3, "25 directories over a 10 s first pass: 3 a tick");
            seen.extend(batch);
            at = v.due().unwrap();
        }
        let mut want: Vec<String> = unwatched.iter().cloned().collect();
        want.sort();
        assert_eq!(seen, want, "each once, in order");
        assert_eq!(v.due(), Some(now + Duration::from_secs(3600)), "the next pass an hour after this one began");
        assert!(v.take(now + Duration::from_secs(60), &unwatched).is_empty(), "nothing before it is due");
        let next = v.take(now + Duration::from_secs(3600), &unwatched);
        assert_eq!(next, vec!["tasks/t00".to_owned()], "the later passes spread over the hour: 1 a tick");
    }
}
