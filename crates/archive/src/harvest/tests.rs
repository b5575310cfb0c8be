#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, NaiveDate, Utc};
use clawboard_core::formats::{DailyHarvest, MemoryQueue, QueueStatus, WeeklyHarvest};
use clawboard_core::{RelPath, Store};

use super::*;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn day(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

/// A cell: role, content, value.
type C<'a> = (&'a str, &'a str, f64);

/// A tree with one task per `(id, harvestedAt, cells)`.
fn tree(tasks: &[(&str, &str, &[C<'_>])]) -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let mut queue = Vec::new();
    for (id, when, cells) in tasks {
        let dir = d.path().join("tasks").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut by_role: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
        for (role, content, value) in cells.iter() {
            by_role
                .entry(role)
                .or_default()
                .push(serde_json::json!({"type": "insight", "content": content, "value": value}));
            queue.push(serde_json::json!({"taskId": id, "roleId": role, "status": "pending", "enqueuedAt": when}));
        }
        let experiences: Vec<_> =
            by_role.into_iter().map(|(r, c)| serde_json::json!({"roleId": r, "cells": c})).collect();
        let harvest = serde_json::json!({
            "taskId": id, "harvestedAt": when, "experiences": experiences,
            "crossPollinationCandidates": [{"fromRole": "critic-code", "toRole": "critic-writing", "pattern": format!("p-{id}"), "value": 0.5}],
        });
        std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec_pretty(&harvest).unwrap()).unwrap();
    }
    std::fs::write(
        d.path().join("roles/memory-queue.json"),
        serde_json::to_vec(&serde_json::json!({"queue": queue})).unwrap(),
    )
    .unwrap();
    (d, store)
}

fn read<T: serde::de::DeserializeOwned>(d: &tempfile::TempDir, rel: &str) -> Option<T> {
    std::fs::read(d.path().join(rel)).ok().map(|b| serde_json::from_slice(&b).unwrap())
}

#[test]
fn a_daily_harvest_gathers_the_days_cells_deduplicated_best_first() {
    let (d, store) = tree(&[
        ("t1", "2026-11-20T09:00:00Z", &[("analyst-code", "check inputs", 0.6), ("critic-code", "be concrete", 0.9)]),
        ("t2", "2026-11-20T17:30:00Z", &[("analyst-code", "check inputs", 0.8), ("analyst-code", "read logs", 0.4)]),
        ("t3", "2026-11-19T23:59:59Z", &[("analyst-code", "yesterday", 0.99)]),
    ]);
    let report = run(&store, at("2026-11-20T18:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    let cells: Vec<(&str, &str, &str, f64)> =
        h.cells.iter().map(|c| (c.role_id.as_str(), c.task_id.as_str(), c.content.as_str(), c.value)).collect();
    // "check inputs" by analyst-code once, from t2 (the higher value).
    assert_eq!(
        cells,
        vec![
            ("critic-code", "t1", "be concrete", 0.9),
            ("analyst-code", "t2", "check inputs", 0.8),
            ("analyst-code", "t2", "read logs", 0.4),
        ]
    );
    assert_eq!(h.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["t1", "t2"]);
    assert_eq!(h.generated_at.as_str(), "2026-11-20T17:30:00Z", "the newest input's time, not the clock");
    assert_eq!(h.cross_pollination.len(), 2);
    // Yesterday (the day boundary: 23:59:59 belongs to the 19th).
    let y: DailyHarvest = read(&d, "harvest/daily/2026-11-19.json").unwrap();
    assert_eq!(y.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["t3"]);
    // Every pending queue entry of a harvested task is completed.
    let q: MemoryQueue = read(&d, "roles/memory-queue.json").unwrap();
    assert!(q.queue.iter().all(|e| e.status == QueueStatus::Completed), "{q:?}");
    assert_eq!(report.queue_completed, 5);
}

#[test]
fn a_second_run_writes_nothing_and_a_later_clock_changes_nothing() {
    let (d, store) = tree(&[("t1", "2026-11-20T09:00:00Z", &[("a-role", "x", 0.5)])]);
    let first = run(&store, at("2026-11-20T10:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert_eq!(first.written, ["harvest/daily/2026-11-20.json", "harvest/weekly/2026-W47.json"]);
    let before = std::fs::read(d.path().join("harvest/daily/2026-11-20.json")).unwrap();
    let second = run(&store, at("2026-11-20T23:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert!(second.written.is_empty(), "{:?}", second.written);
    assert_eq!(second.unchanged, 2);
    assert_eq!(std::fs::read(d.path().join("harvest/daily/2026-11-20.json")).unwrap(), before);
}

#[test]
fn no_harvest_is_written_for_a_day_without_tasks_or_a_day_not_begun() {
    let (d, store) = tree(&[("t1", "2026-11-25T09:00:00Z", &[("a-role", "future", 0.5)])]);
    let r = run(&store, at("2026-11-20T10:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert!(r.written.is_empty(), "{:?}", r.written);
    assert!(!d.path().join("harvest/daily/2026-11-25.json").exists());
    assert!(!d.path().join("harvest/daily/2026-11-20.json").exists());
}

#[test]
fn a_weekly_harvest_keeps_the_best_n_per_role_within_the_iso_week() {
    // 2026-11-22 is a Sunday (W47); 2026-11-23 a Monday (W48).
    let (d, store) = tree(&[
        ("t1", "2026-11-16T00:00:00Z", &[("a-role", "monday", 0.3), ("b-role", "b1", 0.2)]),
        ("t2", "2026-11-22T23:59:59Z", &[("a-role", "sunday", 0.9), ("a-role", "sunday2", 0.1)]),
        ("t3", "2026-11-23T00:00:00Z", &[("a-role", "next week", 1.0)]),
    ]);
    let days = vec![day("2026-11-16"), day("2026-11-22"), day("2026-11-23")];
    let settings = HarvestSettings { top_per_role: 2, ..HarvestSettings::default() };
    run(&store, at("2026-11-23T12:00:00Z"), &settings, Some(days)).unwrap();
    let w: WeeklyHarvest = read(&d, "harvest/weekly/2026-W47.json").unwrap();
    let cells: Vec<(&str, &str)> = w.cells.iter().map(|c| (c.role_id.as_str(), c.content.as_str())).collect();
    assert_eq!(cells, vec![("a-role", "sunday"), ("a-role", "monday"), ("b-role", "b1")]);
    assert_eq!(w.top_per_role, 2);
    assert_eq!(w.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["t1", "t2"]);
    let next: WeeklyHarvest = read(&d, "harvest/weekly/2026-W48.json").unwrap();
    assert_eq!(next.cells.len(), 1);
    assert_eq!(next.cells[0].content, "next week");
}

#[test]
fn iso_weeks_cross_the_year() {
    assert_eq!(week_of(day("2026-12-31")), "2026-W53");
    assert_eq!(week_of(day("2027-01-03")), "2026-W53");
    assert_eq!(week_of(day("2027-01-04")), "2027-W01");
    assert_eq!(week_of(day("2024-12-30")), "2025-W01");
    let days = days_of("2026-W53").unwrap();
    assert_eq!((days[0], days[6]), (day("2026-12-28"), day("2027-01-03")));
    assert!(days_of("2026-W54").is_none());
}

#[test]
fn a_weekly_harvest_outlives_the_tasks_of_its_daily_harvests() {
    let (d, store) = tree(&[("t1", "2026-11-17T08:00:00Z", &[("a-role", "kept", 0.7)])]);
    run(&store, at("2026-11-17T09:00:00Z"), &HarvestSettings::default(), None).unwrap();
    // Retention removed the task; the daily harvest remains and feeds the week.
    std::fs::remove_dir_all(d.path().join("tasks/t1")).unwrap();
    std::fs::remove_file(d.path().join("harvest/weekly/2026-W47.json")).unwrap();
    run(&store, at("2026-11-18T09:00:00Z"), &HarvestSettings::default(), None).unwrap();
    let w: WeeklyHarvest = read(&d, "harvest/weekly/2026-W47.json").unwrap();
    assert_eq!(w.cells.iter().map(|c| c.content.as_str()).collect::<Vec<_>>(), ["kept"]);
}

#[test]
fn an_old_pending_entry_gets_its_day_harvested() {
    let (d, store) = tree(&[("old", "2026-11-01T08:00:00Z", &[("a-role", "late", 0.7)])]);
    // Its file is old too: the mtime filter must not hide a pending task.
    let f = std::fs::File::options().write(true).open(d.path().join("tasks/old/memory-harvest.json")).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)).unwrap();
    let r = run(&store, at("2026-11-20T10:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert!(r.written.contains(&"harvest/daily/2026-11-01.json".to_owned()), "{:?}", r.written);
    assert_eq!(r.queue_completed, 1);
}

#[test]
fn a_bad_memory_harvest_is_reported_by_name_and_skipped() {
    let (d, store) = tree(&[("good", "2026-11-20T08:00:00Z", &[("a-role", "fine", 0.7)])]);
    std::fs::create_dir_all(d.path().join("tasks/bad")).unwrap();
    std::fs::write(d.path().join("tasks/bad/memory-harvest.json"), br#"{"taskId": "bad", "harvestedAt": 3}"#).unwrap();
    std::fs::create_dir_all(d.path().join("tasks/other")).unwrap();
    std::fs::write(
        d.path().join("tasks/other/memory-harvest.json"),
        br#"{"taskId": "good", "harvestedAt": "2026-11-20T08:00:00Z"}"#,
    )
    .unwrap();
    let r = run(&store, at("2026-11-20T10:00:00Z"), &HarvestSettings::default(), None).unwrap();
    assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
    assert!(r.problems.iter().any(|p| p.contains("tasks/bad/memory-harvest.json") && p.contains("harvestedAt")));
    assert!(r.problems.iter().any(|p| p.contains("tasks/other/memory-harvest.json") && p.contains("taskId")));
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    assert_eq!(h.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["good"]);
}

#[test]
fn an_old_day_rebuilt_for_a_pending_task_keeps_all_of_its_tasks() {
    // Friday: t1 and t2 harvested and in Friday's harvest; t3 harvested late, still pending.
    let (d, store) = tree(&[
        ("t1", "2026-11-20T09:00:00Z", &[("a-role", "one", 0.5)]),
        ("t2", "2026-11-20T10:00:00Z", &[("a-role", "two", 0.6)]),
    ]);
    run(&store, at("2026-11-20T12:00:00Z"), &HarvestSettings::default(), None).unwrap();
    let late = serde_json::json!({"taskId": "t3", "harvestedAt": "2026-11-20T23:30:00Z",
        "experiences": [{"roleId": "a-role", "cells": [{"type": "insight", "content": "three", "value": 0.7}]}]});
    std::fs::create_dir_all(d.path().join("tasks/t3")).unwrap();
    std::fs::write(d.path().join("tasks/t3/memory-harvest.json"), serde_json::to_vec(&late).unwrap()).unwrap();
    store
        .update_json(&RelPath::new("roles/memory-queue.json").unwrap(), |q: &mut MemoryQueue| {
            q.queue.push(
                serde_json::from_value(serde_json::json!({"taskId": "t3", "roleId": "a-role",
                "status": "pending", "enqueuedAt": "2026-11-20T23:30:00Z"}))
                .unwrap(),
            );
        })
        .unwrap();
    // Monday: the run covers Sunday and Monday, and Friday for t3.
    run(&store, at("2026-11-23T08:00:00Z"), &HarvestSettings::default(), None).unwrap();
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    assert_eq!(h.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["t1", "t2", "t3"]);
    let w: WeeklyHarvest = read(&d, "harvest/weekly/2026-W47.json").unwrap();
    assert_eq!(w.cells.len(), 3, "{w:?}");
}

#[test]
fn regenerating_a_day_keeps_the_cells_of_tasks_removed_since() {
    let (d, store) = tree(&[
        ("t1", "2026-11-20T09:00:00Z", &[("a-role", "kept", 0.5)]),
        ("t2", "2026-11-20T10:00:00Z", &[("a-role", "also", 0.6)]),
    ]);
    let day = vec![day("2026-11-20")];
    run(&store, at("2026-11-20T12:00:00Z"), &HarvestSettings::default(), Some(day.clone())).unwrap();
    std::fs::remove_dir_all(d.path().join("tasks/t1")).unwrap();
    let r = run(&store, at("2026-12-20T12:00:00Z"), &HarvestSettings::default(), Some(day)).unwrap();
    assert!(r.written.is_empty(), "nothing changed: {:?}", r.written);
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    assert_eq!(h.cells.iter().map(|c| c.content.as_str()).collect::<Vec<_>>(), ["also", "kept"]);
}

/// A task whose file cannot be read any more (a bad edit) keeps its cells in the
/// day's harvest, as one removed does; fixed, it is read again.
#[test]
fn regenerating_a_day_keeps_the_cells_of_a_task_that_cannot_be_read_now() {
    let (d, store) = tree(&[
        ("t1", "2026-11-20T09:00:00Z", &[("a-role", "kept", 0.5)]),
        ("t2", "2026-11-20T10:00:00Z", &[("a-role", "also", 0.6)]),
    ]);
    let day = vec![day("2026-11-20")];
    run(&store, at("2026-11-20T12:00:00Z"), &HarvestSettings::default(), Some(day.clone())).unwrap();
    let file = d.path().join("tasks/t1/memory-harvest.json");
    let good = std::fs::read(&file).unwrap();
    std::fs::write(&file, br#"{"taskId": "t1", "harvestedAt": "not a time"}"#).unwrap();
    let r = run(&store, at("2026-11-22T12:00:00Z"), &HarvestSettings::default(), Some(day.clone())).unwrap();
    assert!(r.problems.iter().any(|p| p.contains("tasks/t1/memory-harvest.json")), "{:?}", r.problems);
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    assert_eq!(h.tasks.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["t1", "t2"]);
    assert_eq!(h.cells.iter().map(|c| c.content.as_str()).collect::<Vec<_>>(), ["also", "kept"]);
    std::fs::write(&file, good).unwrap();
    let r = run(&store, at("2026-11-22T13:00:00Z"), &HarvestSettings::default(), Some(day)).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let h: DailyHarvest = read(&d, "harvest/daily/2026-11-20.json").unwrap();
    assert_eq!(h.cells.len(), 2, "{h:?}");
}

/// A daily harvest larger than the store's limit for what roles write (16 MiB by
/// default; 4 KiB here) is read back, by the next harvest and by the archive, up to
/// the archive's limit: the second run changes nothing and reports nothing.
#[test]
fn a_harvest_over_the_stores_limit_is_read_back() {
    let long = "x".repeat(200);
    let contents: Vec<String> = (0..30).map(|n| format!("{long}-{n}")).collect();
    let tasks: Vec<(String, Vec<C<'_>>)> =
        contents.iter().enumerate().map(|(n, c)| (format!("t{n}"), vec![("a-role", c.as_str(), 0.5)])).collect();
    let tasks: Vec<(&str, &str, &[C<'_>])> =
        tasks.iter().map(|(id, cells)| (id.as_str(), "2026-11-20T09:00:00Z", cells.as_slice())).collect();
    let (d, store) = tree(&tasks);
    let store = store.with_max_file_bytes(4096);
    let now = at("2026-11-20T12:00:00Z");
    let first = run(&store, now, &HarvestSettings::default(), None).unwrap();
    assert!(first.problems.is_empty(), "{:?}", first.problems);
    let size = std::fs::metadata(d.path().join("harvest/daily/2026-11-20.json")).unwrap().len();
    assert!(size > 4096, "the test needs a harvest over the store's limit: {size} bytes");
    let again = run(&store, now, &HarvestSettings::default(), None).unwrap();
    assert!(again.problems.is_empty() && again.written.is_empty(), "{again:?}");
    let out = crate::extract::extract(&store, "harvest/daily/2026-11-20.json", 1 << 20).unwrap();
    assert_eq!(out[0].path, "memory/harvest/daily/2026-11-20.json");
}
