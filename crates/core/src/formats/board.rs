//! `tasks/{taskId}/board/board.json`: a task's blackboard (seed 000), three zones
//! with the seed's field names and types.
//!
//! The known fields are a table ([`zone_spec`]) rather than serde structs, because a
//! write names one path (`content.hook.variants`) and is checked there, before it
//! lands: the table says what type that path holds. Keys the table does not name
//! are allowed anywhere and kept (a coding or quant task puts its own content in
//! `content_zone`). The JSON Schema in `config/schemas/board.schema.json` is
//! generated from the same table.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::Id;
use crate::schema::{Problem, describe};

/// One of the board's three zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Zone {
    Meta,
    Content,
    Control,
}

impl Zone {
    pub const ALL: [Zone; 3] = [Zone::Meta, Zone::Content, Zone::Control];

    /// The name scopes and paths use: `meta`, `content`, `control`.
    pub fn name(self) -> &'static str {
        match self {
            Zone::Meta => "meta",
            Zone::Content => "content",
            Zone::Control => "control",
        }
    }

    /// The key in the board: `meta_zone`, `content_zone`, `control_zone`.
    pub fn key(self) -> &'static str {
        match self {
            Zone::Meta => "meta_zone",
            Zone::Content => "content_zone",
            Zone::Control => "control_zone",
        }
    }

    pub fn parse(s: &str) -> Option<Zone> {
        Zone::ALL.into_iter().find(|z| z.name() == s)
    }

    fn spec(self) -> &'static Ty {
        match self {
            Zone::Meta => &META,
            Zone::Content => &CONTENT,
            Zone::Control => &CONTROL,
        }
    }
}

/// The type a known path holds.
#[derive(Debug)]
pub enum Ty {
    Str,
    Enum(&'static [&'static str]),
    /// A count: a whole number, 0 or more (retries, iterations, words).
    Count,
    Num,
    Bool,
    /// Any JSON value (the seed's `findings: array` without items).
    Any,
    Arr(&'static Ty),
    /// An object with these known keys; other keys are allowed.
    Obj(&'static [(&'static str, Ty)]),
    /// An object whose every value is of this type (`step_status`, `retries` …).
    Map(&'static Ty),
}

/// The five step states of `control_zone.step_status` (seed 000).
pub const STEP_STATES: &[&str] = &["pending", "running", "completed", "failed", "skipped"];

static META: Ty = Ty::Obj(&[
    ("intent", Ty::Str),
    ("style", Ty::Enum(&["professional", "casual", "humorous", "inspirational", "educational"])),
    ("platform", Ty::Enum(&["xiaohongshu", "wechat", "twitter", "general"])),
    (
        "constraints",
        Ty::Obj(&[
            ("word_count", Ty::Obj(&[("min", Ty::Count), ("max", Ty::Count)])),
            ("tone", Ty::Str),
            ("must_include", Ty::Arr(&Ty::Str)),
            ("must_avoid", Ty::Arr(&Ty::Str)),
        ]),
    ),
    ("topic", Ty::Str),
    ("reference_summary", Ty::Str),
    // A blueprint input's `style` that is none of the five, as given.
    ("style_note", Ty::Str),
]);

static CONTENT: Ty = Ty::Obj(&[
    (
        "hook",
        Ty::Obj(&[
            ("title", Ty::Str),
            ("opening", Ty::Str),
            ("variants", Ty::Arr(&Ty::Obj(&[("type", Ty::Str), ("content", Ty::Str), ("score", Ty::Num)]))),
            ("selected", Ty::Str),
        ]),
    ),
    (
        "body",
        Ty::Obj(&[
            ("content", Ty::Str),
            ("sections", Ty::Arr(&Ty::Obj(&[("title", Ty::Str), ("content", Ty::Str)]))),
            ("key_points", Ty::Arr(&Ty::Str)),
            ("quotes", Ty::Arr(&Ty::Str)),
        ]),
    ),
    (
        "cta",
        Ty::Obj(&[
            ("primary", Ty::Str),
            ("secondary", Ty::Str),
            ("type", Ty::Enum(&["follow", "share", "comment", "save", "click"])),
        ]),
    ),
    ("hashtags", Ty::Arr(&Ty::Str)),
    // A team task's worker outputs, by role (the lifecycle writes each): an object
    // whatever a role writes beside them, or the next worker's output has no place.
    ("results", Ty::Map(&Ty::Any)),
    (
        "platform_versions",
        Ty::Map(&Ty::Obj(&[
            ("title", Ty::Str),
            ("body", Ty::Str),
            ("hashtags", Ty::Arr(&Ty::Str)),
            ("word_count", Ty::Count),
            ("emoji_density", Ty::Str),
        ])),
    ),
]);

