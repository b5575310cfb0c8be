//! Talking to `archive.remote`: push without ever forcing; a rejected push
//! fetches, merges (two versions of one file are kept side by side as a conflict
//! copy) and tries again with backoff; the credentials callback.

use std::cell::{Cell, RefCell};
use std::path::Path;

use chrono::{DateTime, Utc};
use git2::{
    Cred, CredentialType, ErrorClass, ErrorCode, FetchOptions, IndexEntry, IndexTime, Oid, PushOptions,
    RemoteCallbacks, Repository,
};

use super::{Archive, FILE_MODE, Pack, PushReport, git_err, redact, rfc3339};
use crate::extract::{self, Merge};
use crate::{ArchiveSettings, Error, Result};

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
            let Some(source) = &self.settings.token else {
                let tried = "no token (set CLAWBOARD_GIT_TOKEN or GITHUB_TOKEN, or archive.token_file)";
                return refuse(tried.into(), "no token configured");
            };
            let token = match source.read() {
                Ok(t) => t,
                Err(e) => return refuse(format!("no usable token: {e}"), "the token cannot be read"),
            };
            *self.tried.borrow_mut() = format!("the token in {} as user {user:?}", source.describe());
            return Cred::userpass_plaintext(&user, token.expose());
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

impl Archive {
    /// Pushes the branch; a rejection fetches, merges and tries again, with backoff.
    pub(super) fn push(&self, repo: &Repository, pack: &Pack<'_>, now: DateTime<Utc>) -> Result<PushReport> {
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
                    let fetched = self.fetch(repo);
                    // Only a race with another pusher (the refusal says so, or the
                    // branch moved) is worth a merge and another try; a hook, a
                    // protected branch or a size limit says no every time: its reason
                    // is the error, even when the fetch failed too.
                    let moved = fetched.is_ok() && self.theirs(repo) != before;
                    if !is_race(&why) && !moved {
                        return Err(Error::Remote {
                            remote: redact(&url),
                            what: "push".into(),
                            message: format!("the remote refused it: {why}"),
                        });
                    }
                    fetched?;
                    tracing::info!(attempt, "archive: another node pushed first ({why}); merging");
                    if self.merge(repo, pack, now)? {
                        report.merges += 1;
                    }
                    if attempt < self.settings.push_attempts {
                        self.sleep(self.settings.push_backoff.delay(attempt - 1))?;
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
    pub(super) fn fetch(&self, repo: &Repository) -> Result<bool> {
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
    pub(super) fn fast_forward_new(&self, repo: &Repository) -> Result<()> {
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
        let message = format!("memory: merge {} into {} at {}", remote, self.node, rfc3339(now));
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
                    add(index, &conflict_name(&file, &self.node), o.id)?;
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
        remote_error(&self.settings, what, e, auth)
    }
}

/// A failure talking to the remote: refused credentials as [`Error::Auth`],
/// naming what was tried; the rest as [`Error::Remote`].
fn remote_error(settings: &ArchiveSettings, what: &str, e: git2::Error, auth: &Auth) -> Error {
    let remote = settings.remote.as_deref().map(redact).unwrap_or_default();
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

/// What the remote said when asked as a push asks, without a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteProbe {
    /// The archive's branch is there already (else the first push makes it).
    pub branch_exists: bool,
    /// How the credential was given (`the token in $VAR as user …`).
    pub authenticated_with: String,
}

/// Connects to `settings.remote` for a push, authenticating as a push does, and
/// lists its refs: `None` without a remote. Checks reachability and credentials
/// (`clawboard doctor`); writes nothing.
pub fn probe_remote(settings: &ArchiveSettings) -> Result<Option<RemoteProbe>> {
    let Some(url) = settings.remote.as_deref() else { return Ok(None) };
    let auth = Auth::new(settings);
    let mut cb = RemoteCallbacks::new();
    cb.credentials(|u, user, allowed| auth.credentials(u, user, allowed));
    let mut remote = git2::Remote::create_detached(url).map_err(|e| remote_error(settings, "open", e, &auth))?;
    let branch = format!("refs/heads/{}", settings.branch);
    let branch_exists = {
        let conn = remote
            .connect_auth(git2::Direction::Push, Some(cb), None)
            .map_err(|e| remote_error(settings, "connect", e, &auth))?;
        let heads = conn.list().map_err(|e| remote_error(settings, "list", e, &auth))?;
        heads.iter().any(|h| h.name() == branch)
    };
    Ok(Some(RemoteProbe { branch_exists, authenticated_with: auth.describe() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawboard_core::secret::SecretSource;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(redact("https://user:secret@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("https://github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("http://t@127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(redact("git@github.com:o/r.git"), "git@github.com:o/r.git");
        assert_eq!(redact("https://u:p/a@ss@github.com/o/r.git"), "https://github.com/o/r.git");
        assert_eq!(redact("https://github.com/o/r@v.git"), "https://github.com/o/r@v.git");
        assert_eq!(redact("ssh://git@github.com:22/o/r.git"), "ssh://github.com:22/o/r.git");
        // A password with a raw `@` and `/`, and URLs that lost their `://`.
        assert_eq!(redact("https://alice:p@ss/w0rd@github.com/o/r.git"), "https://github.com/o/r.git");
        for broken in
            ["alice:S3CRET@github.com/o/r.git", "https:/alice:S3CRET@github.com/o/r.git", "https//a:S3CRET@h/r"]
        {
            let shown = redact(broken);
            assert!(!shown.contains("S3CRET") && shown.starts_with("***@"), "{broken} -> {shown}");
        }
    }

    fn settings(token: SecretSource) -> ArchiveSettings {
        ArchiveSettings { token: Some(token), ..ArchiveSettings::default() }
    }

    #[test]
    fn ssh_gets_the_user_name_then_a_key_and_never_the_token() {
        let s = settings(SecretSource::env("GITHUB_TOKEN", "the archive's token"));
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
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, " t0k \n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = settings(SecretSource::file(&file, "archive.token_file"));
        let auth = Auth::new(&s);
        let url = "https://github.com/o/r.git";
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_ok());
        assert_eq!(auth.describe(), format!("the token in {} as user \"x-access-token\"", file.display()));
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_err());
        assert!(!format!("{s:?}").contains("t0k"), "Debug must not print the token");
        // A token file others may read is not used, and the failure says why.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let auth = Auth::new(&s);
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_err());
        assert!(auth.describe().contains("(archive.token_file): group or others"), "{}", auth.describe());
        let none = ArchiveSettings::default();
        let auth = Auth::new(&none);
        assert!(auth.credentials(url, None, CredentialType::USER_PASS_PLAINTEXT).is_err());
        assert!(auth.describe().starts_with("no token (set CLAWBOARD_GIT_TOKEN"), "{}", auth.describe());
    }

    /// What receive-pack and libgit2 answer when another node pushed first is a race;
    /// what a hook, a protected branch or a size limit answers is not.
    #[test]
    fn a_refusal_is_a_race_only_when_the_branch_moved_under_the_push() {
        for race in [
            "refs/heads/memory: fetch first",
            "refs/heads/memory: non-fast-forward",
            "cannot push because a reference that you are trying to update on the remote contains commits that are not present locally.",
            "cannot push non-fastforwardable reference",
            "refs/heads/memory: failed to lock",
            "refs/heads/memory: cannot lock ref 'refs/heads/memory'",
            "refs/heads/memory: stale info",
        ] {
            assert!(is_race(race), "{race}");
        }
        for refusal in [
            "refs/heads/memory: pre-receive hook declined",
            "refs/heads/memory: hook declined",
            "refs/heads/memory: protected branch hook declined",
            "refs/heads/memory: deny updating a hidden ref",
            "refs/heads/memory: branch is currently checked out",
            "refs/heads/memory: unpacker error",
        ] {
            assert!(!is_race(refusal), "{refusal}");
        }
    }

    #[test]
    fn conflict_names_keep_the_extension() {
        assert_eq!(conflict_name("memory/gm/decisions.md", "n1"), "memory/gm/decisions.conflict-n1.md");
        assert_eq!(conflict_name("memory/x", "n1"), "memory/x.conflict-n1");
        assert_eq!(conflict_name(".hidden", "n1"), ".hidden.conflict-n1");
    }
}
