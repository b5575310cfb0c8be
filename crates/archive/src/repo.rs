//! The git side: a bare repository in `.clawboard/archive/memory.git` whose `memory`
//! branch is built straight from blobs and trees (no work tree, no index on disk),
//! one commit per run that changed something, pushed to `archive.remote` without
//! ever forcing: a rejected push fetches, merges and tries again.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use clawboard_core::formats::{KnowledgeSync, NodeKnowledge};
use clawboard_core::{RelPath, Store, Timestamp};
use git2::{
    Cred, CredentialType, ErrorClass, ErrorCode, FetchOptions, IndexEntry, IndexTime, ObjectType, Oid, PushOptions,
    RemoteCallbacks, Repository, Signature, Tree,
};
use serde::{Deserialize, Serialize};

use crate::extract::{self, Merge, Stamp};
use crate::{Error, Result};

/// Where the archive keeps its repository and state, under the root.
pub const DIR: &str = ".clawboard/archive";
const REPO: &str = "memory.git";
const SOURCES: &str = "sources.json";
const STATUS: &str = "status.json";
const LOCK: &str = "lock";
const FILE_MODE: i32 = 0o100644;

/// Where the token for an HTTPS remote comes from.
#[derive(Clone)]
pub enum Token {
    /// An environment variable: its name, and its value when the config was resolved.
    Env {
        var: String,
        value: String,
    },
    /// A file holding the token (read when the remote asks, so it can be rotated).
    File(PathBuf),
    None,
}

/// Never prints the token.
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Env { var, .. } => write!(f, "Env({var}, <redacted>)"),
            Token::File(p) => write!(f, "File({})", p.display()),
            Token::None => write!(f, "None"),
        }
    }
}

/// `[archive]`. Its `Debug` never prints the token, nor credentials in the remote URL.
#[derive(Clone)]
pub struct ArchiveSettings {
    /// This node's id: in commit messages and conflict names.
    pub node: String,
    pub branch: String,
    /// `https://…` or an SSH URL; `None` keeps the commits local.
    pub remote: Option<String>,
    pub author_name: String,
    pub author_email: String,
    /// The user name sent with a token (`x-access-token` suits GitHub), unless the URL has one.
    pub username: String,
    pub token: Token,
    /// A private key for SSH remotes; without one, the SSH agent.
    pub ssh_key: Option<PathBuf>,
    /// Source files larger than this are refused (GitHub refuses 100 MiB).
    pub max_file_bytes: u64,
    /// Push attempts before a run gives up (each rejected one fetches and merges).
    pub push_attempts: u32,
    pub retry_base: Duration,
}

impl std::fmt::Debug for ArchiveSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveSettings")
            .field("node", &self.node)
            .field("branch", &self.branch)
            .field("remote", &self.remote.as_deref().map(redact))
            .field("username", &self.username)
            .field("token", &self.token)
            .field("ssh_key", &self.ssh_key)
            .finish_non_exhaustive()
    }
}

impl ArchiveSettings {
    pub fn local(node: &str) -> ArchiveSettings {
        ArchiveSettings {
            node: node.to_owned(),
            branch: "memory".into(),
            remote: None,
            author_name: "clawboard".into(),
            author_email: "clawboard@localhost".into(),
            username: "x-access-token".into(),
            token: Token::None,
            ssh_key: None,
            max_file_bytes: 50 << 20,
            push_attempts: 5,
            retry_base: Duration::from_millis(200),
        }
    }
}

/// A URL without any user or password in it.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // scp-like `git@github.com:owner/repo.git`: the user is not a secret.
        return url.to_owned();
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(at) = authority.rfind('@') {
        return format!("{scheme}://{}", &rest[at + 1..]);
    }
    // A password with a raw `/` in it (not a valid URL, but not to be printed either).
    match rest.rfind('@') {
        Some(at) if rest[..at].contains(':') => format!("{scheme}://{}", &rest[at + 1..]),
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
    /// Commits on the branch the remote has not accepted yet (0 without a remote).
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
    pub problems: Vec<String>,
    pub elapsed_ms: u64,
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

/// The sources cache: each source's stamp when its outputs went into `commit`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Sources {
    #[serde(default)]
    commit: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, Stamp>,
}

/// A repository's first commit writes its objects to memory (a mempack backend) and
/// then to disk as one pack file, before any reference points at them: one file
/// instead of one per object (10,000 on a big first archive). Later commits write
/// loose objects: a mempack dump holds every object its commits reach, the whole
/// tree again, which is only right when the tree is all new.
struct Pack<'o> {
    odb: &'o git2::Odb<'o>,
    mem: Option<git2::Mempack<'o>>,
}

