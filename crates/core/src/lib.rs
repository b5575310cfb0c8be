//! clawboard-core owns the blackboard tree: its layout, the typed file formats
//! (serde types, JSON Schemas, validation with clear errors), ids, and the store
//! through which every write goes (atomic, locked, never outside the root).
//! It knows nothing of the CLI, the daemon's runtime, roles, sync or archive.
//!
//! # Layout
//! - [`layout`]: directory and file names of the seed-002 tree plus `inbox/`, `.clawboard/`.
//! - [`formats`]: one type per file (`Task`, `TeamComposition`, `Escalation` …).
//! - [`kind`]: [`FileKind`], inferred from a path, with its schema and checks.
//! - [`schema`]: the JSON Schema validator that reports every [`Problem`] by pointer.
//! - [`validate`]: bytes → checked value, with size and nesting limits.
//! - [`store`]: [`Store`], atomic writes under advisory locks, crash recovery.
//! - [`journal`], [`index`]: the change journal every subsystem consumes, and the
//!   index that lets a rescan emit only what the journal missed.
//! - [`summary`]: [`summary::TaskSummary`], one row per task kept from the journal,
//!   which status, task lists and retention read instead of every `task.json`.
//! - [`id`], [`time`]: [`Id`] (safe as a path component, and new ones) and [`Timestamp`].
//! - [`token`]: secret tokens from the OS's random source, compared in constant time.
//! - [`secret`]: keys and tokens from an environment variable or a private file,
//!   read at each use ([`secret::SecretSource`], [`secret::Secret`]).
//! - [`merge`]: how two nodes' versions of a file every daemon updates become one.
//! - [`lock`]: [`lock::Lock`], the mutex that is never poisoned.
//! - [`backoff`]: [`backoff::Backoff`], how long every retry waits.
//! - [`config`]: what every crate's config section shares: [`config::ConfigError`]
//!   naming `section.key`, [`config::ByteSize`], the cron [`config::Schedule`].

pub mod acl;
pub mod backoff;
pub mod config;
pub mod duration;
pub mod error;
pub mod formats;
pub mod id;
pub mod index;
pub mod journal;
pub mod json;
pub mod kind;
pub mod layout;
pub mod lock;
pub mod merge;
pub mod retention;
pub mod schema;
pub mod secret;
pub mod store;
pub mod summary;
pub mod time;
pub mod token;
pub mod validate;

pub use error::{Error, Result};
pub use id::{Id, IdError, check_id};
pub use kind::{FileKind, Format, PathContext};
pub use schema::Problem;
pub use store::{RelPath, Store};
pub use time::Timestamp;
pub use validate::Invalid;
