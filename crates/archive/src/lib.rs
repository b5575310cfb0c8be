//! The memory archive: the daily and weekly harvests of what roles learned, the
//! extraction of memory into a deterministic `memory/` layout, and the git `memory`
//! branch (a bare repository under `.clawboard/archive/`, pushed without ever forcing).

pub mod error;
pub mod extract;
pub mod harvest;
pub mod repo;

pub use error::{Error, Result};
pub use harvest::{HarvestReport, HarvestSettings};
pub use repo::{Archive, ArchiveSettings, LogEntry, RunReport, Status, Token};
