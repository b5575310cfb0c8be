#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Retention rules as tables, rustic-style: every rule at exactly its age and one
//! second less, then one tree with every kind of expired, young, held and odd item.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

const DAY: i64 = 86_400;

#[test]
fn every_rule_at_its_boundary() {
    let p = Policy::default();
    let now = t("2026-11-23T00:00:00Z");
    // (rule, the seed's age in seconds or None for permanent)
    let table: [(Rule, Option<i64>); 11] = [
        (Rule::TasksCompleted, Some(30 * DAY)),
        (Rule::TasksFailed, Some(7 * DAY)),
        (Rule::HarvestDaily, Some(7 * DAY)),
        (Rule::HarvestWeekly, Some(90 * DAY)),
        (Rule::ReportsDaily, Some(30 * DAY)),
        (Rule::ReportsWeekly, Some(365 * DAY)),
        (Rule::ReportsMonthly, None),
        (Rule::QueuePending, Some(DAY)),
        (Rule::QueueCompleted, Some(0)),
        (Rule::EntriesDone, Some(30 * DAY)),
        (Rule::EntriesCanceled, Some(7 * DAY)),
    ];
    for (rule, age) in table {
        match age {
            Some(secs) => {
                let exactly = now - chrono::Duration::seconds(secs);
                assert!(due(&p, rule, exactly, now), "{}: due at exactly {secs} s", rule.name());
                assert!(
                    !due(&p, rule, exactly + chrono::Duration::seconds(1), now),
                    "{}: not one second before",
                    rule.name()
                );
            }
            None => assert!(!due(&p, rule, now - chrono::Duration::days(100 * 365), now), "{}: never", rule.name()),
        }
    }
}

#[test]
fn durations_parse_as_people_write_them_and_bad_ones_name_the_key() {
    for (text, want) in [
        ("30 days", Keep::For(Duration::from_secs(30 * 86_400))),
        ("24 hours", Keep::For(Duration::from_secs(86_400))),
        ("1 year", Keep::For(Duration::from_secs(365 * 86_400))),
        ("2 weeks", Keep::For(Duration::from_secs(14 * 86_400))),
        ("permanent", Keep::Permanent),
        ("immediate", Keep::For(Duration::ZERO)),
        ("immediate delete", Keep::For(Duration::ZERO)),
    ] {
        assert_eq!(Keep::parse(text), Ok(want), "{text}");
    }
    assert_eq!(Policy::parse("retention.yaml", DEFAULT_POLICY).unwrap(), Policy::default(), "the file is the seed");
    assert_eq!(Keep::For(Duration::from_secs(30 * 86_400)).describe(), "30 days");
    assert_eq!(Keep::For(Duration::from_secs(3600)).describe(), "1 hour");
    for (yaml, key, reason) in [
        ("retention:\n  tasks:\n    completed: 30 dayz\n", "retention.tasks.completed", "unknown unit"),
        ("retention:\n  tasks:\n    completed: soon\n", "retention.tasks.completed", "not a duration"),
        ("retention:\n  tasks:\n    completed: 30\n", "retention.tasks.completed", "30 is not a duration such as"),
        ("retention:\n  tasks:\n    completed: [1]\n", "retention.tasks.completed", "a list is not a duration"),
        ("retention:\n  tasks:\n    archived: 30 days\n", "retention.tasks.archived", "tasks has completed, failed"),
        ("retention:\n  logs:\n    daily: 1 day\n", "retention.logs", "unknown key"),
        ("retain:\n  tasks: {}\n", "retain", "unknown key"),
        ("retention: [1, 2]\n", "retention", "is not a mapping"),
        ("retention:\n  tasks: [\n", "(syntax)", ""),
        ("retention:\n  tasks:\n    completed: 6m\n", "retention.tasks.completed", "under an hour"),
        ("x: &d 30 days\nretention:\n  tasks:\n    completed: *d\n", "(syntax)", "line 4: an alias (*name)"),
        ("retention:\n  tasks: {}\n---\nretention: {}\n", "(syntax)", "holds 2 documents"),
    ] {
        let e = Policy::parse("/etc/clawboard/retention.yaml", yaml).unwrap_err();
        assert_eq!((e.file.as_str(), e.key.as_str()), ("/etc/clawboard/retention.yaml", key), "{yaml}: {e}");
        assert!(e.reason.contains(reason), "{yaml}: {e}");
    }
    let partial = Policy::parse("r.yaml", "retention:\n  tasks:\n    failed: 1 day\n").unwrap();
    assert_eq!(partial.keep(Rule::TasksFailed), Keep::For(Duration::from_secs(86_400)));
    assert_eq!(partial.keep(Rule::TasksCompleted), Rule::TasksCompleted.seed(), "a key left out keeps the seed's");
    assert_eq!(Policy::parse("r.yaml", "").unwrap(), Policy::default());
}

