//! Replaying a recorded task: every role call answered from the attempt the
//! recorded run made for the same step and role (its reply, exit status, error,
//! usage and duration), with what the role would be handed now compared with what
//! it was handed then.
//!
//! A [`Recording`] is read from the original task's files (never written). The
//! engine that replays holds it ([`crate::Engine::replaying`]); the one executor of
//! role calls (`engine/call.rs`) asks it for each attempt's answer instead of
//! starting the role, and tells it what the attempt was handed. What it found, step
//! by step, is [`Recording::steps`]; the boards are compared with [`compare_boards`].
//!
//! What two runs of one flow never share is masked before comparing: times
//! (RFC 3339 stamps) and the attempt's number. Instance ids are the recorded ones
//! (the replay reuses them), so the products that name them match.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use clawboard_board::ledger::{self, Usage};
use clawboard_board::task_board::{Record, TaskBoard};
use clawboard_core::lock::Lock;
use clawboard_core::{Error, Store};
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use serde::Serialize;
use serde_json::{Value, json};

use crate::runner::{RunOutcome, RunStatus};

/// One attempt of the recorded run, with what it printed and was handed.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub attempt: Attempt,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// What it was handed (`None`: not kept for this attempt).
    pub input: Option<Value>,
    pub usage: Option<Usage>,
    /// No later attempt of this role at this step was recorded: the call went on to
    /// its fallback, or failed, after this one.
    pub last_of_role: bool,
}

impl Recorded {
    /// The run's outcome as it was recorded: no process, no request.
    pub(crate) fn outcome(&self) -> RunOutcome {
        let a = &self.attempt;
        let refused = a.error.as_deref().is_some_and(|e| e.starts_with("invalid output"));
        let status = match a.status {
            AttemptStatus::Ok => RunStatus::Exited,
            // Its process exited and its output was refused: judged again, by today's rules.
            AttemptStatus::Failed if refused => RunStatus::Exited,
            AttemptStatus::Failed => RunStatus::Failed,
            AttemptStatus::TimedOut => RunStatus::TimedOut,
            AttemptStatus::Interrupted | AttemptStatus::Running => RunStatus::Interrupted,
        };
        let error = match status {
            RunStatus::Exited => None,
            _ => a.error.clone(),
        };
        RunOutcome {
            status,
            exit_code: a.exit_code,
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            error,
            elapsed: std::time::Duration::from_millis(a.elapsed_ms.unwrap_or(0)),
            usage: self
                .usage
                .map(|u| json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens})),
            // What the recorded call did next: no retry of this role when none was recorded.
            skip_retries: self.last_of_role && a.status != AttemptStatus::Ok,
            cut_off: a.error.as_deref().is_some_and(|e| e.contains(crate::runner::llm_cut_off())),
        }
    }
}

/// What a step of the replay found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Handed the same input as then, and answered as then.
    Same,
    /// Handed something else now: see the diff.
    InputDiffers,
    /// Answered as then; what it was handed then was not kept, so not compared.
    InputNotKept,
    /// A fork's step copied from the task it was forked from: handed there, under
    /// that task's id, so not compared.
    Copied,
    /// The recorded run never reached this step (or never finished it).
    NotRecorded,
    /// Not recorded, and run by the real role (`--live`).
    Live,
    /// The recorded attempt was cut short by a crash and never ran again.
    CutShort,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::InputDiffers => "input differs",
            Verdict::InputNotKept => "input not kept",
            Verdict::Copied => "copied",
            Verdict::NotRecorded => "not recorded",
            Verdict::Live => "live",
            Verdict::CutShort => "cut short",
        }
    }

    /// Whether the step counts as a difference (exit 1).
    pub fn differs(self) -> bool {
        matches!(self, Verdict::InputDiffers | Verdict::NotRecorded | Verdict::Live | Verdict::CutShort)
    }
}

