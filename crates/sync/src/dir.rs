//! The local-directory backend: the embedded default when no bucket is configured.
//!
//! Objects are plain files at `{dir}/{key}`, so the "bucket" can be browsed like the
//! tree. Each object's ETag and metadata live in a sidecar,
//! `{dir}/.clawboard-meta/{key}.json`. Writes are atomic (temp file in
//! `.clawboard-meta/tmp/`, fsync, rename); a conditional create links the temp file
//! into place (`link(2)` fails when the name exists, like `O_EXCL`, and never shows
//! a half-written object); every write holds the key's lock (one of 64 lock files,
//! `.clawboard-meta/lock-NN`, picked by a hash of the key), so an `If-Match`
//! replace is a true compare-and-swap, also between processes, while writes of
//! other keys (and their fsyncs) go on in parallel. Reads hold the key's lock
//! shared, so a read never pairs one write's content with another's sidecar.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Failure, RemoteError};
use crate::remote::{Body, Condition, Metadata, ObjectInfo, Page, PutOutcome, Remote};

mod pool;

const META_DIR: &str = ".clawboard-meta";

#[derive(Debug, Clone)]
pub struct DirRemote {
    dir: PathBuf,
    /// Where the file system work runs (see [`pool`]).
    pool: Arc<pool::Pool>,
}

#[derive(Serialize, Deserialize)]
struct Sidecar {
    etag: String,
    #[serde(default)]
    metadata: Metadata,
}

fn err(failure: Failure, op: &'static str, key: &str, e: impl std::fmt::Display) -> RemoteError {
    RemoteError::new(failure, op, key, e.to_string())
}

fn io_err(op: &'static str, key: &str, e: std::io::Error) -> RemoteError {
    // A local disk error is not going to fix itself between retries, except a full
    // disk; a name the file system refuses is this key's alone.
    let failure = match e.kind() {
        ErrorKind::StorageFull => Failure::Retryable,
        _ if name_refused(&e) => Failure::KeyRefused,
        _ => Failure::Permanent,
    };
    err(failure, op, key, e)
}

/// A name too long, or a file where a directory of other keys (or their sidecars)
/// must be, or the other way round.
fn name_refused(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::InvalidFilename | ErrorKind::NotADirectory | ErrorKind::IsADirectory)
        || e.kind() == ErrorKind::AlreadyExists
}

/// A key that cannot name an object here, so none is stored under it (a read finds nothing).
fn cannot_exist(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::InvalidFilename | ErrorKind::NotADirectory)
}

/// The ETag of content on this backend: the first 128 bits of its BLAKE3 hash.
fn etag_of(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex()[..32].to_owned()
}

fn check_key(op: &'static str, key: &str) -> Result<(), RemoteError> {
    let bad = key.is_empty()
        || key.starts_with('/')
        || key.split('/').any(|c| c.is_empty() || c == "." || c == "..")
        || key == META_DIR
        || key.starts_with(&format!("{META_DIR}/"))
        || key.contains('\0');
    if bad {
        return Err(err(Failure::KeyRefused, op, key, "not a valid key for the local-directory backend"));
    }
    Ok(())
}

