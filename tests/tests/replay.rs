//! `clawboard task replay` end to end: recorded tasks (the demo's three: a lifecycle
//! task that iterated, one escalated and approved, a blueprint with competing
//! titles and a quality loop; and `clawboard run`'s blueprint task) replayed with
//! no role run, under an edited config, cut short, not recorded to the end, and on
//! bad input; the recorded tree is never changed.

use std::path::Path;

use clawboard_tests::blueprints::*;
use clawboard_tests::{Run, Tree};
use serde_json::Value;

fn replay(t: &Tree, cfg: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--config", cfg.to_str().unwrap(), "task", "replay"];
    all.extend_from_slice(args);
    t.run(&all)
}

/// A blueprint task run by `clawboard run` with the example roles: its tree and id.
fn recorded_blueprint() -> (Tree, String, std::path::PathBuf) {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let input = t.scratch("input.json", xhs_input().to_string().as_bytes());
    let r = t.run(&["--config", cfg.to_str().unwrap(), "run", "xiaohongshu_viral", "--input", input.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let id = r.stderr.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
    assert!(t.root.join("tasks").join(&id).join("task.json").exists(), "{id}: {}", r.stderr);
    (t, id, cfg)
}

#[test]
fn the_demo_tasks_replay_the_same_with_no_role_run() {
    let t = Tree::new();
    t.run(&["demo"]).ok();
    let cfg = t.root.join(".clawboard/demo/clawboard.toml");
    let before = t.snapshot();
    let mut tasks: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    tasks.sort();
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    for id in &tasks {
        let r = replay(&t, &cfg, &[id, "--json"]);
        assert_eq!(r.code, 0, "{id}: {}{}", r.stdout, r.stderr);
        let j = r.json();
        assert!(verdicts(&j).iter().all(|(_, v)| v == "same"), "{id}: {:?}", verdicts(&j));
        assert_eq!((j["then"].as_str(), j["now"].as_str()), (Some("completed"), Some("completed")), "{id}");
        assert_eq!(j["board"], serde_json::json!([]), "{id}");
        assert_eq!(j["live_steps"], 0);
        let steps = verdicts(&j).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        if id.starts_with("demo-iterate") {
            assert!(steps.contains(&"iter-2/validator".to_owned()), "{steps:?}");
        }
        if id.starts_with("demo-blueprint") {
            for step in ["bp/title-c1", "bp/title-c3", "bp/r2/score", "bp/adapt", "harvest"] {
                assert!(steps.contains(&step.to_owned()), "{step} in {steps:?}");
            }
        }
    }
    // The summary over every finished task agrees.
    let all = replay(&t, &cfg, &["--all"]);
    assert_eq!(all.code, 0, "{}{}", all.stdout, all.stderr);
    assert!(all.stdout.contains("3 tasks replayed, 3 the same, 0 differ"), "{}", all.stdout);
    assert_eq!(t.snapshot(), before, "a replay changes nothing in the recorded tree");
}

#[test]
fn a_replay_runs_no_role_and_a_template_edit_names_the_title_steps_only() {
    let (t, id, cfg) = recorded_blueprint();
    let before = t.snapshot();
    let plain = replay(&t, &cfg, &[&id]);
    assert_eq!(plain.code, 0, "{}{}", plain.stdout, plain.stderr);
    assert!(plain.stdout.contains("no role run"), "{}", plain.stdout);

    // Every role a program that would leave a mark: the replay starts none of them.
    let mark = t.dir.path().join("a-role-ran");
    let sh = format!("command = [\"sh\", \"-c\", \"touch {}; exit 1\"]", mark.display());
    let roles = ["content-curator", "trend-tracker", "title-worker", "body-worker", "virality-scorer"];
    let patches: Vec<(&str, &str)> = roles.iter().map(|r| (*r, sh.as_str())).collect();
    let dead = t.scratch("dead.toml", config(&patches, "").as_bytes());
    let r = replay(&t, &dead, &[&id, "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!mark.exists(), "a role process was started");

    // The title template edited: the title steps are handed something else, no step before them is.
    let templates = t.dir.path().join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    let edited = std::fs::read_to_string(clawboard_tests::repo().join("config/templates/title_generation.json"))
        .unwrap()
        .replace("\"topic\": \"{intent}\"", "\"subject\": \"{intent}\"")
        .replace("\"required\": [\"topic\"]", "\"required\": [\"subject\"]");
    std::fs::write(templates.join("title_generation.json"), edited).unwrap();
    let extra = format!("[board]\ntemplates = {:?}\n", templates.display().to_string());
    let changed = t.scratch("edited.toml", config(&[], &extra).as_bytes());
    let r = replay(&t, &changed, &[&id, "--json"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let v = verdicts(&r.json());
    let differs: Vec<&str> = v.iter().filter(|(_, x)| x == "input_differs").map(|(s, _)| s.as_str()).collect();
    assert!(!differs.is_empty() && differs.iter().all(|s| s.contains("title-c")), "{v:?}");
    let first = v.iter().position(|(_, x)| x == "input_differs").unwrap();
    assert!(v[..first].iter().all(|(_, x)| x == "same"), "no step before the titles: {v:?}");
    assert!(first >= 2, "the brief and the trends come first: {v:?}");
    let diff = r.json()["steps"][first]["diff"].as_str().unwrap().to_owned();
    assert!(diff.contains("- ") && diff.contains("\"subject\""), "{diff}");
    let text = replay(&t, &changed, &[&id]);
    assert!(text.stdout.contains("input differs") && text.stdout.contains("+ "), "{}", text.stdout);
    assert_eq!(t.snapshot(), before, "the recorded tree is unchanged");
}

#[test]
fn a_step_the_recording_never_reached_stops_the_replay_or_runs_live() {
    let (t, id, cfg) = recorded_blueprint();
    let attempts = task_dir(&t, &id).join("attempts");
    // The recorded run, as if it ended before its harvest.
    let harvest: Vec<_> = std::fs::read_dir(&attempts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("-harvester."))
        .collect();
    assert!(!harvest.is_empty());
    for p in &harvest {
        std::fs::remove_file(p).unwrap();
    }
    let before = t.snapshot();
    let r = replay(&t, &cfg, &[&id, "--json"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let v = verdicts(&r.json());
    assert_eq!(v.last().unwrap(), &("harvest".to_owned(), "not_recorded".to_owned()), "{v:?}");
    assert!(v[..v.len() - 1].iter().all(|(_, x)| x == "same"), "{v:?}");
    let live = replay(&t, &cfg, &[&id, "--live", "--json"]);
    let j = live.json();
    assert_eq!(verdicts(&j).last().unwrap().1, "live", "{}", live.stdout);
    assert_eq!(j["live_steps"], 1);
    assert_eq!(j["now"], "completed", "the real harvester ran the last step: {}", live.stdout);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn a_recording_a_crash_cut_short_stops_at_that_step_and_says_so() {
    let (t, id, cfg) = recorded_blueprint();
    let attempts = task_dir(&t, &id).join("attempts");
    let mut names: Vec<String> =
        std::fs::read_dir(&attempts).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    // Cut at the body step's first attempt: it is `running`, and nothing after it was recorded.
    let body = names.iter().find(|n| n.contains("-body-worker.json")).unwrap().clone();
    let cut: u32 = body[..4].parse().unwrap();
    for n in &names {
        if n[..4].parse::<u32>().unwrap() > cut {
            std::fs::remove_file(attempts.join(n)).unwrap();
        }
    }
    let p = attempts.join(&body);
    let mut a: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    a["status"] = "running".into();
    for k in ["endedAt", "exitCode", "elapsedMs"] {
        a.as_object_mut().unwrap().remove(k);
    }
    std::fs::write(&p, serde_json::to_vec_pretty(&a).unwrap()).unwrap();
    let before = t.snapshot();
    let r = replay(&t, &cfg, &[&id, "--json"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let v = verdicts(&r.json());
    assert_eq!(v.last().unwrap(), &("bp/body".to_owned(), "cut_short".to_owned()), "{v:?}");
    let text = replay(&t, &cfg, &[&id]);
    assert!(text.stdout.contains("bp/body") && text.stdout.contains("cut short"), "{}", text.stdout);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn bad_replays_are_refused_naming_what_is_wrong_and_change_nothing() {
    let (t, id, cfg) = recorded_blueprint();
    let before = t.snapshot();
    let r = replay(&t, &cfg, &["task-20260101-000000-abcdef"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("no task task-20260101-000000-abcdef"), "{}", r.stderr);
    let r = replay(&t, &cfg, &["../escape"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let full = t.dir.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    let r = replay(&t, &cfg, &[&id, "--into", full.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    let inside = t.root.join("replayed");
    let r = replay(&t, &cfg, &[&id, "--into", inside.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("inside the recorded tree"), "{}", r.stderr);
    assert_eq!(t.snapshot(), before, "nothing changed by a refused replay");

    // A blueprint no longer in the config.
    let task_json = task_dir(&t, &id).join("task.json");
    let mut task: Value = serde_json::from_slice(&std::fs::read(&task_json).unwrap()).unwrap();
    task["blueprint_id"] = "retired_blueprint".into();
    std::fs::write(&task_json, serde_json::to_vec_pretty(&task).unwrap()).unwrap();
    let r = replay(&t, &cfg, &[&id]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("/blueprint_id") && r.stderr.contains("retired_blueprint"), "{}", r.stderr);

    // --into keeps the replayed tree, outside the recorded one.
    task["blueprint_id"] = "xiaohongshu_viral".into();
    std::fs::write(&task_json, serde_json::to_vec_pretty(&task).unwrap()).unwrap();
    let kept = t.dir.path().join("kept");
    let r = replay(&t, &cfg, &[&id, "--into", kept.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let replayed: Value =
        serde_json::from_slice(&std::fs::read(kept.join("tasks").join(&id).join("task.json")).unwrap()).unwrap();
    assert_eq!(replayed["status"], "completed");
}

// --- fork ---------------------------------------------------------------------

fn attempt_files(t: &Tree, id: &str) -> Vec<Value> {
    let dir = task_dir(t, id).join("attempts");
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names.iter().filter(|n| n.ends_with(".json")).map(|n| read_json(&dir.join(n))).collect()
}

#[test]
fn a_fork_at_the_body_step_reuses_the_steps_before_it_and_runs_the_rest_on_the_edited_board() {
    let (t, id, cfg) = recorded_blueprint();
    let before = t.snapshot();
    let c = cfg.to_str().unwrap();
    let title = "\"秋冬护肤只做三件事\"";
    let set = format!("content.hook.selected={title}");
    let set2 = format!("content.hook.title={title}");
    let r = t.run(&[
        "--config", c, "task", "fork", &id, "--at", "bp/body", "--set", &set, "--set", &set2, "--run", "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = r.json();
    let fork = j["task"].as_str().unwrap().to_owned();
    assert_eq!(j["outcome"], "completed", "{}", r.stdout);
    assert_eq!(
        (j["forked_from"]["task"].as_str(), j["forked_from"]["step"].as_str()),
        (Some(id.as_str()), Some("bp/body"))
    );
    assert_eq!(j["forked_from"]["set"][0]["path"], "content.hook.selected", "the edits the VM makes before the body");
    let task = read_json(&task_dir(&t, &fork).join("task.json"));
    assert_eq!(task["forked_from"]["task"], id.as_str());

    // The steps before the body were copied, marked as the recorded task's, and none ran again.
    let attempts = attempt_files(&t, &fork);
    let copied: Vec<&Value> = attempts.iter().filter(|a| a["forkedFrom"] == id.as_str()).collect();
    let steps: Vec<&str> = copied.iter().map(|a| a["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["bp/curate", "bp/trends", "bp/title-c1", "bp/title-c2", "bp/title-c3"], "{attempts:#?}");
    let live: Vec<&str> =
        attempts.iter().filter(|a| a.get("forkedFrom").is_none()).map(|a| a["step"].as_str().unwrap()).collect();
    assert_eq!(live.first(), Some(&"bp/body"), "{live:?}");
    assert!(!live.iter().any(|s| *s == "bp/curate" || *s == "bp/title-c1"), "{live:?}");

    // The body step was handed the title the person set; the person's write is in the history.
    let body_input = std::fs::read_to_string(
        task_dir(&t, &fork).join("attempts").join(format!("{:04}-body-worker.input", copied.len() + 1)),
    )
    .unwrap();
    assert!(body_input.contains("秋冬护肤只做三件事"), "{body_input}");
    let history = t.run(&["--config", c, "board", "history", &fork, "content.hook.selected", "--json"]);
    assert!(history.stdout.contains("\"human\""), "{}", history.stdout);

    // Its tokens: what it spent itself, and what it reused.
    let result = read_json(&task_dir(&t, &fork).join("result.json"));
    assert_eq!(result["tokens"]["reused"]["slices"], 5, "{}", result["tokens"]);
    // `slice history` and `task show` say which steps were recorded and which ran here.
    let slices = t.run(&["--config", c, "slice", "history", &fork]);
    let recorded: Vec<&str> = slices.stdout.lines().filter(|l| l.contains("(recorded)")).collect();
    assert_eq!(recorded.len(), 5, "{}", slices.stdout);
    assert!(recorded.iter().all(|l| !l.contains("bp/body")), "{}", slices.stdout);
    assert!(slices.stdout.contains("reused: 5 slices of the steps a fork copied as recorded"), "{}", slices.stdout);
    let shown = t.run(&["--config", c, "task", "show", &fork]);
    assert!(shown.stdout.contains(&format!("forked from: {id} at step bp/body")), "{}", shown.stdout);
    assert!(shown.stdout.contains("5 attempts recorded there"), "{}", shown.stdout);

    // The recorded task is as it was (the fork is a new directory beside it).
    let mut after = t.snapshot();
    after.retain(|k, _| {
        !k.starts_with(&format!("tasks/{fork}")) && !k.starts_with(".clawboard") && !k.starts_with("roles/")
    });
    let mut was = before.clone();
    was.retain(|k, _| !k.starts_with(".clawboard") && !k.starts_with("roles/"));
    let changed: Vec<&String> = after.keys().filter(|k| after.get(*k) != was.get(*k)).collect();
    assert!(changed.iter().all(|k| !k.contains(&id)), "the recorded task changed: {changed:?}");
}

#[test]
fn a_lifecycle_task_forks_at_its_second_validation() {
    let t = Tree::new();
    t.run(&["demo"]).ok();
    let cfg = t.root.join(".clawboard/demo/clawboard.toml");
    let c = cfg.to_str().unwrap();
    let id = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("demo-iterate"))
        .unwrap();
    let r = t.run(&[
        "--config",
        c,
        "task",
        "fork",
        &id,
        "--at",
        "iter-2/validator",
        "--id",
        "task-20261207-000000-f0f0f0",
        "--run",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("task-20261207-000000-f0f0f0: completed"), "{}", r.stdout);
    let attempts = attempt_files(&t, "task-20261207-000000-f0f0f0");
    let live: Vec<&str> =
        attempts.iter().filter(|a| a.get("forkedFrom").is_none()).map(|a| a["step"].as_str().unwrap()).collect();
    assert_eq!(live, ["iter-2/validator", "harvest"], "{attempts:#?}");
    // The fork replays the same: its copied steps answer from its own records.
    let replayed = replay(&t, &cfg, &["task-20261207-000000-f0f0f0"]);
    assert_eq!(replayed.code, 0, "{}{}", replayed.stdout, replayed.stderr);
}

#[test]
fn bad_forks_are_refused_naming_what_is_wrong_and_leave_no_fork_behind() {
    let (t, id, cfg) = recorded_blueprint();
    let c = cfg.to_str().unwrap();
    let before = t.snapshot();
    let fork = |args: &[&str]| {
        let mut all = vec!["--config", c, "task", "fork"];
        all.extend_from_slice(args);
        t.run(&all)
    };
    for (args, says) in [
        (vec!["task-20260101-000000-abcdef", "--at", "bp/body"], "no task task-20260101-000000-abcdef"),
        (vec![id.as_str(), "--at", "bp/nowhere"], "never reached that step (its steps: bp/curate"),
        (vec![id.as_str(), "--seq", "100000"], "board history ends at record"),
        (vec![id.as_str(), "--at", "bp/body", "--set", "elsewhere.x=1"], "\"elsewhere\" is not a zone"),
        (vec![id.as_str(), "--at", "bp/body", "--set", "control.step_status.body=5"], "control.step_status.body"),
        (vec![id.as_str(), "--at", "bp/body", "--set", "content.hook.title=not json"], "the value is not JSON"),
        (vec![id.as_str(), "--at", "bp/body", "--id", id.as_str()], "a task with that id exists"),
    ] {
        let r = fork(&args);
        assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        assert_eq!(t.snapshot(), before, "{args:?} left something behind");
    }
    // A fork after the last record leaves nothing to run.
    let last = std::fs::read_dir(task_dir(&t, &id).join("board/history")).unwrap().count().to_string();
    let r = fork(&[&id, "--seq", &last]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("nothing is left to run"), "{}", r.stderr);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn a_blueprint_fork_with_another_input_hands_it_to_the_steps_from_the_fork_point() {
    let (t, id, cfg) = recorded_blueprint();
    let c = cfg.to_str().unwrap();
    let before = t.snapshot();
    let bad = t.scratch("bad.json", b"{\"topic\": ");
    let r = t.run(&["--config", c, "task", "fork", &id, "--at", "bp/title-c1", "--input", bad.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("bad.json") && r.stderr.contains("not JSON"), "{}", r.stderr);
    assert_eq!(t.snapshot(), before, "a refused --input leaves nothing behind");

    let other = t.scratch("other.json", "{\"topic\": \"冬季跑步\", \"platform\": \"xiaohongshu\"}".as_bytes());
    let r = t.run(&[
        "--config",
        c,
        "task",
        "fork",
        &id,
        "--at",
        "bp/title-c1",
        "--input",
        other.to_str().unwrap(),
        "--run",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let fork = r.json()["task"].as_str().unwrap().to_owned();
    let task = read_json(&task_dir(&t, &fork).join("task.json"));
    assert_eq!(task["user_input"]["topic"], "冬季跑步");
    let dir = task_dir(&t, &fork).join("attempts");
    let input_of = |stem: &str| std::fs::read_to_string(dir.join(format!("{stem}.input"))).unwrap();
    assert!(!input_of("0001-content-curator").contains("冬季跑步"), "the copied step kept the recorded input");
    assert!(input_of("0003-title-worker").contains("冬季跑步"), "the first title runs on the new input");
}

/// Fallback after refused replies, a timed-out and a garbage candidate among the
/// competing titles, the per-platform fan-out and a step's condition: each run by `clawboard run`,
/// then replayed: every step the same, each recorded attempt answering once.
#[test]
fn fallbacks_timeouts_and_the_platform_fan_out_replay_the_same() {
    /// A case: its name, the roles' config patches, and the run's input.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Value);
    let cases: [Case; 4] = [
        (
            "fallback",
            vec![("body-worker", "env = { WRITING_SENSITIVE = \"body-worker:always\" }")],
            serde_json::json!({"user_input": xhs_input(), "execution_config": {"quality_threshold": 50}}),
        ),
        (
            "timeout",
            vec![(
                "title-worker",
                "timeout = \"4s\"\nenv = { WRITING_SLEEP = \"title-worker:1:30\", WRITING_GARBAGE = \"title-worker:3\" }",
            )],
            serde_json::json!({"user_input": xhs_input(), "execution_config": {"max_retries": 0, "quality_threshold": 50}}),
        ),
        ("fan-out", vec![], {
            let mut input = xhs_input();
            input["platforms"] = serde_json::json!(["wechat", "twitter"]);
            serde_json::json!({"user_input": input})
        }),
        // deep_analysis: its cta step's condition (`when`) is false for a general platform.
        ("condition", vec![], serde_json::json!({"user_input": {"topic": "个人理财", "platform": "general"}})),
    ];
    for (name, patches, input) in cases {
        let blueprint = if name == "condition" { "deep_analysis" } else { "xiaohongshu_viral" };
        let t = Tree::init();
        let cfg = t.config(&config(&patches, ""));
        let file = t.scratch("input.json", input.to_string().as_bytes());
        let r = t.run(&["--config", cfg.to_str().unwrap(), "run", blueprint, "--input", file.to_str().unwrap()]);
        let id = r.stderr.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
        let steps: Vec<String> = t
            .attempts(&id)
            .iter()
            .map(|a| {
                format!(
                    "{} {} {}",
                    a["step"].as_str().unwrap(),
                    a["role"].as_str().unwrap(),
                    a["status"].as_str().unwrap()
                )
            })
            .collect();
        match name {
            "fallback" => assert!(steps.iter().any(|s| s == "bp/body narrative-builder ok"), "{steps:?}"),
            "timeout" => assert!(steps.iter().any(|s| s.ends_with("timedout")), "{steps:?}"),
            "condition" => assert!(!steps.iter().any(|s| s.starts_with("bp/cta")), "the cta was skipped: {steps:?}"),
            _ => assert!(steps.iter().any(|s| s.starts_with("bp/adapt-for-wechat")), "{steps:?}"),
        }
        let replayed = replay(&t, &cfg, &[&id, "--json"]);
        assert_eq!(replayed.code, 0, "{name}: {}{}", replayed.stdout, replayed.stderr);
        let v = verdicts(&replayed.json());
        assert!(v.iter().all(|(_, x)| x == "same"), "{name}: {v:?}");
        assert_eq!(v.len(), steps.len(), "{name}: every recorded attempt answered once: {v:?} {steps:?}");
    }
}

#[test]
fn a_fork_dropped_beside_a_running_daemon_is_run_by_it() {
    let (t, id, cfg) = recorded_blueprint();
    let d = t.daemon();
    let r = t.run(&["--config", cfg.to_str().unwrap(), "task", "fork", &id, "--at", "bp/cta", "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let fork = r.json()["task"].as_str().unwrap().to_owned();
    assert_eq!(wait_task(&t, &fork, 120), "completed", "{}", d.output());
    assert_eq!(d.stop(), 0);
    let live: Vec<String> = t
        .attempts(&fork)
        .iter()
        .filter(|a| a.get("forkedFrom").is_none())
        .map(|a| a["step"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(live.first().map(String::as_str), Some("bp/cta"), "{live:?}");
    assert!(!live.iter().any(|s| s.contains("title") || s.contains("body")), "{live:?}");
    let shown = t.run(&["--config", cfg.to_str().unwrap(), "task", "show", &fork]);
    assert!(shown.stdout.contains(&format!("forked from: {id} at step bp/cta")), "{}", shown.stdout);
}
