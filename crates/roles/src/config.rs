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
mod sandbox;

pub use llm::{ApiKey, CountTokens, LlmConfig, LlmProvider, LlmSection, ReplyFormat};
pub use sandbox::{Sandbox, SandboxConfig, SandboxMode};

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
    /// A result passes when the validator scores it at least this (0–10),
    /// whatever its own `pass` says; absent: its `pass` decides.
    #[serde(default)]
    pub pass_score: Option<f64>,
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
            pass_score: None,
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
    /// Variables of the daemon's own environment a command gets, by name. It
    /// gets no other, but for what every program needs (`PATH`, `HOME`, the
    /// locale; [`crate::runner::INHERITED`]): never the daemon's secrets.
    #[serde(default)]
    pub pass_env: Vec<String>,
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

/// Roles and lifecycle together, as the engine uses them.
#[derive(Debug, Clone, Default)]
pub struct RolesConfig {
    pub lifecycle: LifecycleConfig,
    pub roles: BTreeMap<String, RoleConfig>,
    /// Which command roles run under Landlock, denied what (`[sandbox]`).
    pub sandbox: Sandbox,
    /// `[llm.providers.*]`, already applied to the roles that name them.
    pub llm: LlmSection,
    /// Hand every sliced step the whole board, with no budget (`clawboard run
    /// --full-context`, to measure what slicing saves); never from the config file.
    pub full_context: bool,
}

impl RolesConfig {
    /// `[lifecycle]` and `[roles.*]` as deserialized, checked.
    pub fn resolve(
        lifecycle: LifecycleConfig,
        roles: BTreeMap<String, RoleConfig>,
    ) -> Result<RolesConfig, ConfigError> {
        Self::resolve_with(lifecycle, roles, LlmSection::default(), |_| None)
    }

