//! One module per subcommand.

pub mod acl;
pub mod archive;
pub mod board;
pub mod completions;
pub mod daemon;
pub mod demo;
pub mod doctor;
pub mod entry;
pub mod escalation;
pub mod fork;
pub mod init;
pub mod man;
pub mod replay;
pub mod report;
pub mod retention;
pub mod role;
pub mod run;
pub mod sandbox;
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

/// The path of `task`'s `task.json` when the task is there; a board, a slice
/// and a ledger are a task's, and none is shown (or made) for a task that is not.
pub fn task_file_of(store: &Store, task: &str) -> Option<String> {
    let file = clawboard_core::layout::task_file(task, clawboard_core::layout::TASK_FILE);
    clawboard_core::RelPath::new(&file).is_ok_and(|t| store.exists(&t)).then_some(file)
}

/// [`task_file_of`], or the error a person reads.
pub fn need_task(store: &Store, task: &str) -> anyhow::Result<()> {
    match task_file_of(store, task) {
        Some(_) => Ok(()),
        None => Err(crate::cli::BadInput(format!(
            "there is no task {task:?} (no {})",
            clawboard_core::layout::task_file(task, clawboard_core::layout::TASK_FILE)
        ))
        .into()),
    }
}
