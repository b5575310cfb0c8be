//! The `llm` runner: one chat completion from an OpenAI-compatible endpoint.
//!
//! The context becomes the user message ([`user_message`]), after the role's system
//! prompt; the model's reply (`choices[0].message.content`, a JSON document, a
//! ```` ```json ```` fence tolerated) becomes the run's stdout, with the reply's token
//! `usage` added for the slice ledger. 429 and 5xx are sent again within the run,
//! after `Retry-After` or a doubling backoff; the role's `timeout` bounds it all.
//! The API key goes into the `Authorization` header only: never into a URL, a log
//! line or an error (a body echoed back in an error has it replaced by `***`).

use std::time::Duration;

use clawboard_core::backoff::Backoff;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::{RunIdentity, RunOutcome, RunStatus, ended, failed, fired};
use crate::config::{ApiKey, CountTokens, LlmConfig, ReplyFormat, RoleConfig};
use crate::reply::ReplyShape;

/// The wait before the first re-send when the server gives no `Retry-After`; doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// How much of an error response's body an error quotes.
const BODY_QUOTE: usize = 300;
/// How an error says the reply was cut off at the completion limit.
pub(crate) const CUT_OFF: &str = "cut off at the completion limit";
/// Beyond `max_output_bytes`, room for the response's envelope and JSON escaping.
const ENVELOPE_BYTES: u64 = 64 * 1024;
/// Refusals of a request that only a change of configuration gets past: the key
/// (401, 403), the URL (404, 405).
const CONFIG_REFUSALS: [u16; 4] = [401, 403, 404, 405];

/// Why a run of an `llm` role failed. Never holds the key: bodies are quoted
/// through [`quote`], which blanks it.
#[derive(Debug, thiserror::Error)]
enum LlmError {
    #[error("cannot build an HTTP client: {0}")]
    Client(String),
    #[error("the API key cannot be sent in a header")]
    KeyHeader,
    #[error("{method} {url}: {reason}")]
    Send { method: &'static str, url: String, reason: String },
    #[error("POST {url} answered {status}: {body}")]
    Refused { url: String, status: StatusCode, body: String },
    #[error("POST {url} answered {status} {tries} times (http_retries = {retries}); giving up: {body}")]
    GaveUp { url: String, status: StatusCode, tries: u32, retries: u32, body: String },
    #[error(
        "POST {url} answered {status} with Retry-After {}s, longer than max_wait ({}s); giving up",
        wait.as_secs(),
        max_wait.as_secs()
    )]
    WaitTooLong { url: String, status: StatusCode, wait: Duration, max_wait: Duration },
    #[error(
        "POST {url} answered {status} with Retry-After {}s, longer than the {}s left of the role's timeout; giving up this attempt",
        wait.as_secs(),
        left.as_secs()
    )]
    WaitPastTimeout { url: String, status: StatusCode, wait: Duration, left: Duration },
    #[error("the response of POST {url} is over {cap} bytes (max_output_bytes is {limit})")]
    ResponseTooLarge { url: String, cap: u64, limit: u64 },
    #[error("the reply is {size} bytes, more than max_output_bytes ({limit})")]
    OutputTooLarge { size: usize, limit: u64, usage: Option<Value> },
    #[error("the reply of POST {url} {what}")]
    Reply { url: String, what: String, status: StatusCode, usage: Option<Value> },
    #[error("POST {url} answered {status} to every reply format ({tried}): {body}")]
    FormatsRefused { url: String, status: StatusCode, tried: String, body: String },
    #[error("the server does not serve the model {model:?} ({how}GET {url} lists {served}); name one of those")]
    NoSuchModel { url: String, model: String, served: String, how: String },
}