    /// [`RolesConfig::resolve`] with `[llm]`: each provider takes the
    /// environment's overrides (`env`), and each role that names one takes its
    /// endpoint, model, key and limits.
    pub fn resolve_with(
        lifecycle: LifecycleConfig,
        mut roles: BTreeMap<String, RoleConfig>,
        llm: LlmSection,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<RolesConfig, ConfigError> {
        let llm = llm.resolve(env)?;
        for (id, r) in &mut roles {
            if let Some(l) = &mut r.llm {
                l.apply_provider(id, &llm)?;
            }
        }
        let c = RolesConfig { lifecycle, roles, sandbox: Sandbox::default(), llm, full_context: false };
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
            check_pass_env(id, r)?;
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
        if let Some(p) = self.lifecycle.pass_score
            && !(0.0..=10.0).contains(&p)
        {
            return Err(ConfigError::new("lifecycle.pass_score", format!("{p} is not within 0 and 10")));
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

    /// Every `api_key_file`, of a role or a provider: denied to sandboxed roles.
    pub fn secret_files(&self) -> impl Iterator<Item = &std::path::Path> {
        let roles = self.roles.values().filter_map(|r| r.llm.as_ref()?.api_key_file.as_deref());
        roles.chain(self.llm.providers.values().filter_map(|p| p.api_key_file.as_deref()))
    }

    /// Resolves each `llm` role's `api_key_file` with `resolve` (`~`, relative to
    /// the config file) and checks it is a regular file only its owner can read.
    pub fn resolve_key_files(&mut self, resolve: impl Fn(&str) -> std::path::PathBuf) -> Result<(), ConfigError> {
        for (name, p) in &mut self.llm.providers {
            if let Some(f) = &p.api_key_file {
                let path = resolve(&f.to_string_lossy());
                p.api_key_file = Some(path.clone());
                let mut probe = LlmConfig::from_provider(name, p);
                probe.api_key_file = Some(path);
                probe.check_key_file(name).map_err(|e| p.blame(name, e))?;
            }
        }
        for (id, r) in &mut self.roles {
            if let Some(l) = &mut r.llm {
                l.resolve_key_file(&resolve);
                l.check_key_file(id)?;
            }
        }
        Ok(())
    }

    /// True when the lifecycle keeps tasks' boards under this config.
    pub fn keeps_boards(&self) -> bool {
        match self.lifecycle.board {
            BoardMode::Always => true,
            BoardMode::Never => false,
            BoardMode::Auto => self.roles.values().any(RoleConfig::is_sliced),
        }
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

/// `roles.ID.pass_env`: names of variables, for a command role only.
fn check_pass_env(id: &str, r: &RoleConfig) -> Result<(), ConfigError> {
    for (i, name) in r.pass_env.iter().enumerate() {
        let key = format!("roles.{id}.pass_env[{i}]");
        if r.command.is_none() {
            return Err(ConfigError::new(
                key,
                "only a `command` role runs as a process with an environment; an `http` or `llm` role has none",
            ));
        }
        crate::runner::check_var_name(name).map_err(|why| ConfigError::new(key, why))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    fn llm_role(llm: serde_json::Value) -> serde_json::Value {
        json!({"llm": llm})
    }

    #[rstest]
    #[case::no_runner(json!({"timeout": "5s"}), "roles.w: needs `command`, `http` or `llm`")]
    #[case::pass_env_not_a_name(
        json!({"command": ["x"], "pass_env": ["PYTHONPATH", "MY-VAR"]}),
        "roles.w.pass_env[1]: \"MY-VAR\" is not a variable name (letters, digits and `_`, not starting with a digit)"
    )]
    #[case::pass_env_digit_first(json!({"command": ["x"], "pass_env": ["1X"]}), "roles.w.pass_env[0]: \"1X\" is not a variable name")]
    #[case::pass_env_empty(json!({"command": ["x"], "pass_env": [""]}), "roles.w.pass_env[0]: \"\" is not a variable name")]
    #[case::pass_env_of_http(
        json!({"http": {"url": "http://h/run"}, "pass_env": ["HOME"]}),
        "roles.w.pass_env[0]: only a `command` role runs as a process with an environment"
    )]
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
    fn llm_without_model_or_with_unknown_fields_is_refused() {
        let no_model = serde_json::from_value::<RoleConfig>(llm_role(json!({"base_url": "http://h/v1"}))).unwrap();
        let err = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), no_model)]));
        assert_eq!(err.unwrap_err().to_string(), "roles.w.llm.model: is empty; name the model, e.g. \"qwen2.5:7b\"");
        let no_url = serde_json::from_value::<RoleConfig>(llm_role(json!({"model": "m"}))).unwrap();
        let err = RolesConfig::resolve(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), no_url)]));
        assert!(err.unwrap_err().to_string().starts_with("roles.w.llm.base_url: is required"));
        let typo = serde_json::from_value::<RoleConfig>(llm_role(
            json!({"base_url": "http://h/v1", "model": "m", "modle": "x"}),
        ));
        assert!(typo.unwrap_err().to_string().contains("unknown field `modle`"));
    }

    fn providers(toml_text: &str) -> LlmSection {
        toml::from_str(toml_text).unwrap()
    }

    fn resolve_llm(
        role: serde_json::Value,
        section: LlmSection,
        env: &[(&str, &str)],
    ) -> Result<RolesConfig, ConfigError> {
        let role: RoleConfig = serde_json::from_value(llm_role(role)).unwrap();
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        RolesConfig::resolve_with(LifecycleConfig::default(), BTreeMap::from([("w".to_owned(), role)]), section, |k| {
            env.get(k).cloned()
        })
    }

    #[test]
    fn a_role_takes_its_providers_endpoint_model_key_and_limits() {
        let section = providers(
            r#"
            [providers.local]
            base_url = "http://127.0.0.1:8080/v1"
            model = "gemma-3-270m"
            api_key_env = "LOCAL_KEY"
            count_tokens = "llama_cpp"
            reply_format = "json_object"
            max_wait = "5s"
            http_retries = 1
            "#,
        );
        let c = resolve_llm(json!({"provider": "local", "temperature": 0.3}), section.clone(), &[]).unwrap();
        let l = c.roles["w"].llm.as_ref().unwrap();
        assert_eq!((l.base_url.as_str(), l.model.as_str()), ("http://127.0.0.1:8080/v1", "gemma-3-270m"));
        assert_eq!(l.api_key_env.as_deref(), Some("LOCAL_KEY"));
        assert_eq!((l.max_wait(), l.http_retries()), (Duration::from_secs(5), 1));
        assert_eq!((l.count_tokens, l.reply_format()), (CountTokens::LlamaCpp, ReplyFormat::JsonObject));
        assert_eq!(l.who(), "provider local (gemma-3-270m)");
        // A key error names the provider's key, where it is set.
        let err = l.api_key_from("w", |_| None).unwrap_err().to_string();
        assert_eq!(err, "the environment variable LOCAL_KEY (llm.providers.local.api_key_env) is not set or empty");
        // The environment's key file replaces the file's key variable, and the other way round.
        let c = resolve_llm(
            json!({"provider": "local"}),
            section.clone(),
            &[("CLAWBOARD_LLM_LOCAL_API_KEY_FILE", "/etc/clawboard/model.key")],
        )
        .unwrap();
        let l = c.roles["w"].llm.as_ref().unwrap();
        assert_eq!(
            (l.api_key_env.as_deref(), l.api_key_file.as_deref()),
            (None, Some(std::path::Path::new("/etc/clawboard/model.key")))
        );
        let c =
            resolve_llm(json!({"provider": "local"}), section.clone(), &[("CLAWBOARD_LLM_LOCAL_API_KEY_ENV", "OTHER")])
                .unwrap();
        assert_eq!(c.roles["w"].llm.as_ref().unwrap().api_key_env.as_deref(), Some("OTHER"));

        // The role's own model and limits win; the environment overrides the provider.
        let c = resolve_llm(
            json!({"provider": "local", "model": "bigger", "http_retries": 4, "reply_format": "json_schema"}),
            section.clone(),
            &[("CLAWBOARD_LLM_LOCAL_BASE_URL", "http://127.0.0.1:9999/v1"), ("CLAWBOARD_LLM_LOCAL_MODEL", "other")],
        )
        .unwrap();
        let l = c.roles["w"].llm.as_ref().unwrap();
        assert_eq!((l.base_url.as_str(), l.model.as_str()), ("http://127.0.0.1:9999/v1", "bigger"));
        assert_eq!((l.http_retries(), l.reply_format()), (4, ReplyFormat::JsonSchema));
        assert_eq!(c.llm.providers["local"].model, "other");
    }

    #[test]
    fn a_bad_provider_or_a_role_that_repeats_it_is_refused_with_the_key() {
        let section = providers("[providers.local]\nbase_url = \"http://h/v1\"\nmodel = \"m\"\n");
        for (role, want) in [
            (
                json!({"provider": "remote"}),
                "roles.w.llm.provider: \"remote\" is not a provider; define [llm.providers.remote] (defined: local)",
            ),
            (
                json!({"provider": "local", "base_url": "http://other/v1"}),
                "roles.w.llm.base_url: is the provider's; set it in [llm.providers.local], or drop `provider`",
            ),
            (
                json!({"provider": "local", "api_key_env": "K"}),
                "roles.w.llm.api_key_env: is the provider's; set it in [llm.providers.local], or drop `provider`",
            ),
            (
                json!({"provider": "local", "max_completion_tokens": 0}),
                "roles.w.llm.max_completion_tokens: 0 is out of range",
            ),
            (json!({"provider": "local", "reply_schema": "x"}), "roles.w.llm.reply_schema: must be a table"),
            (
                json!({"provider": "local", "reply_schema": {"type": "object"}, "reply_format": "text"}),
                "roles.w.llm.reply_schema: is sent only with reply_format = \"json_schema\" or \"json_object_schema\", not \"text\"",
            ),
        ] {
            let err = resolve_llm(role.clone(), section.clone(), &[]).unwrap_err().to_string();
            assert!(err.starts_with(want), "{role}: {err}");
        }
        // The provider's own section is checked, also after the environment's override.
        let bad = providers("[providers.local]\nbase_url = \"ftp://h\"\nmodel = \"m\"\n");
        let err = resolve_llm(json!({"provider": "local"}), bad, &[]).unwrap_err().to_string();
        assert_eq!(err, "llm.providers.local.base_url: \"ftp://h\" is not an http:// or https:// URL");
        let err = resolve_llm(
            json!({"provider": "local"}),
            section,
            &[("CLAWBOARD_LLM_LOCAL_BASE_URL", "http://h/v1/chat/completions")],
        )
        .unwrap_err()
        .to_string();
        // A value the environment set is blamed on the variable, naming the key it overrides.
        assert!(
            err.starts_with("CLAWBOARD_LLM_LOCAL_BASE_URL: \"http://h/v1/chat/completions\" is the whole endpoint"),
            "{err}"
        );
        assert!(err.ends_with("(it overrides llm.providers.local.base_url)"), "{err}");
        let typo: Result<LlmSection, _> = toml::from_str("[providers.local]\nbase_url = \"http://h\"\nmodle = \"m\"\n");
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
        assert_eq!((llm.max_wait(), llm.http_retries()), (Duration::from_secs(30), 2));
    }
}
