//! Configuration: one serde tree read from a TOML file, overridden by `CLAWBOARD_*`
//! environment variables, overridden by command-line flags (CLI > env > file >
//! default; see `config/README.md`). Unknown keys are refused, naming the key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clawboard_core::validate::DEFAULT_MAX_FILE_BYTES;
use serde::{Deserialize, Deserializer};

use crate::cli::{BadInput, GlobalArgs};

pub mod retention;
pub mod review;
pub use review::{NotifyResolved, ReviewResolved, WebToken};

/// The config file, exactly as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Blackboard root; `~` expands to the home directory.
    pub root: Option<String>,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub lifecycle: clawboard_roles::LifecycleConfig,
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, clawboard_roles::RoleConfig>,
    #[serde(default)]
    pub node: NodeConfig,
    #[serde(default)]
    pub sync: SyncConfig,
    #[serde(default)]
    pub archive: ArchiveConfig,
    #[serde(default)]
    pub harvest: HarvestConfig,
    #[serde(default)]
    pub reports: review::ReportsConfig,
    #[serde(default)]
    pub web: review::WebConfig,
    #[serde(default)]
    pub notify: review::NotifyConfig,
    #[serde(default)]
    pub retention: retention::RetentionConfig,
    #[serde(default)]
    pub board: BoardConfig,
}

/// `[board]`: the task boards (seed 000) and their slices (seed 003).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardConfig {
    /// A directory of slice templates (`ID.json`), beside the seed's four.
    pub templates: Option<String>,
}

/// `[archive]`: the memory branch.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveConfig {
    pub enabled: Option<bool>,
    pub schedule: Option<String>,
    pub remote: Option<String>,
    pub branch: Option<String>,
    pub author_name: Option<String>,
    pub author_email: Option<String>,
    pub username: Option<String>,
    pub token_file: Option<String>,
    pub ssh_key: Option<String>,
    pub max_file_size: Option<ByteSize>,
    pub push_attempts: Option<u32>,
    pub retry: Option<String>,
}

/// `[harvest]`: the daily and weekly harvests.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvestConfig {
    pub schedule: Option<String>,
    pub top_per_role: Option<u32>,
}

/// `[archive]` and `[harvest]`, resolved (the node id is filled in where it is known).
#[derive(Debug, Clone)]
pub struct ArchiveResolved {
    pub enabled: bool,
    pub schedule: clawboard_sync::Schedule,
    /// After a failed push, the first retry (doubling up to the schedule).
    pub retry: std::time::Duration,
    pub settings: clawboard_archive::ArchiveSettings,
    pub harvest_schedule: clawboard_sync::Schedule,
    pub harvest: clawboard_archive::HarvestSettings,
}

pub const ARCHIVE_SCHEDULE: &str = "0 */6 * * *";
pub const HARVEST_SCHEDULE: &str = "5 * * * *";

