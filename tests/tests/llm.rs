//! An `llm` role through a real daemon, against a small OpenAI-compatible server in
//! this test process that answers every chat completion with a fixed reply in the
//! exact response shape (id, object, created, model, choices, usage), so that the
//! exact request can be checked: the worker is handed a slice of the board, asked
//! for its kind's shape as a JSON Schema with a completion limit; its reply
//! becomes its attempt's stdout, the reply's usage goes into the slice ledger,
//! and the API key (from the daemon's environment) reaches the server's
//! `Authorization` header and nowhere else: not the daemon's log (at trace
//! level), not a file of the tree. `tests/tests/model.rs` runs a real model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use clawboard_tests::{Daemon, LIFECYCLE_HEAD, Tree, wait_until};
use serde_json::{Value, json};

const KEY_VAR: &str = "LLM_TEST_API_KEY";
const KEY: &str = "sk-e2e-4f1c9a7be2d3460f8a15c0ffee5eed01";
const REPLY: &str =
    r#"{"summary": "Five AI tools that double your output", "output": {"title": "5 AI tools that doubled my output"}}"#;

/// A request the server got: its head (lowercased) and its JSON body.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Value,
}

/// An OpenAI-compatible chat-completions server on 127.0.0.1:0; returns its base URL.
fn openai_server(seen: Arc<Mutex<Vec<Seen>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(sock) = sock else { continue };
            let mut r = BufReader::new(sock);
            let (mut head, mut len) = (String::new(), 0);
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.push_str(&lower);
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let model = body["model"].clone();
            seen.lock().unwrap().push(Seen { head: head.clone(), body });
            let (status, reply) = if head.starts_with("post /v1/chat/completions ") {
                let completion = json!({
                    "id": "chatcmpl-e2e1",
                    "object": "chat.completion",
                    "created": 1_767_225_600,
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": REPLY},
                        "finish_reason": "stop"
                    }],
                    "usage": {"prompt_tokens": 321, "completion_tokens": 17, "total_tokens": 338}
                });
                ("200 OK", completion.to_string())
            } else {
                ("404 Not Found", r#"{"error":{"message":"unknown path"}}"#.to_owned())
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            let _ = r.get_mut().write_all(resp.as_bytes());
        }
    });
    base
}

fn config(base_url: &str) -> String {
    format!(
        r#"{LIFECYCLE_HEAD}
[roles.pm]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"team\":[{{\"role\":\"writer\",\"priority\":1}}]}}'"]
retry_backoff = "10ms"

[roles.validator]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"score\":9,\"pass\":true}}'"]

[roles.harvester]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"experiences\":[]}}'"]

[roles.writer]
scope = ["meta.intent"]
max_tokens = 300
timeout = "20s"
max_retries = 0

[roles.writer.llm]
base_url = "{base_url}"
model = "qwen2.5:7b"
api_key_env = "{KEY_VAR}"
temperature = 0.2
system_prompt = "You write titles. Reply with JSON only: {{\"summary\": \"...\", \"output\": {{\"title\": \"...\"}}}}."
"#
    )
}

/// [`Tree::daemon`] at trace level with the API key in its environment.
fn daemon_with_key(t: &Tree) -> Daemon {
    let log = t.dir.path().join("daemon.log");
    let cfg = t.dir.path().join("clawboard.toml");
    let mut cmd = t.command(&["-vv", "--config", cfg.to_str().unwrap(), "daemon"]);
    cmd.env(KEY_VAR, KEY);
    let f = std::fs::File::create(&log).unwrap();
    let child = cmd.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f).spawn().unwrap();
    let mut d = Daemon { child, log };
    wait_until(20, "the daemon's API", || {
        if let Ok(Some(status)) = d.child.try_wait() {
            panic!("daemon exited early ({status}):\n{}", d.output());
        }
        t.daemon_status().is_some()
    });
    d
}

