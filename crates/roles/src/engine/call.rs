//! One role call, whatever it is for: a step of a task's lifecycle, a blueprint
//! step, or a lane's handling of an entry. The role runs, then its retries with
//! backoff, then its fallbacks, until one attempt's output is accepted; every
//! attempt is recorded before it starts and again when it ends, with its raw
//! output beside it; each run holds a permit, its instance's token works only
//! while it runs, and a refused reply is retried with the reason as feedback (a
//! reply cut off at its completion limit, with twice the room).
//!
//! What differs between a task's step and an entry (the slice a step is handed,
//! its board and progress page, where the records go) is the [`Site`]'s.

use clawboard_core::Timestamp;
use clawboard_core::backoff::Backoff;
use clawboard_core::lock::Lock;
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use clawboard_records::escalations;
use serde_json::Value;

use super::{StepError, spans};
use crate::Engine;
use crate::config::RoleConfig;
use crate::output::RaisedEscalation;
use crate::replay::Answer;
use crate::reply::ReplyShape;
use crate::runner::{self, RunIdentity, RunOutcome, RunStatus};

/// An accepted output, and the escalations it raises (none for most).
pub(crate) trait RoleOutput {
    fn escalations(&self) -> &[RaisedEscalation] {
        &[]
    }
}

/// Longest fallback chain followed (a cycle in config ends here too).
const MAX_FALLBACKS: usize = 4;

/// What to run: the role and its fallbacks, for one step.
pub(crate) struct Call<'c> {
    /// The step the attempt records name (`pm`, `iter-2/creator-code`, a lane's `docupdate/Aya`).
    pub step: &'c str,
    /// The role, then the roles to fall back to, in order.
    pub chain: Vec<String>,
    /// How often each role is retried (a blueprint step's own count); `None`: each
    /// role's `max_retries`.
    pub retries: Option<u32>,
}

impl Call<'_> {
    /// `role`, then the `fallback` of each role in turn (a cycle or a chain longer
    /// than [`MAX_FALLBACKS`] ends it).
    pub(crate) fn fallbacks_of(cfg: &crate::config::RolesConfig, role: &str) -> Vec<String> {
        let mut chain = vec![role.to_owned()];
        while let Some(next) = chain.last().and_then(|r| cfg.roles.get(r)).and_then(|r| r.fallback.clone()) {
            if chain.contains(&next) || chain.len() > MAX_FALLBACKS {
                break;
            }
            chain.push(next);
        }
        chain
    }
}

/// Where a call runs: what a run is handed, where its attempts are recorded, and
/// what is kept up to date around each run.
pub(crate) trait Site {
    /// What a run is handed beyond its context (a step's board slice), kept to
    /// finish its ledger entry once the run ended.
    type Handed;

    fn engine(&self) -> &Engine;
    /// The task the run is for; empty for an entry (never fenced, not in
    /// `roles/active.json`).
    fn task_id(&self) -> &str;
    /// Where the attempt records go.
    fn records_dir(&self) -> &str;
    /// Every attempt recorded there so far, by number.
    fn attempts(&self) -> &Lock<Vec<Attempt>>;
    /// Before the attempt is recorded: what the run is handed (a step over its
    /// budget fails here, before anything runs).
    async fn hand(&self, role_id: &str, role: &RoleConfig, instance: &str) -> Result<Option<Self::Handed>, StepError>;
    /// The run's context on stdin (the executor adds the instance, attempt and feedback).
    fn context(&self, handed: Option<&Self::Handed>, role_id: &str, role: &RoleConfig) -> Value;
    /// The shape the reply is asked in, with room for `cut_offs` replies cut off before.
    fn shape(&self, cut_offs: u32) -> ReplyShape;
    /// While the run starts: the instance is listed with its token.
    fn started(&self, attempt: &Attempt, token: &str, handed: Option<&mut Self::Handed>) -> Result<(), StepError>;
    /// The run's attempt is recorded: what it was handed is accounted for (the
    /// slice's ledger entry, when it was handed one).
    fn recorded(
        &self,
        handed: Self::Handed,
        attempt: &Attempt,
        out: &RunOutcome,
    ) -> Result<Option<clawboard_board::ledger::Handout>, StepError>;
    /// The span the run's span goes under (the task's root), when traced.
    fn trace(&self) -> Option<crate::telemetry::SpanContext> {
        None
    }
    /// The run's span, ended: sent once the board writes of its run are
    /// known (by default at once, with none).
    fn span_ended(&self, _instance: &str, span: crate::telemetry::SpanData) {
        spans::sent_with_writes(span, 0);
    }
    /// The instance is gone (whatever the outcome).
    fn ended(&self, instance: &str) -> Result<(), StepError>;
    /// An attempt's output was accepted.
    fn succeeded(&self, attempt: &Attempt, raised: &[RaisedEscalation]) -> Result<(), StepError>;
    /// An attempt failed: `message` for the logs (with its stderr), `error` in
    /// short, `kind` as the board's error type; `retry` counts the role's tries.
    fn failed(&self, kind: &str, message: &str, error: &str, retry: u32) -> Result<(), StepError>;
}

