//! `clawboard web token [--rotate]`: the human token of the review page.

use clap::{Args, Subcommand};

use crate::cli::{BadInput, EXIT_OK};
use crate::config::review::ensure_token_file;
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
    let addr = std::fs::read_to_string(s.root.join(crate::local::WEB_ADDR_FILE))
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
