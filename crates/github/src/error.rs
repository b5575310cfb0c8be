//! What can go wrong talking to GitHub, each error naming the request or the key.
//! None of them carries the token: requests are named by method and URL (the token
//! is only ever in a header), and token problems by where it was looked for.

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 401: the token is wrong, expired or missing.
    #[error("GitHub refused the token (401 {message}): check github.token_env / github.token_file")]
    Unauthorized { message: String },

    #[error("no GitHub token: {0}")]
    NoToken(String),

    #[error("{0}")]
    Config(String),

    #[error("{method} {url}: GitHub answered {status}: {message}")]
    Status { method: &'static str, url: String, status: u16, message: String },

    #[error(
        "{method} {url}: rate limited by GitHub ({why}); waiting {wanted:?} more would pass github.max_wait ({max_wait:?}; waited {waited:?} already)"
    )]
    RateLimited {
        method: &'static str,
        url: String,
        why: String,
        wanted: std::time::Duration,
        waited: std::time::Duration,
        max_wait: std::time::Duration,
    },

    #[error("{method} {url}: {source}")]
    Http {
        method: &'static str,
        url: String,
        #[source]
        source: reqwest::Error,
    },

    #[error("{url}: not what GitHub answers: {why}")]
    BadResponse { url: String, why: String },

    #[error("another GitHub sync of this tree is running ({0} is locked); try again when it ends")]
    Busy(String),

    #[error(transparent)]
    Store(#[from] clawboard_core::Error),

    #[error(transparent)]
    Entries(#[from] clawboard_entries::Error),
}

impl Error {
    /// True when the configuration (or the token) is at fault, not GitHub or the network.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Unauthorized { .. } | Error::NoToken(_) | Error::Config(_))
    }
}
