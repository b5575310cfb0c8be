//! What sync is configured to do, the backend it talks to, and this node's id.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;

use crate::dir::DirRemote;
use crate::error::{Error, RemoteError, Result};
use crate::remote::{Body, Condition, Metadata, ObjectInfo, Page, PutOutcome, Remote};
use crate::s3::{S3Config, S3Remote};

/// Where the tree is pushed.
#[derive(Debug, Clone)]
pub enum Backend {
    S3(S3Config),
    /// A directory (absolute, or relative to the root).
    Dir(PathBuf),
}

#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub enabled: bool,
    pub backend: Backend,
    /// The push schedule (cron; five fields, or six with seconds first).
    pub schedule: Schedule,
    /// Push at once when a task reaches `completed` or `failed`.
    pub push_on_task_end: bool,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Glob patterns (relative paths) never pushed, besides `.clawboard/` and editor files.
    pub exclude: Vec<String>,
    /// Retries of a retryable failure before the push gives up until its next run.
    pub retries: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Files larger than this go up in parts of [`crate::s3::PART_SIZE`].
    pub multipart_threshold: u64,
    /// Pull on the push schedule (several nodes share the bucket).
    pub pull: bool,
    /// Heartbeat interval (`_nodes/{node}.json`), and the lease after which a silent
    /// node's claims may be taken over.
    pub heartbeat: Duration,
    pub lease: Duration,
    /// A pull deleting more than this share of the synced tree is refused.
    pub mass_delete_ratio: f64,
    /// Conflict copies kept per file (the oldest go).
    pub max_conflict_copies: usize,
    /// This node's change-log segments older than this are deleted.
    pub log_retention: Duration,
}

impl SyncSettings {
    /// The embedded default: on, pushing to `.clawboard/bucket` every 5 minutes.
    pub fn local_default() -> Result<SyncSettings> {
        Ok(SyncSettings {
            enabled: true,
            backend: Backend::Dir(PathBuf::from(".clawboard/bucket")),
            schedule: Schedule::parse("sync.schedule", DEFAULT_SCHEDULE)?,
            push_on_task_end: true,
            concurrency: 16,
            exclude: Vec::new(),
            retries: 5,
            retry_base: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            multipart_threshold: 16 << 20,
            pull: true,
            heartbeat: Duration::from_secs(30),
            lease: Duration::from_secs(120),
            mass_delete_ratio: 0.5,
            max_conflict_copies: 10,
            log_retention: Duration::from_secs(7 * 24 * 3600),
        })
    }
}

pub const DEFAULT_SCHEDULE: &str = "*/5 * * * *";

/// A cron schedule (the `cron` crate), accepting the usual five fields (minute
/// first) as well as six or seven (seconds first; for tests, down to seconds).
#[derive(Debug, Clone)]
pub struct Schedule {
    pub text: String,
    inner: cron::Schedule,
}

impl Schedule {
    pub fn parse(field: &str, text: &str) -> Result<Schedule> {
        let fields = text.split_whitespace().count();
        let full = match fields {
            5 => format!("0 {text}"),
            6 | 7 => text.to_owned(),
            n => {
                return Err(Error::config(
                    field,
                    format!("{text:?}: a cron schedule has 5 fields (or 6 with seconds), not {n}"),
                ));
            }
        };
        let inner = cron::Schedule::from_str(&full).map_err(|e| Error::config(field, format!("{text:?}: {e}")))?;
        Ok(Schedule { text: text.to_owned(), inner })
    }

    /// The first run strictly after `t`.
    pub fn next_after(&self, t: chrono::DateTime<chrono::Utc>) -> Option<chrono::DateTime<chrono::Utc>> {
        self.inner.after(&t).next()
    }

    /// How long from now until the next run.
    pub fn until_next(&self) -> Duration {
        let now = chrono::Utc::now();
        self.inner.after(&now).next().and_then(|t| (t - now).to_std().ok()).unwrap_or(Duration::from_secs(300))
    }
}

/// One of the two real backends, chosen by the config at run time.
#[derive(Debug, Clone)]
pub enum AnyRemote {
    S3(S3Remote),
    Dir(DirRemote),
}

impl AnyRemote {
    /// Connects to the configured backend (`root` anchors a relative directory).
    pub async fn open(backend: &Backend, root: &Path) -> Result<AnyRemote> {
        match backend {
            Backend::S3(cfg) => Ok(AnyRemote::S3(S3Remote::new(cfg).await?)),
            Backend::Dir(dir) => {
                let dir = if dir.is_absolute() { dir.clone() } else { root.join(dir) };
                Ok(AnyRemote::Dir(DirRemote::open(&dir)?))
            }
        }
    }
}

impl Remote for AnyRemote {
    fn describe(&self) -> String {
        match self {
            AnyRemote::S3(r) => r.describe(),
            AnyRemote::Dir(r) => r.describe(),
        }
    }

    fn md5_etags(&self) -> bool {
        matches!(self, AnyRemote::S3(_))
    }

