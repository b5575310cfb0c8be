//! `[archive]` and `[harvest]`: as written in the config file ([`ArchiveSection`],
//! [`HarvestSection`]) and resolved over the embedded default (local commits every
//! 6 hours on branch `memory`, harvests hourly) into [`ArchiveConfig`], with errors
//! naming the key. The binary hands over the sections as read and the token it found
//! in the environment; adding an archive key is an edit here only.
//!
//! The node id is not a setting: it is passed to [`crate::Archive::new`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use clawboard_core::backoff::Backoff;
use clawboard_core::config::{self, ByteSize, ConfigError, Schedule};
use clawboard_core::secret::SecretSource;
use serde::Deserialize;

use crate::HarvestSettings;
use crate::repo::redact;

/// `[archive]` as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSection {
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

/// `[harvest]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarvestSection {
    pub schedule: Option<String>,
    pub top_per_role: Option<u32>,
}

pub const ARCHIVE_SCHEDULE: &str = "0 */6 * * *";
pub const HARVEST_SCHEDULE: &str = "5 * * * *";
/// `archive.max_file_size`'s default: 50 MiB (GitHub warns from 50 MiB and refuses 100).
pub const MAX_FILE_BYTES: u64 = 50 << 20;

/// `[archive]` and `[harvest]`, resolved: when the daemon runs them, and how.
#[derive(Debug, Clone)]
pub struct ArchiveConfig {
    pub enabled: bool,
    pub schedule: Schedule,
    /// After a failed push, the first retry (doubling up to the schedule).
    pub retry: Duration,
    pub settings: ArchiveSettings,
    pub harvest_schedule: Schedule,
    pub harvest: HarvestSettings,
}

/// How the archive commits and pushes. The default keeps the commits local. Its
/// `Debug` never prints the token, nor credentials in the remote URL.
#[derive(Clone)]
pub struct ArchiveSettings {
    pub branch: String,
    /// `https://…` or an SSH URL; `None` keeps the commits local.
    pub remote: Option<String>,
    pub author_name: String,
    pub author_email: String,
    /// The user name sent with a token (`x-access-token` suits GitHub), unless the URL has one.
    pub username: String,
    /// The token for HTTPS remotes: from the environment, else `archive.token_file`.
    pub token: Option<SecretSource>,
    /// `archive.token_file` as configured, even while a token in the environment
    /// wins over it: denied to sandboxed roles all the same.
    pub token_file: Option<PathBuf>,
    /// A private key for SSH remotes; without one, the SSH agent.
    pub ssh_key: Option<PathBuf>,
    /// Source files larger than this are refused (GitHub refuses 100 MiB).
    pub max_file_bytes: u64,
    /// Push attempts before a run gives up (each rejected one fetches and merges).
    pub push_attempts: u32,
    /// The wait before the next attempt, jittered so two nodes that collided do not
    /// collide again.
    pub push_backoff: Backoff,
}

impl std::fmt::Debug for ArchiveSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveSettings")
            .field("branch", &self.branch)
            .field("remote", &self.remote.as_deref().map(redact))
            .field("username", &self.username)
            .field("token", &self.token)
            .field("ssh_key", &self.ssh_key)
            .finish_non_exhaustive()
    }
}

impl ArchiveSettings {
    /// The token file and the SSH key: denied to sandboxed roles.
    pub fn secret_files(&self) -> impl Iterator<Item = &Path> {
        self.token_file.iter().chain(&self.ssh_key).map(PathBuf::as_path)
    }
}

impl Default for ArchiveSettings {
    fn default() -> ArchiveSettings {
        ArchiveSettings {
            branch: "memory".into(),
            remote: None,
            author_name: "clawboard".into(),
            author_email: "clawboard@localhost".into(),
            username: "x-access-token".into(),
            token: None,
            token_file: None,
            ssh_key: None,
            max_file_bytes: MAX_FILE_BYTES,
            push_attempts: 5,
            push_backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)).jittered(),
        }
    }
}

