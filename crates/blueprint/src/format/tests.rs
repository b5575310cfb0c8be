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
        (with(good(), |v| v["steps"][1]["retry"] = json!(11)), "step \"body\": retry: 11 retries; at most 10"),
        (with(good(), |v| v["steps"][1]["retry"] = json!(4_294_967_295_u64)), "retry: 4294967295 retries"),
        (with(good(), |v| v["steps"][0]["max_tokens"] = json!(u64::MAX)), "max_tokens: 18446744073709551615 is over"),
        (
            with(good(), |v| v["steps"][2]["when"] = json!("control.nonexistent_score > 50")),
            "step \"score\": when: control.nonexistent_score: no step writes it",
        ),
        (
            with(good(), |v| v["steps"][2]["when"] = json!("meta.platfrom == \"twitter\"")),
            "when: meta.platfrom: no step writes it and the input has no such field",
        ),
        (
            with(good(), |v| v["loop"]["while"] = json!("control.qualty_scores.virality < $quality_threshold")),
            "loop.while: control.qualty_scores.virality: no step writes it",
        ),
        (
            with(good(), |v| v["steps"][2]["output"] = json!("control.step_status")),
            "step \"score\": output: \"control.step_status\": control.step_status is written by the blueprint VM itself",
        ),
        (
            with(good(), |v| v["steps"][1]["output"] = json!("meta.topic")),
            "step \"body\": output: \"meta.topic\": meta.topic is the user's input",
        ),
        (
            with(good(), |v| v["steps"][3]["output"] = json!("content.body.extra")),
            "step \"deep\": output: content.body.extra overlaps step \"body\"'s output content.body",
        ),
        (
            with(good(), |v| v["steps"][1]["middleware"] = json!(["quality_gate"])),
            "step \"body\": middleware: quality_gate judges control.quality_scores.virality, which this step does not write (it writes content.body)",
        ),
        (with(good(), |v| v["loop"]["max"] = json!(-1)), "loop.max: -1 is not a count of rounds (0 to 10)"),
        (with(good(), |v| v["loop"]["max"] = json!(2.5)), "loop.max: 2.5 is not a count"),
        (with(good(), |v| v["loop"]["max"] = json!(null)), "loop.max: null is neither a number"),
        (with(good(), |v| v["loop"]["max"] = json!(11)), "loop.max: 11 rounds; at most 10"),
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

