//! Blueprints (seed 001, docs/BLUEPRINTS.md) end to end: real daemons (and the
//! real `clawboard run`) on temp trees, with the example roles of
//! config/examples/blueprints.toml (scripts/roles/writing.py). The four shipped
//! blueprints; intake refusals; bad blueprint files; `clawboard run`; a step
//! that raises an escalation; a PM that names a blueprint. The middleware and
//! fallback rungs are in blueprint_middleware.rs; the helpers both use are
//! `clawboard_tests::blueprints`.

use std::path::PathBuf;

use clawboard_tests::blueprints::*;
use clawboard_tests::{Tree, repo, wait_until};
use serde_json::{Value, json};

// --- 1. the four shipped blueprints -----------------------------------------

#[test]
fn the_four_shipped_blueprints_run_to_success_through_a_daemon() {
    let t = Tree::init();
    t.config(&config(&[], ""));
    let d = t.daemon();
    let cases = [
        ("bp-xhs", "xiaohongshu_viral", "秋冬护肤", "xiaohongshu"),
        ("bp-wx", "wechat_longform", "AI工具提升效率", "wechat"),
        ("bp-tw", "twitter_thread", "健身入门", "twitter"),
        ("bp-da", "deep_analysis", "个人理财", "general"),
    ];
    for (id, bp, topic, platform) in cases {
        let input = json!({"topic": topic, "platform": platform});
        t.drop_task(&format!("{id}.json"), &bp_task(id, bp, input, None));
    }
    for (id, ..) in cases {
        assert_eq!(wait_task(&t, id, 150), "completed", "{id}: {}", d.output());
    }
    assert_eq!(d.stop(), 0);

    for (id, bp, topic, platform) in cases {
        let out = output_of(&t, id);
        check_contract(&out);
        let er = &out["execution_result"];
        assert_eq!(er["status"], "success", "{id}");
        assert_eq!(er["blueprint_id"], bp, "{id}");
        assert_eq!(out["blackboard_snapshot"]["meta_zone"]["topic"], topic);
        assert_eq!(out["blackboard_snapshot"]["meta_zone"]["platform"], platform);
        // One platform version, the task's, and the board the snapshot was taken from.
        let versions = out["final_content"]["platform_versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{id}: {versions:#?}");
        assert_eq!(versions[0]["platform"], platform, "{id}");
        assert!(!out["final_content"]["body"].as_str().unwrap().is_empty(), "{id}");
        // The board the snapshot was taken from, less the run's temporary data
        // (the losing titles' texts) cleared at its end.
        let mut board = board_of(&t, id)["content_zone"].clone();
        let mut snap = out["blackboard_snapshot"]["content_zone"].clone();
        for c in [&mut board, &mut snap] {
            for v in c["hook"]["variants"].as_array_mut().into_iter().flatten() {
                v.as_object_mut().unwrap().remove("content");
            }
        }
        assert_eq!(board, snap, "{id}");
        // status.md: every step of the blueprint, in file order, completed (deep
        // analysis on `general` skips its CTA: `when meta.platform != "general"`).
        let file = read_json(&repo().join(format!("config/blueprints/{bp}.json")));
        let want: Vec<(String, String)> = file["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let step = s["id"].as_str().unwrap().to_owned();
                let state = if bp == "deep_analysis" && step == "cta" { "skipped" } else { "completed" };
                (step, state.to_owned())
            })
            .collect();
        assert_eq!(status_table(&t, id, bp), want, "{id}");
        for (step, state) in executed(&out) {
            let want_state = if bp == "deep_analysis" && step == "cta" { "skipped" } else { "completed" };
            assert_eq!(state, want_state, "{id}: step {step}");
        }
    }

    // 小红书: three competing titles, the winner's 最好 replaced, one loop round.
    let out = output_of(&t, "bp-xhs");
    let hook = &out["blackboard_snapshot"]["content_zone"]["hook"];
    let variants: Vec<(String, String, f64)> = hook["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["type"].as_str().unwrap().to_owned(),
                v["content"].as_str().unwrap().to_owned(),
                v["score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        variants,
        [
            ("question".to_owned(), "秋冬护肤怎么做才不踩坑？".to_owned(), 72.0),
            ("superlative".to_owned(), "秋冬护肤很好的三个习惯".to_owned(), 88.0),
            ("list".to_owned(), "秋冬护肤的3个实用技巧".to_owned(), 80.0),
        ]
    );
    assert_eq!(hook["selected"], "秋冬护肤很好的三个习惯");
    assert_eq!(hook["title"], "秋冬护肤很好的三个习惯");
    assert_eq!(out["final_content"]["title"], "秋冬护肤很好的三个习惯");
    let final_text = out["final_content"].to_string();
    assert!(!final_text.contains("最好"), "最好 left in final_content: {final_text}");
    let content_text = out["blackboard_snapshot"]["content_zone"].to_string();
    assert!(!content_text.contains("最好"), "最好 left on the board: {content_text}");
    let ids: Vec<String> = executed(&out).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        ids,
        ["curate", "trends", "title", "body", "score", "title", "body", "score", "cta", "hashtags", "adapt"]
    );
    let control = &out["blackboard_snapshot"]["control_zone"];
    assert_eq!(control["iteration_count"], 2);
    assert_eq!(control["sensitive_filter"]["passed"], true);
    let imp = improvements(&out);
    assert!(
        imp.iter().any(|s| s.starts_with("round 2: control.quality_scores.virality was 68")),
        "no round in improvements_applied: {imp:#?}"
    );
    assert!(imp.iter().any(|s| s.contains("\"最好\" replaced by \"很好\"")), "{imp:#?}");
    assert_eq!(out["quality_report"]["virality_score"], 84.0);
    assert_eq!(out["quality_report"]["sensitive_filter_passed"], true);
    assert_eq!(out["quality_report"]["platform_compliance"], true);
    // Each round's candidates are their own executor steps.
    let steps: Vec<String> = t.attempts("bp-xhs").iter().map(|a| a["step"].as_str().unwrap().to_owned()).collect();
    for s in ["bp/title-c1", "bp/title-c2", "bp/title-c3", "bp/r2/title-c1", "bp/r2/body", "bp/r2/score"] {
        assert!(steps.iter().any(|x| x == s), "no attempt of {s}: {steps:?}");
    }
    assert!(!steps.iter().any(|s| s.starts_with("bp/r3/")), "{steps:?}");
}

