use std::path::PathBuf;

/// Everything the archive can fail at. Each variant names the file or the remote it is
/// about; none ever contains a credential.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    #[error(transparent)]
    Core(#[from] clawboard_core::Error),

    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },

    #[error(
        "{path}: {size} bytes is more than the archive's limit of {limit} bytes (GitHub refuses files over 100 MiB); not archived"
    )]
    TooLarge { path: String, size: u64, limit: u64 },

    #[error("archive repository {}: {what}: {source}", repo.display())]
    Git { repo: PathBuf, what: String, source: git2::Error },

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
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
