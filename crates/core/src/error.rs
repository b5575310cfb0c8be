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

/// `e` with each of its sources after a colon, as anyhow's `{:#}` prints an error:
/// for a log line, where the OS's reason (`No space left on device`) must show.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod chain_tests {
    #[test]
    fn the_os_reason_is_in_the_line() {
        let e = super::Error::io("/x/y", std::io::Error::from_raw_os_error(28));
        assert_eq!(super::chain(&e), "I/O error on /x/y: No space left on device (os error 28)");
    }
}
