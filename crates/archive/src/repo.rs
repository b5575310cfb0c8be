//! The git side: a bare repository in `.clawboard/archive/memory.git` whose `memory`
//! branch is built straight from blobs and trees (no work tree, no index on disk),
//! one commit per run that changed something, pushed to `archive.remote` without
//! ever forcing: a rejected push fetches, merges and tries again.
//!
//! Here: the run (lock, commit, push, record the outcome) and the state files; the
//! settings are [`crate::settings`]. [`commit`] builds and commits trees, [`remote`] talks to the
//! remote (push, fetch, merge, credentials), [`status`] reads the archive back.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clawboard_core::formats::{KnowledgeSync, NodeKnowledge};
use clawboard_core::{RelPath, Store, Timestamp, layout};
use git2::{ErrorCode, Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::{ArchiveSettings, Error, Result};

mod commit;
mod remote;
mod status;

use commit::Pack;
pub use remote::{RemoteProbe, conflict_name, probe_remote};
pub use status::Archived;

/// Where the archive keeps its repository and state, under the root.
pub const DIR: &str = layout::ARCHIVE;
const REPO: &str = "memory.git";
const SOURCES: &str = "sources.json";
const STATUS: &str = "status.json";
const LOCK: &str = "lock";
const FILE_MODE: i32 = 0o100644;

/// A URL without any user or password in it.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // scp-like `git@github.com:owner/repo.git`: the user is not a secret; a
        // `user:password@` before the last `@` is (a URL that lost its `://`).
        return match url.rfind('@') {
            Some(at) if url[..at].contains(':') => format!("***@{}", &url[at + 1..]),
            _ => url.to_owned(),
        };
    };
    // The credentials end at the last `@`: a password may hold a raw `@` or `/` (not
    // a valid URL, but not to be printed either). An `@` after a `/` with no `:`
    // before it is the path's (`…/repo@v.git`).
    match rest.rfind('@') {
        Some(at) if rest[..at].contains(':') || !rest[..at].contains('/') => {
            format!("{scheme}://{}", &rest[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// `.clawboard/archive/status.json` of the tree at `root` (empty when absent), read
/// without opening the repository.
pub fn read_status_file(root: &std::path::Path) -> StatusFile {
    std::fs::read(root.join(DIR).join(STATUS)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// The archive's own record of its runs (`.clawboard/archive/status.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit_at: Option<String>,
    /// The branch head the remote last accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pushed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_push_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
    /// Source files the last run could not archive, each with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// `clawboard archive status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub repository: String,
    pub branch: String,
    /// The remote, without credentials; `None` when commits stay local.
    pub remote: Option<String>,
    pub head: Option<String>,
    pub commits: usize,
    /// Commits on the branch the remote does not have yet, as far as this node knows:
    /// neither its last pushed head nor the remote's head as last fetched reaches them
    /// (0 without a remote).
    pub pending: usize,
    #[serde(flatten)]
    pub file: StatusFile,
}

/// One commit, for `clawboard archive log`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    pub id: String,
    pub time: String,
    pub author: String,
    pub message: String,
    pub files: usize,
    pub pushed: bool,
}

/// What one commit step did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitReport {
    /// The new commit, or `None` when the tree did not change.
    pub commit: Option<String>,
    pub sources: usize,
    /// Sources read this time (the others did not change since the last run).
    pub read: usize,
    /// Files on the branch added or changed.
    pub changed: usize,
    /// The changed files by what they are: the directory under `memory/` (`roles`,
    /// `cross-pollination`, `harvest`, `gm`, `reports`, `entries`) or the file's name.
    pub kinds: std::collections::BTreeMap<String, usize>,
    pub problems: Vec<String>,
    pub elapsed_ms: u64,
}

impl CommitReport {
    /// `3 file(s) changed: roles 2, harvest 1`.
    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        match kinds.is_empty() {
            true => format!("{} file(s) changed", self.changed),
            false => format!("{} file(s) changed: {}", self.changed, kinds.join(", ")),
        }
    }

    pub(crate) fn count(&mut self, file: &str) {
        let kind = file.strip_prefix("memory/").unwrap_or(file).split('/').next().unwrap_or(file);
        *self.kinds.entry(kind.to_owned()).or_default() += 1;
        self.changed += 1;
    }
}

/// What one push step did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushReport {
    pub pushed: Option<String>,
    pub attempts: u32,
    /// Merges with what other nodes pushed first.
    pub merges: u32,
    pub elapsed_ms: u64,
}

/// What `archive now` (and each scheduled run) did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunReport {
    pub commit: CommitReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushReport>,
}

pub struct Archive {
    store: Store,
    dir: PathBuf,
    settings: ArchiveSettings,
    /// This node's id: in commit messages, conflict names and `shared/knowledge-sync.json`.
    node: String,
    /// Set when the daemon stops: a run ends at its next step or backoff.
    stop: Arc<StopSignal>,
}