impl DirRemote {
    /// Opens the directory `dir` as a bucket; it must exist. A missing one is not
    /// made: a share that is not mounted (or a directory renamed) would then be
    /// taken for a new, empty bucket, and a reconcile against it deletes local files.
    pub fn open_existing(dir: &Path) -> Result<DirRemote, RemoteError> {
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => DirRemote::open(dir),
            Ok(_) => Err(err(Failure::Permanent, "OPEN", &dir.display().to_string(), "is not a directory (sync.dir)")),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(err(
                Failure::Permanent,
                "OPEN",
                &dir.display().to_string(),
                "the bucket directory does not exist (sync.dir); create it, or mount the share it is on. \
                 clawboard makes only its default .clawboard/bucket, so that a share not mounted is not \
                 taken for an empty bucket",
            )),
            Err(e) => Err(io_err("OPEN", &dir.display().to_string(), e)),
        }
    }

    /// Opens (creating if needed) the directory `dir` as a bucket.
    pub fn open(dir: &Path) -> Result<DirRemote, RemoteError> {
        let tmp = dir.join(META_DIR).join("tmp");
        let name = dir.display().to_string();
        fs::create_dir_all(&tmp).map_err(|e| io_err("OPEN", &name, e))?;
        remove_stale_temps(&tmp).map_err(|e| io_err("OPEN", &name, e))?;
        let pool = pool::Pool::start("clawboard-dir").map_err(|e| io_err("OPEN", &name, e))?;
        Ok(DirRemote { dir: dir.to_owned(), pool: Arc::new(pool) })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn content_path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    fn sidecar_path(&self, key: &str) -> PathBuf {
        self.dir.join(META_DIR).join(format!("{key}.json"))
    }

    /// The key's lock, held exclusively (a write) until the file is dropped.
    fn lock(&self, key: &str) -> Result<File, RemoteError> {
        let f = self.lock_file(key)?;
        f.lock().map_err(|e| io_err("LOCK", key, e))?;
        Ok(f)
    }

    /// The key's lock, shared (a read): a write writes the sidecar and then
    /// renames the content into place, so a read between the two would pair the
    /// old content with the new sidecar's version. Pull would then record the
    /// newer version over the older bytes and never fetch them again (seen as a
    /// node stuck with a task `running` that finished elsewhere).
    fn read_lock(&self, key: &str) -> Result<Option<File>, RemoteError> {
        // Opened for reading where it exists: a bucket one may only read (mounted
        // read-only, say) can still be read; `flock` needs no write access. Where
        // the lock file is missing and cannot be made there, no one writes through
        // this mount either, and the read goes without it.
        let f = match File::open(self.lock_path(key)) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => match self.create_lock(key) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::ReadOnlyFilesystem => return Ok(None),
                Err(e) => return Err(io_err("LOCK", key, e)),
            },
            Err(e) => return Err(io_err("LOCK", key, e)),
        };
        f.lock_shared().map_err(|e| io_err("LOCK", key, e))?;
        Ok(Some(f))
    }

    /// The key's lock file, one of 64 picked by a hash of the key.
    fn lock_path(&self, key: &str) -> PathBuf {
        let stripe = blake3::hash(key.as_bytes()).as_bytes()[0] % 64;
        self.dir.join(META_DIR).join(format!("lock-{stripe:02}"))
    }

    fn lock_file(&self, key: &str) -> Result<File, RemoteError> {
        self.create_lock(key).map_err(|e| io_err("LOCK", key, e))
    }

    /// The key's lock file, opened for writing (made if missing).
    fn create_lock(&self, key: &str) -> std::io::Result<File> {
        OpenOptions::new().create(true).truncate(false).write(true).open(self.lock_path(key))
    }

    /// A new temp file in `.clawboard-meta/tmp/`, named `{pid}.{random}`.
    fn temp(&self, key: &str) -> Result<(PathBuf, File), RemoteError> {
        let mut n = [0u8; 8];
        getrandom::fill(&mut n).map_err(|e| err(Failure::Permanent, "PUT", key, e))?;
        let path =
            self.dir.join(META_DIR).join("tmp").join(format!("{}.{:016x}", std::process::id(), u64::from_le_bytes(n)));
        let f = OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| io_err("PUT", key, e))?;
        Ok((path, f))
    }

    fn read_sidecar(&self, key: &str) -> Result<Option<Sidecar>, RemoteError> {
        match fs::read(self.sidecar_path(key)) {
            Ok(b) => Ok(serde_json::from_slice(&b).ok()),
            Err(e) if e.kind() == ErrorKind::NotFound || cannot_exist(&e) => Ok(None),
            Err(e) => Err(io_err("HEAD", key, e)),
        }
    }

    /// Writes the body to a temp file; returns its path and ETag, or `None` when a
    /// file body changed under us.
    fn write_temp(&self, key: &str, body: &Body) -> Result<Option<(PathBuf, String)>, RemoteError> {
        let (path, mut f) = self.temp(key)?;
        let result = (|| {
            let etag = match body {
                Body::Bytes(b) => {
                    f.write_all(b).map_err(|e| io_err("PUT", key, e))?;
                    etag_of(b)
                }
                Body::File { path: src, blake3: expected, .. } => {
                    let mut src = File::open(src).map_err(|e| io_err("PUT", key, e))?;
                    let mut hasher = blake3::Hasher::new();
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        let n = src.read(&mut buf).map_err(|e| io_err("PUT", key, e))?;
                        if n == 0 {
                            break;
                        }
                        hasher.update(&buf[..n]);
                        f.write_all(&buf[..n]).map_err(|e| io_err("PUT", key, e))?;
                    }
                    let hex = hasher.finalize().to_hex();
                    if hex.as_str() != expected {
                        return Ok(None);
                    }
                    hex[..32].to_owned()
                }
            };
            f.sync_all().map_err(|e| io_err("PUT", key, e))?;
            Ok(Some(etag))
        })();
        match result {
            Ok(Some(etag)) => Ok(Some((path, etag))),
            other => {
                let _ = fs::remove_file(&path);
                other.map(|_| None)
            }
        }
    }

    fn write_sidecar(&self, key: &str, sidecar: &Sidecar) -> Result<(), RemoteError> {
        let (tmp, mut f) = self.temp(key)?;
        let bytes = serde_json::to_vec(sidecar).map_err(|e| err(Failure::Permanent, "PUT", key, e))?;
        let dest = self.sidecar_path(key);
        let done = f
            .write_all(&bytes)
            .and_then(|()| f.sync_all())
            .and_then(|()| fs::create_dir_all(dest.parent().unwrap_or(&self.dir)))
            .and_then(|()| fs::rename(&tmp, &dest));
        if let Err(e) = done {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("PUT", key, e));
        }
        Ok(())
    }

    fn current_etag(&self, key: &str) -> Result<Option<String>, RemoteError> {
        if !self.content_path(key).is_file() {
            return Ok(None);
        }
        match self.read_sidecar(key)? {
            Some(s) => Ok(Some(s.etag)),
            None => {
                let bytes = fs::read(self.content_path(key)).map_err(|e| io_err("HEAD", key, e))?;
                Ok(Some(etag_of(&bytes)))
            }
        }
    }

    fn put_sync(
        &self,
        key: &str,
        body: &Body,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<PutOutcome, RemoteError> {
        check_key("PUT", key)?;
        let Some((tmp, etag)) = self.write_temp(key, body)? else {
            return Ok(PutOutcome::BodyChanged);
        };
        let dest = self.content_path(key);
        let _lock = self.lock(key)?;
        let result = (|| {
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent).map_err(|e| io_err("PUT", key, e))?;
            }
            if dest.is_dir() {
                return Err(err(Failure::KeyRefused, "PUT", key, "a directory of other keys has this name"));
            }
            let sidecar = Sidecar { etag: etag.clone(), metadata: metadata.clone() };
            match condition {
                Condition::Absent => {
                    match fs::hard_link(&tmp, &dest) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                            return Err(err(
                                Failure::PreconditionFailed,
                                "PUT",
                                key,
                                "the object exists (If-None-Match: *)",
                            ));
                        }
                        Err(e) => return Err(io_err("PUT", key, e)),
                    }
                    if let Err(e) = self.write_sidecar(key, &sidecar) {
                        // No object without its sidecar: the link is undone.
                        let _ = fs::remove_file(&dest);
                        return Err(e);
                    }
                }
                Condition::Matches(want) => {
                    let have = self.current_etag(key)?;
                    if have.as_deref() != Some(want.as_str()) {
                        return Err(err(
                            Failure::PreconditionFailed,
                            "PUT",
                            key,
                            format!("the object's ETag is {} (If-Match: {want})", have.as_deref().unwrap_or("none")),
                        ));
                    }
                    self.write_sidecar(key, &sidecar)?;
                    fs::rename(&tmp, &dest).map_err(|e| io_err("PUT", key, e))?;
                }
                Condition::None => {
                    self.write_sidecar(key, &sidecar)?;
                    fs::rename(&tmp, &dest).map_err(|e| io_err("PUT", key, e))?;
                }
            }
            if let Some(parent) = dest.parent() {
                File::open(parent).and_then(|d| d.sync_all()).map_err(|e| io_err("PUT", key, e))?;
            }
            Ok(PutOutcome::Stored { etag: Some(etag) })
        })();
        let _ = fs::remove_file(&tmp);
        result
    }

    fn head_sync(&self, key: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        check_key("HEAD", key)?;
        let _lock = self.read_lock(key)?;
        let meta = match fs::metadata(self.content_path(key)) {
            Ok(m) if m.is_file() => m,
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound || cannot_exist(&e) => return Ok(None),
            Err(e) => return Err(io_err("HEAD", key, e)),
        };
        let sidecar = self.read_sidecar(key)?;
        let etag = match &sidecar {
            Some(s) => s.etag.clone(),
            None => self.current_etag(key)?.unwrap_or_default(),
        };
        Ok(Some(ObjectInfo {
            key: key.to_owned(),
            size: meta.len(),
            etag: Some(etag),
            metadata: sidecar.map(|s| s.metadata).unwrap_or_default(),
        }))
    }

    fn get_sync(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        check_key("GET", key)?;
        let _lock = self.read_lock(key)?;
        let bytes = match fs::read(self.content_path(key)) {
            Ok(b) => b,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::IsADirectory) || cannot_exist(&e) => {
                return Ok(None);
            }
            Err(e) => return Err(io_err("GET", key, e)),
        };
        let sidecar = self.read_sidecar(key)?;
        let info = ObjectInfo {
            key: key.to_owned(),
            size: bytes.len() as u64,
            etag: Some(sidecar.as_ref().map_or_else(|| etag_of(&bytes), |s| s.etag.clone())),
            metadata: sidecar.map(|s| s.metadata).unwrap_or_default(),
        };
        Ok(Some((Bytes::from(bytes), info)))
    }

    fn delete_sync(&self, key: &str) -> Result<(), RemoteError> {
        check_key("DELETE", key)?;
        let _lock = self.lock(key)?;
        for path in [self.content_path(key), self.sidecar_path(key)] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("DELETE", key, e)),
            }
        }
        // A bucket has no directories: drop the ones this delete emptied.
        for base in [self.dir.clone(), self.dir.join(META_DIR)] {
            let mut parent = Path::new(key).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                if fs::remove_dir(base.join(p)).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
        Ok(())
    }

    fn list_sync(&self, prefix: &str, start_after: Option<&str>, max: usize) -> Result<Page, RemoteError> {
        let mut objects = Vec::new();
        let max = max.clamp(1, 1000);
        walk_sorted(&self.dir, "", prefix, start_after.unwrap_or(""), max + 1, &mut objects)
            .map_err(|e| io_err("LIST", prefix, e))?;
        let next = if objects.len() > max {
            objects.truncate(max);
            objects.last().map(|o: &ObjectInfo| o.key.clone())
        } else {
            None
        };
        Ok(Page { objects, next })
    }
}