impl ArchiveConfig {
    /// `[archive]` and `[harvest]` over the embedded default, checked. The token is
    /// `env_token` (the binary looks in `CLAWBOARD_GIT_TOKEN`, else `GITHUB_TOKEN`),
    /// else `archive.token_file`; `expand` turns a path as written (`~/…`) into a path.
    pub fn resolve(
        a: ArchiveSection,
        h: HarvestSection,
        env_token: Option<SecretSource>,
        expand: impl Fn(&str) -> PathBuf,
    ) -> Result<ArchiveConfig, ConfigError> {
        let mut s = ArchiveSettings::default();
        if let Some(r) = a.remote {
            if !valid_remote(&r) {
                return Err(ConfigError::new(
                    "archive.remote",
                    format!("{:?} is not an https://, ssh:// or user@host:path URL", redact(&r)),
                ));
            }
            s.remote = Some(r);
        }
        if let Some(b) = a.branch {
            if !valid_branch(&b) {
                return Err(ConfigError::new("archive.branch", format!("{b:?} is not a valid branch name")));
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
                    return Err(ConfigError::new(key, format!("{v:?} is empty or has <, > or a newline")));
                }
                *slot = v;
            }
        }
        s.token_file = a.token_file.map(|f| expand(&f));
        s.token = env_token.or_else(|| s.token_file.as_ref().map(|f| SecretSource::file(f, "archive.token_file")));
        s.ssh_key = a.ssh_key.map(|k| expand(&k));
        if let Some(m) = a.max_file_size {
            if m.0 == 0 || m.0 > 100 << 20 {
                return Err(ConfigError::new(
                    "archive.max_file_size",
                    format!("{} is not within 1 byte ..= 100 MiB (GitHub's limit)", m.0),
                ));
            }
            s.max_file_bytes = m.0;
        }
        if let Some(n) = a.push_attempts {
            if !(1..=20).contains(&n) {
                return Err(ConfigError::new("archive.push_attempts", format!("{n} is out of range 1..=20")));
            }
            s.push_attempts = n;
        }
        let retry = config::duration("archive.retry", a.retry, Duration::from_secs(60))?;
        if retry.is_zero() {
            return Err(ConfigError::new("archive.retry", "must be at least 1s"));
        }
        let top = h.top_per_role.unwrap_or(10);
        if !(1..=1000).contains(&top) {
            return Err(ConfigError::new("harvest.top_per_role", format!("{top} is out of range 1..=1000")));
        }
        let harvest = HarvestSettings { top_per_role: top, max_file_bytes: s.max_file_bytes };
        Ok(ArchiveConfig {
            enabled: a.enabled.unwrap_or(true),
            schedule: Schedule::parse_or("archive.schedule", a.schedule, ARCHIVE_SCHEDULE)?,
            retry,
            settings: s,
            harvest_schedule: Schedule::parse_or("harvest.schedule", h.schedule, HARVEST_SCHEDULE)?,
            harvest,
        })
    }
}

/// `https://`, `http://`, `ssh://`, `file://` with something after it, or scp-like
/// `user@host:path`.
fn valid_remote(r: &str) -> bool {
    match r.split_once("://") {
        Some((scheme, rest)) => ["https", "http", "ssh", "file"].contains(&scheme) && !rest.is_empty(),
        None => {
            r.split_once(':').is_some_and(|(host, path)| host.contains('@') && !host.contains('/') && !path.is_empty())
        }
    }
}

/// A branch name git accepts: `refs/heads/NAME` is a valid reference name by
/// libgit2's own rules (no component starting with `.` or ending in `.lock`, …),
/// and not one git reserves (`HEAD`) or reads as an option (`-x`).
fn valid_branch(name: &str) -> bool {
    !name.starts_with('-')
        && name != "HEAD"
        && !name.chars().any(char::is_control)
        && git2::Reference::is_valid_name(&format!("refs/heads/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(a: ArchiveSection) -> Result<ArchiveConfig, ConfigError> {
        ArchiveConfig::resolve(a, HarvestSection::default(), None, |p: &str| PathBuf::from(p))
    }

    #[test]
    fn the_default_commits_locally_every_six_hours() {
        let c = resolve(ArchiveSection::default()).unwrap();
        assert!(c.enabled && c.settings.remote.is_none());
        assert_eq!((c.schedule.text.as_str(), c.settings.branch.as_str()), (ARCHIVE_SCHEDULE, "memory"));
        assert_eq!(c.harvest.top_per_role, 10);
    }

    #[test]
    fn the_environment_token_beats_the_token_file() {
        let a = || ArchiveSection { token_file: Some("/t".into()), ..Default::default() };
        let env = SecretSource::env("CLAWBOARD_GIT_TOKEN", "the archive's token");
        let c = ArchiveConfig::resolve(a(), HarvestSection::default(), Some(env.clone()), |p: &str| PathBuf::from(p))
            .unwrap();
        assert_eq!(c.settings.token, Some(env));
        // Denied to sandboxed roles even so.
        assert_eq!(c.settings.secret_files().collect::<Vec<_>>(), [std::path::Path::new("/t")]);
        let file = resolve(a()).unwrap().settings.token;
        assert_eq!(file, Some(SecretSource::file("/t", "archive.token_file")));
    }

    #[test]
    fn remotes_and_branches() {
        for ok in ["https://h/r.git", "ssh://git@h/r", "git@github.com:o/r.git", "file:///srv/r"] {
            assert!(valid_remote(ok), "{ok}");
        }
        for bad in ["github.com/o/r", "ftp://h/r", "https://", "h:r"] {
            assert!(!valid_remote(bad), "{bad}");
        }
        assert!(valid_branch("memory/node-1"));
        for bad in
            ["", "-x", "a..b", "a.lock", "a b", "a//b", "x/", "a/.hidden", "x.lock/y", "HEAD", "a@{1}", "a~1", "a\\nb"]
        {
            assert!(!valid_branch(bad), "{bad}");
        }
    }
}
