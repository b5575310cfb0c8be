//! What the review tests share (tests/tests/review.rs and review_notify.rs): a
//! config whose role raises an escalation, the daemon's held count, and plain
//! HTTP over TCP (the review page) and over the daemon's Unix socket.

use std::io::{Read, Write};

use crate::{Tree, sh_config, wait_until};

pub fn task_json(id: &str, description: &str) -> String {
    format!(r#"{{"taskId":"{id}","type":"coding","description":"{description}"}}"#)
}

/// A PM picking `esc` for "use-esc" tasks, whose run raises an escalation of `level`.
pub fn esc_config(level: &str, extra: &str) -> String {
    sh_config(&format!(
        r#"
[roles.esc]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"summary\":\"asks\",\"escalations\":[{{\"level\":\"{level}\",\"issue\":\"spend 500 USD?\",\"suggestedAction\":\"approve if within budget\",\"requiresHumanApproval\":true}}]}}'"]
retry_backoff = "10ms"
{extra}"#
    ))
}

pub fn held(t: &Tree, n: u64) -> bool {
    t.daemon_status().is_some_and(|s| s["queue"]["held"] == n)
}

/// An HTTP response: its status, head and body.
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`).
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Response { status, head: head.to_owned(), body: body.to_owned() }
}

pub fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A GET over the daemon's Unix socket.
pub fn unix_get(t: &Tree, path: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(t.root.join(".clawboard/api.sock")).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: clawboard\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

pub fn web_addr(t: &Tree) -> String {
    let file = t.root.join(".clawboard/web.addr");
    wait_until(10, "the web listener", || file.exists());
    std::fs::read_to_string(file).unwrap().trim().to_owned()
}