/// Resolves `[archive]` and `[harvest]` over the embedded default (local commits every
/// 6 hours, harvests hourly). The token comes from `CLAWBOARD_GIT_TOKEN`, else
/// `GITHUB_TOKEN`, else `archive.token_file`.
fn resolve_archive(a: ArchiveConfig, h: HarvestConfig, env: &Env, origin: &str) -> Result<ArchiveResolved, BadInput> {
    use clawboard_archive::Token;
    use clawboard_sync::Schedule;
    let bad = |key: &str, msg: String| BadInput(format!("{origin}: key {key}: {msg}"));
    let schedule = |key: &str, v: Option<String>, default: &str| {
        let text = v.unwrap_or_else(|| default.to_owned());
        Schedule::parse(key, &text).map_err(|e| bad(key, without_prefix(&e)))
    };
    let mut s = clawboard_archive::ArchiveSettings::local("node");
    if let Some(r) = a.remote {
        let ok = match r.split_once("://") {
            Some((scheme, rest)) => ["https", "http", "ssh", "file"].contains(&scheme) && !rest.is_empty(),
            // scp-like `user@host:path`
            None => r
                .split_once(':')
                .is_some_and(|(host, path)| host.contains('@') && !host.contains('/') && !path.is_empty()),
        };
        if !ok {
            return Err(bad(
                "archive.remote",
                format!("{:?} is not an https://, ssh:// or user@host:path URL", clawboard_archive::repo::redact(&r)),
            ));
        }
        s.remote = Some(r);
    }
    if let Some(b) = a.branch {
        if valid_branch(&b).is_err() {
            return Err(bad("archive.branch", format!("{b:?} is not a valid branch name")));
        }
        s.branch = b;
    }
    for (key, v, slot) in [
        ("archive.author_name", a.author_name, &mut s.author_name),
        ("archive.author_email", a.author_email, &mut s.author_email),
        ("archive.username", a.username, &mut s.username),
    ] {
        if let Some(v) = v {
            if v.trim().is_empty() || v.contains(['<', '>', '\n']) {
                return Err(bad(key, format!("{v:?} is empty or has <, > or a newline")));
            }
            *slot = v;
        }
    }
    s.token = match (env.get("CLAWBOARD_GIT_TOKEN"), env.get("GITHUB_TOKEN"), a.token_file) {
        (Some(t), _, _) => Token::Env { var: "CLAWBOARD_GIT_TOKEN".into(), value: t.to_owned() },
        (None, Some(t), _) => Token::Env { var: "GITHUB_TOKEN".into(), value: t.to_owned() },
        (None, None, Some(f)) => Token::File(expand_home(&f, env)),
        (None, None, None) => Token::None,
    };
    s.ssh_key = a.ssh_key.map(|k| expand_home(&k, env));
    if let Some(m) = a.max_file_size {
        if m.0 == 0 || m.0 > 100 << 20 {
            return Err(bad(
                "archive.max_file_size",
                format!("{} is not within 1 byte ..= 100 MiB (GitHub's limit)", m.0),
            ));
        }
        s.max_file_bytes = m.0;
    }
    if let Some(n) = a.push_attempts {
        if !(1..=20).contains(&n) {
            return Err(bad("archive.push_attempts", format!("{n} is out of range 1..=20")));
        }
        s.push_attempts = n;
    }
    let retry = match a.retry {
        Some(t) => clawboard_core::duration::parse_duration(&t).map_err(|e| bad("archive.retry", e))?,
        None => std::time::Duration::from_secs(60),
    };
    if retry.is_zero() {
        return Err(bad("archive.retry", "must be at least 1s".into()));
    }
    let top = h.top_per_role.unwrap_or(10);
    if !(1..=1000).contains(&top) {
        return Err(bad("harvest.top_per_role", format!("{top} is out of range 1..=1000")));
    }
    Ok(ArchiveResolved {
        enabled: a.enabled.unwrap_or(true),
        schedule: schedule("archive.schedule", a.schedule, ARCHIVE_SCHEDULE)?,
        retry,
        settings: s,
        harvest_schedule: schedule("harvest.schedule", h.schedule, HARVEST_SCHEDULE)?,
        harvest: clawboard_archive::HarvestSettings { top_per_role: top },
    })
}

/// A branch name git accepts (`refs/heads/NAME` is a valid reference name).
fn valid_branch(name: &str) -> Result<(), ()> {
    let ok = !name.is_empty()
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.chars().any(|c| c.is_control() || " ~^:?*[\\".contains(c));
    if ok { Ok(()) } else { Err(()) }
}

/// `[node]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This machine's id among the nodes sharing a bucket (default: generated once
    /// into `.clawboard/node-id`).
    pub id: Option<String>,
}

/// `[sync]`: pushing the tree to a bucket (or a local directory).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncConfig {
    pub enabled: Option<bool>,
    pub schedule: Option<String>,
    pub push_on_task_end: Option<bool>,
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
    pub s3: Option<S3FileConfig>,
}

/// `[sync.s3]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3FileConfig {
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