/// A blueprint in the wrong shape, or with more after it, is refused whole.
#[test]
fn only_one_json_object_is_a_blueprint() {
    let t = templates();
    let roles = |_: &str| true;
    let known = Known { roles: &roles, templates: &t };
    let parse_text = |text: &str| Blueprint::parse("bp.json", text, &known).unwrap_err().to_string();
    for (text, want) in [
        (format!("{} xx", good()), "bp.json: (top level): trailing characters at line 1"),
        (format!("{}{{\"blueprint_id\":\"evil\"", good()), "bp.json: (top level): trailing characters"),
        (r#"["xhs","adaptive","",[]]"#.to_owned(), "bp.json: (top level): is an array; it must be a JSON object"),
        ("[1,2]".to_owned(), "bp.json: (top level): is an array"),
        ("\"xhs\"".to_owned(), "bp.json: (top level): is a string"),
        (
            with(good(), |v| v["steps"][1] = json!(["body", "body-worker"])).to_string(),
            "bp.json: steps[1]: is an array; it must be a JSON object",
        ),
        (with(good(), |v| v["loop"] = json!([["a"], "x < 1", 1])).to_string(), "bp.json: loop: is an array"),
        (
            "{\"blueprint_id\": \"a\", \"blueprint_id\": \"b\"}".to_owned(),
            "bp.json: (top level): names \"blueprint_id\" twice (line 1, column 36)",
        ),
        (good().to_string().replacen("\"id\":", "\"id\":\"x\",\"id\":", 1), "bp.json: steps[0]: names \"id\" twice"),
    ] {
        let e = parse_text(&text);
        assert!(e.starts_with(want), "want {want:?}, got {e}");
    }
    // A file over the limit is not read whole.
    let d = tempfile::tempdir().unwrap();
    let big = d.path().join("xhs.json");
    let mut text = good().to_string();
    text.push_str(&" ".repeat(MAX_FILE_BYTES as usize));
    std::fs::write(&big, text).unwrap();
    let e = Blueprint::load(&big, &known).unwrap_err().to_string();
    assert!(e.contains("(file): is over 1048576 bytes"), "{e}");
}

/// A step reads what is written before it runs; in a loop, what the loop writes.
#[test]
fn a_step_that_reads_what_runs_after_it_is_refused() {
    let lin = |steps: Value| json!({"blueprint_id": "lin", "type": "static_linear", "steps": steps});
    // Reads content.x, which only the later step b writes.
    let later = lin(json!([
        {"id": "a", "worker": "body-worker", "scope": ["content.x"], "output": "content.y"},
        {"id": "b", "worker": "body-worker", "scope": ["meta.topic"], "output": "content.x"}
    ]));
    let e = parse(later).unwrap_err().to_string();
    assert!(
        e.contains("step \"a\": scope: content.x: written only by step \"b\", which does not run before this one; add it to depends_on"),
        "{e}"
    );
    // Beside its writer (both parallel): seen sometimes, so refused too.
    let beside = lin(json!([
        {"id": "w", "worker": "body-worker", "scope": ["meta.topic"], "output": "content.x"},
        {"id": "r", "worker": "body-worker", "scope": ["content.x"], "output": "content.y", "parallel": true}
    ]));
    assert!(
        parse(beside.clone())
            .unwrap_err()
            .to_string()
            .contains("step \"r\": scope: content.x: written only by step \"w\"")
    );
    // Ordered by depends_on, it is fine.
    let ordered = with(beside, |v| v["steps"][1]["depends_on"] = json!(["w"]));
    assert!(parse(ordered).is_ok());
    // A `when` on a value written after the step is refused as well.
    let adaptive = json!({"blueprint_id": "ad", "type": "adaptive", "steps": [
        {"id": "a", "worker": "body-worker", "scope": ["meta.topic"], "output": "content.y", "when": "control.quality_scores.virality > 1"},
        {"id": "s", "worker": "virality-scorer", "scope": ["content.y"], "output": "control.quality_scores"}
    ]});
    assert!(
        parse(adaptive.clone())
            .unwrap_err()
            .to_string()
            .contains("step \"a\": when: control.quality_scores.virality: written only by step \"s\"")
    );
    // In a loop with its writer, it sees the last round's value: fine.
    let looped = with(adaptive, |v| {
        v["loop"] =
            json!({"steps": ["a", "s"], "while": "control.quality_scores.virality < $quality_threshold", "max": 2});
    });
    assert!(parse(looped).is_ok());
}

#[test]
fn the_shipped_blueprints_pass_every_check() {
    let t = templates();
    let roles = |_: &str| true;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/blueprints");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let bp = Blueprint::load(&path, &Known { roles: &roles, templates: &t }).unwrap();
            assert!(bp.warnings.is_empty(), "{:?}", bp.warnings);
            n += 1;
        }
    }
    assert_eq!(n, 4);
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

/// Seed 001's two examples, as the seed writes them (no `blueprint_id`, no
/// `output`, bare fields and `STEP.output` in scopes).
fn seed_examples() -> (Value, Value) {
    let static_linear = json!({"type": "static_linear", "steps": [
        {"id": "hook", "worker": "title-worker", "scope": ["intent"]},
        {"id": "body", "worker": "body-worker", "scope": ["intent", "hook.output"]}
    ]});
    let adaptive = json!({"type": "adaptive", "steps": [
        {"id": "strategy", "skill": "narrative-builder", "scope": "all"},
        {"id": "content", "skill": "narrative-builder", "scope": "all", "retry": 3}
    ]});
    (static_linear, adaptive)
}

