use std::path::PathBuf;

/// Everything the archive can fail at. Each variant names the file or the remote it is
/// about; none ever contains a credential.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OS's reason ends the message (not a source of its own: printed once).
    #[error("I/O error on {}: {cause}", path.display())]
    Io { path: PathBuf, cause: std::io::Error },

    #[error(transparent)]
    Core(#[from] clawboard_core::Error),

    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },

    #[error(
        "{path}: {size} bytes is more than the archive's limit of {limit} bytes (GitHub refuses files over 100 MiB); not archived"
    )]
    TooLarge { path: String, size: u64, limit: u64 },

    /// libgit2's error is the message's end, not a source of its own (printed once).
    #[error("archive repository {}: {what}: {}{}", repo.display(), cause.message(), git_hint(cause))]
    Git { repo: PathBuf, what: String, cause: git2::Error },

    #[error("archive remote {remote}: authentication failed with {tried}")]
    Auth { remote: String, tried: String },

    #[error("archive remote {remote}: {what}: {message}")]
    Remote { remote: String, what: String, message: String },

    #[error(
        "archive remote {remote}: the push was still rejected after {attempts} attempts (other nodes keep pushing); retried on the next run"
    )]
    StillRejected { remote: String, attempts: u32 },

    #[error("the archive run stopped because the daemon is stopping; the commits stay and are pushed on the next run")]
    Stopped,

    /// A run that committed, then failed to push: the commit is on the local branch
    /// (the report says what it holds) and the next run pushes it.
    #[error("{}, but the push failed and is retried on the next run: {cause}", committed(report))]
    Unpushed { report: Box<crate::RunReport>, cause: Box<Error> },
}

/// `commit 0123456789ab was made locally (3 file(s) changed: roles 2, harvest 1)`.
fn committed(r: &crate::RunReport) -> String {
    let c = &r.commit;
    let id: String = c.commit.as_deref().unwrap_or("-").chars().take(12).collect();
    format!("commit {id} was made locally ({})", c.summary())
}

/// What to do about the git errors a person can fix.
fn git_hint(e: &git2::Error) -> &'static str {
    match (e.code(), e.class()) {
        (git2::ErrorCode::Locked, _) => {
            " (clawboard holds its own lock while it writes there, so this .lock file is left over from \
             a killed process: remove it)"
        }
        (_, git2::ErrorClass::Odb | git2::ErrorClass::Object | git2::ErrorClass::Zlib) => {
            " (the repository is damaged: remove .clawboard/archive and the next run rebuilds it from the \
             remote, see docs/ARCHIVE.md)"
        }
        _ => "",
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), cause: source }
    }

    /// What the run did before it failed, when it made a commit: the commit stays.
    pub fn report(&self) -> Option<&crate::RunReport> {
        match self {
            Error::Unpushed { report, .. } => Some(report),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each reason is printed once, as anyhow prints the chain (`{:#}`, as `chain` does), and a
    /// stale lock says what to do.
    #[test]
    fn git_and_io_reasons_are_printed_once_with_a_remedy() {
        let locked = git2::Error::new(git2::ErrorCode::Locked, git2::ErrorClass::Os, "failed to lock file 'x.lock'");
        let e = Error::Git { repo: "r".into(), what: "move the branch".into(), cause: locked };
        let text = clawboard_core::error::chain(&e);
        assert_eq!(text.matches("failed to lock file").count(), 1, "{text}");
        assert!(text.contains("remove it") && !text.contains("class="), "{text}");
        let e = Error::io("/x", std::io::Error::from_raw_os_error(28));
        assert_eq!(clawboard_core::error::chain(&e), "I/O error on /x: No space left on device (os error 28)");
    }

    /// A commit whose push failed is named, with what it holds, before the push's reason.
    #[test]
    fn an_unpushed_commit_is_named_with_what_it_holds() {
        let mut commit = crate::repo::CommitReport { commit: Some("0123456789abcdef".into()), ..Default::default() };
        for f in ["memory/roles/a/t1.json", "memory/roles/b/t1.json", "memory/harvest/daily/d.json", "memory/README.md"]
        {
            commit.count(f);
        }
        let cause = Error::Remote { remote: "https://h/r.git".into(), what: "push".into(), message: "refused".into() };
        let e = Error::Unpushed { report: Box::new(crate::RunReport { commit, push: None }), cause: Box::new(cause) };
        assert_eq!(
            e.to_string(),
            "commit 0123456789ab was made locally (4 file(s) changed: README.md 1, harvest 1, roles 2), but the push \
             failed and is retried on the next run: archive remote https://h/r.git: push: refused"
        );
        assert_eq!(e.report().and_then(|r| r.commit.commit.as_deref()), Some("0123456789abcdef"));
    }
}
