//! A small GitHub REST client (reqwest, rustls): list an issue's comments, list the
//! open issues with a label, create and update a comment. The bridge talks to it
//! through the [`Api`] trait, so its decisions can be tested without a server.
//!
//! - Lists follow `Link: rel="next"` (100 a page), each page asked for with
//!   `If-None-Match` and the ETag kept with its body in `.clawboard/github/cache.json`:
//!   a 304 reuses the kept body (and costs no rate limit). An ETag covers one page,
//!   so every page is asked for, each conditionally.
//! - Rate limits: a 403 or 429 with `Retry-After` waits that long and tries again;
//!   with `x-ratelimit-remaining: 0`, until `x-ratelimit-reset`; a secondary-limit
//!   message without either, a minute. A request never waits more than
//!   `github.max_wait` in all; then it fails, saying so.
//! - 401 is one error naming the keys to check. The token is only ever in the
//!   `Authorization` header (marked sensitive), never in an error or a log line.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use clawboard_core::secret::{Secret, SecretSource};

use crate::error::{Error, Result};
use crate::settings::{GithubSettings, Repository, read_token};

mod http;
use http::{message_of, method_name, next_link, next_page, rate_limit_wait, status_error};

/// One issue comment, as GitHub lists it (the fields the bridge reads).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Comment {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    /// Who wrote it.
    #[serde(default)]
    pub user: Option<User>,
    /// The writer's standing in the repository (`OWNER`, `MEMBER`, `COLLABORATOR`,
    /// `CONTRIBUTOR`, `NONE` …).
    #[serde(default)]
    pub author_association: Option<String>,
}

/// A comment's writer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct User {
    pub login: String,
}

impl Comment {
    /// The writer's login, or `?` when GitHub gave none.
    pub fn author(&self) -> &str {
        self.user.as_ref().map_or("?", |u| u.login.as_str())
    }
}

#[derive(Debug, Deserialize, Serialize)]
struct Issue {
    number: u64,
}

/// What a run of requests cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Requests sent (retries after a rate limit included).
    pub requests: u64,
    /// Pages GitHub said had not changed (304), reused from the cache.
    pub not_modified: u64,
    /// Answers that were rate limits, waited out.
    pub rate_limited: u64,
}

