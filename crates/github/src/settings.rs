//! `[github]`: the GitHub bridge as written in the config file ([`GithubSection`])
//! and resolved into [`GithubSettings`], with errors naming the key
//! (`github.repository: "x" is not OWNER/NAME`). The binary hands over the section
//! as read and a way to look up an environment variable (the token's).
//!
//! The token: `token_file` (a file of mode 600 or stricter, read at every run so it
//! can be rotated) or the variable `token_env` names (`GITHUB_TOKEN` by default),
//! not both: giving `token_env` and `token_file` together is refused, so which one
//! is used is never a guess. It is held in a [`Secret`], whose `Debug` prints `***`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clawboard_core::config::{self, ConfigError, Schedule};
use clawboard_core::secret::{Secret, SecretError, SecretSource};
use serde::Deserialize;

use crate::error::{Error, Result};

/// `[github]` as written (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubSection {
    pub enabled: Option<bool>,
    pub api: Option<String>,
    pub repository: Option<String>,
    pub token_env: Option<String>,
    pub token_file: Option<String>,
    pub schedule: Option<String>,
    pub max_wait: Option<String>,
    #[serde(default)]
    pub issues: Vec<IssuesSection>,
    /// Logins whose entry comments are taken beside the repository's owner,
    /// members and collaborators (e.g. the bot the token belongs to).
    #[serde(default)]
    pub trusted_authors: Vec<String>,
}

/// One `[[github.issues]]` (or `issues = [{ … }]`): a lane's issues, by number, by
/// label (its open issues), or both.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuesSection {
    pub lane: Option<String>,
    #[serde(default)]
    pub numbers: Vec<u64>,
    pub label: Option<String>,
}

pub const DEFAULT_API: &str = "https://api.github.com";
pub const DEFAULT_TOKEN_ENV: &str = "GITHUB_TOKEN";
pub const DEFAULT_SCHEDULE: &str = "*/5 * * * *";
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

/// `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    pub owner: String,
    pub name: String,
}

impl std::fmt::Display for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// One group of issues, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueSet {
    /// The lane whose entries they carry (shown in the report), if named.
    pub lane: Option<String>,
    pub numbers: Vec<u64>,
    /// Open issues with this label are bridged too.
    pub label: Option<String>,
}

/// `[github]`, resolved.
#[derive(Debug, Clone)]
pub struct GithubSettings {
    /// Whether the daemon runs the bridge on `schedule` (`clawboard entry github
    /// sync` runs once whatever this says).
    pub enabled: bool,
    /// The REST API root without a trailing `/` (`https://api.github.com`, or
    /// `https://HOST/api/v3` for GitHub Enterprise).
    pub api: String,
    /// Required when enabled.
    pub repository: Option<Repository>,
    /// `github.token_file`, else the variable `github.token_env` names; read
    /// at the start of every run.
    pub token: SecretSource,
    pub schedule: Schedule,
    pub issues: Vec<IssueSet>,
    /// The longest a request waits out rate limits, in all, before it fails.
    pub max_wait: Duration,
    /// `github.trusted_authors`.
    pub trusted_authors: Vec<String>,
}

/// The standings in a repository whose entry comments are taken: they can push
/// to it, which is what an entry asks a role to act on.
pub const TRUSTED_ASSOCIATIONS: [&str; 3] = ["OWNER", "MEMBER", "COLLABORATOR"];

impl GithubSettings {
    /// The token now; an error says where it was looked for.
    pub fn token(&self) -> Result<Secret> {
        read_token(&self.token)
    }

    /// The token's file, if it is kept in one: denied to sandboxed roles.
    pub fn secret_files(&self) -> impl Iterator<Item = &Path> {
        self.token.path().into_iter()
    }

    /// Whether an entry comment by `login`, standing `association` in the
    /// repository, may create or change an entry; the error says why not.
    pub fn trusts(&self, login: &str, association: Option<&str>) -> Result<(), String> {
        if association.is_some_and(|a| TRUSTED_ASSOCIATIONS.contains(&a))
            || self.trusted_authors.iter().any(|t| t.eq_ignore_ascii_case(login))
        {
            return Ok(());
        }
        Err(format!(
            "written by {login} ({}), who is neither the repository's owner, a member or a collaborator, nor in github.trusted_authors",
            association.unwrap_or("no standing given")
        ))
    }
}

