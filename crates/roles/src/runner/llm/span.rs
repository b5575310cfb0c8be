//! The `chat {model}` span of a model role's run (CLIENT, OpenTelemetry's GenAI
//! conventions), its `traceparent` for the request, and the GenAI metrics.

use std::time::Instant;

use serde_json::{Value, json};

use crate::config::LlmConfig;
use crate::telemetry::{SpanGuard, SpanKind, metrics, semconv};

/// What a reply says about itself, beside its content.
#[derive(Debug, Default, Clone)]
pub(super) struct ReplyMeta {
    pub model: Option<String>,
    pub id: Option<String>,
    pub finish_reasons: Vec<String>,
    /// The reply's messages in the conventions' shape, when content is captured.
    pub output_messages: Option<Value>,
}

impl ReplyMeta {
    pub fn of(body: &[u8], capture: bool) -> ReplyMeta {
        let Ok(v) = serde_json::from_slice::<Value>(body) else { return ReplyMeta::default() };
        let choices = v.get("choices").and_then(Value::as_array).cloned().unwrap_or_default();
        let finish_reasons =
            choices.iter().filter_map(|c| c.get("finish_reason").and_then(Value::as_str).map(str::to_owned)).collect();
        let output_messages = capture.then(|| {
            choices
                .iter()
                .map(|c| {
                    let content = c.pointer("/message/content").and_then(Value::as_str).unwrap_or_default();
                    json!({
                        "role": "assistant",
                        "parts": [{"type": "text", "content": content}],
                        "finish_reason": c.get("finish_reason").cloned().unwrap_or(Value::Null),
                    })
                })
                .collect::<Vec<_>>()
                .into()
        });
        ReplyMeta {
            model: v.get("model").and_then(Value::as_str).map(str::to_owned),
            id: v.get("id").and_then(Value::as_str).map(str::to_owned),
            finish_reasons,
            output_messages,
        }
    }
}

/// The provider's name in spans and metrics: the `[llm.providers.NAME]` the role
/// names, else `openai` (the API every configured endpoint speaks).
fn provider(llm: &LlmConfig) -> &str {
    llm.provider.as_deref().unwrap_or("openai")
}

/// A model call being timed: its span and the metrics it ends in.
pub(super) struct ChatSpan<'a> {
    span: SpanGuard,
    llm: &'a LlmConfig,
    role: &'a str,
    started: Instant,
}

