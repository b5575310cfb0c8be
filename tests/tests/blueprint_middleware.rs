//! Blueprints (seed 001, docs/BLUEPRINTS.md), each rung of the ladder reached by
//! the example roles of config/examples/blueprints.toml (scripts/roles/writing.py)
//! misbehaving on purpose through their `env`: the sensitive filter, fallback,
//! partial and failed runs, platform compliance and timeouts; competing
//! candidates; the loop; the middleware's config (platform rules, words, a filter
//! role). Real daemons on temp trees; the helpers are `clawboard_tests::blueprints`.

use clawboard_tests::Tree;
use clawboard_tests::blueprints::*;
use serde_json::{Value, json};

// --- 1. middleware and fallback rungs ----------------------------------------

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
    assert!(snap["content_zone"]["results"]["curate"].as_str().unwrap().starts_with("主题：秋冬护肤；"), "{snap}");
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

// --- 2. competing candidates -------------------------------------------------

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

// --- 3. the loop -------------------------------------------------------------

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
    // Under the target after its last round: partial (seed 001's gate), so failed.
    assert_eq!(wait_task(&t, "high", 150), "failed");
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

    // Never 99: the first round and max_retries (2) more, then the run goes on,
    // and ends partial with the score and the target in control.errors.
    let high = output_of(&t, "high");
    check_contract(&high);
    assert_eq!(high["execution_result"]["status"], "partial");
    let errors = high["blackboard_snapshot"]["control_zone"]["errors"].to_string();
    assert!(
        errors.contains("quality target not met: virality 84 is under the target 99 after round 3, the last"),
        "{errors}"
    );
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
    assert_eq!(t.status_of("high"), "failed");
}

// --- 4. the middleware's config ----------------------------------------------

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