static CONTROL: Ty = Ty::Obj(&[
    (
        "errors",
        Ty::Arr(&Ty::Obj(&[
            ("step_id", Ty::Str),
            ("error_type", Ty::Str),
            ("message", Ty::Str),
            ("timestamp", Ty::Str),
        ])),
    ),
    ("retries", Ty::Map(&Ty::Count)),
    (
        "quality_scores",
        Ty::Obj(&[
            ("virality", Ty::Num),
            ("hook_strength", Ty::Num),
            ("emotional_resonance", Ty::Num),
            ("platform_fit", Ty::Num),
        ]),
    ),
    ("step_status", Ty::Map(&Ty::Enum(STEP_STATES))),
    (
        "sensitive_filter",
        Ty::Obj(&[("passed", Ty::Bool), ("findings", Ty::Arr(&Ty::Any)), ("fixes_applied", Ty::Arr(&Ty::Str))]),
    ),
    ("iteration_count", Ty::Count),
    ("current_stage", Ty::Str),
]);

/// Every zone's table, by zone.
pub fn zone_spec(zone: Zone) -> &'static Ty {
    zone.spec()
}

impl Ty {
    /// The type of `key` inside a value of this type; `None` when it is not known
    /// (any value is allowed there), `Err` when this type has no keys at all.
    pub fn child(&self, key: &str) -> Result<Option<&'static Ty>, &'static str> {
        match self {
            Ty::Obj(fields) => Ok(fields.iter().find(|(k, _)| *k == key).map(|(_, t)| t)),
            Ty::Map(t) => Ok(Some(t)),
            Ty::Any => Ok(None),
            other => Err(other.name()),
        }
    }

    /// How the type is named in messages: `a string`, `an array of strings` …
    pub fn name(&self) -> &'static str {
        match self {
            Ty::Str => "a string",
            Ty::Enum(_) => "one of a fixed set of strings",
            Ty::Count => "a whole number, 0 or more",
            Ty::Num => "a number",
            Ty::Bool => "true or false",
            Ty::Any => "any value",
            Ty::Arr(Ty::Str) => "an array of strings",
            Ty::Arr(_) => "an array",
            Ty::Obj(_) | Ty::Map(_) => "an object",
        }
    }

    /// Checks `value` against this type; the error names the sub-path (`.0.score`,
    /// relative to the value) and the reason.
    pub fn check(&self, value: &Value) -> Result<(), (String, String)> {
        let wrong = || Err((String::new(), format!("is {}, not {}", describe(value), self.name())));
        match (self, value) {
            (Ty::Any, _) => Ok(()),
            (Ty::Str, Value::String(_)) => Ok(()),
            (Ty::Enum(allowed), Value::String(s)) => {
                if allowed.contains(&s.as_str()) {
                    Ok(())
                } else {
                    Err((String::new(), format!("{s:?} is not one of {}", allowed.join(", "))))
                }
            }
            (Ty::Count, Value::Number(n)) if n.is_u64() => Ok(()),
            (Ty::Num, Value::Number(_)) => Ok(()),
            (Ty::Bool, Value::Bool(_)) => Ok(()),
            (Ty::Arr(item), Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    item.check(v).map_err(|(at, why)| (format!(".{i}{at}"), why))?;
                }
                Ok(())
            }
            (Ty::Obj(fields), Value::Object(map)) => {
                for (k, t) in fields.iter() {
                    if let Some(v) = map.get(*k) {
                        t.check(v).map_err(|(at, why)| (format!(".{k}{at}"), why))?;
                    }
                }
                Ok(())
            }
            (Ty::Map(t), Value::Object(map)) => {
                for (k, v) in map {
                    t.check(v).map_err(|(at, why)| (format!(".{k}{at}"), why))?;
                }
                Ok(())
            }
            _ => wrong(),
        }
    }

    /// This type as a JSON Schema (draft 2020-12); objects stay open to other keys.
    pub fn json_schema(&self) -> Value {
        match self {
            Ty::Str => json!({"type": "string"}),
            Ty::Enum(v) => json!({"type": "string", "enum": v}),
            Ty::Count => json!({"type": "integer", "minimum": 0}),
            Ty::Num => json!({"type": "number"}),
            Ty::Bool => json!({"type": "boolean"}),
            Ty::Any => json!({}),
            Ty::Arr(t) => json!({"type": "array", "items": t.json_schema()}),
            Ty::Obj(fields) => {
                let props: Map<String, Value> =
                    fields.iter().map(|(k, t)| ((*k).to_owned(), t.json_schema())).collect();
                json!({"type": "object", "properties": props})
            }
            Ty::Map(t) => json!({"type": "object", "additionalProperties": t.json_schema()}),
        }
    }
}

/// `tasks/{taskId}/board/board.json`: the board as its history folds to, and the
/// sequence number of the last write it includes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoardFile {
    pub task_id: Id,
    /// The last history record folded in (0: an empty board).
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<crate::Timestamp>,
    #[serde(default)]
    pub meta_zone: Map<String, Value>,
    #[serde(default)]
    pub content_zone: Map<String, Value>,
    #[serde(default)]
    pub control_zone: Map<String, Value>,
}

impl BoardFile {
    pub fn empty(task_id: Id) -> BoardFile {
        BoardFile {
            task_id,
            seq: 0,
            updated_at: None,
            meta_zone: Map::new(),
            content_zone: Map::new(),
            control_zone: Map::new(),
        }
    }

