//! The JSON Schemas in `config/schemas/` are generated from the types; this test
//! keeps them in step. Run with `CLAWBOARD_BLESS=1` to rewrite them after changing a type.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use clawboard_core::FileKind;
use clawboard_core::schema::KNOWN_KEYWORDS;
use serde_json::Value;

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/schemas")
}

fn rendered(kind: FileKind) -> String {
    clawboard_core::store::to_pretty_json(kind.schema())
}

#[test]
fn committed_schemas_match_the_types() {
    let bless = std::env::var("CLAWBOARD_BLESS").is_ok();
    let mut stale = Vec::new();
    for kind in FileKind::ALL {
        let path = schema_dir().join(format!("{}.schema.json", kind.name()));
        let want = rendered(*kind);
        if bless {
            std::fs::write(&path, &want).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    let expected: Vec<String> = FileKind::ALL.iter().map(|k| format!("{}.schema.json", k.name())).collect();
    let mut present: Vec<String> = std::fs::read_dir(schema_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".schema.json"))
        // The blueprint contracts (seed 001) are clawboard-blueprint's, kept in sync by its own test.
        .filter(|n| !n.starts_with("blueprint-"))
        .collect();
    present.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(present, expected_sorted, "config/schemas/ holds a schema for no kind, or misses one");
    assert!(
        stale.is_empty(),
        "schemas out of date (run CLAWBOARD_BLESS=1 cargo test -p clawboard-core --test schemas): {stale:?}"
    );
}

fn keywords(schema: &Value, out: &mut Vec<String>) {
    if let Value::Object(map) = schema {
        for (k, v) in map {
            out.push(k.clone());
            match k.as_str() {
                "properties" | "$defs" => {
                    if let Value::Object(children) = v {
                        children.values().for_each(|c| keywords(c, out));
                    }
                }
                "anyOf" | "oneOf" | "allOf" => {
                    if let Value::Array(items) = v {
                        items.iter().for_each(|c| keywords(c, out));
                    }
                }
                "items" | "additionalProperties" => keywords(v, out),
                "patternProperties" => {
                    if let Value::Object(children) = v {
                        children.values().for_each(|c| keywords(c, out));
                    }
                }
                _ => {}
            }
        }
    }
}

#[test]
fn schemas_use_only_keywords_the_validator_knows() {
    for kind in FileKind::ALL {
        let mut found = Vec::new();
        keywords(kind.schema(), &mut found);
        let unknown: Vec<_> = found.iter().filter(|k| !KNOWN_KEYWORDS.contains(&k.as_str())).collect();
        assert!(unknown.is_empty(), "{kind}: keywords the validator ignores: {unknown:?}");
    }
}

fn patterns(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "pattern" {
                    if let Value::String(p) = v {
                        out.push(p.clone());
                    }
                } else if k == "patternProperties" {
                    if let Value::Object(props) = v {
                        out.extend(props.keys().cloned());
                        props.values().for_each(|c| patterns(c, out));
                    }
                } else {
                    patterns(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|c| patterns(c, out)),
        _ => {}
    }
}

#[test]
fn every_schema_pattern_compiles() {
    for kind in FileKind::ALL {
        let mut found = Vec::new();
        patterns(kind.schema(), &mut found);
        for p in found {
            assert!(regex::Regex::new(&p).is_ok(), "{kind}: pattern {p} does not compile");
        }
    }
}
