//! Atomic replacement of a file, and cleanup of what a crash mid-write leaves.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Temp files are named `.{name}.clawboard-tmp.{pid}.{n}`; nothing else uses this marker.
pub const TEMP_MARK: &str = ".clawboard-tmp.";

/// Environment variable for fault injection in end-to-end tests: when it is
/// `pause-before-rename`, a write stops after its temp file is durable and before
/// the rename, and waits to be killed. It simulates a crash at the worst moment.
pub const FAULT_ENV: &str = "CLAWBOARD_FAULT";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// True for names of temp files (which sync, journal and listings must skip).
pub fn is_temp_name(name: &str) -> bool {
    name.contains(TEMP_MARK)
}

/// Whether a write waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sync {
    /// fsync of the temp file before the rename and of the directory after it: the
    /// new content survives a power loss once the write returns.
    Durable,
    /// Neither: readers still see the old file or the new one, whole, and a killed
    /// process loses nothing; a power loss may take the file back to an older
    /// version (or leave it empty). For views rebuilt from durable records.
    View,
}

/// Replaces `dir/name` with `bytes`: temp file, fsync, rename, fsync of `dir`.
pub(super) fn write(dir: &Path, name: &OsStr, bytes: &[u8]) -> Result<()> {
    write_observed(dir, name, bytes, Sync::Durable, &mut |_| {})
}

/// [`write`] (without the fsyncs for a [`Sync::View`]), calling `before_rename`
/// with the file's final size and mtime once the temp file is written and just
/// before it is renamed into place.
pub(super) fn write_observed(
    dir: &Path,
    name: &OsStr,
    bytes: &[u8],
    sync: Sync,
    before_rename: &mut dyn FnMut(crate::index::Stamp),
) -> Result<()> {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}{TEMP_MARK}{}.{n}", name.to_string_lossy(), std::process::id()));
    let target = dir.join(name);
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
        if sync == Sync::Durable {
            f.sync_all().map_err(|e| Error::io(&tmp, e))?;
        }
        let stamp = crate::index::Stamp::of(&f.metadata().map_err(|e| Error::io(&tmp, e))?);
        drop(f);
        before_rename(stamp);
        if std::env::var(FAULT_ENV).as_deref() == Ok("pause-before-rename") {
            eprintln!("clawboard: fault injection: paused before renaming {}", tmp.display());
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        fs::rename(&tmp, &target).map_err(|e| Error::io(&target, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp); // best effort: the error being returned says what failed
        return result;
    }
    match sync {
        Sync::Durable => sync_dir(dir),
        Sync::View => Ok(()),
    }
}

/// Creates `dir/name` with file mode `mode`: only if absent (see
/// [`crate::store::create_atomic`]), or replacing what is there when `replace`.
pub(super) fn create(dir: &Path, name: &OsStr, bytes: &[u8], mode: u32, replace: bool) -> Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}{TEMP_MARK}{}.{n}", name.to_string_lossy(), std::process::id()));
    let target = dir.join(name);
    let linked = (|| {
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(|e| Error::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
        let placed = if replace { fs::rename(&tmp, &target) } else { fs::hard_link(&tmp, &target) };
        match placed {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::io(&target, e)),
        }
    })();
    let _ = fs::remove_file(&tmp); // gone after a rename; else best effort (the next `init` removes it)
    if linked? {
        sync_dir(dir)?;
        return Ok(true);
    }
    Ok(false)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}

/// The pid that wrote a temp file, from its name.
fn temp_owner(name: &str) -> Option<u32> {
    let rest = &name[name.find(TEMP_MARK)? + TEMP_MARK.len()..];
    rest.split('.').next()?.parse().ok()
}