/// One role call of the replay.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: String,
    pub role: String,
    /// The recorded attempt that answered (its number in the original task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<u32>,
    pub verdict: Verdict,
    /// What the role would see now against what it saw then (`-` then, `+` now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The recorded attempt's status (`ok`, `failed` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<AttemptStatus>,
    /// How long the recorded run took (ms), saved by answering it from the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_ms: Option<u64>,
}

/// A recorded task's attempts, handed out one by one to the replay's calls.
pub struct Recording {
    pub task: String,
    /// The original's trace, which the replay's links to.
    pub trace: Option<crate::telemetry::TaskTrace>,
    attempts: Vec<Recorded>,
    /// The model's own count of each slice recorded, by (instance, slice hash).
    model_counts: BTreeMap<(String, String), u64>,
    used: Lock<Vec<bool>>,
    /// Recorded attempts being answered now, with when they ended then: one ends
    /// only after those that ended before it (steps side by side end in the order
    /// they did, and write the board in that order).
    in_flight: Lock<Vec<(u32, i64)>>,
    ended: tokio::sync::Notify,
    /// Steps the recording never reached run on the real roles.
    live: bool,
    steps: Lock<Vec<StepReport>>,
}

/// What a call gets for an attempt.
pub(crate) enum Answer {
    Recorded(Box<Recorded>),
    /// No recorded attempt: run the role (`--live`).
    Live,
    /// No recorded attempt: the replay stops here.
    Stop,
}

impl Recording {
    /// The attempts of task `task` in `store` (the original tree; only read).
    pub fn load(store: &Store, task: &str, live: bool) -> Result<Recording, Error> {
        let dir = attempts::attempts_dir(task);
        let mut out = Vec::new();
        let handouts = ledger::list(store, task).map_err(|e| match e {
            clawboard_board::Error::Store(e) => e,
            other => Error::io(format!("tasks/{task}/board/slices"), std::io::Error::other(other.to_string())),
        })?;
        let model_counts =
            handouts.iter().filter_map(|h| Some(((h.instance.clone()?, h.hash.clone()), h.model_tokens?))).collect();
        let usage: BTreeMap<String, Usage> =
            handouts.into_iter().filter_map(|h| Some((h.instance?, h.usage?))).collect();
        for a in attempts::load_in(store, &dir)? {
            let stdout = attempts::read_stdout_in(store, &dir, &a)?;
            let stderr = attempts::read_stderr_in(store, &dir, &a)?;
            let input = attempts::read_input_in(store, &dir, &a)?;
            let usage = usage.get(&a.instance_id).copied();
            out.push(Recorded { attempt: a, stdout, stderr, input, usage, last_of_role: false });
        }
        let used = Lock::new(vec![false; out.len()]);
        let trace = crate::telemetry::read_task_trace(store, task).unwrap_or_else(|e| {
            tracing::warn!(task = %task, "the replay's trace is not linked to the original's: {e}");
            None
        });
        Ok(Recording {
            task: task.to_owned(),
            trace,
            attempts: out,
            model_counts,
            used,
            in_flight: Lock::new(Vec::new()),
            ended: tokio::sync::Notify::new(),
            live,
            steps: Lock::new(Vec::new()),
        })
    }

    /// Waits until every recorded attempt being answered now that ended before
    /// `rec` did has been handled (see [`Recording::done`]). Calls beside it reach
    /// their own `take` first: the runtime runs them before this wait ends.
    pub(crate) async fn turn(&self, rec: &Recorded) {
        let mine = ended_ms(&rec.attempt);
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        loop {
            let ended = self.ended.notified();
            let earlier = self.in_flight.lock().iter().any(|(n, at)| *n != rec.attempt.number && *at < mine);
            if !earlier {
                return;
            }
            ended.await;
        }
    }

    /// The attempt answered by `rec` was handled (recorded, its failure or output written).
    pub(crate) fn done(&self, rec: &Recorded) {
        self.in_flight.lock().retain(|(n, _)| *n != rec.attempt.number);
        self.ended.notify_waiters();
    }

