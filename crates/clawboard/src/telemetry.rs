//! `[telemetry]`: the spans of tasks, role runs and model calls
//! (`clawboard_roles::telemetry`) sent to an OpenTelemetry collector over OTLP/HTTP
//! (protobuf): Phoenix, Jaeger, Grafana Tempo, Langfuse, or a collector in front
//! of anything else.
//!
//! Off the task path: a span is put on a bounded queue (never waited for; dropped
//! and counted when the queue is full) and one thread sends them in batches. It
//! sleeps while nothing is queued, so an idle daemon does not wake for it. A
//! collector that is down, slow or refusing costs dropped spans, counted on
//! `/metrics` and said once per outage in the log, and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use clawboard_core::config::ConfigError;
use clawboard_core::secret::{Secret, SecretSource};
use clawboard_roles::telemetry::{self as spans, SpanData, SpanKind, Value, semconv};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use prost::Message;
use serde::Deserialize;

/// `[telemetry]`, as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added unless given),
    /// e.g. `http://127.0.0.1:6006` for Phoenix. Unset: telemetry is off.
    pub otlp_endpoint: Option<String>,
    /// `http/protobuf`, the one supported.
    pub protocol: Option<String>,
    /// Headers sent with every export: a plain value, or a secret from an
    /// environment variable or an owner-only file, with an optional prefix
    /// (`{ env = "LANGFUSE_AUTH", prefix = "Basic " }`).
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// `service.name` of the spans; default `clawboard`.
    pub service_name: Option<String>,
    /// The share of tasks traced, 0 to 1; default 1.
    pub sample_ratio: Option<f64>,
    /// Put model requests and replies into the `chat` spans; default false.
    #[serde(default)]
    pub capture_content: bool,
    /// How long one export may take; default `10s`.
    #[serde(default, with = "clawboard_core::duration::serde_str::option")]
    pub timeout: Option<Duration>,
    /// Spans kept waiting for the collector at most; default 2048.
    pub queue: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum HeaderValue {
    Plain(String),
    Secret {
        env: Option<String>,
        file: Option<String>,
        #[serde(default)]
        prefix: String,
    },
}

/// A header's value: given, or read from its secret at each export.
#[derive(Debug, Clone)]
pub enum Header {
    Plain(String),
    Secret { source: SecretSource, prefix: String },
}

/// `[telemetry]`, resolved. `None` when off.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    pub url: String,
    pub headers: Vec<(String, Header)>,
    pub service_name: String,
    pub sample_ratio: f64,
    pub capture_content: bool,
    pub timeout: Duration,
    pub queue: usize,
}

const DEFAULT_QUEUE: usize = 2048;
/// Spans sent in one request at most.
const BATCH: usize = 512;
/// After the first span of a batch, how long the exporter waits for more.
const BATCH_DELAY: Duration = Duration::from_secs(1);

impl TelemetrySettings {
    /// Checks the section; each error names its key.
    pub fn resolve(
        section: TelemetrySection,
        expand: impl Fn(&str) -> std::path::PathBuf,
    ) -> Result<Option<TelemetrySettings>, ConfigError> {
        let Some(endpoint) = section.otlp_endpoint.filter(|e| !e.trim().is_empty()) else {
            return Ok(None);
        };
        let url = traces_url(&endpoint).map_err(|r| ConfigError::new("telemetry.otlp_endpoint", r))?;
        match section.protocol.as_deref() {
            None | Some("http/protobuf") => {}
            Some(other) => {
                return Err(ConfigError::new(
                    "telemetry.protocol",
                    format!("{other:?} is not supported; use \"http/protobuf\" (OTLP over HTTP)"),
                ));
            }
        }
        let sample_ratio = section.sample_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(ConfigError::new("telemetry.sample_ratio", format!("{sample_ratio} is not between 0 and 1")));
        }
        let queue = section.queue.unwrap_or(DEFAULT_QUEUE);
        if queue == 0 {
            return Err(ConfigError::new("telemetry.queue", "0 spans: give at least 1 (default 2048)"));
        }
        let mut headers = Vec::new();
        for (name, value) in section.headers {
            headers.push((name.clone(), header(&name, value, &expand)?));
        }
        Ok(Some(TelemetrySettings {
            url,
            headers,
            service_name: section.service_name.unwrap_or_else(|| "clawboard".to_owned()),
            sample_ratio,
            capture_content: section.capture_content,
            timeout: section.timeout.unwrap_or(Duration::from_secs(10)),
            queue,
        }))
    }

    /// The secret files its headers are read from (denied to sandboxed roles).
    pub fn secret_files(&self) -> impl Iterator<Item = &std::path::Path> {
        self.headers.iter().filter_map(|(_, h)| match h {
            Header::Secret { source, .. } => source.path(),
            Header::Plain(_) => None,
        })
    }
}