/// How one attempt of a role ended, short of stopping the call.
enum Tried<T> {
    Done(Attempt, T),
    /// Failed: retried while retries are left.
    Failed {
        error: String,
        /// Its role's remaining retries would fail too (see `RunOutcome::skip_retries`).
        skip_retries: bool,
        /// The reply was cut off at its completion limit.
        cut_off: bool,
    },
}

/// The output of the call's `ok` attempt, if one is recorded and still accepted
/// (a step found done after a restart is not run again).
pub(crate) fn finished<S: Site, T>(
    site: &S,
    step: &str,
    accept: &impl Fn(&[u8]) -> Result<T, String>,
) -> Result<Option<(Attempt, T)>, StepError> {
    let done = site.attempts().lock().iter().rev().find(|a| a.step == step && a.status == AttemptStatus::Ok).cloned();
    let Some(a) = done else { return Ok(None) };
    let stdout = attempts::read_stdout_in(&site.engine().store, site.records_dir(), &a)?;
    match accept(&stdout) {
        Ok(out) => Ok(Some((a, out))),
        Err(e) => {
            tracing::warn!(
                task = %site.task_id(),
                step = %step,
                "a finished attempt's output no longer passes ({e}); running the step again"
            );
            Ok(None)
        }
    }
}

/// Runs the call's roles in turn, each with its retries, until one attempt's
/// stdout is accepted.
pub(crate) async fn run<S: Site, T: RoleOutput>(
    site: &S,
    call: &Call<'_>,
    accept: &impl Fn(&[u8]) -> Result<T, String>,
) -> Result<(Attempt, T), StepError> {
    let engine = site.engine();
    let cfg = engine.roles();
    let mut last_error = String::new();
    // Why earlier attempts of this step were refused, told to the next one.
    let mut feedback: Vec<String> = Vec::new();
    // Replies cut off at their completion limit: each retry gets twice the room.
    let mut cut_offs = 0;
    for (n, role_id) in call.chain.iter().enumerate() {
        let Some(role) = cfg.roles.get(role_id) else {
            last_error = format!("role {role_id:?} is not configured under [roles]");
            continue;
        };
        let fallback_from = (n > 0).then(|| call.chain[n - 1].as_str());
        if let Some(from) = fallback_from {
            tracing::info!(task = %site.task_id(), step = %call.step, "falling back from {from} to {role_id}");
        }
        for retry in 0..=call.retries.unwrap_or(role.max_retries) {
            if *engine.shutdown.stopping.borrow() {
                return Err(StepError::Stopped);
            }
            if retry > 0 && engine.recording().is_none() {
                backoff(engine, role.retry_backoff, retry).await?;
            }
            let tries = Tries { feedback: &feedback, cut_offs, retry, fallback_from };
            match attempt(site, call.step, role_id, role, accept, &tries).await? {
                Tried::Done(attempt, output) => return Ok((attempt, output)),
                Tried::Failed { error, skip_retries, cut_off } => {
                    cut_offs += u32::from(cut_off);
                    feedback.push(error.clone());
                    last_error = error;
                    if skip_retries {
                        tracing::info!(
                            task = %site.task_id(),
                            step = %call.step,
                            "{role_id}: its retries are skipped: no retry gets past this ({last_error})"
                        );
                        break;
                    }
                }
            }
        }
    }
    Err(StepError::Failed(format!("step {} failed: {last_error}", call.step)))
}