fn parse_as(file: &str, v: Value) -> Result<Blueprint> {
    let t = templates();
    let roles = |r: &str| ["title-worker", "body-worker", "narrative-builder", "virality-scorer"].contains(&r);
    Blueprint::parse(file, &v.to_string(), &Known { roles: &roles, templates: &t })
}

#[test]
fn the_seeds_examples_load_as_written() {
    let (static_linear, adaptive) = seed_examples();
    let bp = parse_as("dir/seed_static.json", static_linear).unwrap();
    assert_eq!(bp.id, "seed_static", "without blueprint_id, the file's name");
    let hook = bp.step("hook").unwrap();
    assert_eq!(hook.slice, SliceOf::Scope(vec!["meta.intent".into()]), "a bare field, in its zone");
    assert_eq!(hook.output.as_ref().unwrap().to_string(), "content.results.hook");
    assert!(hook.output_default);
    let body = bp.step("body").unwrap();
    assert_eq!(body.slice, SliceOf::Scope(vec!["meta.intent".into(), "content.results.hook".into()]));
    let bp = parse_as("seed_adaptive.json", adaptive).unwrap();
    assert_eq!(bp.step("content").unwrap().output.as_ref().unwrap().to_string(), "content.results.content");
    assert_eq!(bp.step("content").unwrap().retry, Some(3));
    // An earlier step's output below its path, and an explicit output read by name.
    let v = json!({"blueprint_id": "lin", "type": "static_linear", "steps": [
        {"id": "t", "worker": "title-worker", "scope": ["topic"], "output": "content.hook"},
        {"id": "b", "worker": "body-worker", "scope": ["t.output.selected", "style_note"], "output": "content.body"}
    ]});
    let bp = parse(v).unwrap();
    assert_eq!(
        bp.step("b").unwrap().slice,
        SliceOf::Scope(vec!["content.hook.selected".into(), "meta.style_note".into()])
    );
    assert!(!bp.step("b").unwrap().output_default);
}

#[test]
fn a_scope_naming_no_field_or_a_later_step_is_refused() {
    let lin = |scope: Value| {
        json!({"blueprint_id": "lin", "type": "static_linear", "steps": [
            {"id": "a", "worker": "title-worker", "scope": ["topic"]},
            {"id": "b", "worker": "body-worker", "scope": scope},
            {"id": "c", "worker": "body-worker", "scope": ["topic"]}
        ]})
    };
    for (scope, want) in [
        (
            json!(["c.output"]),
            "step \"b\": scope: \"c.output\": step \"c\" does not come before this step; a scope reads the output of an earlier step (steps before this one: a)",
        ),
        (json!(["b.output"]), "step \"b\": scope: \"b.output\": step \"b\" does not come before this step"),
        (json!(["nope.output"]), "step \"b\": scope: \"nope.output\": step \"nope\" is not a step of this blueprint"),
        (
            json!(["intnt"]),
            "step \"b\": scope: \"intnt\": \"intnt\" is not a zone (meta, content, control), a field of one, or an earlier step's `STEP.output`",
        ),
        (json!("a.outputs"), "\"a.outputs\": \"a\" is not a zone"),
    ] {
        let e = parse(lin(scope)).unwrap_err().to_string();
        assert!(e.contains(want), "{e}\nwanted: {want}");
    }
    // A step's own place is its own: an explicit output over it is refused.
    let v = json!({"blueprint_id": "lin", "type": "static_linear", "steps": [
        {"id": "a", "worker": "title-worker", "scope": ["topic"]},
        {"id": "b", "worker": "body-worker", "scope": ["topic"], "output": "content.results"}
    ]});
    let e = parse(v).unwrap_err().to_string();
    assert!(
        e.contains("step \"a\": output: (none: the step's result goes to its own place content.results.a) overlaps step \"b\"'s output content.results"),
        "{e}"
    );
    // A file without blueprint_id whose name is no id.
    let e = parse_as("Seed Example.json", seed_examples().0).unwrap_err().to_string();
    assert!(e.contains("(file): has no blueprint_id and its name \"Seed Example\" is not [a-z0-9_]+"), "{e}");
}