fn header(name: &str, value: HeaderValue, expand: &impl Fn(&str) -> std::path::PathBuf) -> Result<Header, ConfigError> {
    let key = format!("telemetry.headers.{name}");
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(ConfigError::new(key, "is not a valid HTTP header name"));
    }
    match value {
        HeaderValue::Plain(v) => {
            if reqwest::header::HeaderValue::from_str(&v).is_err() {
                return Err(ConfigError::new(key, "has characters a header cannot carry"));
            }
            Ok(Header::Plain(v))
        }
        HeaderValue::Secret { env: Some(var), file: None, prefix } => {
            Ok(Header::Secret { source: SecretSource::env(var, format!("{key}.env")), prefix })
        }
        HeaderValue::Secret { env: None, file: Some(f), prefix } => {
            Ok(Header::Secret { source: SecretSource::file(expand(&f), format!("{key}.file")), prefix })
        }
        HeaderValue::Secret { .. } => {
            Err(ConfigError::new(key, "give exactly one of env or file (or the header's value as a string)"))
        }
    }
}

/// The traces URL for an OTLP/HTTP endpoint: `/v1/traces` added to a base.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(endpoint.trim()).map_err(|e| format!("{endpoint:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{endpoint:?}: the scheme must be http or https (OTLP over HTTP)"));
    }
    let base = url.as_str().trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") { base.to_owned() } else { format!("{base}/v1/traces") })
}

/// Counts of what happened to the spans, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    pub exported: AtomicU64,
    /// Dropped because the queue was full (the collector slower than the tasks).
    pub dropped_queue: AtomicU64,
    /// Dropped because the collector did not take them (down, refusing, too slow).
    pub dropped_export: AtomicU64,
    /// The last export failed: the next success is said in the log.
    failing: AtomicBool,
}

enum Msg {
    Span(Box<SpanData>),
    Flush(std::sync::mpsc::Sender<()>),
}

/// The process's exporter: installed into `clawboard_roles::telemetry`.
pub struct OtlpExporter {
    tx: SyncSender<Msg>,
    threshold: u64,
    capture: bool,
    pub stats: Arc<Stats>,
    url: String,
}

impl spans::Exporter for OtlpExporter {
    fn export(&self, span: SpanData) {
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.dropped_queue.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn sample(&self, trace_id: &[u8; 16]) -> bool {
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        u64::from_be_bytes(low) >> 1 < self.threshold
    }

    fn capture_content(&self) -> bool {
        self.capture
    }
}

impl OtlpExporter {
    /// Starts the export thread. `node` names this machine in the spans' resource.
    pub fn start(settings: &TelemetrySettings, node: &str) -> anyhow::Result<Arc<OtlpExporter>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(settings.queue);
        let stats = Arc::new(Stats::default());
        let sender = Sender::new(settings, node)?;
        // It ends when the queue's sender (this exporter) is gone; a flush is what
        // waits for it, with a deadline.
        {
            let stats = Arc::clone(&stats);
            std::thread::Builder::new().name("otlp-export".into()).spawn(move || export_loop(&rx, &sender, &stats))?;
        }
        // Compared with the trace id's low 63 bits, as OpenTelemetry's TraceIdRatioBased does.
        let threshold = (settings.sample_ratio * (1u64 << 63) as f64) as u64;
        Ok(Arc::new(OtlpExporter {
            tx,
            threshold: if settings.sample_ratio >= 1.0 { u64::MAX } else { threshold },
            capture: settings.capture_content,
            stats,
            url: settings.url.clone(),
        }))
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends what is queued, waiting at most `within`; true if it was all sent (or dropped).
    pub fn flush(&self, within: Duration) -> bool {
        let (ack, done) = std::sync::mpsc::channel();
        let deadline = Instant::now() + within;
        let mut msg = Msg::Flush(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => return false,
            }
        }
        done.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
    }
}

