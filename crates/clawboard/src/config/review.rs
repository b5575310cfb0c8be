//! `[reports]`, `[web]` and `[notify]`: what the human reviewer gets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clawboard_core::formats::Level;
use clawboard_sync::Schedule;
use serde::Deserialize;

use crate::cli::BadInput;

/// `[reports]`: when the daemon writes the evolution reports.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportsConfig {
    pub enabled: Option<bool>,
    pub daily: Option<String>,
    pub weekly: Option<String>,
    pub monthly: Option<String>,
}

/// `[web]`: the review page; off unless `listen` is set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    pub listen: Option<String>,
    pub token_file: Option<String>,
    pub token: Option<String>,
    pub allow_remote: Option<bool>,
}

/// `[notify]`: hooks run when an escalation is raised.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    pub levels: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    pub webhook: Option<String>,
    pub retries: Option<u32>,
    pub retry_delay: Option<String>,
    pub timeout: Option<String>,
    /// Variables of the daemon's environment the command gets beyond the
    /// inherited few (as `roles.ID.pass_env`).
    #[serde(default)]
    pub pass_env: Vec<String>,
}

pub const REPORT_DAILY: &str = "10 0 * * *";
pub const REPORT_WEEKLY: &str = "20 0 * * 1";
pub const REPORT_MONTHLY: &str = "30 0 1 * *";
pub const WEB_TOKEN_FILE: &str = ".clawboard/web-token";

#[derive(Debug, Clone)]
pub struct ReportsResolved {
    pub enabled: bool,
    pub daily: Schedule,
    pub weekly: Schedule,
    pub monthly: Schedule,
}

/// Where the human token comes from.
#[derive(Clone)]
pub enum WebToken {
    /// `web.token` in the config.
    Inline(String),
    /// A file (default `{root}/.clawboard/web-token`), created by `clawboard web token`.
    File(PathBuf),
}

impl std::fmt::Debug for WebToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WebToken::Inline(_) => f.write_str("Inline(<redacted>)"),
            WebToken::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WebResolved {
    /// None: no page (the default).
    pub listen: Option<SocketAddr>,
    pub token: WebToken,
}

#[derive(Debug, Clone)]
pub struct NotifyResolved {
    pub levels: Vec<Level>,
    pub command: Option<Vec<String>>,
    pub webhook: Option<String>,
    /// Attempts after the first one.
    pub retries: u32,
    pub retry_delay: Duration,
    pub timeout: Duration,
    pub pass_env: Vec<String>,
}

impl NotifyResolved {
    pub fn is_configured(&self) -> bool {
        self.command.is_some() || self.webhook.is_some()
    }
}

/// The three sections, resolved.
#[derive(Debug, Clone)]
pub struct ReviewResolved {
    pub reports: ReportsResolved,
    pub web: WebResolved,
    pub notify: NotifyResolved,
}

/// The shortest token a human may configure: 128 bits as hex.
pub const MIN_TOKEN_CHARS: usize = 32;

