//! What the commands and the daemon share about the daemon of a root: its lock
//! (`.clawboard/daemon.lock`, held by the journal's only writer), its API socket
//! and a GET on it, and the file that holds its web page's address.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

/// The API's Unix socket (mode 0600), under the root.
pub const SOCKET: &str = ".clawboard/api.sock";

/// Where a running daemon's web page listens (`host:port`), under the root.
pub const WEB_ADDR_FILE: &str = ".clawboard/web.addr";

pub fn socket_path(root: &Path) -> PathBuf {
    root.join(SOCKET)
}

/// `.clawboard/daemon.lock`, taken or not. Whoever holds it is the journal's only writer.
pub enum RootLock {
    Taken(File),
    /// A daemon holds it: its pid as it wrote it (empty if unreadable).
    HeldBy(String),
}

/// Takes `.clawboard/daemon.lock` if no daemon holds it.
pub fn try_lock_root(root: &Path) -> anyhow::Result<RootLock> {
    let path = root.join(".clawboard/daemon.lock");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        // A pid left by a daemon that stopped goes: the file names only who holds it.
        Ok(()) => {
            f.set_len(0).with_context(|| format!("clearing {}", path.display()))?;
            Ok(RootLock::Taken(f))
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            // The pid only names the holder in a message; an unreadable one stays empty.
            if let Err(e) = f.read_to_string(&mut pid) {
                tracing::debug!("cannot read the pid in {}: {e}", path.display());
            }
            Ok(RootLock::HeldBy(pid.trim().to_owned()))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// True when a daemon holds `.clawboard/daemon.lock` (asked with a shared lock
/// on a read-only open, so anyone who can read the state directory may ask). A
/// `clawboard run` or `sync`, which hold it too, write no pid in it.
pub fn daemon_holds(root: &Path) -> bool {
    let Ok(mut f) = File::open(root.join(".clawboard/daemon.lock")) else { return false };
    match f.try_lock_shared() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            f.read_to_string(&mut pid).is_ok() && !pid.trim().is_empty()
        }
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

/// [`try_lock_root`], tried again for up to `patience` while another holds the
/// lock. A process killed a moment ago can still hold it: a child it forked to
/// run a role shares the lock's open file until that child's `exec`, which a
/// busy machine can delay by tens of milliseconds. A daemon started right after
/// a `kill -9` (of a daemon, or of `clawboard run`) waits that out instead of
/// refusing to start.
pub fn lock_root_patiently(root: &Path, patience: std::time::Duration) -> anyhow::Result<RootLock> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match try_lock_root(root)? {
            RootLock::HeldBy(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            lock => return Ok(lock),
        }
    }
}

/// A GET on the API of the daemon running on `root`, if one answers.
pub fn get_json(root: &Path, path: &str) -> Option<Value> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket_path(root)).ok()?;
    let timeout = Some(std::time::Duration::from_secs(3));
    s.set_read_timeout(timeout).ok()?;
    s.set_write_timeout(timeout).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: clawboard\r\n\r\n").as_bytes()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then_some(()).or_else(|| head.starts_with("HTTP/1.1 200").then_some(()))?;
    serde_json::from_str(body).ok()
}