/// Resolves `[sync]` over the embedded default (on, to `.clawboard/bucket`).
fn resolve_sync(file: SyncConfig, env: &Env, origin: &str) -> Result<clawboard_sync::SyncSettings, BadInput> {
    use clawboard_sync::{Backend, Schedule, s3::CredentialSource, s3::S3Config};
    let bad = |key: &str, msg: String| BadInput(format!("{origin}: key sync.{key}: {msg}"));
    let dur = |key: &str, v: Option<String>, default: std::time::Duration| match v {
        Some(t) => clawboard_core::duration::parse_duration(&t).map_err(|e| bad(key, e)),
        None => Ok(default),
    };
    let mut s = clawboard_sync::SyncSettings::local_default().map_err(|e| bad("schedule", e.to_string()))?;
    if let Some(e) = file.enabled {
        s.enabled = e;
    }
    if let Some(text) = file.schedule {
        s.schedule = Schedule::parse("schedule", &text).map_err(|e| bad("schedule", without_prefix(&e)))?;
    }
    if let Some(p) = file.push_on_task_end {
        s.push_on_task_end = p;
    }
    if let Some(c) = file.concurrency {
        if !(1..=256).contains(&c) {
            return Err(bad("concurrency", format!("{c} is out of range 1..=256")));
        }
        s.concurrency = c;
    }
    if let Some(x) = file.exclude {
        s.exclude = x;
    }
    if let Some(r) = file.retries {
        if r > 30 {
            return Err(bad("retries", format!("{r} is more than 30")));
        }
        s.retries = r;
    }
    s.retry_base = dur("retry_base", file.retry_base, s.retry_base)?;
    s.retry_max = dur("retry_max", file.retry_max, s.retry_max)?;
    if let Some(t) = file.multipart_threshold {
        if t.0 < clawboard_sync::s3::PART_SIZE {
            return Err(bad("multipart_threshold", format!("{} is less than the part size, 8 MiB", t.0)));
        }
        s.multipart_threshold = t.0;
    }
    if let Some(p) = file.pull {
        s.pull = p;
    }
    s.heartbeat = dur("heartbeat", file.heartbeat, s.heartbeat)?;
    s.lease = dur("lease", file.lease, s.lease)?;
    if s.heartbeat.is_zero() {
        return Err(bad("heartbeat", "must be at least 1s".into()));
    }
    if s.lease < s.heartbeat * 2 {
        return Err(bad("lease", format!("{:?} is less than twice sync.heartbeat ({:?})", s.lease, s.heartbeat)));
    }
    if let Some(r) = file.mass_delete_ratio {
        if !(r > 0.0 && r <= 1.0) {
            return Err(bad("mass_delete_ratio", format!("{r} is not within (0, 1]")));
        }
        s.mass_delete_ratio = r;
    }
    if let Some(n) = file.max_conflict_copies {
        if !(1..=1000).contains(&n) {
            return Err(bad("max_conflict_copies", format!("{n} is out of range 1..=1000")));
        }
        s.max_conflict_copies = n;
    }
    s.log_retention = dur("log_retention", file.log_retention, s.log_retention)?;
    match (file.dir, file.s3) {
        (Some(_), Some(_)) => return Err(bad("dir", "set either sync.dir or [sync.s3], not both".into())),
        (Some(d), None) => s.backend = Backend::Dir(expand_home(&d, env)),
        (None, Some(c)) => {
            if c.bucket.trim().is_empty() {
                return Err(bad("s3.bucket", "is empty".into()));
            }
            if let Some(ep) = &c.endpoint
                && !(ep.starts_with("http://") || ep.starts_with("https://"))
            {
                return Err(bad("s3.endpoint", format!("{ep:?} is not an http:// or https:// URL")));
            }
            let credentials = match (c.profile, c.credentials_file) {
                (Some(_), Some(_)) => {
                    return Err(bad("s3.profile", "set either profile or credentials_file, not both".into()));
                }
                (Some(p), None) => CredentialSource::Profile(p),
                (None, Some(f)) => CredentialSource::File(expand_home(&f, env)),
                (None, None) => CredentialSource::Env,
            };
            s.backend = Backend::S3(S3Config {
                endpoint: c.endpoint,
                region: c.region.unwrap_or_else(|| "auto".into()),
                bucket: c.bucket,
                prefix: c.prefix.unwrap_or_default(),
                path_style: c.path_style.unwrap_or(false),
                credentials,
                request_timeout: dur("s3.request_timeout", c.request_timeout, std::time::Duration::from_secs(60))?,
                connect_timeout: dur("s3.connect_timeout", c.connect_timeout, std::time::Duration::from_secs(5))?,
            });
        }
        (None, None) => {}
    }
    Ok(s)
}