    /// The model's own count of the slice `hash` handed to `instance`, as the
    /// recorded run's server gave it (`None`: that slice was not handed then).
    pub(crate) fn model_tokens(&self, instance: &str, hash: &str) -> Option<u64> {
        self.model_counts.get(&(instance.to_owned(), hash.to_owned())).copied()
    }

    /// The recorded attempts, by number.
    pub fn attempts(&self) -> &[Recorded] {
        &self.attempts
    }

    /// The answer for the next attempt of `role` at `step`: the first recorded one
    /// not used yet. Attempts a crash cut short and that ran again after (a
    /// restart, a takeover) are passed over: the run that counted came after.
    pub(crate) fn take(&self, step: &str, role: &str) -> Answer {
        let mut used = self.used.lock();
        let matching = |i: &usize| {
            let a = &self.attempts[*i].attempt;
            !used[*i] && a.step == step && a.role == role
        };
        let candidates: Vec<usize> = (0..self.attempts.len()).filter(matching).collect();
        for (k, &i) in candidates.iter().enumerate() {
            let status = self.attempts[i].attempt.status;
            let cut = matches!(status, AttemptStatus::Interrupted | AttemptStatus::Running);
            if cut && k + 1 < candidates.len() {
                used[i] = true;
                continue;
            }
            if cut {
                drop(used);
                self.push(StepReport {
                    step: step.to_owned(),
                    role: role.to_owned(),
                    recorded: Some(self.attempts[i].attempt.number),
                    verdict: Verdict::CutShort,
                    diff: None,
                    status: Some(status),
                    recorded_ms: None,
                });
                return Answer::Stop;
            }
            used[i] = true;
            let a = &self.attempts[i].attempt;
            self.in_flight.lock().push((a.number, ended_ms(a)));
            let mut answer = self.attempts[i].clone();
            answer.last_of_role = k + 1 == candidates.len();
            return Answer::Recorded(Box::new(answer));
        }
        drop(used);
        self.push(StepReport {
            step: step.to_owned(),
            role: role.to_owned(),
            recorded: None,
            verdict: if self.live { Verdict::Live } else { Verdict::NotRecorded },
            diff: None,
            status: None,
            recorded_ms: None,
        });
        if self.live { Answer::Live } else { Answer::Stop }
    }

    /// The attempt `rec` answered was handed `now`: compared with what it was handed then.
    pub(crate) fn handed(&self, rec: &Recorded, now: &Value) {
        let a = &rec.attempt;
        let (verdict, diff) = match &rec.input {
            _ if a.forked_from.is_some() => (Verdict::Copied, None),
            None => (Verdict::InputNotKept, None),
            Some(then) => {
                let (then, now) = (shown(then), shown(now));
                if then == now { (Verdict::Same, None) } else { (Verdict::InputDiffers, Some(line_diff(&then, &now))) }
            }
        };
        self.push(StepReport {
            step: a.step.clone(),
            role: a.role.clone(),
            recorded: Some(a.number),
            verdict,
            diff,
            status: Some(a.status),
            recorded_ms: a.elapsed_ms,
        });
    }

    fn push(&self, r: StepReport) {
        self.steps.lock().push(r);
    }

    /// What each role call of the replay found, in the order they ran.
    pub fn steps(&self) -> Vec<StepReport> {
        self.steps.lock().clone()
    }

    /// Recorded attempts no call of the replay asked for (the recorded run went
    /// further, or elsewhere): their steps, in order.
    pub fn unused(&self) -> Vec<&Attempt> {
        let used = self.used.lock();
        self.attempts
            .iter()
            .zip(used.iter())
            .filter(|(r, u)| !**u && !matches!(r.attempt.status, AttemptStatus::Interrupted | AttemptStatus::Running))
            .map(|(r, _)| &r.attempt)
            .collect()
    }
}

