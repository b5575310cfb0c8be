//! The input contract (seed 001, strict): what a blueprint task's `task.json`
//! carries beside the task's own fields, and what the VM writes into
//! `meta_zone` from it before the first step.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};

use clawboard_core::formats::{Ty, Zone, zone_spec};
use clawboard_core::kind::pointer_of;

use crate::{Error, Result};

/// Characters (Unicode scalar values) a topic may have at most.
pub const TOPIC_MAX_CHARS: usize = 2000;
/// The largest `execution_config.max_retries`.
pub const MAX_RETRIES_LIMIT: u32 = 10;
/// The top-level keys of a task that make it a blueprint task.
pub const INPUT_KEYS: [&str; 3] = ["blueprint_id", "user_input", "execution_config"];

/// A blueprint task's input: which blueprint, what to write, how to run it.
///
/// Other top-level keys of the task (`type`, `description` …) are the task's own
/// and are not read here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "BlueprintInput")]
pub struct Input {
    /// The blueprint to run: `config/blueprints/{blueprint_id}.json` or one from `[blueprints] dir`.
    #[schemars(regex(pattern = r"^[a-z0-9_]+$"))]
    pub blueprint_id: String,
    /// What to write.
    pub user_input: UserInput,
    /// How to run it; every field has a default.
    #[serde(default)]
    pub execution_config: ExecutionConfig,
}

/// `user_input`: the writing request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    /// The topic to write about (写作主题), 1 to 2000 characters.
    #[schemars(length(min = 1, max = 2000))]
    pub topic: String,
    /// The target platform (目标平台); the first of `platforms`, else `general`, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// More target platforms (our addition): a version is written for each, each
    /// held to its own platform's rules (seed 001: the platform adapter ×N).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<Platform>,
    /// What the user wants (用户意图); the topic when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// Style preference (风格偏好): one of the board's styles, or free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<String>,
    /// Length, tone and words the text must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Constraints>,
    /// Material to draw on; joined into `meta.reference_summary`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_materials: Vec<String>,
}

/// `user_input.constraints`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// Bounds on the length of the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word_count: Option<WordCount>,
    /// The tone, in the user's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tone: Option<String>,
    /// Words the text must contain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must_include: Vec<String>,
}

/// `user_input.constraints.word_count`: `min` ≤ `max` when both are given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WordCount {
    /// The fewest words (characters, for Chinese text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    /// The most words (characters, for Chinese text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

/// `execution_config`, with the seed's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionConfig {
    /// Retries of a failed step, and extra rounds of a blueprint's loop (at most 10).
    #[serde(default = "default_max_retries")]
    #[schemars(range(max = 10))]
    pub max_retries: u32,
    /// The score (0–100) the quality gate asks for.
    #[serde(default = "default_quality_threshold")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub quality_threshold: f64,
    /// Run the sensitive filter, quality gate and platform compliance.
    #[serde(default = "yes")]
    pub enable_middleware: bool,
    /// Run steps whose dependencies are met at the same time.
    #[serde(default = "yes")]
    pub parallel_execution: bool,
}

fn default_max_retries() -> u32 {
    3
}

fn default_quality_threshold() -> f64 {
    75.0
}

fn yes() -> bool {
    true
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        ExecutionConfig {
            max_retries: default_max_retries(),
            quality_threshold: default_quality_threshold(),
            enable_middleware: true,
            parallel_execution: true,
        }
    }
}

/// The four platforms of seed 001.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Xiaohongshu,
    Wechat,
    Twitter,
    #[default]
    General,
}

impl Platform {
    /// Every platform, in the seed's order.
    pub const ALL: [Platform; 4] = [Platform::Xiaohongshu, Platform::Wechat, Platform::Twitter, Platform::General];

    /// The name in JSON and config keys: `xiaohongshu`, `wechat`, `twitter`, `general`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Xiaohongshu => "xiaohongshu",
            Platform::Wechat => "wechat",
            Platform::Twitter => "twitter",
            Platform::General => "general",
        }
    }

    /// The platform of that name, if any.
    pub fn parse(s: &str) -> Option<Platform> {
        Platform::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// `xiaohongshu, wechat, twitter, general`, for messages.
    pub fn names() -> String {
        Platform::ALL.map(Platform::as_str).join(", ")
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Platform::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not one of {}", Platform::names())))
    }
}

/// The styles `meta.style` accepts (the board's table, seed 000).
pub fn board_styles() -> &'static [&'static str] {
    match zone_spec(Zone::Meta).child("style") {
        Ok(Some(Ty::Enum(styles))) => styles,
        _ => &[],
    }
}