#[test]
fn an_llm_worker_completes_a_task_and_its_usage_reaches_the_ledger() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let base = openai_server(seen.clone());
    let t = Tree::init();
    t.config(&config(&base));
    let d = daemon_with_key(&t);
    t.drop_task(
        "l1.json",
        r#"{"taskId":"l1","type":"coding","description":"Five AI tools that double your output","priority":"normal","createdBy":"human"}"#,
    );
    wait_until(60, "task l1 to end", || matches!(t.status_of("l1").as_str(), "completed" | "failed"));
    assert_eq!(t.status_of("l1"), "completed", "{}", d.output());

    // The worker's attempt printed the model's reply, with the reply's usage.
    let a = t.attempts("l1").into_iter().find(|a| a["step"] == "iter-1/writer").unwrap();
    assert_eq!(a["status"], "ok", "{a}");
    let stem = format!("{:04}-writer", a["number"].as_u64().unwrap());
    let attempts = t.root.join("tasks/l1/attempts");
    let stdout: Value =
        serde_json::from_slice(&std::fs::read(attempts.join(format!("{stem}.stdout"))).unwrap()).unwrap();
    let mut want: Value = serde_json::from_str(REPLY).unwrap();
    want["usage"] = json!({"prompt_tokens": 321, "completion_tokens": 17});
    assert_eq!(stdout, want);

    // What the server got: the models it serves asked once, then one completion,
    // the key as a bearer token, the slice in the user message.
    // (count_tokens "auto": the server was asked /tokenize once, answered 404, and never again.)
    let (probes, seen): (Vec<Seen>, Vec<Seen>) =
        seen.lock().unwrap().clone().into_iter().partition(|s| s.head.starts_with("post /tokenize "));
    assert_eq!(probes.len(), 1, "{probes:?}");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].head.starts_with("get /v1/models http/1.1"), "{}", seen[0].head);
    let req = &seen[1];
    assert!(req.head.starts_with("post /v1/chat/completions http/1.1"), "{}", req.head);
    assert!(req.head.contains(&format!("authorization: bearer {}\r\n", KEY.to_ascii_lowercase())), "{}", req.head);
    assert_eq!(req.body["model"], "qwen2.5:7b");
    assert_eq!(req.body["temperature"], 0.2);
    // A worker's shape as the schema, and a completion limit sized to it.
    assert_eq!(req.body["response_format"]["type"], "json_schema");
    assert_eq!(req.body["response_format"]["json_schema"]["schema"]["required"], json!(["summary", "output"]));
    assert!(req.body["max_tokens"].as_u64().unwrap() >= 64, "{}", req.body);
    assert_eq!(req.body["messages"][0]["role"], "system");
    assert_eq!(req.body["messages"][1]["role"], "user");
    let user = req.body["messages"][1]["content"].as_str().unwrap();
    assert!(user.starts_with("Step: iter-1/writer\n"), "{user}");
    assert!(user.contains("Board JSON:\n") && user.contains("Five AI tools that double your output"), "{user}");
    assert!(!user.contains("\"taskId\""), "a sliced role gets its slice, not the task: {user}");

    // The slice ledger: the writer's slice, ok, with the usage the server returned.
    let led = t.run(&["slice", "history", "l1", "--json"]);
    led.ok();
    let e = &led.json()["entries"][0];
    assert_eq!((e["role"].as_str(), e["outcome"].as_str()), (Some("writer"), Some("ok")), "{e}");
    assert_eq!(e["usage"], json!({"prompt_tokens": 321, "completion_tokens": 17}));
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(t.root.join("tasks/l1/board/slices/000001.json")).unwrap()).unwrap();
    assert_eq!(on_disk["usage"], json!({"prompt_tokens": 321, "completion_tokens": 17}));

    // The key is in no log line and no file: the tree, the config, the log.
    let log = d.output();
    assert_eq!(d.stop(), 0);
    assert!(!log.is_empty());
    assert!(!log.contains(KEY), "the key is in the daemon's log");
    let mut files = 0;
    for entry in walkdir::WalkDir::new(t.dir.path()).into_iter().filter_map(Result::ok) {
        if entry.file_type().is_file() {
            files += 1;
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "the key is in {}", entry.path().display());
        }
    }
    assert!(files > 10, "only {files} files looked at");
}