/// When a recorded attempt ended (ms since the epoch; its start when it never did).
fn ended_ms(a: &Attempt) -> i64 {
    a.ended_at.as_ref().unwrap_or(&a.started_at).instant().timestamp_millis()
}

/// Times and durations, which differ on every run, masked: RFC 3339 stamps, and
/// the measured milliseconds of a run (`execution_time_ms`, `elapsedMs`).
fn masked(text: &str) -> String {
    static PATTERNS: OnceLock<Option<(regex::Regex, regex::Regex)>> = OnceLock::new();
    let res = PATTERNS.get_or_init(|| {
        let stamp = regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})").ok()?;
        let ms = regex::Regex::new(r#"("(?:execution_time_ms|elapsed_ms|elapsedMs|duration_ms)"\s*:\s*)\d+"#).ok()?;
        Some((stamp, ms))
    });
    match res {
        Some((stamp, ms)) => ms.replace_all(&stamp.replace_all(text, "<time>"), "${1}<ms>").into_owned(),
        None => text.to_owned(),
    }
}

/// An input as a person reads it: a model request's messages as their text, one
/// after another, then the rest of the request; anything else as pretty JSON.
/// Times are masked.
pub fn shown(input: &Value) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    let Some(request) = input.get("request") else { return masked(&pretty(input)) };
    let mut text = String::new();
    if let Some(messages) = request.get("messages").and_then(Value::as_array) {
        for m in messages {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
            let content = m.get("content").map(|c| c.as_str().map_or_else(|| pretty(c), str::to_owned));
            text.push_str(&format!("[{role}]\n{}\n\n", content.unwrap_or_default()));
        }
    }
    let mut rest = request.clone();
    if let Some(o) = rest.as_object_mut() {
        o.remove("messages");
    }
    text.push_str(&format!("[request]\n{}\n", pretty(&rest)));
    masked(&text)
}

/// The lines of `then` and `now` that differ, with two lines of context around
/// each change (`-` then, `+` now).
pub fn line_diff(then: &str, now: &str) -> String {
    let a: Vec<&str> = then.lines().collect();
    let b: Vec<&str> = now.lines().collect();
    // Longest common subsequence over lines (inputs are a few hundred lines at most).
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|(c, _)| *c != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped {
                out.push_str("  …\n");
                skipped = false;
            }
            out.push_str(&format!("{c} {line}\n"));
        } else {
            skipped = true;
        }
    }
    if skipped && !out.is_empty() {
        out.push_str("  …\n");
    }
    out
}

/// A board path whose writes differ between the recorded run and the replay.
#[derive(Debug, Clone, Serialize)]
pub struct BoardDifference {
    pub path: String,
    /// The steps' roles that wrote it, then and now.
    pub writers: Vec<String>,
    pub then: Vec<Value>,
    pub now: Vec<Value>,
}

/// The writes of each board path in the recorded task (`then`) and the replayed
/// one (`now`); the paths whose writes differ. Steps running side by side
/// interleave differently from run to run, on one path too (two candidates'
/// errors appended): each path's writes are compared as a set, not in order.
pub fn compare_boards(then: &Store, now: &Store, task: &str) -> Result<Vec<BoardDifference>, Error> {
    let by_path = |store: &Store| -> Result<BTreeMap<String, Vec<Record>>, Error> {
        let board = TaskBoard::new(store, task).map_err(board_err)?;
        let mut map: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        if board.exists() {
            for r in board.history(None).map_err(board_err)? {
                map.entry(r.path.clone()).or_default().push(r);
            }
        }
        Ok(map)
    };
    let (a, b) = (by_path(then)?, by_path(now)?);
    let write = |r: &Record| json!({"op": r.op, "value": r.value, "by": r.actor.role});
    let mut out = Vec::new();
    for path in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
        let then: Vec<Value> = a.get(path).map(|v| v.iter().map(write).collect()).unwrap_or_default();
        let now: Vec<Value> = b.get(path).map(|v| v.iter().map(write).collect()).unwrap_or_default();
        // In any order: steps running side by side write one path (an error appended) in either order.
        let sorted = |v: &[Value]| {
            let mut texts: Vec<String> = v.iter().map(|w| masked(&w.to_string())).collect();
            texts.sort();
            texts
        };
        let same = sorted(&then) == sorted(&now);
        if !same {
            let mut writers: Vec<String> =
                then.iter().chain(&now).filter_map(|w| w["by"].as_str().map(str::to_owned)).collect();
            writers.dedup();
            out.push(BoardDifference { path: path.clone(), writers, then, now });
        }
    }
    Ok(out)
}

