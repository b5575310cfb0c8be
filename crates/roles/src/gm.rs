//! The GM's records: `gm/pm-performance.json`, updated as each task ends, and
//! `gm/arbitrations.md`, an entry whenever the validator and a team still disagree
//! at the iteration limit (a sync conflict copy adds one too, see the sync crate).

use clawboard_core::formats::{PmPerformance, PmRecord, Task, TaskStatus, Validation};
use clawboard_core::{Error, Id, RelPath, Store, Timestamp, layout};

pub const PM_PERFORMANCE: &str = "gm/pm-performance.json";
pub const ARBITRATIONS: &str = "gm/arbitrations.md";

/// Running means: `mean` over `n` values, plus one more value.
fn add_to_mean(mean: Option<f64>, n: u64, value: f64) -> f64 {
    let old = mean.unwrap_or(0.0) * n as f64;
    (old + value) / (n + 1) as f64
}

/// Adds one ended task to `record`: its outcome and, when validated, its final score
/// and iteration count.
pub fn add_task(record: &mut PmRecord, status: TaskStatus, validation: Option<&Validation>, at: &Timestamp) {
    record.tasks += 1;
    match status {
        TaskStatus::Completed => record.completed += 1,
        TaskStatus::Failed => record.failed += 1,
        TaskStatus::Pending | TaskStatus::Running => {}
    }
    let ended = record.completed + record.failed;
    record.pass_rate = (ended > 0).then(|| record.completed as f64 / ended as f64);
    if let Some(v) = validation {
        let n = record.validated_tasks;
        record.average_score = Some(round3(add_to_mean(record.average_score, n, v.result.score)));
        record.average_iterations = Some(round3(add_to_mean(record.average_iterations, n, f64::from(v.iterations))));
        record.validated_tasks += 1;
    }
    record.last_task_at = Some(at.clone());
}

/// Three decimals are plenty for a mean, and keep the file readable and stable.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Records that `task` ended (completed or failed) under PM `pm`.
pub fn record_task_end(store: &Store, task: &Task, pm: &str) -> Result<(), Error> {
    let pm = Id::new(pm).map_err(|e| Error::UnsafePath { path: pm.to_owned(), reason: format!("PM id {e}") })?;
    let id = task.task_id.as_str();
    let validation: Option<Validation> =
        store.read(&RelPath::new(&layout::task_file(id, layout::VALIDATION_FILE))?).ok();
    let at = task.completed_at.clone().unwrap_or_else(Timestamp::now);
    let rel = RelPath::new(PM_PERFORMANCE)?;
    let update = |p: &mut PmPerformance| {
        add_task(p.pms.entry(pm.clone()).or_default(), task.status, validation.as_ref(), &at);
        p.updated_at = Some(at.clone());
    };
    match store.update_json(&rel, update) {
        Err(Error::NotFound { .. }) => {
            let mut p = PmPerformance::default();
            update(&mut p);
            store.write_json(&rel, &p)
        }
        other => other,
    }
}

/// What the validator and the team disagreed on, for `gm/arbitrations.md`.
pub struct Disagreement<'a> {
    pub task: &'a Task,
    pub pm: &'a str,
    pub validator: &'a str,
    pub team: &'a [String],
    pub iterations: u32,
    pub score: f64,
    pub issues: &'a [String],
}

/// The markdown entry for a disagreement at the iteration limit, with links
/// (relative to `gm/`) to the files a reviewer needs.
pub fn disagreement_entry(d: &Disagreement, now: &Timestamp) -> String {
    let id = d.task.task_id.as_str();
    let link = |f: &str| format!("[{f}](../{})", layout::task_file(id, f));
    let issues = if d.issues.is_empty() {
        "- (the validator named no issues)\n".to_owned()
    } else {
        d.issues.iter().map(|i| format!("- {}\n", i.replace('\n', " "))).collect()
    };
    format!(
        "\n## {now} — task {id}: validator and team disagree after {n} iterations\n\n\
         - task: {title}\n\
         - PM: {pm}; team: {team}; validator: {validator}\n\
         - last score: {score} (not passed)\n\
         - files: {task_link}, {result}, {validation}, {status}\n\
         - outcome: the task failed; resubmit it with a changed team or description, or accept the result as is.\n\n\
         Issues the validator raised:\n\n{issues}",
        n = d.iterations,
        title = crate::review::first_line(&d.task.description),
        pm = d.pm,
        team = if d.team.is_empty() { "-".to_owned() } else { d.team.join(", ") },
        validator = d.validator,
        score = d.score,
        task_link = link(layout::TASK_FILE),
        result = link(layout::RESULT_FILE),
        validation = link(layout::VALIDATION_FILE),
        status = link(layout::STATUS_FILE),
    )
}

