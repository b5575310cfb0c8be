//! The input and output contracts of seed 001, with their JSON Schemas.
//!
//! - [`Input`]: what a blueprint task carries (`blueprint_id`, `user_input`,
//!   `execution_config`), parsed strictly from a task's extra fields with the
//!   seed's defaults, and the `meta_zone` writes the VM makes from it.
//! - [`Output`]: what a run produces (`execution_result`, `blackboard_snapshot`,
//!   `quality_report`, `final_content`).
//!
//! The schemas are generated from these types and committed as
//! `config/schemas/blueprint-input.schema.json` and
//! `config/schemas/blueprint-output.schema.json`; a test keeps them in step
//! (`CLAWBOARD_BLESS=1 cargo test -p clawboard-blueprint` rewrites them).

mod input;
mod output;

pub use input::{
    Constraints, ExecutionConfig, INPUT_KEYS, Input, MAX_RETRIES_LIMIT, Platform, TOPIC_MAX_CHARS, UserInput,
    WordCount, board_styles,
};
pub use output::{
    ComponentType, ExecutionResult, FinalContent, OUTPUT_FILE, Output, PlatformVersion, QualityReport, RunStatus,
    StepExecuted, StepStatus,
};

use serde_json::Value;

/// The file names of the two schemas in `config/schemas/`.
pub const INPUT_SCHEMA_FILE: &str = "blueprint-input.schema.json";
/// See [`INPUT_SCHEMA_FILE`].
pub const OUTPUT_SCHEMA_FILE: &str = "blueprint-output.schema.json";

/// The JSON Schema (draft 2020-12) of the input contract.
pub fn input_schema() -> Value {
    schema_of::<Input>()
}

/// The JSON Schema (draft 2020-12) of the output contract (`output.json`).
pub fn output_schema() -> Value {
    schema_of::<Output>()
}

/// Generated as clawboard-core generates its schemas, so one validator reads all.
fn schema_of<T: schemars::JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use clawboard_core::schema::{KNOWN_KEYWORDS, validate};
    use serde_json::json;

    use super::*;

    fn schema_path(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/schemas").join(name)
    }

    #[test]
    fn committed_schemas_match_the_types() {
        let bless = std::env::var_os("CLAWBOARD_BLESS").is_some();
        let mut stale = Vec::new();
        for (name, schema) in [(INPUT_SCHEMA_FILE, input_schema()), (OUTPUT_SCHEMA_FILE, output_schema())] {
            let path = schema_path(name);
            let want = clawboard_core::store::to_pretty_json(&schema);
            if bless {
                std::fs::write(&path, &want).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
                stale.push(path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "schemas out of date (run CLAWBOARD_BLESS=1 cargo test -p clawboard-blueprint committed_schemas): {stale:?}"
        );
    }

    /// Every keyword of `schema` (and its subschemas), to compare with the validator's.
    fn keywords(schema: &Value, out: &mut Vec<String>) {
        if let Value::Object(map) = schema {
            for (k, v) in map {
                out.push(k.clone());
                match (k.as_str(), v) {
                    ("properties" | "$defs" | "patternProperties", Value::Object(children)) => {
                        children.values().for_each(|c| keywords(c, out))
                    }
                    ("anyOf" | "oneOf" | "allOf", Value::Array(items)) => items.iter().for_each(|c| keywords(c, out)),
                    ("items" | "additionalProperties", _) => keywords(v, out),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn schemas_use_only_keywords_the_validator_knows() {
        for schema in [input_schema(), output_schema()] {
            let mut found = Vec::new();
            keywords(&schema, &mut found);
            let unknown: Vec<_> = found.iter().filter(|k| !KNOWN_KEYWORDS.contains(&k.as_str())).collect();
            assert!(unknown.is_empty(), "keywords the validator ignores: {unknown:?}");
        }
    }

    #[test]
    fn the_output_schema_accepts_an_output_and_names_a_bad_field() {
        let schema = output_schema();
        let good = serde_json::to_value(output::tests::sample()).unwrap();
        assert_eq!(validate(&schema, &good), vec![]);
        let mut bad = good.clone();
        bad["blackboard_snapshot"]["meta_zone"]["platform"] = json!("tiktok");
        bad["quality_report"]["virality_score"] = json!(120);
        bad.as_object_mut().unwrap().remove("final_content");
        let pointers: Vec<String> = validate(&schema, &bad).into_iter().map(|p| p.pointer).collect();
        for want in ["/blackboard_snapshot/meta_zone/platform", "/quality_report/virality_score", "/final_content"] {
            assert!(pointers.iter().any(|p| p == want), "{want} not in {pointers:?}");
        }
        let required = &schema["required"];
        assert_eq!(*required, json!(["execution_result", "blackboard_snapshot", "quality_report", "final_content"]));
    }

    #[test]
    fn the_input_schema_accepts_the_docs_example_and_names_a_bad_field() {
        let schema = input_schema();
        let example = json!({
            "type": "writing",
            "blueprint_id": "xiaohongshu_viral",
            "user_input": {
                "topic": "秋冬护肤", "platform": "xiaohongshu", "intent": "种草", "style": "casual",
                "constraints": {"word_count": {"min": 200, "max": 600}, "tone": "亲切", "must_include": ["保湿"]},
                "reference_materials": ["..."]
            },
            "execution_config": {"max_retries": 3, "quality_threshold": 75, "enable_middleware": true, "parallel_execution": true}
        });
        assert_eq!(validate(&schema, &example), vec![]);
        let bad = json!({"blueprint_id": "x", "user_input": {"topic": "", "platform": "tiktok", "x": 1},
            "execution_config": {"max_retries": 11}});
        let pointers: Vec<String> = validate(&schema, &bad).into_iter().map(|p| p.pointer).collect();
        for want in ["/user_input/topic", "/user_input/platform", "/user_input/x", "/execution_config/max_retries"] {
            assert!(pointers.iter().any(|p| p == want), "{want} not in {pointers:?}");
        }
        assert_eq!(schema["required"], json!(["blueprint_id", "user_input"]));
    }
}
