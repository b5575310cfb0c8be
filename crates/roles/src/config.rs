//! What the daemon needs to know about roles and the lifecycle: `[lifecycle]` and
//! `[roles.ID]` of the config file, deserialized here with unknown keys refused and
//! their defaults, then checked by [`RolesConfig::resolve`] with errors naming the
//! key (`roles.w.command`); the binary hands over the sections as read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clawboard_core::config::ConfigError;
use clawboard_core::duration::serde_str;
use clawboard_core::formats::TaskType;
use serde::Deserialize;

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

/// Roles and lifecycle together, as the engine uses them.
#[derive(Debug, Clone, Default)]
pub struct RolesConfig {
    pub lifecycle: LifecycleConfig,
    pub roles: BTreeMap<String, RoleConfig>,
}

impl RolesConfig {
    /// `[lifecycle]` and `[roles.*]` as deserialized, checked.
    pub fn resolve(
        lifecycle: LifecycleConfig,
        roles: BTreeMap<String, RoleConfig>,
    ) -> Result<RolesConfig, ConfigError> {
        let c = RolesConfig { lifecycle, roles };
        c.check()?;
        Ok(c)
    }

    /// Checks what serde cannot: each role has exactly one runner, and every role
    /// named anywhere is configured. Errors name the key.
    pub fn check(&self) -> Result<(), ConfigError> {
        for (id, r) in &self.roles {
            clawboard_core::check_id(id)
                .map_err(|e| ConfigError::new(format!("roles.{id}"), format!("the role id {e}")))?;
            match (&r.command, &r.http) {
                (Some(argv), None) if argv.is_empty() => {
                    return Err(ConfigError::new(format!("roles.{id}.command"), "is empty"));
                }
                (Some(_), None) | (None, Some(_)) => {}
                (None, None) => return Err(ConfigError::new(format!("roles.{id}"), "needs `command` or `http`")),
                (Some(_), Some(_)) => {
                    return Err(ConfigError::new(format!("roles.{id}"), "has both `command` and `http`; keep one"));
                }
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
