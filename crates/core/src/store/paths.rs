//! Paths inside the tree: plain names only, and no symlink that leads out of the root.

use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::Store;
use crate::error::{Error, Result};

/// A path relative to the blackboard root made of plain names (no `..`, no `.`,
/// not absolute, no empty or NUL-containing parts).
///
/// Kept as given (as it displays), compared and hashed as a [`Path`]: by its
/// names, so `a//b/` and `a/b` are the same path.
#[derive(Debug, Clone)]
pub struct RelPath(String);

impl PartialEq for RelPath {
    fn eq(&self, other: &Self) -> bool {
        self.as_path() == other.as_path()
    }
}

impl Eq for RelPath {}

impl std::hash::Hash for RelPath {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_path().hash(state);
    }
}

impl PartialOrd for RelPath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RelPath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_path().cmp(other.as_path())
    }
}

impl RelPath {
    pub fn new(s: &str) -> Result<RelPath> {
        let refuse = |reason: &str| Err(Error::UnsafePath { path: s.to_owned(), reason: reason.to_owned() });
        if s.is_empty() {
            return refuse("the path is empty");
        }
        if s.contains('\0') {
            return refuse("the path contains a NUL byte");
        }
        if s.contains('\\') {
            return refuse("the path contains a backslash; use '/'");
        }
        let path = Path::new(s);
        for c in path.components() {
            match c {
                Component::Normal(_) => {}
                Component::ParentDir => return refuse("'..' would leave the blackboard root"),
                Component::RootDir | Component::Prefix(_) => {
                    return refuse("the path must be relative to the blackboard root");
                }
                Component::CurDir => return refuse("'.' is not allowed in a path"),
            }
        }
        Ok(RelPath(s.to_owned()))
    }

    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }

    /// The last component (every RelPath has one).
    pub fn file_name(&self) -> &std::ffi::OsStr {
        self.as_path().file_name().unwrap_or_default()
    }

    pub fn parent(&self) -> &Path {
        self.as_path().parent().unwrap_or(Path::new(""))
    }

    pub fn join(&self, name: &str) -> Result<RelPath> {
        RelPath::new(&format!("{}/{name}", self))
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// True when every directory between `root` and `rel` (a `/`-separated path under
/// it) is a real directory, not a symbolic link, so a path built from them stays in
/// the tree. For code that works on tree paths without a [`Store`] (sync, the
/// journal): a link to a directory is never walked into, whatever it points at.
pub fn real_dirs(root: &Path, rel: &str) -> bool {
    let parents = rel.trim_end_matches('/').rsplit_once('/').map_or("", |(d, _)| d);
    !rel.starts_with('/') && real_dir(root, parents)
}

/// True when `rel_dir` itself and every directory above it (up to `root`) is a real
/// directory, not a symbolic link. The root itself (`""`) always is.
pub fn real_dir(root: &Path, rel_dir: &str) -> bool {
    if rel_dir.starts_with('/') {
        return false; // not under the root at all
    }
    let mut cur = root.to_path_buf();
    rel_dir.split('/').filter(|p| !p.is_empty()).all(|part| {
        cur.push(part);
        part != ".." && fs::symlink_metadata(&cur).is_ok_and(|m| m.is_dir())
    })
}

/// The metadata of `root/rel` if it is a regular file reached through real
/// directories only ([`real_dirs`]); `None` for anything else (gone, a link, a FIFO).
pub fn plain_file(root: &Path, rel: &str) -> Option<fs::Metadata> {
    if !real_dirs(root, rel) {
        return None;
    }
    fs::symlink_metadata(root.join(rel)).ok().filter(fs::Metadata::is_file)
}

/// Opens `root/rel` for reading if it is a regular file reached through real
/// directories only: never through a link, never a FIFO (so never blocks). `Ok(None)`
/// when it is gone or not such a file.
pub fn open_plain(root: &Path, rel: &str) -> std::io::Result<Option<fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    if !real_dirs(root, rel) {
        return Ok(None);
    }
    let opened =
        fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(root.join(rel));
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(f.metadata()?.is_file().then_some(f))
}

