//! clawboard-entries owns the blackboard entries of seed 004: small addressed
//! messages (`from`, `to`, `project_id`, `kind`, `status`, `payload`,
//! `target_docs`) kept as files in the tree and carried from role to role.
//!
//! - [`lifecycle`]: the status transitions the seed allows and who may make them.
//! - [`board`]: entries on disk (`entries/{project_id}/{id}.json`): create with a
//!   unique id, read, find, list with filters, change status under the file's lock,
//!   record its GitHub comment, replace it with a newer copy (the GitHub bridge).
//! - [`lanes`]: the roles contract: which role picks which entries, which kinds
//!   it may write, and the output a role prints after handling one.
//! - [`handling`]: how this node handles a picked entry, step by durable step
//!   (claim, begin, run, apply), so that it is handled exactly once.
//! - [`comment`]: the GitHub issue-comment form (seed 004 §4): render, and parse by
//!   the seed's rules (or from a fenced json block, as people paste it).
//!
//! The entry's format itself is core's (`clawboard_core::formats::Entry`), so
//! `clawboard validate` and every store read check it like any other file.

pub mod board;
pub mod comment;
pub mod error;
pub mod handling;
pub mod lanes;
pub mod lifecycle;

pub use board::{
    Filter, MAX_ENTRY_BYTES, create, create_picked, find, list, new_id, read, rel_path, replace, set_source, set_status,
};
pub use clawboard_core::formats::{Entry, EntryStatus, SourceRef, TargetDoc};
pub use comment::{DEFAULT_MARKER, Parsed, parse, render};
pub use error::{Error, Result};
pub use lanes::{ActorConfig, LaneConfig, LaneOutput, Lanes, LanesSection, Pick};
pub use lifecycle::{HUMAN, check_transition, may_change};
