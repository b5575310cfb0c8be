//! A small JSON Schema (draft 2020-12) validator for the schemas clawboard generates
//! from its own types. It knows exactly the keywords those schemas use (a test
//! checks that no other keyword appears) and reports every problem with the JSON
//! pointer of the field and a sentence a person can act on.

use std::fmt;

use serde_json::Value;

use crate::id::{ID_PATTERN, check_id};

/// One thing wrong with a file: where (a JSON pointer; empty for the whole file) and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub pointer: String,
    pub message: String,
}

impl Problem {
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self { pointer: pointer.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() { "/" } else { &self.pointer };
        write!(f, "{at}: {}", self.message)
    }
}

/// Keywords the validator understands; anything else in a schema is a bug.
pub const KNOWN_KEYWORDS: &[&str] = &[
    "$schema",
    "$defs",
    "$ref",
    "title",
    "description",
    "default",
    "examples",
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "oneOf",
    "allOf",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "patternProperties",
];

/// Validates `instance` against `schema` (whose `$ref`s point into `schema` itself).
pub fn validate(schema: &Value, instance: &Value) -> Vec<Problem> {
    let mut v = Validator { root: schema, problems: Vec::new() };
    v.check(schema, instance, &mut String::new());
    v.problems
}

struct Validator<'a> {
    root: &'a Value,
    problems: Vec<Problem>,
}

/// How a value is described in messages: `"urgent"`, `the number 3`, `an object`.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 60 => {
            let cut: String = s.chars().take(57).collect();
            format!("{cut:?}…")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

fn a_type(ty: &str) -> &str {
    match ty {
        "null" => "null",
        "boolean" => "true or false",
        "object" => "an object",
        "array" => "an array",
        "string" => "a string",
        "number" => "a number",
        "integer" => "a whole number",
        other => other,
    }
}

