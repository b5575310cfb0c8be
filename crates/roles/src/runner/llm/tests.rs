//! The `llm` runner against a scripted OpenAI-compatible server on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use super::*;
use crate::runner::{RunIdentity, RunOutcome, RunStatus};

const KEY: &str = "sk-test-0123456789abcdef";

/// One scripted response.
struct Reply {
    status: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
}

/// A request the server got: its head (lowercased) and its JSON body.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Value,
}

/// A server that answers each connection with the next scripted reply (then 500s).
struct Server {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(replies: Vec<Reply>) -> Server {
    serve_models(replies, None).await
}

/// [`serve`], with `GET /v1/models` answered with these model ids (else 404).
async fn serve_models(replies: Vec<Reply>, models: Option<&'static [&'static str]>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut replies = replies.into_iter();
        while let Ok((sock, _)) = listener.accept().await {
            let mut r = BufReader::new(sock);
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).await.unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line.to_ascii_lowercase());
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).await.unwrap();
            if head.starts_with("get /v1/models ") {
                let (status, body) = match models {
                    Some(ids) => {
                        let data: Vec<Value> = ids.iter().map(|id| json!({"id": id, "object": "model"})).collect();
                        ("200 OK", json!({"object": "list", "data": data}).to_string())
                    }
                    None => ("404 Not Found", "{\"error\": \"not found\"}".to_owned()),
                };
                let resp =
                    format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = r.get_mut().write_all(resp.as_bytes()).await;
                let _ = r.get_mut().shutdown().await;
                continue;
            }
            log.lock().unwrap().push(Seen { head, body: serde_json::from_slice(&body).unwrap() });
            let reply = replies.next().unwrap_or(Reply {
                status: "500 Internal Server Error",
                headers: Vec::new(),
                body: "no more replies scripted".into(),
            });
            let mut resp = format!("HTTP/1.1 {}\r\ncontent-type: application/json\r\n", reply.status);
            for (k, v) in &reply.headers {
                resp.push_str(&format!("{k}: {v}\r\n"));
            }
            resp.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n{}", reply.body.len(), reply.body));
            let _ = r.get_mut().write_all(resp.as_bytes()).await;
            let _ = r.get_mut().shutdown().await;
        }
    });
    Server { base_url, seen }
}

/// A completion in OpenAI's exact response shape.
fn completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": "qwen2.5:7b",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    })
    .to_string()
}

fn ok(content: &str) -> Reply {
    Reply { status: "200 OK", headers: Vec::new(), body: completion(content) }
}

fn status(status: &'static str, headers: Vec<(&'static str, String)>, body: &str) -> Reply {
    Reply { status, headers, body: body.into() }
}

fn role(base_url: &str, extra: Value) -> RoleConfig {
    let mut llm = json!({"base_url": base_url, "model": "qwen2.5:7b"});
    llm.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let mut r: RoleConfig = serde_json::from_value(json!({"llm": llm})).unwrap();
    r.timeout = Duration::from_secs(10);
    r
}

