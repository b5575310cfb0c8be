//! Blueprints (seed 001, docs/BLUEPRINTS.md) end to end: real daemons (and the
//! real `clawboard run`) on temp trees, with the example roles of
//! config/examples/blueprints.toml (scripts/roles/writing.py), misbehaving on
//! purpose through their `env` where a rung of the ladder is under test. The four
//! shipped blueprints; intake refusals; bad blueprint files; the sensitive filter,
//! fallback, partial and failed runs, platform compliance and timeouts; competing
//! candidates; the loop; `clawboard run`; a PM that names a blueprint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clawboard_tests::{Tree, repo, wait_until};
use serde_json::{Value, json};

// --- the config -------------------------------------------------------------

/// config/examples/blueprints.toml with the scripts' paths absolute, a 50 ms
/// backoff for every role and a 2 s shutdown grace; `roles` patches roles (TOML
/// keys replacing the role's own), `extra` is merged in at the top (e.g. a
/// `[blueprints]` section).
fn config(roles: &[(&str, &str)], extra: &str) -> String {
    let text = std::fs::read_to_string(repo().join("config/examples/blueprints.toml")).unwrap();
    let mut doc: toml::Table = text.parse().unwrap();
    doc.get_mut("daemon").unwrap().as_table_mut().unwrap().insert("shutdown_grace".into(), "2s".into());
    for (_, role) in doc.get_mut("roles").unwrap().as_table_mut().unwrap().iter_mut() {
        let role = role.as_table_mut().unwrap();
        if let Some(cmd) = role.get_mut("command").and_then(toml::Value::as_array_mut) {
            for arg in cmd.iter_mut() {
                if let Some(s) = arg.as_str().filter(|s| s.starts_with("scripts/")) {
                    *arg = repo().join(s).display().to_string().into();
                }
            }
        }
        role.insert("retry_backoff".into(), "50ms".into());
    }
    for (id, patch) in roles {
        let patch: toml::Table = patch.parse().unwrap_or_else(|e| panic!("patch of {id}: {e}\n{patch}"));
        let roles = doc.get_mut("roles").unwrap().as_table_mut().unwrap();
        let role = roles.get_mut(*id).unwrap_or_else(|| panic!("no role {id}")).as_table_mut().unwrap();
        for (k, v) in patch {
            role.insert(k, v);
        }
    }
    let extra: toml::Table = extra.parse().unwrap();
    merge(&mut doc, extra);
    toml::to_string(&doc).unwrap()
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn writing_py() -> String {
    repo().join("scripts/roles/writing.py").display().to_string()
}

// --- tasks and what they left ----------------------------------------------

/// A blueprint task's file for `inbox/`.
fn bp_task(id: &str, blueprint: &str, user_input: Value, execution_config: Option<Value>) -> String {
    let mut t = json!({"taskId": id, "type": "writing", "description": user_input["topic"],
                       "blueprint_id": blueprint, "user_input": user_input});
    if let Some(c) = execution_config {
        t["execution_config"] = c;
    }
    t.to_string()
}

fn xhs_input() -> Value {
    json!({"topic": "秋冬护肤", "platform": "xiaohongshu"})
}

/// Waits until the task ends; its status (`completed` or `failed`).
fn wait_task(t: &Tree, id: &str, secs: u64) -> String {
    wait_until(secs, &format!("task {id} to end"), || matches!(t.status_of(id).as_str(), "completed" | "failed"));
    t.status_of(id)
}

fn task_dir(t: &Tree, id: &str) -> PathBuf {
    t.root.join("tasks").join(id)
}

fn read_json(p: &Path) -> Value {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The output contract in the task's result.json.
fn output_of(t: &Tree, id: &str) -> Value {
    let r = read_json(&task_dir(t, id).join("result.json"));
    assert!(r["output"].is_object(), "result.json has no output: {r:#}");
    r["output"].clone()
}

fn board_of(t: &Tree, id: &str) -> Value {
    read_json(&task_dir(t, id).join("board/board.json"))
}

/// `control_zone.errors` of the task's board as (step_id, error_type, message).
fn errors_of(t: &Tree, id: &str) -> Vec<(String, String, String)> {
    board_of(t, id)["control_zone"]["errors"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["step_id"].as_str().unwrap().to_owned(),
                e["error_type"].as_str().unwrap().to_owned(),
                e["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `steps_executed` as (step_id, status).
fn executed(out: &Value) -> Vec<(String, String)> {
    out["execution_result"]["steps_executed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step_id"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// The one `steps_executed` entry of `step` (panics unless there is exactly one).
fn step_entry(out: &Value, step: &str) -> Value {
    let all: Vec<&Value> =
        out["execution_result"]["steps_executed"].as_array().unwrap().iter().filter(|s| s["step_id"] == step).collect();
    assert_eq!(all.len(), 1, "steps_executed has {} entries for {step}: {all:#?}", all.len());
    all[0].clone()
}

/// The attempts of executor step `step` as (role, status, error).
fn attempts_of(t: &Tree, id: &str, step: &str) -> Vec<(String, String, String)> {
    t.attempts(id)
        .iter()
        .filter(|a| a["step"] == step)
        .map(|a| {
            (
                a["role"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
                a["error"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The rows of status.md's `## Blueprint {id}` table.
fn status_table(t: &Tree, task: &str, blueprint: &str) -> Vec<(String, String)> {
    let md = std::fs::read_to_string(task_dir(t, task).join("status.md")).unwrap();
    let head = format!("## Blueprint {blueprint}\n\n| step | state |\n| --- | --- |\n");
    let at = md.find(&head).unwrap_or_else(|| panic!("status.md has no blueprint table:\n{md}"));
    md[at + head.len()..]
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].to_owned(), cells[1].to_owned())
        })
        .collect()
}

/// Problems of `out` against config/schemas/blueprint-output.schema.json.
fn schema_problems(out: &Value) -> Vec<String> {
    let schema = read_json(&repo().join("config/schemas/blueprint-output.schema.json"));
    clawboard_core::schema::validate(&schema, out).iter().map(ToString::to_string).collect()
}

/// The contract's structural parts checked by hand as well (the schema says them
/// too; this guards against a schema that says less than the seed).
fn check_contract(out: &Value) {
    let problems = schema_problems(out);
    assert!(problems.is_empty(), "the output breaks the schema: {problems:#?}");
    let obj = out.as_object().unwrap();
    let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, ["execution_result", "blackboard_snapshot", "quality_report", "final_content"]);
    let er = &out["execution_result"];
    assert!(["success", "partial", "failed"].contains(&er["status"].as_str().unwrap()), "{er}");
    for s in er["steps_executed"].as_array().unwrap() {
        assert!(["worker", "skill"].contains(&s["component_type"].as_str().unwrap()), "{s}");
        assert!(["completed", "skipped", "failed", "retried"].contains(&s["status"].as_str().unwrap()), "{s}");
    }
    let snap = out["blackboard_snapshot"].as_object().unwrap();
    let zones: Vec<&str> = snap.keys().map(String::as_str).collect();
    assert_eq!(zones, ["meta_zone", "content_zone", "control_zone"]);
    let q = &out["quality_report"];
    for k in ["overall_score", "virality_score"] {
        let x = q[k].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&x), "{k} {x}");
    }
    assert!(q["sensitive_filter_passed"].is_boolean() && q["platform_compliance"].is_boolean());
    assert!(out["final_content"]["title"].is_string() && out["final_content"]["body"].is_string());
}

fn improvements(out: &Value) -> Vec<String> {
    out["quality_report"]["improvements_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Runs one xiaohongshu task through a daemon with `cfg`; returns the tree (kept
/// for inspection) and the task's end status. The daemon is stopped cleanly.
fn run_one(cfg: &str, id: &str, user_input: Value, exec: Option<Value>) -> (Tree, String) {
    let t = Tree::init();
    t.config(cfg);
    let d = t.daemon();
    t.drop_task(&format!("{id}.json"), &bp_task(id, "xiaohongshu_viral", user_input, exec));
    let status = wait_task(&t, id, 120);
    assert_eq!(d.stop(), 0);
    (t, status)
}

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
        let board = board_of(&t, id);
        assert_eq!(board["content_zone"], out["blackboard_snapshot"]["content_zone"], "{id}");
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

// --- 4. middleware and fallback rungs -----------------------------------------

/// (a) A title with a word that has no replacement: the attempt fails as
/// `sensitive_filter_failed`, the retry is told the word and leaves it out.
#[test]
fn an_unfixable_sensitive_word_fails_the_attempt_and_the_retry_told_the_word_succeeds() {
    let logs = tempfile::tempdir().unwrap();
    // The role as configured, with every context it is handed kept to read back.
    let patch = format!(
        "command = [\"sh\", \"-c\", 'cat > \"$LOGDIR/$CLAWBOARD_INSTANCE_ID.json\"; exec python3 {} title-worker < \"$LOGDIR/$CLAWBOARD_INSTANCE_ID.json\"']\nenv = {{ WRITING_SENSITIVE = \"title-worker\", LOGDIR = \"{}\" }}",
        writing_py(),
        logs.path().display()
    );
    let cfg = config(&[("title-worker", &patch)], "");
    let (t, status) = run_one(&cfg, "sens", xhs_input(), Some(json!({"quality_threshold": 50})));
    let errors = errors_of(&t, "sens");
    let refused: Vec<&(String, String, String)> = errors.iter().filter(|e| e.1 == "sensitive_filter_failed").collect();
    assert!(!refused.is_empty(), "no sensitive_filter_failed in control_zone.errors: {errors:#?}");
    for (step, _, message) in &refused {
        assert!(step.starts_with("title-c"), "{step}");
        assert!(message.contains("国家级"), "{message}");
    }
    // What the retries were told.
    let mut feedback = Vec::new();
    for e in std::fs::read_dir(logs.path()).unwrap() {
        let ctx = read_json(&e.unwrap().path());
        if let Some(f) = ctx["feedback"].as_array() {
            assert!(ctx["step"].as_str().unwrap().starts_with("bp/title-c"), "{ctx}");
            feedback.extend(f.iter().map(|x| x.as_str().unwrap().to_owned()));
        }
    }
    assert!(!feedback.is_empty(), "no retry was handed feedback");
    assert!(feedback.iter().all(|f| f.contains("国家级")), "{feedback:#?}");
    // docs/BLUEPRINTS.md: `"feedback": ["sensitive word \"最好\" in content.hook.selected (no replacement configured)"]`;
    // the example role reads the word from exactly that form.
    assert!(
        feedback.iter().any(|f| f.contains("sensitive word \"国家级\"")),
        "the feedback does not name the word as docs/BLUEPRINTS.md shows (sensitive word \"…\" in PATH): {feedback:#?}"
    );
    let out = output_of(&t, "sens");
    assert_eq!(out["execution_result"]["status"], "success", "{:#?}", executed(&out));
    assert_eq!(status, "completed");
    for k in 1..=3 {
        let a = attempts_of(&t, "sens", &format!("bp/title-c{k}"));
        let st: Vec<&str> = a.iter().map(|x| x.1.as_str()).collect();
        assert_eq!(st, ["failed", "ok"], "candidate {k}: {a:#?}");
    }
    assert_eq!(step_entry(&out, "title")["status"], "retried");
    assert!(!out["final_content"].to_string().contains("国家级"));
    assert_eq!(out["blackboard_snapshot"]["content_zone"]["hook"]["variants"].as_array().unwrap().len(), 3);
}

/// (b) The body worker keeps writing the word: after its retries the step falls
/// back to its skill, narrative-builder.
#[test]
fn a_worker_that_keeps_writing_an_unfixable_word_falls_back_to_its_skill() {
    let cfg = config(&[("body-worker", "env = { WRITING_SENSITIVE = \"body-worker:always\" }")], "");
    let (t, status) = run_one(&cfg, "fb", xhs_input(), Some(json!({"quality_threshold": 50})));
    assert_eq!(status, "completed");
    let out = output_of(&t, "fb");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success");
    let body = step_entry(&out, "body");
    assert_eq!(body["component"], "narrative-builder");
    assert_eq!(body["component_type"], "skill");
    assert_eq!(body["status"], "retried");
    assert_eq!(body["retries"], 3);
    assert_eq!(body["output_key"], "content.body");
    let a = attempts_of(&t, "fb", "bp/body");
    let who: Vec<(&str, &str)> = a.iter().map(|x| (x.0.as_str(), x.1.as_str())).collect();
    assert_eq!(
        who,
        [("body-worker", "failed"), ("body-worker", "failed"), ("body-worker", "failed"), ("narrative-builder", "ok")]
    );
    for (_, _, error) in &a[..3] {
        assert!(error.starts_with("invalid output: sensitive_filter_failed"), "{error}");
        assert!(error.contains("国家级"), "{error}");
    }
    let errors = errors_of(&t, "fb");
    let types: Vec<(&str, &str)> = errors.iter().map(|e| (e.0.as_str(), e.1.as_str())).collect();
    assert_eq!(types, [("body", "sensitive_filter_failed"); 3]);
    // The skill's body (its sections end with 总结) is the one kept.
    let content_body = &out["blackboard_snapshot"]["content_zone"]["body"];
    assert_eq!(content_body["sections"].as_array().unwrap().last().unwrap()["title"], "总结");
    assert_eq!(out["final_content"]["body"], content_body["content"]);
    assert!(!out["final_content"].to_string().contains("国家级"));
}

/// (c) The body worker and its fallback both fail: the run ends `partial`, the
/// steps not run are `skipped`, and the result carries what was produced.
#[test]
fn a_failing_worker_and_fallback_end_the_run_partial_with_what_was_produced() {
    let cfg = config(
        &[
            ("body-worker", "env = { WRITING_FAIL = \"body-worker\" }"),
            ("narrative-builder", "env = { WRITING_FAIL = \"narrative-builder\" }"),
        ],
        "",
    );
    let (t, status) = run_one(&cfg, "part", xhs_input(), None);
    assert_eq!(status, "failed");
    let out = output_of(&t, "part");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "partial");
    assert_eq!(
        executed(&out),
        pairs(&[
            ("curate", "completed"),
            ("trends", "completed"),
            ("title", "completed"),
            ("body", "failed"),
            ("score", "skipped"),
            ("cta", "skipped"),
            ("hashtags", "skipped"),
            ("adapt", "skipped"),
        ])
    );
    // What was produced: curate's summary, the trends, the titles; no body.
    let snap = &out["blackboard_snapshot"];
    assert!(snap["meta_zone"]["reference_summary"].as_str().unwrap().starts_with("主题：秋冬护肤；"), "{snap}");
    assert_eq!(snap["content_zone"]["trends"]["keywords"][0], "秋冬护肤");
    assert_eq!(snap["content_zone"]["hook"]["selected"], "秋冬护肤很好的三个习惯");
    assert!(snap["content_zone"].get("body").is_none(), "{snap}");
    assert!(snap["content_zone"].get("platform_versions").is_none(), "{snap}");
    assert_eq!(out["final_content"]["title"], "秋冬护肤很好的三个习惯");
    assert_eq!(out["final_content"]["body"], "");
    assert_eq!(out["final_content"]["platform_versions"], json!([]));
    // Three worker attempts (retry 2), then three of the skill: every one recorded.
    let a = attempts_of(&t, "part", "bp/body");
    let who: Vec<(&str, &str)> = a.iter().map(|x| (x.0.as_str(), x.1.as_str())).collect();
    assert_eq!(
        who,
        [
            ("body-worker", "failed"),
            ("body-worker", "failed"),
            ("body-worker", "failed"),
            ("narrative-builder", "failed"),
            ("narrative-builder", "failed"),
            ("narrative-builder", "failed"),
        ]
    );
    let errors = errors_of(&t, "part");
    let types: Vec<(&str, &str)> = errors.iter().map(|e| (e.0.as_str(), e.1.as_str())).collect();
    assert_eq!(types, [("body", "attempt_failed"); 6]);
    assert_eq!(snap["control_zone"]["errors"].as_array().unwrap().len(), 6);
    let log = std::fs::read_to_string(task_dir(&t, "part").join("errors.log")).unwrap();
    assert!(log.contains("bp/body") && log.contains("narrative-builder"), "{log}");
    assert_eq!(
        status_table(&t, "part", "xiaohongshu_viral"),
        pairs(&[
            ("curate", "completed"),
            ("trends", "completed"),
            ("title", "completed"),
            ("body", "failed"),
            ("score", "skipped"),
            ("cta", "skipped"),
            ("hashtags", "skipped"),
            ("adapt", "skipped"),
        ])
    );
    let result = read_json(&task_dir(&t, "part").join("result.json"));
    assert!(result["summary"].as_str().unwrap().starts_with("xiaohongshu_viral (partial): "), "{result:#}");
    // docs/BLUEPRINTS.md: "`partial: true` and the reason beside it".
    assert_eq!(result["partial"], true, "{result:#}");
    assert!(result["error"].as_str().unwrap().contains("bp/body"), "{}", result["error"]);
    // The schema: `retries` is "Attempts beyond the first": six attempts, five beyond the first.
    assert_eq!(step_entry(&out, "body")["retries"], 5, "steps_executed body: {}", step_entry(&out, "body"));
}

/// (d) Nothing produced: the run is `failed` and gives the original input back.
#[test]
fn when_the_first_steps_fail_the_run_fails_and_gives_the_topic_back() {
    let cfg = config(
        &[
            ("content-curator", "env = { WRITING_FAIL = \"content-curator\" }"),
            ("trend-tracker", "env = { WRITING_FAIL = \"trend-tracker\" }"),
        ],
        "",
    );
    let input = json!({"topic": "秋冬护肤", "platform": "xiaohongshu", "reference_materials": ["素材一", "素材二"]});
    let (t, status) = run_one(&cfg, "none", input, Some(json!({"max_retries": 1})));
    assert_eq!(status, "failed");
    let result = read_json(&task_dir(&t, "none").join("result.json"));
    assert_eq!(result["partial"], true, "{result:#}");
    assert!(result["error"].as_str().unwrap().contains("ended \"failed\""), "{}", result["error"]);
    let out = output_of(&t, "none");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "failed");
    assert_eq!(out["final_content"]["title"], "秋冬护肤");
    // The original input back, with the diagnosis: why each step failed.
    let body = out["final_content"]["body"].as_str().unwrap();
    assert!(body.starts_with("No step produced anything.\n\nDiagnosis:\n- "), "{body}");
    assert!(body.contains("content-curator") && body.contains("trend-tracker"), "{body}");
    assert!(body.contains("\"reference_materials\": [\n    \"素材一\",\n    \"素材二\"\n  ]"), "{body}");
    assert_eq!(out["final_content"]["platform_versions"], json!([]));
    assert_eq!(
        executed(&out),
        pairs(&[
            ("curate", "failed"),
            ("trends", "failed"),
            ("title", "skipped"),
            ("body", "skipped"),
            ("score", "skipped"),
            ("cta", "skipped"),
            ("hashtags", "skipped"),
            ("adapt", "skipped"),
        ])
    );
    let mut errors: Vec<(String, String)> = errors_of(&t, "none").into_iter().map(|e| (e.0, e.1)).collect();
    errors.sort();
    assert_eq!(
        errors,
        pairs(&[
            ("curate", "attempt_failed"),
            ("curate", "attempt_failed"),
            ("trends", "attempt_failed"),
            ("trends", "attempt_failed"),
        ])
    );
    let content = out["blackboard_snapshot"]["content_zone"].as_object().unwrap();
    assert!(content.is_empty(), "{content:?}");
    // No title, body or adapter ever ran.
    let roles: Vec<String> = t.attempts("none").iter().map(|a| a["role"].as_str().unwrap().to_owned()).collect();
    assert!(roles.iter().all(|r| r == "content-curator" || r == "trend-tracker"), "{roles:?}");
}

/// (e) A body over xiaohongshu's `body_max_chars` fails the attempts as
/// `platform_compliance_failed`, and the run ends partial.
#[test]
fn a_body_over_the_platform_limit_fails_compliance_and_the_run_ends_partial() {
    let cfg = config(
        &[],
        "[blueprints.platforms.xiaohongshu]\ntitle_max_chars = 20\nbody_max_chars = 60\nhashtags_max = 10\n",
    );
    let (t, status) = run_one(&cfg, "long", xhs_input(), Some(json!({"quality_threshold": 50})));
    assert_eq!(status, "failed");
    let out = output_of(&t, "long");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "partial");
    let errors = errors_of(&t, "long");
    let refused: Vec<&(String, String, String)> =
        errors.iter().filter(|e| e.1 == "platform_compliance_failed").collect();
    assert!(!refused.is_empty(), "{errors:#?}");
    for (_, _, message) in &refused {
        assert!(message.contains("xiaohongshu allows 60"), "{message}");
    }
    assert!(out["final_content"]["platform_versions"].as_array().unwrap().is_empty());
    // docs/BLUEPRINTS.md: the body step lists platform_compliance, and "a body … over
    // the limit fails the attempt (platform_compliance_failed) and the step is retried".
    let body_refusals = refused.iter().filter(|e| e.0 == "body").count();
    assert!(
        body_refusals >= 3,
        "the body step (middleware platform_compliance) passed a {}-char body over body_max_chars 60; refused steps: {:?}",
        out["blackboard_snapshot"]["content_zone"]["body"]["content"].as_str().map_or(0, |b| b.chars().count()),
        refused.iter().map(|e| e.0.as_str()).collect::<Vec<_>>()
    );
}

/// (e) A title over `title_max_chars` is cut, and the quality report says so.
#[test]
fn a_title_over_the_platform_limit_is_cut_and_reported() {
    let cfg = config(
        &[],
        "[blueprints.platforms.xiaohongshu]\ntitle_max_chars = 6\nbody_max_chars = 1000\nhashtags_max = 10\n",
    );
    let (t, status) = run_one(&cfg, "cut", xhs_input(), Some(json!({"quality_threshold": 50})));
    assert_eq!(status, "completed");
    let out = output_of(&t, "cut");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success");
    assert_eq!(out["blackboard_snapshot"]["content_zone"]["platform_versions"]["xiaohongshu"]["title"], "秋冬护肤很好");
    let v = &out["final_content"]["platform_versions"][0];
    assert_eq!(v["platform"], "xiaohongshu");
    // The title step lists platform_compliance: its candidates are cut there, so the
    // selected title, the final title and the body that opens with it are all 6 chars.
    assert_eq!(out["blackboard_snapshot"]["content_zone"]["hook"]["selected"], "秋冬护肤很好");
    assert_eq!(out["final_content"]["title"], "秋冬护肤很好");
    assert!(v["content"].as_str().unwrap().starts_with("秋冬护肤很好\n\n秋冬护肤很好\n\n"), "{v}");
    let imp = improvements(&out);
    assert!(imp.iter().any(|s| s == "title cut to 6 chars for xiaohongshu (was 11)"), "{imp:#?}");
    assert_eq!(out["quality_report"]["platform_compliance"], true);
}

/// (f) A step that runs past its role's timeout: `component_timeout`.
#[test]
fn a_step_over_its_timeout_is_a_component_timeout() {
    let cfg = config(&[("trend-tracker", "timeout = \"2s\"\nenv = { WRITING_SLEEP = \"trend-tracker:*:30\" }")], "");
    let started = std::time::Instant::now();
    let (t, status) = run_one(&cfg, "slow", xhs_input(), Some(json!({"max_retries": 0})));
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the 30 s sleep was waited for");
    assert_eq!(status, "failed");
    let errors = errors_of(&t, "slow");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!((errors[0].0.as_str(), errors[0].1.as_str()), ("trends", "component_timeout"));
    assert!(errors[0].2.contains("timed out after 2s"), "{}", errors[0].2);
    let a: Vec<Value> = t.attempts("slow").into_iter().filter(|a| a["step"] == "bp/trends").collect();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["status"], "timedout");
    let ms = a[0]["elapsedMs"].as_u64().unwrap();
    assert!((2000..10_000).contains(&ms), "elapsed {ms} ms");
    let out = output_of(&t, "slow");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "partial");
    assert_eq!(
        executed(&out),
        pairs(&[
            ("curate", "completed"),
            ("trends", "failed"),
            ("title", "skipped"),
            ("body", "skipped"),
            ("score", "skipped"),
            ("cta", "skipped"),
            ("hashtags", "skipped"),
            ("adapt", "skipped"),
        ])
    );
}

// --- 5. competing candidates --------------------------------------------------

#[test]
fn competing_titles_survive_a_timed_out_and_a_garbage_candidate() {
    let cfg = config(
        &[(
            "title-worker",
            "timeout = \"4s\"\nenv = { WRITING_SLEEP = \"title-worker:1:30\", WRITING_GARBAGE = \"title-worker:3\" }",
        )],
        "",
    );
    let (t, status) = run_one(&cfg, "comp", xhs_input(), Some(json!({"max_retries": 0, "quality_threshold": 50})));
    assert_eq!(status, "completed");
    let out = output_of(&t, "comp");
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success");
    let hook = &out["blackboard_snapshot"]["content_zone"]["hook"];
    assert_eq!(hook["variants"], json!([{"type": "superlative", "content": "秋冬护肤很好的三个习惯", "score": 88.0}]));
    assert_eq!(hook["selected"], "秋冬护肤很好的三个习惯");
    assert_eq!(out["final_content"]["title"], "秋冬护肤很好的三个习惯");
    let title = step_entry(&out, "title");
    assert_eq!(title["component"], "title-worker");
    // Every candidate's attempt is kept: candidate 1 timed out, 3 printed garbage.
    let c1 = attempts_of(&t, "comp", "bp/title-c1");
    assert_eq!(c1.iter().map(|a| a.1.as_str()).collect::<Vec<_>>(), ["timedout"], "{c1:#?}");
    let c2 = attempts_of(&t, "comp", "bp/title-c2");
    assert_eq!(c2.iter().map(|a| a.1.as_str()).collect::<Vec<_>>(), ["ok"], "{c2:#?}");
    let c3 = attempts_of(&t, "comp", "bp/title-c3");
    assert_eq!(c3.iter().map(|a| a.1.as_str()).collect::<Vec<_>>(), ["failed"], "{c3:#?}");
    for (_, _, e) in &c3 {
        assert!(e.starts_with("invalid output"), "{e}");
    }
    let mut errors: Vec<(String, String)> = errors_of(&t, "comp").into_iter().map(|e| (e.0, e.1)).collect();
    errors.sort();
    assert_eq!(errors, pairs(&[("title-c1", "component_timeout"), ("title-c3", "invalid_output")]));
    let stdout = std::fs::read_to_string(t.root.join("tasks/comp/attempts").join(format!(
        "{:04}-title-worker.stdout",
        t.attempts("comp").iter().find(|a| a["step"] == "bp/title-c3").unwrap()["number"].as_u64().unwrap()
    )))
    .unwrap();
    assert_eq!(stdout, "title-worker says: this is not JSON {\n");
}

// --- 6. the loop ---------------------------------------------------------------

#[test]
fn the_loop_runs_while_virality_is_under_the_threshold_up_to_max_retries() {
    let t = Tree::init();
    t.config(&config(&[], ""));
    let d = t.daemon();
    t.drop_task("low.json", &bp_task("low", "xiaohongshu_viral", xhs_input(), Some(json!({"quality_threshold": 50}))));
    t.drop_task(
        "high.json",
        &bp_task("high", "xiaohongshu_viral", xhs_input(), Some(json!({"quality_threshold": 99, "max_retries": 2}))),
    );
    assert_eq!(wait_task(&t, "low", 150), "completed");
    assert_eq!(wait_task(&t, "high", 150), "completed");
    assert_eq!(d.stop(), 0);

    // 68 is over 50: no second round.
    let low = output_of(&t, "low");
    check_contract(&low);
    let ids: Vec<String> = executed(&low).into_iter().map(|(s, _)| s).collect();
    assert_eq!(ids, ["curate", "trends", "title", "body", "score", "cta", "hashtags", "adapt"]);
    assert_eq!(low["blackboard_snapshot"]["control_zone"]["iteration_count"], 1);
    assert_eq!(low["quality_report"]["virality_score"], 68.0);
    assert!(!improvements(&low).iter().any(|s| s.starts_with("round ")), "{:#?}", improvements(&low));
    assert!(!t.attempts("low").iter().any(|a| a["step"].as_str().unwrap().starts_with("bp/r2/")));

    // Never 99: the first round and max_retries (2) more, then the run goes on.
    let high = output_of(&t, "high");
    check_contract(&high);
    assert_eq!(high["execution_result"]["status"], "success");
    let ids: Vec<String> = executed(&high).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        ids,
        [
            "curate", "trends", "title", "body", "score", "title", "body", "score", "title", "body", "score", "cta",
            "hashtags", "adapt"
        ]
    );
    let control = &high["blackboard_snapshot"]["control_zone"];
    assert_eq!(control["iteration_count"], 3);
    assert_eq!(control["quality_gate"]["round"], 3);
    assert_eq!(control["quality_gate"]["threshold"], 99.0);
    assert_eq!(control["quality_gate"]["verdict"], "below the threshold");
    assert_eq!(high["quality_report"]["virality_score"], 84.0);
    let rounds: Vec<String> = improvements(&high).into_iter().filter(|s| s.starts_with("round ")).collect();
    assert_eq!(rounds.len(), 2, "{rounds:#?}");
    assert!(rounds[0].starts_with("round 2: control.quality_scores.virality was 68"), "{rounds:#?}");
    assert!(rounds[1].starts_with("round 3: control.quality_scores.virality was 84"), "{rounds:#?}");
    let steps: Vec<String> = t.attempts("high").iter().map(|a| a["step"].as_str().unwrap().to_owned()).collect();
    for s in ["bp/r2/title-c3", "bp/r2/body", "bp/r2/score", "bp/r3/title-c1", "bp/r3/body", "bp/r3/score"] {
        assert!(steps.iter().any(|x| x == s), "no attempt of {s}: {steps:?}");
    }
    assert!(!steps.iter().any(|s| s.starts_with("bp/r4/")), "{steps:?}");
    assert_eq!(t.status_of("high"), "completed");
}

// --- 7. clawboard run -----------------------------------------------------------

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

/// The middleware, not the example roles, holds the content to the platform: the
/// twitter example prints three hashtags and tweets of Chinese text; with
/// `hashtags_max = 2` the versions keep two (the cut reported), and with a tweet
/// limit under the tweets' Twitter weight (CJK counts 2) the thread fails
/// compliance, so the run is not a success.
#[test]
fn platform_rules_in_the_config_are_what_the_content_is_held_to() {
    let t = Tree::init();
    let input = t.scratch("tw.json", r#"{"topic": "秋冬护肤的三个习惯", "platform": "twitter"}"#.as_bytes());
    let cut = t.config(&config(&[], "[blueprints.platforms.twitter]\nhashtags_max = 2\n"));
    let r = t.run(&["--config", cut.to_str().unwrap(), "run", "twitter_thread", "--input", input.to_str().unwrap()]);
    r.ok();
    let out = r.json();
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success");
    let board_tags = out["blackboard_snapshot"]["content_zone"]["hashtags"].as_array().unwrap().len();
    assert!(board_tags > 2, "the example role prints more than the limit: {board_tags}");
    assert_eq!(out["final_content"]["platform_versions"][0]["hashtags"].as_array().unwrap().len(), 2);
    let improvements = out["quality_report"]["improvements_applied"].to_string();
    assert!(improvements.contains("hashtags cut to 2 for twitter"), "{improvements}");

    // Each tweet weighs twice its Chinese characters: a limit of 20 is under every one.
    let tight = t.config(&config(&[], "[blueprints.platforms.twitter]\ntweet_max_chars = 20\n"));
    let r = t.run(&["--config", tight.to_str().unwrap(), "run", "twitter_thread", "--input", input.to_str().unwrap()]);
    let out = r.json();
    check_contract(&out);
    assert_ne!(out["execution_result"]["status"], "success", "{out:#}");
    let errors = out["blackboard_snapshot"]["control_zone"]["errors"].to_string();
    assert!(errors.contains("as Twitter counts (CJK and emoji 2, a link 23); twitter allows 20"), "{errors}");
}

/// A listed word left in the final content (here the topic, which is the title
/// when no step writes one) makes the run `partial`, not `success`, and the
/// refused word is on control.sensitive_filter's record.
#[test]
fn a_listed_word_in_the_final_content_is_no_success() {
    let t = Tree::init();
    let dir = t.dir.path().join("bps");
    std::fs::create_dir_all(&dir).unwrap();
    let bp = json!({"blueprint_id": "body_only", "type": "static_linear", "steps": [
        {"id": "body", "worker": "body-worker", "scope": ["meta.topic"], "output": "content.body"}
    ]});
    std::fs::write(dir.join("body_only.json"), bp.to_string()).unwrap();
    let cfg = t.config(&config(&[], &format!("[blueprints]\ndir = \"{}\"\n", dir.display())));
    let input = t.scratch("in.json", r#"{"topic": "国家级护肤"}"#.as_bytes());
    let r = t.run(&["--config", cfg.to_str().unwrap(), "run", "body_only", "--input", input.to_str().unwrap()]);
    let out = r.json();
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "partial", "{out:#}");
    assert_eq!(out["quality_report"]["sensitive_filter_passed"], false);
    let record = &out["blackboard_snapshot"]["control_zone"]["sensitive_filter"];
    assert_eq!(record["passed"], false, "{record}");
    assert!(record["findings"].to_string().contains("国家级"), "{record}");
    assert!(!record["fixes_applied"].to_string().contains("国家级"), "an unfixed word is no fix: {record}");
}

/// The word filter as a role (`[blueprints] sensitive_filter_role`): each step's
/// output, and the final content, go through the example role as steps of their
/// own, and it checks the words the config has (handed over in its context), not
/// the shipped file's: here 秋冬, which no shipped list holds.
#[test]
fn a_filter_role_checks_every_output_with_the_configs_words() {
    let t = Tree::init();
    let cfg = t.config(&config(
        &[],
        "[blueprints]\nsensitive_filter_role = \"sensitive-filter\"\n\
         [blueprints.sensitive_words]\nall = [\"最好\", \"秋冬\"]\n\
         [blueprints.replacements]\n\"最好\" = \"很好\"\n\"秋冬\" = \"冬季\"\n",
    ));
    let input = t.scratch("in.json", json!({"user_input": xhs_input()}).to_string().as_bytes());
    let r = t.run(&["--config", cfg.to_str().unwrap(), "run", "xiaohongshu_viral", "--input", input.to_str().unwrap()]);
    r.ok();
    let out = r.json();
    check_contract(&out);
    assert_eq!(out["execution_result"]["status"], "success", "{out:#}");
    let title = out["final_content"]["title"].as_str().unwrap();
    assert!(title.contains("冬季") && !title.contains("秋冬"), "{title}");
    let tasks: Vec<String> = std::fs::read_dir(t.root.join("tasks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let steps: Vec<String> = t.attempts(&tasks[0]).iter().map(|a| a["step"].as_str().unwrap().to_owned()).collect();
    assert!(steps.iter().any(|s| s == "bp/title/filter"), "{steps:?}");
    assert!(steps.iter().any(|s| s == "bp/final/filter"), "{steps:?}");
    let fixes = out["blackboard_snapshot"]["control_zone"]["sensitive_filter"]["fixes_applied"].to_string();
    assert!(fixes.contains("秋冬") && fixes.contains("冬季"), "{fixes}");
}

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

// --- 8. a PM that names a blueprint ----------------------------------------------

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
