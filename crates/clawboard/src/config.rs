//! Configuration: one serde tree read from a TOML file, overridden by `CLAWBOARD_*`
//! environment variables, overridden by command-line flags (CLI > env > file >
//! default; see `config/README.md`). Unknown keys are refused, naming the key.
//!
//! Each library crate defines and resolves its own sections (`[sync]` in
//! `clawboard_sync::settings`, `[archive]` and `[harvest]` in
//! `clawboard_archive::settings`, `[lifecycle]` and `[roles.*]` in
//! `clawboard_roles::config`, `[github]` in `clawboard_github::settings`); this
//! module only reads the file, applies the environment and the flags, hands each
//! crate its section, and names the file in front of a `section.key` error. The binary's own sections are here (`[limits]`,
//! `[log]`, `[daemon]`, `[node]`, `[board]`), in [`review`] and in [`retention`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clawboard_core::config::{ByteSize, ConfigError};
use clawboard_core::secret::SecretSource;
use clawboard_core::validate::DEFAULT_MAX_FILE_BYTES;
use serde::Deserialize;

use crate::cli::{BadInput, GlobalArgs};

pub mod engine;
pub mod retention;
pub mod review;
pub use review::{NotifyResolved, ReviewResolved, WebToken};

/// The config file, exactly as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Blackboard root; `~` expands to the home directory.
    pub root: Option<String>,
    /// `CLAWBOARD_*=value` lines applied where the environment sets none.
    pub env_file: Option<String>,
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
    /// `[llm.providers.*]`: the model endpoints roles name.
    #[serde(default)]
    pub llm: clawboard_roles::LlmSection,
    #[serde(default)]
    pub node: NodeConfig,
    #[serde(default)]
    pub sync: clawboard_sync::SyncSection,
    #[serde(default)]
    pub archive: clawboard_archive::ArchiveSection,
    #[serde(default)]
    pub harvest: clawboard_archive::HarvestSection,
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
    #[serde(default)]
    pub lanes: clawboard_entries::LanesSection,
    #[serde(default)]
    pub github: clawboard_github::GithubSection,
    #[serde(default)]
    pub blueprints: BlueprintsConfig,
    #[serde(default)]
    pub sandbox: clawboard_roles::SandboxConfig,
    /// `[telemetry]`: spans to an OpenTelemetry collector (off unless `otlp_endpoint` is set).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// `[blueprints]`: where more blueprints are (seed 001), and the middleware's
/// word lists and platform rules; each table given replaces the shipped one
/// (`config/blueprints/middleware.toml`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlueprintsConfig {
    /// A directory of blueprints (`ID.json`), beside the four built in.
    pub dir: Option<String>,
    pub sensitive_words: Option<std::collections::BTreeMap<String, Vec<String>>>,
    pub replacements: Option<std::collections::BTreeMap<String, String>>,
    pub platforms: Option<std::collections::BTreeMap<String, clawboard_blueprint::middleware::PlatformLimits>>,
    /// A role that replaces the built-in sensitive-word filter (it is handed each
    /// step's output and prints `{"output": {"passed", "findings", "fixes_applied", "fixed"}}`).
    pub sensitive_filter_role: Option<String>,
}

/// `[board]`: the task boards (seed 000) and their slices (seed 003).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardConfig {
    /// A directory of slice templates (`ID.json`), beside the seed's four.
    pub templates: Option<String>,
}

/// `[node]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This machine's id among the nodes sharing a bucket (default: generated once
    /// into `.clawboard/node-id`).
    pub id: Option<String>,
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

/// The `CLAWBOARD_*` variables (and the home directory), captured once so that
/// tests can pass their own; and those of the config's `env_file`, which apply
/// where the environment sets none.
#[derive(Debug, Default, Clone)]
pub struct Env {
    vars: HashMap<String, String>,
    /// Captured from this process: a variable the config names (a token's) is read from it.
    process: bool,
    /// From `env_file`: name → (value, `FILE line N`).
    file: HashMap<String, (String, String)>,
}

impl Env {
    pub fn from_process() -> Env {
        let vars = std::env::vars()
            .filter(|(k, _)| k.starts_with("CLAWBOARD_") || matches!(k.as_str(), "HOME" | "XDG_CONFIG_HOME"))
            .collect();
        Env { vars, process: true, file: HashMap::new() }
    }

    #[cfg(test)]
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Env {
        let vars = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Env { vars, process: false, file: HashMap::new() }
    }