fn key_file(dir: &Path, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join("openai.key");
    std::fs::write(&f, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    f
}

fn who() -> RunIdentity {
    RunIdentity {
        root: "/r".into(),
        task_id: "t1".into(),
        role: "title-worker".into(),
        instance_id: "inst-1".into(),
        token: "clawboard-token".into(),
        sandbox: None,
        trace: None,
    }
}

async fn go(r: &RoleConfig, context: &Value) -> RunOutcome {
    let (_tx, mut rx) = watch::channel(false);
    crate::runner::run(r, &serde_json::to_vec(context).unwrap(), &who(), &mut rx).await
}

/// The key is nowhere in what a run produced, nor in the role's `Debug`.
fn assert_no_key(out: &RunOutcome, r: &RoleConfig) {
    for text in [
        format!("{out:?}"),
        format!("{r:?}"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
}

fn stdout(out: &RunOutcome) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[tokio::test]
async fn sends_the_exact_request_and_prints_the_reply_with_usage() {
    let s = serve(vec![ok(r#"{"summary":"Five AI tools"}"#)]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(
        &s.base_url,
        json!({"api_key_file": key_file(d.path(), 0o600), "system_prompt": "Reply with JSON only.", "temperature": 0.2}),
    );
    let ctx = json!({"task": {"taskId": "t1"}, "step": "iter-1/w"});
    let out = go(&r, &ctx).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Exited, Some(200)), "{:?}", out.error);
    assert_eq!(
        stdout(&out),
        json!({"summary": "Five AI tools", "usage": {"prompt_tokens": 12, "completion_tokens": 5}})
    );
    let seen = s.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].head.starts_with("post /v1/chat/completions http/1.1"), "{}", seen[0].head);
    assert!(seen[0].head.contains(&format!("authorization: bearer {}\r\n", KEY.to_ascii_lowercase())));
    assert!(seen[0].head.contains("content-type: application/json"));
    assert!(!seen[0].head.contains("clawboard-token"), "the run's token is not for the LLM");
    assert_eq!(
        seen[0].body,
        json!({
            "model": "qwen2.5:7b",
            "messages": [
                {"role": "system", "content": "Reply with JSON only."},
                {"role": "user", "content": serde_json::to_string_pretty(&ctx).unwrap()}
            ],
            "temperature": 0.2,
            "response_format": {"type": "json_object"}
        })
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("200 OK after 1 request(s)"));
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn without_a_key_there_is_no_authorization_header() {
    let s = serve(vec![ok(r#"{"summary":"s"}"#)]).await;
    let r = role(&s.base_url, json!({"json_response": false}));
    let out = go(&r, &json!({"a": 1})).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    let seen = s.seen();
    assert!(!seen[0].head.contains("authorization"), "{}", seen[0].head);
    assert_eq!(
        seen[0].body,
        json!({"model": "qwen2.5:7b", "messages": [{"role": "user", "content": "{\n  \"a\": 1\n}"}]})
    );
}

#[tokio::test]
async fn output_key_wraps_a_fenced_reply() {
    let s = serve(vec![ok("```json\n{\"type\": \"title\", \"content\": \"Five AI tools\"}\n```")]).await;
    let r = role(&s.base_url, json!({"output_key": "output"}));
    let out = go(&r, &json!({"slice": {}})).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    assert_eq!(
        stdout(&out),
        json!({
            "output": {"type": "title", "content": "Five AI tools"},
            "usage": {"prompt_tokens": 12, "completion_tokens": 5}
        })
    );
}

#[tokio::test]
async fn a_429_with_retry_after_is_sent_again_after_the_wait() {
    let s =
        serve(vec![status("429 Too Many Requests", vec![("retry-after", "1".into())], "slow down"), ok("{}")]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"api_key_file": key_file(d.path(), 0o600)}));
    let started = Instant::now();
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(s.seen().len(), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("after 2 request(s)"));
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn a_5xx_is_sent_again_up_to_http_retries_then_fails() {
    let busy = || status("503 Service Unavailable", Vec::new(), "{\"error\":\"overloaded\"}");
    let s = serve(vec![busy(), busy(), busy(), ok("{}")]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"http_retries": 2, "api_key_file": key_file(d.path(), 0o600)}));
    let started = Instant::now();
    let out = go(&r, &json!({})).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Failed, Some(503)));
    let err = out.error.clone().unwrap();
    assert!(err.contains("answered 503 Service Unavailable 3 times (http_retries = 2)"), "{err}");
    assert!(err.ends_with(r#"{"error":"overloaded"}"#), "{err}");
    assert_eq!(s.seen().len(), 3, "no fourth request");
    // 500 ms, then 1 s of backoff.
    assert!(started.elapsed() >= Duration::from_millis(1500), "{:?}", started.elapsed());
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn a_retry_after_beyond_max_wait_fails_at_once() {
    let s = serve(vec![status("429 Too Many Requests", vec![("retry-after", "120".into())], ""), ok("{}")]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"max_wait": "60s", "api_key_file": key_file(d.path(), 0o600)}));
    let started = Instant::now();
    let out = go(&r, &json!({})).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Failed, Some(429)));
    let err = out.error.clone().unwrap();
    assert!(err.contains("with Retry-After 120s, longer than max_wait (60s)"), "{err}");
    assert_eq!(s.seen().len(), 1);
    // The role's own retries would be refused as well: they are skipped.
    assert!(out.skip_retries);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn another_4xx_fails_at_once_quoting_the_body_without_the_key() {
    // A server that echoes the key back must not get it into the error.
    let body = format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}\"}}}}");
    let s = serve(vec![status("401 Unauthorized", Vec::new(), &body), ok("{}")]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"api_key_file": key_file(d.path(), 0o600)}));
    let out = go(&r, &json!({})).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Failed, Some(401)));
    let err = out.error.clone().unwrap();
    assert!(err.contains("answered 401 Unauthorized: {\"error\""), "{err}");
    assert!(err.contains("Incorrect API key provided: ***"), "{err}");
    assert_eq!(s.seen().len(), 1);
    assert_no_key(&out, &r);
}

