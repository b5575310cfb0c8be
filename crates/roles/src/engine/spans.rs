//! A task's spans (see [`crate::telemetry`]): each role run's `invoke_agent
//! {role}`, the root `invoke_workflow {name}` when the task ends, and what
//! happened between (runs a crash cut short, an escalation, a fence).

use clawboard_board::ledger::Handout;
use clawboard_core::formats::Task;
use clawboard_records::attempts::{Attempt, AttemptStatus};

use super::Engine;
use crate::telemetry::{self, SpanContext, SpanData, SpanGuard, SpanKind, TaskTrace, TraceLink, Value, semconv};

/// The task's trace, made on its first run; linked to the original of a replay
/// or a fork. A trace that cannot be read or kept is said, and the task runs on
/// without one: telemetry never stops a task.
pub(super) fn open_trace(engine: &Engine, task: &Task, id: &str) -> Option<TaskTrace> {
    if !telemetry::enabled() {
        return None;
    }
    match telemetry::task_trace(&engine.store, id, links_of(engine, task)) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(task = %id, "this run is traced apart from the task's earlier spans: {e}");
            None
        }
    }
}

fn links_of(engine: &Engine, task: &Task) -> Vec<TraceLink> {
    let link = |trace: TaskTrace, relation: &str, original: &str| TraceLink {
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        relation: relation.to_owned(),
        task_id: original.to_owned(),
    };
    if let Some(r) = engine.recording()
        && let Some(t) = r.trace.clone()
    {
        return vec![link(t, "replay of", &r.task)];
    }
    let Some(original) = task.extra.get("forked_from").and_then(|f| f.get("task")).and_then(|t| t.as_str()) else {
        return Vec::new();
    };
    match telemetry::read_task_trace(&engine.store, original) {
        Ok(Some(t)) => vec![link(t, "fork of", original)],
        Ok(None) => Vec::new(),
        Err(e) => {
            tracing::warn!(task = %task.task_id, "the fork's original trace is not linked: {e}");
            Vec::new()
        }
    }
}

/// Runs a crash (or a stop) cut short, found when the task is opened again:
/// each as its `invoke_agent` span, ended now with `error.type = interrupted`.
pub(super) fn interrupted(trace: Option<&TaskTrace>, task_id: &str, cut: &[&Attempt]) {
    let Some(root) = trace.and_then(TaskTrace::root) else { return };
    for a in cut {
        let mut attributes = agent_attributes(task_id, &a.step, &a.role, a);
        attributes.push((semconv::ERROR_TYPE, "interrupted".into()));
        attributes.push((semconv::CLAWBOARD_ATTEMPT_STATUS, "interrupted".into()));
        telemetry::emit(telemetry::span_between(
            &root,
            format!("{} {}", semconv::OP_INVOKE_AGENT, a.role),
            telemetry::system_time(&a.started_at),
            std::time::SystemTime::now(),
            attributes,
            a.error.clone(),
        ));
    }
}

fn agent_attributes(task_id: &str, step: &str, role: &str, a: &Attempt) -> telemetry::Attributes {
    vec![
        (semconv::GEN_AI_OPERATION_NAME, semconv::OP_INVOKE_AGENT.into()),
        (semconv::GEN_AI_AGENT_NAME, role.into()),
        (semconv::GEN_AI_AGENT_ID, a.instance_id.as_str().into()),
        (semconv::CLAWBOARD_TASK_ID, task_id.into()),
        (semconv::CLAWBOARD_STEP, step.into()),
        (semconv::CLAWBOARD_ATTEMPT, a.number.into()),
    ]
}

/// Why this attempt runs: a retry (and what the last one was refused for), a
/// fallback (from which role), a replay.
pub(crate) struct Why<'a> {
    pub retry: u32,
    pub last_error: Option<&'a str>,
    pub fallback_from: Option<&'a str>,
    pub replayed: bool,
}

