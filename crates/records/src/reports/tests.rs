#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Reports for a fixed tree and a fixed clock, snapshot-tested with `insta`
//! (review changes with `cargo insta review`, or `INSTA_UPDATE=always`).

use serde_json::{Value, json};

use super::*;

fn write(root: &std::path::Path, rel: &str, v: &Value) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

struct T<'a> {
    id: &'a str,
    kind: &'a str,
    pm: &'a str,
    created: &'a str,
    /// (status, completedAt, iterations, score, pass)
    end: Option<(&'a str, &'a str, u32, f64, bool)>,
}

fn task(root: &std::path::Path, t: &T) {
    let mut task = json!({
        "taskId": t.id, "type": t.kind, "description": format!("Task {}\nmore detail", t.id), "priority": "normal",
        "createdBy": "human", "createdAt": t.created, "status": "running",
    });
    write(
        root,
        &format!("tasks/{}/team-composition.json", t.id),
        &json!({"taskId": t.id, "pmDecision": {"pmId": t.pm, "decidedAt": t.created}, "team": [{"role": "creator", "responsibility": "do it", "priority": 1}]}),
    );
    if let Some((status, at, iterations, score, pass)) = t.end {
        task["status"] = json!(status);
        task["completedAt"] = json!(at);
        write(
            root,
            &format!("tasks/{}/validation.json", t.id),
            &json!({"taskId": t.id, "validatorId": "validator", "validatedAt": at, "iterations": iterations,
                    "result": {"score": score, "pass": pass}}),
        );
    }
    write(root, &format!("tasks/{}/task.json", t.id), &task);
}

fn escalation(root: &std::path::Path, id: &str, level: &str, created: &str, decided: Option<(&str, &str, &str)>) {
    let mut e = json!({"level": level, "from": "deployer", "issue": format!("issue {id}"), "requiresHumanApproval": true,
                       "taskId": "t-1120-a", "createdAt": created});
    if let Some((decision, at, note)) = decided {
        e["decision"] = json!(decision);
        e["decidedBy"] = json!("human");
        e["decidedAt"] = json!(at);
        e["note"] = json!(note);
    }
    write(root, &format!("escalations/{id}.json"), &e);
}

fn cell(role: &str, task: &str, content: &str, value: f64) -> Value {
    json!({"roleId": role, "taskId": task, "type": "lesson", "content": content, "value": value})
}

/// Three weeks of November 2026 and one day of October.
fn fixture() -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let r = d.path();
    let tasks = [
        T {
            id: "t-1031-a",
            kind: "coding",
            pm: "coding-pm",
            created: "2026-10-31T09:00:00Z",
            end: Some(("completed", "2026-10-31T10:00:00Z", 1, 8.0, true)),
        },
        T {
            id: "t-1112-a",
            kind: "coding",
            pm: "coding-pm",
            created: "2026-11-12T09:00:00Z",
            end: Some(("completed", "2026-11-12T11:00:00Z", 2, 7.5, true)),
        },
        T {
            id: "t-1119-a",
            kind: "research",
            pm: "research-pm",
            created: "2026-11-19T08:00:00Z",
            end: Some(("failed", "2026-11-19T23:59:59Z", 3, 4.0, false)),
        },
        T {
            id: "t-1120-a",
            kind: "coding",
            pm: "coding-pm",
            created: "2026-11-20T00:00:00Z",
            end: Some(("completed", "2026-11-20T09:30:00Z", 1, 9.0, true)),
        },
        T {
            id: "t-1120-b",
            kind: "coding",
            pm: "coding-pm",
            created: "2026-11-20T01:00:00Z",
            end: Some(("failed", "2026-11-20T12:00:00Z", 3, 5.5, false)),
        },
        T {
            id: "t-1120-c",
            kind: "writing",
            pm: "writing-pm",
            created: "2026-11-20T02:00:00Z",
            end: Some(("completed", "2026-11-20T23:59:59Z", 2, 8.25, true)),
        },
        // Completed one second after the day ends: the next day's.
        T {
            id: "t-1121-a",
            kind: "writing",
            pm: "writing-pm",
            created: "2026-11-20T22:00:00Z",
            end: Some(("completed", "2026-11-21T00:00:00Z", 1, 7.0, true)),
        },
        T { id: "t-1120-run", kind: "quant", pm: "quant-pm", created: "2026-11-20T05:00:00Z", end: None },
    ];
    for t in &tasks {
        task(r, t);
    }
    escalation(
        r,
        "20261119T100000.000000Z-aaaa",
        "high",
        "2026-11-19T10:00:00Z",
        Some(("rejected", "2026-11-19T11:00:00Z", "too risky")),
    );
    escalation(
        r,
        "20261120T080000.000000Z-bbbb",
        "critical",
        "2026-11-20T08:00:00Z",
        Some(("approved", "2026-11-20T08:15:00Z", "go | ahead")),
    );
    escalation(r, "20261120T200000.000000Z-cccc", "normal", "2026-11-20T20:00:00Z", None);
    write(
        r,
        "harvest/daily/2026-11-20.json",
        &json!({
            "date": "2026-11-20", "generatedAt": "2026-11-20T23:59:59Z",
            "cells": [cell("creator", "t-1120-a", "Write the failing test first", 0.9),
                      cell("analyst", "t-1120-b", "Check units | before comparing", 0.7)],
            "crossPollination": []
        }),
    );
    write(
        r,
        "harvest/daily/2026-11-19.json",
        &json!({
            "date": "2026-11-19", "generatedAt": "2026-11-19T23:59:59Z",
            "cells": [cell("creator", "t-1119-a", "Write the failing test first", 0.6),
                      cell("researcher", "t-1119-a", "Cite the primary source", 0.8)],
            "crossPollination": []
        }),
    );
    (d, store)
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-23T00:10:00Z").unwrap().to_utc()
}