impl GithubSettings {
    /// `[github]` checked; `expand` turns a path as written (`~/…`) into a path,
    /// `has_lane` says whether a `[lanes.NAME]` exists. Errors name the key.
    pub fn resolve(
        s: GithubSection,
        expand: impl Fn(&str) -> PathBuf,
        has_lane: impl Fn(&str) -> bool,
    ) -> Result<GithubSettings, ConfigError> {
        let bad = |key: &str, reason: String| ConfigError::new(format!("github.{key}"), reason);
        let enabled = s.enabled.unwrap_or(false);
        let api = s.api.unwrap_or_else(|| DEFAULT_API.to_owned());
        let api = api.trim_end_matches('/').to_owned();
        if let Some(rest) = api.strip_prefix("http://") {
            // The token goes in every request: in the clear only to this machine.
            let host = rest.split(['/', ':']).next().unwrap_or_default();
            let host = if rest.starts_with('[') { rest.split(']').next().map_or("", |h| &h[1..]) } else { host };
            if !matches!(host, "127.0.0.1" | "localhost" | "::1") {
                return Err(bad(
                    "api",
                    format!(
                        "{api:?}: plain http sends the token in the clear; use https:// (plain http only to 127.0.0.1, localhost or [::1])"
                    ),
                ));
            }
        }
        let host = api.strip_prefix("https://").or_else(|| api.strip_prefix("http://"));
        if host.is_none_or(|h| h.is_empty() || h.starts_with('/') || h.contains(['?', '#', ' ', '@'])) {
            return Err(bad(
                "api",
                format!("{api:?} is not an http:// or https:// URL (https://api.github.com, or https://HOST/api/v3)"),
            ));
        }
        let repository = match s.repository {
            Some(r) => Some(repository(&r).ok_or_else(|| bad("repository", format!("{r:?} is not OWNER/NAME")))?),
            None if enabled => return Err(bad("repository", "is required when github.enabled is true".into())),
            None => None,
        };
        let token = match (s.token_env, s.token_file) {
            (Some(_), Some(_)) => {
                return Err(bad("token_file", "set either github.token_env or github.token_file, not both".into()));
            }
            (_, Some(f)) if f.trim().is_empty() => return Err(bad("token_file", "is empty".into())),
            (_, Some(f)) => SecretSource::file(expand(&f), "github.token_file"),
            (var, None) => {
                let var = var.unwrap_or_else(|| DEFAULT_TOKEN_ENV.to_owned());
                if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad("token_env", format!("{var:?} is not an environment variable name")));
                }
                SecretSource::env(var, "github.token_env")
            }
        };
        let schedule = Schedule::parse_or("github.schedule", s.schedule, DEFAULT_SCHEDULE)?;
        let max_wait = config::duration("github.max_wait", s.max_wait, DEFAULT_MAX_WAIT)?;
        let mut issues = Vec::new();
        for (i, g) in s.issues.into_iter().enumerate() {
            let key = |k: &str| format!("issues[{i}]{k}");
            if let Some(lane) = &g.lane
                && !has_lane(lane)
            {
                return Err(bad(&key(".lane"), format!("{lane:?} is not configured under [lanes]")));
            }
            if g.numbers.is_empty() && g.label.is_none() {
                return Err(bad(&key(""), "give numbers, a label, or both".into()));
            }
            if g.numbers.contains(&0) {
                return Err(bad(&key(".numbers"), "0 is not an issue number".into()));
            }
            if let Some(l) = &g.label
                && (l.trim().is_empty() || l.contains(',') || l.chars().any(char::is_control))
            {
                return Err(bad(&key(".label"), format!("{l:?} is not a label name (no commas)")));
            }
            issues.push(IssueSet { lane: g.lane, numbers: g.numbers, label: g.label });
        }
        if enabled && issues.is_empty() {
            return Err(bad("issues", "is empty: name the issues to bridge (numbers or a label)".into()));
        }
        for (i, login) in s.trusted_authors.iter().enumerate() {
            let ok = !login.is_empty()
                && login.len() <= 39
                && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '[' || c == ']');
            if !ok {
                return Err(bad(&format!("trusted_authors[{i}]"), format!("{login:?} is not a GitHub login")));
            }
        }
        Ok(GithubSettings {
            enabled,
            api,
            repository,
            token,
            schedule,
            issues,
            max_wait,
            trusted_authors: s.trusted_authors,
        })
    }

    /// The repository, or an error naming the key (for a run while it is unset).
    pub fn repository(&self) -> Result<&Repository> {
        self.repository.as_ref().ok_or_else(|| Error::Config("github.repository is not set (OWNER/NAME)".into()))
    }
}

/// The token from `source` now; an error says where it was looked for.
pub(crate) fn read_token(source: &SecretSource) -> Result<Secret> {
    source.read().map_err(|e| match e {
        SecretError::EnvUnset { .. } => {
            Error::NoToken(format!("{e}; set it, or point github.token_file at a file holding the token"))
        }
        e => Error::NoToken(e.to_string()),
    })
}

