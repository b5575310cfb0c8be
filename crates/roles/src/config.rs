//! What the daemon needs to know about roles and the lifecycle: `[lifecycle]` and
//! `[roles.ID]` of the config file, deserialized here with unknown keys refused and
//! their defaults, then checked by [`RolesConfig::resolve`] with errors naming the
//! key (`roles.w.command`); the binary hands over the sections as read.
//! `[roles.ID.llm]` is [`llm`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clawboard_core::config::ConfigError;
use clawboard_core::duration::serde_str;
use clawboard_core::formats::TaskType;
use serde::Deserialize;

pub mod llm;

pub use llm::{ApiKey, LlmConfig};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `[lifecycle]`: how tasks move through their steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Team rounds before a task that keeps failing validation fails.
    #[serde(default = "LifecycleConfig::default_max_iterations")]
    pub max_iterations: u32,
    /// Tasks driven at once; the rest wait in the queue.
    #[serde(default = "LifecycleConfig::default_max_tasks")]
    pub max_tasks: usize,
    /// Role processes (or HTTP calls) running at once, over all tasks.
    #[serde(default = "LifecycleConfig::default_max_parallel_roles")]
    pub max_parallel_roles: usize,
    /// The PM for each task type when `assignedPM` is absent.
    #[serde(default)]
    pub pm_for_type: BTreeMap<TaskType, String>,
    /// The validator role; without one every result passes.
    #[serde(default)]
    pub validator: Option<String>,
    /// The memory harvest role; without one no memory is harvested.
    #[serde(default)]
    pub harvester: Option<String>,
    /// Whether the lifecycle keeps each task's board (description into
    /// `meta.intent`, results into content, steps, retries and errors into control):
    /// `auto` (when any role is handed a slice), `always` or `never`.
    #[serde(default)]
    pub board: BoardMode,
}

/// `lifecycle.board`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BoardMode {
    #[default]
    Auto,
    Always,
    Never,
}

impl LifecycleConfig {
    fn default_max_iterations() -> u32 {
        3
    }
    fn default_max_tasks() -> usize {
        16
    }
    fn default_max_parallel_roles() -> usize {
        8
    }
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            max_iterations: Self::default_max_iterations(),
            max_tasks: Self::default_max_tasks(),
            max_parallel_roles: Self::default_max_parallel_roles(),
            pm_for_type: BTreeMap::new(),
            validator: None,
            harvester: None,
            board: BoardMode::Auto,
        }
    }
}

/// `[roles.ID]`: one role and how to run it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// Run a program: argv, e.g. `["python3", "scripts/roles/worker.py"]`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Or call an HTTP endpoint with the context as the POST body.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// Or ask an OpenAI-compatible chat-completions endpoint (docs/LLM.md).
    #[serde(default)]
    pub llm: Option<LlmConfig>,
    /// Extra environment for a command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory for a command (default: the daemon's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// A run longer than this is killed (its whole process group) and counts as failed.
    #[serde(default = "RoleConfig::default_timeout", with = "serde_str")]
    pub timeout: Duration,
    /// Output beyond this many bytes fails the run.
    #[serde(default = "RoleConfig::default_max_output")]
    pub max_output_bytes: u64,
    /// Runs after the first failed one, with exponential backoff.
    #[serde(default = "RoleConfig::default_max_retries")]
    pub max_retries: u32,
    /// Delay before the first retry; doubles each time.
    #[serde(default = "RoleConfig::default_backoff", with = "serde_str")]
    pub retry_backoff: Duration,
    /// Role to run instead when every retry failed (seed 001: worker → skill).
    #[serde(default)]
    pub fallback: Option<String>,
    /// Task files (relative to the task directory) put into the role's context.
    #[serde(default)]
    pub reads: Vec<String>,
    /// The role's component type on the board (seed 000): `orchestrator`, `worker`,
    /// `skill`, `middleware` or `slicer`. Default: by its principal (a `*-pm`, gm
    /// or platform-pm orchestrates, the validator is middleware, others work).
    #[serde(default)]
    pub component: Option<clawboard_core::acl::Component>,
    /// The board paths the role is handed as its slice (seed 003), instead of the
    /// whole context: e.g. `["meta.intent", "content.hook.selected"]`.
    #[serde(default)]
    pub scope: Option<Vec<String>>,
    /// Or a slice template by id (`title_generation`, …; `config/templates/`).
    #[serde(default)]
    pub template: Option<String>,
    /// The slice's token budget (o200k tokens); over it, the compression ladder runs.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Texts longer than this are cut by the ladder's first rung (default 100 tokens).
    #[serde(default)]
    pub truncate_tokens: Option<u64>,
    /// Run this command role under the Landlock sandbox (`true`) or not
    /// (`false`), whatever `sandbox.mode` says (docs/SANDBOX.md).
    #[serde(default)]
    pub sandbox: Option<bool>,
}

