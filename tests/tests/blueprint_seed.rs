//! What seed 001 says of a run beyond its steps, end to end through `clawboard
//! run` with the example roles: the seed's own example blueprints as written
//! (config/blueprints/examples/), the quality target after the last round, a
//! report that never calls an unrun check passed, a run with no content, and
//! `slice preview` of a blueprint step before and after its run.

use clawboard_tests::Tree;
use clawboard_tests::blueprints::*;
use clawboard_tests::repo;
use serde_json::{Value, json};

/// Runs `blueprint` with `input` under `cfg`: the printed contract and the exit code.
fn run(t: &Tree, cfg: &str, blueprint: &str, input: Value) -> (Value, i32) {
    let file = t.scratch(&format!("{blueprint}-in.json"), input.to_string().as_bytes());
    let r = t.run(&["--config", cfg, "run", blueprint, "--input", file.to_str().unwrap()]);
    let out = r.json();
    check_contract(&out);
    (out, r.code)
}

fn only_task(t: &Tree) -> String {
    let mut tasks: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks.remove(0)
}

fn examples_config(t: &Tree, roles: &[(&str, &str)]) -> String {
    let dir = repo().join("config/blueprints/examples");
    let cfg = t.config(&config(roles, &format!("[blueprints]\ndir = \"{}\"\n", dir.display())));
    cfg.to_str().unwrap().to_owned()
}