/// Appends the files under `dir` (whose keys start with `base`) in key byte order,
/// skipping whole subtrees that sort at or before `after` or lie outside `prefix`.
fn walk_sorted(
    dir: &Path,
    base: &str,
    prefix: &str,
    after: &str,
    max: usize,
    out: &mut Vec<ObjectInfo>,
) -> std::io::Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut entries: Vec<(String, bool, u64)> = Vec::new();
    for e in rd {
        let e = e?;
        let Ok(name) = e.file_name().into_string() else { continue };
        if base.is_empty() && name == META_DIR {
            continue;
        }
        let ft = e.file_type()?;
        if ft.is_dir() {
            entries.push((format!("{base}{name}/"), true, 0));
        } else if ft.is_file() {
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            entries.push((format!("{base}{name}"), false, size));
        }
    }
    // A directory sorts by its key prefix `name/`: every key under it starts so.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, is_dir, size) in entries {
        if out.len() >= max {
            return Ok(());
        }
        if is_dir {
            let outside = !(key.starts_with(prefix) || prefix.starts_with(&key));
            let all_before = !after.is_empty() && *after > *key.as_str() && !after.starts_with(&key);
            if outside || all_before {
                continue;
            }
            let name = key.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            walk_sorted(&dir.join(name), &key, prefix, after, max, out)?;
        } else if key.starts_with(prefix) && *key.as_str() > *after {
            out.push(ObjectInfo { key, size, etag: None, metadata: Metadata::new() });
        }
    }
    Ok(())
}

