//! `clawboard write [--token T] PATH < FILE`: how a role process writes a file. The
//! daemon maps the token to the role instance, checks the ACL, validates known file
//! kinds, and writes through its store.

use std::io::{Read, Write};

use anyhow::Context;
use clap::Args;

use crate::cli::{BadInput, EXIT_OK};
use crate::config::Settings;

/// Write a file as a running role instance (standard input to PATH, under the ACL)
#[derive(Debug, Args)]
#[command(after_help = "Roles get their token in CLAWBOARD_TOKEN, and the root in CLAWBOARD_ROOT.
The token works only while the instance runs. Exit codes: 0 written, 1 no daemon,
2 refused (token, ACL, path) or invalid content.

Examples:
  echo '{\"note\":\"draft\"}' | clawboard write tasks/$CLAWBOARD_TASK_ID/notes.json
  clawboard write --token \"$CLAWBOARD_TOKEN\" tasks/t1/report.md < report.md")]
pub struct WriteArgs {
    /// The instance token
    #[arg(long, env = "CLAWBOARD_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The path to write, relative to the blackboard root
    pub path: String,
}

pub fn run(a: WriteArgs, s: &Settings) -> anyhow::Result<u8> {
    let mut body = Vec::new();
    std::io::stdin()
        .take(s.max_file_bytes.saturating_add(1))
        .read_to_end(&mut body)
        .context("reading standard input")?;
    if body.len() as u64 > s.max_file_bytes {
        let limit = clawboard_core::validate::human_bytes(s.max_file_bytes);
        return Err(BadInput(format!("{}: over the {limit} limit (limits.max_file_size)", a.path)).into());
    }
    let (status, status_line, json) = request(
        s,
        &format!("/v1/write?path={}", crate::output::percent_encode(&a.path)),
        &a.token,
        "application/octet-stream",
        &body,
    )?;
    if status == 200 {
        if s.json {
            crate::output::json(&json)?;
        } else {
            outln!("wrote {}", a.path)?;
        }
        return Ok(EXIT_OK);
    }
    Err(refusal(&status_line, &json))
}

/// The daemon's refusal as an error (exit code 2), with its reason and rule.
fn refusal(status_line: &str, json: &serde_json::Value) -> anyhow::Error {
    let msg = json["error"].as_str().map_or_else(|| format!("the daemon answered {status_line}"), str::to_owned);
    let rule = json["rule"].as_str().map(|r| format!(" (rule: {r})")).unwrap_or_default();
    BadInput(format!("refused: {msg}{rule}")).into()
}

/// `POST path` with a role's token on the daemon's socket: (status, status line, JSON body).
fn request(
    s: &Settings,
    path: &str,
    token: &str,
    content_type: &str,
    body: &[u8],
) -> anyhow::Result<(u16, String, serde_json::Value)> {
    let socket = crate::local::socket_path(&s.root);
    let conn = std::os::unix::net::UnixStream::connect(&socket).with_context(|| {
        format!("no daemon answers on {}: role requests go through the running daemon", socket.display())
    })?;
    exchange(conn, path, token, content_type, body)
}

/// [`request`] if a daemon answers on the socket; `None` if none does.
pub(crate) fn request_if_running(
    s: &Settings,
    path: &str,
    token: &str,
    body: &[u8],
) -> anyhow::Result<Option<(u16, String, serde_json::Value)>> {
    match std::os::unix::net::UnixStream::connect(crate::local::socket_path(&s.root)) {
        Ok(conn) => exchange(conn, path, token, "application/json", body).map(Some),
        Err(_) => Ok(None),
    }
}

fn exchange(
    mut conn: std::os::unix::net::UnixStream,
    path: &str,
    token: &str,
    content_type: &str,
    body: &[u8],
) -> anyhow::Result<(u16, String, serde_json::Value)> {
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30))).context("setting a timeout")?;
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: clawboard\r\nAuthorization: Bearer {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        token.trim(),
        body.len()
    );
    conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body)).context("sending to the daemon")?;
    let mut resp = Vec::new();
    conn.read_to_end(&mut resp).context("reading the daemon's answer")?;
    let text = String::from_utf8_lossy(&resp);
    let (status_line, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    let status: u16 = status_line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let json: serde_json::Value =
        rest.split_once("\r\n\r\n").and_then(|(_, b)| serde_json::from_str(b).ok()).unwrap_or_default();
    Ok((status, status_line.to_owned(), json))
}

/// A JSON request to the daemon as a role (`POST path`, JSON body): the answer, or
/// the daemon's refusal (exit code 2).
pub fn post(s: &Settings, path: &str, token: &str, body: &[u8]) -> anyhow::Result<serde_json::Value> {
    let (status, status_line, json) = request(s, path, token, "application/json", body)?;
    if status == 200 { Ok(json) } else { Err(refusal(&status_line, &json)) }
}
