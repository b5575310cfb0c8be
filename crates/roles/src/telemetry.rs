//! Traces of tasks in OpenTelemetry's GenAI conventions: one trace per task, a
//! span per role run and per model call, kept in one trace across restarts and
//! nodes by `tasks/{id}/trace.json`.
//!
//! This module only describes spans ([`SpanData`]) and hands each finished one to
//! the installed [`Exporter`] (the binary's OTLP exporter, `crates/clawboard/src/telemetry.rs`).
//! With none installed (telemetry off) nothing is built, written or sent: a
//! [`SpanGuard`] is empty and `trace.json` is neither read nor made.
//!
//! The GenAI metrics (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`)
//! are kept in [`metrics`] whether or not spans are exported: `/metrics` shows them.

use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use clawboard_core::time::Timestamp;
use clawboard_core::{Error, RelPath, Store, layout};
use serde::{Deserialize, Serialize};

pub mod metrics;
pub mod semconv;

/// Where a task's trace and root span ids are kept (`tasks/{id}/trace.json`).
pub const TRACE_FILE: &str = "trace.json";

/// A span's place in a trace: W3C trace context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl SpanContext {
    /// The W3C `traceparent` header's value.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{}",
            clawboard_core::token::hex(&self.trace_id),
            clawboard_core::token::hex(&self.span_id),
            if self.sampled { "01" } else { "00" }
        )
    }

    /// A new span's context in the same trace.
    pub fn child(&self) -> SpanContext {
        SpanContext { span_id: random_id(), ..*self }
    }
}

/// `n` random bytes (never all zero, which OpenTelemetry reads as "no id").
fn random_id<const N: usize>() -> [u8; N] {
    let mut id = [0u8; N];
    if let Some(bytes) = unhex(&clawboard_core::id::random_hex(N)) {
        id.copy_from_slice(&bytes[..N]);
    }
    if id.iter().all(|b| *b == 0) {
        id[N - 1] = 1;
    }
    id
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

fn id_of<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = unhex(text)?;
    <[u8; N]>::try_from(bytes.as_slice()).ok().filter(|id| id.iter().any(|b| *b != 0))
}

/// A span's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal,
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Strs(Vec<String>),
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Value {
        Value::Strs(v)
    }
}

/// Key-value pairs of a span, an event or a link.
pub type Attributes = Vec<(&'static str, Value)>;

/// A point in a span's time (an escalation raised, a takeover).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
    pub at: SystemTime,
    pub attributes: Attributes,
}

/// Another trace this one comes from (a replay's or a fork's original).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub context: SpanContext,
    pub attributes: Attributes,
}

/// A finished span, as the exporter receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanData {
    pub context: SpanContext,
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Attributes,
    pub events: Vec<Event>,
    pub links: Vec<Link>,
    /// Set when the span ended in an error: its description (the span's status).
    pub error: Option<String>,
}

/// Where finished spans go. Must not block: the task path calls it.
pub trait Exporter: Send + Sync {
    /// Takes a finished span (queues it; drops it when the queue is full).
    fn export(&self, span: SpanData);
    /// Whether a new trace is recorded (the sample ratio).
    fn sample(&self, trace_id: &[u8; 16]) -> bool;
    /// Whether model requests and replies go into the spans (`capture_content`).
    fn capture_content(&self) -> bool;
}

static EXPORTER: RwLock<Option<Arc<dyn Exporter>>> = RwLock::new(None);

/// Installs the exporter spans go to (`None`: telemetry off).
pub fn set_exporter(exporter: Option<Arc<dyn Exporter>>) {
    *EXPORTER.write().unwrap_or_else(std::sync::PoisonError::into_inner) = exporter;
}