impl RoleConfig {
    /// The role's component type, and why it has it.
    pub fn component_of(&self, role_id: &str) -> (clawboard_core::acl::Component, String) {
        match self.component {
            Some(c) => (c, format!("roles.{role_id}.component = {:?}", c.name())),
            None => clawboard_core::acl::Component::default_for_role(role_id),
        }
    }

    /// True when the role is handed a slice of the board rather than the whole context.
    pub fn is_sliced(&self) -> bool {
        self.scope.is_some() || self.template.is_some()
    }
}

impl RoleConfig {
    fn default_timeout() -> Duration {
        secs(300)
    }
    fn default_max_output() -> u64 {
        1 << 20
    }
    fn default_max_retries() -> u32 {
        3
    }
    fn default_backoff() -> Duration {
        Duration::from_millis(500)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// Why a role id may not contain `--`: the memory archive names a cross-pollination
/// file by two role ids joined by `--`, which must tell them apart.
pub const ROLE_ID_DASHES: &str = "the role id contains \"--\", which the memory archive uses to join two role ids \
     (memory/cross-pollination/{fromRole}--{toRole}.jsonl), so the name would be ambiguous; use single dashes";

/// `[sandbox]` as written: whether command roles run under Landlock.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `off` (the default) or `landlock`: for every command role without its own `sandbox`.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Paths a sandboxed role may not touch besides the blackboard root (absolute, `~` expands).
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `sandbox.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    #[default]
    Off,
    Landlock,
}

/// `[sandbox]` resolved: the mode, and every path denied (the root first).
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    pub mode: SandboxMode,
    pub denied: std::sync::Arc<Vec<PathBuf>>,
}

impl Sandbox {
    /// `c` for the blackboard at `root`; `expand` turns a `deny` entry into a
    /// path (`~`). An entry that is not absolute, has `..` or is `/` is refused
    /// with its index.
    pub fn resolve(
        c: SandboxConfig,
        root: &std::path::Path,
        expand: impl Fn(&str) -> PathBuf,
    ) -> Result<Sandbox, ConfigError> {
        // Through its links and `..` as far as it exists; checked at start (check_sandbox).
        let mut denied = vec![crate::sandbox::resolve(root)];
        for (i, d) in c.deny.iter().enumerate() {
            let path = expand(d);
            crate::sandbox::Denied::new([path.clone()])
                .map_err(|e| ConfigError::new(format!("sandbox.deny[{i}]"), e.to_string()))?;
            denied.push(path);
        }
        Ok(Sandbox { mode: c.mode, denied: std::sync::Arc::new(denied) })
    }

    /// Denies `paths` too (made absolute), but for those already beneath a
    /// denied path: the daemon's own key and token files and its local bucket.
    pub fn deny_also(&mut self, paths: impl IntoIterator<Item = PathBuf>) {
        let mut denied = (*self.denied).clone();
        for p in paths {
            let p = crate::sandbox::resolve(&std::path::absolute(&p).unwrap_or(p));
            if !denied.iter().any(|d| p.starts_with(d)) {
                denied.push(p);
            }
        }
        self.denied = std::sync::Arc::new(denied);
    }

    /// The paths `role`'s process may not touch, when it runs sandboxed: a
    /// command role, by its own `sandbox` or else by `sandbox.mode`.
    pub fn for_role(&self, role: &RoleConfig) -> Option<std::sync::Arc<Vec<PathBuf>>> {
        let on = role.command.is_some() && role.sandbox.unwrap_or(self.mode == SandboxMode::Landlock);
        on.then(|| self.denied.clone())
    }
}

/// Roles and lifecycle together, as the engine uses them.
#[derive(Debug, Clone, Default)]
pub struct RolesConfig {
    pub lifecycle: LifecycleConfig,
    pub roles: BTreeMap<String, RoleConfig>,
    /// Which command roles run under Landlock, denied what (`[sandbox]`).
    pub sandbox: Sandbox,
}

impl RolesConfig {
    /// `[lifecycle]` and `[roles.*]` as deserialized, checked.
    pub fn resolve(
        lifecycle: LifecycleConfig,
        roles: BTreeMap<String, RoleConfig>,
    ) -> Result<RolesConfig, ConfigError> {
        let c = RolesConfig { lifecycle, roles, sandbox: Sandbox::default() };
        c.check()?;
        Ok(c)
    }

    /// Checks what serde cannot: each role has exactly one runner, and every role
    /// named anywhere is configured. Errors name the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (id, r) in &self.roles {
            clawboard_core::check_id(id)
                .map_err(|e| ConfigError::new(format!("roles.{id}"), format!("the role id {e}")))?;
            if id.contains("--") {
                return Err(ConfigError::new(format!("roles.{id}"), ROLE_ID_DASHES));
            }
            let runners: Vec<&str> =
                [("command", r.command.is_some()), ("http", r.http.is_some()), ("llm", r.llm.is_some())]
                    .into_iter()
                    .filter_map(|(name, set)| set.then_some(name))
                    .collect();
            match runners.as_slice() {
                [] => return Err(ConfigError::new(format!("roles.{id}"), "needs `command`, `http` or `llm`")),
                [_] => {}
                [a, b, ..] => {
                    return Err(ConfigError::new(format!("roles.{id}"), format!("has both `{a}` and `{b}`; keep one")));
                }
            }
            if r.command.as_ref().is_some_and(Vec::is_empty) {
                return Err(ConfigError::new(format!("roles.{id}.command"), "is empty"));
            }
            if r.sandbox == Some(true) && r.command.is_none() {
                return Err(ConfigError::new(
                    format!("roles.{id}.sandbox"),
                    "only a `command` role runs as a process of this machine; an `http` or `llm` role has nothing to sandbox",
                ));
            }
            if let Some(l) = &r.llm {
                l.check(id)?;
            }
            if let Some(h) = &r.http
                && !(h.url.starts_with("http://") || h.url.starts_with("https://"))
            {
                return Err(ConfigError::new(
                    format!("roles.{id}.http.url"),
                    format!("{:?} is not an http:// or https:// URL", h.url),
                ));
            }
            if let Some(f) = &r.fallback {
                self.need(f, &format!("roles.{id}.fallback"))?;
            }
            if r.scope.is_some() && r.template.is_some() {
                return Err(ConfigError::new(format!("roles.{id}"), "has both `scope` and `template`; keep one"));
            }
            if let Some(scope) = &r.scope {
                clawboard_board::Scope::parse(scope)
                    .map_err(|e| ConfigError::new(format!("roles.{id}.scope"), e.to_string()))?;
            }
            if r.max_tokens == Some(0) || r.truncate_tokens == Some(0) {
                return Err(ConfigError::new(
                    format!("roles.{id}"),
                    "max_tokens and truncate_tokens must be at least 1",
                ));
            }
            if r.max_tokens.is_some() && !r.is_sliced() {
                return Err(ConfigError::new(
                    format!("roles.{id}.max_tokens"),
                    "the role has no `scope` or `template` to budget",
                ));
            }
        }
        for (ty, pm) in &self.lifecycle.pm_for_type {
            self.need(pm, &format!("lifecycle.pm_for_type.{}", ty.as_str()))?;
        }
        if let Some(v) = &self.lifecycle.validator {
            self.need(v, "lifecycle.validator")?;
        }
        if let Some(h) = &self.lifecycle.harvester {
            self.need(h, "lifecycle.harvester")?;
        }
        for (key, n) in [
            ("lifecycle.max_tasks", self.lifecycle.max_tasks),
            ("lifecycle.max_parallel_roles", self.lifecycle.max_parallel_roles),
            ("lifecycle.max_iterations", self.lifecycle.max_iterations as usize),
        ] {
            if n == 0 {
                return Err(ConfigError::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// Resolves each `llm` role's `api_key_file` with `resolve` (`~`, relative to
    /// the config file) and checks it is a regular file only its owner can read.
    pub fn resolve_key_files(&mut self, resolve: impl Fn(&str) -> std::path::PathBuf) -> Result<(), ConfigError> {
        for (id, r) in &mut self.roles {
            if let Some(l) = &mut r.llm {
                l.resolve_key_file(&resolve);
                l.check_key_file(id)?;
            }
        }
        Ok(())
    }

    /// What the daemon and `clawboard run` check before they start, when some
    /// command role is to run sandboxed, so that they do not start rather than
    /// fail each of that role's runs: the kernel enforces Landlock (the error
    /// names the key that asks for the sandbox), every denied path is one
    /// (absolute, no `..`) and the way down to it can be listed, and no
    /// sandboxed role's program or script is under a denied path
    /// ([`RolesConfig::check_sandbox_paths`], relative to `cwd`).
    pub fn check_sandbox(&self, cwd: &std::path::Path) -> Result<(), ConfigError> {
        let Some((id, role)) = self.roles.iter().find(|(_, r)| self.sandbox.for_role(r).is_some()) else {
            return Ok(());
        };
        crate::sandbox::check_supported().map_err(|e| {
            let key =
                if role.sandbox == Some(true) { format!("roles.{id}.sandbox") } else { "sandbox.mode".to_owned() };
            ConfigError::new(key, e.to_string())
        })?;
        crate::sandbox::Denied::new(self.sandbox.denied.iter().cloned())
            .and_then(|d| d.grants())
            .map_err(|e| ConfigError::new("sandbox", e.to_string()))?;
        self.check_sandbox_paths(cwd)
    }

    /// True when the lifecycle keeps tasks' boards under this config.
    pub fn keeps_boards(&self) -> bool {
        match self.lifecycle.board {
            BoardMode::Always => true,
            BoardMode::Never => false,
            BoardMode::Auto => self.roles.values().any(RoleConfig::is_sliced),
        }
    }

    /// Refuses a sandboxed command role whose program or an argument is a file
    /// under a denied path (say, a script kept in the tree's `roles/`): the
    /// sandbox would refuse its every run. An argument counts when it names a
    /// file that exists, absolute or relative to the role's `cwd` (else `cwd`,
    /// the daemon's directory). The runs' own refusal stays the rule; this
    /// only says so at start.
    pub fn check_sandbox_paths(&self, cwd: &std::path::Path) -> Result<(), ConfigError> {
        let denied: Vec<PathBuf> = self.sandbox.denied.iter().map(|d| crate::sandbox::resolve(d)).collect();
        for (id, r) in &self.roles {
            let (Some(argv), Some(_)) = (&r.command, self.sandbox.for_role(r)) else { continue };
            let dir = r.cwd.as_deref().map_or_else(|| cwd.to_path_buf(), |d| cwd.join(d));
            // The program as found on PATH, and each argument written as a path
            // (`/` in it, after a `--flag=` if any): a bare word like `tasks` (a
            // module, a subcommand) is not taken for one.
            let program = crate::runner::program(&argv[0], r);
            let paths = std::iter::once((0, program.as_os_str().to_string_lossy().into_owned())).chain(
                argv.iter().enumerate().skip(1).filter_map(|(i, a)| {
                    let path =
                        a.split_once('=').filter(|(flag, _)| flag.starts_with('-')).map_or(a.as_str(), |(_, p)| p);
                    path.contains('/').then(|| (i, path.to_owned()))
                }),
            );
            for (i, path) in paths {
                let arg = &argv[i];
                let Ok(file) = dir.join(&path).canonicalize() else { continue };
                if let Some(d) = denied.iter().find(|d| file.starts_with(d)) {
                    return Err(ConfigError::new(
                        format!("roles.{id}.command[{i}]"),
                        format!(
                            "{arg:?} is {} under {}, which a sandboxed role may not read; keep it elsewhere, or set roles.{id}.sandbox = false",
                            file.display(),
                            d.display()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks every role's `template` names a loaded one.
    pub fn check_templates(
        &self,
        templates: &std::collections::BTreeMap<String, clawboard_board::Template>,
    ) -> Result<(), ConfigError> {
        for (id, r) in &self.roles {
            if let Some(t) = &r.template
                && !templates.contains_key(t)
            {
                let known: Vec<&str> = templates.keys().map(String::as_str).collect();
                return Err(ConfigError::new(
                    format!("roles.{id}.template"),
                    format!("{t:?} is not a known template ({})", known.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn need(&self, role: &str, key: &str) -> Result<(), ConfigError> {
        if self.roles.contains_key(role) {
            Ok(())
        } else {
            Err(ConfigError::new(key, format!("role {role:?} is not configured under [roles]")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;
    use std::path::Path;

    fn llm_role(llm: serde_json::Value) -> serde_json::Value {
        json!({"llm": llm})
    }

    #[rstest]
    #[case::no_runner(json!({"timeout": "5s"}), "roles.w: needs `command`, `http` or `llm`")]
    #[case::two_runners(
        json!({"command": ["x"], "llm": {"base_url": "http://h/v1", "model": "m"}}),
        "roles.w: has both `command` and `llm`; keep one"
    )]
    #[case::http_and_llm(
        json!({"http": {"url": "http://h/run"}, "llm": {"base_url": "http://h/v1", "model": "m"}}),
        "roles.w: has both `http` and `llm`; keep one"
    )]
    #[case::empty_model(llm_role(json!({"base_url": "http://h/v1", "model": " "})), "roles.w.llm.model: is empty")]
    #[case::bad_base_url(
        llm_role(json!({"base_url": "127.0.0.1:11434/v1", "model": "m"})),
        "roles.w.llm.base_url: \"127.0.0.1:11434/v1\" is not an http:// or https:// URL"
    )]
    #[case::no_host(llm_role(json!({"base_url": "https:///v1", "model": "m"})), "roles.w.llm.base_url: \"https:///v1\" has no host")]
    #[case::credentials_in_url(
        llm_role(json!({"base_url": "https://u:sk-x@h/v1", "model": "m"})),
        "roles.w.llm.base_url: carries credentials"
    )]
    #[case::key_in_query(
        llm_role(json!({"base_url": "https://h/v1?api-key=sk-x", "model": "m"})),
        "roles.w.llm.base_url: \"https://h/v1?api-key=sk-x\" has a query or fragment"
    )]
    #[case::whole_endpoint(
        llm_role(json!({"base_url": "http://h:8000/v1/chat/completions/", "model": "m"})),
        "roles.w.llm.base_url: \"http://h:8000/v1/chat/completions/\" is the whole endpoint"
    )]
    #[case::bad_port(
        llm_role(json!({"base_url": "http://h:99999/v1", "model": "m"})),
        "roles.w.llm.base_url: \"http://h:99999/v1\" is not a valid URL: invalid port number"
    )]
    #[case::space_in_host(
        llm_role(json!({"base_url": "http://my host/v1", "model": "m"})),
        "roles.w.llm.base_url: \"http://my host/v1\" is not a valid URL"
    )]
    #[case::no_wait(
        llm_role(json!({"base_url": "http://h/v1", "model": "m", "max_wait": "0s"})),
        "roles.w.llm.max_wait: must be more than 0"
    )]
    #[case::both_key_sources(
        llm_role(json!({"base_url": "http://h/v1", "model": "m", "api_key_env": "K", "api_key_file": "/k"})),
        "roles.w.llm.api_key_file: set api_key_env or api_key_file, not both"
    )]
    #[case::temperature_3(
        llm_role(json!({"base_url": "http://h/v1", "model": "m", "temperature": 3.0})),
        "roles.w.llm.temperature: 3 is out of range 0..=2"
    )]
    #[case::too_many_http_retries(
        llm_role(json!({"base_url": "http://h/v1", "model": "m", "http_retries": 11})),
        "roles.w.llm.http_retries: 11 is out of range 0..=10"
    )]
    fn bad_runners_are_refused_naming_the_key(#[case] role: serde_json::Value, #[case] want: &str) {
        let role: RoleConfig = serde_json::from_value(role).unwrap();
        let err = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), role)]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(want), "got {err:?}, want {want:?}");
    }

    #[test]
    fn a_role_id_with_two_dashes_is_refused_naming_the_role() {
        let role: RoleConfig = serde_json::from_value(json!({"command": ["x"]})).unwrap();
        let roles = |id: &str| BTreeMap::from([(id.to_owned(), role.clone())]);
        let err = RolesConfig::resolve(LifecycleConfig::default(), roles("writer--a")).unwrap_err().to_string();
        assert!(err.starts_with("roles.writer--a: the role id contains \"--\""), "{err}");
        assert!(err.contains("cross-pollination"), "{err}");
        for ok in ["writer-a", "writer-", "a-b-c"] {
            RolesConfig::resolve(LifecycleConfig::default(), roles(ok)).unwrap();
        }
    }

    #[test]
    fn llm_without_model_or_with_unknown_fields_does_not_parse() {
        let no_model = serde_json::from_value::<RoleConfig>(llm_role(json!({"base_url": "http://h/v1"})));
        assert!(no_model.unwrap_err().to_string().contains("missing field `model`"));
        let typo = serde_json::from_value::<RoleConfig>(llm_role(
            json!({"base_url": "http://h/v1", "model": "m", "modle": "x"}),
        ));
        assert!(typo.unwrap_err().to_string().contains("unknown field `modle`"));
    }

    #[test]
    fn a_complete_llm_role_passes() {
        let role: RoleConfig = serde_json::from_value(json!({
            "llm": {"base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY",
                    "temperature": 0.2, "system_prompt": "JSON only.", "json_response": true, "output_key": "output",
                    "max_wait": "30s", "http_retries": 2},
            "timeout": "90s", "max_retries": 1, "scope": ["meta.intent"], "max_tokens": 300
        }))
        .unwrap();
        let c = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), role)])).unwrap();
        let llm = c.roles["w"].llm.as_ref().unwrap();
        assert_eq!((llm.max_wait, llm.http_retries), (Duration::from_secs(30), 2));
    }

    #[test]
    fn the_sandbox_applies_to_command_roles_by_mode_unless_a_role_says_otherwise() {
        let role = |v: serde_json::Value| serde_json::from_value::<RoleConfig>(v).unwrap();
        let cfg = |mode: &str, deny: &[&str]| SandboxConfig {
            mode: serde_json::from_value(json!(mode)).unwrap(),
            deny: deny.iter().map(|d| (*d).to_owned()).collect(),
        };
        let home = |d: &str| PathBuf::from(d.replace('~', "/home/u"));
        let on = Sandbox::resolve(cfg("landlock", &["~/keys", "/etc/clawboard"]), Path::new("/srv/bb"), home).unwrap();
        let denied = vec![PathBuf::from("/srv/bb"), PathBuf::from("/home/u/keys"), PathBuf::from("/etc/clawboard")];
        assert_eq!(*on.denied, denied, "the root first, then sandbox.deny");
        let plain = role(json!({"command": ["x"]}));
        let out = role(json!({"command": ["x"], "sandbox": false}));
        let forced = role(json!({"command": ["x"], "sandbox": true}));
        let http = role(json!({"http": {"url": "http://h/"}}));
        assert_eq!(on.for_role(&plain).as_deref(), Some(&denied));
        assert_eq!(on.for_role(&out), None);
        assert_eq!(on.for_role(&http), None, "nothing to sandbox");
        let off = Sandbox::resolve(cfg("off", &[]), Path::new("/srv/bb"), home).unwrap();
        assert_eq!(off.for_role(&plain), None);
        assert_eq!(off.for_role(&forced).as_deref(), Some(&vec![PathBuf::from("/srv/bb")]));
    }

    #[test]
    fn bad_sandbox_settings_are_refused_naming_the_key() {
        let bad = |deny: &str| {
            let c = SandboxConfig { mode: SandboxMode::Landlock, deny: vec!["/ok".into(), deny.into()] };
            Sandbox::resolve(c, Path::new("/srv/bb"), |d: &str| PathBuf::from(d)).unwrap_err().to_string()
        };
        assert_eq!(bad("keys"), "sandbox.deny[1]: \"keys\": is not an absolute path");
        assert_eq!(bad("/"), "sandbox.deny[1]: \"/\": would deny the whole file system");
        assert_eq!(bad("/a/../b"), "sandbox.deny[1]: \"/a/../b\": has a `..` component");
        let mode = serde_json::from_value::<SandboxConfig>(json!({"mode": "on"})).unwrap_err().to_string();
        assert!(mode.contains("unknown variant `on`, expected `off` or `landlock`"), "{mode}");
        let typo = serde_json::from_value::<SandboxConfig>(json!({"denny": []})).unwrap_err().to_string();
        assert!(typo.contains("unknown field `denny`"), "{typo}");
        let role: RoleConfig = serde_json::from_value(json!({"http": {"url": "http://h/"}, "sandbox": true})).unwrap();
        let err = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), role)]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("roles.w.sandbox: only a `command` role runs as a process"), "{err}");
    }

    #[test]
    fn a_sandboxed_role_whose_script_is_under_the_root_is_refused_at_start() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap().join("bb");
        std::fs::create_dir_all(root.join("roles")).unwrap();
        std::fs::create_dir_all(root.join("tasks")).unwrap();
        std::fs::write(root.join("roles/x.py"), "").unwrap();
        let sandbox =
            Sandbox::resolve(SandboxConfig { mode: SandboxMode::Landlock, deny: vec![] }, &root, |s: &str| {
                PathBuf::from(s)
            })
            .unwrap();
        let check = |argv: serde_json::Value, extra: serde_json::Value, cwd: &Path| {
            let mut role = json!({"command": argv});
            role.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let role: RoleConfig = serde_json::from_value(role).unwrap();
            let c = RolesConfig {
                roles: BTreeMap::from([("w".to_owned(), role)]),
                sandbox: sandbox.clone(),
                ..Default::default()
            };
            c.check_sandbox_paths(cwd).map_err(|e| e.to_string())
        };
        let script = root.join("roles/x.py");
        let err = check(json!(["python3", script]), json!({}), Path::new("/")).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "roles.w.command[1]: {:?} is {} under {}",
                script,
                script.display(),
                root.display()
            )),
            "{err}"
        );
        assert!(err.ends_with("or set roles.w.sandbox = false"), "{err}");
        // Relative to the role's cwd, or to the daemon's.
        let rel = check(json!(["python3", "roles/x.py"]), json!({"cwd": root}), Path::new("/")).unwrap_err();
        assert!(rel.starts_with("roles.w.command[1]: \"roles/x.py\""), "{rel}");
        assert!(check(json!(["python3", "./roles/x.py"]), json!({}), &root).is_err());
        // Unsandboxed, a bare word, a file elsewhere: fine.
        check(json!(["python3", script]), json!({"sandbox": false}), Path::new("/")).unwrap();
        check(json!(["python3", "-m", "tasks"]), json!({}), &root).unwrap();
        check(json!(["sh", "-c", "true"]), json!({}), &root).unwrap();
    }

    #[test]
    fn the_daemons_own_files_are_denied_too_and_bad_denied_paths_stop_the_start() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let root = base.join("bb");
        std::fs::create_dir_all(&root).unwrap();
        let on = SandboxConfig { mode: SandboxMode::Landlock, deny: vec![] };
        let mut sandbox = Sandbox::resolve(on.clone(), &root, |s: &str| PathBuf::from(s)).unwrap();
        // A key beside the root is added; the web token inside the root is already denied.
        sandbox.deny_also([base.join("keys/openai.key"), root.join(".clawboard/web-token")]);
        assert_eq!(*sandbox.denied, vec![root.clone(), base.join("keys/openai.key")]);
        let roles = |sandbox: Sandbox| RolesConfig {
            roles: BTreeMap::from([("w".to_owned(), serde_json::from_value(json!({"command": ["sh"]})).unwrap())]),
            sandbox,
            ..Default::default()
        };
        roles(sandbox).check_sandbox(&base).unwrap();
        // A root given with `..` through a part that does not exist cannot be denied.
        let odd = Sandbox::resolve(on, &base.join("gone/../bb"), |s: &str| PathBuf::from(s)).unwrap();
        let err = roles(odd).check_sandbox(&base).unwrap_err().to_string();
        assert!(err.starts_with("sandbox: ") && err.ends_with("has a `..` component"), "{err}");
    }
}