fn board_err(e: clawboard_board::Error) -> Error {
    match e {
        clawboard_board::Error::Store(e) => e,
        other => Error::io("board", std::io::Error::other(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_masked_and_a_model_request_reads_as_its_messages() {
        let input = json!({"request": {"model": "m", "messages": [
            {"role": "system", "content": "You write titles."},
            {"role": "user", "content": "topic: skin care\nat 2026-12-07T17:30:41Z"}
        ]}});
        let text = shown(&input);
        assert!(text.starts_with("[system]\nYou write titles.\n\n[user]\ntopic: skin care\nat <time>\n"), "{text}");
        assert!(text.contains("\"model\": \"m\""), "{text}");
        assert_eq!(
            masked(r#"{"execution_time_ms": 4533, "elapsedMs":12, "n": 3}"#),
            r#"{"execution_time_ms": <ms>, "elapsedMs":<ms>, "n": 3}"#
        );
    }

    #[test]
    fn a_diff_shows_the_changed_lines_with_context() {
        let then = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let now = "a\nb\nc\nD\ne\nf\ng\nh\n";
        let d = line_diff(then, now);
        assert_eq!(d, "  …\n  b\n  c\n- d\n+ D\n  e\n  f\n  …\n");
        assert!(line_diff("x\n", "x\n").is_empty());
        assert_eq!(line_diff("", "new\n"), "+ new\n");
    }

    #[test]
    fn a_recorded_attempt_answers_as_it_ended() {
        let attempt = |status, exit_code, error: Option<&str>| Recorded {
            attempt: Attempt {
                number: 1,
                step: "pm".into(),
                role: "pm".into(),
                instance_id: "inst-1".into(),
                started_at: clawboard_core::Timestamp::now(),
                status,
                ended_at: None,
                exit_code,
                error: error.map(str::to_owned),
                elapsed_ms: Some(1200),
                escalations: Vec::new(),
                forked_from: None,
            },
            stdout: b"{}".to_vec(),
            stderr: Vec::new(),
            input: None,
            usage: Some(Usage { prompt_tokens: 10, completion_tokens: 3 }),
            last_of_role: true,
        };
        let ok = attempt(AttemptStatus::Ok, Some(0), None).outcome();
        assert_eq!(ok.status, RunStatus::Exited);
        assert_eq!(ok.elapsed.as_millis(), 1200);
        assert_eq!(ok.usage.unwrap()["completion_tokens"], 3);
        let refused = attempt(AttemptStatus::Failed, Some(0), Some("invalid output: x")).outcome();
        assert_eq!((refused.status, refused.error), (RunStatus::Exited, None), "judged again");
        let crashed = attempt(AttemptStatus::Failed, None, Some("cannot start")).outcome();
        assert_eq!((crashed.status, crashed.error.as_deref()), (RunStatus::Failed, Some("cannot start")));
        assert!(crashed.skip_retries, "no retry of it was recorded");
        let cut =
            attempt(AttemptStatus::Failed, Some(200), Some("local: the reply was cut off at the completion limit"));
        assert!(cut.outcome().cut_off);
        let slow = attempt(AttemptStatus::TimedOut, None, Some("timed out")).outcome();
        assert_eq!(slow.status, RunStatus::TimedOut);
    }
}