#[rstest::rstest]
#[case::content_not_json(completion("Sure! Here is a title: Five AI tools"), "content that is not JSON")]
#[case::no_choices(r#"{"id":"x","object":"chat.completion","choices":[]}"#.to_owned(), "has no choices")]
#[case::body_not_json("<html>gateway</html>".to_owned(), "is not JSON")]
#[case::no_content(
    r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"length"}]}"#.to_owned(),
    "has no text in choices[0].message.content (finish_reason \"length\"; it was cut off at the completion limit (the server's))"
)]
#[case::empty_content_of_a_thinking_model(
    r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"","reasoning":"Let me think"},"finish_reason":"stop"}]}"#.to_owned(),
    "has no text in choices[0].message.content (finish_reason \"stop\"); its text is in message.reasoning (a thinking model"
)]
#[case::cut_off_at_the_token_limit(
    r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"summary\": \"Five AI"},"finish_reason":"length"}]}"#.to_owned(),
    "finish_reason \"length\"; it was cut off at the completion limit (the server's)); it begins \"{\\\"summary\\\": \\\"Five AI\""
)]
#[tokio::test]
async fn a_bad_reply_fails_in_one_line(#[case] body: String, #[case] want: &str) {
    let s = serve(vec![Reply { status: "200 OK", headers: Vec::new(), body }]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"api_key_file": key_file(d.path(), 0o600)}));
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    let err = out.error.clone().unwrap();
    assert!(err.contains(want), "{err}");
    assert!(!err.contains('\n'), "{err:?}");
    assert!(out.stdout.is_empty());
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn a_refused_reply_keeps_the_usage_it_reported() {
    let s = serve(vec![ok("I cannot answer in JSON today.")]).await;
    let out = go(&role(&s.base_url, json!({})), &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(out.usage, Some(json!({"prompt_tokens": 12, "completion_tokens": 5})));
    assert!(!out.skip_retries);
}

#[tokio::test]
async fn a_key_echoed_at_the_quote_limit_leaves_no_part_of_it() {
    // The key starts 10 characters before the 300 quoted: cutting first would
    // leave "sk-test-01", which no longer matches the key.
    let body = format!("{}{KEY} tail", "e".repeat(290));
    let s = serve(vec![status("400 Bad Request", Vec::new(), &body)]).await;
    let d = tempfile::tempdir().unwrap();
    let r = role(&s.base_url, json!({"api_key_file": key_file(d.path(), 0o600)}));
    let out = go(&r, &json!({})).await;
    let err = out.error.clone().unwrap();
    assert!(err.ends_with("eee*** tail"), "{err}");
    assert!(!err.contains(&KEY[..6]), "{err}");
    // The same for the 80 characters of a reply that is not JSON.
    let content = format!("{}{KEY}", "x".repeat(75));
    let s = serve(vec![ok(&content)]).await;
    let r = role(&s.base_url, json!({"api_key_file": key_file(d.path(), 0o600)}));
    let err = go(&r, &json!({})).await.error.unwrap();
    assert!(err.contains("xxxxx***") && !err.contains(&KEY[..6]), "{err}");
}

#[tokio::test]
async fn a_retry_after_past_the_role_timeout_fails_the_attempt_at_once() {
    let s = serve(vec![status("429 Too Many Requests", vec![("retry-after", "30".into())], ""), ok("{}")]).await;
    let mut r = role(&s.base_url, json!({"max_wait": "60s"}));
    r.timeout = Duration::from_secs(5);
    let started = Instant::now();
    let out = go(&r, &json!({})).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::Failed, Some(429)), "{:?}", out.error);
    let err = out.error.unwrap();
    assert!(err.contains("with Retry-After 30s, longer than the 4s left of the role's timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The next attempt, later, may be let in: its retries are not skipped.
    assert!(!out.skip_retries);
}

#[tokio::test]
async fn a_reply_over_max_output_bytes_fails() {
    let s = serve(vec![ok(&format!("{{\"summary\":\"{}\"}}", "x".repeat(200)))]).await;
    let mut r = role(&s.base_url, json!({}));
    r.max_output_bytes = 100;
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error.unwrap().contains("more than max_output_bytes (100)"));
}