/// With `[telemetry]` on (to Phoenix, content captured): the model call is a
/// `chat {model}` span under its role run's `invoke_agent` span, with the
/// request's model, the reply's model, id and finish reason, and the usage the
/// ledger keeps; the request carries the chat span's `traceparent`; `/metrics`
/// counts the call's tokens by type.
#[test]
fn a_model_call_is_a_chat_span_in_phoenix_and_its_request_carries_the_trace() {
    use clawboard_tests::phoenix::{self, names, trace_of, wait_spans};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let base = openai_server(seen.clone());
    let t = Tree::init();
    t.config(&format!("{}\n{}", config(&base), phoenix::telemetry_config("capture_content = true")));
    let d = daemon_with_key(&t);
    t.drop_task(
        "l2.json",
        r#"{"taskId":"l2","type":"coding","description":"Five AI tools that double your output","priority":"normal","createdBy":"human"}"#,
    );
    wait_until(60, "task l2 to end", || matches!(t.status_of("l2").as_str(), "completed" | "failed"));
    assert_eq!(t.status_of("l2"), "completed", "{}", d.output());
    let (trace, root) = trace_of(&t.root, "l2");
    let spans = wait_spans(&trace, 60, |s| {
        s.iter().any(|s| s["context"]["span_id"] == root.as_str()) && s.iter().any(|s| s["name"] == "chat qwen2.5:7b")
    });
    let attr = |s: &Value, k: &str| s["attributes"][k].clone();
    let chat = spans.iter().find(|s| s["name"] == "chat qwen2.5:7b").unwrap();
    let writer = spans.iter().find(|s| s["context"]["span_id"] == chat["parent_id"]).unwrap();
    assert_eq!(writer["name"], "invoke_agent writer", "{:#?}", names(&spans));
    assert_eq!(writer["parent_id"], root.as_str());
    assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
    assert_eq!((chat["span_kind"].as_str(), writer["span_kind"].as_str()), (Some("LLM"), Some("AGENT")));
    assert_eq!(attr(chat, "gen_ai.request.model"), "qwen2.5:7b");
    assert_eq!(attr(chat, "gen_ai.response.model"), "qwen2.5:7b");
    assert_eq!(attr(chat, "gen_ai.response.id"), "chatcmpl-e2e1");
    assert_eq!(attr(chat, "gen_ai.response.finish_reasons"), json!(["stop"]));
    assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), 321);
    assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), 17);
    assert_eq!(attr(chat, "gen_ai.request.temperature"), 0.2);
    let input = attr(chat, "gen_ai.input.messages").as_str().unwrap_or_default().to_owned();
    assert!(input.contains("Five AI tools that double your output"), "captured: {input}");
    assert!(!input.contains(KEY), "never the key");
    let output = attr(chat, "gen_ai.output.messages").as_str().unwrap_or_default().to_owned();
    assert!(output.contains("5 AI tools that doubled my output"), "captured: {output}");
    // The writer's span: its slice and the usage the ledger keeps.
    assert_eq!(attr(writer, "clawboard.usage.input_tokens"), 321);
    assert_eq!(attr(writer, "clawboard.step.id"), "iter-1/writer");
    // The request carried the chat span's context.
    let chat_id = chat["context"]["span_id"].as_str().unwrap();
    let req = seen.lock().unwrap().iter().find(|s| s.head.starts_with("post /v1/chat/completions ")).cloned().unwrap();
    assert!(req.head.contains(&format!("traceparent: 00-{trace}-{chat_id}-01\r\n")), "{}", req.head);
    // And /metrics counts the call.
    let metrics = clawboard_tests::review::unix_get(&t, "/metrics");
    let labels = "gen_ai_provider_name=\"openai\",gen_ai_request_model=\"qwen2.5:7b\",gen_ai_agent_name=\"writer\"";
    for line in [
        format!("gen_ai_client_token_usage_sum{{{labels},gen_ai_token_type=\"input\"}} 321"),
        format!("gen_ai_client_token_usage_sum{{{labels},gen_ai_token_type=\"output\"}} 17"),
        format!("gen_ai_client_operation_duration_seconds_count{{{labels}}} 1"),
    ] {
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    assert_eq!(d.stop(), 0);
}

/// Every ```toml block of docs/LLM.md is a config the daemon accepts.
#[test]
fn every_config_in_the_llm_docs_is_accepted() {
    let doc = std::fs::read_to_string(clawboard_tests::repo().join("docs/LLM.md")).unwrap();
    let blocks: Vec<&str> = doc.split("```toml\n").skip(1).map(|b| b.split("```").next().unwrap()).collect();
    assert!(blocks.len() >= 6, "{} toml blocks", blocks.len());
    let t = Tree::init();
    // A key file is checked when the config is loaded: each block's (under /etc)
    // becomes one beside the config, named relative to it.
    let key = t.dir.path().join("test.key");
    std::fs::write(&key, "sk-docs\n").unwrap();
    set_mode(&key, 0o600);
    let local_key = with_local_key_file(&blocks);
    let mut key_files = 0;
    for block in &local_key {
        key_files += usize::from(block.contains("\napi_key_file = \"test.key\""));
        let cfg = t.config(block);
        t.run(&["--config", cfg.to_str().unwrap(), "status"]).ok();
    }
    assert!(key_files >= 1, "no block has an api_key_file");
    // And the same check refuses a bad one, naming the key.
    let with_temperature = blocks.iter().find(|b| b.contains("\ntemperature = 0.2\n")).unwrap();
    let cfg = t.config(&with_temperature.replace("temperature = 0.2", "temperature = 3.0"));
    let r = t.run(&["--config", cfg.to_str().unwrap(), "status"]);
    r.expect_code(2);
    assert!(r.stderr.contains(".llm.temperature: 3 is out of range 0..=2"), "{}", r.stderr);
    // A key file that is missing, or that others can read, is refused at load.
    let with_file = local_key.iter().find(|b| b.contains("\napi_key_file = \"test.key\"")).unwrap();
    let cfg = t.config(&with_file.replace("\"test.key\"", "\"missing.key\""));
    let r = t.run(&["--config", cfg.to_str().unwrap(), "status"]);
    r.expect_code(2);
    assert!(r.stderr.contains(".llm.api_key_file: ") && r.stderr.contains("missing.key: No such file"), "{}", r.stderr);
    set_mode(&key, 0o644);
    let cfg = t.config(with_file);
    let r = t.run(&["--config", cfg.to_str().unwrap(), "status"]);
    r.expect_code(2);
    assert!(r.stderr.contains("group or others have access to it (mode 644)"), "{}", r.stderr);
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The blocks with each `api_key_file = "..."` line naming `test.key` instead.
fn with_local_key_file(blocks: &[&str]) -> Vec<String> {
    blocks
        .iter()
        .map(|b| {
            b.lines()
                .map(|l| if l.starts_with("api_key_file = ") { "api_key_file = \"test.key\"" } else { l })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}