fn day(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

#[test]
fn daily_report() {
    let (_d, store) = fixture();
    let p = Period::containing(Kind::Daily, day("2026-11-20"));
    insta::assert_snapshot!(render(&store, p, now(), Kept::default()).unwrap());
}

#[test]
fn weekly_report() {
    let (_d, store) = fixture();
    let p = Period::containing(Kind::Weekly, day("2026-11-20"));
    assert_eq!(p.name(), "2026-W47");
    insta::assert_snapshot!(render(&store, p, now(), Kept::default()).unwrap());
}

#[test]
fn monthly_report_marks_a_partial_period() {
    let (_d, store) = fixture();
    let p = Period::containing(Kind::Monthly, day("2026-11-20"));
    insta::assert_snapshot!(render(&store, p, now(), Kept::default()).unwrap());
}

#[test]
fn an_empty_tree_reports_nothing_ended() {
    let d = tempfile::tempdir().unwrap();
    let (store, _) = Store::init(d.path()).unwrap();
    let p = Period::containing(Kind::Daily, day("2026-11-20"));
    insta::assert_snapshot!(render(&store, p, now(), Kept::default()).unwrap());
}

#[test]
fn the_same_tree_and_clock_give_the_same_bytes() {
    let (_d, store) = fixture();
    let p = Period::containing(Kind::Weekly, day("2026-11-20"));
    assert_eq!(render(&store, p, now(), Kept::default()).unwrap(), render(&store, p, now(), Kept::default()).unwrap());
    let rel = super::write(&store, p, now(), Kept::default()).unwrap();
    assert_eq!(rel, "reports/weekly/2026-W47.md");
    let written = std::fs::read_to_string(store.root().join(rel)).unwrap();
    assert_eq!(written, clawboard_core::formats::seal(&render(&store, p, now(), Kept::default()).unwrap()));
    assert!(clawboard_core::formats::is_sealed(written.as_bytes()));
}

#[test]
fn periods_and_their_boundaries() {
    let w = Period::containing(Kind::Weekly, day("2026-01-01")); // a Thursday in 2026-W01
    assert_eq!((w.name(), w.first, w.end()), ("2026-W01".into(), day("2025-12-29"), day("2026-01-05")));
    assert_eq!(w.previous().name(), "2025-W52");
    let w53 = Period::containing(Kind::Weekly, day("2026-12-31"));
    assert_eq!(w53.name(), "2026-W53");
    let m = Period::containing(Kind::Monthly, day("2026-03-31"));
    assert_eq!((m.name(), m.end(), m.previous().name()), ("2026-03".into(), day("2026-04-01"), "2026-02".into()));
    assert_eq!(m.previous().end(), day("2026-03-01"));
    let d = Period::containing(Kind::Daily, day("2026-03-01"));
    assert_eq!((d.previous().name(), d.rel()), ("2026-02-28".into(), "reports/daily/2026-03-01.md".into()));
    let (start, end) = d.bounds();
    assert!(d.contains(start) && !d.contains(end) && d.contains(end - Duration::seconds(1)));
}

#[test]
fn a_report_reaching_back_past_retention_says_which_counts_are_short() {
    let (_d, store) = fixture();
    let seed = Kept::of(&clawboard_core::retention::Policy::default());
    let notes = |kind: Kind, kept: Kept| -> Vec<String> {
        let text = render(&store, Period::containing(kind, day("2026-11-20")), now(), kept).unwrap();
        text.lines().filter(|l| l.starts_with("- Retention deletes")).map(str::to_owned).collect()
    };
    // The day and the day before are within both rules (now is 2026-11-23T00:10Z).
    assert!(notes(Kind::Daily, seed).is_empty());
    // The week before (from 2026-11-09) reaches past the 7 days failed tasks are kept.
    assert_eq!(
        notes(Kind::Weekly, seed),
        ["- Retention deletes failed tasks 7 days after they end (`retention.tasks.failed`): those that ended \
             before 2026-11-16T00:10:00Z may be gone from the tree, so the counts of failed tasks before then (and \
             their submitted, type, score and PM figures) are short."]
    );
    // October reaches past both.
    let monthly = notes(Kind::Monthly, seed);
    assert_eq!(monthly.len(), 2, "{monthly:#?}");
    assert!(monthly[0].contains("completed tasks 30 days") && monthly[0].contains("before 2026-10-24T00:10:00Z"));
    assert!(monthly[1].contains("failed tasks 7 days"));
    // Retention off (or every task kept for good): nothing to say.
    assert!(notes(Kind::Monthly, Kept::default()).is_empty());
}