    fn get(&self, key: &str) -> Option<&str> {
        let own = self.vars.get(key).map(String::as_str).filter(|v| !v.is_empty());
        own.or_else(|| self.file.get(key).map(|(v, _)| v.as_str()).filter(|v| !v.is_empty()))
    }

    /// Where a variable's value comes from, for an error about it.
    fn origin(&self, key: &str) -> String {
        match self.file.get(key) {
            Some((_, at)) if self.vars.get(key).is_none_or(|v| v.is_empty()) => format!("{at}: {key}"),
            _ => format!("environment variable {key}"),
        }
    }

    /// A variable the config names (`github.token_env`): as captured, else (for an
    /// Env of this process) read from the process now; never one of `env_file`.
    fn named(&self, key: &str) -> Option<String> {
        self.vars
            .get(key)
            .filter(|v| !v.is_empty())
            .cloned()
            .or_else(|| if self.process { std::env::var(key).ok().filter(|v| !v.is_empty()) } else { None })
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME").map(PathBuf::from)
    }

    /// This environment with `path`'s variables beneath it.
    fn with_file(&self, path: &Path) -> Result<Env, BadInput> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: cannot read the env_file: {e}", path.display())))?;
        let mut env = self.clone();
        env.file = parse_env_file(path, &text)?;
        Ok(env)
    }
}

/// An `env_file`: `NAME=value` lines (systemd's `EnvironmentFile=` form: `#`
/// comments, blank lines, an optional `export `, a value optionally quoted), of
/// `CLAWBOARD_*` variables only. Errors name the file and the line.
pub fn parse_env_file(path: &Path, text: &str) -> Result<HashMap<String, (String, String)>, BadInput> {
    let mut vars = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let at = format!("{} line {}", path.display(), i + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err(BadInput(format!("{at}: {line:?} is not NAME=value")));
        };
        let name = name.trim();
        let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !valid || !name.starts_with("CLAWBOARD_") {
            return Err(BadInput(format!(
                "{at}: {name:?} is not a CLAWBOARD_* variable; this file sets clawboard's own settings (a key goes in a key file: CLAWBOARD_LLM_NAME_API_KEY_FILE)"
            )));
        }
        if name == "CLAWBOARD_CONFIG" {
            return Err(BadInput(format!("{at}: CLAWBOARD_CONFIG cannot be set by the config's own env_file")));
        }
        let value = value.trim();
        let unquoted = [('"', '"'), ('\'', '\'')]
            .iter()
            .find_map(|(a, b)| value.strip_prefix(*a)?.strip_suffix(*b))
            .unwrap_or(value);
        vars.insert(name.to_owned(), (unquoted.to_owned(), at));
    }
    Ok(vars)
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
    /// Its `env_file`, if it names one.
    pub env_file: Option<PathBuf>,
    /// True when no flag, variable or key set the log filter.
    pub log_filter_is_default: bool,
    pub daemon: DaemonConfig,
    pub roles: clawboard_roles::RolesConfig,
    pub node_id: Option<String>,
    pub sync: clawboard_sync::SyncSettings,
    pub archive: clawboard_archive::ArchiveConfig,
    pub review: ReviewResolved,
    pub retention: retention::RetentionResolved,
    /// The slice templates: the seed's four and those in `templates_dir`.
    pub templates: std::collections::BTreeMap<String, clawboard_board::Template>,
    /// Which role picks which entries (seed 004).
    pub lanes: clawboard_entries::Lanes,
    /// The GitHub bridge of entries.
    pub github: clawboard_github::GithubSettings,
    /// The blueprints tasks may name, and their middleware config (seed 001).
    pub blueprints: clawboard_blueprint::Catalog,
    /// Where spans go; `None`: telemetry is off.
    pub telemetry: Option<crate::telemetry::TelemetrySettings>,
}

impl Settings {
    /// A long-running process logs at `info` unless a flag, a variable or
    /// `log.filter` says otherwise.
    pub fn log_for_a_daemon(&mut self) {
        if self.log_filter_is_default {
            self.log_filter = "info".to_owned();
        }
    }
}

/// `~` and `~/…` to the home directory.
fn expand_home(s: &str, env: &Env) -> PathBuf {
    match (s.strip_prefix('~'), env.home()) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(s),
    }
}

/// The system-wide config file, read when no other is named or found.
pub const SYSTEM_CONFIG: &str = "/etc/clawboard/clawboard.toml";