/// The export thread: blocks while nothing is queued; sends a batch at `BATCH`
/// spans or `BATCH_DELAY` after its first span; answers flushes once all before
/// them is sent.
fn export_loop(rx: &Receiver<Msg>, sender: &Sender, stats: &Stats) {
    let mut batch: Vec<SpanData> = Vec::new();
    // When the batch's first span came: the batch goes `BATCH_DELAY` after it.
    let mut since = Instant::now();
    loop {
        let msg = if batch.is_empty() {
            match rx.recv() {
                Ok(m) => m,
                Err(_) => return,
            }
        } else {
            match rx.recv_timeout(BATCH_DELAY.saturating_sub(since.elapsed())) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    sender.send(std::mem::take(&mut batch), stats);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    sender.send(std::mem::take(&mut batch), stats);
                    return;
                }
            }
        };
        match msg {
            Msg::Span(s) => {
                if batch.is_empty() {
                    since = Instant::now();
                }
                batch.push(*s);
                if batch.len() >= BATCH {
                    sender.send(std::mem::take(&mut batch), stats);
                }
            }
            Msg::Flush(ack) => {
                sender.send(std::mem::take(&mut batch), stats);
                let _ = ack.send(());
            }
        }
    }
}

/// Sends batches: the HTTP client, the resource and the headers.
struct Sender {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, Header)>,
    resource: Resource,
}

impl Sender {
    fn new(settings: &TelemetrySettings, node: &str) -> anyhow::Result<Sender> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let client = client(settings.timeout)?;
        let host =
            std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
        let resource = Resource {
            attributes: attributes(&[
                ("service.name", Value::from(settings.service_name.as_str())),
                ("service.version", Value::from(env!("CARGO_PKG_VERSION"))),
                ("service.instance.id", Value::from(node)),
                ("host.name", Value::from(host)),
                (semconv::CLAWBOARD_NODE, Value::from(node)),
            ]),
            ..Default::default()
        };
        Ok(Sender { runtime, client, url: settings.url.clone(), headers: settings.headers.clone(), resource })
    }

    fn send(&self, batch: Vec<SpanData>, stats: &Stats) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let body = request(self.resource.clone(), batch).encode_to_vec();
        match self.runtime.block_on(self.post(body)) {
            Ok(()) => {
                stats.exported.fetch_add(n, Ordering::Relaxed);
                if stats.failing.swap(false, Ordering::Relaxed) {
                    let dropped = stats.dropped_export.load(Ordering::Relaxed);
                    tracing::info!("telemetry: {} takes spans again ({dropped} dropped since start)", self.url);
                }
            }
            Err(e) => {
                stats.dropped_export.fetch_add(n, Ordering::Relaxed);
                if !stats.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "telemetry: spans cannot be sent to {} ({e}); they are dropped until it takes them again (counted on /metrics)",
                        self.url
                    );
                }
            }
        }
    }

    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
        post(&self.client, &self.url, &self.headers, body).await
    }
}

/// The exporter's HTTP client. No connection is kept between exports: a
/// collector closes an idle one (uvicorn's after 5 s), and a request on it fails.
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().timeout(timeout).pool_max_idle_per_host(0).build()
}

/// One OTLP/HTTP export request; an error says why in one line.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, Header)],
    body: Vec<u8>,
) -> Result<(), String> {
    let mut req = client.post(url).header("content-type", "application/x-protobuf").body(body);
    for (name, h) in headers {
        let value = match h {
            Header::Plain(v) => v.clone(),
            Header::Secret { source, prefix } => {
                let secret: Secret = source.read().map_err(|e| e.to_string())?;
                format!("{prefix}{}", secret.expose())
            }
        };
        let mut v = reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| format!("the header {name} has characters a header cannot carry"))?;
        v.set_sensitive(matches!(h, Header::Secret { .. }));
        req = req.header(name.as_str(), v);
    }
    let resp = req.send().await.map_err(|e| {
        let e = e.without_url();
        let mut why = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            why = format!("{why}: {s}");
            source = s.source();
        }
        why
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body = resp.text().await.unwrap_or_default();
    let quoted: String = body.chars().take(200).collect();
    Err(format!("POST {url} answered {status}: {quoted}"))
}