impl Pack<'_> {
    fn flush(&self, repo: &Repository, path: &Path) -> Result<()> {
        use std::io::Write;
        let Some(mem) = &self.mem else { return Ok(()) };
        let g = || git_err(path, "write the pack");
        let mut buf = git2::Buf::new();
        mem.dump(repo, &mut buf).map_err(g())?;
        let mut w = self.odb.packwriter().map_err(g())?;
        w.write_all(&buf).map_err(|e| Error::io(path, e))?;
        w.commit().map_err(g())?;
        mem.reset().map_err(g())
    }
}

pub struct Archive {
    store: Store,
    dir: PathBuf,
    settings: ArchiveSettings,
    /// Set when the daemon stops: a run ends at its next step or backoff.
    stop: Arc<AtomicBool>,
}

fn git_err<W: Into<String>>(repo: &Path, what: W) -> impl FnOnce(git2::Error) -> Error + use<W> {
    let repo = repo.to_path_buf();
    let what = what.into();
    move |source| Error::Git { repo, what, source }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

impl Archive {
    /// The archive of the tree `store` writes to (its own files go to `.clawboard/archive/`).
    pub fn new(store: Store, settings: ArchiveSettings) -> Archive {
        let dir = store.root().join(DIR);
        Archive { store, dir, settings, stop: Arc::new(AtomicBool::new(false)) }
    }

    /// A flag that, once set, ends a run at its next step or backoff (the commits made
    /// so far stay; the push is retried on the next run).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    fn check_stop(&self) -> Result<()> {
        if self.stop.load(Ordering::SeqCst) { Err(Error::Stopped) } else { Ok(()) }
    }

    /// Sleeps `d`, in short steps, unless asked to stop.
    fn sleep(&self, d: Duration) -> Result<()> {
        let until = std::time::Instant::now() + d;
        while std::time::Instant::now() < until {
            self.check_stop()?;
            std::thread::sleep(Duration::from_millis(50).min(until - std::time::Instant::now()));
        }
        self.check_stop()
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
                tracing::info!("archive: another archive run holds {}; waiting for it", path.display());
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
        if let Ok(r) = &mut outcome
            && let Err(e) = self.record_knowledge(&status)
        {
            // The archive itself worked; the shared record of it did not.
            r.commit.problems.push(format!("shared/knowledge-sync.json not updated: {e}"));
        }
        match &outcome {
            Ok(r) => {
                status.problems = r.commit.problems.clone();
                if r.commit.problems.is_empty() {
                    status.last_error = None;
                    status.last_error_at = None;
                } else {
                    status.last_error =
                        Some(format!("{} problem(s): {}", r.commit.problems.len(), r.commit.problems.join("; ")));
                    status.last_error_at = Some(rfc3339(now));
                }
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
            self.check_stop()?;
            let push = self.push(repo, pack, now)?;
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

    fn empty_tree<'r>(&self, repo: &'r Repository) -> Result<Tree<'r>> {
        let g = git_err(&self.repo_path(), "write the empty tree");
        let id = repo.treebuilder(None).and_then(|b| b.write()).map_err(g)?;
        repo.find_tree(id).map_err(git_err(&self.repo_path(), "read the empty tree"))
    }

    /// Extracts what changed since the last run onto the branch; commits when the
    /// tree differs from the head's.
    fn commit(&self, repo: &Repository, pack: &Pack<'_>, now: DateTime<Utc>) -> Result<CommitReport> {
        let started = std::time::Instant::now();
        let path = self.repo_path();
        let head = self.head(repo)?;
        let base = match head {
            Some(id) => repo.find_commit(id).and_then(|c| c.tree()).map_err(git_err(&path, "read the head"))?,
            None => self.empty_tree(repo)?,
        };
        let mut cache: Sources = self.read_json(SOURCES);
        // The cache holds only if its commit is in the branch's history.
        let valid = match (head, cache.commit.as_deref().and_then(|c| Oid::from_str(c).ok())) {
            (Some(h), Some(c)) => h == c || repo.graph_descendant_of(h, c).unwrap_or(false),
            _ => false,
        };
        if !valid {
            cache.sources.clear();
        }
        let t_cache = started.elapsed();
        let sources = extract::scan(self.store.root())?;
        let t_scan = started.elapsed();
        let mut report = CommitReport { sources: sources.len(), ..CommitReport::default() };
        let mut outputs = vec![extract::Output {
            path: "memory/README.md".into(),
            bytes: extract::README.as_bytes().to_vec(),
            merge: Merge::Replace,
        }];
        let mut stamped: Vec<(String, Stamp)> = Vec::new();
        for (source, stamp) in &sources {
            if cache.sources.get(source) == Some(stamp) {
                continue;
            }
            report.read += 1;
            match extract::extract(&self.store, source, self.settings.max_file_bytes) {
                Ok(o) => {
                    outputs.extend(o);
                    stamped.push((source.clone(), *stamp));
                }
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        let t_extract = started.elapsed();
        let mut update = git2::build::TreeUpdateBuilder::new();
        // Two sources may write lines into the same file: gather them first.
        let mut merged: BTreeMap<String, (Vec<u8>, Merge)> = BTreeMap::new();
        for o in outputs {
            match merged.get_mut(&o.path) {
                Some((bytes, Merge::Lines)) => *bytes = extract::union_lines(bytes, &o.bytes),
                _ => {
                    merged.insert(o.path, (o.bytes, o.merge));
                }
            }
        }
        // Each directory's tree is read once: libgit2 does not cache large trees, and
        // a path lookup per file would parse `memory/roles/{role}/` again each time.
        let mut dirs: HashMap<String, Option<Tree<'_>>> = HashMap::new();
        for (file, (bytes, merge)) in merged {
            let (dir, name) = file.rsplit_once('/').unwrap_or(("", file.as_str()));
            let tree = dirs.entry(dir.to_owned()).or_insert_with(|| {
                base.get_path(Path::new(dir)).ok().and_then(|e| e.to_object(repo).ok()?.into_tree().ok())
            });
            let old = tree.as_ref().and_then(|t| t.get_name(name)).map(|e| e.id());
            let bytes = match (merge, old) {
                (Merge::Lines, Some(old)) => {
                    let blob = repo.find_blob(old).map_err(git_err(&path, format!("read {file}")))?;
                    extract::union_lines(blob.content(), &bytes)
                }
                _ => bytes,
            };
            if bytes.len() as u64 > self.settings.max_file_bytes {
                let e = Error::TooLarge { path: file, size: bytes.len() as u64, limit: self.settings.max_file_bytes };
                report.problems.push(e.to_string());
                continue;
            }
            let id = Oid::hash_object(ObjectType::Blob, &bytes).map_err(git_err(&path, "hash"))?;
            if old == Some(id) {
                continue;
            }
            repo.blob(&bytes).map_err(git_err(&path, format!("write {file}")))?;
            update.upsert(file.as_str(), id, git2::FileMode::Blob);
            report.changed += 1;
        }
        let t_blobs = started.elapsed();
        let mut new_head = head;
        if report.changed > 0 {
            let tree_id = update.create_updated(repo, &base).map_err(git_err(&path, "build the tree"))?;
            if tree_id != base.id() {
                let tree = repo.find_tree(tree_id).map_err(git_err(&path, "read the tree"))?;
                let message = format!("memory: sync from {} at {}", self.settings.node, rfc3339(now));
                let id = self.commit_tree(repo, pack, &tree, head.into_iter().collect(), &message, now)?;
                report.commit = Some(id.to_string());
                new_head = Some(id);
            }
        }
        cache.sources.extend(stamped);
        cache.commit = new_head.map(|h| h.to_string());
        let t_commit = started.elapsed();
        self.write_json(SOURCES, &cache)?;
        tracing::debug!(?t_cache, ?t_scan, ?t_extract, ?t_blobs, ?t_commit, total = ?started.elapsed(), "archive: commit phases");
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes a commit of `tree` and moves the branch to it, provided the branch is
    /// still where `parents[0]` says (another process moved it: an error, no loss).
    fn commit_tree(
        &self,
        repo: &Repository,
        pack: &Pack<'_>,
        tree: &Tree<'_>,
        parents: Vec<Oid>,
        message: &str,
        now: DateTime<Utc>,
    ) -> Result<Oid> {
        let path = self.repo_path();
        let when = git2::Time::new(now.timestamp(), 0);
        let sig = Signature::new(&self.settings.author_name, &self.settings.author_email, &when)
            .map_err(git_err(&path, "the commit author (archive.author_name, archive.author_email)"))?;
        let parent_commits = parents
            .iter()
            .map(|p| repo.find_commit(*p))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(git_err(&path, "read a parent commit"))?;
        let refs: Vec<&git2::Commit<'_>> = parent_commits.iter().collect();
        let id = repo.commit(None, &sig, &sig, message, tree, &refs).map_err(git_err(&path, "commit"))?;
        pack.flush(repo, &path)?;
        self.move_branch(repo, parents.first().copied(), id, message)?;
        Ok(id)
    }

    fn move_branch(&self, repo: &Repository, from: Option<Oid>, to: Oid, why: &str) -> Result<()> {
        let g = git_err(&self.repo_path(), "move the branch");
        match from {
            Some(old) => repo.reference_matching(&self.branch_ref(), to, true, old, why).map(|_| ()),
            None => repo.reference(&self.branch_ref(), to, false, why).map(|_| ()),
        }
        .map_err(g)
    }

    /// Pushes the branch; a rejection fetches, merges and tries again, with backoff.
    fn push(&self, repo: &Repository, pack: &Pack<'_>, now: DateTime<Utc>) -> Result<PushReport> {
        let started = std::time::Instant::now();
        let mut report = PushReport::default();
        let Some(url) = self.settings.remote.clone() else { return Ok(report) };
        let Some(_) = self.head(repo)? else { return Ok(report) };
        for attempt in 1..=self.settings.push_attempts.max(1) {
            report.attempts = attempt;
            let head = self.head(repo)?;
            match self.try_push(repo, &url)? {
                None => {
                    if let Some(h) = head {
                        let g = git_err(&self.repo_path(), "record the pushed head");
                        repo.reference(&self.tracking_ref(), h, true, "pushed").map_err(g)?;
                        report.pushed = Some(h.to_string());
                    }
                    report.elapsed_ms = started.elapsed().as_millis() as u64;
                    return Ok(report);
                }
                Some(why) => {
                    let before = self.theirs(repo);
                    self.fetch(repo)?;
                    // Only a race with another pusher is worth a merge and another try;
                    // a hook, a protected branch or a size limit says no every time.
                    if !is_race(&why) && self.theirs(repo) == before {
                        return Err(Error::Remote {
                            remote: redact(&url),
                            what: "push".into(),
                            message: format!("the remote refused it: {why}"),
                        });
                    }
                    tracing::info!(attempt, "archive: another node pushed first ({why}); merging");
                    if self.merge(repo, pack, now)? {
                        report.merges += 1;
                    }
                    if attempt < self.settings.push_attempts {
                        let backoff = self.settings.retry_base * 2u32.saturating_pow(attempt - 1);
                        // A little jitter, so that two nodes that collided do not collide again.
                        let jitter = u64::from(std::process::id() % 97) * backoff.as_millis() as u64 / 200;
                        self.sleep(backoff + Duration::from_millis(jitter))?;
                    }
                }
            }
        }
        Err(Error::StillRejected { remote: redact(&url), attempts: report.attempts })
    }

    /// One push; `Ok(Some(reason))` when the remote refused it as not a fast-forward.
    fn try_push(&self, repo: &Repository, url: &str) -> Result<Option<String>> {
        let auth = Auth::new(&self.settings);
        let rejected: RefCell<Option<String>> = RefCell::new(None);
        let mut cb = RemoteCallbacks::new();
        cb.credentials(|u, user, allowed| auth.credentials(u, user, allowed));
        cb.push_update_reference(|name, status| {
            if let Some(s) = status {
                *rejected.borrow_mut() = Some(format!("{name}: {s}"));
            }
            Ok(())
        });
        let mut opts = PushOptions::new();
        opts.remote_callbacks(cb);
        let spec = format!("{0}:{0}", self.branch_ref());
        let mut remote = repo.remote_anonymous(url).map_err(|e| self.remote_error("open", e, &auth))?;
        let result = remote.push(&[spec.as_str()], Some(&mut opts));
        drop(opts);
        match result {
            Ok(()) => Ok(rejected.into_inner()),
            Err(e) if e.code() == ErrorCode::NotFastForward => Ok(Some(e.message().to_owned())),
            Err(e) => Err(self.remote_error("push", e, &auth)),
        }
    }

    /// Fetches the remote branch into `refs/remotes/origin/{branch}`; `false` when the
    /// remote has no such branch yet.
    fn fetch(&self, repo: &Repository) -> Result<bool> {
        let Some(url) = self.settings.remote.as_deref() else { return Ok(false) };
        let auth = Auth::new(&self.settings);
        let mut cb = RemoteCallbacks::new();
        cb.credentials(|u, user, allowed| auth.credentials(u, user, allowed));
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(cb);
        let spec = format!("+{}:{}", self.branch_ref(), self.tracking_ref());
        let mut remote = repo.remote_anonymous(url).map_err(|e| self.remote_error("open", e, &auth))?;
        let result = remote.fetch(&[spec.as_str()], Some(&mut opts), Some("archive: fetch"));
        drop(opts);
        result.map_err(|e| self.remote_error("fetch", e, &auth))?;
        // The remote's head, from the refs it advertised (an anonymous remote may not update tips).
        let theirs = remote
            .list()
            .map_err(|e| self.remote_error("list", e, &auth))?
            .iter()
            .find(|h| h.name() == self.branch_ref())
            .map(|h| h.oid());
        match theirs {
            Some(id) => {
                let g = git_err(&self.repo_path(), "record the fetched head");
                repo.reference(&self.tracking_ref(), id, true, "fetched").map_err(g)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn theirs(&self, repo: &Repository) -> Option<Oid> {
        repo.refname_to_id(&self.tracking_ref()).ok()
    }

    /// A new local branch starts at the fetched remote head.
    fn fast_forward_new(&self, repo: &Repository) -> Result<()> {
        if let (None, Some(theirs)) = (self.head(repo)?, self.theirs(repo)) {
            self.move_branch(repo, None, theirs, "archive: start from the remote branch")?;
        }
        Ok(())
    }

    /// Merges the fetched remote head into the branch; `true` when a merge commit was made.
    /// Paths differ per task and node, so merges are clean; where both sides wrote one
    /// path differently, theirs keeps the name and ours is kept beside it as
    /// `NAME.conflict-{node}.EXT` (JSON-lines files take the union of their lines).
    fn merge(&self, repo: &Repository, pack: &Pack<'_>, now: DateTime<Utc>) -> Result<bool> {
        let path = self.repo_path();
        let Some(theirs) = self.theirs(repo) else { return Ok(false) };
        let Some(ours) = self.head(repo)? else {
            self.fast_forward_new(repo)?;
            return Ok(false);
        };
        if ours == theirs || repo.graph_descendant_of(ours, theirs).map_err(git_err(&path, "compare histories"))? {
            return Ok(false);
        }
        if repo.graph_descendant_of(theirs, ours).map_err(git_err(&path, "compare histories"))? {
            self.move_branch(repo, Some(ours), theirs, "archive: fast-forward")?;
            return Ok(false);
        }
        let tree_of = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).map_err(git_err(&path, "read a tree"));
        let base = match repo.merge_base(ours, theirs) {
            Ok(b) => tree_of(b)?,
            Err(e) if e.code() == ErrorCode::NotFound => self.empty_tree(repo)?,
            Err(e) => return Err(git_err(&path, "find the merge base")(e)),
        };
        let mut index = repo
            .merge_trees(&base, &tree_of(ours)?, &tree_of(theirs)?, Some(git2::MergeOptions::new().find_renames(false)))
            .map_err(git_err(&path, "merge"))?;
        if index.has_conflicts() {
            self.resolve(repo, &mut index)?;
        }
        let tree_id = index.write_tree_to(repo).map_err(git_err(&path, "write the merged tree"))?;
        let tree = repo.find_tree(tree_id).map_err(git_err(&path, "read the merged tree"))?;
        let remote = self.settings.remote.as_deref().map(redact).unwrap_or_default();
        let message = format!("memory: merge {} into {} at {}", remote, self.settings.node, rfc3339(now));
        self.commit_tree(repo, pack, &tree, vec![ours, theirs], &message, now)?;
        Ok(true)
    }

    fn resolve(&self, repo: &Repository, index: &mut git2::Index) -> Result<()> {
        let path = self.repo_path();
        let conflicts: Vec<git2::IndexConflict> = index
            .conflicts()
            .map_err(git_err(&path, "list conflicts"))?
            .collect::<std::result::Result<_, _>>()
            .map_err(git_err(&path, "list conflicts"))?;
        for c in conflicts {
            let Some(any) = c.our.as_ref().or(c.their.as_ref()).or(c.ancestor.as_ref()) else { continue };
            let file = String::from_utf8_lossy(&any.path).into_owned();
            // Every path the conflict has entries at (they differ only after a rename).
            let paths: std::collections::BTreeSet<Vec<u8>> =
                [&c.ancestor, &c.our, &c.their].into_iter().flatten().map(|e| e.path.clone()).collect();
            for p in paths {
                let p = String::from_utf8_lossy(&p).into_owned();
                index.conflict_remove(Path::new(&p)).map_err(git_err(&path, format!("resolve {p}")))?;
            }
            let add = |index: &mut git2::Index, name: &str, id: Oid| {
                index.add(&entry(name, id)).map_err(git_err(&path, format!("resolve {name}")))
            };
            match (c.our, c.their) {
                (Some(o), Some(t)) if extract::merge_of(&file) == Merge::Lines => {
                    let read = |id| repo.find_blob(id).map(|b| b.content().to_vec());
                    let (a, b) = (read(o.id), read(t.id));
                    let bytes = extract::union_lines(
                        &a.map_err(git_err(&path, format!("read {file}")))?,
                        &b.map_err(git_err(&path, format!("read {file}")))?,
                    );
                    let id = repo.blob(&bytes).map_err(git_err(&path, format!("write {file}")))?;
                    add(index, &file, id)?;
                }
                (Some(o), Some(t)) => {
                    add(index, &file, t.id)?;
                    add(index, &conflict_name(&file, &self.settings.node), o.id)?;
                    tracing::warn!(file, "archive: another node archived this file differently; kept both");
                }
                // Nothing is ever deleted from the archive: a side that lost the file keeps the other's.
                (Some(one), None) | (None, Some(one)) => add(index, &file, one.id)?,
                (None, None) => {}
            }
        }
        Ok(())
    }

    fn remote_error(&self, what: &str, e: git2::Error, auth: &Auth) -> Error {
        let remote = self.settings.remote.as_deref().map(redact).unwrap_or_default();
        let http_auth = e.class() == ErrorClass::Http
            && (e.message().contains("401") || e.message().contains("403") || e.message().contains("authentication"));
        if auth.refused.get() || e.code() == ErrorCode::Auth || http_auth {
            return Error::Auth { remote, tried: auth.describe() };
        }
        let mut message = e.message().to_owned();
        if e.class() == ErrorClass::Ssh && message.contains("hostkey") {
            message.push_str(
                " (the host's key must be in ~/.ssh/known_hosts of the user clawboard runs as: \
                 `ssh-keyscan HOST >> ~/.ssh/known_hosts`, with -p PORT for another port)",
            );
        }
        Error::Remote { remote, what: what.into(), message }
    }

    /// `clawboard archive status`.
    pub fn status(&self) -> Result<Status> {
        let file: StatusFile = self.read_json(STATUS);
        let path = self.repo_path();
        let mut status = Status {
            repository: path.display().to_string(),
            branch: self.settings.branch.clone(),
            remote: self.settings.remote.as_deref().map(redact),
            head: None,
            commits: 0,
            pending: 0,
            file,
        };
        if !path.join("HEAD").exists() {
            return Ok(status);
        }
        let repo = self.repo()?;
        let Some(head) = self.head(&repo)? else { return Ok(status) };
        status.head = Some(head.to_string());
        let g = || git_err(&path, "walk the history");
        let mut walk = repo.revwalk().map_err(g())?;
        walk.push(head).map_err(g())?;
        status.commits = walk.count();
        if self.settings.remote.is_some() {
            let mut walk = repo.revwalk().map_err(g())?;
            walk.push(head).map_err(g())?;
            if let Some(pushed) = pushed_head(&repo, &status.file) {
                walk.hide(pushed).map_err(g())?;
            }
            status.pending = walk.count();
        }
        Ok(status)
    }

    /// Whether the memory of task `task_id` is safely archived: every file extraction
    /// makes of its `memory-harvest.json` (`memory/roles/{role}/{task}.json`) is in
    /// the branch head the remote accepted (with `archive.remote`), or in the local
    /// head (without). `Ok(Err(why))` when not; a task without a harvest has nothing
    /// to archive.
    pub fn task_archived(&self, task_id: &str) -> Result<std::result::Result<(), String>> {
        let rel = clawboard_core::RelPath::new(&clawboard_core::layout::task_file(
            task_id,
            clawboard_core::layout::HARVEST_FILE,
        ))?;
        let harvest: clawboard_core::formats::MemoryHarvest = match self.store.read(&rel) {
            Ok(h) => h,
            Err(clawboard_core::Error::NotFound { .. }) => return Ok(Ok(())),
            Err(e) => return Ok(Err(format!("its memory harvest cannot be read: {e}"))),
        };
        let wanted: std::collections::BTreeSet<String> =
            harvest.experiences.iter().map(|e| format!("memory/roles/{}/{task_id}.json", e.role_id)).collect();
        if wanted.is_empty() {
            return Ok(Ok(()));
        }
        let path = self.repo_path();
        if !path.join("HEAD").exists() {
            return Ok(Err("its memory harvest is not archived yet (no archive commit so far)".into()));
        }
        let repo = self.repo()?;
        let (target, what) = if self.settings.remote.is_some() {
            let status: StatusFile = self.read_json(STATUS);
            (pushed_head(&repo, &status), "a pushed archive commit")
        } else {
            (self.head(&repo)?, "an archive commit")
        };
        let Some(target) = target else {
            return Ok(Err(format!("its memory harvest is not in {what} yet (nothing pushed so far)")));
        };
        let tree = repo.find_commit(target).and_then(|c| c.tree()).map_err(git_err(&path, "read the archived tree"))?;
        let missing: Vec<&String> = wanted.iter().filter(|p| tree.get_path(Path::new(p.as_str())).is_err()).collect();
        match missing.first() {
            None => Ok(Ok(())),
            Some(first) => Ok(Err(format!(
                "its memory harvest is not in {what} yet ({} of {} files missing, e.g. {first})",
                missing.len(),
                wanted.len()
            ))),
        }
    }

    /// The newest `n` commits of the branch.
    pub fn log(&self, n: usize) -> Result<Vec<LogEntry>> {
        let path = self.repo_path();
        if !path.join("HEAD").exists() {
            return Ok(Vec::new());
        }
        let repo = self.repo()?;
        let Some(head) = self.head(&repo)? else { return Ok(Vec::new()) };
        let g = || git_err(&path, "walk the history");
        let pushed = pushed_head(&repo, &self.read_json::<StatusFile>(STATUS));
        let mut walk = repo.revwalk().map_err(g())?;
        walk.push(head).map_err(g())?;
        walk.set_sorting(git2::Sort::TIME | git2::Sort::TOPOLOGICAL).map_err(g())?;
        let mut out = Vec::new();
        for id in walk.take(n) {
            let id = id.map_err(g())?;
            let c = repo.find_commit(id).map_err(g())?;
            let tree = c.tree().map_err(g())?;
            let parent = c.parents().next().and_then(|p| p.tree().ok());
            let files =
                repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), None).map(|d| d.deltas().len()).map_err(g())?;
            let time = Utc.timestamp_opt(c.time().seconds(), 0).single().map(rfc3339).unwrap_or_default();
            out.push(LogEntry {
                id: id.to_string(),
                time,
                author: c.author().name().unwrap_or("?").to_owned(),
                message: c.summary().unwrap_or("").to_owned(),
                files,
                pushed: pushed.is_some_and(|p| p == id || repo.graph_descendant_of(p, id).unwrap_or(false)),
            });
        }
        Ok(out)
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
        let node = clawboard_core::Id::new(self.settings.node.as_str())
            .map_err(|e| Error::Invalid { path: "node id".into(), reason: e.to_string() })?;
        let rel = RelPath::new("shared/knowledge-sync.json")?;
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

/// Whether a refused push lost a race with another pusher (rather than being refused
/// for good): libgit2's own fast-forward check, or receive-pack's answers when the
/// branch moved under it.
fn is_race(why: &str) -> bool {
    let why = why.to_lowercase();
    [
        "fastforward",
        "fast-forward",
        "fetch first",
        "not present locally",
        "failed to lock",
        "cannot lock",
        "stale info",
        "failed to update ref",
    ]
    .iter()
    .any(|s| why.contains(s))
}

/// The branch head the remote last accepted, if the repository still has it.
fn pushed_head(repo: &Repository, status: &StatusFile) -> Option<Oid> {
    status.last_pushed.as_deref().and_then(|p| Oid::from_str(p).ok()).filter(|p| repo.find_commit(*p).is_ok())
}

/// `dir/name.ext` → `dir/name.conflict-{node}.ext`.
pub fn conflict_name(path: &str, node: &str) -> String {
    let (dir, name) = path.rsplit_once('/').map_or(("", path), |(d, n)| (d, n));
    let renamed = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.conflict-{node}.{ext}"),
        _ => format!("{name}.conflict-{node}"),
    };
    if dir.is_empty() { renamed } else { format!("{dir}/{renamed}") }
}

fn entry(path: &str, id: Oid) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(0, 0),
        mtime: IndexTime::new(0, 0),
        dev: 0,
        ino: 0,
        mode: FILE_MODE as u32,
        uid: 0,
        gid: 0,
        file_size: 0,
        id,
        flags: path.len().min(0xfff) as u16,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// The credentials callback: one try per credential, then a clear failure.
struct Auth<'s> {
    settings: &'s ArchiveSettings,
    tried: RefCell<String>,
    calls: Cell<u32>,
    refused: Cell<bool>,
}

impl<'s> Auth<'s> {
    fn new(settings: &'s ArchiveSettings) -> Auth<'s> {
        Auth { settings, tried: RefCell::new("no credential".into()), calls: Cell::new(0), refused: Cell::new(false) }
    }

    fn describe(&self) -> String {
        self.tried.borrow().clone()
    }

    fn credentials(
        &self,
        url: &str,
        user_from_url: Option<&str>,
        allowed: CredentialType,
    ) -> std::result::Result<Cred, git2::Error> {
        let refuse = |tried: String, why: &str| {
            *self.tried.borrow_mut() = tried;
            self.refused.set(true);
            Err(git2::Error::from_str(why))
        };
        if allowed == CredentialType::USERNAME {
            // SSH asks for the user name before the key: not a credential yet.
            return Cred::username(user_from_url.unwrap_or("git"));
        }
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() > 1 {
            // libgit2 asks again only when the last credential was refused.
            self.refused.set(true);
            return Err(git2::Error::from_str("the remote refused the credential"));
        }
        let http = url.starts_with("https://") || url.starts_with("http://");
        if http {
            // The token goes to HTTP(S) remotes only, never to an SSH server as a password.
            if !allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
                return refuse(format!("nothing: the remote asks for {allowed:?}"), "unsupported authentication");
            }
            let user = user_from_url.unwrap_or(&self.settings.username).to_owned();
            let (token, source) = match &self.settings.token {
                Token::Env { var, value } => (value.trim().to_owned(), format!("the token in ${var}")),
                Token::File(path) => match std::fs::read_to_string(path) {
                    Ok(t) => (t.trim().to_owned(), format!("the token in {}", path.display())),
                    Err(e) => {
                        let tried = format!("the token file {} (unreadable: {e})", path.display());
                        return refuse(tried, "the token file is unreadable");
                    }
                },
                Token::None => {
                    let tried = "no token (set CLAWBOARD_GIT_TOKEN or GITHUB_TOKEN, or archive.token_file)";
                    return refuse(tried.into(), "no token configured");
                }
            };
            *self.tried.borrow_mut() = format!("{source} as user {user:?}");
            return Cred::userpass_plaintext(&user, &token);
        }
        let user = user_from_url.unwrap_or("git");
        if !allowed.contains(CredentialType::SSH_KEY) {
            return refuse(
                format!("nothing: the SSH server asks for {allowed:?}, not a key"),
                "unsupported authentication",
            );
        }
        match &self.settings.ssh_key {
            Some(key) => {
                *self.tried.borrow_mut() = format!("the SSH key {} as user {user:?}", key.display());
                Cred::ssh_key(user, None, key, None)
            }
            None => {
                *self.tried.borrow_mut() = format!("the SSH agent as user {user:?}");
                Cred::ssh_key_from_agent(user)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(redact("https://user:secret@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("https://github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("http://t@127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(redact("git@github.com:o/r.git"), "git@github.com:o/r.git");
        assert_eq!(redact("https://u:p/a@ss@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("https://github.com/o/r@v.git"), "https://github.com/o/r@v.git");
        assert_eq!(redact("ssh://git@github.com:22/o/r.git"), "ssh://github.com:22/o/r.git");
    }

    fn settings(token: Token) -> ArchiveSettings {
        ArchiveSettings { token, ..ArchiveSettings::local("n1") }
    }

    #[test]
    fn ssh_gets_the_user_name_then_a_key_and_never_the_token() {
        let s = settings(Token::Env { var: "GITHUB_TOKEN".into(), value: "secret".into() });
        let auth = Auth::new(&s);
        let url = "ssh://github.com/o/r.git";
        assert!(auth.credentials(url, None, CredentialType::USERNAME).is_ok());
        // A server offering both passwords and keys gets the agent, not the token.
        let both = CredentialType::SSH_KEY | CredentialType::USER_PASS_PLAINTEXT;
        let _ = auth.credentials(url, Some("git"), both);
        assert_eq!(auth.describe(), "the SSH agent as user \"git\"");
        assert!(!auth.refused.get());
        // Asked again: the last one was refused.
        assert!(auth.credentials(url, Some("git"), both).is_err());
        assert!(auth.refused.get());
    }

    #[test]
    fn https_gets_the_token_once_and_names_where_it_came_from() {
        let s = settings(Token::Env { var: "CLAWBOARD_GIT_TOKEN".into(), value: " t0k \n".into() });
        let auth = Auth::new(&s);
        let url = "https://github.com/o/r.git";
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_ok());
        assert_eq!(auth.describe(), "the token in $CLAWBOARD_GIT_TOKEN as user \"x-access-token\"");
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_err());
        assert!(!format!("{s:?}").contains("t0k"), "Debug must not print the token");
        let none = settings(Token::None);
        let auth = Auth::new(&none);
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_err());
        assert!(auth.describe().starts_with("no token (set CLAWBOARD_GIT_TOKEN"), "{}", auth.describe());
    }

    #[test]
    fn conflict_names_keep_the_extension() {
        assert_eq!(conflict_name("memory/gm/decisions.md", "n1"), "memory/gm/decisions.conflict-n1.md");
        assert_eq!(conflict_name("memory/x", "n1"), "memory/x.conflict-n1");
        assert_eq!(conflict_name(".hidden", "n1"), ".hidden.conflict-n1");
    }
}