#[test]
fn a_step_without_a_budget_gets_its_components_and_a_worker_over_the_ceiling_is_flagged() {
    let v = json!({"blueprint_id": "lin", "type": "static_linear", "steps": [
        {"id": "t", "worker": "title-worker", "scope": ["topic"], "output": "content.hook", "compete": 3},
        {"id": "b", "worker": "body-worker", "scope": ["topic"], "output": "content.body"},
        {"id": "s", "worker": "virality-scorer", "scope": ["content.body.content"], "output": "control.quality_scores", "max_tokens": 900},
        {"id": "n", "skill": "narrative-builder", "scope": ["topic"]}
    ]});
    let bp = parse(v).unwrap();
    assert_eq!(bp.step("t").unwrap().max_tokens, Some(300), "title-worker: ~300 per candidate");
    assert_eq!(bp.step("b").unwrap().max_tokens, Some(500));
    assert_eq!(bp.step("s").unwrap().max_tokens, Some(900), "a step's own budget stands");
    assert_eq!(bp.step("n").unwrap().max_tokens, Some(2000), "narrative-builder: ~2000");
    assert_eq!(
        bp.warnings,
        [
            "bp.json: steps[2].max_tokens (s): 900 tokens for worker \"virality-scorer\", over the worker ceiling of 500 \
          (seed 001: a worker takes under 500); make it a `skill` step or lower the budget"
        ]
    );
    assert_eq!(component_budget("my-worker", Component::Worker), Some(WORKER_CEILING));
    assert_eq!(component_budget("my-skill", Component::Skill), None);
}

#[test]
fn a_worker_falls_back_to_its_skill_counterpart_unless_told_otherwise() {
    let t = templates();
    let roles =
        |r: &str| ["title-worker", "body-worker", "narrative-builder", "hook-generator", "cta-worker"].contains(&r);
    let parse = |steps: Value| {
        let v = json!({"blueprint_id": "lin", "type": "static_linear", "steps": steps});
        Blueprint::parse("bp.json", &v.to_string(), &Known { roles: &roles, templates: &t })
    };
    let bp = parse(json!([
        {"id": "t", "worker": "title-worker", "scope": ["topic"], "output": "content.hook", "compete": 3},
        {"id": "b", "worker": "body-worker", "scope": ["topic"], "output": "content.body"},
        {"id": "c", "worker": "cta-worker", "scope": ["topic"], "output": "content.cta"},
        {"id": "n", "skill": "narrative-builder", "scope": ["topic"], "output": "content.x"},
        {"id": "off", "worker": "body-worker", "scope": ["topic"], "output": "content.y", "fallback": null},
        {"id": "own", "worker": "body-worker", "scope": ["topic"], "output": "content.z", "fallback": "hook-generator"}
    ]))
    .unwrap();
    let fallback = |id: &str| bp.step(id).unwrap().fallback.clone();
    assert_eq!(fallback("t").as_deref(), Some("hook-generator"), "seed 001: title-worker -> hook-generator");
    assert_eq!(fallback("b").as_deref(), Some("narrative-builder"));
    assert_eq!(fallback("c"), None, "no counterpart: as before");
    assert_eq!(fallback("n"), None, "a skill has none");
    assert_eq!(fallback("off"), None, "null: none");
    assert_eq!(fallback("own").as_deref(), Some("hook-generator"), "the step's own wins");
    // The counterpart only when its role is configured.
    let few = |r: &str| ["body-worker"].contains(&r);
    let v = json!({"blueprint_id": "lin", "type": "static_linear",
                   "steps": [{"id": "b", "worker": "body-worker", "scope": ["topic"], "output": "content.body"}]});
    let bp = Blueprint::parse("bp.json", &v.to_string(), &Known { roles: &few, templates: &t }).unwrap();
    assert_eq!(bp.step("b").unwrap().fallback, None);
    let e = parse(json!([{"id": "b", "worker": "body-worker", "scope": ["topic"], "output": "content.body", "fallback": "body-worker"}]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("fallback: \"body-worker\" is the step's own role"), "{e}");
}
