//! One module per subcommand.

pub mod acl;
pub mod archive;
pub mod board;
pub mod completions;
pub mod daemon;
pub mod demo;
pub mod entry;
pub mod escalation;
pub mod init;
pub mod man;
pub mod report;
pub mod retention;
pub mod run;
pub mod slice;
pub mod status;
pub mod sync;
pub mod task;
pub mod validate;
pub mod web;
pub mod write;

use clawboard_core::Store;

use crate::config::Settings;

/// Opens the configured tree, with the configured limits.
pub fn open_store(s: &Settings) -> anyhow::Result<Store> {
    let store = Store::open(&s.root)?.with_max_file_bytes(s.max_file_bytes);
    tracing::debug!(root = %store.root().display(), "opened the blackboard");
    Ok(store)
}