/// True when `a` is `b` with at most two letters changed, added or removed (or
/// differs only in case, `-` for `_`): a typo of it.
fn near(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let (a, b): (Vec<char>, Vec<char>) = (norm(a).chars().collect(), norm(b).chars().collect());
    if a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    // Levenshtein distance, one row at a time.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + usize::from(ca != cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

impl UserInput {
    /// Every text of the request, with its JSON pointer.
    fn texts(&self) -> Vec<(String, &str)> {
        let mut out = vec![("/user_input/topic".to_owned(), self.topic.as_str())];
        out.extend(self.intent.as_deref().map(|t| ("/user_input/intent".to_owned(), t)));
        out.extend(self.style.as_deref().map(|t| ("/user_input/style".to_owned(), t)));
        if let Some(c) = &self.constraints {
            out.extend(c.tone.as_deref().map(|t| ("/user_input/constraints/tone".to_owned(), t)));
            for (i, w) in c.must_include.iter().enumerate() {
                out.push((format!("/user_input/constraints/must_include/{i}"), w.as_str()));
            }
        }
        for (i, m) in self.reference_materials.iter().enumerate() {
            out.push((format!("/user_input/reference_materials/{i}"), m.as_str()));
        }
        out
    }
}

impl Input {
    /// The input a task's unknown top-level fields (`extra`) carry: `None` when
    /// there is neither `blueprint_id` nor `user_input` (not a blueprint task),
    /// else the checked input. `execution_config` alone is refused too: it means
    /// nothing without the other two.
    ///
    /// `known` lists the blueprint ids that exist; errors name the field as a
    /// JSON pointer (`/user_input/topic: is required`).
    pub fn from_task_extra<S: AsRef<str>>(
        file: &str,
        extra: &Map<String, Value>,
        known: &[S],
    ) -> Result<Option<Input>> {
        // A misspelt input key would leave the task a plain one, or its config the
        // defaults, without a word; other keys are the task's own.
        for key in extra.keys() {
            if INPUT_KEYS.contains(&key.as_str()) {
                continue;
            }
            if let Some(meant) = INPUT_KEYS.iter().find(|k| near(key, k)) {
                return Err(Error::invalid(
                    file,
                    None,
                    format!("/{key}"),
                    format!("is not a field of a task; did you mean {meant}?"),
                ));
            }
        }
        if !extra.contains_key("blueprint_id") && !extra.contains_key("user_input") {
            if extra.contains_key("execution_config") {
                return Err(Error::invalid(
                    file,
                    None,
                    "/blueprint_id",
                    "is required (the task has execution_config; a blueprint task needs blueprint_id and user_input)",
                ));
            }
            return Ok(None);
        }
        let present: Map<String, Value> =
            INPUT_KEYS.iter().filter_map(|k| extra.get(*k).map(|v| ((*k).to_owned(), v.clone()))).collect();
        Input::from_value(file, &Value::Object(present), known).map(Some)
    }

    /// Parses and checks an input given as one JSON object (other top-level keys
    /// are ignored).
    pub fn from_value<S: AsRef<str>>(file: &str, value: &Value, known: &[S]) -> Result<Input> {
        if let Some(obj) = value.as_object() {
            match (obj.get("blueprint_id"), obj.contains_key("user_input")) {
                (Some(id), false) => {
                    let id = id.as_str().map_or_else(|| id.to_string(), |s| format!("{s:?}"));
                    return Err(Error::invalid(
                        file,
                        None,
                        "/user_input",
                        format!("is required (blueprint_id is {id})"),
                    ));
                }
                (None, true) => {
                    return Err(Error::invalid(file, None, "/blueprint_id", "is required (the task has user_input)"));
                }
                _ => {}
            }
        }
        let input: Input = serde_path_to_error::deserialize(value).map_err(|e| type_error(file, &e))?;
        input.check(file, known)?;
        Ok(input)
    }

    /// Checks what the types cannot say: the blueprint exists, the topic is not
    /// empty nor too long, `word_count.min` ≤ `max`, the config's ranges.
    pub fn check<S: AsRef<str>>(&self, file: &str, known: &[S]) -> Result<()> {
        let bad = |field: &str, reason: String| Err(Error::invalid(file, None, field, reason));
        if !known.iter().any(|k| k.as_ref() == self.blueprint_id) {
            let list: Vec<&str> = known.iter().map(AsRef::as_ref).collect();
            return bad(
                "/blueprint_id",
                format!("unknown blueprint {:?} (known: {})", self.blueprint_id, list.join(", ")),
            );
        }
        let topic = &self.user_input.topic;
        if topic.trim().is_empty() {
            return bad("/user_input/topic", "must not be empty".into());
        }
        for (field, text) in self.user_input.texts() {
            // What the board refuses in any value (docs/BOARD.md): said here, before
            // anything is written, rather than by the step that would write it.
            if let Some(c) = text.chars().find(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
                return bad(&field, format!("holds the control character U+{:04X}", u32::from(c)));
            }
        }
        let chars = topic.chars().count();
        if chars > TOPIC_MAX_CHARS {
            return bad(
                "/user_input/topic",
                format!("is {chars} characters long; at most {TOPIC_MAX_CHARS} are allowed"),
            );
        }
        if let Some(WordCount { min: Some(min), max: Some(max) }) =
            self.user_input.constraints.as_ref().and_then(|c| c.word_count)
            && min > max
        {
            return bad("/user_input/constraints/word_count", format!("min {min} is more than max {max}"));
        }
        let platforms = &self.user_input.platforms;
        if let Some(i) = (1..platforms.len()).find(|&i| platforms[..i].contains(&platforms[i])) {
            return bad(&format!("/user_input/platforms/{i}"), format!("names {} twice", platforms[i].as_str()));
        }
        let cfg = &self.execution_config;
        if cfg.max_retries > MAX_RETRIES_LIMIT {
            return bad(
                "/execution_config/max_retries",
                format!("is {}; at most {MAX_RETRIES_LIMIT}", cfg.max_retries),
            );
        }
        if !(0.0..=100.0).contains(&cfg.quality_threshold) {
            return bad(
                "/execution_config/quality_threshold",
                format!("is {}; it must be 0 to 100", cfg.quality_threshold),
            );
        }
        Ok(())
    }

    /// The platform, `general` when absent.
    pub fn platform(&self) -> Platform {
        self.user_input.platform.or(self.user_input.platforms.first().copied()).unwrap_or_default()
    }

    /// The platforms a version is written for: the task's platform first, then
    /// the rest of `platforms` (or, when the input names none, of the
    /// blueprint's own `targets`), each once.
    pub fn targets(&self, blueprint_targets: &[Platform]) -> Vec<Platform> {
        let more = if self.user_input.platforms.is_empty() { blueprint_targets } else { &self.user_input.platforms };
        let mut out = vec![self.platform()];
        for p in more {
            if !out.contains(p) {
                out.push(*p);
            }
        }
        out
    }

    /// The `meta_zone` writes the VM makes before the first step, in order, as
    /// (board path, value): `meta.topic`, `meta.intent` (the topic when absent),
    /// `meta.style` (a board style) or `meta.style_note` (any other text),
    /// `meta.platform`, `meta.constraints` (only the fields given, only when
    /// any is), `meta.reference_summary` (only when there are materials).
    pub fn meta_writes(&self) -> Vec<(String, Value)> {
        let u = &self.user_input;
        let mut out = vec![
            ("meta.topic".to_owned(), json!(u.topic)),
            ("meta.intent".to_owned(), json!(u.intent.as_deref().unwrap_or(&u.topic))),
        ];
        if let Some(style) = &u.style {
            let wanted = style.trim().to_lowercase();
            match board_styles().iter().find(|s| **s == wanted) {
                Some(known) => out.push(("meta.style".to_owned(), json!(known))),
                None => out.push(("meta.style_note".to_owned(), json!(style))),
            }
        }
        out.push(("meta.platform".to_owned(), json!(self.platform().as_str())));
        if let Some(c) = u.constraints.as_ref().map(constraints_value).filter(|m| !m.is_empty()) {
            out.push(("meta.constraints".to_owned(), Value::Object(c)));
        }
        if !u.reference_materials.is_empty() {
            out.push(("meta.reference_summary".to_owned(), json!(u.reference_materials.join("\n"))));
        }
        out
    }
}

/// The constraints as the board holds them: only the fields given.
fn constraints_value(c: &Constraints) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(wc) = c.word_count {
        let mut w = Map::new();
        if let Some(min) = wc.min {
            w.insert("min".into(), json!(min));
        }
        if let Some(max) = wc.max {
            w.insert("max".into(), json!(max));
        }
        if !w.is_empty() {
            m.insert("word_count".into(), Value::Object(w));
        }
    }
    if let Some(tone) = &c.tone {
        m.insert("tone".into(), json!(tone));
    }
    if !c.must_include.is_empty() {
        m.insert("must_include".into(), json!(c.must_include));
    }
    m
}

/// A serde error as `Error::Invalid` with the field's JSON pointer: a missing
/// field is `/user_input/topic: is required`, an unknown one names the fields
/// that are allowed.
fn type_error(file: &str, e: &serde_path_to_error::Error<serde_json::Error>) -> Error {
    let mut pointer = pointer_of(e.path());
    let message = e.inner().to_string();
    let reason = if let Some(field) = between(&message, "missing field `", "`") {
        pointer.push('/');
        pointer.push_str(field);
        "is required".to_owned()
    } else if let Some(rest) = message.strip_prefix("unknown field `") {
        match rest.split_once("`, expected ") {
            Some((_, expected)) => format!("is not a known field; expected {}", expected.replace('`', "")),
            None => "is not a known field".to_owned(),
        }
    } else {
        message.replace('`', "")
    };
    Error::invalid(file, None, pointer, reason)
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    s.strip_prefix(start)?.split(end).next()
}

#[cfg(test)]
mod tests;
