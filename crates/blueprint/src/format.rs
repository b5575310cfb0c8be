//! The blueprint file (seed 001): steps with a worker or a skill, a scope or a
//! template, an output path, retries, dependencies, fan-out, competing
//! candidates, middleware, and for adaptive blueprints conditions and a loop.
//! [`Blueprint::parse`] checks everything a run would otherwise trip over, with
//! errors naming the file, the step, the field and the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clawboard_board::{BoardPath, Scope, Template};
use clawboard_core::formats::Zone;
use serde::Deserialize;

use crate::condition::Condition;
use crate::error::{Error, Result};

/// `static_linear` or `adaptive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    StaticLinear,
    Adaptive,
}

/// What runs a step (the output contract's `component_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Worker,
    Skill,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::Worker => "worker",
            Component::Skill => "skill",
        }
    }
}

/// A step's slice: board paths, or a template by id.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceOf {
    Scope(Vec<String>),
    Template(String),
}

/// The checks a step's output goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Middleware {
    SensitiveFilter,
    QualityGate,
    PlatformCompliance,
}

/// How a competing step picks its winner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// The candidate whose output has the highest `score`; the first on a tie.
    #[default]
    MaxScore,
}

/// A count: a number, or `$max_retries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Fixed(u32),
    MaxRetries,
}

impl Count {
    pub fn resolve(self, max_retries: u32) -> u32 {
        match self {
            Count::Fixed(n) => n,
            Count::MaxRetries => max_retries,
        }
    }
}

/// One checked step.
#[derive(Debug, Clone)]
pub struct Step {
    pub id: String,
    pub role: String,
    pub component: Component,
    pub slice: SliceOf,
    pub max_tokens: Option<u64>,
    pub output: Option<BoardPath>,
    pub retry: Option<u32>,
    pub fallback: Option<String>,
    /// Every step that must finish first: `depends_on`, and the step before it
    /// in the file unless the step is `parallel`.
    pub after: Vec<String>,
    pub compete: Option<u32>,
    pub selector: Selector,
    pub middleware: Vec<Middleware>,
    pub when: Option<Condition>,
}

/// An adaptive blueprint's loop.
#[derive(Debug, Clone)]
pub struct Loop {
    /// In file order.
    pub steps: Vec<String>,
    pub condition: Condition,
    /// Extra rounds at most.
    pub max: Count,
}

/// A checked blueprint.
#[derive(Debug, Clone)]
pub struct Blueprint {
    pub id: String,
    pub kind: Kind,
    pub description: String,
    pub steps: Vec<Step>,
    pub repeat: Option<Loop>,
    /// Where it was read from (for errors at run time).
    pub file: String,
}

impl Blueprint {
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// True when `id` is one of the loop's steps.
    pub fn in_loop(&self, id: &str) -> bool {
        self.repeat.as_ref().is_some_and(|l| l.steps.iter().any(|s| s == id))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlueprint {
    blueprint_id: String,
    #[serde(rename = "type")]
    kind: Kind,
    #[serde(default)]
    description: String,
    steps: Vec<RawStep>,
    #[serde(default, rename = "loop")]
    repeat: Option<RawLoop>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    id: String,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    skill: Option<String>,
    #[serde(default)]
    scope: Option<RawScope>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    retry: Option<u32>,
    #[serde(default)]
    fallback: Option<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    parallel: bool,
    #[serde(default)]
    compete: Option<u32>,
    #[serde(default)]
    selector: Option<Selector>,
    #[serde(default)]
    middleware: Vec<Middleware>,
    #[serde(default)]
    when: Option<String>,
}

/// The seed writes `"scope": "all"` as well as a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawScope {
    One(String),
    List(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLoop {
    steps: Vec<String>,
    #[serde(rename = "while")]
    condition: String,
    max: RawCount,
}

/// `loop.max`: a number, or `$max_retries` (any other JSON is refused by
/// [`check_loop`], naming what it got).
type RawCount = serde_json::Value;

/// What a blueprint is checked against: the roles and templates there are.
pub struct Known<'a> {
    pub roles: &'a dyn Fn(&str) -> bool,
    pub templates: &'a BTreeMap<String, Template>,
}

/// Meta keys the VM writes from the input contract before the first step.
pub const INPUT_META: &[&str] =
    &["topic", "intent", "style", "style_note", "platform", "constraints", "reference_summary"];

/// Control keys the VM itself writes.
pub const VM_CONTROL: &[&str] =
    &["step_status", "errors", "retries", "iteration_count", "current_stage", "sensitive_filter", "quality_gate"];

/// Meta keys that are the user's input as given, which no step writes over (a
/// step may refine the others, e.g. `reference_summary`).
pub const USER_META: &[&str] = &["topic", "intent", "style", "platform", "constraints"];

/// Most steps a blueprint may have.
pub const MAX_STEPS: usize = 64;
/// Most candidates of a competing step.
pub const MAX_COMPETE: u32 = 8;
/// The largest `max_tokens` of a step.
pub const MAX_TOKENS: u64 = 10_000_000;
/// Most retries of a step (as `execution_config.max_retries`).
pub const MAX_RETRY: u32 = 10;
/// The largest blueprint file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl Blueprint {
    /// Parses and checks `text`, read from `file`.
    pub fn parse(file: &str, text: &str, known: &Known<'_>) -> Result<Blueprint> {
        check_shape(file, text)?;
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawBlueprint = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
            let field = e.path().to_string();
            Error::invalid(
                file,
                None,
                if field == "." { "(top level)".to_owned() } else { field },
                e.inner().to_string(),
            )
        })?;
        de.end().map_err(|e| Error::invalid(file, None, "(top level)", format!("{e} after the blueprint's object")))?;
        check(file, raw, known)
    }

    /// Reads and checks `path`; its name must be `{blueprint_id}.json`.
    pub fn load(path: &Path, known: &Known<'_>) -> Result<Blueprint> {
        use std::io::Read;

        let file = path.display().to_string();
        let io = |source| Error::Io { path: file.clone(), source };
        let mut text = String::new();
        std::fs::File::open(path).map_err(io)?.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(Error::invalid(
                &file,
                None,
                "(file)",
                format!("is over {MAX_FILE_BYTES} bytes; a blueprint is a list of steps"),
            ));
        }
        let bp = Blueprint::parse(&file, &text, known)?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if stem != bp.id {
            return Err(Error::invalid(
                &file,
                None,
                "blueprint_id",
                format!("{:?} differs from the file's name; name the file {}.json", bp.id, bp.id),
            ));
        }
        Ok(bp)
    }
}

