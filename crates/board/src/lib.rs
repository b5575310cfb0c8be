//! clawboard-board owns a task's blackboard (seeds 000 and 003): the three zones
//! and the seed's operations on them, the zone permissions (from the one ACL in
//! `config/acl.toml`), the append-only write history the board folds from, scopes
//! and templates, token counting with a real BPE tokenizer, the compression ladder,
//! and the slice ledger. It never runs a role and never touches the network; every
//! write goes through the core's [`clawboard_core::Store`].
//!
//! # Layout
//! - [`path`]: `zone.key.nested` paths, with positions in errors.
//! - [`ops`]: the seed's writes as data, value checks, and the fold step.
//! - [`task_board`]: [`TaskBoard`], a task's board on disk with its history.
//! - [`scope`], [`template`]: what a step sees, and in what shape.
//! - [`tokens`], [`slice`]: counting, the budget and the compression ladder.
//! - [`ledger`]: every slice handed out, with its tokens and the role's usage.
//! - [`request`]: one board request (the CLI's and the daemon's `POST /v1/board`), run for a caller.

pub mod error;
pub mod ledger;
pub mod ops;
pub mod path;
pub mod request;
pub mod scope;
pub mod slice;
pub mod task_board;
pub mod template;
pub mod tokens;

pub use error::{Error, Result};
pub use ops::{ErrorEntry, Op, OpName};
pub use path::BoardPath;
pub use scope::Scope;
pub use slice::{Selector, Slice, Source, Spec};
pub use task_board::{Caller, Record, TaskBoard};
pub use template::Template;
