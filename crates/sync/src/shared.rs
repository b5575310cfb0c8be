//! The one state push, pull and cluster share: the remote, the tree's root, the
//! settings and node id, the push state (what this node shares with the bucket),
//! the HLC clock, the change-log outbox, the store pulled files are written
//! through, the exclusion that lets one push or pull run at a time, and the request
//! counts. Below all three, with what more than one of them needs: which paths are
//! never synced, the retries, the object metadata of a version, flushing the
//! outbox, the status file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use clawboard_core::Store;
use clawboard_core::journal::is_ignored;

use crate::error::{Error, Failure, RemoteError, Result};
use crate::log::{LogEntry, Op, Outbox};
use crate::node::{Heartbeat, NODES_PREFIX};
use crate::remote::{
    Body, Condition, META_HASH, META_HLC, META_MTIME, META_NODE, META_VV, Metadata, ObjectInfo, Remote,
};
use crate::report::{ProcessTotals, RequestCounts, StatusFile, now_text};
use crate::settings::SyncSettings;
use crate::state::{PushState, Pushed};
use crate::version::{self, Clock};

/// Where `clawboard doctor` puts the object it probes a bucket with (and removes).
pub const DOCTOR_PREFIX: &str = "_doctor/";

/// Key prefixes the bucket uses for its own bookkeeping (change log, claims,
/// nodes, the doctor's probe): never a file of the tree.
pub const RESERVED_PREFIXES: [&str; 4] = ["_log/", "_claims/", "_nodes/", DOCTOR_PREFIX];
/// Files each node keeps for itself and never syncs: `shared/node-status.json` is
/// folded from the per-node heartbeats in `_nodes/`, so it never conflicts.
/// Files dropped straight into `inbox/` are taken by the node they were dropped on
/// (and never reach another node's intake).
/// `roles/active.json` lists the role instances running on this node.
pub const LOCAL_ONLY: [&str; 2] = ["shared/node-status.json", "roles/active.json"];

/// This process's and every other process's exclusion from pushing and pulling:
/// the in-process mutex and the lock on `.clawboard/sync/push.lock`.
pub(crate) type Guards<'a> = (tokio::sync::MutexGuard<'a, ()>, File);

/// Requests sent, by operation.
#[derive(Debug, Default)]
pub struct Counts {
    pub put: AtomicU64,
    pub get: AtomicU64,
    pub head: AtomicU64,
    pub list: AtomicU64,
    pub delete: AtomicU64,
}

impl Counts {
    pub fn snapshot(&self) -> RequestCounts {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            put: n(&self.put),
            get: n(&self.get),
            head: n(&self.head),
            list: n(&self.list),
            delete: n(&self.delete),
        }
    }
}

pub fn sync_dir(root: &Path) -> PathBuf {
    root.join(".clawboard/sync")
}

/// What push, pull and cluster share (each holds it in an `Arc`).
pub struct SyncState<R: Remote> {
    pub(crate) remote: R,
    pub(crate) root: PathBuf,
    pub(crate) settings: SyncSettings,
    pub(crate) node: String,
    excludes: globset::GlobSet,
    pub(crate) state: Mutex<Option<PushState>>,
    pub(crate) clock: Clock,
    pub(crate) outbox: Outbox,
    /// Writes pulled files (with `origin = remote` when a daemon journals them).
    pub(crate) writer: Store,
    /// This process made sure `_nodes/{node}.json` exists (pullers find nodes there).
    announced: AtomicBool,
    running: tokio::sync::Mutex<()>,
    pub counts: Counts,
    pub(crate) uploaded_total: AtomicU64,
    pub(crate) deleted_total: AtomicU64,
    /// This node's lease on its claimed tasks (enforced where heartbeats run).
    pub lease: crate::lease::Lease,
}

pub(crate) fn build_excludes(patterns: &[String]) -> Result<globset::GlobSet> {
    let mut b = globset::GlobSetBuilder::new();
    for (i, p) in patterns.iter().enumerate() {
        let glob = globset::GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::config(format!("sync.exclude[{i}]"), format!("{p:?}: {e}")))?;
        b.add(glob);
    }
    b.build().map_err(|e| Error::config("sync.exclude", e.to_string()))
}

impl<R: Remote> SyncState<R> {
    /// The state of node `node` syncing the tree at `root` through `remote`; pulled
    /// files are written through `writer` (a daemon's store journals them with
    /// `origin = remote`, so push never sends them back).
    pub fn new(remote: R, root: &Path, settings: SyncSettings, node: String, writer: Store) -> Result<SyncState<R>> {
        let excludes = build_excludes(&settings.exclude)?;
        let dir = sync_dir(root);
        Ok(SyncState {
            remote,
            root: root.to_owned(),
            node,
            excludes,
            state: Mutex::new(None),
            clock: Clock::load(&dir)?,
            outbox: Outbox::new(&dir),
            writer,
            announced: AtomicBool::new(false),
            running: tokio::sync::Mutex::new(()),
            counts: Counts::default(),
            uploaded_total: AtomicU64::new(0),
            deleted_total: AtomicU64::new(0),
            lease: crate::lease::Lease::new(settings.lease),
            settings,
        })
    }