/// A JSON pointer as the blueprint's errors name fields: `/steps/0/when` → `steps[0].when`.
fn pointer_to_field(pointer: &str) -> String {
    let mut field = String::new();
    for part in pointer.split('/').skip(1) {
        if part.bytes().all(|b| b.is_ascii_digit()) && !part.is_empty() {
            field.push_str(&format!("[{part}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(&part.replace("~1", "/").replace("~0", "~"));
        }
    }
    field
}

/// A blueprint, each of its steps and its loop are JSON objects: serde would take
/// a struct from an array too (`["id", "static_linear", ...]`), which no one
/// means to write. Syntax errors are left to the parse that follows, which
/// names the field.
fn check_shape(file: &str, text: &str) -> Result<()> {
    use clawboard_core::json::JsonError;
    let (pointer, why) = match clawboard_core::json::parse_value(text.as_bytes()) {
        Ok(v) => return check_objects(file, &v),
        Err(JsonError::Syntax(_)) => return Ok(()),
        Err(JsonError::DuplicateKey { pointer, key, line, column }) => (
            pointer,
            format!("names {key:?} twice (line {line}, column {column}); JSON readers disagree on which counts"),
        ),
        Err(JsonError::BigInteger { pointer, literal, line, column }) => {
            (pointer, format!("the integer {literal} (line {line}, column {column}) does not fit in 64 bits"))
        }
    };
    let field = if pointer.is_empty() { "(top level)".to_owned() } else { pointer_to_field(&pointer) };
    Err(Error::invalid(file, None, field, why))
}

/// [`check_shape`] of a value that parsed.
fn check_objects(file: &str, v: &serde_json::Value) -> Result<()> {
    let kind = |v: &serde_json::Value| match v {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "an object",
    };
    let bad = |field: String, v: &serde_json::Value| {
        Error::invalid(file, None, field, format!("is {}; it must be a JSON object {{...}}", kind(v)))
    };
    if !v.is_object() {
        return Err(bad("(top level)".into(), v));
    }
    if let Some(steps) = v.get("steps").and_then(serde_json::Value::as_array) {
        for (i, s) in steps.iter().enumerate() {
            if !s.is_object() {
                return Err(bad(format!("steps[{i}]"), s));
            }
        }
    }
    match v.get("loop") {
        Some(l) if !l.is_object() && !l.is_null() => Err(bad("loop".into(), l)),
        _ => Ok(()),
    }
}

fn check(file: &str, raw: RawBlueprint, known: &Known<'_>) -> Result<Blueprint> {
    let bad = |step: Option<&str>, field: &str, reason: String| Error::invalid(file, step, field, reason);
    if raw.blueprint_id.is_empty()
        || !raw.blueprint_id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(bad(None, "blueprint_id", format!("{:?} is not [a-z0-9_]+", raw.blueprint_id)));
    }
    if raw.steps.is_empty() {
        return Err(bad(None, "steps", "is empty; a blueprint needs at least one step".into()));
    }
    if raw.steps.len() > MAX_STEPS {
        return Err(bad(None, "steps", format!("has {} steps; at most {MAX_STEPS}", raw.steps.len())));
    }
    let adaptive = raw.kind == Kind::Adaptive;
    let mut ids = BTreeSet::new();
    for (i, s) in raw.steps.iter().enumerate() {
        clawboard_board::path::check_key(&s.id)
            .map_err(|r| bad(Some(&s.id), &format!("steps[{i}].id"), format!("{:?} is not a step id: {r}", s.id)))?;
        if !ids.insert(s.id.as_str()) {
            return Err(bad(Some(&s.id), &format!("steps[{i}].id"), "is a duplicate step id".into()));
        }
    }
    let outputs: Vec<(String, BoardPath)> = raw
        .steps
        .iter()
        .filter_map(|s| s.output.as_ref().map(|o| (s.id.clone(), o)))
        .map(|(id, o)| {
            let p = BoardPath::parse(o)
                .map_err(|e| bad(Some(&id), "output", format!("{o:?} is not a board path: {}", e.reason)))?;
            if p.keys.is_empty() {
                return Err(bad(Some(&id), "output", format!("{o:?} names a whole zone; name a key in it")));
            }
            let first = p.keys[0].as_str();
            if p.zone == Zone::Control && VM_CONTROL.contains(&first) {
                return Err(bad(
                    Some(&id),
                    "output",
                    format!("{o:?}: control.{first} is written by the blueprint VM itself; pick another key"),
                ));
            }
            if p.zone == Zone::Meta && USER_META.contains(&first) {
                return Err(bad(
                    Some(&id),
                    "output",
                    format!("{o:?}: meta.{first} is the user's input, which no step writes over; pick another key"),
                ));
            }
            Ok((id, p))
        })
        .collect::<Result<_>>()?;
    for (i, (a, pa)) in outputs.iter().enumerate() {
        if let Some((b, pb)) = outputs[..i].iter().find(|(_, pb)| pa.is_within(pb) || pb.is_within(pa)) {
            // Which one's value the board would end with depends on timing.
            return Err(bad(
                Some(a),
                "output",
                format!("{pa} overlaps step {b:?}'s output {pb}; each step writes a place of its own"),
            ));
        }
    }

    let mut steps = Vec::with_capacity(raw.steps.len());
    // What each step's slice names, and the field it is named in.
    let mut reads: Vec<(&'static str, Vec<String>)> = Vec::with_capacity(raw.steps.len());
    for (i, s) in raw.steps.iter().enumerate() {
        let at = Some(s.id.as_str());
        let (role, component) = match (&s.worker, &s.skill) {
            (Some(w), None) => (w.clone(), Component::Worker),
            (None, Some(k)) => (k.clone(), Component::Skill),
            (None, None) => return Err(bad(at, "worker", "the step needs `worker` or `skill` (a role id)".into())),
            (Some(_), Some(_)) => return Err(bad(at, "worker", "has both `worker` and `skill`; keep one".into())),
        };
        let field = if component == Component::Worker { "worker" } else { "skill" };
        if !(known.roles)(&role) {
            return Err(bad(at, field, format!("role {role:?} is not configured under [roles]")));
        }
        if let Some(f) = &s.fallback
            && !(known.roles)(f)
        {
            return Err(bad(at, "fallback", format!("role {f:?} is not configured under [roles]")));
        }
        let slice = match (&s.scope, &s.template) {
            (Some(_), Some(_)) => return Err(bad(at, "scope", "has both `scope` and `template`; keep one".into())),
            (None, None) => return Err(bad(at, "scope", "the step needs `scope` (board paths) or `template`".into())),
            (Some(RawScope::One(one)), None) => SliceOf::Scope(vec![one.clone()]),
            (Some(RawScope::List(list)), None) => SliceOf::Scope(list.clone()),
            (None, Some(t)) => SliceOf::Template(t.clone()),
        };
        let scope_texts = match &slice {
            SliceOf::Scope(list) => {
                Scope::parse(list).map_err(|e| bad(at, "scope", e.to_string()))?;
                list.clone()
            }
            SliceOf::Template(t) => match known.templates.get(t) {
                Some(tpl) => tpl.scope.texts(),
                None => {
                    let names: Vec<&str> = known.templates.keys().map(String::as_str).collect();
                    return Err(bad(at, "template", format!("{t:?} is not a known template ({})", names.join(", "))));
                }
            },
        };
        let field = if matches!(slice, SliceOf::Template(_)) { "template" } else { "scope" };
        for text in &scope_texts {
            if let Some(reason) = unwritten(text, &outputs) {
                return Err(bad(at, field, format!("{text:?}: {reason}")));
            }
        }
        reads.push((field, scope_texts));
        match s.max_tokens {
            Some(0) => return Err(bad(at, "max_tokens", "must be at least 1".into())),
            Some(n) if n > MAX_TOKENS => {
                return Err(bad(
                    at,
                    "max_tokens",
                    format!("{n} is over {MAX_TOKENS}, more than any model's context; a budget that large is none"),
                ));
            }
            _ => {}
        }
        if let Some(n) = s.retry
            && n > MAX_RETRY
        {
            return Err(bad(at, "retry", format!("{n} retries; at most {MAX_RETRY}")));
        }
        let mut after: Vec<String> = Vec::new();
        for d in &s.depends_on {
            if !ids.contains(d.as_str()) {
                return Err(bad(at, "depends_on", format!("{d:?} is not a step of this blueprint")));
            }
            if d == &s.id {
                return Err(bad(at, "depends_on", "a step cannot depend on itself".into()));
            }
            if !after.contains(d) {
                after.push(d.clone());
            }
        }
        if !s.parallel
            && i > 0
            && let Some(prev) = raw.steps.get(i - 1)
            && !after.contains(&prev.id)
        {
            after.push(prev.id.clone());
        }
        match s.compete {
            Some(n) if !(2..=MAX_COMPETE).contains(&n) => {
                return Err(bad(at, "compete", format!("{n} candidates; a competing step has 2 to {MAX_COMPETE}")));
            }
            Some(_) if s.output.is_none() => {
                return Err(bad(at, "compete", "a competing step needs an `output` to write the winner to".into()));
            }
            None if s.selector.is_some() => {
                return Err(bad(at, "selector", "only a competing step (`compete`: N) has a selector".into()));
            }
            _ => {}
        }
        if s.middleware.contains(&Middleware::QualityGate) {
            // The gate judges the score this step has just written.
            let score = BoardPath::new(Zone::Control, &["quality_scores", "virality"]);
            let own = outputs.iter().find(|(id, _)| *id == s.id).map(|(_, p)| p);
            if !own.is_some_and(|o| score.is_within(o) || o.is_within(&score)) {
                let writes = own.map_or_else(|| "it has no output".to_owned(), |o| format!("it writes {o}"));
                return Err(bad(
                    at,
                    "middleware",
                    format!(
                        "quality_gate judges {score}, which this step does not write ({writes}); put it on the scoring step"
                    ),
                ));
            }
        }
        let when = match &s.when {
            Some(_) if !adaptive => {
                return Err(bad(
                    at,
                    "when",
                    "conditions are for adaptive blueprints; this one is static_linear".into(),
                ));
            }
            Some(c) => {
                let c = Condition::parse(c).map_err(|r| bad(at, "when", r))?;
                if let Some(reason) = unwritten_path(&c.path, &outputs) {
                    return Err(bad(at, "when", format!("{}: {reason}", c.path)));
                }
                Some(c)
            }
            None => None,
        };
        steps.push(Step {
            id: s.id.clone(),
            role,
            component,
            slice,
            max_tokens: s.max_tokens,
            output: outputs.iter().find(|(id, _)| *id == s.id).map(|(_, p)| p.clone()),
            retry: s.retry,
            fallback: s.fallback.clone(),
            after,
            compete: s.compete,
            selector: s.selector.unwrap_or_default(),
            middleware: s.middleware.clone(),
            when,
        });
    }
    if let Some(cycle) = find_cycle(&steps) {
        // An edge no `depends_on` wrote: a step after the one before it in the file.
        let implicit = cycle
            .windows(2)
            .any(|w| raw.steps.iter().find(|s| s.id == w[0]).is_some_and(|s| !s.depends_on.contains(&w[1])));
        let hint = if implicit {
            " (a step without `parallel: true` also waits for the one before it in the file)"
        } else {
            ""
        };
        return Err(bad(Some(&cycle[0]), "depends_on", format!("forms a cycle: {}{hint}", cycle.join(" -> "))));
    }
    let repeat = match raw.repeat {
        None => None,
        Some(_) if !adaptive => {
            return Err(bad(None, "loop", "a loop is for adaptive blueprints; this one is static_linear".into()));
        }
        Some(l) => Some(check_loop(file, l, &steps, &outputs)?),
    };
    check_order(file, &steps, &reads, repeat.as_ref(), &outputs)?;
    Ok(Blueprint {
        id: raw.blueprint_id,
        kind: raw.kind,
        description: raw.description,
        steps,
        repeat,
        file: file.into(),
    })
}

mod graph;
use graph::{check_loop, check_order, find_cycle, unwritten, unwritten_path};

#[cfg(test)]
mod tests;