// --- 2. intake refusals ------------------------------------------------------

#[test]
fn bad_blueprint_input_is_rejected_at_intake_with_the_field_named() {
    let t = Tree::init();
    t.config(&config(&[], ""));
    let d = t.daemon();
    let task = |extra: Value| {
        let mut v = json!({"type": "writing", "description": "d"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v.to_string()
    };
    let cases = [
        (
            "no-topic.json",
            task(json!({"blueprint_id": "xiaohongshu_viral", "user_input": {"platform": "xiaohongshu"}})),
            "/user_input/topic: is required",
        ),
        (
            "unknown-bp.json",
            task(json!({"blueprint_id": "no_such_blueprint", "user_input": {"topic": "t"}})),
            "/blueprint_id: unknown blueprint \"no_such_blueprint\" (known: deep_analysis, twitter_thread, wechat_longform, xiaohongshu_viral)",
        ),
        (
            "tiktok.json",
            task(json!({"blueprint_id": "xiaohongshu_viral", "user_input": {"topic": "t", "platform": "tiktok"}})),
            "/user_input/platform: \"tiktok\" is not one of xiaohongshu, wechat, twitter, general",
        ),
        (
            "exec-key.json",
            task(json!({"blueprint_id": "xiaohongshu_viral", "user_input": {"topic": "t"},
                        "execution_config": {"max_retries": 1, "turbo": true}})),
            "/execution_config/turbo: is not a known field",
        ),
        (
            "word-count.json",
            task(json!({"blueprint_id": "xiaohongshu_viral",
                        "user_input": {"topic": "t", "constraints": {"word_count": {"min": 500, "max": 100}}}})),
            "/user_input/constraints/word_count: min 500 is more than max 100",
        ),
        (
            "no-user-input.json",
            task(json!({"blueprint_id": "xiaohongshu_viral"})),
            "/user_input: is required (blueprint_id is \"xiaohongshu_viral\")",
        ),
        (
            "nul.json",
            task(json!({"blueprint_id": "xiaohongshu_viral", "user_input": {"topic": "a\u{0}b"}})),
            "/user_input/topic: holds the control character U+0000",
        ),
        (
            "typo.json",
            task(json!({"blueprint_id": "xiaohongshu_viral", "user_input": {"topic": "t"}, "execution_confg": {}})),
            "/execution_confg: is not a field of a task; did you mean execution_config?",
        ),
    ];
    for (name, body, _) in &cases {
        t.drop_task(name, body);
    }
    let rejected = t.root.join("inbox/rejected");
    wait_until(30, "every file rejected", || {
        cases.iter().all(|(name, ..)| rejected.join(format!("{name}.error.txt")).exists())
    });
    // A moment more: nothing may turn up under tasks/ after the refusals either.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(d.stop(), 0);
    for (name, body, why) in &cases {
        let err = std::fs::read_to_string(rejected.join(format!("{name}.error.txt"))).unwrap();
        assert!(err.starts_with(&format!("inbox/{name}: {why}")), "{name}: {err}");
        assert_eq!(std::fs::read_to_string(rejected.join(name)).unwrap(), *body, "{name} moved unchanged");
        assert!(!t.root.join("inbox").join(name).exists(), "{name} left in inbox/");
    }
    let tasks: Vec<_> = std::fs::read_dir(t.root.join("tasks")).unwrap().collect();
    assert!(tasks.is_empty(), "tasks/ is not empty: {tasks:?}");
}

// --- 3. bad blueprint files ---------------------------------------------------

#[test]
fn a_bad_blueprint_file_stops_the_config_from_loading_with_file_step_field_and_reason() {
    let t = Tree::init();
    let step = |id: &str, role: &str, scope: Value, output: &str| json!({"id": id, "worker": role, "scope": scope, "output": output});
    let bp = |id: &str, steps: Value| json!({"blueprint_id": id, "type": "static_linear", "description": "d", "steps": steps});
    let cases = [
        (
            "unknown_role",
            bp(
                "unknown_role",
                json!([{"id": "curate", "skill": "ghost-writer", "scope": ["meta.topic"], "output": "meta.reference_summary"}]),
            ),
            "step \"curate\": skill: role \"ghost-writer\" is not configured under [roles]",
        ),
        (
            "cycle",
            bp(
                "cycle",
                json!([
                    {"id": "title", "worker": "title-worker", "scope": ["meta.topic"], "output": "content.hook", "depends_on": ["body"]},
                    step("body", "body-worker", json!(["meta.topic"]), "content.body"),
                ]),
            ),
            "step \"title\": depends_on: forms a cycle: title -> body -> title",
        ),
        (
            "unwritten",
            bp(
                "unwritten",
                json!([step("body", "body-worker", json!(["meta.topic", "content.analysis"]), "content.body")]),
            ),
            "step \"body\": scope: \"content.analysis\": no step writes it",
        ),
        (
            "duplicate",
            bp(
                "duplicate",
                json!([
                    step("body", "body-worker", json!(["meta.topic"]), "content.body"),
                    step("body", "body-worker", json!(["meta.topic"]), "content.body"),
                ]),
            ),
            "step \"body\": steps[1].id: is a duplicate step id",
        ),
        (
            "no_template",
            bp(
                "no_template",
                json!([{"id": "title", "worker": "title-worker", "template": "no_such_template", "output": "content.hook"}]),
            ),
            "step \"title\": template: \"no_such_template\" is not a known template",
        ),
        (
            "late_read",
            bp(
                "late_read",
                json!([
                    step("title", "title-worker", json!(["meta.topic", "content.body.content"]), "content.hook"),
                    step("body", "body-worker", json!(["meta.topic"]), "content.body"),
                ]),
            ),
            "step \"title\": scope: content.body.content: written only by step \"body\", which does not run before this one",
        ),
        (
            "endless_retry",
            bp(
                "endless_retry",
                json!([{"id": "body", "worker": "body-worker", "scope": ["meta.topic"], "output": "content.body", "retry": 4_294_967_295_u64}]),
            ),
            "step \"body\": retry: 4294967295 retries; at most 10",
        ),
    ];
    let mut cycle_config = PathBuf::new();
    for (id, file, why) in &cases {
        let dir = t.dir.path().join(format!("bp-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{id}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(file).unwrap()).unwrap();
        let cfg = t.dir.path().join(format!("{id}.toml"));
        std::fs::write(&cfg, config(&[], &format!("[blueprints]\ndir = \"{}\"\n", dir.display()))).unwrap();
        let r = t.run(&["--config", cfg.to_str().unwrap(), "status"]);
        r.expect_code(2);
        assert!(r.stderr.contains(&format!("{}: {why}", path.display())), "{id}: {}", r.stderr);
        if *id == "cycle" {
            cycle_config = cfg;
        }
    }
    // The daemon refuses to start on it too.
    let mut child = t
        .command(&["--config", cycle_config.to_str().unwrap(), "daemon"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the daemon started with a blueprint whose steps form a cycle");
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let r = clawboard_tests::Run::from(child.wait_with_output().unwrap());
    r.expect_code(2);
    assert!(
        r.stderr.contains("cycle.json: step \"title\": depends_on: forms a cycle: title -> body -> title"),
        "{}",
        r.stderr
    );
    assert!(!t.root.join(".clawboard/api.sock").exists());
}

// --- 4. clawboard run --------------------------------------------------------

#[test]
fn clawboard_run_prints_the_contract_and_refuses_bad_input_and_a_served_tree() {
    let t = Tree::init();
    let cfg = t.config(&config(&[], ""));
    let cfg = cfg.to_str().unwrap();
    let good = t.scratch(
        "good.json",
        json!({"user_input": xhs_input(), "execution_config": {"quality_threshold": 50}}).to_string().as_bytes(),
    );
    let r = t.run(&["--config", cfg, "run", "xiaohongshu_viral", "--input", good.to_str().unwrap()]);
    r.ok();
    let printed = r.json();
    assert_eq!(printed["execution_result"]["status"], "success");
    assert_eq!(printed["execution_result"]["blueprint_id"], "xiaohongshu_viral");
    assert_eq!(printed["final_content"]["title"], "秋冬护肤很好的三个习惯");
    check_contract(&printed);
    let tasks: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let id = &tasks[0];
    assert!(r.stderr.contains(&format!("task {id}: completed")), "{}", r.stderr);
    assert_eq!(t.status_of(id), "completed");
    assert_eq!(output_of(&t, id), printed, "stdout is the result's output");

    // A bad input: exit 2, the field named, no task.
    let bad = t.scratch("bad.json", br#"{"user_input": {"platform": "xiaohongshu"}}"#);
    let r = t.run(&["--config", cfg, "run", "xiaohongshu_viral", "--input", bad.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains("/user_input/topic: is required"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert_eq!(std::fs::read_dir(t.root.join("tasks")).unwrap().count(), 1);
    // More bad inputs, each refused before anything is written.
    for (text, want) in [
        (
            r#"{"user_input": {"topic": "t"}, "execution_confg": {"max_retries": 0}}"#,
            "/execution_confg: is not a field of the input",
        ),
        (r#"{"user_input": {"topic": "t"}, "blueprint_id": 5}"#, "/blueprint_id: is 5, not a string"),
        (
            r#"{"topic": "t", "execution_config": {"max_retries": 0}}"#,
            "/user_input: is required beside /execution_config",
        ),
        (r#"{"user_input": {"topic": "a\u0000b"}}"#, "/user_input/topic: holds the control character U+0000"),
    ] {
        let bad = t.scratch("bad.json", text.as_bytes());
        let r = t.run(&["--config", cfg, "run", "xiaohongshu_viral", "--input", bad.to_str().unwrap()]);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{text}: {}", r.stderr);
        assert!(r.stderr.contains("bad.json"), "the file is named: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert_eq!(std::fs::read_dir(t.root.join("tasks")).unwrap().count(), 1, "{text}");
    }

    // A tree a daemon serves: refused, naming the daemon.
    let d = t.daemon();
    let r = t.run(&["--config", cfg, "run", "xiaohongshu_viral", "--input", good.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stderr.contains(&format!("a daemon (pid {}) serves", d.child.id())), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(t.root.join("tasks")).unwrap().count(), 1);
    assert_eq!(d.stop(), 0);
}

// --- 5. a step that raises an escalation -------------------------------------

/// A step whose role raises an escalation that needs a human holds its task after
/// the step, as a team step does: nothing after it runs until the decision. Once
/// approved, the run goes on without running the step again; rejected, the task
/// fails with the human's note.
#[test]
fn an_escalation_raised_by_a_step_holds_the_blueprint_until_a_human_decides() {
    let t = Tree::init();
    t.config(&config(&[("cta-worker", "env = { WRITING_ESCALATE = \"cta-worker\" }")], ""));
    let d = t.daemon();
    for id in ["h-ok", "h-no"] {
        t.drop_task(&format!("{id}.json"), &bp_task(id, "xiaohongshu_viral", xhs_input(), None));
    }
    wait_until(120, "both tasks to be held", || t.daemon_status().is_some_and(|s| s["queue"]["held"] == 2));
    let (ok, no) = (t.escalation_of("h-ok").unwrap(), t.escalation_of("h-no").unwrap());
    for id in ["h-ok", "h-no"] {
        assert_eq!(t.status_of(id), "running");
        assert_eq!(attempts_of(&t, id, "bp/cta").len(), 1, "{id}");
        assert!(attempts_of(&t, id, "bp/adapt").is_empty(), "{id}: a step after the held one ran");
        assert!(!task_dir(&t, id).join("result.json").exists(), "{id}");
    }
    t.run(&["escalation", "approve", &ok, "--note", "fine"]).ok();
    t.run(&["escalation", "reject", &no, "--note", "off-brand"]).ok();
    assert_eq!(wait_task(&t, "h-ok", 120), "completed");
    assert_eq!(wait_task(&t, "h-no", 120), "failed");
    assert_eq!(d.stop(), 0);

    let out = output_of(&t, "h-ok");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success");
    let cta: Vec<(String, String)> = attempts_of(&t, "h-ok", "bp/cta").into_iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(cta, pairs(&[("cta-worker", "ok")]), "the approved step ran again");
    assert_eq!(attempts_of(&t, "h-ok", "bp/adapt").len(), 1);

    let result = std::fs::read_to_string(task_dir(&t, "h-no").join("result.json")).unwrap();
    assert!(result.contains(&format!("escalation {no} was rejected by human: off-brand")), "{result}");
    assert!(attempts_of(&t, "h-no", "bp/adapt").is_empty(), "a step after the rejected one ran");
}

// --- 6. a PM that names a blueprint ------------------------------------------

#[test]
fn a_pm_that_names_a_blueprint_as_its_workflow_runs_it() {
    let t = Tree::init();
    let pm = t.scratch(
        "pm.sh",
        b"cat >/dev/null\nprintf '{\"team\": [], \"workflow\": \"xiaohongshu_viral\", \"reasoning\": \"a blueprint fits\"}'\n",
    );
    let patch = format!("command = [\"sh\", \"{}\"]", pm.display());
    t.config(&config(&[("coding-pm", &patch)], ""));
    let d = t.daemon();
    t.drop_task("pm.json", r#"{"taskId": "pm-bp", "type": "writing", "description": "秋冬护肤"}"#);
    assert_eq!(wait_task(&t, "pm-bp", 150), "completed", "{}", d.output());
    assert_eq!(d.stop(), 0);
    let team = read_json(&task_dir(&t, "pm-bp").join("team-composition.json"));
    assert_eq!(team["workflow"], "xiaohongshu_viral");
    assert_eq!(team["team"], json!([]));
    let out = output_of(&t, "pm-bp");
    check_contract(&out);
    assert_eq!(out["execution_result"]["blueprint_id"], "xiaohongshu_viral");
    assert_eq!(out["execution_result"]["status"], "success");
    let meta = &out["blackboard_snapshot"]["meta_zone"];
    assert_eq!(meta["topic"], "秋冬护肤");
    assert_eq!(meta["platform"], "general");
    let steps: Vec<String> = t.attempts("pm-bp").iter().map(|a| a["step"].as_str().unwrap().to_owned()).collect();
    assert_eq!(steps[0], "pm");
    assert!(steps.iter().any(|s| s == "bp/title-c2"), "{steps:?}");
    assert!(!steps.iter().any(|s| s.starts_with("iter-") && s != "iter-1/validator"), "a team ran: {steps:?}");
    assert_eq!(status_table(&t, "pm-bp", "xiaohongshu_viral").len(), 8);
}

/// `clawboard run --full-context` (for measuring what slicing saves): every step
/// is handed the whole board, with no budget; the ledger shows it.
#[test]
fn full_context_hands_every_step_the_whole_board() {
    // The run's ledger totals, and its blueprint steps' entries.
    fn run(extra: &[&str]) -> (Value, Vec<Value>) {
        let t = Tree::init();
        let cfg = t.config(&config(&[], ""));
        let input = json!({"user_input": xhs_input(), "execution_config": {"quality_threshold": 50}});
        let input = t.scratch("in.json", input.to_string().as_bytes());
        let mut args =
            vec!["--config", cfg.to_str().unwrap(), "run", "xiaohongshu_viral", "--input", input.to_str().unwrap()];
        args.extend_from_slice(extra);
        check_contract(&t.run(&args).ok().json());
        let task = std::fs::read_dir(t.root.join("tasks")).unwrap().next().unwrap().unwrap().file_name();
        let led = t.run(&["slice", "history", task.to_str().unwrap(), "--json"]).ok().json();
        let steps =
            led["entries"].as_array().unwrap().iter().filter(|e| e["step"].as_str().unwrap().starts_with("bp/"));
        (led["totals"].clone(), steps.cloned().collect())
    }
    let (whole, steps) = run(&["--full-context"]);
    assert!(steps.len() >= 8, "{steps:#?}");
    for e in &steps {
        assert!(e["budget"].is_null(), "no budget with --full-context: {e:#}");
        assert_eq!(e["scope"], json!(["meta.*", "content.*", "control.*"]), "{e:#}");
        let (handed, full) = (e["tokens"].as_u64().unwrap(), e["full_tokens"].as_u64().unwrap());
        assert!(handed * 10 >= full * 8, "the whole board, about its full count: {handed} of {full}");
    }
    // Sliced, the same run hands far less.
    let (sliced, _) = run(&[]);
    let tokens = |t: &Value| t["slice_tokens"].as_u64().unwrap();
    assert!(tokens(&sliced) * 3 < tokens(&whole), "sliced {sliced} against whole {whole}");
}
