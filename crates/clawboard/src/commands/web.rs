//! `clawboard web token [--rotate]`: the human token of the review page.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::cli::{BadInput, EXIT_OK};
use crate::config::review::MIN_TOKEN_CHARS;
use crate::config::{Settings, WebToken};

/// The review web page
#[derive(Debug, Subcommand)]
#[command(after_help = "The daemon serves the page when web.listen is set (see config/clawboard.toml).

Examples:
  clawboard web token              # print the token and the URL to open
  clawboard web token --rotate     # a new token, used from the daemon's next start")]
pub enum WebCommand {
    Token(TokenArgs),
}

/// Print the human token (creating it on first use) and the page's URL
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard web token
  clawboard web token --json
  clawboard web token --rotate")]
pub struct TokenArgs {
    /// Replace the token with a new one (restart the daemon to use it)
    #[arg(long)]
    pub rotate: bool,
}

/// Reads the token in `path`, creating it (256 random bits as hex, mode 0600) when it
/// is missing or `rotate` is set. Returns the token and whether it is new.
pub fn ensure_token_file(path: &Path, rotate: bool) -> anyhow::Result<(String, bool)> {
    if !rotate {
        match std::fs::read_to_string(path) {
            Ok(t) => {
                let t = t.trim().to_owned();
                if t.len() < MIN_TOKEN_CHARS {
                    return Err(BadInput(format!(
                        "{}: the web token is {} characters, fewer than {MIN_TOKEN_CHARS}; run `clawboard web token --rotate`",
                        path.display(),
                        t.len()
                    ))
                    .into());
                }
                let mode = std::fs::metadata(path).map(|m| m.permissions().mode() & 0o077).unwrap_or(0);
                if mode != 0 {
                    tracing::warn!("{}: readable by others (mode {:o}); chmod 600 it", path.display(), mode);
                }
                return Ok((t, false));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading the web token {}", path.display())),
        }
    }
    let token = clawboard_core::id::random_hex(32);
    let dir = path.parent().unwrap_or(Path::new("."));
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

pub fn run(c: WebCommand, s: &Settings) -> anyhow::Result<u8> {
    let WebCommand::Token(a) = c;
    let (token, created) = match &s.review.web.token {
        WebToken::Inline(t) => {
            if a.rotate {
                return Err(BadInput("web.token is set in the config; change it there to rotate it".into()).into());
            }
            (t.clone(), false)
        }
        WebToken::File(p) => {
            crate::commands::open_store(s)?;
            ensure_token_file(p, a.rotate)?
        }
    };
    let addr = std::fs::read_to_string(s.root.join(crate::daemon::WEB_ADDR_FILE))
        .ok()
        .map(|a| a.trim().to_owned())
        .or_else(|| s.review.web.listen.map(|a| a.to_string()));
    if s.json {
        crate::output::json(&serde_json::json!({
            "token": token,
            "created": created,
            "url": addr.as_ref().map(|a| format!("http://{a}/?token={token}")),
        }))?;
        return Ok(EXIT_OK);
    }
    outln!("{token}")?;
    match addr {
        Some(a) => eprintln!("Open http://{a}/?token={token}"),
        None => eprintln!("The page is off: set web.listen = \"127.0.0.1:8470\" in the config and restart the daemon."),
    }
    if a.rotate {
        eprintln!("Restart the daemon to use the new token (the old one works until then).");
    }
    Ok(EXIT_OK)
}
