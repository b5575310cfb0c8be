//! What sync is configured to do: `[sync]` as written ([`SyncSection`]) and
//! resolved over the embedded default into [`SyncSettings`], with errors naming the
//! key; the backend it talks to ([`AnyRemote`]), and this node's id.
//! Adding a sync key is an edit here only: the binary hands the section over as read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use clawboard_core::backoff::Backoff;
pub use clawboard_core::config::Schedule;
use clawboard_core::config::{self, ByteSize, ConfigError};
use serde::Deserialize;

use crate::dir::DirRemote;
use crate::error::{Error, RemoteError, Result};
use crate::remote::{Body, Condition, Metadata, ObjectInfo, Page, PutOutcome, Remote};
use crate::s3::{CredentialSource, S3Config, S3Remote};

/// `[sync]` as written in the config file (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSection {
    pub enabled: Option<bool>,
    pub schedule: Option<String>,
    pub push_on_task_end: Option<bool>,
    pub push_each_step: Option<bool>,
    pub concurrency: Option<usize>,
    pub exclude: Option<Vec<String>>,
    pub retries: Option<u32>,
    pub retry_base: Option<String>,
    pub retry_max: Option<String>,
    pub multipart_threshold: Option<ByteSize>,
    pub pull: Option<bool>,
    pub heartbeat: Option<String>,
    pub lease: Option<String>,
    pub mass_delete_ratio: Option<f64>,
    pub max_conflict_copies: Option<usize>,
    pub log_retention: Option<String>,
    /// The local-directory backend: a path (relative to the root, or absolute).
    pub dir: Option<String>,
    pub s3: Option<S3Section>,
}

/// `[sync.s3]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Section {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub bucket: String,
    pub prefix: Option<String>,
    pub path_style: Option<bool>,
    pub profile: Option<String>,
    pub credentials_file: Option<String>,
    pub request_timeout: Option<String>,
    pub connect_timeout: Option<String>,
}

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
    /// Several nodes: a task's next step starts only once the records of its last
    /// one are pushed, so a takeover re-runs no finished step (a push per step).
    pub push_each_step: bool,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Glob patterns (relative paths) never pushed, besides `.clawboard/` and editor files.
    pub exclude: Vec<String>,
    /// Retries of a retryable failure before the push gives up until its next run.
    pub retries: u32,
    /// The wait between them (`sync.retry_base` doubling up to `sync.retry_max`, jittered).
    pub retry: Backoff,
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

pub const DEFAULT_SCHEDULE: &str = "*/5 * * * *";

impl SyncSettings {
    /// The embedded default: on, pushing to `.clawboard/bucket` every 5 minutes.
    pub fn local_default() -> Result<SyncSettings> {
        SyncSettings::resolve(SyncSection::default(), |p: &str| PathBuf::from(p))
            .map_err(|e| Error::config(e.key, e.reason))
    }

    /// `[sync]` over the embedded default, checked; `expand` turns a path as written
    /// (`~/…`) into a path. Errors name the key (`sync.s3.bucket`).
    pub fn resolve(file: SyncSection, expand: impl Fn(&str) -> PathBuf) -> Result<SyncSettings, ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::new(format!("sync.{key}"), reason);
        let dur =
            |key: &str, v: Option<String>, default: Duration| config::duration(&format!("sync.{key}"), v, default);
        let schedule = Schedule::parse_or("sync.schedule", file.schedule, DEFAULT_SCHEDULE)?;
        let concurrency = file.concurrency.unwrap_or(16);
        if !(1..=256).contains(&concurrency) {
            return Err(bad("concurrency", format!("{concurrency} is out of range 1..=256")));
        }
        let retries = file.retries.unwrap_or(5);
        if retries > 30 {
            return Err(bad("retries", format!("{retries} is more than 30")));
        }
        let retry_base = dur("retry_base", file.retry_base, Duration::from_millis(200))?;
        let retry_max = dur("retry_max", file.retry_max, Duration::from_secs(30))?;
        if retry_base > retry_max {
            return Err(bad(
                "retry_base",
                format!("{retry_base:?} is more than sync.retry_max ({retry_max:?}); every wait would be retry_max"),
            ));
        }
        let multipart_threshold = file.multipart_threshold.map_or(16 << 20, |t| t.0);
        if multipart_threshold < crate::s3::PART_SIZE {
            return Err(bad("multipart_threshold", format!("{multipart_threshold} is less than the part size, 8 MiB")));
        }
        let heartbeat = dur("heartbeat", file.heartbeat, Duration::from_secs(30))?;
        let lease = dur("lease", file.lease, Duration::from_secs(120))?;
        if heartbeat < Duration::from_secs(1) {
            return Err(bad("heartbeat", format!("{heartbeat:?} is less than 1s")));
        }
        if heartbeat > MAX_HEARTBEAT {
            return Err(bad("heartbeat", format!("{heartbeat:?} is more than a day")));
        }
        if lease < heartbeat * 2 {
            return Err(bad("lease", format!("{lease:?} is less than twice sync.heartbeat ({heartbeat:?})")));
        }
        let mass_delete_ratio = file.mass_delete_ratio.unwrap_or(0.5);
        if !(mass_delete_ratio > 0.0 && mass_delete_ratio <= 1.0) {
            return Err(bad("mass_delete_ratio", format!("{mass_delete_ratio} is not within (0, 1]")));
        }
        let max_conflict_copies = file.max_conflict_copies.unwrap_or(10);
        if !(1..=1000).contains(&max_conflict_copies) {
            return Err(bad("max_conflict_copies", format!("{max_conflict_copies} is out of range 1..=1000")));
        }
        let log_retention = dur("log_retention", file.log_retention, Duration::from_secs(7 * 24 * 3600))?;
        let backend = match (file.dir, file.s3) {
            (Some(_), Some(_)) => return Err(bad("dir", "set either sync.dir or [sync.s3], not both".into())),
            (Some(d), None) if d.trim().is_empty() => {
                return Err(bad(
                    "dir",
                    "is empty; give a directory outside the tree (or leave it out for .clawboard/bucket)".into(),
                ));
            }
            (Some(d), None) => Backend::Dir(expand(&d)),
            (None, Some(c)) => Backend::S3(resolve_s3(c, &expand)?),
            (None, None) => Backend::Dir(PathBuf::from(clawboard_core::layout::LOCAL_BUCKET)),
        };
        Ok(SyncSettings {
            enabled: file.enabled.unwrap_or(true),
            backend,
            schedule,
            push_on_task_end: file.push_on_task_end.unwrap_or(true),
            push_each_step: file.push_each_step.unwrap_or(false),
            concurrency,
            exclude: {
                // Checked here, naming the pattern, rather than at the first push.
                let exclude = file.exclude.unwrap_or_default();
                for (i, p) in exclude.iter().enumerate() {
                    globset::GlobBuilder::new(p)
                        .literal_separator(true)
                        .build()
                        .map_err(|e| ConfigError::new(format!("sync.exclude[{i}]"), format!("{p:?}: {e}")))?;
                }
                exclude
            },
            retries,
            retry: Backoff::new(retry_base, retry_max).jittered(),
            multipart_threshold,
            pull: file.pull.unwrap_or(true),
            heartbeat,
            lease,
            mass_delete_ratio,
            max_conflict_copies,
            log_retention,
        })
    }
}

