#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

use super::*;

fn templates() -> BTreeMap<String, Template> {
    clawboard_board::template::load(None).unwrap()
}

fn parse(v: Value) -> Result<Blueprint> {
    let t = templates();
    let roles = |r: &str| ["title-worker", "body-worker", "narrative-builder", "virality-scorer"].contains(&r);
    Blueprint::parse("bp.json", &v.to_string(), &Known { roles: &roles, templates: &t })
}

fn good() -> Value {
    json!({
        "blueprint_id": "xhs",
        "type": "adaptive",
        "description": "d",
        "steps": [
            {"id": "title", "worker": "title-worker", "template": "title_generation", "max_tokens": 300,
             "output": "content.hook", "compete": 3, "selector": "max_score", "middleware": ["sensitive_filter"]},
            {"id": "body", "worker": "body-worker", "template": "body_generation", "output": "content.body",
             "fallback": "narrative-builder", "retry": 2},
            {"id": "score", "worker": "virality-scorer", "scope": ["content.hook.selected", "content.body.content"],
             "output": "control.quality_scores", "middleware": ["quality_gate"], "when": "meta.platform != \"twitter\""},
            {"id": "deep", "skill": "narrative-builder", "scope": "all", "parallel": true, "depends_on": ["title"]}
        ],
        "loop": {"steps": ["score", "title", "body"], "while": "control.quality_scores.virality < $quality_threshold", "max": "$max_retries"}
    })
}

#[test]
fn every_field_is_read() {
    let bp = parse(good()).unwrap();
    assert_eq!(bp.id, "xhs");
    assert_eq!(bp.kind, Kind::Adaptive);
    let title = bp.step("title").unwrap();
    assert_eq!(title.role, "title-worker");
    assert_eq!(title.component, Component::Worker);
    assert_eq!(title.slice, SliceOf::Template("title_generation".into()));
    assert_eq!(title.max_tokens, Some(300));
    assert_eq!(title.output.as_ref().unwrap().to_string(), "content.hook");
    assert_eq!(title.compete, Some(3));
    assert_eq!(title.selector, Selector::MaxScore);
    assert_eq!(title.middleware, vec![Middleware::SensitiveFilter]);
    assert!(title.after.is_empty());
    let body = bp.step("body").unwrap();
    assert_eq!((body.retry, body.fallback.as_deref()), (Some(2), Some("narrative-builder")));
    assert_eq!(body.after, vec!["title"], "a non-parallel step follows the one before it");
    let score = bp.step("score").unwrap();
    assert_eq!(score.middleware, vec![Middleware::QualityGate]);
    assert!(score.when.is_some());
    let deep = bp.step("deep").unwrap();
    assert_eq!(deep.component, Component::Skill);
    assert_eq!(deep.slice, SliceOf::Scope(vec!["all".into()]));
    assert_eq!(deep.after, vec!["title"], "a parallel step waits only for its depends_on");
    let l = bp.repeat.as_ref().unwrap();
    assert_eq!(l.steps, vec!["title", "body", "score"], "loop steps in file order");
    assert_eq!(l.max, Count::MaxRetries);
    assert!(bp.in_loop("body") && !bp.in_loop("deep"));
}

fn with(mut v: Value, change: impl FnOnce(&mut Value)) -> Value {
    change(&mut v);
    v
}

