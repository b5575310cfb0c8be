//! The shape a step's reply must have, as a JSON Schema: what the step's role
//! prints (its kind's output, docs/ROLES.md; a blueprint step's `{"output": VALUE,
//! "score": N}` with VALUE of its board path's type, docs/BLUEPRINTS.md). The `llm`
//! runner hands it to the model (`response_format: json_schema`), which a server
//! that supports it (OpenAI, vLLM, llama.cpp) turns into constrained decoding, and
//! sizes the completion limit (`max_tokens`) to it, so a model can never generate
//! until its role's timeout.
//!
//! The schemas are stricter than the formats they describe: the scalars of an
//! object are required and no other keys are allowed, so a small model fills what
//! the step needs rather than inventing keys. The step's own check still decides
//! what passes (a reply that fits the schema can still fail it, and be retried).

use clawboard_board::BoardPath;
use clawboard_core::formats::{Ty, zone_spec};
use serde_json::{Map, Value, json};

/// What a run's reply must look like: the JSON Schema asked for, and a
/// completion limit sized to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyShape {
    pub schema: Option<Value>,
    /// Tokens the model may generate; `None`: the role's own or the server's.
    pub max_tokens: Option<u32>,
    /// A reply was cut off at the limit before: the limit that applies (the
    /// step's, or the role's own) is doubled ([`ReplyShape::grown`]).
    pub doubled: bool,
}

/// The smallest and largest completion limit sized from a schema.
const MIN_TOKENS: u32 = 64;
const MAX_TOKENS: u32 = 4096;
/// The largest limit a cut-off reply's retry grows to.
pub const MAX_GROWN_TOKENS: u32 = 8_192;
/// The longest text a model may write in one field of a board value: a body; a
/// title-like field ([`SHORT_FIELDS`]) gets [`SHORT_TEXT`]. Without a bound a small
/// model can repeat itself until its completion limit.
const LONG_TEXT: u32 = 2_000;
const SHORT_TEXT: u32 = 200;
const SHORT_FIELDS: &[&str] = &["title", "selected", "primary", "secondary", "type", "emoji_density", "tone", "topic"];

impl ReplyShape {
    /// A shape with `schema` and a limit sized to it.
    pub fn of(schema: Value) -> ReplyShape {
        let max = estimate_tokens(&schema).clamp(MIN_TOKENS, MAX_TOKENS);
        ReplyShape { schema: Some(schema), max_tokens: Some(max), doubled: false }
    }

    /// The shape for an `llm` role: its own `reply_schema` and
    /// `max_completion_tokens` win over the step's.
    /// After a cut-off the role's limit is doubled as the step's would have been.
    pub fn for_role(self, llm: &crate::config::LlmConfig) -> ReplyShape {
        let cut_off_before = self.doubled;
        let mut shape = match &llm.reply_schema {
            Some(schema) => ReplyShape::of(schema.clone()),
            None => self,
        };
        if let Some(n) = llm.max_completion_tokens {
            shape.max_tokens = Some(n);
            shape.doubled = false;
        }
        shape.grown(u32::from(cut_off_before))
    }

    /// The limit doubled after a reply was cut off at it (`cut_offs` > 0): once,
    /// as a model that ran into its limit is as often repeating itself as writing
    /// a long answer.
    pub fn grown(mut self, cut_offs: u32) -> ReplyShape {
        if cut_offs > 0 && !self.doubled {
            self.doubled = true;
            if let Some(n) = self.max_tokens.as_mut() {
                *n = n.saturating_mul(2).min(MAX_GROWN_TOKENS);
            }
        }
        self
    }
}

/// The reply of a blueprint step that writes `output` (absent: it writes
/// nothing): `{"output": VALUE}` with VALUE of the path's board type; a competing
/// candidate's `{"output": {"type", "content"}, "score": 0-100}`. A map keyed by
/// platform (`content.platform_versions`) is asked for under `platform`.
pub fn blueprint_step(output: Option<&BoardPath>, compete: bool, platform: &str) -> ReplyShape {
    let Some(path) = output else { return ReplyShape::default() };
    if compete {
        let kind = json!({"type": "string", "maxLength": 40});
        // A competing step picks among short texts (titles): a bound keeps a small
        // model from writing one until its completion limit.
        let candidate = object(&[("type", kind), ("content", json!({"type": "string", "maxLength": 200}))]);
        return ReplyShape::of(object(&[("output", candidate), ("score", score())]));
    }
    let value = match board_type(path) {
        // A step's own place (a step without `output`): its result as text.
        Some(Ty::Any) if is_step_result(path) => json!({"type": "string", "maxLength": LONG_TEXT}),
        Some(Ty::Map(item)) if !platform.is_empty() => object(&[(platform, strict(item, None))]),
        Some(ty) => strict(ty, path.keys.last().map(String::as_str)),
        None => json!({}),
    };
    ReplyShape::of(object(&[("output", value)]))
}

