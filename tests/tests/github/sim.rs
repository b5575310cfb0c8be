//! The GitHub simulator (scripts/github-sim) as the GitHub tests use it: plain
//! HTTP/1.1 requests to its API and its `/_sim/` controls, and a repository of
//! each test's own.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{Value, json};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: the GitHub tests need the GitHub simulator. Run them through scripts/test, \
             or start it with `eval \"$(scripts/github-sim start)\"` first (scripts/github-sim install once)"
        )
    })
}

/// The simulator's API root (`http://127.0.0.1:PORT`) and its one valid token.
pub fn api() -> String {
    env("CLAWBOARD_TEST_GITHUB_API")
}

/// The user the simulator acts as (the token's).
pub fn login() -> String {
    env("CLAWBOARD_TEST_GITHUB_LOGIN")
}

pub fn token() -> String {
    env("CLAWBOARD_TEST_GITHUB_TOKEN")
}

/// One plain HTTP/1.1 request to the simulator: (status, body as JSON or Null).
pub fn http(method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    http_with(method, path, body, "")
}

fn http_with(method: &str, path: &str, body: Option<Value>, headers: &str) -> (u16, Value) {
    let api = api();
    let host = api.strip_prefix("http://").expect("CLAWBOARD_TEST_GITHUB_API is http://HOST:PORT");
    let mut s = std::net::TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let chunked = head.lines().any(|l| l.to_lowercase().starts_with("transfer-encoding: chunked"));
    let body = if chunked { dechunk(rest) } else { rest.to_owned() };
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// A request to the simulated GitHub API itself, with the valid token.
pub fn api_request(method: &str, path: &str, body: Value) -> (u16, Value) {
    http_with(method, path, Some(body), &format!("Authorization: Bearer {}\r\n", token()))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A repository of this test's own, with one issue holding `comments`.
pub struct Repo {
    pub owner: String,
    pub name: String,
}

impl Repo {
    pub fn new(test: &str, comments: &[String]) -> Repo {
        Repo::labeled(test, &[], comments)
    }

    /// Issue 1 carries `labels`.
    pub fn labeled(test: &str, labels: &[&str], comments: &[String]) -> Repo {
        let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let r = Repo { owner: format!("o{}-{}", std::process::id(), n % 1_000_000_000_000), name: test.into() };
        let seed = json!({"title": test, "labels": labels, "comments": comments});
        let (status, issue) = http("POST", &format!("/_sim/repos/{}/{}/issues", r.owner, r.name), Some(seed));
        assert_eq!((status, issue["number"].as_u64()), (201, Some(1)), "{issue}");
        r
    }

    /// Adds a comment to issue `number` through the API, as someone else would.
    pub fn comment(&self, number: u64, body: &str) {
        let path = format!("/repos/{}/{}/issues/{number}/comments", self.owner, self.name);
        let (status, c) = api_request("POST", &path, json!({ "body": body }));
        assert_eq!(status, 201, "{c}");
    }

    pub fn full(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The comments of issue 1, oldest first.
    pub fn comments(&self) -> Vec<Value> {
        let (_, v) = http("GET", &format!("/_sim/repos/{}/{}", self.owner, self.name), None);
        v["issues"][0]["comment_list"].as_array().unwrap().clone()
    }

    /// The API requests about this repository after `since` (a seq).
    pub fn requests(&self, since: u64) -> Vec<Value> {
        let (_, v) = http("GET", &format!("/_sim/requests?repo={}&since={since}", self.full()), None);
        v.as_array().unwrap().clone()
    }

    pub fn last_seq(&self) -> u64 {
        self.requests(0).last().map_or(0, |r| r["seq"].as_u64().unwrap())
    }

    /// The bridge's config; the simulator's user (whose token the tests use, and who
    /// writes the seeded comments) is a trusted author.
    pub fn config(&self, extra: &str) -> String {
        format!(
            "[github]\napi = \"{}\"\nrepository = \"{}\"\nissues = [{{ numbers = [1] }}]\ntrusted_authors = [\"{}\"]\n{extra}",
            api(),
            self.full(),
            login()
        )
    }

    /// Issue 1, its comments written by `user` (`None`: the repository's owner).
    pub fn by(test: &str, user: Option<&str>, comments: &[String]) -> Repo {
        let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let r = Repo { owner: format!("o{}-{}", std::process::id(), n % 1_000_000_000_000), name: test.into() };
        let seed = json!({"title": test, "comments": comments, "user": user.unwrap_or(&r.owner)});
        let (status, issue) = http("POST", &format!("/_sim/repos/{}/{}/issues", r.owner, r.name), Some(seed));
        assert_eq!((status, issue["number"].as_u64()), (201, Some(1)), "{issue}");
        r
    }
}
