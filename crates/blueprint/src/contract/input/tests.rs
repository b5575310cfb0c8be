#![allow(clippy::unwrap_used, clippy::expect_used)]

use clawboard_board::{BoardPath, Op};
use rstest::rstest;

use super::*;

const KNOWN: &[&str] = &["deep_analysis", "xiaohongshu_viral"];

fn extra(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn parse(v: Value) -> Result<Option<Input>> {
    Input::from_task_extra("inbox/t.json", &extra(v), KNOWN)
}

/// (field, reason) of the error `v` gets.
fn refusal(v: Value) -> (String, String) {
    match parse(v) {
        Err(Error::Invalid { file, step, field, reason }) => {
            assert_eq!(file, "inbox/t.json");
            assert_eq!(step, None);
            (field, reason)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_docs_example_parses_with_defaults() {
    let input = parse(json!({
        "blueprint_id": "xiaohongshu_viral",
        "user_input": {
            "topic": "秋冬护肤", "platform": "xiaohongshu", "intent": "种草", "style": "casual",
            "constraints": {"word_count": {"min": 200, "max": 600}, "tone": "亲切", "must_include": ["保湿"]},
            "reference_materials": ["a", "b"]
        },
        "taskId": "ignored", "priority": "high"
    }))
    .unwrap()
    .unwrap();
    assert_eq!(input.blueprint_id, "xiaohongshu_viral");
    assert_eq!(input.platform(), Platform::Xiaohongshu);
    assert_eq!(input.execution_config, ExecutionConfig::default());
    assert_eq!(input.execution_config.max_retries, 3);
    assert_eq!(input.execution_config.quality_threshold, 75.0);
    assert!(input.execution_config.enable_middleware && input.execution_config.parallel_execution);
    let wc = input.user_input.constraints.as_ref().unwrap().word_count.unwrap();
    assert_eq!((wc.min, wc.max), (Some(200), Some(600)));
}

#[test]
fn execution_config_fields_default_one_by_one() {
    let input = parse(json!({
        "blueprint_id": "deep_analysis", "user_input": {"topic": "t"},
        "execution_config": {"max_retries": 0, "enable_middleware": false}
    }))
    .unwrap()
    .unwrap();
    let c = input.execution_config;
    assert_eq!((c.max_retries, c.quality_threshold, c.enable_middleware, c.parallel_execution), (0, 75.0, false, true));
}

#[test]
fn not_a_blueprint_task() {
    assert!(parse(json!({})).unwrap().is_none());
    assert!(parse(json!({"mine": 1, "team": ["x"]})).unwrap().is_none());
    // Newlines and tabs are text; other keys, far from the input's, are the task's own.
    let ok = parse(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "a\n\tb\r\n"}, "source": "crm"}));
    assert!(ok.unwrap().is_some());
}

#[rstest]
#[case::no_user_input(json!({"blueprint_id": "deep_analysis"}), "/user_input", "is required (blueprint_id is \"deep_analysis\")")]
#[case::no_blueprint_id(json!({"user_input": {"topic": "t"}}), "/blueprint_id", "is required (the task has user_input)")]
#[case::config_alone(json!({"execution_config": {}}), "/blueprint_id", "is required (the task has execution_config; a blueprint task needs blueprint_id and user_input)")]
#[case::no_topic(json!({"blueprint_id": "deep_analysis", "user_input": {"intent": "x"}}), "/user_input/topic", "is required")]
#[case::empty_topic(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "  "}}), "/user_input/topic", "must not be empty")]
#[case::bad_platform(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "platform": "tiktok"}}),
    "/user_input/platform", "\"tiktok\" is not one of xiaohongshu, wechat, twitter, general")]
#[case::unknown_blueprint(json!({"blueprint_id": "x", "user_input": {"topic": "t"}}),
    "/blueprint_id", "unknown blueprint \"x\" (known: deep_analysis, xiaohongshu_viral)")]