/// The longest `sync.heartbeat` (a node silent longer is taken for dead anyway).
const MAX_HEARTBEAT: Duration = Duration::from_secs(24 * 3600);

impl SyncSettings {
    /// Checks where a local-directory bucket is against the tree at `root`: the
    /// bucket may not be inside the tree (but under `.clawboard/`), where every
    /// push would send the bucket into itself, nor hold the tree.
    pub fn check_dir(&self, root: &Path) -> Result<(), ConfigError> {
        let Backend::Dir(dir) = &self.backend else { return Ok(()) };
        let resolved = normalize(&root.join(dir));
        let root = normalize(root);
        let bad = |reason: String| ConfigError::new("sync.dir", format!("{}: {reason}", dir.display()));
        if resolved.starts_with(root.join(clawboard_core::layout::STATE)) {
            Ok(())
        } else if resolved.starts_with(&root) {
            Err(bad(format!(
                "is inside the tree ({}); a push would send the bucket into itself. Use a directory outside it, or one under .clawboard/",
                root.display()
            )))
        } else if root.starts_with(&resolved) {
            Err(bad(format!("holds the tree ({}); use a directory outside it", root.display())))
        } else {
            Ok(())
        }
    }
}

/// `path` made absolute (against the working directory) with `.` and `..` taken
/// out by their names, and, where it exists, its links followed.
fn normalize(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    // The part that exists, with its links followed, and the rest as written.
    let mut existing = out.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match existing.file_name() {
            Some(name) => rest.push(name.to_owned()),
            None => return out,
        }
        existing.pop();
    }
    let mut real = existing.canonicalize().unwrap_or(existing);
    real.extend(rest.iter().rev());
    real
}

/// `[sync.s3]`, checked.
fn resolve_s3(c: S3Section, expand: impl Fn(&str) -> PathBuf) -> Result<S3Config, ConfigError> {
    let bad = |key: &str, reason: String| ConfigError::new(format!("sync.s3.{key}"), reason);
    if c.bucket.trim().is_empty() {
        return Err(bad("bucket", "is empty".into()));
    }
    if let Some(ep) = &c.endpoint
        && !(ep.starts_with("http://") || ep.starts_with("https://"))
    {
        return Err(bad("endpoint", format!("{ep:?} is not an http:// or https:// URL")));
    }
    let credentials = match (c.profile, c.credentials_file) {
        (Some(_), Some(_)) => return Err(bad("profile", "set either profile or credentials_file, not both".into())),
        (Some(p), None) => CredentialSource::Profile(p),
        (None, Some(f)) => CredentialSource::File(expand(&f)),
        (None, None) => CredentialSource::Env,
    };
    Ok(S3Config {
        endpoint: c.endpoint,
        region: c.region.unwrap_or_else(|| "auto".into()),
        bucket: c.bucket,
        prefix: c.prefix.unwrap_or_default(),
        path_style: c.path_style.unwrap_or(false),
        credentials,
        request_timeout: config::duration("sync.s3.request_timeout", c.request_timeout, Duration::from_secs(60))?,
        connect_timeout: config::duration("sync.s3.connect_timeout", c.connect_timeout, Duration::from_secs(5))?,
    })
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
                // Only the node's own default bucket (under .clawboard/) is made when missing.
                let own = normalize(&dir).starts_with(normalize(root).join(clawboard_core::layout::STATE));
                Ok(AnyRemote::Dir(if own { DirRemote::open(&dir)? } else { DirRemote::open_existing(&dir)? }))
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
