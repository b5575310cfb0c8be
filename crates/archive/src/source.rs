//! What the archive reads from the tree, shared by the extraction and the
//! harvests: a source file's [`Stamp`] (its version without reading it), the
//! check that a directory is real (never a link), and a task's memory harvest as
//! an [`Input`].

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use chrono::{DateTime, Utc};
use clawboard_core::formats::{MemoryHarvest, Task, TaskType};
use clawboard_core::{Id, RelPath, Store, Timestamp, layout};
use serde::{Deserialize, Serialize};

use crate::Error;

/// What identifies a source file's version without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ino: meta.ino(),
        }
    }
}

/// True when every component of `rel` under `root` is a directory, not a symlink:
/// the archive never follows a link out of the tree.
pub fn real_dir(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    rel.split('/').all(|c| {
        at.push(c);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

/// One task's memory harvest.
#[derive(Debug, Clone)]
pub struct Input {
    pub task_id: Id,
    pub task_type: Option<TaskType>,
    pub harvested_at: DateTime<Utc>,
    pub stamp: Timestamp,
    pub harvest: MemoryHarvest,
}

/// One task's memory harvest, with its task's type when `task.json` says it.
pub fn read_input(store: &Store, task: &str) -> Result<Input, Error> {
    let rel = RelPath::new(&layout::task_file(task, layout::HARVEST_FILE))?;
    // The store checks the file against its schema, and its taskId against the directory.
    let harvest: MemoryHarvest = store.read(&rel)?;
    let task_type = RelPath::new(&layout::task_file(task, layout::TASK_FILE))
        .ok()
        .and_then(|r| store.read::<Task>(&r).ok())
        .map(|t| t.kind);
    let harvested_at = harvest.harvested_at.instant().with_timezone(&Utc);
    Ok(Input {
        task_id: harvest.task_id.clone(),
        task_type,
        harvested_at,
        stamp: harvest.harvested_at.clone(),
        harvest,
    })
}