impl LlmError {
    /// The HTTP status behind the error, when there was one.
    fn status(&self) -> Option<StatusCode> {
        match self {
            LlmError::Refused { status, .. }
            | LlmError::FormatsRefused { status, .. }
            | LlmError::GaveUp { status, .. }
            | LlmError::WaitTooLong { status, .. }
            | LlmError::WaitPastTimeout { status, .. }
            | LlmError::Reply { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// No retry can change it: the configuration (the model, the key, the URL,
    /// a format the server takes) or a wait the server asked for is at fault, so
    /// the step goes to its fallback at once.
    fn final_refusal(&self) -> bool {
        match self {
            LlmError::Client(_)
            | LlmError::KeyHeader
            | LlmError::WaitTooLong { .. }
            | LlmError::FormatsRefused { .. }
            | LlmError::NoSuchModel { .. } => true,
            LlmError::Refused { status, .. } => CONFIG_REFUSALS.contains(&status.as_u16()),
            _ => false,
        }
    }

    /// The reply was cut off at the completion limit.
    fn cut_off(&self) -> bool {
        matches!(self, LlmError::Reply { what, .. } if what.contains(CUT_OFF))
    }

    /// Its `error.type` in a span: the HTTP status when there was one.
    fn error_type(&self) -> String {
        if let Some(s) = self.status() {
            return s.as_u16().to_string();
        }
        match self {
            LlmError::Send { .. } => "connection",
            LlmError::ResponseTooLarge { .. } | LlmError::OutputTooLarge { .. } => "too_large",
            LlmError::NoSuchModel { .. } => "no_such_model",
            _ => "client",
        }
        .to_owned()
    }

    /// The tokens a refused reply reported: spent all the same.
    fn usage(&self) -> Option<Value> {
        match self {
            LlmError::OutputTooLarge { usage, .. } | LlmError::Reply { usage, .. } => usage.clone(),
            _ => None,
        }
    }
}

/// A successful completion.
struct Answer {
    status: StatusCode,
    stdout: Vec<u8>,
    tries: u32,
    usage: Option<Value>,
    /// The reply format the server took.
    format: ReplyFormat,
    max_tokens: Option<u32>,
    /// The server answered a model its `/models` does not list.
    unlisted: bool,
    /// The reply's model, id and finish reasons, for the span.
    meta: span::ReplyMeta,
}

/// Runs the `llm` role once; `kill` interrupts it, the role's `timeout` ends it.
/// `shape` is what the step's reply must look like: asked for as a JSON Schema,
/// with a completion limit sized to it.
pub(super) async fn run(
    llm: &LlmConfig,
    role: &RoleConfig,
    context: &[u8],
    shape: &ReplyShape,
    who: &RunIdentity,
    kill: &mut watch::Receiver<bool>,
) -> RunOutcome {
    let key = match llm.api_key(&who.role) {
        Ok(k) => k,
        Err(e) => return failed(format!("{}{e}", llm.prefix())),
    };
    let deadline = tokio::time::Instant::now() + role.timeout;
    let chat = span::ChatSpan::start(llm, &who.role, who.trace.as_ref(), || request_for(llm, context, shape));
    let shape = shape.clone().for_role(llm);
    let traceparent = chat.traceparent();
    let call = async {
        let client = reqwest::Client::builder().build().map_err(|e| LlmError::Client(e.without_url().to_string()))?;
        let auth = auth_header(key.as_ref())?;
        let unlisted = check_model(&client, llm, auth.as_ref()).await?;
        let request = Request {
            llm,
            client: &client,
            auth: auth.as_ref(),
            key: key.as_ref(),
            deadline,
            unlisted: unlisted.as_deref(),
            traceparent: traceparent.as_deref(),
        };
        ask(&request, role.max_output_bytes, &user_message(context), &shape).await
    };
    tokio::select! {
        r = call => match r {
            Ok(a) => {
                chat.answered(&a.meta, a.usage.as_ref(), a.max_tokens);
                RunOutcome {
                exit_code: Some(i32::from(a.status.as_u16())),
                stderr: note(llm, &a).into_bytes(),
                usage: a.usage.clone(),
                stdout: a.stdout,
                ..ended(RunStatus::Exited)
                }
            }
            Err(e) => {
                let message = redact(&format!("{}{e}", llm.prefix()), key.as_ref());
                let usage = e.usage();
                chat.failed(&e.error_type(), &message, usage.as_ref());
                RunOutcome {
                    exit_code: e.status().map(|s| i32::from(s.as_u16())),
                    usage,
                    skip_retries: e.final_refusal(),
                    cut_off: e.cut_off(),
                    ..failed(message)
                }
            }
        },
        _ = tokio::time::sleep_until(deadline) => {
            let message = format!("{}timed out after {:?} waiting for {}", llm.prefix(), role.timeout, llm.endpoint());
            chat.failed("timeout", &message, None);
            RunOutcome { status: RunStatus::TimedOut, ..failed(message) }
        }
        _ = fired(kill) => {
            chat.failed("interrupted", "interrupted: the daemon is stopping", None);
            RunOutcome { status: RunStatus::Interrupted, ..failed("interrupted: the daemon is stopping") }
        }
    }
}

/// What every request of one run shares.
struct Request<'a> {
    llm: &'a LlmConfig,
    client: &'a reqwest::Client,
    auth: Option<&'a HeaderValue>,
    key: Option<&'a ApiKey>,
    deadline: tokio::time::Instant,
    /// The models `/models` lists, when the configured one is not among them.
    unlisted: Option<&'a [String]>,
    /// The `chat` span's W3C trace context, sent as `traceparent`.
    traceparent: Option<&'a str>,
}

fn auth_header(key: Option<&ApiKey>) -> Result<Option<HeaderValue>, LlmError> {
    let Some(k) = key else { return Ok(None) };
    let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose())).map_err(|_| LlmError::KeyHeader)?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// The endpoints and models whose `/models` listing was found to serve the model
/// (or could not tell, or that answered a request naming it): checked once per
/// process, not at every run.
static SERVED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> = std::sync::OnceLock::new();

fn memo(llm: &LlmConfig) -> String {
    format!("{}\n{}", llm.base_url, llm.model)
}

fn mark_served(llm: &LlmConfig) {
    if let Ok(mut s) = SERVED.get_or_init(Default::default).lock() {
        s.insert(memo(llm));
    }
}

/// The models the server lists (`GET {base_url}/models`) when the configured one
/// is not among them, else `None`. An unlisted model is not refused here: some
/// servers answer any name (llama-cpp-python lists only its alias); the first
/// reply tells ([`judge_unlisted`]).
async fn check_model(
    client: &reqwest::Client,
    llm: &LlmConfig,
    auth: Option<&HeaderValue>,
) -> Result<Option<Vec<String>>, LlmError> {
    if SERVED.get_or_init(Default::default).lock().is_ok_and(|s| s.contains(&memo(llm))) {
        return Ok(None);
    }
    let (_, listed) = list_models(client, llm, auth).await?;
    match listed {
        Some(ids) if !ids.is_empty() && !ids.contains(&llm.model) => Ok(Some(ids)),
        _ => {
            mark_served(llm);
            Ok(None)
        }
    }
}

/// The listed models, five of them named.
fn shown_models(ids: &[String]) -> String {
    let shown: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
    let more = if ids.len() > 5 { format!(" and {} more", ids.len() - 5) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}

/// A 2xx reply to a request naming a model `/models` does not list: refused when
/// the server answered with another model, one it lists (llama.cpp serves its one
/// model whatever the request names); else the model is taken as served, said once.
fn judge_unlisted(llm: &LlmConfig, listed: &[String], body: &[u8]) -> Result<(), LlmError> {
    let answered = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned));
    if let Some(other) = answered.filter(|m| *m != llm.model && listed.contains(m)) {
        return Err(LlmError::NoSuchModel {
            url: llm.models_endpoint(),
            model: llm.model.clone(),
            served: shown_models(listed),
            how: format!("it answered with the model {other:?}; "),
        });
    }
    tracing::warn!(
        url = %llm.endpoint(),
        "the server does not list the model {:?} (GET {} lists {}) but answered a request naming it; using it",
        llm.model,
        llm.models_endpoint(),
        shown_models(listed)
    );
    mark_served(llm);
    Ok(())
}