/// Where the config file is looked for when none is named: the user's, else
/// (for this process, not a test's environment) the system's.
fn default_config_path(env: &Env) -> Option<PathBuf> {
    let base = env.get("XDG_CONFIG_HOME").map(PathBuf::from).or_else(|| env.home().map(|h| h.join(".config")));
    let user = base.map(|b| b.join("clawboard/clawboard.toml")).filter(|p| p.is_file());
    user.or_else(|| Some(PathBuf::from(SYSTEM_CONFIG)).filter(|p| env.process && p.is_file()))
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

/// `line N (`the line`): ` for an error at `span`: the line quoted, since TOML's
/// message alone may not name the key (`duplicate key`).
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(r) = span else { return String::new() };
    let start = r.start.min(text.len());
    let n = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(n - 1).unwrap_or_default().trim();
    if line.is_empty() {
        return format!("line {n}: ");
    }
    let shown: String = line.chars().take(60).collect();
    let more = if line.chars().count() > 60 { "…" } else { "" };
    format!("line {n} (`{shown}{more}`): ")
}

fn load_file(args: &GlobalArgs, env: &Env) -> anyhow::Result<(FileConfig, Option<PathBuf>)> {
    let named = args.config.clone().or_else(|| env.get("CLAWBOARD_CONFIG").map(PathBuf::from));
    let path = match named {
        Some(p) => p,
        None => match default_config_path(env) {
            Some(p) => p,
            None => return Ok((FileConfig::default(), None)),
        },
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| BadInput(format!("{}: cannot read the config file: {e}", path.display())))?;
    Ok((parse_file(&path, &text)?, Some(path)))
}