/// A flag a backoff's sleep wakes for.
#[derive(Default)]
struct StopSignal {
    stopped: Mutex<bool>,
    woken: Condvar,
}

fn git_err<W: Into<String>>(repo: &Path, what: W) -> impl FnOnce(git2::Error) -> Error + use<W> {
    let repo = repo.to_path_buf();
    let what = what.into();
    move |cause| Error::Git { repo, what, cause }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Archive {
    /// The archive of the tree `store` writes to (its own files go to `.clawboard/archive/`),
    /// kept by node `node`.
    pub fn new(store: Store, settings: ArchiveSettings, node: String) -> Archive {
        let dir = store.root().join(DIR);
        Archive { store, dir, settings, node, stop: Arc::default() }
    }

    /// Ends a run in progress (of this archive or a clone) at its next step,
    /// or at once if it waits out a backoff: the commits made so far stay; the
    /// push is retried on the next run.
    pub fn stop(&self) {
        *self.stop.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.stop.woken.notify_all();
    }

    fn check_stop(&self) -> Result<()> {
        if *self.stop.stopped.lock().unwrap_or_else(PoisonError::into_inner) { Err(Error::Stopped) } else { Ok(()) }
    }

    /// Sleeps `d`, unless asked to stop (then returns at once).
    fn sleep(&self, d: Duration) -> Result<()> {
        let stopped = self.stop.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (stopped, _) =
            self.stop.woken.wait_timeout_while(stopped, d, |stopped| !*stopped).unwrap_or_else(PoisonError::into_inner);
        if *stopped { Err(Error::Stopped) } else { Ok(()) }
    }

    pub fn settings(&self) -> &ArchiveSettings {
        &self.settings
    }

    fn repo_path(&self) -> PathBuf {
        self.dir.join(REPO)
    }

    /// The repository, created (bare, HEAD on the branch) on first use.
    fn repo(&self) -> Result<Repository> {
        let path = self.repo_path();
        let repo = if path.join("HEAD").exists() {
            Repository::open_bare(&path).map_err(git_err(&path, "open"))?
        } else {
            std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
            let mut opts = git2::RepositoryInitOptions::new();
            opts.bare(true).initial_head(&self.settings.branch);
            Repository::init_opts(&path, &opts).map_err(git_err(&path, "create"))?
        };
        // No file is ever merged line by line: two versions of one file are a conflict,
        // kept side by side (see `resolve`). An unset `merge` attribute does that.
        let attributes = path.join("info/attributes");
        if !attributes.exists() {
            let info = path.join("info");
            std::fs::create_dir_all(&info).map_err(|e| Error::io(&info, e))?;
            crate::write_state(&info, "attributes", b"* -merge\n")?;
        }
        Ok(repo)
    }

    /// One archive run at a time per tree (the daemon's and `archive now`).
    fn lock(&self) -> Result<File> {
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let path = self.dir.join(LOCK);
        let f =
            File::options().create(true).truncate(false).write(true).open(&path).map_err(|e| Error::io(&path, e))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::warn!("archive: another archive run holds {}; waiting for it", path.display());
                f.lock().map_err(|e| Error::io(&path, e))?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        Ok(f)
    }

    fn branch_ref(&self) -> String {
        format!("refs/heads/{}", self.settings.branch)
    }

    fn tracking_ref(&self) -> String {
        format!("refs/remotes/origin/{}", self.settings.branch)
    }

    fn read_json<T: Default + for<'de> Deserialize<'de>>(&self, name: &str) -> T {
        std::fs::read(self.dir.join(name)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<()> {
        let text =
            serde_json::to_vec(value).map_err(|e| Error::Invalid { path: name.into(), reason: e.to_string() })?;
        crate::write_state(&self.dir, name, &text)
    }

    /// Extracts, commits if anything changed, and pushes when a remote is configured.
    /// The outcome (and any error) is recorded for `archive status` and in
    /// `shared/knowledge-sync.json`.
    pub fn run(&self, now: DateTime<Utc>) -> Result<RunReport> {
        let _lock = self.lock()?;
        let repo = self.repo()?;
        let path = self.repo_path();
        if self.settings.remote.is_some() && self.head(&repo)?.is_none() {
            // A node's first run builds on what the other nodes archived already.
            if let Err(e) = self.fetch(&repo).and_then(|_| self.fast_forward_new(&repo)) {
                // The run goes on and commits locally; its push then reports the remote's
                // error (once, not twice).
                tracing::debug!("archive: cannot fetch the remote branch to start from: {e}");
            }
        }
        let odb = repo.odb().map_err(git_err(&path, "open the object database"))?;
        let mem = match self.head(&repo)? {
            None => Some(odb.add_new_mempack_backend(1000).map_err(git_err(&path, "open the object database"))?),
            Some(_) => None,
        };
        let pack = Pack { odb: &odb, mem };
        let mut status: StatusFile = self.read_json(STATUS);
        status.last_run_at = Some(rfc3339(now));
        let mut outcome = self.run_locked(&repo, &pack, now, &mut status);
        // A commit whose push failed is recorded as much as one that was pushed.
        let report = match &mut outcome {
            Ok(r) => Some(r),
            Err(Error::Unpushed { report, .. }) => Some(&mut **report),
            Err(_) => None,
        };
        if let Some(r) = report {
            if let Err(e) = self.record_knowledge(&status) {
                // The archive itself worked; the shared record of it did not.
                r.commit.problems.push(format!("{} not updated: {e}", layout::KNOWLEDGE_SYNC));
            }
            status.problems = r.commit.problems.clone();
        }
        match &outcome {
            Ok(r) if r.commit.problems.is_empty() => {
                status.last_error = None;
                status.last_error_at = None;
            }
            Ok(r) => {
                status.last_error =
                    Some(format!("{} problem(s): {}", r.commit.problems.len(), r.commit.problems.join("; ")));
                status.last_error_at = Some(rfc3339(now));
            }
            Err(e) => {
                status.last_error = Some(e.to_string());
                status.last_error_at = Some(rfc3339(now));
            }
        }
        self.write_json(STATUS, &status)?;
        outcome
    }

    fn run_locked(
        &self,
        repo: &Repository,
        pack: &Pack<'_>,
        now: DateTime<Utc>,
        status: &mut StatusFile,
    ) -> Result<RunReport> {
        let commit = self.commit(repo, pack, now)?;
        if let Some(id) = &commit.commit {
            status.last_commit = Some(id.clone());
            status.last_commit_at = Some(rfc3339(now));
        }
        let mut report = RunReport { commit, push: None };
        if self.settings.remote.is_some() {
            let push = match self.check_stop().and_then(|()| self.push(repo, pack, now)) {
                Ok(push) => push,
                // The commit is made: say so, with why it is not on the remote yet.
                Err(cause) if report.commit.commit.is_some() => {
                    return Err(Error::Unpushed { report: Box::new(report), cause: Box::new(cause) });
                }
                Err(e) => return Err(e),
            };
            if let Some(id) = &push.pushed {
                status.last_pushed = Some(id.clone());
                status.last_push_at = Some(rfc3339(now));
            }
            report.push = Some(push);
        }
        Ok(report)
    }

    fn head(&self, repo: &Repository) -> Result<Option<Oid>> {
        match repo.refname_to_id(&self.branch_ref()) {
            Ok(id) => Ok(Some(id)),
            Err(e) if e.code() == ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git_err(&self.repo_path(), "read the branch")(e)),
        }
    }

    /// Runs the harvests ([`crate::harvest::run`]) and, when they wrote something,
    /// records the time in this node's entry of `shared/knowledge-sync.json`.
    pub fn harvest(
        &self,
        now: DateTime<Utc>,
        settings: &crate::HarvestSettings,
        days: Option<Vec<chrono::NaiveDate>>,
    ) -> Result<crate::HarvestReport> {
        let report = crate::harvest::run(&self.store, now, settings, days)?;
        if !report.written.is_empty() {
            let at = Some(Timestamp::from_utc(now));
            self.update_knowledge(|e| {
                let changed = e.last_harvest_at != at;
                e.last_harvest_at = at.clone();
                changed
            })?;
        }
        Ok(report)
    }

    /// This node's archive state in `shared/knowledge-sync.json`.
    fn record_knowledge(&self, status: &StatusFile) -> Result<()> {
        let stamp = |s: &Option<String>| s.as_deref().and_then(|t| Timestamp::parse(t).ok());
        let (commit, commit_at, push_at) =
            (status.last_commit.clone(), stamp(&status.last_commit_at), stamp(&status.last_push_at));
        self.update_knowledge(|e| {
            let changed = e.last_archive_commit != commit
                || e.last_archive_commit_at != commit_at
                || e.last_archive_push_at != push_at;
            e.last_archive_commit = commit.clone();
            e.last_archive_commit_at = commit_at.clone();
            e.last_archive_push_at = push_at.clone();
            changed
        })
    }

    /// Changes this node's entry; writes the file only when `change` says it changed something.
    fn update_knowledge(&self, change: impl Fn(&mut NodeKnowledge) -> bool) -> Result<()> {
        let node = clawboard_core::Id::new(self.node.as_str())
            .map_err(|e| Error::Invalid { path: "node id".into(), reason: e.to_string() })?;
        let rel = RelPath::new(layout::KNOWLEDGE_SYNC)?;
        let mut probe = match self.store.read::<KnowledgeSync>(&rel) {
            Ok(k) => k.nodes.get(&node).cloned().unwrap_or_default(),
            Err(_) => NodeKnowledge::default(),
        };
        if !change(&mut probe) {
            return Ok(());
        }
        self.store.update_json(&rel, |k: &mut KnowledgeSync| {
            change(k.nodes.entry(node).or_default());
        })?;
        Ok(())
    }
}