/// A file of a few hundred bytes whose aliases expand to billions of nodes is
/// refused before it is loaded (it took gigabytes, then aborted, when loaded).
#[test]
fn an_alias_bomb_is_refused_before_it_is_loaded() {
    let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let p = format!("*a{}", i - 1);
        yaml.push_str(&format!("a{i}: &a{i} [{}]\n", [p.as_str(); 10].join(", ")));
    }
    yaml.push_str("retention:\n  tasks: {}\n");
    assert!(yaml.len() < 600, "{}", yaml.len());
    let e = Policy::parse("r.yaml", &yaml).unwrap_err();
    assert_eq!(e.key, "(syntax)");
    assert!(e.reason.contains("an alias (*name)"), "{e}");
    let big = format!("retention:\n  tasks: {{}}\n#{}\n", "x".repeat(70_000));
    assert!(Policy::parse("r.yaml", &big).unwrap_err().reason.contains("a retention policy is a few lines"));
}

#[test]
fn periods_end_where_their_names_say() {
    assert_eq!(period_end(Rule::HarvestDaily, "2026-11-15"), Some(t("2026-11-16T00:00:00Z")));
    assert_eq!(period_end(Rule::HarvestWeekly, "2026-W47"), Some(t("2026-11-23T00:00:00Z")));
    assert_eq!(period_end(Rule::ReportsMonthly, "2026-12"), Some(t("2027-01-01T00:00:00Z")));
    assert_eq!(period_end(Rule::ReportsMonthly, "2026-13"), None);
    assert_eq!(period_end(Rule::ReportsDaily, "notes"), None);
    assert_eq!(period_end(Rule::ReportsDaily, "2026-11-15.conflict-n1-1"), None);
}