#[test]
fn bad_blueprints_name_the_step_field_and_reason() {
    let cases: Vec<(Value, &str)> = vec![
        (
            with(good(), |v| v["steps"][1]["worker"] = json!("ghost")),
            "step \"body\": worker: role \"ghost\" is not configured",
        ),
        (with(good(), |v| v["steps"][1]["fallback"] = json!("ghost")), "step \"body\": fallback: role \"ghost\""),
        (with(good(), |v| v["steps"][1]["skill"] = json!("narrative-builder")), "has both `worker` and `skill`"),
        (
            with(good(), |v| {
                v["steps"][1].as_object_mut().unwrap().remove("worker");
            }),
            "needs `worker` or `skill`",
        ),
        (with(good(), |v| v["steps"][2]["id"] = json!("body")), "step \"body\": steps[2].id: is a duplicate step id"),
        (
            with(good(), |v| v["steps"][0]["depends_on"] = json!(["score"])),
            "forms a cycle: title -> score -> body -> title",
        ),
        (with(good(), |v| v["steps"][0]["depends_on"] = json!(["nope"])), "depends_on: \"nope\" is not a step"),
        (with(good(), |v| v["steps"][0]["depends_on"] = json!(["title"])), "cannot depend on itself"),
        (
            with(good(), |v| v["steps"][2]["scope"] = json!(["content.summary"])),
            "step \"score\": scope: \"content.summary\": no step writes it",
        ),
        (with(good(), |v| v["steps"][2]["scope"] = json!(["meta.budget"])), "the input has no such field"),
        (with(good(), |v| v["steps"][2]["scope"] = json!(["content.*x"])), "step \"score\": scope:"),
        (with(good(), |v| v["steps"][0]["template"] = json!("nope")), "template: \"nope\" is not a known template"),
        (with(good(), |v| v["steps"][0]["scope"] = json!(["meta.intent"])), "has both `scope` and `template`"),
        (
            with(good(), |v| {
                v["steps"][1].as_object_mut().unwrap().remove("template");
            }),
            "needs `scope` (board paths) or `template`",
        ),
        (with(good(), |v| v["steps"][0]["compete"] = json!(1)), "compete: 1 candidates"),
        (with(good(), |v| v["steps"][1]["selector"] = json!("max_score")), "only a competing step"),
        (with(good(), |v| v["steps"][0]["selector"] = json!("best")), "steps[0].selector: unknown variant `best`"),
        (with(good(), |v| v["steps"][0]["middleware"] = json!(["spell"])), "steps[0].middleware[0]: unknown variant"),
        (with(good(), |v| v["steps"][0]["max_tokens"] = json!(0)), "max_tokens: must be at least 1"),
        (with(good(), |v| v["steps"][0]["output"] = json!("content")), "output: \"content\" names a whole zone"),
        (with(good(), |v| v["steps"][0]["output"] = json!("body.x")), "is not a board path"),
        (with(good(), |v| v["steps"][0]["colour"] = json!("red")), "steps[0].colour: unknown field `colour`"),
        (with(good(), |v| v["type"] = json!("linear")), "type: unknown variant `linear`"),
        (with(good(), |v| v["type"] = json!("static_linear")), "conditions are for adaptive blueprints"),
        (with(good(), |v| v["steps"][2]["when"] = json!("control.x ~ 1")), "step \"score\": when:"),
        (with(good(), |v| v["loop"]["while"] = json!("virality < 75")), "loop.while:"),
        (with(good(), |v| v["loop"]["max"] = json!("$forever")), "loop.max:"),
        (with(good(), |v| v["loop"]["steps"] = json!(["nope"])), "loop.steps: \"nope\""),
        (with(good(), |v| v["blueprint_id"] = json!("Bad Id")), "blueprint_id: \"Bad Id\" is not [a-z0-9_]+"),
        (with(good(), |v| v["steps"] = json!([])), "steps: is empty"),
        (with(good(), |v| v["steps"][0]["id"] = json!("a.b")), "steps[0].id: \"a.b\" is not a step id"),
    ];
    for (v, want) in cases {
        let e = parse(v).unwrap_err().to_string();
        assert!(e.starts_with("bp.json: "), "{e}");
        assert!(e.contains(want), "want {want:?} in: {e}");
    }
    let no_template = with(good(), |v| v["steps"][0]["template"] = json!("nope"));
    let e = parse(no_template).unwrap_err().to_string();
    assert!(e.contains("title_generation"), "the known templates are listed: {e}");
}

#[test]
fn a_static_linear_blueprint_runs_in_file_order_and_has_no_loop() {
    let v = json!({"blueprint_id": "lin", "type": "static_linear", "steps": [
        {"id": "a", "worker": "title-worker", "template": "title_generation", "output": "content.hook", "compete": 2},
        {"id": "b", "worker": "body-worker", "template": "body_generation", "output": "content.body"}
    ]});
    let bp = parse(v.clone()).unwrap();
    assert_eq!(bp.step("b").unwrap().after, vec!["a"]);
    let e = parse(with(v, |v| {
        v["loop"] = json!({"steps": ["a"], "while": "control.x < 1", "max": 1});
    }))
    .unwrap_err();
    assert!(e.to_string().contains("loop: a loop is for adaptive blueprints"), "{e}");
}

#[test]
fn a_file_is_named_by_its_id() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("other.json");
    std::fs::write(&path, good().to_string()).unwrap();
    let t = templates();
    let roles = |_: &str| true;
    let e = Blueprint::load(&path, &Known { roles: &roles, templates: &t }).unwrap_err();
    assert!(e.to_string().contains("differs from the file's name; name the file xhs.json"), "{e}");
    std::fs::write(d.path().join("xhs.json"), good().to_string()).unwrap();
    assert_eq!(Blueprint::load(&d.path().join("xhs.json"), &Known { roles: &roles, templates: &t }).unwrap().id, "xhs");
    let e = Blueprint::load(&d.path().join("gone.json"), &Known { roles: &roles, templates: &t }).unwrap_err();
    assert!(e.to_string().contains("gone.json"), "{e}");
    std::fs::write(d.path().join("broken.json"), "{\"blueprint_id\": ").unwrap();
    let e = Blueprint::load(&d.path().join("broken.json"), &Known { roles: &roles, templates: &t }).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{}: ", d.path().join("broken.json").display())), "{e}");
}