/// `GET {base_url}/models`: its status, and the model ids when it answered
/// with a listing (`None`: 404, or it needs other rights: nothing to check against).
async fn list_models(
    client: &reqwest::Client,
    llm: &LlmConfig,
    auth: Option<&HeaderValue>,
) -> Result<(reqwest::StatusCode, Option<Vec<String>>), LlmError> {
    let url = llm.models_endpoint();
    let mut req = client.get(&url);
    if let Some(a) = auth {
        req = req.header(AUTHORIZATION, a.clone());
    }
    let resp = req.send().await.map_err(|e| LlmError::Send { method: "GET", url: url.clone(), reason: reason(e) })?;
    let status = resp.status();
    if !status.is_success() {
        return Ok((status, None));
    }
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let ids = body
        .get("data")
        .and_then(Value::as_array)
        .map(|models| models.iter().filter_map(|m| m.get("id").and_then(Value::as_str)).map(str::to_owned).collect());
    Ok((status, ids))
}

/// What `clawboard doctor` found of a model endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelProbe {
    pub listing: Listing,
    /// The reply format a small schema-shaped request was answered in.
    pub format: ReplyFormat,
    /// The format it was asked in first (the configured one).
    pub asked: ReplyFormat,
    pub elapsed: Duration,
}

/// What `GET /models` said of the configured model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// It lists the model.
    Listed,
    /// It lists others (these, shortened), yet answered a request naming it.
    Unlisted(String),
    /// It lists no models (`GET /models` gave this status).
    None(u16),
}