/// Seed 001's static example (no blueprint_id, no outputs, `"scope": ["intent",
/// "hook.output"]`) runs as written: each step's result in its own place
/// (`content.results.{step}`), the body step handed the intent and the hook
/// step's result, the last step's text the body, and `slice preview` shows the
/// resolved paths.
#[test]
fn the_seeds_static_example_runs_as_written() {
    let t = Tree::init();
    let cfg = examples_config(&t, &[]);
    let (out, code) = run(&t, &cfg, "seed_static_linear", json!({"topic": "秋冬护肤", "platform": "xiaohongshu"}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (0, Some("success")), "{out:#}");
    let results = &out["blackboard_snapshot"]["content_zone"]["results"];
    let title = results["hook"]["selected"].as_str().unwrap();
    let body = results["body"]["content"].as_str().unwrap();
    assert!(!title.is_empty() && !body.is_empty(), "{results:#}");
    assert_eq!(out["final_content"]["body"], body);
    assert_eq!(out["final_content"]["title"], title);
    let keys: Vec<(String, String)> = out["execution_result"]["steps_executed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step_id"].as_str().unwrap().to_owned(), s["output_key"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(keys, pairs(&[("hook", "content.results.hook"), ("body", "content.results.body")]));
    let task = only_task(&t);
    let led = t.run(&["slice", "history", &task, "--json"]).ok().json();
    let body_entry = led["entries"].as_array().unwrap().iter().find(|e| e["step"] == "bp/body").unwrap().clone();
    assert_eq!(body_entry["scope"], json!(["meta.intent", "content.results.hook"]), "{body_entry:#}");
    let p = t.run(&["--config", &cfg, "slice", "preview", &task, "body", "--json"]).ok().json();
    assert_eq!(p["scope"], json!(["meta.intent", "content.results.hook"]), "{p:#}");
    assert_eq!(p["blueprint"], json!({"blueprint_id": "seed_static_linear", "step": "body"}));
    assert_eq!(p["slice_data"]["hook"]["selected"], title, "{p:#}");
    assert_eq!(p["budget"], 500, "body-worker's budget from seed 001's table");
}

/// Seed 001's adaptive example (two skills, `scope: all`, no outputs) runs as
/// written; its content step's text is the body.
#[test]
fn the_seeds_adaptive_example_runs_as_written() {
    let t = Tree::init();
    let cfg = examples_config(&t, &[]);
    let (out, code) = run(&t, &cfg, "seed_adaptive", json!({"topic": "个人理财", "platform": "wechat"}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (0, Some("success")), "{out:#}");
    let results = &out["blackboard_snapshot"]["content_zone"]["results"];
    assert!(results["strategy"]["outline"].is_array(), "{results:#}");
    let body = results["content"]["content"].as_str().unwrap();
    assert!(body.contains("个人理财"), "{body}");
    assert_eq!(out["final_content"]["body"], body);
    let types: Vec<&str> = out["execution_result"]["steps_executed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["component_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["skill", "skill"]);
}

/// A run whose steps wrote no text is `partial`, naming where content was looked
/// for; never `success`.
#[test]
fn a_run_with_no_content_is_partial_naming_what_is_missing() {
    let t = Tree::init();
    let dir = t.dir.path().join("bps");
    std::fs::create_dir_all(&dir).unwrap();
    let bp = json!({"type": "static_linear", "steps": [{"id": "quiet", "worker": "cta-worker", "scope": ["topic"]}]});
    std::fs::write(dir.join("quiet_one.json"), bp.to_string()).unwrap();
    let quiet = r#"command = ["sh", "-c", "cat >/dev/null; echo '{}'"]"#;
    let cfg = t.config(&config(&[("cta-worker", quiet)], &format!("[blueprints]\ndir = \"{}\"\n", dir.display())));
    let (out, code) = run(&t, cfg.to_str().unwrap(), "quiet_one", json!({"topic": "秋冬护肤"}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (1, Some("partial")), "{out:#}");
    let task = only_task(&t);
    let result = read_json(&task_dir(&t, &task).join("result.json"));
    let summary = result["summary"].as_str().unwrap();
    assert!(
        summary.contains(
            "the final content is empty: no step wrote a text to content.body.content, content.thread, \
             content.platform_versions, content.results.quiet"
        ),
        "{summary}"
    );
}

/// Seed 001's gate: a virality score still under `quality_threshold` after the
/// last loop round (or in a blueprint without a loop) ends `partial`, with the
/// score and the target in control.errors.
#[test]
fn a_score_under_the_quality_target_after_the_last_round_is_partial() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let cfg = cfg.to_str().unwrap();
    let exec = json!({"quality_threshold": 95, "max_retries": 1});
    let (out, code) = run(&t, cfg, "xiaohongshu_viral", json!({"user_input": xhs_input(), "execution_config": exec}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (1, Some("partial")), "{out:#}");
    let control = &out["blackboard_snapshot"]["control_zone"];
    assert_eq!(control["iteration_count"], 2, "one extra round ($max_retries = 1)");
    let score = out["quality_report"]["virality_score"].as_f64().unwrap();
    let want = format!("quality target not met: virality {score} is under the target 95 after round 2, the last");
    let errors = control["errors"].as_array().unwrap();
    let e =
        errors.iter().find(|e| e["error_type"] == "quality_below_threshold").unwrap_or_else(|| panic!("{errors:#?}"));
    assert_eq!((e["step_id"].as_str(), e["message"].as_str()), (Some("score"), Some(want.as_str())), "{e}");

    // A static blueprint has no rounds: its one score is held to the target.
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let input = json!({"user_input": {"topic": "健身入门", "platform": "twitter"}, "execution_config": {"quality_threshold": 99}});
    let (out, _) = run(&t, cfg.to_str().unwrap(), "twitter_thread", input);
    assert_eq!(out["execution_result"]["status"], "partial", "{out:#}");
    let errors = out["blackboard_snapshot"]["control_zone"]["errors"].to_string();
    assert!(errors.contains("is under the target 99\""), "{errors}");

    // Met, it is a success (the same run at the default target of 75).
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let (out, code) = run(&t, cfg.to_str().unwrap(), "xiaohongshu_viral", json!({"user_input": xhs_input()}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (0, Some("success")), "{out:#}");
}

/// With `enable_middleware: false` no filter runs: the report says so and does
/// not call the content passed, though it holds a listed word.
#[test]
fn a_check_that_did_not_run_is_reported_as_not_run() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let exec = json!({"enable_middleware": false, "quality_threshold": 50});
    let (out, code) = run(
        &t,
        cfg.to_str().unwrap(),
        "xiaohongshu_viral",
        json!({"user_input": xhs_input(), "execution_config": exec}),
    );
    assert_eq!(code, 0, "{out:#}");
    assert!(out["final_content"]["title"].as_str().unwrap().contains("最好"), "no filter ran: {out:#}");
    let q = &out["quality_report"];
    assert!(q.get("sensitive_filter_passed").is_none(), "{q}");
    assert_eq!(
        q["checks_not_run"],
        json!([
            "sensitive_filter: execution_config.enable_middleware is false",
            "quality_target: execution_config.enable_middleware is false"
        ])
    );
    assert_eq!(q["platform_compliance"], true, "compliance runs at assembly whatever the switch");
}

/// `slice preview TASK STEP` for a blueprint step before the run starts: the
/// board as the step will find it (the input's meta), the step's own scope and
/// budget; a step the blueprint does not have is refused naming its steps.
#[test]
fn a_blueprint_step_is_previewed_before_its_run() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let cfg = cfg.to_str().unwrap();
    // Submitted with no daemon running: the task waits in tasks/, not run yet.
    let file = t.scratch("bp-1.json", bp_task("bp-1", "xiaohongshu_viral", xhs_input(), None).as_bytes());
    t.run(&["--config", cfg, "task", "submit", file.to_str().unwrap()]).ok();
    assert!(!task_dir(&t, "bp-1").join("board.json").exists());
    let p = t.run(&["--config", cfg, "slice", "preview", "bp-1", "bp/title-c2", "--json"]).ok().json();
    assert_eq!(p["blueprint"], json!({"blueprint_id": "xiaohongshu_viral", "step": "title"}), "{p:#}");
    assert_eq!(p["role"], "title-worker");
    assert_eq!(p["budget"], 300);
    assert_eq!(p["slice_data"]["topic"], xhs_input()["topic"], "the input's meta, before the run wrote it: {p:#}");
    let r = t.run(&["--config", cfg, "slice", "preview", "bp-1", "nosuch"]);
    r.expect_code(2);
    assert!(
        r.stderr.contains(
            "blueprint xiaohongshu_viral (task bp-1) has no step \"nosuch\"; its steps: curate, trends, title"
        ),
        "{}",
        r.stderr
    );
}

/// Seed 000's completion phase: snapshot, assemble, then clear the temporary
/// data from the live board (the history and the contract's snapshot keep it):
/// the losing titles' texts, the executor's own status keys.
#[test]
fn a_finished_run_clears_its_temporary_data_and_keeps_it_in_history() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let (out, code) = run(&t, cfg.to_str().unwrap(), "xiaohongshu_viral", json!({"user_input": xhs_input()}));
    assert_eq!(code, 0, "{out:#}");
    let task = only_task(&t);
    let snap = &out["blackboard_snapshot"];
    let snapped: Vec<&Value> = snap["content_zone"]["hook"]["variants"].as_array().unwrap().iter().collect();
    assert!(snapped.iter().all(|v| v["content"].is_string()), "the snapshot keeps every text: {snapped:#?}");
    assert!(snap["control_zone"]["step_status"].get("title-c2").is_some(), "{snap:#}");

    let board = board_of(&t, &task);
    let hook = &board["content_zone"]["hook"];
    let texts: Vec<&str> = hook["variants"].as_array().unwrap().iter().filter_map(|v| v["content"].as_str()).collect();
    assert_eq!(texts, [hook["selected"].as_str().unwrap()], "only the winner's text stays: {hook:#}");
    assert!(hook["variants"].as_array().unwrap().iter().all(|v| v["score"].is_number()), "{hook:#}");
    // The blueprint's steps, then the task's validator and harvest (after the run).
    let statuses: Vec<&String> = board["control_zone"]["step_status"].as_object().unwrap().keys().collect();
    assert_eq!(
        statuses,
        ["curate", "trends", "title", "body", "score", "cta", "hashtags", "adapt", "iter-1-validator", "harvest"]
    );

    // The history has both: the variants as written, then as trimmed, and the clears.
    let h = t.run(&["board", "history", &task, "content.hook.variants", "--json"]).ok().json();
    let records = h["records"].as_array().unwrap().clone();
    assert!(records.len() >= 2, "{h:#}");
    let first = &records[records.len() - 2]["value"];
    assert!(first.as_array().unwrap().iter().all(|v| v["content"].is_string()), "{h:#}");
    let all = t.run(&["board", "history", &task, "--json"]).ok().json().to_string();
    assert!(all.contains("\"clear\""), "no clear in the history");
}

/// Seed 000's content zone keeps a version per platform and seed 001 runs the
/// platform adapter ×N: a run that names several platforms writes each version,
/// each by a run of its own and held to its own platform's rules.
#[test]
fn several_target_platforms_each_get_their_version() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let cfg = cfg.to_str().unwrap();
    let mut input = xhs_input();
    input["platforms"] = json!(["wechat", "twitter"]);
    let (out, code) = run(&t, cfg, "xiaohongshu_viral", json!({"user_input": input}));
    assert_eq!(code, 0, "{out:#}");
    let versions = out["final_content"]["platform_versions"].as_array().unwrap();
    let mut names: Vec<&str> = versions.iter().map(|v| v["platform"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["twitter", "wechat", "xiaohongshu"], "{versions:#?}");
    assert!(versions.iter().all(|v| !v["content"].as_str().unwrap().is_empty()), "{versions:#?}");
    assert_eq!(out["quality_report"]["platform_compliance"], true);
    assert_eq!(
        out["blackboard_snapshot"]["meta_zone"]["platform"], "xiaohongshu",
        "the task's platform stays the first"
    );
    let task = only_task(&t);
    let runs: Vec<(String, String)> = t
        .attempts(&task)
        .iter()
        .filter(|a| a["step"].as_str().unwrap().starts_with("bp/adapt"))
        .map(|a| (a["step"].as_str().unwrap().to_owned(), a["status"].as_str().unwrap().to_owned()))
        .collect();
    let mut runs_sorted = runs.clone();
    runs_sorted.sort();
    assert_eq!(
        runs_sorted,
        pairs(&[("bp/adapt-for-twitter", "ok"), ("bp/adapt-for-wechat", "ok"), ("bp/adapt-for-xiaohongshu", "ok")]),
        "one run per platform: {runs:?}"
    );
    let adapt = step_entry(&out, "adapt");
    assert_eq!((adapt["status"].as_str(), adapt["retries"].as_u64()), (Some("completed"), Some(0)), "{adapt}");

    // A platform that is none of the four, or one named twice, is refused before anything runs.
    for (platforms, want) in [
        (json!(["wechat", "mars"]), "/user_input/platforms/1: \"mars\" is not one of"),
        (json!(["wechat", "wechat"]), "/user_input/platforms/1: names wechat twice"),
    ] {
        let mut input = xhs_input();
        input["platforms"] = platforms;
        let file = t.scratch("bad-platforms.json", json!({"user_input": input}).to_string().as_bytes());
        let r = t.run(&["--config", cfg, "run", "xiaohongshu_viral", "--input", file.to_str().unwrap()]);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{}", r.stderr);
    }
}

/// A step's output is written as its role, with its component type, under
/// seed 000's zone table: the history names who wrote each draft, and a write
/// the table refuses (a worker writing control) fails the step with the rule.
#[test]
fn a_steps_output_is_written_as_its_role_and_held_to_the_zone_table() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let (out, code) = run(&t, cfg.to_str().unwrap(), "xiaohongshu_viral", json!({"user_input": xhs_input()}));
    assert_eq!(code, 0, "{out:#}");
    let task = only_task(&t);
    let writers = |path: &str| -> Vec<(String, String, bool)> {
        let h = t.run(&["board", "history", &task, path, "--json"]).ok().json();
        h["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["op"] != "clear" && r["actor"]["role"] != "daemon")
            .map(|r| {
                let actor = &r["actor"];
                (
                    actor["role"].as_str().unwrap().to_owned(),
                    r["component"].as_str().unwrap().to_owned(),
                    actor["instance"].is_string(),
                )
            })
            .collect()
    };
    let drafts = writers("content.hook");
    assert!(
        !drafts.is_empty() && drafts.iter().all(|w| *w == ("title-worker".to_owned(), "worker".to_owned(), true)),
        "{drafts:?}"
    );
    let scores = writers("control.quality_scores");
    assert!(!scores.is_empty() && scores.iter().all(|w| w.0 == "virality-scorer" && w.1 == "middleware"), "{scores:?}");
    assert_eq!(writers("content.results.curate"), [("content-curator".to_owned(), "skill".to_owned(), true)]);

    // The scorer as a worker: the table refuses its write to control.
    let t = Tree::init();
    let cfg = t.config(&config(&[("virality-scorer", "component = \"worker\"")], ""));
    let (out, code) = run(&t, cfg.to_str().unwrap(), "xiaohongshu_viral", json!({"user_input": xhs_input()}));
    assert_eq!((code, out["execution_result"]["status"].as_str()), (1, Some("partial")), "{out:#}");
    assert_eq!(step_entry(&out, "score")["status"], "failed");
    let errors = out["blackboard_snapshot"]["control_zone"]["errors"].as_array().unwrap().clone();
    let refused = errors.iter().find(|e| e["error_type"] == "write_refused").unwrap_or_else(|| panic!("{errors:#?}"));
    let msg = refused["message"].as_str().unwrap();
    assert!(msg.starts_with("step score: its output cannot be written:"), "{msg}");
    assert!(msg.contains("[zones.worker] control = \"-\""), "{msg}");
    assert!(out["blackboard_snapshot"]["control_zone"].get("quality_scores").is_none(), "nothing written");
}

/// Seed 001's fallback chain by default: a worker that fails runs its skill
/// (body-worker -> narrative-builder, no `fallback` in twitter_thread), and when
/// every competing title fails, hook-generator runs once as a candidate of its own.
#[test]
fn a_failing_worker_falls_back_to_its_skill_counterpart() {
    let t = Tree::init();
    let fail = |c: &str| format!("env = {{ WRITING_FAIL = \"{c}\" }}");
    let cfg = t.config(&config(&[("title-worker", &fail("title-worker")), ("body-worker", &fail("body-worker"))], ""));
    let exec = json!({"max_retries": 0, "quality_threshold": 50});
    let input = json!({"user_input": {"topic": "健身入门", "platform": "twitter"}, "execution_config": exec});
    let (out, code) = run(&t, cfg.to_str().unwrap(), "twitter_thread", input);
    assert_eq!((code, out["execution_result"]["status"].as_str()), (0, Some("success")), "{out:#}");
    let title = step_entry(&out, "title");
    assert_eq!(
        (title["component"].as_str(), title["component_type"].as_str()),
        (Some("hook-generator"), Some("skill"))
    );
    let body = step_entry(&out, "body");
    assert_eq!(
        (body["component"].as_str(), body["component_type"].as_str()),
        (Some("narrative-builder"), Some("skill"))
    );
    let task = only_task(&t);
    let steps: Vec<(String, String, String)> = t
        .attempts(&task)
        .iter()
        .filter(|a| a["step"].as_str().unwrap().starts_with("bp/title") || a["step"] == "bp/body")
        .map(|a| {
            (
                a["step"].as_str().unwrap().to_owned(),
                a["role"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for want in [
        ("bp/title-c4", "hook-generator", "ok"),
        ("bp/body", "body-worker", "failed"),
        ("bp/body", "narrative-builder", "ok"),
    ] {
        let want = (want.0.to_owned(), want.1.to_owned(), want.2.to_owned());
        assert!(steps.contains(&want), "no {want:?} in {steps:#?}");
    }
    let variants = out["blackboard_snapshot"]["content_zone"]["hook"]["variants"].as_array().unwrap().len();
    assert_eq!(variants, 1, "the skill's one candidate");
}