/// What the bridge needs of GitHub, for one repository.
pub trait Api: Send {
    /// Before a run: the client reads its token again (it may have been rotated).
    fn begin(&mut self) -> Result<()> {
        Ok(())
    }
    /// Every comment of issue `issue`, oldest first.
    fn list_comments(&mut self, issue: u64) -> impl Future<Output = Result<Vec<Comment>>> + Send;
    /// The numbers of the open issues carrying `label`.
    fn list_labeled(&mut self, label: &str) -> impl Future<Output = Result<Vec<u64>>> + Send;
    fn create_comment(&mut self, issue: u64, body: &str) -> impl Future<Output = Result<Comment>> + Send;
    fn update_comment(&mut self, comment: u64, body: &str) -> impl Future<Output = Result<Comment>> + Send;
    /// Requests made so far.
    fn stats(&self) -> Stats;
    /// After a run: the client keeps the pages it listed in its cache.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The cache of listed pages, by URL.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    #[serde(default)]
    pages: BTreeMap<String, CachedPage>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedPage {
    etag: String,
    body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

const CACHE_FILE: &str = "cache.json";
const PER_PAGE: usize = 100;
/// Pages followed at most in one listing (100,000 comments).
const MAX_PAGES: usize = 1000;
/// How long a secondary rate limit is waited out when GitHub names no time.
const SECONDARY_WAIT: Duration = Duration::from_secs(60);

/// The REST client of one repository.
pub struct Client {
    http: reqwest::Client,
    api: String,
    repo: Repository,
    source: SecretSource,
    /// Read at the start of every run ([`Api::begin`]).
    token: Option<Secret>,
    max_wait: Duration,
    state_dir: PathBuf,
    cache: Cache,
    /// Pages listed in this run: the cache keeps only these.
    touched: BTreeSet<String>,
    dirty: bool,
    stats: Stats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("api", &self.api)
            .field("repo", &self.repo)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// A response read whole.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Client {
    /// A client for the configured repository, keeping its cache in `state_dir`
    /// (`.clawboard/github`). Fails without a repository; the token is read at the
    /// start of each run, so a missing one fails the run (and a rotated one is used).
    pub fn new(settings: &GithubSettings, state_dir: PathBuf) -> Result<Client> {
        let repo = settings.repository()?.clone();
        let http = reqwest::Client::builder()
            .user_agent(concat!("clawboard/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::Config(format!("cannot set up the HTTP client: {e}")))?;
        let cache = match std::fs::read(state_dir.join(CACHE_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "github: {} is not a cache file ({e}); starting over",
                    state_dir.join(CACHE_FILE).display()
                );
                Cache::default()
            }),
            Err(_) => Cache::default(),
        };
        Ok(Client {
            http,
            api: settings.api.clone(),
            repo,
            source: settings.token.clone(),
            token: None,
            max_wait: settings.max_wait,
            state_dir,
            cache,
            touched: BTreeSet::new(),
            dirty: false,
            stats: Stats::default(),
        })
    }

    /// Reads the token and makes one request the bridge makes (the repository's
    /// open issues, one per page): checks the token and the repository
    /// (`clawboard doctor`). Writes nothing.
    pub async fn check_access(&mut self) -> Result<()> {
        self.begin()?;
        let url = self.repo_url("issues?state=open&per_page=1");
        let a = self.send(Method::GET, &url, None, None).await?;
        if !a.status.is_success() {
            return Err(status_error("GET", &url, &a));
        }
        Ok(())
    }

    fn repo_url(&self, rest: &str) -> String {
        format!("{}/repos/{}/{}/{rest}", self.api, self.repo.owner, self.repo.name)
    }

    /// Sends one request, waiting out rate limits up to `max_wait` in all.
    async fn send(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&serde_json::Value>,
        etag: Option<&str>,
    ) -> Result<Answer> {
        let name = method_name(&method);
        let token = self.token.as_ref().ok_or_else(|| Error::NoToken("no run begun: the token was not read".into()))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| Error::NoToken("the token holds characters an HTTP header cannot carry".into()))?;
        auth.set_sensitive(true);
        let mut waited = Duration::ZERO;
        loop {
            let mut req = self
                .http
                .request(method.clone(), url)
                .header(header::AUTHORIZATION, auth.clone())
                .header(header::ACCEPT, "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28");
            if let Some(etag) = etag {
                req = req.header(header::IF_NONE_MATCH, etag);
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            self.stats.requests += 1;
            let http = |e: reqwest::Error| Error::Http { method: name, url: url.to_owned(), source: e.without_url() };
            let resp = req.send().await.map_err(http)?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let text = resp.text().await.map_err(http)?;
            if status == StatusCode::UNAUTHORIZED {
                return Err(Error::Unauthorized {
                    message: message_of(&text).unwrap_or_else(|| "Bad credentials".into()),
                });
            }
            if (status == StatusCode::FORBIDDEN || status == StatusCode::TOO_MANY_REQUESTS)
                && let Some((wanted, why)) = rate_limit_wait(&headers, &text, SystemTime::now())
            {
                self.stats.rate_limited += 1;
                if waited + wanted > self.max_wait {
                    return Err(Error::RateLimited {
                        method: name,
                        url: url.to_owned(),
                        why,
                        wanted,
                        waited,
                        max_wait: self.max_wait,
                    });
                }
                tracing::warn!(method = name, url, "github: rate limited ({why}); waiting {wanted:?}");
                tokio::time::sleep(wanted).await;
                waited += wanted;
                continue;
            }
            return Ok(Answer { status, headers, text });
        }
    }

    /// Every item of a list, page after page, each page asked for conditionally.
    /// The cache keeps each page as read into `T` (the fields the bridge uses).
    async fn list<T: DeserializeOwned + Serialize>(&mut self, first: String) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut url = first;
        for _ in 0..MAX_PAGES {
            let cached = self.cache.pages.get(&url).cloned();
            let a = self.send(Method::GET, &url, None, cached.as_ref().map(|c| c.etag.as_str())).await?;
            self.touched.insert(url.clone());
            let not_a_list = |url: &str, e: serde_json::Error| Error::BadResponse {
                url: url.to_owned(),
                why: format!("not a JSON list: {e}"),
            };
            let (page, next) = match (a.status, cached) {
                (StatusCode::NOT_MODIFIED, Some(c)) => {
                    self.stats.not_modified += 1;
                    let next = if a.headers.contains_key(header::LINK) { next_link(&a.headers) } else { c.next };
                    let page: Vec<T> = serde_json::from_str(&c.body).map_err(|e| not_a_list(&url, e))?;
                    (page, next)
                }
                (StatusCode::OK, _) => {
                    let next = next_link(&a.headers);
                    let page: Vec<T> = serde_json::from_str(&a.text).map_err(|e| not_a_list(&url, e))?;
                    match a.headers.get(header::ETAG).and_then(|v| v.to_str().ok()) {
                        Some(etag) => {
                            let body = serde_json::to_string(&page).map_err(|e| not_a_list(&url, e))?;
                            let kept = CachedPage { etag: etag.to_owned(), body, next: next.clone() };
                            self.cache.pages.insert(url.clone(), kept);
                        }
                        None => {
                            self.cache.pages.remove(&url);
                        }
                    }
                    self.dirty = true;
                    (page, next)
                }
                (StatusCode::NOT_MODIFIED, None) => {
                    return Err(Error::BadResponse {
                        url,
                        why: "304 Not Modified to a request without an ETag".into(),
                    });
                }
                _ => return Err(status_error("GET", &url, &a)),
            };
            let full = page.len() >= PER_PAGE;
            out.extend(page);
            url = match next {
                Some(next) if next.starts_with(&format!("{}/", self.api)) => next,
                Some(next) => {
                    return Err(Error::BadResponse {
                        url,
                        why: format!(
                            "its next page {next:?} is not under {} (the token is not sent elsewhere)",
                            self.api
                        ),
                    });
                }
                // A full page whose 304 carried no Link: the next may be new.
                None if full && a.status == StatusCode::NOT_MODIFIED => next_page(&url)?,
                None => return Ok(out),
            };
        }
        Err(Error::BadResponse { url, why: format!("more than {MAX_PAGES} pages") })
    }

    async fn write(&mut self, method: Method, url: String, body: &str) -> Result<Comment> {
        let json = serde_json::json!({ "body": body });
        let a = self.send(method.clone(), &url, Some(&json), None).await?;
        if !a.status.is_success() {
            return Err(status_error(method_name(&method), &url, &a));
        }
        serde_json::from_str(&a.text).map_err(|e| Error::BadResponse { url, why: format!("not a comment: {e}") })
    }
}

impl Api for Client {
    fn begin(&mut self) -> Result<()> {
        self.token = Some(read_token(&self.source)?);
        self.touched.clear();
        Ok(())
    }