fn env_parse<T>(env: &Env, key: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Option<T>, BadInput> {
    env.get(key).map(|v| parse(v).map_err(|e| BadInput(format!("{}: {e}", env.origin(key))))).transpose()
}

/// The largest `limits.max_file_size`.
const MAX_FILE_BYTES_LIMIT: u64 = 1 << 40;

/// How errors name the config file.
fn config_origin(file: Option<&Path>) -> String {
    file.map_or("config".to_owned(), |p| p.display().to_string())
}

/// `[sandbox]` checked where the sandbox will run (`RolesConfig::check_sandbox`):
/// the daemon (also at SIGHUP) and `clawboard run` check it before they start.
pub fn check_sandbox(s: &Settings) -> anyhow::Result<()> {
    // Without a current directory (it was removed) only absolute paths can be checked.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    s.roles
        .check_sandbox(&cwd)
        .map_err(|e| BadInput(format!("{}: key {e}", config_origin(s.config_file.as_deref()))).into())
}

/// Resolves every setting: CLI flag, else environment, else config file, else default.
pub fn resolve(args: &GlobalArgs, env: &Env) -> anyhow::Result<Settings> {
    let (file, config_file) = load_file(args, env)?;
    let env_file = file.env_file.as_deref().map(|f| {
        let p = expand_home(f, env);
        let dir = config_file.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
        if p.is_relative() { dir.join(p) } else { p }
    });
    let env = &match &env_file {
        Some(f) => env.with_file(f)?,
        None => env.clone(),
    };
    let root = args
        .root
        .clone()
        .or_else(|| env.get("CLAWBOARD_ROOT").map(|r| expand_home(r, env)))
        .or_else(|| file.root.as_deref().map(|r| expand_home(r, env)))
        .or_else(|| env.home().map(|h| h.join("clawos/blackboard")))
        .context("no blackboard root: pass --root, set CLAWBOARD_ROOT, or set HOME")?;
    let max_file_bytes = max_file_bytes(env, &file.limits, config_file.as_deref())?;
    let log_filter_is_default =
        args.verbose == 0 && args.quiet == 0 && env.get("CLAWBOARD_LOG").is_none() && file.log.filter.is_none();
    let origin = config_origin(config_file.as_deref());
    // A value an environment variable set is blamed on the variable (and the
    // env_file line that set it), not on the config file.
    let bad = |e: ConfigError| {
        if e.key.starts_with("CLAWBOARD_") {
            BadInput(format!("{}: {}", env.origin(&e.key), e.reason))
        } else {
            BadInput(format!("{origin}: key {e}"))
        }
    };
    let expand = |p: &str| expand_home(p, env);
    let relative_to_config = |d: &str| {
        let p = expand(d);
        match (&config_file, p.is_relative()) {
            (Some(cfg), true) => cfg.parent().unwrap_or(Path::new(".")).join(p),
            _ => p,
        }
    };
    let mut roles = clawboard_roles::RolesConfig::resolve_with(file.lifecycle, file.roles, file.llm, |v| {
        env.get(v).map(str::to_owned)
    })
    .map_err(bad)?;
    roles.resolve_key_files(relative_to_config).map_err(bad)?;
    let absolute_root =
        std::path::absolute(&root).with_context(|| format!("the blackboard root {}", root.display()))?;
    roles.sandbox = clawboard_roles::Sandbox::resolve(file.sandbox, &absolute_root, expand).map_err(bad)?;
    let templates_dir = file.board.templates.as_deref().map(relative_to_config);
    let templates = clawboard_board::template::load(templates_dir.as_deref())
        .map_err(|e| BadInput(format!("{origin}: key board.templates: {e}")))?;
    roles.check_templates(&templates).map_err(bad)?;
    let blueprints = blueprints(file.blueprints, &roles, &templates, relative_to_config).map_err(|e| match e {
        // The middleware's own check names its key already (`blueprints.replacements.X`).
        clawboard_blueprint::Error::Invalid { file, field, reason, .. }
            if file == clawboard_blueprint::middleware::SECTION =>
        {
            BadInput(format!("{origin}: key {field}: {reason}"))
        }
        e => BadInput(format!("{origin}: key blueprints: {e}")),
    })?;
    let lanes = clawboard_entries::Lanes::resolve(file.lanes, |r| roles.roles.contains_key(r)).map_err(bad)?;
    let sync = clawboard_sync::SyncSettings::resolve(file.sync, expand).map_err(bad)?;
    sync.check_dir(&root).map_err(bad)?;
    let github =
        clawboard_github::GithubSettings::resolve(file.github, expand, |l| lanes.iter().any(|(name, _)| name == l))
            .map_err(bad)?;
    let git_token = ["CLAWBOARD_GIT_TOKEN", "GITHUB_TOKEN"]
        .into_iter()
        .find(|var| env.named(var).is_some())
        .map(|var| SecretSource::env(var, "the archive's HTTPS token"));
    let archive =
        clawboard_archive::ArchiveConfig::resolve(file.archive, file.harvest, git_token, expand).map_err(bad)?;
    let review = review::resolve(file.reports, file.web, file.notify, &root, expand, &origin)?;
    let retention = retention::resolve(file.retention, config_file.as_deref(), expand, &origin)?;
    let telemetry = crate::telemetry::TelemetrySettings::resolve(file.telemetry, expand).map_err(bad)?;
    let mut own = own_secret_files(&roles, &archive, &github, &review.web.token, &sync, &root, env);
    own.extend(telemetry.iter().flat_map(|t| t.secret_files().map(Path::to_owned)));
    roles.sandbox.deny_also(own);
    if let Some(id) = &file.node.id
        && let Err(e) = clawboard_core::check_id(id)
    {
        return Err(BadInput(format!("{origin}: key node.id: {id:?}: {e}")).into());
    }
    let (log_filter, log_format) = log_settings(args, env, file.log)?;
    Ok(Settings {
        root,
        max_file_bytes,
        log_filter,
        log_format,
        json: args.json,
        config_file,
        env_file,
        log_filter_is_default,
        daemon: file.daemon,
        roles,
        node_id: file.node.id,
        sync,
        archive,
        review,
        retention,
        templates,
        lanes,
        github,
        blueprints,
        telemetry,
    })
}

/// `limits.max_file_size`, else `CLAWBOARD_MAX_FILE_SIZE` over it, else 16 MiB.
fn max_file_bytes(env: &Env, limits: &LimitsConfig, config_file: Option<&Path>) -> Result<u64, BadInput> {
    // A file is read whole: 1 byte to 1024 GiB (past it, a size plus one would wrap).
    let in_range = |n: u64| {
        if (1..=MAX_FILE_BYTES_LIMIT).contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} bytes is out of range; give 1 byte to 1024 GiB (default 16 MiB)"))
        }
    };
    let from_env = env_parse(env, "CLAWBOARD_MAX_FILE_SIZE", |s| ByteSize::parse(s).and_then(|b| in_range(b.0)))?;
    let from_file = limits
        .max_file_size
        .map(|b| in_range(b.0))
        .transpose()
        .map_err(|e| BadInput(format!("{}: key limits.max_file_size: {e}", config_origin(config_file))))?;
    Ok(from_env.or(from_file).unwrap_or(DEFAULT_MAX_FILE_BYTES))
}

