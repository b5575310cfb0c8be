//! `tasks/{id}/status.md`: a live progress page for humans.

use std::fmt::Write;

use clawboard_core::formats::Task;

/// What the page shows.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub step: String,
    pub iteration: u32,
    pub max_iterations: u32,
    /// (instance, role, step, started) of running instances.
    pub running: Vec<(String, String, String, String)>,
    /// (iteration, score, pass) of each validation so far.
    pub scores: Vec<(u32, f64, bool)>,
    pub attempts: usize,
    pub last_error: Option<String>,
    /// Escalation ids the task waits on.
    pub held_by: Vec<String>,
    pub outcome: Option<String>,
    /// The slice ledger's totals, when the task handed out slices.
    pub tokens: Option<clawboard_board::ledger::Totals>,
    /// A blueprint task's blueprint and its steps' states (seed 001).
    pub blueprint: Option<(String, Vec<(String, String)>)>,
}

pub fn render(task: &Task, p: &Progress) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} — {}\n", task.task_id, p.outcome.as_deref().unwrap_or(task.status.as_str()));
    let _ = writeln!(s, "{}\n", task.description.lines().next().unwrap_or(""));
    let _ = writeln!(s, "- type: {} · priority: {}", task.kind, task.priority);
    if let Some(pm) = &task.assigned_pm {
        let _ = writeln!(s, "- PM: {pm}");
    }
    let _ = writeln!(s, "- step: {}", if p.step.is_empty() { "-" } else { &p.step });
    if p.iteration > 0 {
        let _ = writeln!(s, "- iteration: {} of {}", p.iteration, p.max_iterations);
    }
    let _ = writeln!(s, "- role runs so far: {}", p.attempts);
    if let Some(t) = &p.tokens {
        let _ = writeln!(
            s,
            "- tokens (o200k): {} slices handed out, {} tokens (the whole board each time: {}); roles report {} prompt + {} completion",
            t.slices, t.slice_tokens, t.full_tokens, t.prompt_tokens, t.completion_tokens
        );
    }
    let _ = writeln!(s, "- updated: {}", clawboard_core::Timestamp::now());
    if !p.held_by.is_empty() {
        let _ = writeln!(s, "\n## Waiting for a human\n");
        for id in &p.held_by {
            let _ = writeln!(
                s,
                "- escalation `{id}`: `clawboard escalations approve {id}` or `clawboard escalations reject {id} --note WHY`"
            );
        }
    }
    if !p.running.is_empty() {
        let _ = writeln!(s, "\n## Running\n\n| instance | role | step | started |\n| --- | --- | --- | --- |");
        for (inst, role, step, started) in &p.running {
            let _ = writeln!(s, "| {inst} | {role} | {step} | {started} |");
        }
    }
    if let Some((id, steps)) = &p.blueprint {
        let _ = writeln!(s, "\n## Blueprint {id}\n\n| step | state |\n| --- | --- |");
        for (step, state) in steps {
            let _ = writeln!(s, "| {step} | {state} |");
        }
    }
    if !p.scores.is_empty() {
        let _ = writeln!(s, "\n## Validation\n\n| iteration | score | pass |\n| --- | --- | --- |");
        for (i, score, pass) in &p.scores {
            let _ = writeln!(s, "| {i} | {score} | {pass} |");
        }
    }
    if let Some(e) = &p.last_error {
        let _ = writeln!(s, "\n## Last error\n\n```\n{e}\n```");
    }
    s
}
