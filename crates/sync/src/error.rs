use std::path::PathBuf;

/// How a failed request should be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Timeouts, connection refused, 5xx, 429: worth retrying with backoff.
    Retryable,
    /// 403, a missing bucket, a bad request: retrying will not help.
    Permanent,
    /// A conditional write lost (412, or the name exists on the local backend).
    PreconditionFailed,
    /// This key cannot be stored here, whatever is retried (a name too long for
    /// the local backend's file system, a name taken by a directory of other
    /// keys): the file is left out of the push, the other keys go on.
    KeyRefused,
}

/// A request to the remote that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op} {key}: {message}")]
pub struct RemoteError {
    pub failure: Failure,
    /// The operation (`PUT`, `GET`, `LIST` …).
    pub op: &'static str,
    pub key: String,
    pub message: String,
}

impl RemoteError {
    pub fn new(failure: Failure, op: &'static str, key: impl Into<String>, message: impl Into<String>) -> Self {
        RemoteError { failure, op, key: key.into(), message: message.into() }
    }

    pub fn is_retryable(&self) -> bool {
        self.failure == Failure::Retryable
    }
}

/// Everything the sync crate can fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    #[error(transparent)]
    Remote(#[from] RemoteError),

    /// A remote error with the remote it came from and what to do about it.
    #[error("{remote}: {error}{}", hint(error))]
    At { remote: String, error: RemoteError },

    #[error(transparent)]
    Core(#[from] clawboard_core::Error),

    #[error("sync config: {field}: {reason}")]
    Config { field: String, reason: String },

    /// A pull that would delete too much (or a bucket that lists empty) is not applied.
    #[error(
        "pull refused: {reason}; nothing was applied. If this is intended, run          `clawboard sync pull --allow-mass-delete`"
    )]
    Refused { reason: String },

    /// Changes in a task whose claim this node has not confirmed since its lease
    /// lapsed (a restart, or the bucket out of reach): pushed once it is.
    #[error(
        "task {task}: not pushed yet: this node's claim on it is not confirmed since its heartbeats lapsed \
         (the changes stay pending; the next push after the claim check sends them)"
    )]
    Unconfirmed { task: String },
}

fn hint(e: &RemoteError) -> &'static str {
    match e.failure {
        Failure::Retryable => " (the changes stay pending; the next push retries)",
        Failure::Permanent if e.message.contains("403") => {
            " (check the credentials: sync.s3.credentials_file, sync.s3.profile or \
             AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, and that they may write to the bucket; \
             the changes stay pending)"
        }
        Failure::Permanent if e.message.contains("NoSuchBucket") => " (no such bucket: check sync.s3.bucket)",
        _ => "",
    }
}

impl Error {
    /// Names the remote on a remote error.
    pub fn at(self, remote: &str) -> Error {
        match self {
            Error::Remote(error) => Error::At { remote: remote.to_owned(), error },
            other => other,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config { field: field.into(), reason: reason.into() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
