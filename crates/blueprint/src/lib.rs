//! clawboard-blueprint: what a blueprint is (seed 001), apart from running it.
//! The engine in clawboard-roles runs blueprints on its one step executor; here
//! are the parts that need no process, no clock and no disk beyond reading files:
//!
//! - [`catalog`]: the built-in blueprints and a configured directory's.
//! - [`format`]: the blueprint file, checked when loaded (file, step, field, reason).
//! - [`condition`]: `control.quality_scores.virality < $quality_threshold`.
//! - [`contract`]: the strict input contract (with the seed's defaults) and the
//!   output contract with its JSON Schema.
//! - [`middleware`]: the sensitive-word filter and platform compliance, pure
//!   functions of a value and the config.

pub mod catalog;
pub mod condition;
pub mod contract;
pub mod error;
pub mod format;
pub mod middleware;

pub use catalog::Catalog;
pub use error::{Error, Result};