/// `clawboard doctor`'s check of an `llm` role or provider (`role` names it in
/// errors): the key can be read, the server answers `GET {base_url}/models`
/// within `timeout` and does not refuse the key, and one small request shaped
/// by a schema is answered, as a step's would be (its format negotiated, its
/// model judged as a run judges it).
pub async fn probe_model(llm: &LlmConfig, role: &str, timeout: Duration) -> Result<ModelProbe, String> {
    let key = llm.api_key(role).map_err(|e| e.to_string())?;
    let client = reqwest::Client::builder().timeout(timeout).build().map_err(|e| e.without_url().to_string())?;
    let auth = auth_header(key.as_ref()).map_err(|e| e.to_string())?;
    let (status, listed) = list_models(&client, llm, auth.as_ref()).await.map_err(|e| e.to_string())?;
    if matches!(status.as_u16(), 401 | 403) {
        return Err(format!("GET {}: {status}: the server refused the key", llm.models_endpoint()));
    }
    let listing = match &listed {
        Some(ids) if ids.contains(&llm.model) => Listing::Listed,
        Some(ids) if !ids.is_empty() => Listing::Unlisted(shown_models(ids)),
        _ => Listing::None(status.as_u16()),
    };
    let unlisted = matches!(listing, Listing::Unlisted(_)).then(|| listed.unwrap_or_default());
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false});
    let shape = ReplyShape { schema: Some(schema), max_tokens: Some(PROBE_TOKENS), doubled: false };
    let message = r#"Reply with the JSON object {"ok": true} and nothing else."#;
    let asked = first_format(llm, &shape);
    // The reply itself, not wrapped in a role's output key.
    let probe_llm = LlmConfig { output_key: None, ..llm.clone() };
    let started = std::time::Instant::now();
    let request = Request {
        llm: &probe_llm,
        client: &client,
        auth: auth.as_ref(),
        key: key.as_ref(),
        deadline: tokio::time::Instant::now() + timeout,
        unlisted: unlisted.as_deref(),
        traceparent: None,
    };
    let answer = ask(&request, PROBE_BYTES, message, &shape).await.map_err(|e| redact(&e.to_string(), key.as_ref()))?;
    Ok(ModelProbe { listing, format: answer.format, asked, elapsed: started.elapsed() })
}

/// The completion limit and output cap of doctor's request.
const PROBE_TOKENS: u32 = 32;
const PROBE_BYTES: u64 = 4096;

/// `text` in the model's own tokens, when its provider counts them (llama.cpp's
/// `/tokenize`); `None` when it does not, or the count failed (said in the log:
/// the budget then holds in the slicer's count only). Under `count_tokens =
/// "auto"` the server's first answer decides, once per server.
pub async fn count_model_tokens(llm: &LlmConfig, text: &str) -> Option<u64> {
    // `finding`: under auto, the server's answer is still to decide what it does.
    let finding = match llm.count_tokens {
        CountTokens::None => return None,
        CountTokens::LlamaCpp => false,
        CountTokens::Auto => match counts(llm) {
            Some(false) => return None,
            Some(true) => false,
            None => true,
        },
    };
    let explicit = llm.count_tokens == CountTokens::LlamaCpp;
    let url = llm.tokenize_endpoint();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().ok()?;
    let resp = client.post(&url).json(&json!({"content": text})).send().await;
    let counted = match resp {
        Ok(resp) if resp.status().is_success() => {
            let tokens = resp.json::<Value>().await.ok().and_then(|v| v.get("tokens")?.as_array().map(Vec::len));
            if finding {
                let how = if tokens.is_some() { "counts them" } else { "answered no token list" };
                found_counts(llm, tokens.is_some(), &format!("POST {url} {how}"));
            }
            tokens
        }
        Ok(resp) if finding && resp.status().is_client_error() => {
            found_counts(llm, false, &format!("POST {url} answered {}", resp.status()));
            None
        }
        Ok(resp) if explicit => {
            tracing::warn!(url = %url, status = %resp.status(), "the model's server did not count the slice's tokens");
            None
        }
        Err(e) if explicit => {
            tracing::warn!(url = %url, "the model's server did not count the slice's tokens: {}", reason(e));
            None
        }
        // Under auto a server down or failing decides nothing: asked again next time.
        Ok(_) | Err(_) => None,
    };
    counted.map(|n| n as u64)
}

/// Whether each server counts tokens (`count_tokens = "auto"`), as found.
static COUNTS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, bool>>> =
    std::sync::OnceLock::new();

fn counts(llm: &LlmConfig) -> Option<bool> {
    COUNTS.get_or_init(Default::default).lock().ok()?.get(&llm.tokenize_endpoint()).copied()
}