/// `owner/name` with GitHub's characters, else `None`.
fn repository(text: &str) -> Option<Repository> {
    let (owner, name) = text.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(owner) && ok(name)).then(|| Repository { owner: owner.to_owned(), name: name.to_owned() })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn section(text: &str) -> GithubSection {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct F {
            github: GithubSection,
        }
        toml::from_str::<F>(text).unwrap().github
    }

    fn resolve(text: &str) -> Result<GithubSettings, ConfigError> {
        GithubSettings::resolve(section(text), |p: &str| PathBuf::from(p), |l| l == "doc_update")
    }

    fn err(text: &str) -> String {
        resolve(text).unwrap_err().to_string()
    }

    #[test]
    fn the_default_is_off_against_api_github_com_every_five_minutes() {
        let s = resolve("[github]").unwrap();
        assert!(!s.enabled && s.repository.is_none() && s.issues.is_empty());
        assert_eq!((s.api.as_str(), s.schedule.text.as_str()), (DEFAULT_API, DEFAULT_SCHEDULE));
        assert_eq!(s.max_wait, Duration::from_secs(60));
        assert_eq!(s.token, SecretSource::env("GITHUB_TOKEN", "github.token_env"));
    }

    #[test]
    fn a_full_section_resolves() {
        let s = resolve(
            r#"[github]
enabled = true
api = "https://ghe.example.com/api/v3/"
repository = "octo-org/vpm.mini"
token_env = "MY_TOKEN"
schedule = "*/2 * * * * *"
max_wait = "2m"
issues = [{ lane = "doc_update", numbers = [571, 572], label = "blackboard" }, { label = "other" }]"#,
        )
        .unwrap();
        assert_eq!(s.api, "https://ghe.example.com/api/v3");
        assert_eq!(s.repository.as_ref().unwrap().to_string(), "octo-org/vpm.mini");
        assert_eq!(s.issues[0].numbers, [571, 572]);
        assert_eq!(s.issues[1].label.as_deref(), Some("other"));
        assert_eq!(s.max_wait, Duration::from_secs(120));
        assert_eq!(s.token, SecretSource::env("MY_TOKEN", "github.token_env"));
        let e = s.token().unwrap_err().to_string();
        assert_eq!(
            e,
            "no GitHub token: the environment variable MY_TOKEN (github.token_env) is not set or empty; set it, or point github.token_file at a file holding the token"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        assert_eq!(err("[github]\nrepository = \"x\""), "github.repository: \"x\" is not OWNER/NAME");
        assert!(err("[github]\nrepository = \"a/b/c\"").starts_with("github.repository: "));
        assert!(
            err("[github]\nenabled = true\nissues = [{numbers = [1]}]").starts_with("github.repository: is required")
        );
        assert!(err("[github]\nenabled = true\nrepository = \"o/r\"").starts_with("github.issues: is empty"));
        assert!(err("[github]\napi = \"api.github.com\"").starts_with("github.api: "));
        assert!(
            err("[github]\napi = \"http://ghe.example/api/v3\"").contains("plain http sends the token in the clear")
        );
        assert!(err("[github]\napi = \"http://10.0.0.5:8080\"").contains("use https://"));
        assert!(err("[github]\ntrusted_authors = [\"a b\"]").starts_with("github.trusted_authors[0]: "));
        for local in ["http://127.0.0.1:8080", "http://localhost:9", "http://[::1]:9/api"] {
            assert!(resolve(&format!("[github]\napi = \"{local}\"\nrepository = \"o/r\"")).is_ok(), "{local}");
        }
        assert!(err("[github]\ntoken_env = \"A\"\ntoken_file = \"/t\"").contains("not both"));
        assert!(err("[github]\ntoken_env = \"A-B\"").starts_with("github.token_env: "));
        assert!(err("[github]\nschedule = \"often\"").starts_with("github.schedule: "));
        assert!(err("[github]\nmax_wait = \"soon\"").starts_with("github.max_wait: "));
        assert_eq!(
            err("[github]\nissues = [{lane = \"doc_update\"}]"),
            "github.issues[0]: give numbers, a label, or both"
        );
        assert!(
            err("[github]\nissues = [{lane = \"ghost\", numbers = [1]}]")
                .starts_with("github.issues[0].lane: \"ghost\"")
        );
        assert!(err("[github]\nissues = [{numbers = [0]}]").starts_with("github.issues[0].numbers: "));
        assert!(err("[github]\nissues = [{label = \"a,b\"}]").starts_with("github.issues[0].label: "));
        let unknown = toml::from_str::<toml::Value>("[github]\nrepo = \"o/r\"").unwrap();
        let typed: Result<GithubSection, _> = unknown.get("github").unwrap().clone().try_into();
        assert!(typed.unwrap_err().to_string().contains("unknown field `repo`"));
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let s = resolve("[github]\nrepository = \"o/r\"").unwrap();
        let token = s.token.read_with(|k| (k == "GITHUB_TOKEN").then(|| "ghp_secret".to_owned())).unwrap();
        let shown = format!("{s:?} {:?} {token:?}", s.token);
        assert!(!shown.contains("ghp_secret"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
        assert_eq!(token.expose(), "ghp_secret");
    }

    #[test]
    fn a_token_file_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "ghp_filetoken\n").unwrap();
        let s = resolve(&format!("[github]\ntoken_file = \"{}\"", path.display())).unwrap();
        assert_eq!(s.token, SecretSource::file(&path, "github.token_file"), "the file, not $GITHUB_TOKEN");
        assert_eq!(s.secret_files().collect::<Vec<_>>(), [path.as_path()]);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = s.token().unwrap_err().to_string();
        assert!(e.contains("(github.token_file)") && e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        assert!(!e.contains("ghp_filetoken"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(s.token().unwrap().expose(), "ghp_filetoken");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(s.token().unwrap().expose(), "ghp_filetoken");
    }
}