/// A sync config error's message without its `sync config: FIELD: ` lead (the caller names the key).
fn without_prefix(e: &clawboard_sync::Error) -> String {
    match e {
        clawboard_sync::Error::Config { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// On SIGTERM, how long running roles may take to finish before they are killed.
    #[serde(default = "DaemonConfig::default_grace", with = "clawboard_core::duration::serde_str")]
    pub shutdown_grace: std::time::Duration,
}

impl DaemonConfig {
    fn default_grace() -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig { shutdown_grace: Self::default_grace() }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Files larger than this are refused before parsing: a byte count or `"16 MiB"`.
    pub max_file_size: Option<ByteSize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter, e.g. `info` or `clawboard=debug`.
    pub filter: Option<String>,
    pub format: Option<LogFormat>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines
    #[default]
    Text,
    /// One JSON object per line
    Json,
}

/// A size in bytes, written as a number or as `"16 MiB"`, `"512 KiB"`, `"1 GB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size; write e.g. \"16 MiB\" or 16777216"))?;
        let mult: u64 = match unit.trim() {
            "" | "B" | "bytes" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            other => {
                return Err(format!("unknown unit {other:?} in {s:?}; use B, KiB, MiB, GiB, KB, MB or GB"));
            }
        };
        n.checked_mul(mult).map(ByteSize).ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a byte count or a string like \"16 MiB\""))?
        {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// The `CLAWBOARD_*` variables (and the home directory), captured once so that
/// tests can pass their own.
#[derive(Debug, Default, Clone)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    pub fn from_process() -> Env {
        let vars = std::env::vars()
            .filter(|(k, _)| k.starts_with("CLAWBOARD_") || matches!(k.as_str(), "HOME" | "XDG_CONFIG_HOME"))
            .collect();
        Env { vars }
    }

    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Env {
        Env { vars: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME").map(PathBuf::from)
    }
}

/// Every setting, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub root: PathBuf,
    pub max_file_bytes: u64,
    /// From -v/-q, CLAWBOARD_LOG, or `log.filter`.
    pub log_filter: String,
    pub log_format: LogFormat,
    pub json: bool,
    /// The config file that was read, if any.
    pub config_file: Option<PathBuf>,
    /// True when no flag, variable or key set the log filter.
    pub log_filter_is_default: bool,
    pub daemon: DaemonConfig,
    pub roles: clawboard_roles::RolesConfig,
    pub node_id: Option<String>,
    pub sync: clawboard_sync::SyncSettings,
    pub archive: ArchiveResolved,
    pub review: ReviewResolved,
    pub retention: retention::RetentionResolved,
    /// The slice templates: the seed's four and those in `templates_dir`.
    pub templates: std::collections::BTreeMap<String, clawboard_board::Template>,
}

/// `~` and `~/…` to the home directory.
fn expand_home(s: &str, env: &Env) -> PathBuf {
    match (s.strip_prefix('~'), env.home()) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(s),
    }
}

/// Where the config file is looked for when none is named.
fn default_config_path(env: &Env) -> Option<PathBuf> {
    let base = env.get("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| env.home().map(|h| h.join(".config")))?;
    Some(base.join("clawboard/clawboard.toml"))
}

/// Parses a config file's text; the error is one line naming the file and the key.
pub fn parse_file(path: &Path, text: &str) -> Result<FileConfig, BadInput> {
    let fail = |key: String, msg: &str| BadInput(format!("{}: {key}{}", path.display(), msg.trim_end()));
    let de = toml::Deserializer::parse(text).map_err(|e| fail(line_of(text, e.span()), e.message()))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        // A bad map key shows as `?` in the path; the message names the key itself.
        let key = e.path().to_string().replace(".?", "");
        let key = if key == "." { line_of(text, e.inner().span()) } else { format!("key {key}: ") };
        fail(key, e.inner().message())
    })
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(r) => format!("line {}: ", text[..r.start.min(text.len())].matches('\n').count() + 1),
        None => String::new(),
    }
}

