//! The HTTP details of GitHub's answers: error messages, how long a rate limit
//! asks to wait, and the next page of a list.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{self, HeaderMap};
use reqwest::{Method, Url};

use super::{Answer, SECONDARY_WAIT};
use crate::error::{Error, Result};

pub(super) fn method_name(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "request",
    }
}

/// GitHub's `message` in an error body.
pub(super) fn message_of(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut m = v.get("message")?.as_str()?.to_owned();
    if let Some(errors) = v.get("errors").filter(|e| !e.is_null()) {
        m.push_str(&format!(" {errors}"));
    }
    Some(m)
}

pub(super) fn status_error(method: &'static str, url: &str, a: &Answer) -> Error {
    let message = message_of(&a.text).unwrap_or_else(|| a.text.chars().take(200).collect());
    Error::Status { method, url: url.to_owned(), status: a.status.as_u16(), message }
}

/// How long a 403/429 asks to wait, and why; `None` when it is no rate limit.
pub(super) fn rate_limit_wait(headers: &HeaderMap, text: &str, now: SystemTime) -> Option<(Duration, String)> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(secs) = get("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some((Duration::from_secs(secs), format!("Retry-After: {secs}")));
    }
    if get("x-ratelimit-remaining") == Some("0")
        && let Some(reset) = get("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok())
    {
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let wait = Duration::from_secs(reset.saturating_sub(now).max(1));
        return Some((wait, format!("x-ratelimit-remaining: 0 until x-ratelimit-reset {reset}")));
    }
    let message = message_of(text).unwrap_or_default().to_lowercase();
    if message.contains("secondary rate limit") {
        return Some((SECONDARY_WAIT, "a secondary rate limit".into()));
    }
    None
}

/// The `rel="next"` URL of a `Link` header.
pub(super) fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        is_next.then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

/// `url` with its `page` one higher (2 without one).
pub(super) fn next_page(url: &str) -> Result<String> {
    let mut u = Url::parse(url).map_err(|e| Error::BadResponse { url: url.to_owned(), why: e.to_string() })?;
    let pairs: Vec<(String, String)> = u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let page = pairs.iter().find(|(k, _)| k == "page").and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(1);
    let mut q = u.query_pairs_mut();
    q.clear();
    for (k, v) in pairs.iter().filter(|(k, _)| k != "page") {
        q.append_pair(k, v);
    }
    q.append_pair("page", &(page + 1).to_string());
    drop(q);
    Ok(u.to_string())
}