/// Keeps what the server was found to do, said once.
fn found_counts(llm: &LlmConfig, yes: bool, how: &str) {
    let Ok(mut map) = COUNTS.get_or_init(Default::default).lock() else { return };
    if map.insert(llm.tokenize_endpoint(), yes).is_some() {
        return;
    }
    if yes {
        tracing::info!(model = %llm.model, "{how}: slices are counted in the model's own tokens too");
    } else {
        tracing::info!(model = %llm.model, "{how}: the server does not count tokens; budgets hold in o200k");
    }
}

/// The one-line note kept as the run's stderr.
fn note(llm: &LlmConfig, a: &Answer) -> String {
    let usage = a.usage.as_ref().map(|u| format!("; usage {u}")).unwrap_or_default();
    let provider = llm.provider.as_ref().map(|p| format!(" (provider {p})")).unwrap_or_default();
    let unlisted = if a.unlisted { " (not in GET /models; the server answered it)" } else { "" };
    format!(
        "{}{unlisted}{provider} at {}: {} after {} request(s), reply_format {}, max_tokens {}{usage}\n",
        llm.model,
        llm.endpoint(),
        a.status,
        a.tries,
        a.format.name(),
        a.max_tokens.map_or_else(|| "none".to_owned(), |n| n.to_string())
    )
}

/// The reply format each server and model was found to take, when plainer than
/// the one configured: learned at its first refusal, for the process's life, so
/// a refused request is never sent again.
static LEARNED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, ReplyFormat>>> =
    std::sync::OnceLock::new();

fn learned(llm: &LlmConfig) -> Option<ReplyFormat> {
    LEARNED.get_or_init(Default::default).lock().ok()?.get(&memo(llm)).copied()
}

/// Keeps `format` as what the server takes (said once, when it is news).
fn learn(llm: &LlmConfig, format: ReplyFormat, refused: &[ReplyFormat]) {
    let Ok(mut map) = LEARNED.get_or_init(Default::default).lock() else { return };
    if map.get(&memo(llm)).is_some_and(|f| *f >= format) {
        return;
    }
    map.insert(memo(llm), format);
    let refused: Vec<&str> = refused.iter().map(|f| f.name()).collect();
    tracing::info!(
        url = %llm.endpoint(),
        model = %llm.model,
        "the server refused reply_format {} and took {}; asking it in {} from now on",
        refused.join(", "),
        format.name(),
        format.name()
    );
}

/// The format a request starts with: the configured one, or the plainer one the
/// server was found to take; one that sends a schema only when the step has one.
fn first_format(llm: &LlmConfig, shape: &ReplyShape) -> ReplyFormat {
    let f = learned(llm).map_or(llm.reply_format(), |l| l.max(llm.reply_format()));
    if f.sends_schema() && shape.schema.is_none() { ReplyFormat::JsonObject } else { f }
}

/// The next plainer format worth asking in (one that sends a schema only when
/// the step has one).
fn next_format(format: ReplyFormat, shape: &ReplyShape) -> Option<ReplyFormat> {
    let mut next = format.plainer()?;
    while next.sends_schema() && shape.schema.is_none() {
        next = next.plainer()?;
    }
    Some(next)
}

/// Whether a refusal is of the reply format: a 400 or 422 about it, or a 5xx
/// naming `response_format` (llama-cpp-python answers its validation error 500).
fn format_refused(status: StatusCode, body: &[u8]) -> bool {
    if matches!(status, StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY) {
        return refuses_format(body);
    }
    status.is_server_error() && String::from_utf8_lossy(body).to_ascii_lowercase().contains("response_format")
}

/// One POST of the completion request: its status, `Retry-After`, and body (at most `cap` bytes).
async fn post(r: &Request<'_>, url: &str, body: &[u8], cap: u64, limit: u64) -> Result<Response, LlmError> {
    let mut req = r.client.post(url).header(CONTENT_TYPE, "application/json").body(body.to_vec());
    if let Some(a) = r.auth {
        req = req.header(AUTHORIZATION, a.clone());
    }
    if let Some(t) = r.traceparent {
        req = req.header("traceparent", t);
    }
    let send_error = |e| LlmError::Send { method: "POST", url: url.to_owned(), reason: reason(e) };
    let mut resp = req.send().await.map_err(send_error)?;
    let status = resp.status();
    let retry_after = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut got = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(send_error)? {
        got.extend_from_slice(&chunk);
        if got.len() as u64 > cap {
            return Err(LlmError::ResponseTooLarge { url: url.to_owned(), cap, limit });
        }
    }
    Ok(Response { status, retry_after, body: got })
}

/// What one POST got back.
struct Response {
    status: StatusCode,
    retry_after: Option<String>,
    body: Vec<u8>,
}

