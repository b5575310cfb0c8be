//! What can go wrong with an entry, each error naming the entry and the reason.

use clawboard_core::formats::EntryStatus;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] clawboard_core::Error),

    #[error("entry {id}: status {from} -> {to} is not allowed: {why}")]
    Transition { id: String, from: EntryStatus, to: EntryStatus, why: String },

    #[error(
        "entry {id}: {actor:?} may not change its status: only its from ({from:?}), its to ({to:?}) or a human may"
    )]
    NotAllowed { id: String, actor: String, from: String, to: String },

    #[error("entry field {field}: {value:?} {why}")]
    BadField { field: &'static str, value: String, why: String },

    #[error("no entry {0} (looked in entries/*/{0}.json)")]
    NotFound(String),

    #[error("entry id {id} is taken: {path} exists")]
    Duplicate { id: String, path: String },

    #[error("entry {id}: {size} bytes; an entry may be at most {max} bytes (it must fit in a GitHub comment)")]
    TooLarge { id: String, size: usize, max: usize },

    #[error("{0}")]
    Comment(#[from] crate::comment::CommentError),
}

impl Error {
    /// True when the caller gave something wrong (exit code 2), false when the
    /// operation failed (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Store(e) => e.is_bad_input(),
            _ => true,
        }
    }
}