/// The longest wait between two tries of a role, however many retries it has.
const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Waits the role's `retry_backoff`, doubled for each retry after the first (at most
/// [`MAX_RETRY_WAIT`]); the daemon's stop ends the wait.
async fn backoff(engine: &Engine, base: std::time::Duration, retry: u32) -> Result<(), StepError> {
    let delay = Backoff::new(base, MAX_RETRY_WAIT.max(base)).delay(retry - 1);
    let mut stopping = engine.shutdown.stopping.clone();
    tokio::select! {
        _ = tokio::time::sleep(delay) => Ok(()),
        _ = runner::fired(&mut stopping) => Err(StepError::Stopped),
    }
}

/// What the tries of a step before this one left: why they were refused, how
/// many replies were cut off, and which role this one falls back from.
struct Tries<'a> {
    feedback: &'a [String],
    cut_offs: u32,
    retry: u32,
    fallback_from: Option<&'a str>,
}

/// Runs `role` once. An error stops the call; [`Tried::Failed`] may be retried.
async fn attempt<S: Site, T: RoleOutput>(
    site: &S,
    step: &str,
    role_id: &str,
    role: &RoleConfig,
    accept: &impl Fn(&[u8]) -> Result<T, String>,
    tries: &Tries<'_>,
) -> Result<Tried<T>, StepError> {
    let engine = site.engine();
    let _permit = engine.roles.clone().acquire_owned().await.map_err(|_| StepError::Stopped)?;
    engine.held(site.task_id()).await?;
    let recorded = match engine.recording().map(|r| r.take(step, role_id)) {
        Some(Answer::Stop) => return Err(StepError::Stopped),
        Some(Answer::Recorded(rec)) => Some(rec),
        Some(Answer::Live) | None => None,
    };
    // A replayed attempt is handled in the order the recorded ones ended; it is
    // done with on every way out of here.
    let _handled = recorded.as_deref().zip(engine.recording()).map(|(rec, r)| Handled(r, rec));
    let instance_id = match &recorded {
        // The recorded instance again: the products that name it read as they did.
        Some(rec) => rec.attempt.instance_id.clone(),
        None => format!("inst-{}", clawboard_core::id::random_hex(6)),
    };
    let mut handed = site.hand(role_id, role, &instance_id).await?;
    let mut attempt = open_attempt(site, step, role_id, &instance_id)?;
    let shape = site.shape(tries.cut_offs);
    let ctx = context_of(site, handed.as_ref(), role_id, role, &attempt, tries.feedback);
    let input = runner::input_of(role, &ctx, &shape);
    attempts::save_input_in(&engine.store, site.records_dir(), &attempt, &input)?;
    if let (Some(r), Some(rec)) = (engine.recording(), &recorded) {
        r.handed(rec, &input);
    }
    let why = spans::Why {
        retry: tries.retry,
        last_error: tries.feedback.last().map(String::as_str),
        fallback_from: tries.fallback_from,
        replayed: recorded.is_some(),
    };
    let span = spans::agent(site.trace().as_ref(), site.task_id(), &attempt, &why);
    let who = RunIdentity {
        root: engine.store.root().display().to_string(),
        task_id: site.task_id().to_owned(),
        role: role_id.to_owned(),
        instance_id: instance_id.clone(),
        // 128 bits from the OS; without OS randomness no token (none matches an empty one).
        token: clawboard_core::token::secret_hex(16).unwrap_or_default(),
        sandbox: engine.roles().sandbox.for_role(role),
        trace: span.context(),
    };
    let context_bytes = serde_json::to_vec(&ctx).unwrap_or_default();
    let mut kill = engine.shutdown.kill.clone();
    // The process starts at the run's first poll; the bookkeeping (the instance
    // list, the whole board's count for the ledger) is done while it runs.
    // The token is valid while the role runs, not a moment longer, whatever happens
    // next (an early return, or this future dropped).
    let revoke = Revoke(engine, who.token.clone());
    let run = async {
        match (&recorded, engine.recording()) {
            (Some(rec), Some(r)) => {
                r.turn(rec).await;
                rec.outcome()
            }
            _ => runner::run_shaped(role, &context_bytes, &shape, &who, &mut kill).await,
        }
    };
    let (out, started) = tokio::join!(run, async { site.started(&attempt, &who.token, handed.as_mut()) });
    drop(revoke);
    tracing::debug!(task = %site.task_id(), step = %step, "the run ended");
    started?;
    // Taken over while the role ran (the claim is confirmed again): its result is not this node's to write.
    if let Err(e) = engine.confirmed(site.task_id()).await {
        site.ended(&instance_id)?;
        return Err(e);
    }
    let accepted = judge(&mut attempt, &out, accept);
    // Then the escalations it raised through the API while it ran (after the
    // output's, which the site pairs with the output by position).
    attempt.escalations.extend(engine.take_raised(&instance_id));
    if let Some(rec) = &recorded
        && rec.attempt.escalations.len() >= attempt.escalations.len()
    {
        // The recorded ids: their recorded decisions decide the replay's hold.
        attempt.escalations.clone_from(&rec.attempt.escalations);
    }
    let slice = record(site, &mut attempt, &out, handed)?;
    if let Some(span) = spans::agent_ended(span, &attempt, slice.as_ref()) {
        site.span_ended(&instance_id, span);
    }
    site.ended(&instance_id)?;
    settle(site, step, role_id, attempt, &out, accepted).await
}