impl Store {
    /// The directory that holds `rel`, created if asked; refuses symlinks out of the root.
    pub(super) fn safe_dir(&self, rel: &RelPath, create: bool) -> Result<PathBuf> {
        self.safe_dir_all(rel.parent(), create)
    }

    pub(super) fn safe_dir_all(&self, rel_dir: &Path, create: bool) -> Result<PathBuf> {
        let mut cur = self.root.clone();
        let mut shown = PathBuf::new();
        for comp in rel_dir.components() {
            cur.push(comp);
            shown.push(comp);
            let unsafe_path =
                |reason: &str| Error::UnsafePath { path: shown.display().to_string(), reason: reason.to_owned() };
            match fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => {
                    let target = fs::canonicalize(&cur).map_err(|e| Error::io(&cur, e))?;
                    if !target.starts_with(&self.root) {
                        return Err(unsafe_path("is a symlink that leads outside the blackboard root"));
                    }
                    if self.in_state_dir(&target) && !rel_dir.starts_with(crate::layout::STATE) {
                        return Err(unsafe_path("is a symlink into clawboard's own state (.clawboard/)"));
                    }
                    if !target.is_dir() {
                        return Err(unsafe_path("is a symlink to a file, where a directory is needed"));
                    }
                }
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(unsafe_path("is a file, where a directory is needed")),
                Err(e) if e.kind() == ErrorKind::NotFound && create => match fs::create_dir(&cur) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::io(&cur, e)),
                },
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(Error::NotFound { path: shown.display().to_string() });
                }
                Err(e) => return Err(Error::io(&cur, e)),
            }
        }
        Ok(cur)
    }

    fn in_state_dir(&self, real: &Path) -> bool {
        real.starts_with(self.root.join(crate::layout::STATE))
    }

    /// The absolute path of an existing `rel`, which must stay inside the root.
    pub(super) fn resolve_existing(&self, rel: &RelPath) -> Result<PathBuf> {
        let path = self.path(rel);
        match fs::canonicalize(&path) {
            Ok(real) if self.in_state_dir(&real) && !rel.as_path().starts_with(crate::layout::STATE) => {
                Err(Error::UnsafePath {
                    path: rel.to_string(),
                    reason: "is a symlink into clawboard's own state (.clawboard/)".into(),
                })
            }
            Ok(real) if real.starts_with(&self.root) => Ok(real),
            Ok(_) => Err(Error::UnsafePath {
                path: rel.to_string(),
                reason: "is a symlink that leads outside the blackboard root".into(),
            }),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::NotFound { path: rel.to_string() }),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_paths_that_leave_the_root() {
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "./a", "a\\b", "a\0b"] {
            assert!(matches!(RelPath::new(bad), Err(Error::UnsafePath { .. })), "{bad:?}");
        }
        assert_eq!(RelPath::new("tasks/t1/task.json").unwrap().to_string(), "tasks/t1/task.json");
    }

    #[cfg(unix)]
    #[test]
    fn never_writes_through_a_symlink_out_of_the_root() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("tasks/evil")).unwrap();
        let rel = RelPath::new("tasks/evil/task.json").unwrap();
        let err = store.write_bytes(&rel, b"{}").unwrap_err();
        assert!(err.to_string().contains("leads outside the blackboard root"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // Reading through it is refused too.
        std::fs::write(outside.path().join("task.json"), "{}").unwrap();
        assert!(matches!(store.read_bytes(&rel), Err(Error::UnsafePath { .. })));
    }

    #[cfg(unix)]
    #[test]
    fn follows_symlinks_that_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(dir.path()).unwrap();
        std::fs::create_dir(dir.path().join("tasks/real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("tasks/real"), dir.path().join("tasks/alias")).unwrap();
        store.write_bytes(&RelPath::new("tasks/alias/x.md").unwrap(), b"hi").unwrap();
        assert_eq!(std::fs::read(dir.path().join("tasks/real/x.md")).unwrap(), b"hi");
    }
}