/// Starts a role run's `invoke_agent {role}` span under the task's root span.
pub(crate) fn agent(root: Option<&SpanContext>, task_id: &str, a: &Attempt, why: &Why<'_>) -> SpanGuard {
    if root.is_none() {
        return SpanGuard::none();
    }
    let mut span = SpanGuard::start(format!("{} {}", semconv::OP_INVOKE_AGENT, a.role), SpanKind::Internal, root);
    if !span.recording() {
        return span;
    }
    for (k, v) in agent_attributes(task_id, &a.step, &a.role, a) {
        span.set(k, v);
    }
    if why.retry > 0 {
        span.set(semconv::CLAWBOARD_RETRY, why.retry);
    }
    if let Some(e) = why.last_error {
        span.set(semconv::CLAWBOARD_RETRY_CAUSE, e);
    }
    if let Some(f) = why.fallback_from {
        span.set(semconv::CLAWBOARD_FALLBACK_FROM, f);
    }
    if why.replayed {
        span.set(semconv::CLAWBOARD_REPLAYED, true);
    }
    span
}

/// Ends a role run's span: its status, and the slice it was handed (tokens,
/// budget, rungs, the whole board's count and seq). Returned, not sent: the
/// board writes its run made are counted once its step's output is applied
/// ([`sent_with_writes`]).
pub(crate) fn agent_ended(mut span: SpanGuard, a: &Attempt, slice: Option<&Handout>) -> Option<SpanData> {
    if !span.recording() {
        return None;
    }
    let status = match a.status {
        AttemptStatus::Running => "running",
        AttemptStatus::Ok => "ok",
        AttemptStatus::Failed => "failed",
        AttemptStatus::TimedOut => "timed_out",
        AttemptStatus::Interrupted => "interrupted",
    };
    span.set(semconv::CLAWBOARD_ATTEMPT_STATUS, status);
    if !a.escalations.is_empty() {
        span.set(semconv::CLAWBOARD_ESCALATIONS, a.escalations.clone());
    }
    if let Some(h) = slice {
        span.set(semconv::CLAWBOARD_SLICE_TOKENS, h.tokens);
        span.set(semconv::CLAWBOARD_SLICE_HASH, h.hash.as_str());
        span.set(semconv::CLAWBOARD_BOARD_SEQ, h.board_seq);
        if let Some(m) = h.model_tokens {
            span.set(semconv::CLAWBOARD_SLICE_MODEL_TOKENS, m);
        }
        if let Some(b) = h.budget {
            span.set(semconv::CLAWBOARD_BUDGET, b);
        }
        if !h.rungs.is_empty() {
            span.set(semconv::CLAWBOARD_RUNGS, h.rungs.clone());
        }
        if let Some(f) = h.full_tokens {
            span.set(semconv::CLAWBOARD_BOARD_TOKENS, f);
        }
        if let Some(u) = h.usage {
            span.set(semconv::CLAWBOARD_TOTAL_INPUT_TOKENS, u.prompt_tokens);
            span.set(semconv::CLAWBOARD_TOTAL_OUTPUT_TOKENS, u.completion_tokens);
        }
    }
    if a.status != AttemptStatus::Ok {
        span.fail(status, a.error.as_deref().unwrap_or(status));
    }
    span.stop()
}

/// Sends a role run's span with the number of board records its run wrote
/// (itself through the API, and its output as the orchestrator applied it).
pub(crate) fn sent_with_writes(mut span: SpanData, writes: u64) {
    span.attributes.push((semconv::CLAWBOARD_BOARD_WRITES, writes.into()));
    telemetry::emit(span);
}

/// The task held for a person: a span at the moment, naming the escalations.
pub(super) fn held(trace: Option<&TaskTrace>, task_id: &str, ids: &[String]) {
    let Some(root) = trace.and_then(TaskTrace::root) else { return };
    let now = std::time::SystemTime::now();
    let attributes = vec![
        (semconv::CLAWBOARD_TASK_ID, Value::from(task_id)),
        (semconv::CLAWBOARD_ESCALATIONS, Value::from(ids.to_vec())),
    ];
    telemetry::emit(telemetry::span_between(&root, "escalated".into(), now, now, attributes, None));
}