#[tokio::test]
async fn a_key_file_others_can_read_is_refused() {
    let s = serve(vec![ok("{}")]).await;
    let d = tempfile::tempdir().unwrap();
    let f = key_file(d.path(), 0o644);
    let r = role(&s.base_url, json!({"api_key_file": f}));
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    let err = out.error.clone().unwrap();
    assert!(err.contains(&f.display().to_string()) && err.contains("mode 644") && err.contains("chmod 600"), "{err}");
    assert!(s.seen().is_empty(), "nothing is sent without the key");
    assert_no_key(&out, &r);
}

#[tokio::test]
async fn a_missing_key_variable_is_named() {
    let r = role("http://127.0.0.1:9/v1", json!({"api_key_env": "CLAWBOARD_TEST_SURELY_UNSET_KEY"}));
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(
        out.error.unwrap(),
        "the environment variable CLAWBOARD_TEST_SURELY_UNSET_KEY (roles.title-worker.llm.api_key_env) is not set or empty"
    );
}

#[tokio::test]
async fn the_role_timeout_bounds_the_run_and_kill_interrupts_it() {
    // Accepted by the kernel, never answered.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let d = tempfile::tempdir().unwrap();
    let mut r = role(&base, json!({"api_key_file": key_file(d.path(), 0o600)}));
    r.timeout = Duration::from_millis(300);
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::TimedOut, "{:?}", out.error);
    assert!(out.elapsed < Duration::from_secs(3));
    assert_no_key(&out, &r);

    r.timeout = Duration::from_secs(30);
    let (tx, mut rx) = watch::channel(false);
    let h = tokio::spawn(async move { crate::runner::run(&r, b"{}", &who(), &mut rx).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tx.send(true).unwrap();
    assert_eq!(h.await.unwrap().status, RunStatus::Interrupted);
    drop(listener);
}

#[tokio::test]
async fn a_refused_connection_fails_naming_the_endpoint() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let out = go(&role(&base, json!({})), &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    let err = out.error.unwrap();
    assert!(err.starts_with(&format!("GET {base}/models: ")), "{err}");
}

#[test]
fn a_sliced_context_becomes_the_step_and_the_slice() {
    let ctx = json!({
        "taskId": "t1", "role": "title-worker", "step": "bp/r1/title-c2", "kind": "blueprint",
        "slice": {"meta": {"intent": "AI tools"}}, "sliceTokens": 9, "budget": 300,
        "step_id": "title", "candidate": 2, "candidates": 3, "feedback": ["sensitive word \"最好\""]
    });
    assert_eq!(
        user_message(&serde_json::to_vec(&ctx).unwrap()),
        "Step: title\nCandidate 2 of 3\n\
         Feedback on the previous attempt:\n- sensitive word \"最好\"\n\n\
         Board JSON:\n{\"meta\":{\"intent\":\"AI tools\"}}"
    );
    let later = json!({"step": "bp/r2/body", "step_id": "body", "round": 2, "slice": {}});
    assert_eq!(user_message(&serde_json::to_vec(&later).unwrap()), "Step: body (round 2)\n\nBoard JSON:\n{}");
    let plain = json!({"step": "iter-1/w", "slice": {"a": 1}});
    assert_eq!(user_message(&serde_json::to_vec(&plain).unwrap()), "Step: iter-1/w\n\nBoard JSON:\n{\"a\":1}");
    let whole = json!({"task": {"taskId": "t1"}, "files": {}});
    assert_eq!(user_message(&serde_json::to_vec(&whole).unwrap()), serde_json::to_string_pretty(&whole).unwrap());
    assert_eq!(user_message(b"not json"), "not json");
}

#[test]
fn fences_around_the_reply_are_taken_off() {
    for (text, want) in [
        ("{\"a\":1}", "{\"a\":1}"),
        ("```json\n{\"a\":1}\n```", "{\"a\":1}"),
        ("  ```\n{\"a\":1}\n```\n", "{\"a\":1}"),
        ("```json {\"a\":1}```", "{\"a\":1}"),
    ] {
        assert_eq!(unfence(text), want, "{text:?}");
    }
}

#[test]
fn the_json_is_found_in_a_chatty_reply() {
    for (text, want) in [
        ("{\"a\":1}", json!({"a": 1})),
        ("<think>\nThe user wants {x}.\n</think>\n{\"a\":1}", json!({"a": 1})),
        ("Here is the JSON:\n```json\n{\"a\":1}\n```\nHope it helps!", json!({"a": 1})),
        ("Sure: {\"a\": [1, 2]} — anything else?", json!({"a": [1, 2]})),
        ("[1, 2]\n\nThese are the ids.", json!([1, 2])),
        ("<think>a</think>\n```\n{\"a\":\"```\"}\n```", json!({"a": "```"})),
    ] {
        assert_eq!(parse_reply(text).unwrap(), want, "{text:?}");
    }
    for text in ["Five AI tools", "<think>{\"a\":1}", "the score is 5", ""] {
        assert!(parse_reply(text).is_err(), "{text:?}");
    }
}

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    let now = chrono::DateTime::parse_from_rfc3339("2015-10-21T07:27:30Z").unwrap().with_timezone(&chrono::Utc);
    assert_eq!(parse_retry_after("5", now), Some(Duration::from_secs(5)));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(30)));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
    assert_eq!(parse_retry_after("soon", now), None);
}

