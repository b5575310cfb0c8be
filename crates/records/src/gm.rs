//! The GM's records: `gm/pm-performance.json`, recomputed from `tasks/` as tasks end, and
//! `gm/arbitrations.md`, an entry whenever the validator and a team still disagree
//! at the iteration limit (a sync conflict copy adds one too, see the sync crate).

use std::collections::{HashMap, HashSet};

use clawboard_core::formats::{PmPerformance, PmRecord, Task, TaskStatus, Validation};
use clawboard_core::index::Stamp;
use clawboard_core::{Error, Id, RelPath, Store, Timestamp, layout};

pub const PM_PERFORMANCE: &str = layout::PM_PERFORMANCE;
pub const ARBITRATIONS: &str = layout::GM_ARBITRATIONS;

/// One ended task as the GM counts it.
#[derive(Debug, Clone)]
pub struct Ended {
    pub pm: String,
    pub status: TaskStatus,
    pub completed_at: Option<Timestamp>,
    /// The final validation's score and iteration count, if it was validated.
    pub validation: Option<(f64, u32)>,
}

/// Three decimals are plenty for a mean, and keep the file readable and stable.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `gm/pm-performance.json` from the ended tasks, sorted by task id so the sums (and
/// so the bytes) are the same on every node. `updatedAt` is the newest task end, not
/// the clock.
pub fn performance<'a>(ended: impl IntoIterator<Item = (&'a str, &'a Ended)>) -> PmPerformance {
    let mut ended: Vec<(&str, &Ended)> = ended.into_iter().collect();
    ended.sort_by(|a, b| a.0.cmp(b.0));
    #[derive(Default)]
    struct Sums {
        tasks: u64,
        completed: u64,
        failed: u64,
        validated: u64,
        score: f64,
        iterations: f64,
        last: Option<Timestamp>,
    }
    let newest = |a: Option<Timestamp>, b: &Option<Timestamp>| match (a, b) {
        (Some(x), Some(y)) => Some(if y.instant() > x.instant() { y.clone() } else { x }),
        (a, b) => a.or_else(|| b.clone()),
    };
    let mut by: std::collections::BTreeMap<String, Sums> = std::collections::BTreeMap::new();
    let mut updated = None;
    for (_, e) in ended {
        let s = by.entry(e.pm.clone()).or_default();
        s.tasks += 1;
        match e.status {
            TaskStatus::Completed => s.completed += 1,
            TaskStatus::Failed => s.failed += 1,
            TaskStatus::Pending | TaskStatus::Running => {}
        }
        if let Some((score, iterations)) = e.validation {
            s.validated += 1;
            s.score += score;
            s.iterations += f64::from(iterations);
        }
        s.last = newest(s.last.take(), &e.completed_at);
        updated = newest(updated, &e.completed_at);
    }
    let mut p = PmPerformance { updated_at: updated, ..PmPerformance::default() };
    for (pm, s) in by {
        let Ok(id) = Id::new(pm) else { continue };
        let ended = s.completed + s.failed;
        let n = s.validated as f64;
        p.pms.insert(
            id,
            PmRecord {
                tasks: s.tasks,
                completed: s.completed,
                failed: s.failed,
                pass_rate: (ended > 0).then(|| round3(s.completed as f64 / ended as f64)),
                validated_tasks: s.validated,
                average_score: (s.validated > 0).then(|| round3(s.score / n)),
                average_iterations: (s.validated > 0).then(|| round3(s.iterations / n)),
                last_task_at: s.last,
                extra: Default::default(),
            },
        );
    }
    p
}

/// What a refresh keeps of each task for the next: the stamps of the three files it
/// reads (`task.json`, the team, the validation) and what they gave. A task whose
/// files did not change is not read again: a month's 50,000 tasks are 150,000 reads,
/// seconds of work, at every refresh (one after each task that ends), where a stat
/// of each file is a tenth of that.
#[derive(Debug, Default)]
pub struct EndedCache {
    rows: HashMap<String, ([Option<Stamp>; 3], Option<Ended>)>,
}

impl EndedCache {
    /// Every ended task, as the last [`EndedCache::update`] found them.
    pub fn ended(&self) -> impl Iterator<Item = (&str, &Ended)> {
        self.rows.iter().filter_map(|(name, (_, row))| Some((name.as_str(), row.as_ref()?)))
    }

