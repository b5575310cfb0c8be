//! clawboard-github: the GitHub bridge of blackboard entries (seed 004 §4). The
//! entries of configured issues live as issue comments in the seed's form
//! (`<!-- blackboard:… -->`, `json`, the object), both ways: comments become local
//! entries, local entries become comments, and the newer copy wins.
//!
//! - [`settings`]: the `[github]` config section and the token (never printed).
//! - [`client`]: a small REST client (reqwest): paged, conditional listings with
//!   a cache of ETags, rate limits waited out up to `github.max_wait`.
//! - [`bridge`]: one run, [`sync`], and its [`Report`].
//! - [`memory`]: an in-memory GitHub for tests.

pub mod bridge;
pub mod client;
pub mod error;
pub mod memory;
pub mod settings;

pub use bridge::{Item, Report, Skipped, state_dir, sync};
pub use client::{Api, Client, Comment, Stats};
pub use error::{Error, Result};
pub use memory::MemoryApi;
pub use settings::{GithubSection, GithubSettings, IssueSet, Repository};