struct Holds(Vec<&'static str>);

impl Guard for Holds {
    fn task(&self, id: &str) -> Result<(), String> {
        if self.0.contains(&id) { Err(format!("{id}: 2 files not in the bucket yet")) } else { Ok(()) }
    }
}

fn write(root: &std::path::Path, rel: &str, body: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn task(root: &std::path::Path, id: &str, status: &str, completed: Option<&str>) {
    let mut v = json!({"taskId": id, "type": "coding", "description": "x", "priority": "normal",
                       "createdBy": "h", "createdAt": "2025-01-01T00:00:00Z", "status": status});
    if let Some(c) = completed {
        v["completedAt"] = json!(c);
    }
    write(root, &format!("tasks/{id}/task.json"), &serde_json::to_vec(&v).unwrap());
    write(root, &format!("tasks/{id}/result.json"), b"{}");
    write(root, &format!("tasks/{id}/attempts/0001-w.json"), b"{}");
}

/// The verdict of every item of a plan, by label.
fn verdicts(p: &Plan) -> BTreeMap<String, &'static str> {
    let mut v = BTreeMap::new();
    for i in &p.delete {
        v.insert(i.subject.label(), "delete");
    }
    for i in &p.held {
        v.insert(i.subject.label(), "held");
    }
    v
}

#[test]
fn a_tree_with_every_kind_of_item() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let r = d.path();
    let now = t("2026-11-23T00:00:00Z");
    // (what, label, the verdict at `now`, the verdict one second earlier)
    task(r, "done-30d", "completed", Some("2026-10-24T00:00:00Z"));
    task(r, "done-30d-less-1s", "completed", Some("2026-10-24T00:00:01Z"));
    task(r, "failed-7d", "failed", Some("2026-11-16T00:00:00Z"));
    task(r, "failed-7d-less-1s", "failed", Some("2026-11-16T00:00:01Z"));
    task(r, "held-40d", "completed", Some("2026-10-14T00:00:00Z"));
    // Old completedAt on purpose: only their status keeps them.
    task(r, "running-1y", "running", Some("2025-11-01T00:00:00Z"));
    task(r, "pending-1y", "pending", Some("2025-11-01T00:00:00Z"));
    task(r, "no-time", "completed", None);
    write(r, "tasks/broken/task.json", b"{");
    for f in ["2026-11-15", "2026-11-16"] {
        write(r, &format!("harvest/daily/{f}.json"), b"{}");
    }
    for f in ["2026-W34", "2026-W35"] {
        write(r, &format!("harvest/weekly/{f}.json"), b"{}");
    }
    for f in ["2026-10-23", "2026-10-24"] {
        write(r, &format!("reports/daily/{f}.md"), b"# r");
    }
    for f in ["2025-W46", "2025-W47"] {
        write(r, &format!("reports/weekly/{f}.md"), b"# r");
    }
    write(r, "reports/monthly/2020-01.md", b"# r");
    write(r, "reports/daily/notes.md", b"mine");
    let queue = json!({"queue": [
        {"taskId": "q1", "roleId": "w", "status": "pending", "enqueuedAt": "2026-11-22T00:00:00Z"},
        {"taskId": "q2", "roleId": "w", "status": "pending", "enqueuedAt": "2026-11-22T00:00:01Z"},
        {"taskId": "q3", "roleId": "w", "status": "completed", "enqueuedAt": "2026-11-23T00:00:00Z"},
        // The same task and role again, pending and young: not the planned entry.
        {"taskId": "q3", "roleId": "w", "status": "pending", "enqueuedAt": "2026-11-22T12:00:00Z"},
    ]});
    write(r, "roles/memory-queue.json", &serde_json::to_vec(&queue).unwrap());
    // A symlink inside an expired task, pointing outside the root: removed, not followed.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious.txt"), "keep me").unwrap();
    std::os::unix::fs::symlink(outside.path(), r.join("tasks/done-30d/link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("precious.txt"), r.join("harvest/daily/2026-11-01.json")).unwrap();

    let guard = Holds(vec!["held-40d"]);
    let table: [(&str, Option<&str>, Option<&str>); 17] = [
        ("tasks/done-30d/", Some("delete"), None),
        ("tasks/done-30d-less-1s/", None, None),
        ("tasks/failed-7d/", Some("delete"), None),
        ("tasks/failed-7d-less-1s/", None, None),
        ("tasks/held-40d/", Some("held"), Some("held")),
        ("tasks/running-1y/", None, None),
        ("tasks/pending-1y/", None, None),
        ("harvest/daily/2026-11-15.json", Some("delete"), None),
        ("harvest/daily/2026-11-16.json", None, None),
        ("harvest/weekly/2026-W34.json", Some("delete"), Some("delete")),
        ("harvest/weekly/2026-W35.json", None, None),
        ("reports/daily/2026-10-23.md", Some("delete"), None),
        ("reports/daily/2026-10-24.md", None, None),
        ("reports/weekly/2025-W46.md", Some("delete"), Some("delete")),
        ("reports/weekly/2025-W47.md", None, None),
        ("roles/memory-queue.json [q1 w]", Some("delete"), None),
        ("roles/memory-queue.json [q3 w]", Some("delete"), None),
    ];
    let at_now = plan(&store, &Policy::default(), now, &guard).unwrap();
    let before = plan(&store, &Policy::default(), now - chrono::Duration::seconds(1), &guard).unwrap();
    let (v_now, v_before) = (verdicts(&at_now), verdicts(&before));
    for (label, want_now, want_before) in table {
        assert_eq!(v_now.get(label).copied(), want_now, "{label} at now");
        assert_eq!(v_before.get(label).copied(), want_before, "{label} one second earlier");
    }
    assert_eq!(v_now.get("roles/memory-queue.json [q2 w]"), None);
    assert_eq!(v_now.get("reports/monthly/2020-01.md"), None, "monthly reports are permanent");
    assert_eq!(v_now.len(), 9, "{v_now:?}");
    let held = &at_now.held[0];
    assert_eq!(held.held.as_deref(), Some("held-40d: 2 files not in the bucket yet"));
    assert_eq!(held.because, "retention.tasks.completed: 30 days");
    assert_eq!(held.age_secs, 40 * DAY);
    let skipped = at_now.skipped.join("\n");
    for want in [
        "tasks/no-time/: completed without completedAt",
        "tasks/broken/:",
        "reports/daily/notes.md: the name is not a daily period",
    ] {
        assert!(skipped.contains(want), "{want} in\n{skipped}");
    }
    assert!(!skipped.contains("2026-11-01"), "a symlinked file is not the policy's: {skipped}");
    assert!(!skipped.contains("running-1y") && !skipped.contains("pending-1y"), "{skipped}");

    // The run deletes what the plan says, and nothing else.
    let report = execute(&store, &at_now, false, &guard).unwrap();
    assert_eq!((report.tasks, report.files, report.queue_entries, report.forced), (2, 4, 2, 0), "{report:?}");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let left: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.join("roles/memory-queue.json")).unwrap()).unwrap();
    let left: Vec<(&str, &str)> = left["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["taskId"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(left, [("q2", "pending"), ("q3", "pending")], "exactly the planned entries went");
    for gone in ["tasks/done-30d", "tasks/failed-7d", "harvest/daily/2026-11-15.json", "reports/weekly/2025-W46.md"] {
        assert!(!r.join(gone).exists(), "{gone}");
    }
    for kept in [
        "tasks/held-40d/task.json",
        "tasks/running-1y/task.json",
        "reports/monthly/2020-01.md",
        "reports/daily/notes.md",
    ] {
        assert!(r.join(kept).exists(), "{kept}");
    }
    assert_eq!(std::fs::read_to_string(outside.path().join("precious.txt")).unwrap(), "keep me");
    assert!(std::fs::symlink_metadata(r.join("harvest/daily/2026-11-01.json")).is_ok(), "not the policy's");
    let q: MemoryQueue = store.read(&RelPath::new("roles/memory-queue.json").unwrap()).unwrap();
    assert_eq!(q.queue.iter().map(|e| e.task_id.as_str()).collect::<Vec<_>>(), ["q2", "q3"]);

    // --force deletes the held one too.
    let again = plan(&store, &Policy::default(), now, &guard).unwrap();
    assert_eq!(again.delete.len(), 0);
    let forced = execute(&store, &again, true, &guard).unwrap();
    assert_eq!((forced.tasks, forced.forced), (1, 1));
    assert!(!r.join("tasks/held-40d").exists());
}

fn entry(root: &std::path::Path, project: &str, id: &str, status: &str, updated: &str) {
    let e = json!({"id": id, "from": "Human", "to": "Aya", "project_id": project, "kind": "k", "status": status,
        "payload": {}, "target_docs": [], "created_at": "2025-01-01T00:00:00Z", "updated_at": updated});
    write(root, &format!("entries/{project}/{id}.json"), &serde_json::to_vec(&e).unwrap());
}

#[test]
fn entries_that_ended_go_after_their_rule_from_updated_at_and_the_others_stay() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let r = d.path();
    let now = t("2026-11-23T00:00:00Z");
    entry(r, "p", "done-30d", "done", "2026-10-24T09:00:00+09:00");
    entry(r, "p", "done-30d-less-1s", "done", "2026-10-24T00:00:01Z");
    entry(r, "p", "canceled-7d", "canceled", "2026-11-16T00:00:00Z");
    entry(r, "p", "canceled-6d", "canceled", "2026-11-17T00:00:00Z");
    for (id, status) in [("open-1y", "open"), ("working-1y", "in_progress"), ("failed-1y", "error")] {
        entry(r, "q", id, status, "2025-11-01T00:00:00Z");
    }
    write(r, "entries/p/broken.json", b"{");
    let outside = tempfile::tempdir().unwrap();
    entry(outside.path(), "x", "elsewhere", "done", "2020-01-01T00:00:00Z");
    std::os::unix::fs::symlink(outside.path().join("entries/x"), r.join("entries/x")).unwrap();

    let p = plan(&store, &Policy::default(), now, &NoGuard).unwrap();
    let v = verdicts(&p);
    let deleted: Vec<&str> = v.keys().map(String::as_str).collect();
    assert_eq!(deleted, ["entries/p/canceled-7d.json", "entries/p/done-30d.json"]);
    assert_eq!(p.delete[0].because, "retention.entries.canceled: 7 days");
    assert_eq!(p.kept, 2, "the two not yet due");
    let skipped = p.skipped.join("\n");
    assert!(skipped.contains("entries/p/broken.json:"), "{skipped}");
    assert!(skipped.contains("entries/x/: a symlink, not followed"), "{skipped}");

    let report = execute(&store, &p, false, &NoGuard).unwrap();
    assert_eq!(report.files, 2);
    assert!(!r.join("entries/p/done-30d.json").exists() && r.join("entries/p/done-30d-less-1s.json").exists());
    assert!(outside.path().join("entries/x/elsewhere.json").exists());

    let custom = Policy::parse("r.yaml", "retention:\n  entries:\n    done: permanent\n").unwrap();
    assert_eq!(custom.keep(Rule::EntriesDone), Keep::Permanent);
    let err = Policy::parse("r.yaml", "retention:\n  entries:\n    open: 1 day\n").unwrap_err();
    assert_eq!(err.to_string(), "r.yaml: retention.entries.open: unknown key; entries has done, canceled");
}