fn exporter() -> Option<Arc<dyn Exporter>> {
    #[cfg(test)]
    if let Some(e) = TEST_EXPORTER.with(|t| t.borrow().clone()) {
        return Some(e);
    }
    EXPORTER.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

#[cfg(test)]
thread_local! {
    /// A unit test's exporter: on its own thread only, so tests beside it export nothing.
    pub(crate) static TEST_EXPORTER: std::cell::RefCell<Option<Arc<dyn Exporter>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    exporter().is_some()
}

/// Whether model messages are captured into spans.
pub fn capture_content() -> bool {
    exporter().is_some_and(|e| e.capture_content())
}

/// A span being timed; exported when ended or dropped. Empty (costs nothing) when
/// telemetry is off or its trace is not sampled.
pub struct SpanGuard {
    context: Option<SpanContext>,
    data: Option<(SpanData, Arc<dyn Exporter>)>,
}

impl SpanGuard {
    /// A span that records nothing.
    pub fn none() -> SpanGuard {
        SpanGuard { context: None, data: None }
    }

    /// Starts a span under `parent` (nothing when `parent` is `None`).
    pub fn start(name: impl Into<String>, kind: SpanKind, parent: Option<&SpanContext>) -> SpanGuard {
        let Some(parent) = parent else { return SpanGuard::none() };
        let context = parent.child();
        let data = exporter().filter(|_| parent.sampled).map(|e| {
            let now = SystemTime::now();
            let span = SpanData {
                context,
                parent: Some(parent.span_id),
                name: name.into(),
                kind,
                start: now,
                end: now,
                attributes: Vec::new(),
                events: Vec::new(),
                links: Vec::new(),
                error: None,
            };
            (span, e)
        });
        SpanGuard { context: Some(context), data }
    }

    /// Its context, for the spans under it and the `traceparent` handed on.
    pub fn context(&self) -> Option<SpanContext> {
        self.context
    }

    /// Whether it records (is exported when it ends).
    pub fn recording(&self) -> bool {
        self.data.is_some()
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some((d, _)) = &mut self.data {
            d.attributes.push((key, value.into()));
        }
    }

    /// Sets the span's error (its status) and `error.type`.
    pub fn fail(&mut self, error_type: &str, description: &str) {
        if let Some((d, _)) = &mut self.data {
            d.attributes.push((semconv::ERROR_TYPE, error_type.into()));
            d.error = Some(description.to_owned());
        }
    }

    pub fn event(&mut self, name: &str, attributes: Attributes) {
        if let Some((d, _)) = &mut self.data {
            d.events.push(Event { name: name.to_owned(), at: SystemTime::now(), attributes });
        }
    }

    /// Ends it now and exports it.
    pub fn end(self) {
        drop(self);
    }

    /// Ends it now without exporting it: its data, to be finished and sent
    /// with [`emit`] once what it reports is known. `None` when it records nothing.
    pub fn stop(mut self) -> Option<SpanData> {
        self.data.take().map(|(mut d, _)| {
            d.end = SystemTime::now();
            d
        })
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        if let Some((mut d, e)) = self.data.take() {
            d.end = SystemTime::now();
            e.export(d);
        }
    }
}

/// Exports a span whose times are known (an attempt a crash cut short, a task's
/// root span at its end). Nothing when telemetry is off or not sampled.
pub fn emit(span: SpanData) {
    if span.context.sampled
        && let Some(e) = exporter()
    {
        e.export(span);
    }
}

/// A task's trace: its trace id and the root span's id, kept with the task so a
/// resumed or taken-over task goes on in the same trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskTrace {
    pub trace_id: String,
    pub span_id: String,
    pub sampled: bool,
    pub started_at: Timestamp,
    /// The trace this task's run comes from (`replay of`, `fork of`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<TraceLink>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceLink {
    pub trace_id: String,
    pub span_id: String,
    /// `replay of` or `fork of`, with the original task's id.
    pub relation: String,
    pub task_id: String,
}

impl TaskTrace {
    /// The root span's context, parent of every span of the task.
    pub fn root(&self) -> Option<SpanContext> {
        Some(SpanContext { trace_id: id_of(&self.trace_id)?, span_id: id_of(&self.span_id)?, sampled: self.sampled })
    }

    fn new(links: Vec<TraceLink>) -> Option<TaskTrace> {
        let e = exporter()?;
        let trace_id: [u8; 16] = random_id();
        let span_id: [u8; 8] = random_id();
        Some(TaskTrace {
            trace_id: clawboard_core::token::hex(&trace_id),
            span_id: clawboard_core::token::hex(&span_id),
            sampled: e.sample(&trace_id),
            started_at: Timestamp::now_millis(),
            links,
        })
    }

    /// The root span (`invoke_workflow {name}`), from the task's start to now.
    pub fn finish(&self, workflow: &str, mut attributes: Attributes, error: Option<(&str, &str)>) {
        let Some(context) = self.root() else { return };
        attributes.splice(
            0..0,
            [
                (semconv::GEN_AI_OPERATION_NAME, Value::from(semconv::OP_INVOKE_WORKFLOW)),
                (semconv::GEN_AI_WORKFLOW_NAME, Value::from(workflow)),
            ],
        );
        if let Some((kind, _)) = error {
            attributes.push((semconv::ERROR_TYPE, kind.into()));
        }
        let links = self
            .links
            .iter()
            .filter_map(|l| {
                let context = SpanContext { trace_id: id_of(&l.trace_id)?, span_id: id_of(&l.span_id)?, sampled: true };
                let attributes = vec![
                    (semconv::CLAWBOARD_LINK_RELATION, Value::from(l.relation.as_str())),
                    (semconv::CLAWBOARD_TASK_ID, Value::from(l.task_id.as_str())),
                ];
                Some(Link { context, attributes })
            })
            .collect();
        emit(SpanData {
            context,
            parent: None,
            name: format!("{} {workflow}", semconv::OP_INVOKE_WORKFLOW),
            kind: SpanKind::Internal,
            start: system_time(&self.started_at),
            end: SystemTime::now(),
            attributes,
            events: Vec::new(),
            links,
            error: error.map(|(_, d)| d.to_owned()),
        });
    }
}

/// A timestamp as a system time (now, if it does not parse: it always does, being checked).
pub fn system_time(t: &Timestamp) -> SystemTime {
    chrono::DateTime::parse_from_rfc3339(t.as_str()).map(SystemTime::from).unwrap_or_else(|_| SystemTime::now())
}

