//! The PUTs this node has sent without yet recording their outcome, kept in
//! `.clawboard/sync/inflight.jsonl`: one line (`{"p": path, "t": hlc}`) is
//! appended before each PUT, naming the version that PUT creates.
//!
//! When the PUT lands but its record never gets written, the object carries this
//! node's name, and the push state holds no record of it. That happens when the
//! daemon stops or is killed mid-request, or when the reply is lost. If the file
//! then changes, the next push would take that object for another node's version
//! and leave the path to pull, which never resolves it (the version is this
//! node's own). The line lets push recognise its own version and push the file
//! over it (see `Push::adopt`).
//!
//! The lines reach the kernel before the PUT is sent; they are not synced (a
//! power loss may lose them, and the path is then left to pull as before).
//! Pushes hold the push lock, so one process at a time appends here. The file
//! is rewritten at the end of each push with only the PUTs still unrecorded.

use std::collections::{HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use clawboard_core::lock::Lock;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const FILE: &str = "inflight.jsonl";

#[derive(Serialize, Deserialize)]
struct Line {
    #[serde(rename = "p")]
    path: String,
    #[serde(rename = "t")]
    hlc: u64,
}

pub(super) struct InFlight {
    path: PathBuf,
    /// Path → the HLC stamps of its unrecorded PUTs.
    sent: Lock<HashMap<String, HashSet<u64>>>,
}

impl InFlight {
    pub(super) fn new(sync_dir: &Path) -> InFlight {
        InFlight { path: sync_dir.join(FILE), sent: Lock::new(HashMap::new()) }
    }

    /// Reads what earlier pushes (of any process) left unrecorded. A line torn by
    /// a crash is skipped: its PUT was not sent yet.
    pub(super) fn load(&self) -> Result<()> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let mut sent = self.sent.lock();
        sent.clear();
        for line in text.lines().filter_map(|l| serde_json::from_str::<Line>(l).ok()) {
            sent.entry(line.path).or_default().insert(line.hlc);
        }
        Ok(())
    }

    /// Notes the PUT of `path`'s version `hlc`, before it is sent.
    pub(super) fn note(&self, path: &str, hlc: u64) -> Result<()> {
        let mut line = serde_json::to_vec(&Line { path: path.to_owned(), hlc })
            .map_err(|e| Error::io(&self.path, std::io::Error::other(e)))?;
        line.push(b'\n');
        let mut sent = self.sent.lock();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(&line))
            .map_err(|e| Error::io(&self.path, e))?;
        sent.entry(path.to_owned()).or_default().insert(hlc);
        Ok(())
    }

    /// True when this node sent version `hlc` of `path` and has not recorded it.
    pub(super) fn sent(&self, path: &str, hlc: u64) -> bool {
        self.sent.lock().get(path).is_some_and(|s| s.contains(&hlc))
    }

    /// `path` has a record again: its PUTs need no recognising.
    pub(super) fn recorded(&self, path: &str) {
        self.sent.lock().remove(path);
    }

    /// Rewrites the file with the PUTs still unrecorded. None left (the common
    /// case): the file is emptied in place (creating a file is what costs on a
    /// disk whose inodes turn over fast).
    pub(super) fn save(&self) -> Result<()> {
        let sent = self.sent.lock();
        if sent.is_empty() {
            return match OpenOptions::new().write(true).open(&self.path) {
                Ok(f) if f.metadata().is_ok_and(|m| m.len() == 0) => Ok(()),
                Ok(f) => f.set_len(0).map_err(|e| Error::io(&self.path, e)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io(&self.path, e)),
            };
        }
        let mut text = Vec::new();
        for (path, stamps) in sent.iter() {
            for &hlc in stamps {
                serde_json::to_writer(&mut text, &Line { path: path.clone(), hlc })
                    .map_err(|e| Error::io(&self.path, std::io::Error::other(e)))?;
                text.push(b'\n');
            }
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        Ok(clawboard_core::store::write_atomic(dir, FILE, &text)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn unrecorded_puts_survive_a_reload_and_recorded_ones_go_at_the_save() {
        let d = tempfile::tempdir().unwrap();
        let a = InFlight::new(d.path());
        a.load().unwrap();
        a.note("gm/a.md", 7).unwrap();
        a.note("gm/b.md", 8).unwrap();
        // A line torn by a crash: skipped.
        fs::OpenOptions::new().append(true).open(d.path().join(FILE)).unwrap().write_all(b"{\"p\":\"gm/c").unwrap();
        let b = InFlight::new(d.path());
        b.load().unwrap();
        assert!(b.sent("gm/a.md", 7) && b.sent("gm/b.md", 8));
        assert!(!b.sent("gm/a.md", 8) && !b.sent("gm/c.md", 9), "only the PUTs noted");
        b.recorded("gm/a.md");
        b.save().unwrap();
        let c = InFlight::new(d.path());
        c.load().unwrap();
        assert!(!c.sent("gm/a.md", 7) && c.sent("gm/b.md", 8));
        c.recorded("gm/b.md");
        c.save().unwrap();
        assert_eq!(fs::read(d.path().join(FILE)).unwrap(), b"", "nothing left: emptied");
        let e = InFlight::new(d.path());
        e.load().unwrap();
        assert!(e.sent.lock().is_empty());
    }
}
