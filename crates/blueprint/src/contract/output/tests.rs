#![allow(clippy::unwrap_used, clippy::expect_used)]

use rstest::rstest;

use super::*;

/// An output as the VM writes it.
pub(crate) fn sample() -> Output {
    Output {
        execution_result: ExecutionResult {
            status: RunStatus::Success,
            blueprint_id: "xiaohongshu_viral".into(),
            steps_executed: vec![
                StepExecuted {
                    step_id: "title".into(),
                    component: "title-worker".into(),
                    component_type: ComponentType::Worker,
                    status: StepStatus::Completed,
                    retries: 0,
                    output_key: "content.hook".into(),
                    fallback: None,
                },
                StepExecuted {
                    step_id: "body".into(),
                    component: "narrative-builder".into(),
                    component_type: ComponentType::Skill,
                    status: StepStatus::Retried,
                    retries: 2,
                    output_key: "content.body".into(),
                    fallback: None,
                },
            ],
            total_tokens_used: 1234,
            execution_time_ms: 5678,
        },
        blackboard_snapshot: json!({
            "meta_zone": {"topic": "秋冬护肤", "platform": "xiaohongshu"},
            "content_zone": {"hook": {"selected": "t", "variants": [{"type": "q", "content": "t", "score": 80}]}},
            "control_zone": {"quality_scores": {"virality": 81.5}, "step_status": {"title": "completed"}}
        }),
        quality_report: QualityReport {
            overall_score: 80.0,
            virality_score: 81.5,
            sensitive_filter_passed: Some(true),
            platform_compliance: Some(true),
            improvements_applied: vec!["sensitive word \"最好\" replaced by \"很好\" in content.body.content".into()],
            checks_not_run: Vec::new(),
        },
        final_content: FinalContent {
            title: "秋冬护肤".into(),
            body: "正文".into(),
            platform_versions: vec![PlatformVersion {
                platform: "xiaohongshu".into(),
                content: "正文".into(),
                hashtags: vec!["护肤".into()],
            }],
        },
    }
}

#[test]
fn the_seeds_field_names() {
    let v = serde_json::to_value(sample()).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&v), ["execution_result", "blackboard_snapshot", "quality_report", "final_content"]);
    assert_eq!(
        keys(&v["execution_result"]),
        ["status", "blueprint_id", "steps_executed", "total_tokens_used", "execution_time_ms"]
    );
    assert_eq!(
        keys(&v["execution_result"]["steps_executed"][0]),
        ["step_id", "component", "component_type", "status", "retries", "output_key"]
    );
    assert_eq!(
        keys(&v["quality_report"]),
        ["overall_score", "virality_score", "sensitive_filter_passed", "platform_compliance", "improvements_applied"]
    );
    assert_eq!(keys(&v["final_content"]), ["title", "body", "platform_versions"]);
    assert_eq!(keys(&v["final_content"]["platform_versions"][0]), ["platform", "content", "hashtags"]);
    assert_eq!(v["execution_result"]["status"], "success");
    assert_eq!(v["execution_result"]["steps_executed"][1]["component_type"], "skill");
    assert_eq!(v["execution_result"]["steps_executed"][1]["status"], "retried");
}

#[test]
fn a_step_its_fallback_answered_says_why() {
    let mut out = sample();
    assert!(out.fallbacks().is_empty());
    let step = &mut out.execution_result.steps_executed[0];
    step.component = "hook-generator".into();
    step.component_type = ComponentType::Skill;
    step.fallback = Some("title-worker: the server refused every reply format".into());
    let v = serde_json::to_value(&out).unwrap();
    assert_eq!(
        v["execution_result"]["steps_executed"][0]["fallback"],
        "title-worker: the server refused every reply format"
    );
    assert!(v["execution_result"]["steps_executed"][1].get("fallback").is_none(), "absent when the role answered");
    assert_eq!(
        out.fallbacks(),
        ["title by fallback hook-generator: title-worker: the server refused every reply format"]
    );
    let back: Output = serde_json::from_value(v).unwrap();
    assert_eq!(back, out);
}