#[case::topic_not_text(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": 5}}),
    "/user_input/topic", "invalid type: integer 5, expected a string")]
#[case::id_not_text(json!({"blueprint_id": 7, "user_input": {"topic": "t"}}),
    "/blueprint_id", "invalid type: integer 7, expected a string")]
#[case::user_input_not_object(json!({"blueprint_id": "deep_analysis", "user_input": "t"}),
    "/user_input", "invalid type: string \"t\", expected struct UserInput")]
#[case::must_include_item(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"must_include": ["a", 1]}}}),
    "/user_input/constraints/must_include/1", "invalid type: integer 1, expected a string")]
#[case::min_over_max(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"word_count": {"min": 600, "max": 200}}}}),
    "/user_input/constraints/word_count", "min 600 is more than max 200")]
#[case::negative_min(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"word_count": {"min": -1}}}}),
    "/user_input/constraints/word_count/min", "invalid value: integer -1, expected u32")]
#[case::too_many_retries(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t"}, "execution_config": {"max_retries": 11}}),
    "/execution_config/max_retries", "is 11; at most 10")]
#[case::threshold_over(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t"}, "execution_config": {"quality_threshold": 100.5}}),
    "/execution_config/quality_threshold", "is 100.5; it must be 0 to 100")]
#[case::threshold_under(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t"}, "execution_config": {"quality_threshold": -1}}),
    "/execution_config/quality_threshold", "is -1; it must be 0 to 100")]
#[case::nul_in_topic(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "a\u{0}b"}}),
    "/user_input/topic", "holds the control character U+0000")]
#[case::escape_in_material(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "reference_materials": ["ok", "a\u{1b}[31m"]}}),
    "/user_input/reference_materials/1", "holds the control character U+001B")]
#[case::bell_in_tone(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"tone": "\u{7}"}}}),
    "/user_input/constraints/tone", "holds the control character U+0007")]
#[case::config_misspelt(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t"}, "execution_confg": {"max_retries": 0}}),
    "/execution_confg", "is not a field of a task; did you mean execution_config?")]
#[case::id_misspelt_makes_no_plain_task(json!({"blueprint-id": "deep_analysis", "user_inptu": {"topic": "t"}}),
    "/blueprint-id", "is not a field of a task; did you mean blueprint_id?")]
fn refused(#[case] v: Value, #[case] field: &str, #[case] reason: &str) {
    assert_eq!(refusal(v), (field.to_owned(), reason.to_owned()));
}

#[rstest]
#[case::user_input(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "tpoic": "x"}}), "/user_input/tpoic")]
#[case::constraints(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"must_avoid": []}}}), "/user_input/constraints/must_avoid")]
#[case::word_count(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "constraints": {"word_count": {"mn": 1}}}}), "/user_input/constraints/word_count/mn")]
#[case::execution_config(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t"}, "execution_config": {"retries": 1}}), "/execution_config/retries")]
fn unknown_fields_are_refused(#[case] v: Value, #[case] field: &str) {
    let (at, reason) = refusal(v);
    assert_eq!(at, field);
    assert!(reason.starts_with("is not a known field; expected "), "{reason}");
    assert!(!reason.contains('`'), "{reason}");
}