    async fn put(
        &self,
        key: &str,
        body: Body,
        metadata: &Metadata,
        condition: &Condition,
    ) -> Result<PutOutcome, RemoteError> {
        match self {
            AnyRemote::S3(r) => r.put(key, body, metadata, condition).await,
            AnyRemote::Dir(r) => r.put(key, body, metadata, condition).await,
        }
    }

    async fn get(&self, key: &str) -> Result<Option<(Bytes, ObjectInfo)>, RemoteError> {
        match self {
            AnyRemote::S3(r) => r.get(key).await,
            AnyRemote::Dir(r) => r.get(key).await,
        }
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectInfo>, RemoteError> {
        match self {
            AnyRemote::S3(r) => r.head(key).await,
            AnyRemote::Dir(r) => r.head(key).await,
        }
    }

    async fn list(&self, prefix: &str, start_after: Option<&str>, max: usize) -> Result<Page, RemoteError> {
        match self {
            AnyRemote::S3(r) => r.list(prefix, start_after, max).await,
            AnyRemote::Dir(r) => r.list(prefix, start_after, max).await,
        }
    }

    async fn delete(&self, key: &str) -> Result<(), RemoteError> {
        match self {
            AnyRemote::S3(r) => r.delete(key).await,
            AnyRemote::Dir(r) => r.delete(key).await,
        }
    }

    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, RemoteError)>, RemoteError> {
        match self {
            AnyRemote::S3(r) => r.delete_many(keys).await,
            AnyRemote::Dir(r) => r.delete_many(keys).await,
        }
    }
}

/// This node's id: `configured` if given, else the one stored in
/// `.clawboard/node-id`, else a new one (`{hostname}-{6 hex}`) stored there.
pub fn node_id(root: &Path, configured: Option<&str>) -> Result<String> {
    node_id_try(root, configured, 3)
}

fn node_id_try(root: &Path, configured: Option<&str>, tries: u32) -> Result<String> {
    if let Some(id) = configured {
        clawboard_core::check_id(id).map_err(|e| Error::config("node.id", format!("{id:?}: {e}")))?;
        return Ok(id.to_owned());
    }
    let state = root.join(clawboard_core::layout::STATE);
    let path = state.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if clawboard_core::check_id(s.trim()).is_ok() => return Ok(s.trim().to_owned()),
        Ok(s) => {
            return Err(Error::config(
                "node-id",
                format!("{}: {:?} is not a valid node id; delete the file to get a new one", path.display(), s.trim()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&path, e)),
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c.to_ascii_lowercase() } else { '-' })
        .take(40)
        .collect();
    let host = host.trim_matches('-');
    let mut n = [0u8; 3];
    getrandom::fill(&mut n).map_err(|e| Error::io(&path, std::io::Error::other(e)))?;
    let suffix = format!("{:02x}{:02x}{:02x}", n[0], n[1], n[2]);
    let id = if host.is_empty() { format!("node-{suffix}") } else { format!("{host}-{suffix}") };
    std::fs::create_dir_all(&state).map_err(|e| Error::io(&state, e))?;
    // Create-only: when two processes (the daemon starting, `clawboard status`) make
    // one at the same moment, both end up with the one that landed first.
    if clawboard_core::store::create_atomic(&state, "node-id", format!("{id}\n").as_bytes(), 0o644)? {
        return Ok(id);
    }
    // Someone else's landed first: read theirs. Something that exists yet cannot be
    // read as a file (a dangling link) ends here rather than looping.
    if tries == 0 {
        return Err(Error::config(
            "node-id",
            format!("{}: exists but is not a readable file; delete it to get a new one", path.display()),
        ));
    }
    node_id_try(root, None, tries - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_take_five_or_six_fields() {
        assert!(Schedule::parse("s", "*/5 * * * *").is_ok());
        assert!(Schedule::parse("s", "*/2 * * * * *").is_ok());
        let e = Schedule::parse("sync.schedule", "every 5 minutes").unwrap_err().to_string();
        assert!(e.contains("sync.schedule") && e.contains("5 fields"), "{e}");
        let e = Schedule::parse("sync.schedule", "99 * * * *").unwrap_err().to_string();
        assert!(e.contains("sync.schedule"), "{e}");
        let s = Schedule::parse("s", "* * * * * *").unwrap();
        assert!(s.until_next() <= Duration::from_secs(1));
    }

    #[test]
    fn node_id_is_generated_once() {
        let d = tempfile::tempdir().unwrap();
        let a = node_id(d.path(), None).unwrap();
        assert!(clawboard_core::check_id(&a).is_ok(), "{a}");
        assert_eq!(node_id(d.path(), None).unwrap(), a);
        assert_eq!(node_id(d.path(), Some("edge-1")).unwrap(), "edge-1");
        assert!(node_id(d.path(), Some("../x")).is_err());
    }

    #[test]
    fn processes_racing_to_make_the_node_id_agree_on_one() {
        for _ in 0..20 {
            let d = tempfile::tempdir().unwrap();
            let ids: Vec<String> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8).map(|_| s.spawn(|| node_id(d.path(), None).unwrap())).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
            assert_eq!(node_id(d.path(), None).unwrap(), ids[0]);
        }
    }
}
