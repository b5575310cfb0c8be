//! The GenAI client metrics, kept in memory since start and rendered in the
//! Prometheus text format for `/metrics`: `gen_ai_client_token_usage` (tokens per
//! model call, by token type) and `gen_ai_client_operation_duration_seconds`, each
//! by provider, model and role. The buckets are the conventions' advice.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::semconv;

/// The conventions' advised buckets for token counts.
const TOKEN_BUCKETS: &[f64] =
    &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0];
/// The conventions' advised buckets for a call's duration, in seconds.
const DURATION_BUCKETS: &[f64] =
    &[0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

#[derive(Default, Clone)]
struct Series {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Series {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (b, c) in bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

/// (provider, model, role, token type or error type).
type Key = (String, String, String, String);

#[derive(Default)]
struct Registry {
    tokens: BTreeMap<Key, Series>,
    durations: BTreeMap<Key, Series>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { tokens: BTreeMap::new(), durations: BTreeMap::new() });

/// One model call: its usage (when the server reported one) and how long it took.
pub struct Call<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub role: &'a str,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub seconds: f64,
    /// `error.type` when the call failed.
    pub error: Option<&'a str>,
}

/// Records one model call.
pub fn record(call: &Call<'_>) {
    let mut r = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = |kind: &str| (call.provider.to_owned(), call.model.to_owned(), call.role.to_owned(), kind.to_owned());
    for (kind, n) in [("input", call.input_tokens), ("output", call.output_tokens)] {
        if let Some(n) = n {
            r.tokens.entry(key(kind)).or_default().observe(TOKEN_BUCKETS, n as f64);
        }
    }
    r.durations.entry(key(call.error.unwrap_or(""))).or_default().observe(DURATION_BUCKETS, call.seconds);
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn render_family(out: &mut String, name: &str, help: &str, last: &str, bounds: &[f64], series: &BTreeMap<Key, Series>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for ((provider, model, role, extra), s) in series {
        let mut labels = format!(
            "gen_ai_provider_name=\"{}\",gen_ai_request_model=\"{}\",gen_ai_agent_name=\"{}\"",
            label(provider),
            label(model),
            label(role)
        );
        if !extra.is_empty() {
            let _ = write!(labels, ",{last}=\"{}\"", label(extra));
        }
        for (b, c) in bounds.iter().zip(&s.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", s.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", s.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", s.count);
    }
}

/// Both histograms in the Prometheus text format (their families even when empty).
pub fn render(out: &mut String) {
    let r = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    render_family(
        out,
        semconv::METRIC_TOKEN_USAGE,
        "Tokens per model call (gen_ai.client.token.usage), by token type.",
        "gen_ai_token_type",
        TOKEN_BUCKETS,
        &r.tokens,
    );
    render_family(
        out,
        semconv::METRIC_OPERATION_DURATION,
        "Seconds per model call (gen_ai.client.operation.duration); error_type set when it failed.",
        "error_type",
        DURATION_BUCKETS,
        &r.durations,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_model_role_and_token_type() {
        record(&Call {
            provider: "local",
            model: "m-metrics-test",
            role: "writer",
            input_tokens: Some(300),
            output_tokens: Some(20),
            seconds: 1.5,
            error: None,
        });
        record(&Call {
            provider: "local",
            model: "m-metrics-test",
            role: "writer",
            input_tokens: None,
            output_tokens: None,
            seconds: 0.05,
            error: Some("timeout"),
        });
        let mut out = String::new();
        render(&mut out);
        let l = "gen_ai_provider_name=\"local\",gen_ai_request_model=\"m-metrics-test\",gen_ai_agent_name=\"writer\"";
        assert!(
            out.contains(&format!("gen_ai_client_token_usage_bucket{{{l},gen_ai_token_type=\"input\",le=\"256\"}} 0"))
        );
        assert!(
            out.contains(&format!("gen_ai_client_token_usage_bucket{{{l},gen_ai_token_type=\"input\",le=\"1024\"}} 1"))
        );
        assert!(out.contains(&format!("gen_ai_client_token_usage_sum{{{l},gen_ai_token_type=\"output\"}} 20")));
        assert!(out.contains(&format!("gen_ai_client_operation_duration_seconds_count{{{l}}} 1")));
        assert!(
            out.contains(&format!("gen_ai_client_operation_duration_seconds_count{{{l},error_type=\"timeout\"}} 1"))
        );
    }
}