    pub fn remote(&self) -> &R {
        &self.remote
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn settings(&self) -> &SyncSettings {
        &self.settings
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True for paths push never sends: `.clawboard/`, temp and editor files, the
    /// configured excludes.
    pub fn is_excluded(&self, rel: &str) -> bool {
        is_ignored(rel)
            || self.excludes.is_match(rel)
            || RESERVED_PREFIXES.iter().any(|p| rel.starts_with(p))
            || LOCAL_ONLY.contains(&rel)
            || rel.strip_prefix("inbox/").is_some_and(|name| !name.contains('/') && name.ends_with(".json"))
    }

    /// True for a path inside a task this node lost the claim on: it never pushes
    /// there again (see [`crate::fence`]).
    pub(crate) fn is_fenced(&self, rel: &str) -> bool {
        task_of(rel).is_some_and(|task| crate::node::is_fenced(&self.root, task))
    }

    /// Holds this process's sync mutex and the root's `push.lock` (one push or pull at a time).
    pub(crate) async fn exclusive(&self) -> Result<Guards<'_>> {
        let running = self.running.lock().await;
        let lock_path = sync_dir(&self.root).join("push.lock");
        let lock = tokio::task::spawn_blocking(move || -> Result<File> {
            if let Some(dir) = lock_path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .map_err(|e| Error::io(&lock_path, e))?;
            f.lock().map_err(|e| Error::io(&lock_path, e))?;
            Ok(f)
        })
        .await
        .map_err(|e| Error::io(&self.root, std::io::Error::other(e)))??;
        if crate::binding::bind(&sync_dir(&self.root), &self.remote.describe())? {
            *self.state.lock().map_err(|_| poisoned())? = None;
        }
        Ok((running, lock))
    }

    pub(crate) fn load_state(&self) -> Result<()> {
        let mut guard = self.state.lock().map_err(|_| poisoned())?;
        let state = match guard.take() {
            Some(s) => s.refresh()?,
            None => PushState::load(&sync_dir(&self.root))?,
        };
        *guard = Some(state);
        Ok(())
    }

    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut PushState) -> Result<T>) -> Result<T> {
        let mut guard = self.state.lock().map_err(|_| poisoned())?;
        match guard.as_mut() {
            Some(s) => f(s),
            None => Err(Error::io("push state", std::io::Error::other("used before it was loaded"))),
        }
    }

    /// Every file of the tree that push would send (the one walk: `sync full` and verify), sorted.
    pub fn tree_files(&self) -> Result<Vec<String>> {
        let root = &self.root;
        let mut paths = Vec::new();
        let walker = walkdir::WalkDir::new(root).follow_links(false).into_iter().filter_entry(|e| {
            let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_string_lossy();
            rel.is_empty() || !self.is_excluded(&rel)
        });
        for entry in walker {
            let entry = match entry {
                Ok(e) => e,
                // Vanished while walking: the journal reports the removal.
                Err(e) if e.io_error().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) => continue,
                Err(e) => {
                    let path = e.path().map(Path::to_owned).unwrap_or_else(|| root.clone());
                    return Err(Error::io(path, e.into()));
                }
            };
            if entry.file_type().is_file()
                && let Ok(rel) = entry.path().strip_prefix(root)
            {
                paths.push(rel.to_string_lossy().into_owned());
            }
        }
        paths.sort();
        Ok(paths)
    }

    /// The object metadata that carries a version.
    pub(crate) fn metadata(&self, record: &Pushed) -> Metadata {
        let mut meta = Metadata::new();
        meta.insert(META_HASH.into(), record.hash.clone());
        meta.insert(META_NODE.into(), record.author.clone());
        meta.insert(META_MTIME.into(), record.mtime_ns.to_string());
        meta.insert(META_HLC.into(), record.hlc.to_string());
        meta.insert(META_VV.into(), version::encode(&record.vv));
        meta
    }

    /// Turns the outbox into change-log segments (after the push state is durable).
    pub(crate) async fn flush_log(&self) -> Result<()> {
        self.clock.save()?;
        let n = self.outbox.flush(&self.remote, &self.node).await?;
        if n > 0 {
            self.counts.put.fetch_add(n, Ordering::Relaxed);
            if !self.announced.swap(true, Ordering::SeqCst) {
                self.announce().await?;
            }
        }
        Ok(())
    }

    /// Creates this node's heartbeat object if it has none (a node that only pushes
    /// from the command line is found by pullers all the same).
    async fn announce(&self) -> Result<()> {
        let beat = Heartbeat {
            node: self.node.clone(),
            seen_at: now_text(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid: std::process::id(),
            ..Heartbeat::default()
        };
        let body = serde_json::to_vec_pretty(&beat).map_err(|e| Error::io("heartbeat", e.into()))?;
        let key = format!("{NODES_PREFIX}{}.json", self.node);
        self.counts.put.fetch_add(1, Ordering::Relaxed);
        let meta = Metadata::new();
        match self
            .retry(|| self.remote.put(&key, Body::Bytes(Bytes::from(body.clone())), &meta, &Condition::Absent))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.failure == Failure::PreconditionFailed => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// GETs an object (retried), its bytes checked against the hash its metadata
    /// names, if any (a synced path's version, a claim, a heartbeat). A server that
    /// answers a read beside a write of the same key may return one write's
    /// metadata and ETag with another's bytes (s3s-fs stores the two apart): taken
    /// as a version, that pair would record the new version's history over the old
    /// bytes, which no later pull would replace; taken as a claim, the old holder
    /// with the new ETag, which a taker's `If-Match` would then write over. Such a
    /// read is a retryable failure.
    pub(crate) async fn get_checked(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        self.counts.get.fetch_add(1, Ordering::Relaxed);
        self.retry(|| async {
            let got = self.remote.get(key).await?;
            if let Some((bytes, info)) = &got
                && let Some(named) = info.blake3()
                && named != blake3::hash(bytes).to_hex().as_str()
            {
                return Err(RemoteError::new(
                    Failure::Retryable,
                    "GET",
                    key,
                    format!("the bytes read are not the version the object's {META_HASH} names (written while read)"),
                ));
            }
            Ok(got)
        })
        .await
    }

    /// Runs `op`, retrying retryable failures with exponential backoff and full jitter.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, RemoteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, RemoteError>>,
    {
        let mut attempt = 0u32;
        loop {
            match op().await {
                Err(e) if e.is_retryable() && attempt < self.settings.retries => {
                    let delay = self.settings.retry.delay(attempt);
                    tracing::debug!(attempt, ?delay, "retrying: {e}");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Rewrites the status file with `change` and this process's totals.
    pub(crate) fn update_status(&self, change: impl FnOnce(&mut StatusFile)) -> Result<()> {
        let dir = sync_dir(&self.root);
        let mut status = read_status(&self.root).unwrap_or_default();
        status.remote = self.remote.describe();
        status.node = self.node.clone();
        status.this_process = ProcessTotals {
            pid: std::process::id(),
            requests: self.counts.snapshot(),
            uploaded: self.uploaded_total.load(Ordering::Relaxed),
            deleted: self.deleted_total.load(Ordering::Relaxed),
        };
        change(&mut status);
        clawboard_core::store::write_atomic(
            &dir,
            "status.json",
            clawboard_core::store::to_pretty_json(&status).as_bytes(),
        )?;
        Ok(())
    }
}

/// The task a path belongs to (`tasks/{id}/…`).
pub(crate) fn task_of(rel: &str) -> Option<&str> {
    clawboard_core::layout::task_of(rel)
}

/// The change-log entry for a version.
pub(crate) fn log_entry(path: &str, r: &Pushed) -> LogEntry {
    LogEntry {
        path: path.to_owned(),
        op: if r.deleted { Op::Delete } else { Op::Put },
        hash: r.hash.clone(),
        size: r.size,
        hlc: r.hlc,
        author: r.author.clone(),
        vv: r.vv.clone(),
    }
}

fn poisoned() -> Error {
    Error::io("push state", std::io::Error::other("a push panicked while holding the push state"))
}

/// The status file, if a push or pull ever ran.
pub fn read_status(root: &Path) -> Option<StatusFile> {
    let bytes = std::fs::read(sync_dir(root).join("status.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {

    use super::*;

    fn state(s: SyncSettings) -> Result<SyncState<crate::dir::DirRemote>> {
        let remote = crate::dir::DirRemote::open(tempfile::tempdir().unwrap().path()).unwrap();
        SyncState::new(remote, Path::new("/r"), s, "n".into(), Store::unchecked(Path::new("/r")))
    }

    #[test]
    fn excludes_are_globs_on_relative_paths() {
        let mut s = SyncSettings::local_default().unwrap();
        s.exclude = vec!["**/*.log".into(), "scratch/**".into()];
        let p = state(s).unwrap();
        for path in [
            "tasks/t/run.log",
            "scratch/a/b",
            ".clawboard/x",
            "inbox/.a.swp",
            "_log/n/1",
            "inbox/t.json",
            "shared/node-status.json",
            "roles/active.json",
        ] {
            assert!(p.is_excluded(path), "{path}");
        }
        for path in ["tasks/t/task.json", "gm/decisions.md", "inbox/rejected", "inbox/rejected/t.json"] {
            assert!(!p.is_excluded(path), "{path}");
        }
        let mut s = SyncSettings::local_default().unwrap();
        s.exclude = vec!["[".into()];
        let e = state(s).err().unwrap();
        assert!(e.to_string().contains("sync.exclude[0]"), "{e}");
    }
}