/// The run's context: what the site hands it, with its instance, attempt number
/// and why the tries before it were refused.
fn context_of<S: Site>(
    site: &S,
    handed: Option<&S::Handed>,
    role_id: &str,
    role: &RoleConfig,
    attempt: &Attempt,
    feedback: &[String],
) -> Value {
    let mut ctx = site.context(handed, role_id, role);
    if let Some(o) = ctx.as_object_mut() {
        o.insert("instanceId".into(), attempt.instance_id.clone().into());
        o.insert("attempt".into(), attempt.number.into());
        if !feedback.is_empty() {
            o.insert("feedback".into(), feedback.into());
        }
    }
    ctx
}

/// Records the ended run: its output first, its record second (an `ok` record
/// always has its output beside it), then what it was handed.
fn record<S: Site>(
    site: &S,
    attempt: &mut Attempt,
    out: &RunOutcome,
    handed: Option<S::Handed>,
) -> Result<Option<clawboard_board::ledger::Handout>, StepError> {
    let engine = site.engine();
    attempt.ended_at = Some(Timestamp::now_millis());
    attempt.elapsed_ms = Some(u64::try_from(out.elapsed.as_millis()).unwrap_or(u64::MAX));
    attempts::save_output_in(&engine.store, site.records_dir(), attempt, &out.stdout, &out.stderr)?;
    attempts::save_in(&engine.store, site.records_dir(), attempt)?;
    let slice = match handed {
        Some(h) => site.recorded(h, attempt, out)?,
        None => None,
    };
    engine.count_run(attempt.status);
    if let Some(slot) = site.attempts().lock().iter_mut().find(|a| a.number == attempt.number) {
        *slot = attempt.clone();
    }
    Ok(slice)
}