/// Sends the completion request, again after a 429 or 5xx, and reads the reply.
/// A server that refuses the reply format is asked again in each plainer one,
/// once; what it took is kept for the next runs ([`learn`]).
async fn ask(r: &Request<'_>, limit: u64, message: &str, shape: &ReplyShape) -> Result<Answer, LlmError> {
    let llm = r.llm;
    let url = llm.endpoint();
    let mut format = first_format(llm, shape);
    let mut body = request_body(llm, message, shape, format).to_string().into_bytes();
    // The formats refused, and the first refusal (reported if every format is refused).
    let mut refused: Vec<ReplyFormat> = Vec::new();
    let mut first_refusal: Option<(StatusCode, String)> = None;
    let cap = limit.saturating_mul(4).saturating_add(ENVELOPE_BYTES);
    let mut tries = 0;
    loop {
        tries += 1;
        tracing::debug!(url = %url, model = %llm.model, try_n = tries, format = format.name(), "asking the LLM endpoint");
        let Response { status, retry_after, body: got } = post(r, &url, &body, cap, limit).await?;
        if status.is_success() {
            if let Some(listed) = r.unlisted {
                judge_unlisted(llm, listed, &got)?;
            }
            let (stdout, usage) = reply_to_output(&got, llm.output_key.as_deref(), r.key, shape.max_tokens)
                .map_err(|(what, usage)| LlmError::Reply { url: url.clone(), what, status, usage })?;
            if !refused.is_empty() {
                learn(llm, format, &refused);
            }
            if stdout.len() as u64 > limit {
                return Err(LlmError::OutputTooLarge { size: stdout.len(), limit, usage });
            }
            let unlisted = r.unlisted.is_some();
            let meta = span::ReplyMeta::of(&got, crate::telemetry::capture_content());
            return Ok(Answer { status, stdout, tries, usage, format, max_tokens: shape.max_tokens, unlisted, meta });
        }
        if format != ReplyFormat::Text && format_refused(status, &got) {
            first_refusal.get_or_insert((status, quote(&got, r.key)));
            refused.push(format);
            if let Some(plainer) = next_format(format, shape) {
                tracing::info!(url = %url, %status, "the server refused response_format {}; asking with {}", format.name(), plainer.name());
                format = plainer;
                body = request_body(llm, message, shape, format).to_string().into_bytes();
                tries -= 1;
                continue;
            }
        }
        if !(status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()) || refused.last() == Some(&format) {
            return Err(refusal(r, status, &got, &refused, first_refusal, format));
        }
        let retries = llm.http_retries();
        if tries > retries {
            return Err(LlmError::GaveUp { url, status, tries, retries, body: quote(&got, r.key) });
        }
        let wait = match retry_after.as_deref().and_then(|v| parse_retry_after(v, chrono::Utc::now())) {
            Some(wait) if wait > llm.max_wait() => {
                return Err(LlmError::WaitTooLong { url, status, wait, max_wait: llm.max_wait() });
            }
            Some(wait) => wait,
            None => Backoff::new(FIRST_BACKOFF, llm.max_wait()).delay(tries - 1),
        };
        let left = r.deadline.saturating_duration_since(tokio::time::Instant::now());
        if wait >= left {
            // Said now, rather than a timeout while waiting.
            return Err(LlmError::WaitPastTimeout { url, status, wait, left });
        }
        tracing::info!(url = %url, %status, wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "the LLM endpoint is busy; sending again");
        tokio::time::sleep(wait).await;
    }
}

/// The error for a request no re-send gets past: every format refused; a model
/// the server does not list refused; else the refusal itself.
fn refusal(
    r: &Request<'_>,
    status: StatusCode,
    got: &[u8],
    refused: &[ReplyFormat],
    first_refusal: Option<(StatusCode, String)>,
    format: ReplyFormat,
) -> LlmError {
    let url = r.llm.endpoint();
    if let Some((first, body)) = first_refusal {
        let mut tried: Vec<&str> = refused.iter().map(|f| f.name()).collect();
        if refused.last() != Some(&format) {
            tried.push(format.name());
        }
        return LlmError::FormatsRefused { url, status: first, tried: tried.join(", "), body };
    }
    let body = quote(got, r.key);
    match r.unlisted {
        Some(listed) if status.is_client_error() => LlmError::NoSuchModel {
            how: format!("POST {url} answered {status}: {body}; "),
            url: r.llm.models_endpoint(),
            model: r.llm.model.clone(),
            served: shown_models(listed),
        },
        _ => LlmError::Refused { url, status, body },
    }
}

/// Whether a 400's body is about the reply format (`response_format`, its
/// schema), which a plainer format may get past.
fn refuses_format(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    ["response_format", "json_schema", "schema", "grammar"].iter().any(|w| text.contains(w))
}

