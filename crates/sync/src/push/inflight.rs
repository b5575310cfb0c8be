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
use std::fs::{self, File, OpenOptions};
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

/// Appends `path`'s line to `out`.
fn line(out: &mut Vec<u8>, file: &Path, path: &str, hlc: u64) -> Result<()> {
    serde_json::to_writer(&mut *out, &Line { path: path.to_owned(), hlc })
        .map_err(|e| Error::io(file, std::io::Error::other(e)))?;
    out.push(b'\n');
    Ok(())
}

pub(super) struct InFlight {
    path: PathBuf,
    state: Lock<State>,
}

#[derive(Default)]
struct State {
    /// Path → the HLC stamps of its unrecorded PUTs.
    sent: HashMap<String, HashSet<u64>>,
    /// The file, open for appending since the first note of this push.
    file: Option<File>,
    /// The file has lines (found at the load, or noted since).
    lines: bool,
}

impl InFlight {
    pub(super) fn new(sync_dir: &Path) -> InFlight {
        InFlight { path: sync_dir.join(FILE), state: Lock::new(State::default()) }
    }

    /// Reads what earlier pushes (of any process) left unrecorded. A line torn by
    /// a crash is skipped (its PUT was not sent yet), and so is one naming no path
    /// of the tree (written by something else: push never asks the bucket about it).
    pub(super) fn load(&self) -> Result<()> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let mut state = self.state.lock();
        *state = State { lines: !text.is_empty(), ..State::default() };
        let lines = text.lines().filter_map(|l| serde_json::from_str::<Line>(l).ok());
        for line in lines.filter(|l| clawboard_core::RelPath::new(&l.path).is_ok()) {
            state.sent.entry(line.path).or_default().insert(line.hlc);
        }
        Ok(())
    }

    /// Notes the PUT of `path`'s version `hlc`, before it is sent.
    pub(super) fn note(&self, path: &str, hlc: u64) -> Result<()> {
        let mut bytes = Vec::new();
        line(&mut bytes, &self.path, path, hlc)?;
        let mut state = self.state.lock();
        let file = match &mut state.file {
            Some(f) => f,
            None => state.file.insert(
                OpenOptions::new().create(true).append(true).open(&self.path).map_err(|e| Error::io(&self.path, e))?,
            ),
        };
        file.write_all(&bytes).map_err(|e| Error::io(&self.path, e))?;
        state.lines = true;
        state.sent.entry(path.to_owned()).or_default().insert(hlc);
        Ok(())
    }

    /// True when this node sent version `hlc` of `path` and has not recorded it.
    pub(super) fn sent(&self, path: &str, hlc: u64) -> bool {
        self.state.lock().sent.get(path).is_some_and(|s| s.contains(&hlc))
    }

    /// The paths with a PUT noted and not recorded since.
    pub(super) fn paths(&self) -> Vec<String> {
        self.state.lock().sent.keys().cloned().collect()
    }

    /// True when a PUT of `path` was noted and not recorded since.
    pub(super) fn has(&self, path: &str) -> bool {
        self.state.lock().sent.contains_key(path)
    }

    /// `path`'s notes can no longer match: it has a record again, or the bucket
    /// holds a version other than the ones noted.
    pub(super) fn forget(&self, path: &str) {
        self.state.lock().sent.remove(path);
    }

    /// Rewrites the file with the PUTs still unrecorded. None left (the common
    /// case): the file is emptied in place (creating a file is what costs on a
    /// disk whose inodes turn over fast).
    pub(super) fn save(&self) -> Result<()> {
        let mut state = self.state.lock();
        state.file = None;
        if !state.lines {
            return Ok(());
        }
        let sent = &state.sent;
        if sent.is_empty() {
            state.lines = false;
            return OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|f| f.set_len(0))
                .map_err(|e| Error::io(&self.path, e));
        }
        let mut text = Vec::new();
        for (path, stamps) in sent.iter() {
            for &hlc in stamps {
                line(&mut text, &self.path, path, hlc)?;
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
        // A line naming no path of the tree, and one torn by a crash: skipped.
        fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(FILE))
            .unwrap()
            .write_all(b"{\"p\":\"../outside\",\"t\":9}\n{\"p\":\"gm/c")
            .unwrap();
        let b = InFlight::new(d.path());
        b.load().unwrap();
        assert!(b.sent("gm/a.md", 7) && b.sent("gm/b.md", 8));
        assert!(!b.sent("gm/a.md", 8) && !b.sent("gm/c.md", 9), "only the PUTs noted");
        assert_eq!(b.paths().len(), 2, "{:?}", b.paths());
        b.forget("gm/a.md");
        b.save().unwrap();
        let c = InFlight::new(d.path());
        c.load().unwrap();
        assert!(!c.sent("gm/a.md", 7) && c.sent("gm/b.md", 8));
        c.forget("gm/b.md");
        c.save().unwrap();
        assert_eq!(fs::read(d.path().join(FILE)).unwrap(), b"", "nothing left: emptied");
        let e = InFlight::new(d.path());
        e.load().unwrap();
        assert!(e.state.lock().sent.is_empty());
    }
}