impl<'a> ChatSpan<'a> {
    /// Starts `chat {model}` under the run's span; `request` is captured when asked to.
    pub fn start(
        llm: &'a LlmConfig,
        role: &'a str,
        parent: Option<&crate::telemetry::SpanContext>,
        request: impl FnOnce() -> Value,
    ) -> ChatSpan<'a> {
        let mut span = match parent {
            Some(p) => SpanGuard::start(format!("{} {}", semconv::OP_CHAT, llm.model), SpanKind::Client, Some(p)),
            None => SpanGuard::none(),
        };
        if span.recording() {
            span.set(semconv::GEN_AI_OPERATION_NAME, semconv::OP_CHAT);
            span.set(semconv::GEN_AI_PROVIDER_NAME, provider(llm));
            span.set(semconv::GEN_AI_REQUEST_MODEL, llm.model.as_str());
            span.set(semconv::GEN_AI_AGENT_NAME, role);
            if let Some(t) = llm.temperature {
                span.set(semconv::GEN_AI_REQUEST_TEMPERATURE, t);
            }
            if let Ok(url) = reqwest::Url::parse(&llm.base_url) {
                if let Some(host) = url.host_str() {
                    span.set(semconv::SERVER_ADDRESS, host);
                }
                if let Some(port) = url.port_or_known_default() {
                    span.set(semconv::SERVER_PORT, i64::from(port));
                }
            }
            if crate::telemetry::capture_content() {
                let messages = request().get("messages").map(input_messages).unwrap_or_default();
                span.set(semconv::GEN_AI_INPUT_MESSAGES, messages.to_string());
            }
        }
        ChatSpan { span, llm, role, started: Instant::now() }
    }

    /// The `traceparent` the request carries, so the server's spans join the trace.
    pub fn traceparent(&self) -> Option<String> {
        self.span.context().map(|c| c.traceparent())
    }

    /// The call answered: the reply's model, finish reasons and usage.
    pub fn answered(mut self, meta: &ReplyMeta, usage: Option<&Value>, max_tokens: Option<u32>) {
        let (input, output, cached) = tokens(usage);
        self.observe(input, output, None);
        let s = &mut self.span;
        if let Some(m) = &meta.model {
            s.set(semconv::GEN_AI_RESPONSE_MODEL, m.as_str());
        }
        if let Some(id) = &meta.id {
            s.set(semconv::GEN_AI_RESPONSE_ID, id.as_str());
        }
        if !meta.finish_reasons.is_empty() {
            s.set(semconv::GEN_AI_RESPONSE_FINISH_REASONS, meta.finish_reasons.clone());
        }
        if let Some(m) = max_tokens {
            s.set(semconv::GEN_AI_REQUEST_MAX_TOKENS, m);
        }
        set_tokens(s, input, output, cached);
        if let Some(out) = &meta.output_messages {
            s.set(semconv::GEN_AI_OUTPUT_MESSAGES, out.to_string());
        }
    }

    /// The call failed: `error_type` (an HTTP status, `timeout`, ...), and any
    /// usage a refused reply reported.
    pub fn failed(mut self, error_type: &str, message: &str, usage: Option<&Value>) {
        let (input, output, cached) = tokens(usage);
        self.observe(input, output, Some(error_type));
        set_tokens(&mut self.span, input, output, cached);
        self.span.fail(error_type, message);
    }

    fn observe(&self, input: Option<u64>, output: Option<u64>, error: Option<&str>) {
        metrics::record(&metrics::Call {
            provider: provider(self.llm),
            model: &self.llm.model,
            role: self.role,
            input_tokens: input,
            output_tokens: output,
            seconds: self.started.elapsed().as_secs_f64(),
            error,
        });
    }
}

fn set_tokens(s: &mut SpanGuard, input: Option<u64>, output: Option<u64>, cached: Option<u64>) {
    if let Some(n) = input {
        s.set(semconv::GEN_AI_USAGE_INPUT_TOKENS, n);
    }
    if let Some(n) = output {
        s.set(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, n);
    }
    if let Some(n) = cached {
        s.set(semconv::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, n);
    }
}

/// (input, output, cached input) tokens of an OpenAI-shaped `usage`.
fn tokens(usage: Option<&Value>) -> (Option<u64>, Option<u64>, Option<u64>) {
    let Some(u) = usage else { return (None, None, None) };
    (
        u.get("prompt_tokens").and_then(Value::as_u64),
        u.get("completion_tokens").and_then(Value::as_u64),
        u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64),
    )
}

/// Chat-completions messages in the conventions' shape (`role`, `parts`).
fn input_messages(messages: &Value) -> Value {
    let list = messages.as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|m| {
            json!({
                "role": m.get("role").cloned().unwrap_or(Value::Null),
                "parts": [{"type": "text", "content": m.get("content").cloned().unwrap_or(Value::Null)}],
            })
        })
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_gives_its_model_id_and_finish_reasons() {
        let body = br#"{"id":"c-1","model":"gemma","choices":[{"finish_reason":"stop","message":{"content":"{}"}}]}"#;
        let m = ReplyMeta::of(body, true);
        assert_eq!(m.model.as_deref(), Some("gemma"));
        assert_eq!(m.id.as_deref(), Some("c-1"));
        assert_eq!(m.finish_reasons, ["stop"]);
        assert_eq!(m.output_messages.unwrap()[0]["parts"][0]["content"], "{}");
        assert!(ReplyMeta::of(b"not json", true).model.is_none());
        assert!(ReplyMeta::of(body, false).output_messages.is_none(), "content only when captured");
    }

    #[test]
    fn usage_is_read_with_its_cached_part() {
        let u = json!({"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 64}});
        assert_eq!(tokens(Some(&u)), (Some(100), Some(7), Some(64)));
        assert_eq!(tokens(None), (None, None, None));
        let msgs = input_messages(&json!([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]));
        assert_eq!(msgs[1]["role"], "user");
        assert_eq!(msgs[1]["parts"][0]["content"], "u");
    }
}