/// An empty export, for `clawboard doctor`: whether the collector takes OTLP here.
pub fn empty_request() -> Vec<u8> {
    ExportTraceServiceRequest::default().encode_to_vec()
}

fn request(resource: Resource, batch: Vec<SpanData>) -> ExportTraceServiceRequest {
    let scope = InstrumentationScope {
        name: "clawboard".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope),
                spans: batch.into_iter().map(proto_span).collect(),
                schema_url: semconv::SCHEMA_URL.into(),
            }],
            schema_url: semconv::SCHEMA_URL.into(),
        }],
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)).unwrap_or(0)
}

fn proto_span(s: SpanData) -> Span {
    let status = match &s.error {
        Some(message) => Status { message: message.clone(), code: 2 },
        None => Status::default(),
    };
    Span {
        trace_id: s.context.trace_id.to_vec(),
        span_id: s.context.span_id.to_vec(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: u32::from(s.context.sampled) | 0x100,
        name: s.name,
        kind: match s.kind {
            SpanKind::Internal => span::SpanKind::Internal as i32,
            SpanKind::Client => span::SpanKind::Client as i32,
        },
        start_time_unix_nano: nanos(s.start),
        end_time_unix_nano: nanos(s.end.max(s.start)),
        attributes: span_attributes(&s.attributes),
        events: s
            .events
            .iter()
            .map(|e| span::Event {
                time_unix_nano: nanos(e.at),
                name: e.name.clone(),
                attributes: attributes(&e.attributes),
                ..Default::default()
            })
            .collect(),
        links: s
            .links
            .iter()
            .map(|l| span::Link {
                trace_id: l.context.trace_id.to_vec(),
                span_id: l.context.span_id.to_vec(),
                attributes: attributes(&l.attributes),
                ..Default::default()
            })
            .collect(),
        status: Some(status),
        ..Default::default()
    }
}

/// A span's attributes, with the OpenInference kind its GenAI operation implies
/// (so Phoenix types the span).
fn span_attributes(pairs: &[(&'static str, Value)]) -> Vec<KeyValue> {
    let mut out = attributes(pairs);
    let kind = pairs.iter().find_map(|(k, v)| match v {
        Value::Str(op) if *k == semconv::GEN_AI_OPERATION_NAME => semconv::openinference_kind(op),
        _ => None,
    });
    if let Some(kind) = kind {
        out.push(KeyValue {
            key: semconv::OPENINFERENCE_SPAN_KIND.to_owned(),
            value: Some(any(&Value::from(kind))),
            ..Default::default()
        });
    }
    out
}

fn attributes(pairs: &[(&'static str, Value)]) -> Vec<KeyValue> {
    pairs.iter().map(|(k, v)| KeyValue { key: (*k).to_owned(), value: Some(any(v)), ..Default::default() }).collect()
}

fn any(v: &Value) -> AnyValue {
    let value = match v {
        Value::Str(s) => any_value::Value::StringValue(s.clone()),
        Value::Int(i) => any_value::Value::IntValue(*i),
        Value::Float(f) => any_value::Value::DoubleValue(*f),
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Strs(list) => any_value::Value::ArrayValue(ArrayValue {
            values: list.iter().map(|s| AnyValue { value: Some(any_value::Value::StringValue(s.clone())) }).collect(),
        }),
    };
    AnyValue { value: Some(value) }
}

/// The exporter installed in this process, for `/metrics` and the flush at exit.
static INSTALLED: std::sync::RwLock<Option<Arc<OtlpExporter>>> = std::sync::RwLock::new(None);

fn installed() -> Option<Arc<OtlpExporter>> {
    INSTALLED.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Installs the exporter for `settings` (nothing when telemetry is off). `root`
/// and `node_id` name this node in the spans' resource.
pub fn install(
    settings: Option<&TelemetrySettings>,
    root: &std::path::Path,
    node_id: Option<&str>,
) -> anyhow::Result<()> {
    let Some(settings) = settings else { return Ok(()) };
    if installed().is_some() {
        return Ok(());
    }
    let node = clawboard_sync::node_id(root, node_id).map_err(crate::cli::sync_error)?;
    let exporter = OtlpExporter::start(settings, &node)?;
    tracing::info!(endpoint = %exporter.url(), "telemetry: spans go to the OTLP endpoint");
    spans::set_exporter(Some(exporter.clone() as Arc<dyn spans::Exporter>));
    *INSTALLED.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(exporter);
    Ok(())
}

/// At exit, how long the spans still queued may take to be sent.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(5);

/// Sends the spans still queued, waiting at most `within` (at exit).
pub fn flush(within: Duration) {
    if let Some(e) = installed()
        && !e.flush(within)
    {
        tracing::warn!("telemetry: spans still queued after {within:?} are dropped at exit");
    }
}

/// The exporter's counters in the Prometheus text format (zero when telemetry is off).
pub fn render_metrics(out: &mut String) {
    use std::fmt::Write;
    let e = installed();
    let load = |f: fn(&Stats) -> &AtomicU64| e.as_ref().map_or(0, |e| f(&e.stats).load(Ordering::Relaxed));
    let _ = writeln!(
        out,
        "# HELP clawboard_telemetry_spans_total Spans handed to the OTLP exporter, by what became of them.\n# TYPE clawboard_telemetry_spans_total counter"
    );
    for (outcome, n) in [
        ("exported", load(|s| &s.exported)),
        ("dropped_queue_full", load(|s| &s.dropped_queue)),
        ("dropped_export_failed", load(|s| &s.dropped_export)),
    ] {
        let _ = writeln!(out, "clawboard_telemetry_spans_total{{outcome=\"{outcome}\"}} {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml_text: &str) -> Result<Option<TelemetrySettings>, ConfigError> {
        let section: TelemetrySection = toml::from_str(toml_text).unwrap();
        TelemetrySettings::resolve(section, |p: &str| std::path::PathBuf::from(p))
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert!(resolve("").unwrap().is_none());
        let s = resolve("otlp_endpoint = \"http://127.0.0.1:6006\"").unwrap().unwrap();
        assert_eq!(s.url, "http://127.0.0.1:6006/v1/traces");
        assert_eq!(s.service_name, "clawboard");
        assert!(!s.capture_content, "content is opt-in");
        let s = resolve("otlp_endpoint = \"http://c:4318/v1/traces\"").unwrap().unwrap();
        assert_eq!(s.url, "http://c:4318/v1/traces", "a traces URL is kept as given");
    }

    #[test]
    fn bad_settings_name_their_key() {
        let cases = [
            ("otlp_endpoint = \"not a url\"", "telemetry.otlp_endpoint"),
            ("otlp_endpoint = \"ftp://x\"", "telemetry.otlp_endpoint"),
            ("otlp_endpoint = \"http://x\"\nprotocol = \"grpc\"", "telemetry.protocol"),
            ("otlp_endpoint = \"http://x\"\nsample_ratio = 1.5", "telemetry.sample_ratio"),
            ("otlp_endpoint = \"http://x\"\nqueue = 0", "telemetry.queue"),
            ("otlp_endpoint = \"http://x\"\n[headers]\n\"bad name\" = \"v\"", "telemetry.headers.bad name"),
            ("otlp_endpoint = \"http://x\"\n[headers]\nx-key = {}", "telemetry.headers.x-key"),
            (
                "otlp_endpoint = \"http://x\"\n[headers]\nx-key = { env = \"A\", file = \"/f\" }",
                "telemetry.headers.x-key",
            ),
        ];
        for (text, key) in cases {
            let e = resolve(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }

    #[test]
    fn spans_become_otlp_with_their_parent_status_and_attributes() {
        let root = spans::SpanContext { trace_id: [3; 16], span_id: [4; 8], sampled: true };
        let mut s = spans::span_between(
            &root,
            "chat m".into(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1),
            SystemTime::UNIX_EPOCH + Duration::from_secs(2),
            vec![(semconv::GEN_AI_USAGE_INPUT_TOKENS, Value::Int(12))],
            Some("refused".into()),
        );
        s.kind = SpanKind::Client;
        let p = proto_span(s);
        assert_eq!(p.trace_id, vec![3; 16]);
        assert_eq!(p.parent_span_id, vec![4; 8]);
        assert_eq!(p.kind, span::SpanKind::Client as i32);
        assert_eq!(p.start_time_unix_nano, 1_000_000_000);
        assert_eq!(p.end_time_unix_nano, 2_000_000_000);
        assert_eq!(p.status.unwrap().code, 2);
        assert_eq!(p.attributes[0].key, "gen_ai.usage.input_tokens");
        assert_eq!(p.attributes.len(), 1, "no operation, no OpenInference kind");
        let mut chat = spans::span_between(
            &root,
            "chat m".into(),
            SystemTime::UNIX_EPOCH,
            SystemTime::UNIX_EPOCH,
            vec![(semconv::GEN_AI_OPERATION_NAME, Value::from(semconv::OP_CHAT))],
            None,
        );
        chat.kind = SpanKind::Client;
        let kinds: Vec<(String, Option<AnyValue>)> =
            proto_span(chat).attributes.into_iter().map(|kv| (kv.key, kv.value)).collect();
        assert_eq!(kinds[1].0, "openinference.span.kind");
        assert_eq!(kinds[1].1, Some(any(&Value::from("LLM"))));
        let req = request(Resource::default(), vec![]);
        assert_eq!(req.resource_spans[0].scope_spans[0].scope.as_ref().unwrap().name, "clawboard");
    }

    fn settings(url: String, queue: usize) -> TelemetrySettings {
        TelemetrySettings {
            url,
            headers: Vec::new(),
            service_name: "t".into(),
            sample_ratio: 1.0,
            capture_content: false,
            timeout: Duration::from_secs(3),
            queue,
        }
    }

    fn a_span() -> SpanData {
        let root = spans::SpanContext { trace_id: [3; 16], span_id: [4; 8], sampled: true };
        let now = SystemTime::now();
        spans::span_between(&root, "s".into(), now, now, Vec::new(), None)
    }

    #[test]
    fn a_full_queue_drops_spans_and_counts_them_without_waiting() {
        use spans::Exporter;
        // A collector that takes the connection and never answers: the export thread waits in its POST.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", l.local_addr().unwrap());
        std::thread::spawn(move || {
            let held: Vec<_> = l.incoming().take(4).collect();
            std::thread::sleep(Duration::from_secs(10));
            drop(held);
        });
        let e = OtlpExporter::start(&settings(url, 1), "n").unwrap();
        e.export(a_span());
        std::thread::sleep(BATCH_DELAY + Duration::from_millis(500));
        let started = Instant::now();
        for _ in 0..5 {
            e.export(a_span());
        }
        assert!(started.elapsed() < Duration::from_millis(100), "export never waits: {:?}", started.elapsed());
        assert_eq!(e.stats.dropped_queue.load(Ordering::Relaxed), 4, "one waits in the queue of 1, four are dropped");
        assert!(!e.flush(Duration::from_millis(200)), "a flush gives up at its deadline");
    }

    #[test]
    fn the_sample_ratio_decides_by_trace_id() {
        let settings =
            |r: f64| TelemetrySettings { sample_ratio: r, ..settings("http://127.0.0.1:9/v1/traces".into(), 4) };
        use spans::Exporter;
        let all = OtlpExporter::start(&settings(1.0), "n").unwrap();
        let none = OtlpExporter::start(&settings(0.0), "n").unwrap();
        let half = OtlpExporter::start(&settings(0.5), "n").unwrap();
        let low = [0u8; 16];
        let mut high = [0u8; 16];
        high[8] = 0xff;
        assert!(all.sample(&high) && all.sample(&low));
        assert!(!none.sample(&high) && !none.sample(&low));
        assert!(half.sample(&low) && !half.sample(&high));
    }
}