/// Whether the process `pid` (a temp file's writer) is still running.
pub fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes temp files under `root` whose writer is gone. Returns them, relative to `root`.
///
/// The local bucket (`.clawboard/bucket`) is not walked: the store never writes
/// there (the sync's directory backend does, and clears its own temp files),
/// and it holds a copy of the whole tree and a sidecar per file. Walked, it was
/// two thirds of the walk: `clawboard run` on a tree of 1,000 tasks of 30 files
/// took 140 ms with it, 100 without.
pub(super) fn remove_stale_temps(root: &Path) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let bucket = root.join(crate::layout::LOCAL_BUCKET);
    let walk = walkdir::WalkDir::new(root).follow_links(false).into_iter();
    for entry in walk.filter_entry(|e| e.path() != bucket) {
        let entry = match entry {
            Ok(e) => e,
            Err(e) if e.io_error().is_some_and(|io| io.kind() == ErrorKind::NotFound) => {
                continue;
            }
            Err(e) => {
                // A directory this process may not read (someone else's, in a root
                // that held other things) has no temp file of ours: passed over.
                let path = e.path().map(Path::to_owned).unwrap_or_else(|| root.to_owned());
                tracing::warn!(path = %path.display(), "not looked into for leftover temp files: {e}");
                continue;
            }
        };
        let Some(name) = entry.file_name().to_str() else {
            continue;
        };
        if !entry.file_type().is_file() || !is_temp_name(name) {
            continue;
        }
        if temp_owner(name).is_some_and(process_alive) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(entry.path(), e)),
        }
        tracing::info!(path = %entry.path().display(), "removed a temp file left by a crashed write");
        let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
        removed.push(rel.display().to_string());
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), OsStr::new("a.json"), b"old").unwrap();
        write(dir.path(), OsStr::new("a.json"), b"new").unwrap();
        assert_eq!(fs::read(dir.path().join("a.json")).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_crash_before_rename_leaves_the_old_file_and_recovery_removes_the_temp() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), OsStr::new("a.json"), b"old").unwrap();
        // What a writer killed between fsync and rename leaves: a temp file whose pid is gone.
        let dead_pid = u32::MAX - 1;
        let tmp = dir.path().join(format!(".a.json{TEMP_MARK}{dead_pid}.0"));
        fs::write(&tmp, b"ne").unwrap();
        assert_eq!(fs::read(dir.path().join("a.json")).unwrap(), b"old");
        let removed = remove_stale_temps(dir.path()).unwrap();
        assert_eq!(removed.len(), 1);
        assert!(!tmp.exists());
        assert_eq!(fs::read(dir.path().join("a.json")).unwrap(), b"old");
    }

    #[test]
    fn the_local_bucket_is_not_walked() {
        let dir = tempfile::tempdir().unwrap();
        let dead_pid = u32::MAX - 1;
        let bucket = dir.path().join(crate::layout::LOCAL_BUCKET).join("tasks/t1");
        let elsewhere = dir.path().join(".clawboard/cursors");
        fs::create_dir_all(&bucket).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        // A file in the bucket named like a store temp is left (the store never
        // writes there); a store temp elsewhere in the state directory is cleared.
        let object = bucket.join(format!(".a.json{TEMP_MARK}{dead_pid}.0"));
        let stale = elsewhere.join(format!(".push{TEMP_MARK}{dead_pid}.0"));
        fs::write(&object, b"x").unwrap();
        fs::write(&stale, b"x").unwrap();
        let removed = remove_stale_temps(dir.path()).unwrap();
        assert_eq!(removed, vec![format!(".clawboard/cursors/.push{TEMP_MARK}{dead_pid}.0")]);
        assert!(object.exists());
    }

    #[test]
    fn temps_of_live_writers_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join(format!(".a.json{TEMP_MARK}{}.7", std::process::id()));
        fs::write(&mine, b"x").unwrap();
        assert!(remove_stale_temps(dir.path()).unwrap().is_empty());
        assert!(mine.exists());
        assert_eq!(temp_owner(&format!(".a{TEMP_MARK}123.4")), Some(123));
    }
}