/// A reqwest error in one line, without its URL (the caller names it).
fn reason(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The first [`BODY_QUOTE`] characters of a body on one line, the key blanked
/// (before the cut, which could leave a part of it that no longer matches).
fn quote(body: &[u8], key: Option<&ApiKey>) -> String {
    let text = redact(&String::from_utf8_lossy(body), key);
    let one_line: String = text.chars().take(BODY_QUOTE).map(|c| if c.is_control() { ' ' } else { c }).collect();
    one_line.trim().to_owned()
}

fn redact(text: &str, key: Option<&ApiKey>) -> String {
    match key {
        Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "***"),
        _ => text.to_owned(),
    }
}

/// `Retry-After` as seconds or an HTTP date; a date in the past is no wait.
fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some((at.with_timezone(&chrono::Utc) - now).to_std().unwrap_or(Duration::ZERO))
}

/// The request a run would send for `context`, in the reply format the role is
/// configured for (what a server taught this process is left out: the same input
/// reads the same on every run).
pub(super) fn request_for(llm: &LlmConfig, context: &[u8], shape: &ReplyShape) -> Value {
    let shape = shape.clone().for_role(llm);
    let f = llm.reply_format();
    let format = if f.sends_schema() && shape.schema.is_none() { ReplyFormat::JsonObject } else { f };
    request_body(llm, &user_message(context), &shape, format)
}

/// The chat-completions request: model, system and user messages, temperature,
/// the completion limit and the reply's format (with the step's schema).
fn request_body(llm: &LlmConfig, message: &str, shape: &ReplyShape, format: ReplyFormat) -> Value {
    let mut messages = Vec::new();
    if let Some(s) = &llm.system_prompt {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": message}));
    let mut body = Map::new();
    body.insert("model".into(), llm.model.clone().into());
    body.insert("messages".into(), messages.into());
    if let Some(t) = llm.temperature {
        body.insert("temperature".into(), t.into());
    }
    if let Some(n) = shape.max_tokens {
        body.insert("max_tokens".into(), n.into());
    }
    let schema = shape.schema.as_ref().map(|s| match &llm.output_key {
        // The model answers the value alone; the runner wraps it.
        Some(k) => s.pointer(&format!("/properties/{k}")).cloned().unwrap_or_else(|| json!({})),
        None => s.clone(),
    });
    match (format, schema) {
        (ReplyFormat::JsonSchema, Some(schema)) => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}),
            );
        }
        (ReplyFormat::JsonObjectSchema, Some(schema)) => {
            body.insert("response_format".into(), json!({"type": "json_object", "schema": schema}));
        }
        (ReplyFormat::JsonSchema | ReplyFormat::JsonObjectSchema | ReplyFormat::JsonObject, _) => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        (ReplyFormat::Text, _) => {}
    }
    Value::Object(body)
}

/// The user message for a role's context: for a sliced role, the step named in a
/// few lines, then the slice as compact JSON; otherwise the whole context as pretty JSON.
fn user_message(context: &[u8]) -> String {
    let Ok(ctx) = serde_json::from_slice::<Value>(context) else {
        return String::from_utf8_lossy(context).into_owned();
    };
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    let Some(slice) = ctx.get("slice") else { return pretty(&ctx) };
    let field = |k: &str| ctx.get(k).filter(|v| !v.is_null());
    let plain = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let mut text = String::new();
    // A blueprint step by its id (its run's name, `bp/r1/title-c2`, says nothing
    // the model can use); a later round of a loop says which.
    match (field("step_id"), field("step")) {
        (Some(id), _) => {
            let round = field("round").and_then(Value::as_u64).filter(|r| *r > 1);
            let round = round.map(|r| format!(" (round {r})")).unwrap_or_default();
            text.push_str(&format!("Step: {}{round}\n", plain(id)));
        }
        (None, Some(step)) => text.push_str(&format!("Step: {}\n", plain(step))),
        (None, None) => {}
    }
    if let Some(c) = field("candidate") {
        let of = field("candidates").map(|n| format!(" of {}", plain(n))).unwrap_or_default();
        text.push_str(&format!("Candidate {}{of}\n", plain(c)));
    }
    if let Some(feedback) = field("feedback") {
        text.push_str("Feedback on the previous attempt:\n");
        match feedback.as_array() {
            Some(items) => items.iter().for_each(|i| text.push_str(&format!("- {}\n", plain(i)))),
            None => text.push_str(&format!("- {}\n", plain(feedback))),
        }
    }
    // Compact, as the slicer counted it: the budget holds for what is sent.
    text.push_str("\nBoard JSON:\n");
    text.push_str(&slice.to_string());
    text
}