/// The log filter (-v/-q, else `CLAWBOARD_LOG`, else `log.filter`, else warn) and format.
fn log_settings(args: &GlobalArgs, env: &Env, log: LogConfig) -> Result<(String, LogFormat), BadInput> {
    let filter = match (args.verbose, args.quiet) {
        (0, 0) => env.get("CLAWBOARD_LOG").map(str::to_owned).or(log.filter).unwrap_or_else(|| "warn".to_owned()),
        (0, _) => "error".to_owned(),
        (1, _) => "debug".to_owned(),
        _ => "trace".to_owned(),
    };
    let format = match args.log_format {
        Some(f) => f,
        None => env_parse(env, "CLAWBOARD_LOG_FORMAT", |s| {
            <LogFormat as clap::ValueEnum>::from_str(s, true).map_err(|_| format!("{s:?} is not one of text, json"))
        })?
        .or(log.format)
        .unwrap_or_default(),
    };
    Ok((filter, format))
}

/// The daemon's own secrets and its local bucket, wherever the config puts
/// them: denied to sandboxed roles as the root is (docs/SANDBOX.md). Each
/// section names its own secret files.
fn own_secret_files(
    roles: &clawboard_roles::RolesConfig,
    archive: &clawboard_archive::ArchiveConfig,
    github: &clawboard_github::GithubSettings,
    web_token: &review::WebToken,
    sync: &clawboard_sync::SyncSettings,
    root: &Path,
    env: &Env,
) -> Vec<PathBuf> {
    let mut own: Vec<PathBuf> = roles
        .secret_files()
        .chain(archive.settings.secret_files())
        .chain(github.secret_files())
        .map(Path::to_owned)
        .collect();
    if let review::WebToken::File(p) = web_token {
        own.push(p.clone());
    }
    match &sync.backend {
        clawboard_sync::Backend::Dir(d) => own.push(root.join(d)),
        clawboard_sync::Backend::S3(s3) => own.extend(s3.credentials.files(env.home().as_deref(), |v| env.named(v))),
    }
    own
}

/// The catalog of blueprints: the built-ins and `[blueprints] dir`, checked
/// against the roles and templates, with the middleware config.
fn blueprints(
    section: BlueprintsConfig,
    roles: &clawboard_roles::RolesConfig,
    templates: &std::collections::BTreeMap<String, clawboard_board::Template>,
    dir_of: impl Fn(&str) -> PathBuf,
) -> Result<clawboard_blueprint::Catalog, clawboard_blueprint::Error> {
    let mut mw = clawboard_blueprint::middleware::MiddlewareConfig::shipped()?;
    let (own_words, own_replacements) = (section.sensitive_words.is_some(), section.replacements.is_some());
    if let Some(w) = section.sensitive_words {
        mw.sensitive_words = w;
    }
    if let Some(r) = section.replacements {
        mw.replacements = r;
    } else if own_words {
        // The shipped replacements of words one's own lists no longer hold are never used.
        let listed: std::collections::BTreeSet<&String> = mw.sensitive_words.values().flatten().collect();
        mw.replacements.retain(|w, _| listed.contains(w));
    }
    // A platform given replaces that platform's limits; the others keep theirs.
    mw.platforms.extend(section.platforms.unwrap_or_default());
    mw.check().map_err(|e| match e {
        // A shipped table checked against one given here: say which is which.
        clawboard_blueprint::Error::Invalid { file, step, field, mut reason } => {
            let shipped = |table: &str| field.starts_with(&format!("blueprints.{table}"));
            if shipped("replacements") && !own_replacements {
                reason.push_str(" (the shipped [blueprints.replacements] of config/blueprints/middleware.toml; give your own table to change it)");
            } else if shipped("sensitive_words") && !own_words {
                reason.push_str(" (the shipped [blueprints.sensitive_words] of config/blueprints/middleware.toml; give your own table to change it)");
            }
            clawboard_blueprint::Error::Invalid { file, step, field, reason }
        }
        other => other,
    })?;
    let has_role = |r: &str| roles.roles.contains_key(r);
    let known = clawboard_blueprint::format::Known { roles: &has_role, templates };
    let dir = section.dir.as_deref().map(dir_of);
    let mut catalog = clawboard_blueprint::Catalog::load(dir.as_deref(), mw, &known)?;
    if let Some(r) = &section.sensitive_filter_role
        && !has_role(r)
    {
        return Err(clawboard_blueprint::Error::invalid(
            "config",
            None,
            "blueprints.sensitive_filter_role",
            format!("role {r:?} is not configured under [roles]"),
        ));
    }
    catalog.filter_role = section.sensitive_filter_role;
    Ok(catalog)
}

#[cfg(test)]
mod tests;