/// The task opened again after it had started (a restart, a takeover, a
/// decision on its escalation): a span at the moment, counting the runs cut short.
pub(super) fn resumed(trace: Option<&TaskTrace>, task_id: &str, cut: usize) {
    let Some(root) = trace.and_then(TaskTrace::root) else { return };
    let now = std::time::SystemTime::now();
    let attributes = vec![
        (semconv::CLAWBOARD_TASK_ID, Value::from(task_id)),
        (semconv::CLAWBOARD_INTERRUPTED, Value::from(u64::try_from(cut).unwrap_or(u64::MAX))),
    ];
    telemetry::emit(telemetry::span_between(&root, "resumed".into(), now, now, attributes, None));
}

/// The task ended: its root span, from its first run to now, with its status,
/// its token totals and (a blueprint's) the output contract's status.
pub(super) fn task_ended(
    engine: &Engine,
    trace: Option<&TaskTrace>,
    task: &Task,
    failure: Option<&str>,
    totals: Option<(u64, u64)>,
) {
    let Some(trace) = trace else { return };
    let workflow =
        task.extra.get("blueprint_id").and_then(|b| b.as_str()).map_or_else(|| "lifecycle".to_owned(), str::to_owned);
    let mut attributes = vec![
        (semconv::CLAWBOARD_TASK_ID, Value::from(task.task_id.to_string())),
        (semconv::CLAWBOARD_TASK_TYPE, Value::from(format!("{:?}", task.kind).to_lowercase())),
        (semconv::CLAWBOARD_TASK_STATUS, Value::from(if failure.is_some() { "failed" } else { "completed" })),
    ];
    if let Some((input, output)) = totals.filter(|(i, o)| i + o > 0) {
        attributes.push((semconv::CLAWBOARD_TOTAL_INPUT_TOKENS, input.into()));
        attributes.push((semconv::CLAWBOARD_TOTAL_OUTPUT_TOKENS, output.into()));
    }
    if let Some(status) = contract_status(engine, task.task_id.as_str()) {
        attributes.push((semconv::CLAWBOARD_CONTRACT_STATUS, status.into()));
    }
    trace.finish(&workflow, attributes, failure.map(|f| ("failed", f)));
}

/// Another node took the task over: a span at the moment on this node's side.
pub(super) fn fenced(engine: &Engine, task_id: &str) {
    mark(engine, task_id, "fenced", Vec::new());
}

/// This node took the task over from `from`, whose heartbeat went stale: a
/// span at the moment, with the claim's new generation.
pub(super) fn taken_over(engine: &Engine, task_id: &str, from: &str, generation: u64) {
    let attributes = vec![
        (semconv::CLAWBOARD_CLAIM_FROM, Value::from(from)),
        (semconv::CLAWBOARD_CLAIM_GENERATION, generation.into()),
    ];
    mark(engine, task_id, "taken_over", attributes);
}

/// A span named `name` at the moment under the root of the trace kept in the
/// task's `trace.json` (none when the task has none yet, or telemetry is off).
fn mark(engine: &Engine, task_id: &str, name: &str, mut attributes: telemetry::Attributes) {
    if !telemetry::enabled() {
        return;
    }
    let root = match telemetry::read_task_trace(&engine.store, task_id) {
        Ok(t) => t.and_then(|t| t.root()),
        Err(e) => {
            tracing::debug!(task = %task_id, "no {name} span: {e}");
            None
        }
    };
    let Some(root) = root else { return };
    let now = std::time::SystemTime::now();
    attributes.insert(0, (semconv::CLAWBOARD_TASK_ID, Value::from(task_id)));
    telemetry::emit(telemetry::span_between(&root, name.into(), now, now, attributes, None));
}

/// The output contract's `execution_result.status` in `result.json`, if it has one.
fn contract_status(engine: &Engine, task_id: &str) -> Option<String> {
    let rel =
        clawboard_core::RelPath::new(&clawboard_core::layout::task_file(task_id, clawboard_core::layout::RESULT_FILE))
            .ok()?;
    let result: clawboard_core::formats::TaskResult = engine.store.read(&rel).ok()?;
    let status = result.extra.get("output")?.pointer("/execution_result/status")?.as_str()?;
    Some(status.to_owned())
}