/// True for `content.results.{step}`, where a blueprint step without `output` writes.
fn is_step_result(path: &BoardPath) -> bool {
    path.zone == clawboard_core::formats::Zone::Content && path.keys.len() == 2 && path.keys[0] == "results"
}

/// The reply of a seed-002 step of `kind` (`pm`, `team`, `validator`, `harvest`);
/// none for another kind. A PM picks its team among `roles` (when given).
pub fn team_step(kind: &str, roles: &[String]) -> ReplyShape {
    let string = || json!({"type": "string", "maxLength": SHORT_TEXT});
    let strings = |max: u32| json!({"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": max});
    let schema = match kind {
        "pm" => {
            let role = if roles.is_empty() { string() } else { json!({"type": "string", "enum": roles}) };
            let pick = object(&[
                ("role", role),
                ("priority", json!({"type": "integer", "minimum": 1, "maximum": 9})),
                ("reason", string()),
            ]);
            object(&[
                ("team", json!({"type": "array", "items": pick, "minItems": 1, "maxItems": 6})),
                ("reasoning", string()),
            ])
        }
        "team" => object(&[("summary", string()), ("output", json!({"type": "string", "maxLength": LONG_TEXT}))]),
        "validator" => object(&[
            ("score", json!({"type": "integer", "minimum": 0, "maximum": 10})),
            ("pass", json!({"type": "boolean"})),
            ("suggestions", strings(3)),
        ]),
        "harvest" => {
            let cell = object(&[
                ("type", json!({"type": "string", "enum": ["success", "failure", "insight", "pattern"]})),
                ("content", string()),
                ("value", json!({"type": "number", "minimum": 0, "maximum": 1})),
            ]);
            let experience =
                object(&[("roleId", string()), ("cells", json!({"type": "array", "items": cell, "maxItems": 3}))]);
            object(&[("experiences", json!({"type": "array", "items": experience, "maxItems": 4}))])
        }
        _ => return ReplyShape::default(),
    };
    ReplyShape::of(schema)
}

/// The reply of a lane actor (seed 004, docs/ENTRIES.md): a `note`, one new
/// entry (of one of `kinds`, addressed to one of that kind's recipients), and,
/// for an actor that writes documents, `docs` (each one of
/// `docs`, the handled entry's target documents, with its whole new content).
pub fn lane_actor(kinds: &[(String, Vec<String>)], docs: &[String]) -> ReplyShape {
    let string = |max: u32| json!({"type": "string", "maxLength": max});
    let variants: Vec<Value> = kinds
        .iter()
        .map(|(kind, to)| {
            object(&[
                ("to", json!({"type": "string", "enum": to})),
                ("kind", json!({"type": "string", "enum": [kind]})),
                ("payload", object(&[("summary", string(400))])),
            ])
        })
        .collect();
    let mut fields = vec![("note", string(200))];
    if !variants.is_empty() {
        // One entry on: the lap hands each request to the next actor once.
        fields.push(("entries", json!({"type": "array", "items": {"anyOf": variants}, "minItems": 1, "maxItems": 1})));
    }
    if !docs.is_empty() {
        let doc = object(&[("path", json!({"type": "string", "enum": docs})), ("content", json!({"type": "string"}))]);
        fields.push(("docs", json!({"type": "array", "items": doc, "minItems": 1, "maxItems": docs.len()})));
    }
    ReplyShape::of(object(&fields))
}

/// An object with exactly these keys, all required.
fn object(fields: &[(&str, Value)]) -> Value {
    let props: Map<String, Value> = fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let required: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

fn score() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": 100})
}

/// The board's type at `path`; `None` where the board does not type it.
fn board_type(path: &BoardPath) -> Option<&'static Ty> {
    let mut ty = zone_spec(path.zone);
    for key in &path.keys {
        ty = ty.child(key).ok()??;
    }
    Some(ty)
}

