//! What the daemon needs to know about roles and the lifecycle; part of the
//! config file (`[lifecycle]`, `[roles.ID]`), parsed with unknown keys refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Checks what serde cannot: each role has exactly one runner, and every role
    /// named anywhere is configured. Errors name the key.
    pub fn check(&self) -> Result<(), String> {
        for (id, r) in &self.roles {
            clawboard_core::check_id(id).map_err(|e| format!("roles.{id}: the role id {e}"))?;
            match (&r.command, &r.http) {
                (Some(argv), None) if argv.is_empty() => return Err(format!("roles.{id}.command: is empty")),
                (Some(_), None) | (None, Some(_)) => {}
                (None, None) => return Err(format!("roles.{id}: needs `command` or `http`")),
                (Some(_), Some(_)) => return Err(format!("roles.{id}: has both `command` and `http`; keep one")),
            }
            if let Some(h) = &r.http
                && !(h.url.starts_with("http://") || h.url.starts_with("https://"))
            {
                return Err(format!("roles.{id}.http.url: {:?} is not an http:// or https:// URL", h.url));
            }
            if let Some(f) = &r.fallback {
                self.need(f, &format!("roles.{id}.fallback"))?;
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
        if self.lifecycle.max_tasks == 0 || self.lifecycle.max_parallel_roles == 0 {
            return Err("lifecycle.max_tasks and lifecycle.max_parallel_roles: must be at least 1".into());
        }
        if self.lifecycle.max_iterations == 0 {
            return Err("lifecycle.max_iterations: must be at least 1".into());
        }
        Ok(())
    }

    fn need(&self, role: &str, key: &str) -> Result<(), String> {
        if self.roles.contains_key(role) {
            Ok(())
        } else {
            Err(format!("{key}: role {role:?} is not configured under [roles]"))
        }
    }
}