/// What was wrong with a reply, in one line (the key blanked), and the usage it
/// reported, which was spent all the same.
type Refused = (String, Option<Value>);

/// The run's stdout from a 2xx response body, and the usage it reported.
fn reply_to_output(
    body: &[u8],
    output_key: Option<&str>,
    key: Option<&ApiKey>,
    max_tokens: Option<u32>,
) -> Result<(Vec<u8>, Option<Value>), Refused> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        (format!("is not JSON ({e}); it begins {:?}", begins(&String::from_utf8_lossy(body), key)), None)
    })?;
    let usage = v.get("usage").and_then(|u| {
        let mut kept = Map::new();
        for k in ["prompt_tokens", "completion_tokens"] {
            if let Some(n) = u.get(k).and_then(Value::as_u64) {
                kept.insert(k.into(), n.into());
            }
        }
        (!kept.is_empty()).then_some(Value::Object(kept))
    });
    let fail = |what: String| (what, usage.clone());
    let Some(first) = v.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(fail("has no choices".into()));
    };
    let finish = first.get("finish_reason").and_then(Value::as_str).unwrap_or("none");
    // Said of a reply without text as of one that is not JSON: both may end at the limit.
    let cut = match (finish, max_tokens) {
        ("length", Some(n)) => format!("; it was {CUT_OFF} (max_tokens {n})"),
        ("length", None) => format!("; it was {CUT_OFF} (the server's)"),
        _ => String::new(),
    };
    let content = first.pointer("/message/content").and_then(Value::as_str).filter(|c| !c.trim().is_empty());
    let Some(content) = content else {
        // Thinking models on some servers put all their text beside `content`.
        let beside = ["reasoning_content", "reasoning"]
            .into_iter()
            .find(|k| {
                first.pointer(&format!("/message/{k}")).and_then(Value::as_str).is_some_and(|t| !t.trim().is_empty())
            })
            .map(|k| {
                format!("; its text is in message.{k} (a thinking model: give it room to answer, or turn thinking off)")
            })
            .unwrap_or_default();
        return Err(fail(format!("has no text in choices[0].message.content (finish_reason {finish:?}{cut}){beside}")));
    };
    let reply = parse_reply(content).map_err(|e| {
        fail(format!(
            "has choices[0].message.content that is not JSON ({e}; finish_reason {finish:?}{cut}); it begins {:?}",
            begins(content, key)
        ))
    })?;
    let mut out = match output_key {
        Some(k) => Value::Object(Map::from_iter([(k.to_owned(), reply)])),
        None => reply,
    };
    if let (Some(u), Some(o)) = (&usage, out.as_object_mut()) {
        o.insert("usage".into(), u.clone());
    }
    let bytes = serde_json::to_vec(&out).map_err(|e| fail(format!("cannot be printed: {e}")))?;
    Ok((bytes, usage))
}

/// The JSON document in a model's reply: the whole text; else, once a leading
/// `<think>` block is dropped, the first ```` ``` ```` fence's content, or the
/// first JSON object or array in the text with prose before or after it. The
/// error is the whole text's.
fn parse_reply(content: &str) -> Result<Value, serde_json::Error> {
    let whole = serde_json::from_str(unfence(content));
    if whole.is_ok() {
        return whole;
    }
    let mut text = content.trim_start();
    if let Some(rest) = text.strip_prefix("<think>") {
        // Thinking never closed: cut off before the answer; its text is no answer.
        let Some(end) = rest.find("</think>") else { return whole };
        text = &rest[end + "</think>".len()..];
    }
    let fenced = text.find("```").map(|at| unfence(&text[at..]));
    let candidates = fenced.into_iter().chain(text.find(['{', '[']).map(|at| &text[at..]));
    for candidate in candidates {
        // The first value only: what follows it (prose, a closing fence) is ignored.
        let mut values = serde_json::Deserializer::from_str(candidate).into_iter::<Value>();
        if let Some(Ok(v)) = values.next()
            && (v.is_object() || v.is_array())
        {
            return Ok(v);
        }
    }
    whole
}

/// The first 80 characters of a text, the key blanked first, for an error.
fn begins(text: &str, key: Option<&ApiKey>) -> String {
    redact(text.trim(), key).chars().take(80).collect()
}

/// The text inside a ```` ```json ```` (or bare ```` ``` ````) fence, else the text.
fn unfence(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else { return t };
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
    let rest = rest.find("```").map_or(rest, |end| &rest[..end]);
    rest.trim()
}

mod span;
#[cfg(test)]
mod tests;