fn load_file(args: &GlobalArgs, env: &Env) -> anyhow::Result<(FileConfig, Option<PathBuf>)> {
    let named = args.config.clone().or_else(|| env.get("CLAWBOARD_CONFIG").map(PathBuf::from));
    let path = match named {
        Some(p) => p,
        None => match default_config_path(env) {
            Some(p) if p.is_file() => p,
            _ => return Ok((FileConfig::default(), None)),
        },
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| BadInput(format!("{}: cannot read the config file: {e}", path.display())))?;
    Ok((parse_file(&path, &text)?, Some(path)))
}

fn env_parse<T>(env: &Env, key: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Option<T>, BadInput> {
    env.get(key).map(|v| parse(v).map_err(|e| BadInput(format!("environment variable {key}: {e}")))).transpose()
}

/// Resolves every setting: CLI flag, else environment, else config file, else default.
pub fn resolve(args: &GlobalArgs, env: &Env) -> anyhow::Result<Settings> {
    let (file, config_file) = load_file(args, env)?;
    let root = args
        .root
        .clone()
        .or_else(|| env.get("CLAWBOARD_ROOT").map(|r| expand_home(r, env)))
        .or_else(|| file.root.as_deref().map(|r| expand_home(r, env)))
        .or_else(|| env.home().map(|h| h.join("clawos/blackboard")))
        .context("no blackboard root: pass --root, set CLAWBOARD_ROOT, or set HOME")?;
    let max_file_bytes = env_parse(env, "CLAWBOARD_MAX_FILE_SIZE", |s| ByteSize::parse(s).map(|b| b.0))?
        .or(file.limits.max_file_size.map(|b| b.0))
        .unwrap_or(DEFAULT_MAX_FILE_BYTES);
    let log_filter_is_default =
        args.verbose == 0 && args.quiet == 0 && env.get("CLAWBOARD_LOG").is_none() && file.log.filter.is_none();
    let roles = clawboard_roles::RolesConfig { lifecycle: file.lifecycle, roles: file.roles };
    let origin = config_file.as_ref().map_or("config".to_owned(), |p| p.display().to_string());
    if let Err(e) = roles.check() {
        return Err(BadInput(format!("{origin}: key {e}")).into());
    }
    let templates_dir = file.board.templates.as_deref().map(|d| {
        let p = expand_home(d, env);
        match (&config_file, p.is_relative()) {
            (Some(cfg), true) => cfg.parent().unwrap_or(Path::new(".")).join(p),
            _ => p,
        }
    });
    let templates = clawboard_board::template::load(templates_dir.as_deref())
        .map_err(|e| BadInput(format!("{origin}: key board.templates: {e}")))?;
    if let Err(e) = roles.check_templates(&templates) {
        return Err(BadInput(format!("{origin}: key {e}")).into());
    }
    let sync = resolve_sync(file.sync, env, &origin)?;
    let archive = resolve_archive(file.archive, file.harvest, env, &origin)?;
    let review = review::resolve(file.reports, file.web, file.notify, &root, |p| expand_home(p, env), &origin)?;
    let retention = retention::resolve(file.retention, config_file.as_deref(), |p| expand_home(p, env), &origin)?;
    if let Some(id) = &file.node.id
        && let Err(e) = clawboard_core::check_id(id)
    {
        return Err(BadInput(format!("{origin}: key node.id: {id:?}: {e}")).into());
    }
    let log_filter = match (args.verbose, args.quiet) {
        (0, 0) => env.get("CLAWBOARD_LOG").map(str::to_owned).or(file.log.filter).unwrap_or_else(|| "warn".to_owned()),
        (0, _) => "error".to_owned(),
        (1, _) => "debug".to_owned(),
        _ => "trace".to_owned(),
    };
    let log_format = match args.log_format {
        Some(f) => f,
        None => env_parse(env, "CLAWBOARD_LOG_FORMAT", |s| {
            <LogFormat as clap::ValueEnum>::from_str(s, true).map_err(|_| format!("{s:?} is not one of text, json"))
        })?
        .or(file.log.format)
        .unwrap_or_default(),
    };
    Ok(Settings {
        root,
        max_file_bytes,
        log_filter,
        log_format,
        json: args.json,
        config_file,
        log_filter_is_default,
        daemon: file.daemon,
        roles,
        node_id: file.node.id,
        sync,
        archive,
        review,
        retention,
        templates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(argv: &[&str]) -> GlobalArgs {
        let mut full = vec!["clawboard"];
        full.extend_from_slice(argv);
        full.push("status");
        crate::cli::Cli::parse_from(full).global
    }

    fn write_config(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, text).unwrap();
        let s = p.display().to_string();
        (dir, s)
    }

    #[test]
    fn cli_beats_env_beats_file_beats_default() {
        let (_d, cfg) = write_config("root = \"/from/file\"\n[limits]\nmax_file_size = \"1 MiB\"\n");
        let env = Env::from_pairs(&[("HOME", "/home/u"), ("CLAWBOARD_ROOT", "/from/env")]);
        let s = resolve(&args(&["--config", &cfg, "--root", "/from/cli"]), &env).unwrap();
        assert_eq!(s.root, PathBuf::from("/from/cli"));
        let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
        assert_eq!(s.root, PathBuf::from("/from/env"));
        assert_eq!(s.max_file_bytes, 1 << 20);
        let env = Env::from_pairs(&[("HOME", "/home/u"), ("CLAWBOARD_MAX_FILE_SIZE", "2048")]);
        let s = resolve(&args(&["--config", &cfg]), &env).unwrap();
        assert_eq!(s.root, PathBuf::from("/from/file"));
        assert_eq!(s.max_file_bytes, 2048);
        let s = resolve(&args(&[]), &Env::from_pairs(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(s.root, PathBuf::from("/home/u/clawos/blackboard"));
        assert_eq!(s.max_file_bytes, DEFAULT_MAX_FILE_BYTES);
        assert_eq!(s.log_filter, "warn");
    }

    #[test]
    fn tilde_expands() {
        let (_d, cfg) = write_config("root = \"~/bb\"\n");
        let s = resolve(&args(&["--config", &cfg]), &Env::from_pairs(&[("HOME", "/h")])).unwrap();
        assert_eq!(s.root, PathBuf::from("/h/bb"));
    }

    #[test]
    fn flags_set_log_level() {
        let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_LOG", "info")]);
        assert_eq!(resolve(&args(&[]), &env).unwrap().log_filter, "info");
        assert_eq!(resolve(&args(&["-v"]), &env).unwrap().log_filter, "debug");
        assert_eq!(resolve(&args(&["-vv"]), &env).unwrap().log_filter, "trace");
        assert_eq!(resolve(&args(&["-q"]), &env).unwrap().log_filter, "error");
    }

    #[test]
    fn bad_config_names_the_key_in_one_line() {
        let cases = [
            ("[limits]\nmax_file_size = \"16 parsecs\"\n", "key limits.max_file_size: unknown unit"),
            ("[limits]\nmax_size = 3\n", "key limits.max_size: unknown field `max_size`"),
            ("rooot = \"/x\"\n", "key rooot: unknown field `rooot`"),
            ("[log]\nformat = \"xml\"\n", "key log.format: unknown variant `xml`"),
            ("root = \n", "line 1: "),
        ];
        for (text, want) in cases {
            let err = parse_file(Path::new("c.toml"), text).unwrap_err().0;
            assert!(err.starts_with("c.toml: "), "{err}");
            assert!(err.contains(want), "{text:?} gave {err:?}");
            assert!(!err.contains('\n'), "more than one line: {err:?}");
        }
    }

    #[test]
    fn roles_named_anywhere_must_be_configured() {
        let cases = [
            ("[lifecycle]\nvalidator = \"checker\"\n", "key lifecycle.validator: role \"checker\" is not configured"),
            ("[roles.w]\ntimeout = \"5s\"\n", "key roles.w: needs `command` or `http`"),
            ("[roles.w]\ncommand = []\n", "key roles.w.command: is empty"),
            ("[roles.w]\ncommand = [\"x\"]\nfallback = \"nope\"\n", "key roles.w.fallback: role \"nope\""),
            ("[roles.w]\ncommand = [\"x\"]\ntimeout = \"soon\"\n", "key roles.w.timeout: \"soon\" is not a duration"),
            ("[roles.w]\nhttp = { url = \"ftp://x\" }\n", "key roles.w.http.url: \"ftp://x\" is not an http"),
            ("[lifecycle.pm_for_type]\ncooking = \"pm\"\n", "key lifecycle.pm_for_type: unknown variant `cooking`"),
            ("[sync]\nschedule = \"hourly\"\n", "key sync.schedule: \"hourly\": a cron schedule has 5 fields"),
            ("[sync]\nconcurrency = 0\n", "key sync.concurrency: 0 is out of range"),
            ("[sync]\nretry_base = \"soon\"\n", "key sync.retry_base: \"soon\" is not a duration"),
            ("[sync]\nmultipart_threshold = \"1 MiB\"\n", "key sync.multipart_threshold: 1048576 is less than"),
            ("[sync]\ndir = \"/b\"\n[sync.s3]\nbucket = \"x\"\n", "key sync.dir: set either"),
            ("[sync.s3]\nbucket = \"\"\n", "key sync.s3.bucket: is empty"),
            ("[sync.s3]\nbucket = \"b\"\nendpoint = \"r2.example\"\n", "key sync.s3.endpoint: \"r2.example\" is not"),
            (
                "[sync.s3]\nbucket = \"b\"\nprofile = \"p\"\ncredentials_file = \"f\"\n",
                "key sync.s3.profile: set either",
            ),
            ("[node]\nid = \"../x\"\n", "key node.id: \"../x\""),
            ("[archive]\nremote = \"github.com/o/r\"\n", "key archive.remote: \"github.com/o/r\" is not an https://"),
            ("[archive]\nremote = \"ftp://u:secret@h/r\"\n", "key archive.remote: \"ftp://h/r\" is not"),
            ("[archive]\nbranch = \"a..b\"\n", "key archive.branch: \"a..b\" is not a valid branch name"),
            ("[archive]\nschedule = \"often\"\n", "key archive.schedule: \"often\": a cron schedule has 5 fields"),
            ("[archive]\nauthor_email = \"<x>\"\n", "key archive.author_email: \"<x>\" is empty or has"),
            ("[archive]\nmax_file_size = \"200 MiB\"\n", "key archive.max_file_size: 209715200 is not within"),
            ("[archive]\npush_attempts = 0\n", "key archive.push_attempts: 0 is out of range"),
            ("[archive]\nretry = \"later\"\n", "key archive.retry: \"later\" is not a duration"),
            ("[archive]\nremot = \"x\"\n", "key archive.remot: unknown field"),
            ("[harvest]\ntop_per_role = 0\n", "key harvest.top_per_role: 0 is out of range"),
            ("[harvest]\nschedule = \"* *\"\n", "key harvest.schedule: \"* *\": a cron schedule has 5 fields"),
        ];
        for (text, want) in cases {
            let (_d, cfg) = write_config(text);
            let err = resolve(&args(&["--config", &cfg]), &Env::from_pairs(&[("HOME", "/h")])).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?} gave {err:?}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn bad_env_names_the_variable() {
        let env = Env::from_pairs(&[("HOME", "/h"), ("CLAWBOARD_MAX_FILE_SIZE", "lots")]);
        let err = resolve(&args(&[]), &env).unwrap_err().to_string();
        assert!(err.starts_with("environment variable CLAWBOARD_MAX_FILE_SIZE: "), "{err}");
    }

    #[test]
    fn every_example_config_parses() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config");
        let mut n = 0;
        let files = std::fs::read_dir(&dir).unwrap().chain(std::fs::read_dir(dir.join("examples")).unwrap());
        for entry in files {
            let path = entry.unwrap().path();
            // acl.toml is the access-control policy, not a clawboard config.
            if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("acl.toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                if let Err(e) = parse_file(&path, &text) {
                    panic!("{e}");
                }
                n += 1;
            }
        }
        assert!(n >= 3, "example configs missing in {}", dir.display());
    }

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("16 MiB"), Ok(ByteSize(16 << 20)));
        assert_eq!(ByteSize::parse("10KB"), Ok(ByteSize(10_000)));
        assert_eq!(ByteSize::parse("7"), Ok(ByteSize(7)));
        assert!(ByteSize::parse("MiB").is_err());
        assert!(ByteSize::parse("99999999999999 GiB").is_err());
    }
}
