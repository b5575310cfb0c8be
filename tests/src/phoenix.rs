//! Arize Phoenix, started by `scripts/phoenix` (its URL in `CLAWBOARD_TEST_PHOENIX`):
//! the collector the telemetry tests export spans to, and read them back from
//! through its REST API (`GET /v1/projects/default/spans`).

use std::process::Command;

use serde_json::Value;

/// Phoenix's base URL; its OTLP/HTTP receiver is `{url}/v1/traces`.
pub fn url() -> String {
    std::env::var("CLAWBOARD_TEST_PHOENIX")
        .expect("CLAWBOARD_TEST_PHOENIX is not set: run the suite through scripts/test, which starts scripts/phoenix")
}

/// The `[telemetry]` section that sends spans to Phoenix.
pub fn telemetry_config(extra: &str) -> String {
    format!("[telemetry]\notlp_endpoint = \"{}\"\n{extra}\n", url())
}

fn get(path: &str) -> Value {
    let out = Command::new("curl").args(["-sf", "-m", "20", &format!("{}{path}", url())]).output().unwrap();
    assert!(out.status.success(), "GET {path}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every span Phoenix holds of trace `trace_id` (all pages).
pub fn spans_of(trace_id: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = match &cursor {
            Some(c) => get(&format!("/v1/projects/default/spans?limit=1000&cursor={c}")),
            None => get("/v1/projects/default/spans?limit=1000"),
        };
        for s in page["data"].as_array().into_iter().flatten() {
            if s["context"]["trace_id"] == trace_id {
                found.push(s.clone());
            }
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return found,
        }
    }
}

/// The spans of `trace_id` once `done` says they have all arrived (Phoenix
/// stores what it receives a moment later), within `secs`.
pub fn wait_spans(trace_id: &str, secs: u64, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let spans = spans_of(trace_id);
        if done(&spans) {
            return spans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the spans of trace {trace_id} did not all reach Phoenix in {secs} s; it holds:\n{}",
            names(&spans).join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// `name (span id → parent id)` of each span, for messages.
pub fn names(spans: &[Value]) -> Vec<String> {
    spans.iter().map(|s| format!("{} ({} → {})", s["name"], s["context"]["span_id"], s["parent_id"])).collect()
}

/// The task's trace id and root span id, from `tasks/{id}/trace.json`.
pub fn trace_of(root: &std::path::Path, task: &str) -> (String, String) {
    let t: Value =
        serde_json::from_slice(&std::fs::read(root.join(format!("tasks/{task}/trace.json"))).unwrap()).unwrap();
    (t["traceId"].as_str().unwrap().to_owned(), t["spanId"].as_str().unwrap().to_owned())
}

/// Span attribute `key` (JSON null when it has none).
pub fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// Checks each ended `invoke_agent` span's `clawboard.board.writes` against
/// the task's board history (the records whose actor is the span's instance)
/// and its OpenInference kind; returns how many of them wrote something.
pub fn board_writes_match_history(root: &std::path::Path, task: &str, spans: &[Value]) -> usize {
    let mut by_instance: std::collections::HashMap<String, u64> = Default::default();
    for e in std::fs::read_dir(root.join(format!("tasks/{task}/board/history"))).unwrap() {
        let r: Value = serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
        if let Some(i) = r["actor"]["instance"].as_str() {
            *by_instance.entry(i.to_owned()).or_default() += 1;
        }
    }
    let mut writing = 0;
    for s in spans.iter().filter(|s| attr(s, "gen_ai.operation.name") == "invoke_agent") {
        assert_eq!(s["span_kind"], "AGENT", "{s:#}");
        if attr(s, "clawboard.attempt.status") == "interrupted" {
            continue; // its run's span was cut short with it: no count
        }
        let instance = attr(s, "gen_ai.agent.id").as_str().unwrap();
        let expected = by_instance.get(instance).copied().unwrap_or(0);
        assert_eq!(attr(s, "clawboard.board.writes"), expected, "{instance}: {s:#}");
        writing += usize::from(expected > 0);
    }
    writing
}
