//! The built-in middleware of seed 001, as pure functions of a value and the
//! `[blueprints]` config; the VM decides when they run and what is written.
//!
//! - [`MiddlewareConfig`]: word lists per platform, replacements, platform limits.
//! - [`sensitive_filter`]: finds listed words in every string of a value,
//!   replaces those that have a replacement, checks again ([`Filtered`]).
//! - [`platform_compliance`]: cuts a title or hashtag list over its platform's
//!   limit, fails a body, tweet or thread over it ([`Checked`]).
//!
//! Lengths are in characters (Unicode scalar values), never bytes.

mod compliance;
mod config;
mod filter;

pub use compliance::{Checked, Parts, cut, platform_compliance, tweet_length};
pub use config::{ALL_PLATFORMS, MiddlewareConfig, PLATFORMS, PlatformLimits, SECTION, SHIPPED_TOML};
pub use filter::{Filtered, Finding, fix_note, sensitive_filter};
