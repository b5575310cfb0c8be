//! What push has not sent yet, read without a push: the journal's lag behind the
//! push cursor (`sync status`, metrics) and a directory's unpushed files (the
//! retention guard).

use std::path::Path;
use std::time::UNIX_EPOCH;

use clawboard_core::index::Stamp;
use clawboard_core::journal::{self, is_ignored};
use serde::Serialize;

use super::push_cursor;
use crate::error::{Error, Result};
use crate::settings::SyncSettings;
use crate::shared::{build_excludes, sync_dir};
use crate::state::PushState;

/// The files under `dir` (relative to `root`, e.g. `tasks/t1`) whose current content
/// the bucket does not hold as far as this node knows: never pushed, changed since
/// (size or mtime differ from the pushed record), or pushed as a delete. Files push
/// never sends (`sync.exclude`, temp files) are not counted. Symlinks are not
/// followed; one is counted, since push never sends it.
pub fn unpushed_files(root: &Path, settings: &SyncSettings, dir: &str) -> Result<Vec<String>> {
    let excludes = build_excludes(&settings.exclude)?;
    let state = PushState::records(&sync_dir(root))?;
    let mut out = Vec::new();
    let base = root.join(dir);
    for entry in walkdir::WalkDir::new(&base).follow_links(false).follow_root_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| Error::io(&base, std::io::Error::other(e.to_string())))?;
        if entry.file_type().is_dir() {
            continue;
        }
        let Some(rel) = entry.path().strip_prefix(root).ok().and_then(|r| r.to_str()).map(str::to_owned) else {
            out.push(entry.path().display().to_string());
            continue;
        };
        if is_ignored(&rel) || excludes.is_match(&rel) {
            continue;
        }
        if !entry.file_type().is_file() {
            out.push(rel);
            continue;
        }
        let meta = entry.metadata().map_err(|e| Error::io(entry.path(), std::io::Error::other(e.to_string())))?;
        let stamp = Stamp::of(&meta);
        let pushed =
            state.get(&rel).is_some_and(|r| !r.deleted && r.size == stamp.size && r.mtime_ns == stamp.mtime_ns);
        if !pushed {
            out.push(rel);
        }
    }
    Ok(out)
}

/// What is waiting to be pushed: journal entries after the push cursor, and the
/// age of the oldest one (from its file's mtime), a measure of lag.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub cursor: u64,
    pub newest: u64,
    pub entries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_age_secs: Option<u64>,
}

pub fn pending(root: &Path) -> Result<Pending> {
    let cursor = push_cursor(root).load()?;
    let dir = root.join(clawboard_core::layout::JOURNAL);
    let newest = journal::bounds(&dir)?.map_or(0, |(_, n)| n);
    let entries = newest.saturating_sub(cursor);
    let oldest_age_secs = if entries > 0 {
        journal::read_after(&dir, cursor, 1)?.first().and_then(|e| e.change.mtime_ns).map(|ns| {
            let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
            u64::try_from((now - ns) / 1_000_000_000).unwrap_or(0)
        })
    } else {
        None
    };
    Ok(Pending { cursor, newest, entries, oldest_age_secs })
}