    pub fn zone(&self, z: Zone) -> &Map<String, Value> {
        match z {
            Zone::Meta => &self.meta_zone,
            Zone::Content => &self.content_zone,
            Zone::Control => &self.control_zone,
        }
    }

    pub fn zone_mut(&mut self, z: Zone) -> &mut Map<String, Value> {
        match z {
            Zone::Meta => &mut self.meta_zone,
            Zone::Content => &mut self.content_zone,
            Zone::Control => &mut self.control_zone,
        }
    }

    /// The three zones, exactly the seed's shape (`snapshot()`).
    pub fn zones(&self) -> Value {
        json!({"meta_zone": self.meta_zone, "content_zone": self.content_zone, "control_zone": self.control_zone})
    }

    /// [`BoardFile::zones`] as compact JSON, written from the board itself rather
    /// than from a copy of it (the engine counts the whole board's tokens at every slice).
    pub fn zones_json(&self) -> String {
        #[derive(Serialize)]
        struct Zones<'a> {
            meta_zone: &'a Map<String, Value>,
            content_zone: &'a Map<String, Value>,
            control_zone: &'a Map<String, Value>,
        }
        let zones =
            Zones { meta_zone: &self.meta_zone, content_zone: &self.content_zone, control_zone: &self.control_zone };
        // Maps of JSON values with string keys always serialize.
        serde_json::to_string(&zones).unwrap_or_default()
    }

    /// Every known field with the wrong type, as problems by JSON pointer.
    pub fn type_problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        for z in Zone::ALL {
            if let Err((at, why)) = z.spec().check(&Value::Object(self.zone(z).clone())) {
                out.push(Problem::new(format!("/{}{}", z.key(), at.replace('.', "/")), why));
            }
        }
        out
    }
}

/// The JSON Schema of `board.json`, from the zone tables.
pub fn board_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "BoardFile",
        "description": "tasks/{taskId}/board/board.json: a task's blackboard (seed 000). Known fields are typed; any other key is allowed and kept.",
        "type": "object",
        "properties": {
            "task_id": {"type": "string"},
            "seq": {"type": "integer", "minimum": 0},
            "updated_at": {"type": "string"},
            "meta_zone": META.json_schema(),
            "content_zone": CONTENT.json_schema(),
            "control_zone": CONTROL.json_schema(),
        },
        "required": ["task_id", "seq"],
        "additionalProperties": false,
    })
}

impl schemars::JsonSchema for BoardFile {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("BoardFile")
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::Schema::try_from(board_schema()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn known_fields_are_typed_and_others_kept() {
        let ok = json!({"intent": "写一篇", "style": "casual", "constraints": {"word_count": {"min": 1, "max": 900}}, "mine": [1]});
        assert!(META.check(&ok).is_ok());
        let bad = json!({"constraints": {"word_count": {"max": "nine"}}});
        assert_eq!(
            META.check(&bad).unwrap_err(),
            (".constraints.word_count.max".into(), "is \"nine\", not a whole number, 0 or more".into())
        );
        let e = META.check(&json!({"platform": "myspace"})).unwrap_err();
        assert!(e.1.contains("not one of xiaohongshu"), "{e:?}");
        let e = CONTROL.check(&json!({"step_status": {"title": "done"}})).unwrap_err();
        assert_eq!(e.0, ".step_status.title");
        let e = CONTENT.check(&json!({"hook": {"variants": [{"score": 1}, {"score": "x"}]}})).unwrap_err();
        assert_eq!(e.0, ".hook.variants.1.score");
        assert!(CONTROL.check(&json!({"iteration_count": 1.5})).is_err(), "a whole number");
        let e = CONTROL.check(&json!({"retries": {"title": -1}})).unwrap_err();
        assert_eq!(e, (".retries.title".into(), "is the number -1, not a whole number, 0 or more".into()));
        assert!(CONTROL.check(&json!({"quality_scores": {"virality": 81.5}})).is_ok());
    }

    #[test]
    fn children() {
        assert!(matches!(CONTENT.child("hook"), Ok(Some(Ty::Obj(_)))));
        assert!(matches!(CONTENT.child("anything"), Ok(None)));
        assert!(matches!(CONTROL.child("retries").unwrap().unwrap().child("title"), Ok(Some(Ty::Count))));
        assert_eq!(Ty::Str.child("x").unwrap_err(), "a string");
    }

    #[test]
    fn zones_json_is_the_zones_as_compact_json() {
        let mut b = BoardFile::empty(Id::new("t1").unwrap());
        assert_eq!(b.zones_json(), serde_json::to_string(&b.zones()).unwrap());
        b.zone_mut(Zone::Meta).insert("intent".into(), json!("写一篇 \"quoted\"\n"));
        b.zone_mut(Zone::Content).insert("hook".into(), json!({"variants": [{"score": 85}], "selected": null}));
        b.zone_mut(Zone::Control).insert("step_status".into(), json!({"b": "running", "a": "completed"}));
        assert_eq!(b.zones_json(), serde_json::to_string(&b.zones()).unwrap());
    }
}