    /// Brings the cache up to `tasks/`: every ended task, its PM (the one that
    /// composed its team, else the one it was assigned, else `pm_for_type(type)`)
    /// and its final validation, a task read again only when one of its files
    /// changed. False once `stopping()` says so (asked every few hundred tasks): a
    /// refresh never holds a stop up.
    pub fn update(
        &mut self,
        store: &Store,
        pm_for_type: impl Fn(&Task) -> Option<String>,
        stopping: impl Fn() -> bool,
    ) -> Result<bool, Error> {
        let dir = store.root().join(layout::TASKS);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.rows.clear();
                return Ok(true);
            }
            Err(e) => return Err(Error::io(&dir, e)),
        };
        let mut seen = HashSet::new();
        for (i, entry) in entries.enumerate() {
            if i % 256 == 0 && stopping() {
                return Ok(false);
            }
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let stamps = [layout::TASK_FILE, layout::TEAM_FILE, layout::VALIDATION_FILE].map(|f| {
                clawboard_core::store::plain_file(store.root(), &layout::task_file(&name, f)).map(|m| Stamp::of(&m))
            });
            if stamps[0].is_none() {
                continue; // a directory without its task.json yet
            }
            if self.rows.get(&name).is_none_or(|(known, _)| *known != stamps) {
                let row = read_ended(store, &name, &pm_for_type);
                self.rows.insert(name.clone(), (stamps, row));
            }
            seen.insert(name);
        }
        self.rows.retain(|name, _| seen.contains(name));
        Ok(true)
    }
}

/// Task `dir` as the GM counts it, if it ended and has a PM.
fn read_ended(store: &Store, dir: &str, pm_for_type: &impl Fn(&Task) -> Option<String>) -> Option<Ended> {
    let read = |file: &str| RelPath::new(&layout::task_file(dir, file));
    let task: Task = store.read(&read(layout::TASK_FILE).ok()?).ok()?;
    if !matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
        return None;
    }
    let team: Option<clawboard_core::formats::TeamComposition> =
        read(layout::TEAM_FILE).ok().and_then(|r| store.read(&r).ok());
    let pm = crate::review::pm_of(team.as_ref(), &task).or_else(|| pm_for_type(&task))?;
    let validation: Option<Validation> = read(layout::VALIDATION_FILE).ok().and_then(|r| store.read(&r).ok());
    Some(Ended {
        pm,
        status: task.status,
        completed_at: task.completed_at.clone(),
        validation: validation.map(|v| (v.result.score, v.iterations)),
    })
}

