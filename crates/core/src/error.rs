use std::path::PathBuf;

use crate::validate::Invalid;

/// Everything the core can fail at. Each variant names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    #[error("{0}")]
    Invalid(Box<Invalid>),

    #[error("{}: not a clawboard tree (no .clawboard/ directory); run `clawboard init --root {}` first", root.display(), root.display())]
    NotInitialized { root: PathBuf },

    #[error("{path}: refused: {reason}")]
    UnsafePath { path: String, reason: String },

    #[error("{path} already exists")]
    AlreadyExists { path: String },

    #[error("{path}: not found")]
    NotFound { path: String },

    #[error("{}: cannot tell the kind of file from its path; pass --kind (one of {})", path.display(), crate::FileKind::names())]
    UnknownKind { path: PathBuf },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// True when the caller gave something wrong (exit code 2), false when the
    /// operation failed (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Io { .. } | Error::NotInitialized { .. })
    }
}

impl From<Invalid> for Error {
    fn from(i: Invalid) -> Self {
        Error::Invalid(Box::new(i))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
