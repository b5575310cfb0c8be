//! The memory archive: the daily and weekly harvests of what roles learned, the
//! extraction of memory into a deterministic `memory/` layout, and the git `memory`
//! branch (a bare repository under `.clawboard/archive/`, pushed without ever forcing).
//!
//! - [`settings`]: `[archive]` and `[harvest]` as written and resolved, with errors
//!   naming the key, into [`ArchiveConfig`] ([`ArchiveSettings`], [`HarvestSettings`]
//!   and the schedules). The node id is no setting: [`Archive::new`] takes it.
//! - [`harvest`], [`extract`], [`source`]: the harvests, what becomes `memory/`, what
//!   both read from the tree.
//! - [`repo`]: [`Archive`], the bare repository and its runs.

pub mod error;
pub mod extract;
pub mod harvest;
pub mod repo;
pub mod settings;
pub mod source;

pub use error::{Error, Result};
pub use harvest::{HarvestReport, HarvestSettings};
pub use repo::{Archive, LogEntry, RemoteProbe, RunReport, Status, probe_remote};
pub use settings::{ArchiveConfig, ArchiveSection, ArchiveSettings, HarvestSection};

/// Replaces `dir/name` by a rename, without fsync: for the archive's own caches and
/// status (`.clawboard/archive/`, `.clawboard/harvest-index.json`), which a crash may
/// take back to an older version, never to half a file. An old cache only means
/// more work on the next run.
pub(crate) fn write_state(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    let to = dir.join(name);
    std::fs::rename(&tmp, &to).map_err(|e| Error::io(&to, e))
}