/// Appends a disagreement to `gm/arbitrations.md`.
pub fn record_disagreement(store: &Store, d: &Disagreement) -> Result<(), Error> {
    let entry = disagreement_entry(d, &Timestamp::now());
    crate::escalations::append_text(store, &RelPath::new(ARBITRATIONS)?, &entry)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clawboard_core::formats::ValidationResult;

    fn validation(score: f64, iterations: u32) -> Validation {
        Validation {
            task_id: Id::new("t").unwrap(),
            validator_id: Id::new("validator").unwrap(),
            validated_at: Timestamp::parse("2026-11-21T10:00:00Z").unwrap(),
            iterations,
            result: ValidationResult {
                score,
                pass: score >= 7.0,
                criteria: Default::default(),
                issues: vec![],
                suggestions: vec![],
                extra: Default::default(),
            },
            extra: Default::default(),
        }
    }

    #[test]
    fn means_and_pass_rate_add_up() {
        let at = Timestamp::parse("2026-11-21T10:00:00Z").unwrap();
        let mut r = PmRecord::default();
        add_task(&mut r, TaskStatus::Completed, Some(&validation(8.0, 1)), &at);
        add_task(&mut r, TaskStatus::Completed, Some(&validation(9.0, 2)), &at);
        add_task(&mut r, TaskStatus::Failed, Some(&validation(4.0, 3)), &at);
        add_task(&mut r, TaskStatus::Failed, None, &at); // failed before validation
        assert_eq!((r.tasks, r.completed, r.failed, r.validated_tasks), (4, 2, 2, 3));
        assert_eq!(r.pass_rate, Some(0.5));
        assert_eq!(r.average_score, Some(7.0));
        assert_eq!(r.average_iterations, Some(2.0));
        assert_eq!(r.last_task_at, Some(at));
    }

    #[test]
    fn the_file_is_created_then_updated() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        std::fs::remove_file(d.path().join(PM_PERFORMANCE)).unwrap();
        let task: Task = serde_json::from_value(serde_json::json!({
            "taskId": "t1", "type": "coding", "description": "x", "priority": "normal", "createdBy": "h",
            "createdAt": "2026-11-21T09:00:00Z", "status": "completed", "completedAt": "2026-11-21T10:00:00Z"
        }))
        .unwrap();
        record_task_end(&store, &task, "coding-pm").unwrap();
        record_task_end(&store, &task, "coding-pm").unwrap();
        record_task_end(&store, &task, "quant-pm").unwrap();
        let p: PmPerformance = store.read(&RelPath::new(PM_PERFORMANCE).unwrap()).unwrap();
        assert_eq!(p.pms[&Id::new("coding-pm").unwrap()].tasks, 2);
        assert_eq!(p.pms[&Id::new("quant-pm").unwrap()].completed, 1);
        assert_eq!(p.updated_at.unwrap().as_str(), "2026-11-21T10:00:00Z");
        assert!(record_task_end(&store, &task, "../x").is_err());
    }

    #[test]
    fn a_disagreement_links_the_files() {
        let task: Task = serde_json::from_value(serde_json::json!({
            "taskId": "t1", "type": "coding", "description": "Fix the bug\nmore", "priority": "normal",
            "createdBy": "h", "createdAt": "2026-11-21T09:00:00Z", "status": "failed"
        }))
        .unwrap();
        let team = ["creator".to_owned()];
        let issues = ["tests fail".to_owned()];
        let d = Disagreement {
            task: &task,
            pm: "coding-pm",
            validator: "validator",
            team: &team,
            iterations: 3,
            score: 4.5,
            issues: &issues,
        };
        let e = disagreement_entry(&d, &Timestamp::parse("2026-11-21T10:00:00Z").unwrap());
        assert!(e.contains("task t1: validator and team disagree after 3 iterations"), "{e}");
        assert!(e.contains("[validation.json](../tasks/t1/validation.json)"), "{e}");
        assert!(e.contains("- task: Fix the bug\n") && e.contains("- tests fail\n"), "{e}");
    }
}