#[test]
fn round_trips_and_checks() {
    let out = sample();
    out.check().unwrap();
    let back: Output = serde_json::from_value(serde_json::to_value(&out).unwrap()).unwrap();
    assert_eq!(back, out);
}

#[test]
fn strict_fields() {
    let mut v = serde_json::to_value(sample()).unwrap();
    v["quality_report"]["extra"] = json!(1);
    assert!(serde_json::from_value::<Output>(v).is_err());
    let mut v = serde_json::to_value(sample()).unwrap();
    v.as_object_mut().unwrap().remove("quality_report");
    assert!(serde_json::from_value::<Output>(v).is_err());
    let mut v = serde_json::to_value(sample()).unwrap();
    v["execution_result"]["status"] = json!("done");
    assert!(serde_json::from_value::<Output>(v).is_err());
}

fn refusal(out: &Output) -> (String, String) {
    match out.check() {
        Err(Error::Invalid { file, field, reason, .. }) => {
            assert_eq!(file, OUTPUT_FILE);
            (field, reason)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[rstest]
#[case::not_an_object(json!([]), "/blackboard_snapshot", "must be an object with meta_zone, content_zone and control_zone")]
#[case::zone_missing(json!({"meta_zone": {}, "content_zone": {}}), "/blackboard_snapshot/control_zone", "is required")]
#[case::zone_not_object(json!({"meta_zone": {}, "content_zone": "x", "control_zone": {}}), "/blackboard_snapshot/content_zone", "must be an object")]
#[case::other_key(json!({"meta_zone": {}, "content_zone": {}, "control_zone": {}, "seq": 3}), "/blackboard_snapshot/seq", "is not a zone; only meta_zone, content_zone and control_zone")]
#[case::board_type(json!({"meta_zone": {"platform": "tiktok"}, "content_zone": {}, "control_zone": {}}), "/blackboard_snapshot/meta_zone/platform", "")]
#[case::nested_board_type(json!({"meta_zone": {}, "content_zone": {"hook": {"variants": [{}, {"score": "x"}]}}, "control_zone": {}}), "/blackboard_snapshot/content_zone/hook/variants/1/score", "")]
fn bad_snapshots(#[case] snapshot: Value, #[case] field: &str, #[case] reason: &str) {
    let mut out = sample();
    out.blackboard_snapshot = snapshot;
    let (at, why) = refusal(&out);
    assert_eq!(at, field);
    if !reason.is_empty() {
        assert_eq!(why, reason);
    }
}

#[rstest]
#[case::over(101.0, "is 101; it must be 0 to 100")]
#[case::under(-0.5, "is -0.5; it must be 0 to 100")]
#[case::nan(f64::NAN, "is NaN; it must be 0 to 100")]
#[case::infinite(f64::INFINITY, "is inf; it must be 0 to 100")]
fn bad_scores(#[case] score: f64, #[case] reason: &str) {
    let mut out = sample();
    out.quality_report.virality_score = score;
    assert_eq!(refusal(&out), ("/quality_report/virality_score".into(), reason.into()));
    let mut out = sample();
    out.quality_report.overall_score = score;
    assert_eq!(refusal(&out).0, "/quality_report/overall_score");
}

#[test]
fn the_boundaries_are_allowed() {
    let mut out = sample();
    out.quality_report.overall_score = 0.0;
    out.quality_report.virality_score = 100.0;
    out.check().unwrap();
}

/// A check that did not run is absent and named, never reported as passed.
#[test]
fn a_check_that_did_not_run_is_not_reported_passed() {
    let mut out = sample();
    out.quality_report.sensitive_filter_passed = None;
    out.quality_report.checks_not_run = vec!["sensitive_filter: execution_config.enable_middleware is false".into()];
    let v = serde_json::to_value(&out).unwrap();
    let q = v["quality_report"].as_object().unwrap();
    assert!(!q.contains_key("sensitive_filter_passed"), "{q:?}");
    assert_eq!(q["platform_compliance"], true);
    assert_eq!(q["checks_not_run"][0], "sensitive_filter: execution_config.enable_middleware is false");
    out.check().unwrap();
    let back: Output = serde_json::from_value(v).unwrap();
    assert_eq!(back, out);
}