/// `ty` (of the field `name`) as a schema for a model: an object's scalar fields
/// required and no other keys, its arrays and objects optional; every text bounded.
fn strict(ty: &Ty, name: Option<&str>) -> Value {
    match ty {
        Ty::Obj(fields) => {
            let props: Map<String, Value> = fields.iter().map(|(k, t)| ((*k).to_owned(), strict(t, Some(k)))).collect();
            let required: Vec<&str> = fields.iter().filter(|(_, t)| is_scalar(t)).map(|(k, _)| *k).collect();
            json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
        }
        Ty::Arr(item) => json!({"type": "array", "items": strict(item, Some("item")), "maxItems": 8}),
        Ty::Map(item) => json!({"type": "object", "additionalProperties": strict(item, None)}),
        Ty::Str => {
            let short = name.is_some_and(|n| SHORT_FIELDS.contains(&n) || n == "item");
            json!({"type": "string", "maxLength": if short { SHORT_TEXT } else { LONG_TEXT }})
        }
        other => other.json_schema(),
    }
}

fn is_scalar(ty: &Ty) -> bool {
    matches!(ty, Ty::Str | Ty::Enum(_) | Ty::Count | Ty::Num | Ty::Bool)
}

/// About how many tokens a reply of `schema` takes at most: a string its
/// `maxLength` (else 400, a body of a few hundred words), a number or a choice 8, an array up to its
/// `maxItems` (else 4) items, an object its required fields and their keys
/// and at most 100 for each optional one.
pub fn estimate_tokens(schema: &Value) -> u32 {
    const TEXT: u32 = 400;
    const OPTIONAL: u32 = 100;
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "string" if schema.get("enum").is_some() => 8,
        // A character is a token at most, as a rule: the grammar ends the text
        // before the limit does.
        "string" => {
            schema.get("maxLength").and_then(Value::as_u64).map_or(TEXT, |n| u32::try_from(n).unwrap_or(u32::MAX))
        }
        "integer" | "number" | "boolean" => 8,
        "array" => {
            let items = schema.get("items").map_or(TEXT, estimate_tokens);
            let n = schema.get("maxItems").and_then(Value::as_u64).map_or(4, |n| u32::try_from(n).unwrap_or(4));
            items.saturating_mul(n).saturating_add(4)
        }
        "object" => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else { return TEXT };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            // An optional field is often left out: a little room for it.
            let field = |(k, v): (&String, &Value)| {
                let n = estimate_tokens(v);
                if required.contains(&k.as_str()) { n } else { n.min(OPTIONAL) }.saturating_add(6)
            };
            props.iter().map(field).fold(4, u32::saturating_add)
        }
        _ => TEXT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> BoardPath {
        BoardPath::parse(s).unwrap()
    }

    #[test]
    fn a_blueprint_step_asks_for_its_board_paths_type() {
        let s = blueprint_step(Some(&path("control.quality_scores")), false, "xiaohongshu").schema.unwrap();
        let scores = &s["properties"]["output"];
        assert_eq!(scores["required"], json!(["virality", "hook_strength", "emotional_resonance", "platform_fit"]));
        assert_eq!(scores["properties"]["virality"], json!({"type": "number"}));
        let cta = blueprint_step(Some(&path("content.cta")), false, "").schema.unwrap();
        assert_eq!(cta["properties"]["output"]["properties"]["primary"]["maxLength"], SHORT_TEXT);
        assert_eq!(scores["additionalProperties"], json!(false));
        assert_eq!(s["required"], json!(["output"]));
        let own = blueprint_step(Some(&path("content.results.strategy")), false, "").schema.unwrap();
        assert_eq!(own["properties"]["output"], json!({"type": "string", "maxLength": LONG_TEXT}));

        // A body's text is required, its lists are not.
        let s = blueprint_step(Some(&path("content.body")), false, "").schema.unwrap();
        assert_eq!(s["properties"]["output"]["required"], json!(["content"]));
        assert_eq!(s["properties"]["output"]["properties"]["content"]["maxLength"], LONG_TEXT);
        assert_eq!(
            s["properties"]["output"]["properties"]["key_points"]["items"],
            json!({"type": "string", "maxLength": SHORT_TEXT})
        );

        // The cta's type is one of the board's choices.
        let s = blueprint_step(Some(&path("content.cta")), false, "").schema.unwrap();
        assert_eq!(s["properties"]["output"]["properties"]["type"]["enum"][0], "follow");

        // A map by platform is asked for under the task's platform.
        let s = blueprint_step(Some(&path("content.platform_versions")), false, "wechat").schema.unwrap();
        assert_eq!(s["properties"]["output"]["required"], json!(["wechat"]));
        assert_eq!(
            s["properties"]["output"]["properties"]["wechat"]["required"],
            json!(["title", "body", "word_count", "emoji_density"])
        );

        // A path the board does not type takes any value; a string is a string.
        let s = blueprint_step(Some(&path("content.trends")), false, "").schema.unwrap();
        assert_eq!(s["properties"]["output"], json!({}));
        let s = blueprint_step(Some(&path("meta.reference_summary")), false, "").schema.unwrap();
        assert_eq!(s["properties"]["output"], json!({"type": "string", "maxLength": LONG_TEXT}));

        // A competing candidate gives its text and a score to be selected by.
        let s = blueprint_step(Some(&path("content.hook")), true, "").schema.unwrap();
        assert_eq!(s["required"], json!(["output", "score"]));
        assert_eq!(s["properties"]["output"]["required"], json!(["type", "content"]));
        assert_eq!(s["properties"]["score"]["maximum"], 100);

        assert_eq!(blueprint_step(None, false, ""), ReplyShape::default());
    }

    #[test]
    fn team_steps_ask_for_what_their_kind_prints() {
        for (kind, required) in [
            ("pm", json!(["team", "reasoning"])),
            ("team", json!(["summary", "output"])),
            ("validator", json!(["score", "pass", "suggestions"])),
            ("harvest", json!(["experiences"])),
        ] {
            let s = team_step(kind, &[]);
            assert_eq!(s.schema.as_ref().unwrap()["required"], required, "{kind}");
            assert!(s.max_tokens.unwrap() >= MIN_TOKENS);
        }
        assert_eq!(team_step("gm", &[]), ReplyShape::default());
        let pm = team_step("pm", &["writer".to_owned()]).schema.unwrap();
        assert_eq!(pm["properties"]["team"]["items"]["properties"]["role"]["enum"], json!(["writer"]));
        let kinds = [("doc_update_report".to_owned(), vec!["Human".to_owned()])];
        let lane = lane_actor(&kinds, &["STATE/current_state.md".to_owned()]).schema.unwrap();
        let variant = &lane["properties"]["entries"]["items"]["anyOf"][0];
        assert_eq!(variant["properties"]["kind"]["enum"], json!(["doc_update_report"]));
        assert_eq!(variant["properties"]["to"]["enum"], json!(["Human"]));
        assert_eq!(
            lane["properties"]["docs"]["items"]["properties"]["path"]["enum"],
            json!(["STATE/current_state.md"])
        );
        assert_eq!(lane["required"], json!(["note", "entries", "docs"]));
        let quiet = lane_actor(&[], &[]).schema.unwrap();
        assert_eq!(quiet["required"], json!(["note"]));
    }

    #[test]
    fn the_completion_limit_is_sized_to_the_reply_and_grows_on_a_cut_off() {
        let title = blueprint_step(Some(&path("content.hook")), true, "");
        let scores = blueprint_step(Some(&path("control.quality_scores")), false, "");
        let body = blueprint_step(Some(&path("content.body")), false, "");
        let (t, s, b) = (title.max_tokens.unwrap(), scores.max_tokens.unwrap(), body.max_tokens.unwrap());
        assert!(s < t && t < b, "scores {s} < title {t} < body {b}");
        assert_eq!(t, 280, "the example request of docs/LLM.md");
        assert!(s < 128, "four numbers need little room: {s}");
        assert!(b <= MAX_TOKENS);
        assert_eq!(body.clone().grown(0).max_tokens, Some(b));
        assert_eq!(body.clone().grown(1).max_tokens, Some(b * 2));
        assert_eq!(body.clone().grown(3).max_tokens, Some(b * 2), "doubled once, not for every cut-off");
        assert_eq!(body.grown(1).grown(1).max_tokens, Some(b * 2), "doubled once, however often asked");
    }

    #[test]
    fn a_roles_own_limit_wins_and_grows_after_a_cut_off() {
        let role = |extra: Value| -> crate::config::LlmConfig {
            let mut v = json!({"base_url": "http://127.0.0.1:1/v1", "model": "m"});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::from_value(v).unwrap()
        };
        let body = blueprint_step(Some(&path("content.body")), false, "");
        let b = body.max_tokens.unwrap();
        let capped = role(json!({"max_completion_tokens": 400}));
        assert_eq!(body.clone().for_role(&capped).max_tokens, Some(400));
        assert_eq!(body.clone().grown(1).for_role(&capped).max_tokens, Some(800), "the role's limit, doubled");
        let plain = role(json!({}));
        assert_eq!(body.clone().grown(1).for_role(&plain).max_tokens, Some(b * 2), "the step's, doubled once");
        let own = role(
            json!({"reply_schema": {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 150}}}}),
        );
        let first = body.clone().for_role(&own).max_tokens.unwrap();
        assert_eq!(body.grown(1).for_role(&own).max_tokens, Some(first * 2), "the role's schema's, doubled");
    }
}