pub fn resolve(
    r: ReportsConfig,
    w: WebConfig,
    n: NotifyConfig,
    root: &std::path::Path,
    expand: impl Fn(&str) -> PathBuf,
    origin: &str,
) -> Result<ReviewResolved, BadInput> {
    let bad = |key: &str, msg: String| BadInput(format!("{origin}: key {key}: {msg}"));
    let duration = |key: &str, v: Option<String>, default: Duration| match v {
        None => Ok(default),
        Some(t) => match clawboard_core::duration::parse_duration(&t) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(bad(key, "must be more than 0s".into())),
            Err(e) => Err(bad(key, e)),
        },
    };
    let schedule = |key: &str, v: Option<String>, default: &str| {
        let text = v.unwrap_or_else(|| default.to_owned());
        Schedule::parse(key, &text).map_err(|e| bad(key, e.reason))
    };
    let reports = ReportsResolved {
        enabled: r.enabled.unwrap_or(true),
        daily: schedule("reports.daily", r.daily, REPORT_DAILY)?,
        weekly: schedule("reports.weekly", r.weekly, REPORT_WEEKLY)?,
        monthly: schedule("reports.monthly", r.monthly, REPORT_MONTHLY)?,
    };

    let listen = match w.listen {
        None => None,
        Some(text) => {
            let addr: SocketAddr = text.parse().map_err(|_| {
                bad("web.listen", format!("{text:?} is not an address:port such as \"127.0.0.1:8470\""))
            })?;
            if !addr.ip().is_loopback() && !w.allow_remote.unwrap_or(false) {
                return Err(bad(
                    "web.listen",
                    format!(
                        "{addr} is not a loopback address; the page serves on 127.0.0.1 or ::1 unless web.allow_remote = true (put TLS in front of it)"
                    ),
                ));
            }
            Some(addr)
        }
    };
    let token = match (w.token, w.token_file) {
        (Some(_), Some(_)) => return Err(bad("web.token", "set web.token or web.token_file, not both".into())),
        (Some(t), None) => {
            if t.trim().len() < MIN_TOKEN_CHARS {
                return Err(bad(
                    "web.token",
                    format!(
                        "is {} characters; use at least {MIN_TOKEN_CHARS} (`clawboard web token` makes one)",
                        t.trim().len()
                    ),
                ));
            }
            if !t.trim().chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(bad("web.token", "may hold only letters, digits, - and _".into()));
            }
            WebToken::Inline(t.trim().to_owned())
        }
        (None, Some(f)) => WebToken::File(expand(&f)),
        (None, None) => WebToken::File(root.join(WEB_TOKEN_FILE)),
    };

    let levels = match n.levels {
        None => vec![Level::Critical],
        Some(ls) => {
            ls.iter().map(|l| l.parse::<Level>().map_err(|e| bad("notify.levels", e))).collect::<Result<Vec<_>, _>>()?
        }
    };
    if let Some(c) = &n.command
        && c.first().is_none_or(|p| p.trim().is_empty())
    {
        return Err(bad(
            "notify.command",
            "is empty; give the program and its arguments, e.g. [\"/usr/local/bin/notify\"]".into(),
        ));
    }
    if let Some(u) = &n.webhook
        && !(u.starts_with("https://") || u.starts_with("http://"))
    {
        return Err(bad("notify.webhook", "is not an http:// or https:// URL".into()));
    }
    let retries = n.retries.unwrap_or(3);
    if retries > 20 {
        return Err(bad("notify.retries", format!("{retries} is out of range 0..=20")));
    }
    for (i, name) in n.pass_env.iter().enumerate() {
        clawboard_roles::runner::check_var_name(name).map_err(|why| bad(&format!("notify.pass_env[{i}]"), why))?;
    }
    if !n.pass_env.is_empty() && n.command.is_none() {
        return Err(bad("notify.pass_env", "only notify.command runs as a process with an environment".into()));
    }
    let notify = NotifyResolved {
        levels,
        command: n.command,
        webhook: n.webhook,
        retries,
        retry_delay: duration("notify.retry_delay", n.retry_delay, Duration::from_secs(5))?,
        timeout: duration("notify.timeout", n.timeout, Duration::from_secs(10))?,
        pass_env: n.pass_env,
    };
    Ok(ReviewResolved { reports, web: WebResolved { listen, token }, notify })
}

/// Reads the token in `path`, creating it (256 random bits as hex, mode 0600) when it
/// is missing or `rotate` is set. Returns the token and whether it is new.
pub fn ensure_token_file(path: &std::path::Path, rotate: bool) -> anyhow::Result<(String, bool)> {
    if !rotate && path.symlink_metadata().is_ok() {
        // Held to every secret file's rules: a regular file, mode 600 or stricter.
        let t = clawboard_core::secret::read_file(path, "web.token_file")
            .map_err(|e| BadInput(e.to_string()))?
            .trim()
            .to_owned();
        if t.len() < MIN_TOKEN_CHARS {
            return Err(BadInput(format!(
                "{}: the web token is {} characters, fewer than {MIN_TOKEN_CHARS}; run `clawboard web token --rotate`",
                path.display(),
                t.len()
            ))
            .into());
        }
        return Ok((t, false));
    }
    let token = clawboard_core::id::random_hex(32);
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("web-token");
    let bytes = format!("{token}\n");
    let placed = if rotate {
        clawboard_core::store::replace_atomic_with_mode(dir, name, bytes.as_bytes(), 0o600).map(|()| true)
    } else {
        // A new file only: if another process (the daemon, another `web token`) made
        // one first, theirs is the token.
        clawboard_core::store::create_atomic(dir, name, bytes.as_bytes(), 0o600)
    };
    if placed.with_context(|| format!("writing the web token {}", path.display()))? {
        return Ok((token, true));
    }
    ensure_token_file(path, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_web_token_file_is_made_private_and_refused_when_others_may_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".clawboard/web-token");
        let (token, made) = ensure_token_file(&path, false).unwrap();
        assert!(made && token.len() >= MIN_TOKEN_CHARS);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(ensure_token_file(&path, false).unwrap(), (token.clone(), false));

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = ensure_token_file(&path, false).unwrap_err().to_string();
        assert!(e.contains("web.token_file") && e.contains("chmod 600"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token, "the file is left as it was");

        // Rotating replaces it with a private file.
        let (rotated, made) = ensure_token_file(&path, true).unwrap();
        assert!(made && rotated != token);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