fn trace_rel(task_id: &str) -> Result<RelPath, Error> {
    RelPath::new(&layout::task_file(task_id, TRACE_FILE))
}

/// The task's trace as kept, if it has one.
pub fn read_task_trace(store: &Store, task_id: &str) -> Result<Option<TaskTrace>, Error> {
    let rel = trace_rel(task_id)?;
    if !store.exists(&rel) {
        return Ok(None);
    }
    let bytes = store.read_bytes(&rel)?;
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::io(store.path(&rel), std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{rel}: {e}")))
    })
}

/// The task's trace, made and kept on its first run. `None` when telemetry is
/// off. `links` are recorded when the trace is made.
pub fn task_trace(store: &Store, task_id: &str, links: Vec<TraceLink>) -> Result<Option<TaskTrace>, Error> {
    if !enabled() {
        return Ok(None);
    }
    if let Some(t) = read_task_trace(store, task_id)? {
        return Ok(Some(t));
    }
    let Some(t) = TaskTrace::new(links) else { return Ok(None) };
    let rel = trace_rel(task_id)?;
    // Durable with the first step's records (the daemon, `clawboard run`), or now.
    if store.defers_writes() {
        store.write_record_json(&rel, &t)?;
    } else {
        store.write_json(&rel, &t)?;
    }
    Ok(Some(t))
}

/// A span under `parent` whose times are known.
pub fn span_between(
    parent: &SpanContext,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Attributes,
    error: Option<String>,
) -> SpanData {
    SpanData {
        context: parent.child(),
        parent: Some(parent.span_id),
        name,
        kind: SpanKind::Internal,
        start,
        end,
        attributes,
        events: Vec::new(),
        links: Vec::new(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    pub(crate) struct Kept(pub Mutex<Vec<SpanData>>);
    impl Exporter for Kept {
        fn export(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn sample(&self, _: &[u8; 16]) -> bool {
            true
        }
        fn capture_content(&self) -> bool {
            false
        }
    }

    #[test]
    fn traceparent_is_w3c_and_ids_round_trip() {
        let c = SpanContext { trace_id: [0xab; 16], span_id: [0x01; 8], sampled: true };
        assert_eq!(c.traceparent(), format!("00-{}-{}-01", "ab".repeat(16), "01".repeat(8)));
        let child = c.child();
        assert_eq!(child.trace_id, c.trace_id);
        assert_ne!(child.span_id, c.span_id);
        assert_eq!(id_of::<8>("0000000000000000"), None, "an all-zero id is no id");
        assert_eq!(id_of::<8>("zz00000000000001"), None);
        assert_eq!(id_of::<8>("0102"), None, "too short");
        assert_eq!(id_of::<8>("0000000000000001"), Some([0, 0, 0, 0, 0, 0, 0, 1]));
    }

    #[test]
    fn spans_are_exported_under_their_parent_only_when_sampled() {
        let kept = Arc::new(Kept::default());
        TEST_EXPORTER.set(Some(kept.clone()));
        let root = SpanContext { trace_id: [7; 16], span_id: [1; 8], sampled: true };
        let mut s = SpanGuard::start("invoke_agent pm", SpanKind::Internal, Some(&root));
        s.set(semconv::GEN_AI_AGENT_NAME, "pm");
        let child = SpanGuard::start("chat m", SpanKind::Client, s.context().as_ref());
        drop(child);
        s.fail("timeout", "took too long");
        s.end();
        let unsampled = SpanContext { sampled: false, ..root };
        let quiet = SpanGuard::start("x", SpanKind::Internal, Some(&unsampled));
        assert!(quiet.context().is_some(), "an unsampled trace still hands its context on");
        assert!(!quiet.recording());
        drop(quiet);
        TEST_EXPORTER.set(None);
        let spans = kept.0.lock().unwrap();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].name, "chat m");
        assert_eq!(spans[0].parent, Some(spans[1].context.span_id));
        assert_eq!(spans[1].parent, Some([1; 8]));
        assert_eq!(spans[1].error.as_deref(), Some("took too long"));
        assert!(spans[1].attributes.contains(&(semconv::ERROR_TYPE, Value::from("timeout"))));
    }

    #[test]
    fn a_task_trace_is_made_once_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        std::fs::create_dir_all(d.path().join("tasks/t1")).unwrap();
        assert_eq!(task_trace(&store, "t1", Vec::new()).unwrap(), None, "off: nothing made");
        assert!(!d.path().join("tasks/t1/trace.json").exists());
        TEST_EXPORTER.set(Some(Arc::new(Kept::default())));
        let first = task_trace(&store, "t1", Vec::new()).unwrap().unwrap();
        let again = task_trace(&store, "t1", Vec::new()).unwrap().unwrap();
        TEST_EXPORTER.set(None);
        assert_eq!(first, again);
        assert!(first.root().is_some());
        std::fs::write(d.path().join("tasks/t1/trace.json"), "{\"traceId\": 1}").unwrap();
        assert!(read_task_trace(&store, "t1").is_err(), "a broken trace.json is an error, not a new trace");
    }
}
