//! Errors of loading and checking blueprints and contracts.

/// A blueprint, an input, or the middleware config is not valid.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `file: step S: field: reason` (the step part only when a step is at fault).
    #[error("{file}: {}{field}: {reason}", step.as_ref().map(|s| format!("step {s:?}: ")).unwrap_or_default())]
    Invalid { file: String, step: Option<String>, field: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn invalid(file: &str, step: Option<&str>, field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Invalid {
            file: file.to_owned(),
            step: step.map(str::to_owned),
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