fn push_key(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

fn enum_list(options: &[Value]) -> String {
    options
        .iter()
        .map(|o| match o {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl<'a> Validator<'a> {
    fn fail(&mut self, pointer: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(pointer, message));
    }

    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let path = reference.strip_prefix('#')?;
        self.root.pointer(path)
    }

    /// Problems `instance` has against `schema`, without recording them.
    fn trial(&self, schema: &Value, instance: &Value, pointer: &str) -> Vec<Problem> {
        let mut v = Validator { root: self.root, problems: Vec::new() };
        v.check(schema, instance, &mut pointer.to_owned());
        v.problems
    }

    fn check(&mut self, schema: &Value, instance: &Value, pointer: &mut String) {
        let Some(s) = schema.as_object() else {
            if schema == &Value::Bool(false) {
                self.fail(pointer, "is not allowed here");
            }
            return;
        };
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            match self.resolve(r) {
                Some(target) => self.check(target, instance, pointer),
                None => self.fail(pointer, format!("schema error: unresolved $ref {r}")),
            }
        }
        if let Some(ty) = s.get("type") {
            let types: Vec<&str> = match ty {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !types.iter().any(|t| type_matches(t, instance)) {
                let want: Vec<&str> = types.iter().map(|t| a_type(t)).collect();
                self.fail(pointer, format!("expected {}, found {}", want.join(" or "), describe(instance)));
                return; // the other keywords would only repeat the same problem
            }
        }
        if let Some(options) = s.get("enum").and_then(Value::as_array)
            && !options.contains(instance)
        {
            self.fail(pointer, format!("{} is not one of {}", describe(instance), enum_list(options)));
        }
        if let Some(c) = s.get("const")
            && c != instance
        {
            self.fail(pointer, format!("{} must be {}", describe(instance), c));
        }
        self.check_branches(s, instance, pointer);
        match instance {
            Value::Object(map) => self.check_object(s, map, pointer),
            Value::Array(items) => {
                if let Some(item_schema) = s.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        let mut p = format!("{pointer}/{i}");
                        self.check(item_schema, item, &mut p);
                    }
                }
            }
            Value::String(text) => self.check_string(s, text, pointer),
            Value::Number(n) => self.check_number(s, n, pointer),
            _ => {}
        }
    }

    fn check_branches(&mut self, s: &serde_json::Map<String, Value>, instance: &Value, pointer: &str) {
        if let Some(all) = s.get("allOf").and_then(Value::as_array) {
            for sub in all {
                let mut p = pointer.to_owned();
                self.check(sub, instance, &mut p);
            }
        }
        for key in ["anyOf", "oneOf"] {
            let Some(branches) = s.get(key).and_then(Value::as_array) else {
                continue;
            };
            let results: Vec<Vec<Problem>> = branches.iter().map(|b| self.trial(b, instance, pointer)).collect();
            let passing = results.iter().filter(|r| r.is_empty()).count();
            if passing == 1 || (key == "anyOf" && passing > 1) {
                continue;
            }
            if passing > 1 {
                self.fail(pointer, format!("{} matches more than one allowed shape", describe(instance)));
                continue;
            }
            // Report the branch that got furthest: the one that is not just `null`
            // when the value is not null, otherwise the one with fewest problems.
            let best = branches
                .iter()
                .zip(results)
                .filter(|(b, _)| instance.is_null() || b.get("type") != Some(&Value::from("null")))
                .min_by_key(|(_, r)| r.len());
            match best {
                Some((_, problems)) => self.problems.extend(problems),
                None => self.fail(pointer, format!("{} matches none of the allowed shapes", describe(instance))),
            }
        }
    }

    fn check_object(
        &mut self,
        s: &serde_json::Map<String, Value>,
        map: &serde_json::Map<String, Value>,
        pointer: &str,
    ) {
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(name) {
                    self.fail(&push_key(pointer, name), "is required but missing");
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        let patterns = s.get("patternProperties").and_then(Value::as_object);
        for (key, value) in map {
            let mut p = push_key(pointer, key);
            if let Some(sub) = props.and_then(|p| p.get(key)) {
                self.check(sub, value, &mut p);
                continue;
            }
            let mut matched = false;
            for (pattern, sub) in patterns.into_iter().flatten() {
                let is_match = match regex::Regex::new(pattern) {
                    Ok(re) => re.is_match(key),
                    Err(e) => {
                        self.fail(pointer, format!("schema error: bad pattern {pattern}: {e}"));
                        continue;
                    }
                };
                if is_match {
                    matched = true;
                    self.check(sub, value, &mut p);
                }
            }
            if matched {
                continue;
            }
            match s.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let id_keys = patterns.is_some_and(|p| p.contains_key(ID_PATTERN));
                    match check_id(key) {
                        Err(why) if id_keys => self.fail(&p, format!("key {key:?} is not a valid id: it {why}")),
                        _ => self.fail(&p, "is not a known field"),
                    }
                }
                Some(sub @ Value::Object(_)) => self.check(sub, value, &mut p),
                _ => {}
            }
        }
    }

    fn check_string(&mut self, s: &serde_json::Map<String, Value>, text: &str, pointer: &str) {
        let len = text.chars().count() as u64;
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str) {
            if pattern == ID_PATTERN {
                // An id: say exactly what is wrong with it.
                if let Err(why) = check_id(text) {
                    self.fail(pointer, format!("id {} {why}", describe(&Value::from(text))));
                }
                return;
            }
            match regex::Regex::new(pattern) {
                Ok(re) if !re.is_match(text) => {
                    self.fail(pointer, format!("{} does not have the form {pattern}", describe(&Value::from(text))))
                }
                Ok(_) => {}
                Err(e) => self.fail(pointer, format!("schema error: bad pattern {pattern}: {e}")),
            }
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            self.fail(
                pointer,
                if min == 1 { "must not be empty".to_owned() } else { format!("is shorter than {min} characters") },
            );
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            self.fail(pointer, format!("is {len} characters long; at most {max} are allowed"));
        }
        if s.get("format").and_then(Value::as_str) == Some("date-time")
            && let Err(e) = chrono::DateTime::parse_from_rfc3339(text)
        {
            self.fail(
                pointer,
                format!(
                    "{} is not an RFC 3339 timestamp ({e}); write e.g. 2026-02-25T19:00:00+08:00",
                    describe(&Value::from(text))
                ),
            );
        }
    }

    fn check_number(&mut self, s: &serde_json::Map<String, Value>, n: &serde_json::Number, pointer: &str) {
        let Some(x) = n.as_f64() else { return };
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && x < min
        {
            self.fail(pointer, format!("{n} is less than the minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && x > max
        {
            self.fail(pointer, format!("{n} is more than the maximum {max}"));
        }
        let limit = match s.get("format").and_then(Value::as_str) {
            Some("uint32") => Some(u32::MAX as f64),
            Some("uint64" | "uint") => Some(u64::MAX as f64),
            _ => None,
        };
        if let Some(limit) = limit
            && x > limit
        {
            self.fail(pointer, format!("{n} is too large (at most {limit})"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(schema: Value, v: Value) -> Vec<String> {
        validate(&schema, &v).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reports_every_problem_with_its_pointer() {
        let schema = json!({
            "type": "object",
            "required": ["a", "b"],
            "properties": {
                "a": {"type": "string", "enum": ["x", "y"]},
                "n": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            }
        });
        let got = msgs(schema, json!({"a": "z", "n": [1, -2, "3"]}));
        assert_eq!(
            got,
            vec![
                "/b: is required but missing",
                "/a: \"z\" is not one of x, y",
                "/n/1: -2 is less than the minimum 0",
                "/n/2: expected a whole number, found \"3\"",
            ]
        );
    }

    #[test]
    fn nullable_ref_reports_the_real_branch() {
        let schema = json!({
            "$defs": {"P": {"type": "string", "enum": ["high", "low"]}},
            "anyOf": [{"$ref": "#/$defs/P"}, {"type": "null"}]
        });
        assert_eq!(msgs(schema.clone(), json!("urgent")), vec!["/: \"urgent\" is not one of high, low"]);
        assert!(msgs(schema, Value::Null).is_empty());
    }

    #[test]
    fn ids_get_specific_reasons() {
        let schema = json!({"type": "string", "pattern": ID_PATTERN});
        assert_eq!(
            msgs(schema.clone(), json!("..")),
            vec!["/: id \"..\" is \"..\", which names a directory, not an id"]
        );
        assert_eq!(
            msgs(schema, json!("a/b"))[0],
            "/: id \"a/b\" contains a path separator '/'; an id must be a single name"
        );
    }

    #[test]
    fn map_keys_that_are_ids_are_checked() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "patternProperties": {ID_PATTERN: {"type": "integer"}}});
        assert!(msgs(schema.clone(), json!({"node-1": 3})).is_empty());
        assert_eq!(msgs(schema.clone(), json!({"node-1": "x"})), vec!["/node-1: expected a whole number, found \"x\""]);
        assert_eq!(
            msgs(schema, json!({"../x": 1})),
            vec![
                "/..~1x: key \"../x\" is not a valid id: it contains a path separator '/'; an id must be a single name"
            ]
        );
    }

    #[test]
    fn keys_are_escaped_in_pointers() {
        let schema = json!({"type": "object", "additionalProperties": {"type": "number"}});
        assert_eq!(msgs(schema, json!({"a/b~c": "x"})), vec!["/a~1b~0c: expected a number, found \"x\""]);
    }
}