/// What the recorded attempt means for the call: done, failed (retried while
/// retries are left), or stopped.
async fn settle<S: Site, T: RoleOutput>(
    site: &S,
    step: &str,
    role_id: &str,
    attempt: Attempt,
    out: &RunOutcome,
    accepted: Option<T>,
) -> Result<Tried<T>, StepError> {
    match (attempt.status, accepted) {
        (AttemptStatus::Ok, Some(o)) => {
            site.succeeded(&attempt, o.escalations())?;
            site.engine().step_done(site.task_id()).await?;
            Ok(Tried::Done(attempt, o))
        }
        (AttemptStatus::Interrupted, _) => Err(StepError::Stopped),
        _ => {
            let err = attempt.error.clone().unwrap_or_else(|| "failed".into());
            let tail = attempts::tail(&out.stderr, 2000);
            let message = format!(
                "{step} ({role_id}, attempt {}, {}): {err}{}",
                attempt.number,
                attempt.file_stem(),
                if tail.is_empty() { String::new() } else { format!("\nstderr: {tail}") }
            );
            let error = format!("{role_id}: {err}");
            let retry = site.attempts().lock().iter().filter(|a| a.step == step && a.role == role_id).count();
            site.failed(
                failure_kind(attempt.status, &err),
                &message,
                &error,
                u32::try_from(retry).unwrap_or(u32::MAX),
            )?;
            Ok(Tried::Failed { error, skip_retries: out.skip_retries, cut_off: out.cut_off })
        }
    }
}

/// A new attempt, numbered and recorded, durable with every record before it
/// (its slice's, the board's) in one sync before the role can act: a crash from
/// here on finds it.
fn open_attempt<S: Site>(site: &S, step: &str, role_id: &str, instance_id: &str) -> Result<Attempt, StepError> {
    let store = &site.engine().store;
    let mut attempt = Attempt {
        number: 0,
        step: step.to_owned(),
        role: role_id.to_owned(),
        instance_id: instance_id.to_owned(),
        started_at: Timestamp::now_millis(),
        status: AttemptStatus::Running,
        ended_at: None,
        exit_code: None,
        error: None,
        elapsed_ms: None,
        escalations: Vec::new(),
        forked_from: None,
    };
    // Number and register in one critical section: parallel roles of a step
    // group must never share a number.
    {
        let mut v = site.attempts().lock();
        attempt.number = v.iter().map(|a| a.number).max().unwrap_or(0) + 1;
        v.push(attempt.clone());
    }
    attempts::save_in(store, site.records_dir(), &attempt)?;
    let sync_started = std::time::Instant::now();
    store.sync_records()?;
    tracing::debug!(
        task = %site.task_id(),
        step = %step,
        role = role_id,
        sync_us = sync_started.elapsed().as_micros(),
        "starting a run"
    );
    Ok(attempt)
}

/// The run's outcome into `attempt` (status, error, exit code, the ids of the
/// escalations its output raises); the accepted output, if it was.
fn judge<T: RoleOutput>(
    attempt: &mut Attempt,
    out: &RunOutcome,
    accept: &impl Fn(&[u8]) -> Result<T, String>,
) -> Option<T> {
    attempt.status = out.status.into();
    attempt.error = out.error.clone();
    attempt.exit_code = out.exit_code;
    if out.status != RunStatus::Exited {
        return None;
    }
    match accept(&out.stdout) {
        Ok(o) => {
            attempt.escalations = o.escalations().iter().map(|_| escalations::new_id()).collect();
            Some(o)
        }
        Err(e) => {
            attempt.status = AttemptStatus::Failed;
            attempt.error = Some(format!("invalid output: {e}"));
            None
        }
    }
}

/// The board's error type of a failed attempt.
fn failure_kind(status: AttemptStatus, err: &str) -> &'static str {
    match status {
        AttemptStatus::TimedOut => "component_timeout",
        _ if err.starts_with("invalid output: sensitive_filter_failed") => "sensitive_filter_failed",
        _ if err.starts_with("invalid output: platform_compliance_failed") => "platform_compliance_failed",
        _ if err.starts_with("invalid output") => "invalid_output",
        _ => "attempt_failed",
    }
}

/// Tells the replay's recording that the attempt it answered was handled, when dropped.
struct Handled<'r>(&'r crate::replay::Recording, &'r crate::replay::Recorded);

impl Drop for Handled<'_> {
    fn drop(&mut self) {
        self.0.done(self.1);
    }
}

/// Revokes a role instance's token when dropped.
struct Revoke<'e>(&'e Engine, String);

impl Drop for Revoke<'_> {
    fn drop(&mut self) {
        self.0.revoke_token(&self.1);
    }
}
