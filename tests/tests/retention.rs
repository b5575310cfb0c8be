//! Retention end to end: the real binary on a tree whose bucket (a directory, and a
//! real S3-compatible server) and local archive hold some tasks and not others.

use clawboard_tests::s3::{Bucket, Kind};
use clawboard_tests::{Run, Tree, wait_until};
use rstest::rstest;

fn ago(days: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::days(days)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A task that ended `days` ago (`status` completed or failed), with a memory harvest
/// when `harvest`; a running one when `status` is running.
fn task(t: &Tree, id: &str, status: &str, days: i64, harvest: bool) {
    let dir = t.root.join("tasks").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut v = serde_json::json!({"taskId": id, "type": "coding", "description": "x", "priority": "normal",
                                   "createdBy": "human", "createdAt": ago(days + 1), "status": status});
    if status != "running" {
        v["completedAt"] = serde_json::json!(ago(days));
    }
    std::fs::write(dir.join("task.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    std::fs::write(
        dir.join("result.json"),
        format!("{{\"taskId\":\"{id}\",\"producedAt\":\"{}\",\"summary\":\"done\"}}", ago(days)),
    )
    .unwrap();
    if harvest {
        let h = serde_json::json!({"taskId": id, "harvestedAt": ago(days), "experiences": [
            {"roleId": "w", "cells": [{"type": "insight", "content": format!("lesson of {id}"), "value": 0.5}]}]});
        std::fs::write(dir.join("memory-harvest.json"), serde_json::to_vec_pretty(&h).unwrap()).unwrap();
    }
}

fn cli(t: &Tree, args: &[&str]) -> Run {
    let cfg = t.dir.path().join("clawboard.toml");
    let mut all = vec!["--config", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    t.run(&all)
}

fn labels(plan: &serde_json::Value, part: &str) -> Vec<String> {
    let mut v: Vec<String> = plan["plan"][part]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| match i["subject"]["kind"].as_str().unwrap() {
            "task" => format!("tasks/{}/", i["subject"]["id"].as_str().unwrap()),
            "file" => i["subject"]["path"].as_str().unwrap().to_owned(),
            other => other.to_owned(),
        })
        .collect();
    v.sort();
    v
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::s3s(Kind::S3s)]
fn expired_tasks_go_only_once_the_bucket_and_the_archive_have_them(#[case] kind: Kind) {
    let t = Tree::init();
    let bucket = Bucket::new(kind, t.dir.path());
    t.config(&bucket.sync_config(t.dir.path(), ""));
    task(&t, "old-done", "completed", 40, true);
    task(&t, "old-failed", "failed", 8, false);
    task(&t, "young", "completed", 1, true);
    task(&t, "old-running", "running", 400, false);
    cli(&t, &["archive", "now", "--no-harvest"]).ok();
    std::fs::write(t.root.join("harvest/daily/2020-01-01.json"), "{}").unwrap();
    std::fs::write(t.root.join("reports/monthly/2020-01.md"), "# kept forever\n").unwrap();
    // Pushed, but its harvest came after the archive's commit.
    task(&t, "old-unarchived", "completed", 40, true);
    let push = cli(&t, &["sync", "push"]);
    assert_eq!(push.code, 0, "{}", push.stderr);
    // Written after the push: the bucket does not have it.
    task(&t, "old-unpushed", "completed", 40, false);

    let plan = cli(&t, &["retention", "plan", "--json"]).json();
    assert_eq!(
        labels(&plan, "delete"),
        ["harvest/daily/2020-01-01.json", "tasks/old-done/", "tasks/old-failed/"],
        "{plan}"
    );
    assert_eq!(labels(&plan, "held"), ["tasks/old-unarchived/", "tasks/old-unpushed/"], "{plan}");
    let held = plan["plan"]["held"].as_array().unwrap();
    let why = |id: &str| held.iter().find(|h| h["subject"]["id"] == id).unwrap()["held"].as_str().unwrap().to_owned();
    assert!(why("old-unpushed").contains("not confirmed in the bucket yet"), "{}", why("old-unpushed"));
    assert!(why("old-unarchived").contains("not in an archive commit yet"), "{}", why("old-unarchived"));
    let human = cli(&t, &["retention", "plan"]);
    human.ok();
    assert!(human.stdout.contains("Held back (2):") && human.stdout.contains("retention.tasks.completed: 30 days"));

    let run = cli(&t, &["retention", "run"]);
    run.ok();
    assert!(run.stdout.contains("Deleted 2 task(s), 1 file(s)"), "{}", run.stdout);
    for gone in ["tasks/old-done", "tasks/old-failed", "harvest/daily/2020-01-01.json"] {
        assert!(!t.root.join(gone).exists(), "{gone}");
    }
    for kept in
        ["tasks/young", "tasks/old-running", "tasks/old-unarchived", "tasks/old-unpushed", "reports/monthly/2020-01.md"]
    {
        assert!(t.root.join(kept).exists(), "{kept}");
    }
    // The deletions reach the bucket as deletes, so no node brings them back.
    cli(&t, &["sync", "push"]).ok();
    let keys: Vec<String> = bucket.objects().into_keys().collect();
    assert!(!keys.iter().any(|k| k.starts_with("tasks/old-done/")), "{keys:?}");
    assert!(keys.iter().any(|k| k.starts_with("tasks/old-unarchived/")), "{keys:?}");

    // That push sent old-unpushed: it is no longer held. --force takes the one still
    // held (not archived) too, loudly.
    let plan = cli(&t, &["retention", "plan", "--json"]).json();
    assert_eq!(labels(&plan, "delete"), ["tasks/old-unpushed/"], "{plan}");
    assert_eq!(labels(&plan, "held"), ["tasks/old-unarchived/"], "{plan}");
    let forced = cli(&t, &["retention", "run", "--force"]);
    forced.ok();
    assert!(forced.stderr.contains("--force: deleting 1 item(s) retention held back"), "{}", forced.stderr);
    assert!(
        forced.stdout.contains("Deleted 2 task(s), 0 file(s), 0 memory-queue entries, 0 lane record(s) (1 forced)"),
        "{}",
        forced.stdout
    );
    assert!(!t.root.join("tasks/old-unpushed").exists() && !t.root.join("tasks/old-unarchived").exists());
}

#[test]
fn a_bad_policy_names_the_file_and_key_and_deletes_nothing() {
    let t = Tree::init();
    t.config("");
    task(&t, "old-done", "completed", 40, false);
    let policy = t.dir.path().join("retention.yaml");
    for (yaml, want) in [
        ("retention:\n  tasks:\n    completed: 30 dayz\n", "retention.tasks.completed: unknown unit \"dayz\""),
        ("retention:\n  tasks:\n    done: 30 days\n", "retention.tasks.done: unknown key"),
        ("retention:\n  tasks: [\n", "(syntax)"),
    ] {
        std::fs::write(&policy, yaml).unwrap();
        for sub in ["plan", "run"] {
            let r = cli(&t, &["retention", sub]);
            r.expect_code(2);
            assert!(
                r.stderr.contains(&policy.display().to_string()) && r.stderr.contains(want),
                "{yaml}: {}",
                r.stderr
            );
        }
        assert!(t.root.join("tasks/old-done/task.json").exists());
    }
    // A policy that keeps completed tasks 60 days: nothing is due.
    std::fs::write(&policy, "retention:\n  tasks:\n    completed: 60 days\n").unwrap();
    let plan = cli(&t, &["retention", "plan"]);
    plan.ok();
    assert!(plan.stdout.contains(&format!("Policy: {}", policy.display())) && plan.stdout.contains("Nothing is due."));
}

#[test]
fn the_daemon_applies_the_policy_on_schedule_and_checks_it_on_sighup() {
    let t = Tree::init();
    t.config("[retention]\nschedule = \"*/1 * * * * *\"\n\n[archive]\nenabled = false\n");
    task(&t, "old-done", "completed", 40, false);
    task(&t, "young", "completed", 1, false);
    let d = t.daemon();
    wait_until(30, "retention to delete the expired task", || !t.root.join("tasks/old-done").exists());
    assert!(t.root.join("tasks/young/task.json").exists());
    wait_until(10, "the run's log line", || d.output().contains("retention: deleted what was due"));
    // A bad edit: SIGHUP names it; the daemon keeps running and deletes nothing.
    std::fs::write(t.dir.path().join("retention.yaml"), "retention:\n  tasks:\n    completed: soon\n").unwrap();
    task(&t, "old-two", "completed", 40, false);
    d.signal("HUP");
    wait_until(30, "the SIGHUP check", || d.output().contains("SIGHUP: retention:"));
    assert!(d.output().contains("retention.tasks.completed"), "{}", d.output());
    wait_until(30, "a run that refuses the bad policy", || d.output().contains("nothing deleted this run"));
    assert!(t.root.join("tasks/old-two/task.json").exists());
    assert!(t.daemon_status().is_some(), "still running");
    assert_eq!(d.stop(), 0);
}

/// A task whose only memory is cross-pollination candidates waits for the archive
/// too: until its lines are in an archive commit, retention holds it.
#[test]
fn a_task_whose_memory_is_only_candidates_waits_for_the_archive() {
    let t = Tree::init();
    let bucket = Bucket::new(Kind::Dir, t.dir.path());
    t.config(&bucket.sync_config(t.dir.path(), ""));
    let candidates = |id: &str| {
        task(&t, id, "completed", 40, false);
        let h = serde_json::json!({"taskId": id, "harvestedAt": ago(40), "experiences": [],
            "crossPollinationCandidates": [{"fromRole": "w", "toRole": "critic", "pattern": format!("only lesson of {id}"), "value": 0.9}]});
        std::fs::write(t.root.join("tasks").join(id).join("memory-harvest.json"), serde_json::to_vec(&h).unwrap())
            .unwrap();
    };
    candidates("cand-1");
    cli(&t, &["sync", "push"]).ok();
    let plan = cli(&t, &["retention", "plan", "--json"]).json();
    assert_eq!(labels(&plan, "held"), ["tasks/cand-1/"], "no archive commit yet: {plan}");
    cli(&t, &["archive", "now", "--no-harvest"]).ok();
    // A second one after the commit: its file is on the branch, its line is not.
    candidates("cand-2");
    cli(&t, &["sync", "push"]).ok();
    let plan = cli(&t, &["retention", "plan", "--json"]).json();
    assert_eq!(labels(&plan, "delete"), ["tasks/cand-1/"], "{plan}");
    assert_eq!(labels(&plan, "held"), ["tasks/cand-2/"], "{plan}");
    let held = plan["plan"]["held"][0]["held"].as_str().unwrap();
    assert!(held.contains("memory/cross-pollination/w--critic.jsonl"), "{held}");
}