/// Removes the temp files in `tmp` (`{pid}.{random}`) whose writer is gone: a
/// process killed in the middle of a write leaves one. The store's own walk
/// for such files skips the bucket (`clawboard_core::layout::LOCAL_BUCKET`).
fn remove_stale_temps(tmp: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(tmp)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.split('.').next()).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if clawboard_core::store::process_alive(pid) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => tracing::info!(path = %entry.path().display(), "removed a temp file left by a killed write"),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Remote for DirRemote {
    fn describe(&self) -> String {
        format!("dir:{}", self.dir.display())
    }

    async fn put(
        &self,
        key: &str,
        body: Body,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<PutOutcome, RemoteError> {
        let (me, key, metadata, condition) = (self.clone(), key.to_owned(), metadata.clone(), condition.clone());
        self.pool.run(move || me.put_sync(&key, &body, &metadata, &condition)).await
    }

    async fn get(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        let (me, key) = (self.clone(), key.to_owned());
        self.pool.run(move || me.get_sync(&key)).await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        let (me, key) = (self.clone(), key.to_owned());
        self.pool.run(move || me.head_sync(&key)).await
    }

    async fn list(&self, prefix: &str, start_after: Option<&str>, max: usize) -> Result<Page, RemoteError> {
        let (me, prefix, after) = (self.clone(), prefix.to_owned(), start_after.map(str::to_owned));
        self.pool.run(move || me.list_sync(&prefix, after.as_deref(), max)).await
    }

    async fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let (me, key) = (self.clone(), key.to_owned());
        self.pool.run(move || me.delete_sync(&key)).await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, RemoteError)>, RemoteError> {
        let (me, keys) = (self.clone(), keys.to_vec());
        self.pool
            .run(move || Ok(keys.into_iter().filter_map(|k| me.delete_sync(&k).err().map(|e| (k, e))).collect()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_the_bucket_clears_the_temp_files_of_killed_writers() {
        let d = tempfile::tempdir().unwrap();
        let tmp = d.path().join(META_DIR).join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        let dead = tmp.join(format!("{}.00000000deadbeef", u32::MAX - 1));
        let mine = tmp.join(format!("{}.0000000000000001", std::process::id()));
        let other = tmp.join("notes.txt");
        for f in [&dead, &mine, &other] {
            fs::write(f, b"half").unwrap();
        }
        DirRemote::open(d.path()).unwrap();
        assert!(!dead.exists(), "a dead writer's temp file is removed");
        assert!(mine.exists(), "a live writer's is kept");
        assert!(other.exists(), "a name that is not a temp file's is left alone");
    }

    /// A read racing a replace sees one version whole: its content and its
    /// sidecar's ETag agree. (Without the read lock, 2,000 rounds showed a mix.)
    #[test]
    fn a_get_during_a_put_never_pairs_old_content_with_the_new_sidecar() {
        let d = tempfile::tempdir().unwrap();
        let r = DirRemote::open(d.path()).unwrap();
        let put = |r: &DirRemote, i: u32| {
            let body = Body::Bytes(Bytes::from(format!("version {i} ").repeat(1 + i as usize % 7)));
            r.put_sync("tasks/t/task.json", &body, &Metadata::new(), &Condition::None).unwrap();
        };
        put(&r, 0);
        let writer = {
            let r = r.clone();
            std::thread::spawn(move || (1..2000).for_each(|i| put(&r, i)))
        };
        let mut reads = 0;
        while !writer.is_finished() {
            let (bytes, info) = r.get_sync("tasks/t/task.json").unwrap().unwrap();
            assert_eq!(info.etag.as_deref(), Some(etag_of(&bytes).as_str()), "read {reads}: {bytes:?}");
            reads += 1;
        }
        writer.join().unwrap();
        assert!(reads > 0);
    }

    #[test]
    fn listing_follows_key_byte_order_across_directories() {
        let d = tempfile::tempdir().unwrap();
        let r = DirRemote::open(d.path()).unwrap();
        for k in ["a/b", "a.b", "a0", "b", "a/c/d", "ab"] {
            r.put_sync(k, &Body::Bytes(Bytes::from_static(b"x")), &Metadata::new(), &Condition::None).unwrap();
        }
        let mut want = vec!["a/b", "a.b", "a0", "b", "a/c/d", "ab"];
        want.sort_unstable();
        let keys = |p: Page| p.objects.into_iter().map(|o| o.key).collect::<Vec<_>>();
        assert_eq!(keys(r.list_sync("", None, 1000).unwrap()), want);
        assert_eq!(keys(r.list_sync("", Some("a/b"), 1000).unwrap()), want[2..].to_vec());
        assert_eq!(keys(r.list_sync("a/", None, 1000).unwrap()), vec!["a/b", "a/c/d"]);
        let page = r.list_sync("", None, 2).unwrap();
        assert_eq!(page.next.as_deref(), Some(want[1]));
    }
}