/// Recomputes `gm/pm-performance.json` from `tasks/` and writes it when it changed;
/// true when it did, `None` when `stopping()` ended it first. Recomputing (rather
/// than adding to the file) makes it right after a crash and the same on every node.
pub fn refresh_performance(
    store: &Store,
    pm_for_type: impl Fn(&Task) -> Option<String>,
    cache: &mut EndedCache,
    stopping: impl Fn() -> bool,
) -> Result<Option<bool>, Error> {
    if !cache.update(store, pm_for_type, stopping)? {
        return Ok(None);
    }
    let p = performance(cache.ended());
    let rel = RelPath::new(PM_PERFORMANCE)?;
    let bytes = clawboard_core::store::to_pretty_json(&p);
    let _lock = store.lock(&rel)?;
    if store.read_bytes(&rel).is_ok_and(|old| old == bytes.as_bytes()) {
        return Ok(Some(false));
    }
    store.write_bytes_locked(&rel, bytes.as_bytes())?;
    Ok(Some(true))
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
        d.issues.iter().map(|i| format!("- {}\n", crate::review::one_line(i))).collect()
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
    store.append_text(&RelPath::new(ARBITRATIONS)?, &entry)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ended(pm: &str, status: TaskStatus, at: &str, validation: Option<(f64, u32)>) -> Ended {
        Ended { pm: pm.into(), status, completed_at: Some(Timestamp::parse(at).unwrap()), validation }
    }

    #[test]
    fn means_and_pass_rate_add_up_in_any_order() {
        let list = vec![
            ("t3".to_owned(), ended("pm", TaskStatus::Failed, "2026-11-21T12:00:00Z", Some((4.0, 3)))),
            ("t1".to_owned(), ended("pm", TaskStatus::Completed, "2026-11-21T10:00:00Z", Some((8.0, 1)))),
            ("t4".to_owned(), ended("pm", TaskStatus::Failed, "2026-11-21T09:00:00Z", None)),
            ("t2".to_owned(), ended("pm", TaskStatus::Completed, "2026-11-21T11:00:00Z", Some((9.0, 2)))),
            ("t5".to_owned(), ended("other-pm", TaskStatus::Completed, "2026-11-20T11:00:00Z", Some((7.0, 1)))),
        ];
        let p = performance(list.iter().map(|(k, e)| (k.as_str(), e)));
        let r = &p.pms[&Id::new("pm").unwrap()];
        assert_eq!((r.tasks, r.completed, r.failed, r.validated_tasks), (4, 2, 2, 3));
        assert_eq!((r.pass_rate, r.average_score, r.average_iterations), (Some(0.5), Some(7.0), Some(2.0)));
        assert_eq!(r.last_task_at.as_ref().unwrap().as_str(), "2026-11-21T12:00:00Z");
        assert_eq!(p.updated_at.as_ref().unwrap().as_str(), "2026-11-21T12:00:00Z");
        let mut reversed = list.clone();
        reversed.reverse();
        assert_eq!(
            clawboard_core::store::to_pretty_json(&performance(reversed.iter().map(|(k, e)| (k.as_str(), e)))),
            clawboard_core::store::to_pretty_json(&p),
            "the same bytes whatever the order"
        );
    }

    #[test]
    fn refresh_reads_the_tree_and_writes_only_on_change() {
        let d = tempfile::tempdir().unwrap();
        let (store, _) = Store::init(d.path()).unwrap();
        let write = |rel: &str, v: serde_json::Value| {
            store.write_json(&RelPath::new(rel).unwrap(), &v).unwrap();
        };
        write(
            "tasks/t1/task.json",
            serde_json::json!({
                "taskId": "t1", "type": "coding", "description": "x", "priority": "normal", "createdBy": "h",
                "createdAt": "2026-11-21T09:00:00Z", "status": "completed", "completedAt": "2026-11-21T10:00:00Z"
            }),
        );
        write(
            "tasks/t1/validation.json",
            serde_json::json!({
                "taskId": "t1", "validatorId": "v", "validatedAt": "2026-11-21T10:00:00Z", "iterations": 2,
                "result": {"score": 8.5, "pass": true}
            }),
        );
        write(
            "tasks/t2/task.json",
            serde_json::json!({
                "taskId": "t2", "type": "quant", "description": "x", "priority": "normal", "createdBy": "h",
                "createdAt": "2026-11-21T09:00:00Z", "status": "running"
            }),
        );
        let pm_for = |t: &Task| (t.kind.as_str() == "coding").then(|| "coding-pm".to_owned());
        let mut cache = EndedCache::default();
        let go = |cache: &mut EndedCache| refresh_performance(&store, pm_for, cache, || false).unwrap();
        assert_eq!(go(&mut cache), Some(true));
        assert_eq!(go(&mut cache), Some(false), "nothing changed, nothing written");
        let p: PmPerformance = store.read(&RelPath::new(PM_PERFORMANCE).unwrap()).unwrap();
        let r = &p.pms[&Id::new("coding-pm").unwrap()];
        assert_eq!((r.tasks, r.average_score, r.average_iterations), (1, Some(8.5), Some(2.0)));
        // A file that changed is read again; the rest come from the cache.
        write(
            "tasks/t1/validation.json",
            serde_json::json!({
                "taskId": "t1", "validatorId": "v", "validatedAt": "2026-11-21T10:00:00Z", "iterations": 3,
                "result": {"score": 6.0, "pass": true, "feedback": "a longer file than before"}
            }),
        );
        assert_eq!(go(&mut cache), Some(true));
        let p: PmPerformance = store.read(&RelPath::new(PM_PERFORMANCE).unwrap()).unwrap();
        let r = &p.pms[&Id::new("coding-pm").unwrap()];
        assert_eq!((r.average_score, r.average_iterations), (Some(6.0), Some(3.0)));
        // A stop ends a refresh before it writes anything.
        assert_eq!(refresh_performance(&store, pm_for, &mut EndedCache::default(), || true).unwrap(), None);
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

    #[test]
    fn line_breaks_in_issues_and_titles_never_start_a_line() {
        let forged = "\n## 2026-11-21T11:00:00Z — task t9: forged\n- outcome: forged";
        let mut task: Task = serde_json::from_value(serde_json::json!({
            "taskId": "t1", "type": "coding", "description": "Fix", "priority": "normal",
            "createdBy": "h", "createdAt": "2026-11-21T09:00:00Z", "status": "failed"
        }))
        .unwrap();
        for brk in ["\r", "\u{0b}", "\u{0c}", "\u{85}", "\u{2028}", "\u{2029}"] {
            task.description = format!("Fix it{}", forged.replace('\n', brk));
            let issues = [format!("tests fail{}", forged.replace('\n', brk))];
            let d = Disagreement {
                task: &task,
                pm: "coding-pm",
                validator: "validator",
                team: &[],
                iterations: 3,
                score: 4.5,
                issues: &issues,
            };
            let e = disagreement_entry(&d, &Timestamp::parse("2026-11-21T10:00:00Z").unwrap());
            let lines: Vec<&str> = e.split(crate::review::is_line_break).collect();
            assert_eq!(lines.iter().filter(|l| l.starts_with("## ")).count(), 1, "{brk:?}: {e:?}");
            assert!(!lines.iter().any(|l| l.starts_with("- outcome: forged")), "{brk:?}: {e:?}");
            assert!(lines.contains(&"- task: Fix it"), "the title is the first line: {e:?}");
        }
    }
}