#[test]
fn usage_is_kept_only_when_the_reply_has_it() {
    let body = json!({"choices": [{"message": {"content": "{\"x\":1}"}}]}).to_string();
    let (out, usage) = reply_to_output(body.as_bytes(), None, None, None).unwrap();
    assert_eq!((serde_json::from_slice::<Value>(&out).unwrap(), usage), (json!({"x": 1}), None));
    // A reply that is not an object keeps its shape; output_key gives it one.
    let body = completion("[1,2]");
    let (out, _) = reply_to_output(body.as_bytes(), None, None, None).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), json!([1, 2]));
}

async fn go_shaped(r: &RoleConfig, context: &Value, shape: &ReplyShape) -> RunOutcome {
    let (_tx, mut rx) = watch::channel(false);
    crate::runner::run_shaped(r, &serde_json::to_vec(context).unwrap(), shape, &who(), &mut rx).await
}

fn title_shape() -> ReplyShape {
    let path = clawboard_board::BoardPath::parse("content.hook").unwrap();
    crate::reply::blueprint_step(Some(&path), true, "xiaohongshu")
}

#[tokio::test]
async fn a_shaped_step_asks_for_its_schema_and_a_completion_limit() {
    let s = serve(vec![ok(r#"{"output": {"type": "question", "content": "Why AI?"}, "score": 80}"#)]).await;
    let shape = title_shape();
    let out =
        go_shaped(&role(&s.base_url, json!({})), &json!({"step": "bp/title-c1", "slice": {"topic": "AI"}}), &shape)
            .await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    let body = &s.seen()[0].body;
    assert_eq!(body["max_tokens"], json!(shape.max_tokens.unwrap()));
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": shape.schema.clone().unwrap()}})
    );
    let note = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(note.contains(&format!("reply_format json_schema, max_tokens {}", shape.max_tokens.unwrap())), "{note}");

    // With output_key the model answers the value alone: its part of the schema.
    let s = serve(vec![ok(r#"{"type": "list", "content": "3 tools"}"#)]).await;
    let r = role(&s.base_url, json!({"output_key": "output", "max_completion_tokens": 50}));
    let out = go_shaped(&r, &json!({"slice": {}}), &shape).await;
    assert_eq!(stdout(&out)["output"]["content"], "3 tools");
    let body = &s.seen()[0].body;
    assert_eq!(body["response_format"]["json_schema"]["schema"], shape.schema.unwrap()["properties"]["output"]);
    assert_eq!(body["max_tokens"], 50, "the role's own limit wins");
}

#[tokio::test]
async fn a_server_that_refuses_the_schema_is_asked_in_each_plainer_format_once() {
    let refuse =
        || status("400 Bad Request", Vec::new(), r#"{"error": "response_format json_schema is not supported"}"#);
    let s = serve(vec![refuse(), ok(r#"{"output": {"type": "q", "content": "c"}, "score": 1}"#)]).await;
    let out = go_shaped(&role(&s.base_url, json!({})), &json!({"slice": {}}), &title_shape()).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    let seen = s.seen();
    assert_eq!(seen[0].body["response_format"]["type"], "json_schema");
    assert_eq!(
        seen[1].body["response_format"],
        json!({"type": "json_object", "schema": title_shape().schema.unwrap()}),
        "json_object with the schema beside it"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("after 1 request(s), reply_format json_object_schema"));

    let s = serve(vec![refuse(), refuse(), refuse(), refuse(), refuse()]).await;
    let out = go_shaped(&role(&s.base_url, json!({})), &json!({"slice": {}}), &title_shape()).await;
    assert_eq!(out.status, RunStatus::Failed);
    let seen = s.seen();
    assert_eq!(seen.len(), 4, "json_schema, json_object with a schema, json_object, then no response_format");
    assert_eq!(seen[2].body["response_format"], json!({"type": "json_object"}));
    assert!(seen[3].body.get("response_format").is_none());
    let err = out.error.unwrap();
    assert!(
        err.contains("answered 400 Bad Request to every reply format (json_schema, json_object_schema, json_object, text): {\"error\": \"response_format json_schema"),
        "{err}"
    );
    assert!(out.skip_retries, "no retry gets past it");
}

/// llama-cpp-python's server answers a `json_schema` it does not take with a 500
/// naming `response_format`: a refusal of the format, not a busy server.
#[tokio::test]
async fn a_5xx_naming_response_format_is_a_refused_format_and_what_worked_is_remembered() {
    let refuse = || {
        status(
            "500 Internal Server Error",
            Vec::new(),
            r#"{"error": {"message": "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]"}}"#,
        )
    };
    let reply = || ok(r#"{"output": {"type": "q", "content": "c"}, "score": 1}"#);
    let s = serve(vec![refuse(), reply(), reply(), reply()]).await;
    let r = role(&s.base_url, json!({"http_retries": 3}));
    let out = go_shaped(&r, &json!({"slice": {}}), &title_shape()).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    // The next runs ask in what the server took: the refused request is never sent again.
    for _ in 0..2 {
        let out = go_shaped(&r, &json!({"slice": {}}), &title_shape()).await;
        assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    }
    let formats: Vec<Value> = s.seen().iter().map(|x| x.body["response_format"]["type"].clone()).collect();
    assert_eq!(formats, [json!("json_schema"), json!("json_object"), json!("json_object"), json!("json_object")]);
    assert!(s.seen()[3].body["response_format"].get("schema").is_some());

    // A 5xx that says nothing of the format is a busy server, sent again.
    let busy = || status("503 Service Unavailable", Vec::new(), r#"{"error": "loading the model"}"#);
    let s = serve(vec![busy(), reply()]).await;
    let out = go_shaped(&role(&s.base_url, json!({})), &json!({"slice": {}}), &title_shape()).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    let seen = s.seen();
    assert_eq!(seen[1].body["response_format"]["type"], "json_schema", "the same request again");
}

/// A completion naming `model`, as a server that echoes another model would answer.
fn ok_from(model: &str, content: &str) -> Reply {
    let mut body: Value = serde_json::from_str(&completion(content)).unwrap();
    body["model"] = json!(model);
    Reply { status: "200 OK", headers: Vec::new(), body: body.to_string() }
}

#[tokio::test]
async fn a_model_the_server_does_not_list_is_judged_by_its_reply() {
    // llama.cpp: answers any name with its one model. Refused, naming what it lists.
    let s = serve_models(vec![ok_from("gemma-3-270m", "{}")], Some(&["gemma-3-270m"])).await;
    let mut r = role(&s.base_url, json!({}));
    r.llm.as_mut().unwrap().provider = Some("local".into());
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    let err = out.error.unwrap();
    assert_eq!(
        err,
        format!(
            "provider local (qwen2.5:7b): the server does not serve the model \"qwen2.5:7b\" (it answered with the model \"gemma-3-270m\"; GET {}/models lists gemma-3-270m); name one of those",
            s.base_url
        )
    );
    assert!(out.skip_retries, "another run would be answered the same way");

    // llama-cpp-python: lists only its alias, answers the name it was asked. Taken, and said.
    let s = serve_models(vec![ok("{}"), ok("{}")], Some(&["model/gemma-3-270m-q4_k_m.gguf"])).await;
    let r = role(&s.base_url, json!({}));
    let out = go(&r, &json!({})).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    assert!(String::from_utf8_lossy(&out.stderr).contains("(not in GET /models; the server answered it)"));
    assert_eq!(go(&r, &json!({})).await.status, RunStatus::Exited);
    assert_eq!(s.seen().len(), 2);

    // A server that refuses the name: the refusal and the listing, no retry.
    let s = serve_models(
        vec![status("404 Not Found", Vec::new(), r#"{"error": "model 'qwen2.5:7b' not found"}"#)],
        Some(&["a", "b"]),
    )
    .await;
    let out = go(&role(&s.base_url, json!({})), &json!({})).await;
    let err = out.error.unwrap();
    assert!(
        err.contains("does not serve the model \"qwen2.5:7b\" (POST ")
            && err.contains("answered 404 Not Found: {\"error\": \"model 'qwen2.5:7b' not found\"}; GET "),
        "{err}"
    );
    assert!(err.ends_with("/models lists a, b); name one of those"), "{err}");
    assert!(out.skip_retries);

    // A listed model passes, and is not looked up again.
    let s = serve_models(vec![ok("{}"), ok("{}")], Some(&["a", "qwen2.5:7b"])).await;
    let r = role(&s.base_url, json!({}));
    assert_eq!(go(&r, &json!({})).await.status, RunStatus::Exited);
    assert_eq!(go(&r, &json!({})).await.status, RunStatus::Exited);
    assert_eq!(s.seen().len(), 2);
}

#[rstest::rstest]
#[case::no_key("401 Unauthorized", true)]
#[case::forbidden("403 Forbidden", true)]
#[case::wrong_url("404 Not Found", true)]
#[case::bad_request("400 Bad Request", false)]
#[tokio::test]
async fn a_refusal_no_retry_can_change_skips_the_retries(#[case] answer: &'static str, #[case] skip: bool) {
    let s = serve(vec![status(answer, Vec::new(), r#"{"error": "no"}"#)]).await;
    let out = go(&role(&s.base_url, json!({})), &json!({})).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(out.skip_retries, skip, "{answer}: {:?}", out.error);
    assert_eq!(s.seen().len(), 1, "sent once");
}

#[tokio::test]
async fn a_reply_cut_off_at_the_completion_limit_says_so() {
    let cut = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"output\": {\"type\": \"q"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 64}
    });
    let s = serve(vec![Reply { status: "200 OK", headers: Vec::new(), body: cut.to_string() }]).await;
    let shape = ReplyShape { schema: title_shape().schema, max_tokens: Some(64), doubled: false };
    let out = go_shaped(&role(&s.base_url, json!({})), &json!({"slice": {}}), &shape).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.cut_off);
    let err = out.error.unwrap();
    assert!(err.contains("it was cut off at the completion limit (max_tokens 64)"), "{err}");
    assert_eq!(out.usage, Some(json!({"prompt_tokens": 30, "completion_tokens": 64})), "spent all the same");
}

/// `count_tokens = "auto"`: a server that counts is asked every time; one that
/// answers 4xx once is never asked again; one that fails (5xx) decides nothing.
#[tokio::test]
async fn auto_asks_tokenize_once_and_remembers_what_the_server_does() {
    let tokens =
        |n: usize| Reply { status: "200 OK", headers: Vec::new(), body: json!({"tokens": vec![1; n]}).to_string() };
    let llm_of = |base: &str| {
        let mut l: LlmConfig = serde_json::from_value(json!({"base_url": base, "model": "m"})).unwrap();
        l.count_tokens = CountTokens::Auto;
        l
    };
    let counting = serve(vec![tokens(3), tokens(5)]).await;
    let l = llm_of(&counting.base_url);
    assert_eq!(count_model_tokens(&l, "a b c").await, Some(3));
    assert_eq!(count_model_tokens(&l, "a b c d e").await, Some(5));
    assert_eq!(counting.seen().len(), 2);

    let refusing = serve(vec![status("404 Not Found", Vec::new(), "{}"), tokens(1)]).await;
    let l = llm_of(&refusing.base_url);
    assert_eq!(count_model_tokens(&l, "x").await, None);
    assert_eq!(count_model_tokens(&l, "x").await, None);
    assert_eq!(refusing.seen().len(), 1, "a server that answered 404 is not asked again");

    let failing = serve(vec![status("503 Service Unavailable", Vec::new(), "{}"), tokens(2)]).await;
    let l = llm_of(&failing.base_url);
    assert_eq!(count_model_tokens(&l, "x").await, None);
    assert_eq!(count_model_tokens(&l, "x y").await, Some(2), "a failure decides nothing: asked again");
    assert!(failing.seen().iter().all(|s| s.head.starts_with("post /tokenize ")));
}
