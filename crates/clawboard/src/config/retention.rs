//! `[retention]`: where `retention.yaml` is and when the daemon applies it.

use std::path::{Path, PathBuf};

use clawboard_core::retention::{DEFAULT_POLICY, Policy};
use clawboard_sync::Schedule;
use serde::Deserialize;

use crate::cli::BadInput;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    pub enabled: Option<bool>,
    pub schedule: Option<String>,
    pub file: Option<String>,
}

pub const RETENTION_SCHEDULE: &str = "30 * * * *";

#[derive(Debug, Clone)]
pub struct RetentionResolved {
    pub enabled: bool,
    pub schedule: Schedule,
    /// `retention.file`: must exist.
    pub file: Option<PathBuf>,
    /// Else `retention.yaml` beside the config file, used whenever it exists (looked
    /// for at every run); else the embedded seed policy.
    pub beside_config: Option<PathBuf>,
}

pub fn resolve(
    r: RetentionConfig,
    config_file: Option<&Path>,
    expand: impl Fn(&str) -> PathBuf,
    origin: &str,
) -> Result<RetentionResolved, BadInput> {
    let bad = |key: &str, msg: String| BadInput(format!("{origin}: key {key}: {msg}"));
    let text = r.schedule.unwrap_or_else(|| RETENTION_SCHEDULE.to_owned());
    let schedule = Schedule::parse("retention.schedule", &text).map_err(|e| bad("retention.schedule", e.reason))?;
    // Relative to the config file's directory, as every path of the config is (not
    // to the working directory, which differs between the CLI and the daemon).
    let file = match r.file.as_deref() {
        Some(f) if f.trim().is_empty() => {
            return Err(bad("retention.file", "is empty; name a retention.yaml, or leave the key out".into()));
        }
        Some(f) => {
            let p = expand(f);
            let p = match config_file.and_then(Path::parent) {
                Some(dir) if p.is_relative() => dir.join(p),
                _ => p,
            };
            if !p.is_file() {
                return Err(bad("retention.file", format!("{} is not a file", p.display())));
            }
            Some(p)
        }
        None => None,
    };
    let beside_config = config_file.and_then(Path::parent).map(|d| d.join("retention.yaml"));
    Ok(RetentionResolved { enabled: r.enabled.unwrap_or(true), schedule, file, beside_config })
}

impl RetentionResolved {
    /// Reads and checks the policy (at every use, so an edit takes effect at the next
    /// run); the error names the file, the key and the reason.
    pub fn policy(&self) -> Result<(Policy, String), BadInput> {
        let file = self.file.clone().or_else(|| self.beside_config.clone().filter(|p| p.exists()));
        match &file {
            None => Policy::parse("retention.yaml (embedded)", DEFAULT_POLICY)
                .map(|p| (p, "the embedded seed policy".to_owned()))
                .map_err(|e| BadInput(e.to_string())),
            Some(path) => {
                let name = path.display().to_string();
                let text = std::fs::read_to_string(path)
                    .map_err(|e| BadInput(format!("{name}: cannot read the retention policy: {e}")))?;
                Policy::parse(&name, &text).map(|p| (p, name)).map_err(|e| BadInput(e.to_string()))
            }
        }
    }

    /// How long the policy keeps ended tasks, for the reports' notes; nothing when
    /// retention is off, or its policy is unusable (then no run deletes anything).
    pub fn kept(&self) -> clawboard_records::reports::Kept {
        if !self.enabled {
            return clawboard_records::reports::Kept::default();
        }
        match self.policy() {
            Ok((policy, _)) => clawboard_records::reports::Kept::of(&policy),
            Err(e) => {
                tracing::warn!("retention: {e}; the reports assume nothing was deleted");
                clawboard_records::reports::Kept::default()
            }
        }
    }
}