#[test]
fn topic_length_counts_characters_not_bytes() {
    // 2000 Chinese characters are 6000 bytes: allowed.
    let ok = "字".repeat(TOPIC_MAX_CHARS);
    assert!(parse(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": ok}})).unwrap().is_some());
    let long = "字".repeat(TOPIC_MAX_CHARS + 1);
    let (field, reason) = refusal(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": long}}));
    assert_eq!(field, "/user_input/topic");
    assert_eq!(reason, "is 2001 characters long; at most 2000 are allowed");
}

#[test]
fn the_error_message_names_file_field_and_reason() {
    let e = parse(json!({"blueprint_id": "deep_analysis", "user_input": {}})).unwrap_err();
    assert_eq!(e.to_string(), "inbox/t.json: /user_input/topic: is required");
}

fn input(v: Value) -> Input {
    Input::from_value("t", &v, KNOWN).unwrap()
}

/// Every write passes the board's checks for its path.
fn assert_board_accepts(writes: &[(String, Value)]) {
    for (path, value) in writes {
        let op = Op::set(BoardPath::parse(path).unwrap(), value.clone()).unwrap();
        op.check_value(1 << 20).unwrap_or_else(|e| panic!("{path}: {e:?}"));
    }
}

#[test]
fn meta_writes_of_a_full_input() {
    let i = input(json!({
        "blueprint_id": "xiaohongshu_viral",
        "user_input": {
            "topic": "秋冬护肤", "platform": "xiaohongshu", "intent": "种草", "style": " Casual ",
            "constraints": {"word_count": {"min": 200, "max": 600}, "tone": "亲切", "must_include": ["保湿"]},
            "reference_materials": ["第一段", "第二段"]
        }
    }));
    let w = i.meta_writes();
    assert_eq!(
        w,
        vec![
            ("meta.topic".to_owned(), json!("秋冬护肤")),
            ("meta.intent".to_owned(), json!("种草")),
            ("meta.style".to_owned(), json!("casual")),
            ("meta.platform".to_owned(), json!("xiaohongshu")),
            (
                "meta.constraints".to_owned(),
                json!({"word_count": {"min": 200, "max": 600}, "tone": "亲切", "must_include": ["保湿"]})
            ),
            ("meta.reference_summary".to_owned(), json!("第一段\n第二段")),
        ]
    );
    assert_board_accepts(&w);
}

#[test]
fn meta_writes_of_a_bare_input() {
    let w = input(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "AI 写作"}})).meta_writes();
    assert_eq!(
        w,
        vec![
            ("meta.topic".to_owned(), json!("AI 写作")),
            ("meta.intent".to_owned(), json!("AI 写作")),
            ("meta.platform".to_owned(), json!("general")),
        ]
    );
    assert_board_accepts(&w);
}

#[test]
fn a_style_the_board_does_not_know_becomes_a_note() {
    let w = input(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "style": "亲切幽默"}}))
        .meta_writes();
    assert!(w.contains(&("meta.style_note".to_owned(), json!("亲切幽默"))), "{w:?}");
    assert!(!w.iter().any(|(p, _)| p == "meta.style"));
    assert_board_accepts(&w);
}

#[test]
fn constraints_keep_only_the_fields_given() {
    let w = input(json!({"blueprint_id": "deep_analysis",
        "user_input": {"topic": "t", "constraints": {"word_count": {"max": 300}}}}))
    .meta_writes();
    assert!(w.contains(&("meta.constraints".to_owned(), json!({"word_count": {"max": 300}}))), "{w:?}");
    let w = input(json!({"blueprint_id": "deep_analysis",
        "user_input": {"topic": "t", "constraints": {"word_count": {}, "must_include": []}}}))
    .meta_writes();
    assert!(!w.iter().any(|(p, _)| p == "meta.constraints"), "{w:?}");
}

#[test]
fn every_board_style_is_accepted() {
    assert_eq!(board_styles(), ["professional", "casual", "humorous", "inspirational", "educational"]);
}

#[test]
fn platform_names() {
    for p in Platform::ALL {
        assert_eq!(Platform::parse(p.as_str()), Some(p));
        assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
        assert_eq!(serde_json::from_value::<Platform>(json!(p.as_str())).unwrap(), p);
    }
    assert_eq!(Platform::default(), Platform::General);
}

#[test]
fn an_input_round_trips() {
    let i = input(json!({"blueprint_id": "deep_analysis", "user_input": {"topic": "t", "platform": "wechat"}}));
    let back: Input = serde_json::from_value(serde_json::to_value(&i).unwrap()).unwrap();
    assert_eq!(back, i);
}