#[test]
fn the_last_entry_of_each_id_counter_stays_so_no_id_is_handed_out_again() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let r = d.path();
    let now = t("2026-11-23T00:00:00Z");
    let old = "2026-01-01T00:00:00Z";
    // Counter p-issue7-N: 2 is its last (9 is another counter's); 10 > 9 numerically.
    for id in ["p-issue7-1", "p-issue7-2", "p-issue9-9", "p-issue9-10", "p-manual"] {
        entry(r, "p", id, "done", old);
    }
    // The same counter in another project is counted there.
    entry(r, "q", "p-issue7-1", "canceled", old);
    // An open entry can be the last: the ended ones below it go.
    entry(r, "o", "o-x-1", "done", old);
    entry(r, "o", "o-x-2", "open", old);

    let p = plan(&store, &Policy::default(), now, &NoGuard).unwrap();
    let v = verdicts(&p);
    let deleted: Vec<&str> = v.keys().map(String::as_str).collect();
    assert_eq!(
        deleted,
        ["entries/o/o-x-1.json", "entries/p/p-issue7-1.json", "entries/p/p-issue9-9.json", "entries/p/p-manual.json"]
    );
    assert_eq!(p.kept, 3, "p-issue7-2, p-issue9-10 and q's p-issue7-1");
    execute(&store, &p, false, &NoGuard).unwrap();
    assert!(r.join("entries/p/p-issue7-2.json").exists() && !r.join("entries/p/p-issue7-1.json").exists());
}