    async fn list_comments(&mut self, issue: u64) -> Result<Vec<Comment>> {
        let url = self.repo_url(&format!("issues/{issue}/comments?per_page={PER_PAGE}"));
        self.list(url).await
    }

    async fn list_labeled(&mut self, label: &str) -> Result<Vec<u64>> {
        let base = self.repo_url("issues");
        let mut url = Url::parse(&base).map_err(|e| Error::Config(format!("github.api: {base:?}: {e}")))?;
        url.query_pairs_mut()
            .append_pair("labels", label)
            .append_pair("state", "open")
            .append_pair("per_page", &PER_PAGE.to_string());
        let issues: Vec<Issue> = self.list(url.to_string()).await?;
        Ok(issues.into_iter().map(|i| i.number).collect())
    }

    async fn create_comment(&mut self, issue: u64, body: &str) -> Result<Comment> {
        let url = self.repo_url(&format!("issues/{issue}/comments"));
        self.write(Method::POST, url, body).await
    }

    async fn update_comment(&mut self, comment: u64, body: &str) -> Result<Comment> {
        let url = self.repo_url(&format!("issues/comments/{comment}"));
        self.write(Method::PATCH, url, body).await
    }

    fn stats(&self) -> Stats {
        self.stats
    }

    fn finish(&mut self) -> Result<()> {
        let before = self.cache.pages.len();
        let touched = &self.touched;
        self.cache.pages.retain(|url, _| touched.contains(url));
        if !self.dirty && before == self.cache.pages.len() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.state_dir).map_err(|e| clawboard_core::Error::io(&self.state_dir, e))?;
        let text = clawboard_core::store::to_pretty_json(&self.cache);
        clawboard_core::store::write_atomic(&self.state_dir, CACHE_FILE, text.as_bytes())?;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
