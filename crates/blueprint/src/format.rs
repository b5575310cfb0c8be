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
    /// A scope as board paths (bare fields and `step.output` resolved), or a template.
    pub slice: SliceOf,
    pub max_tokens: Option<u64>,
    /// Where the step's result goes: its `output`, or for a step without one its
    /// own place [`default_output`] (`content.results.{id}`).
    pub output: Option<BoardPath>,
    /// True when `output` is the default place, not written in the file.
    pub output_default: bool,
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
    /// Platforms a version is written for besides the task's own (`targets`).
    pub targets: Vec<crate::contract::Platform>,
    /// What loads but looks wrong (a worker step over the worker ceiling), each
    /// naming the file and the key: logged by the daemon, listed by `clawboard doctor`.
    pub warnings: Vec<String>,
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
    /// The file's name (without `.json`) when absent, as in seed 001's examples.
    #[serde(default)]
    blueprint_id: Option<String>,
    #[serde(rename = "type")]
    kind: Kind,
    #[serde(default)]
    description: String,
    steps: Vec<RawStep>,
    #[serde(default, rename = "loop")]
    repeat: Option<RawLoop>,
    /// Platforms a version is written for besides the task's (an input's
    /// `user_input.platforms` replaces them).
    #[serde(default)]
    targets: Vec<crate::contract::Platform>,
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
    /// Absent: the worker's skill counterpart ([`SKILL_OF`]); `null`: none.
    #[serde(default, deserialize_with = "present")]
    fallback: Option<Option<String>>,
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

/// A field that may be `null`: `Some(None)` when it is, `None` (by `default`) when absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
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

/// Where the result of a step without `output` goes: `content.results.{id}`
/// (the content zone's map of results, one key per step).
pub fn default_output(step_id: &str) -> BoardPath {
    BoardPath::new(Zone::Content, &["results", step_id])
}

/// The name a blueprint without `blueprint_id` takes: its file's, without `.json`.
fn file_stem(file: &str) -> String {
    Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned()
}

/// Seed 001's skill table (Skill 调用表): each component's slice budget, in
/// tokens, for a step that sets no `max_tokens` (a competing worker's is per
/// candidate; the platform adapter's per platform, four at most).
pub const COMPONENT_BUDGETS: &[(&str, u64)] = &[
    ("content-curator", 800),
    ("trend-tracker", 600),
    ("title-worker", 300),
    ("hook-generator", 1000),
    ("body-worker", 500),
    ("narrative-builder", 2000),
    ("virality-scorer", 500),
    ("sensitive-filter-middleware", 200),
    ("sensitive-filter", 200),
    ("platform-adapter", 600),
    ("cta-worker", 200),
];

/// Seed 001's fallback chain (降级策略: "Worker 失败 → 切换到 Skill 模式") with
/// its skill table's pairs: the skill a worker step falls back to when its
/// step names no `fallback` and the skill's role is configured.
pub const SKILL_OF: &[(&str, &str)] = &[("title-worker", "hook-generator"), ("body-worker", "narrative-builder")];

/// Seed 001's worker (轻工: "<500 tokens"): the budget a worker step gets when
/// its component is not in [`COMPONENT_BUDGETS`], and the most it should be given.
pub const WORKER_CEILING: u64 = 500;

/// How many platform versions one adapter step may write (xiaohongshu, wechat,
/// twitter, general): its ceiling is its table budget times this.
const PLATFORMS: u64 = 4;

/// The budget a step of `role` gets from the table when it sets none: the
/// component's, else the worker ceiling for a worker; a skill without an entry
/// has none (skills are the deep, long steps: ">3000 tokens").
pub fn component_budget(role: &str, component: Component) -> Option<u64> {
    COMPONENT_BUDGETS.iter().find(|(r, _)| *r == role).map(|(_, b)| *b).or(match component {
        Component::Worker => Some(WORKER_CEILING),
        Component::Skill => None,
    })
}

/// The most a worker step of `role` should be given: its table budget (times
/// the platforms for the adapter), or the worker ceiling, whichever is more.
fn worker_ceiling(role: &str) -> u64 {
    let table = COMPONENT_BUDGETS.iter().find(|(r, _)| *r == role).map_or(0, |(_, b)| *b);
    let table = if role == "platform-adapter" { table * PLATFORMS } else { table };
    table.max(WORKER_CEILING)
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
    let id = raw.blueprint_id.clone().unwrap_or_else(|| file_stem(file));
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        let field = if raw.blueprint_id.is_some() { "blueprint_id" } else { "(file)" };
        let why = if raw.blueprint_id.is_some() {
            format!("{id:?} is not [a-z0-9_]+")
        } else {
            format!("has no blueprint_id and its name {id:?} is not [a-z0-9_]+; add \"blueprint_id\"")
        };
        return Err(bad(None, field, why));
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
    let mut outputs = explicit_outputs(file, &raw.steps)?;
    // A step without `output` writes its result to a place of its own.
    let defaults: BTreeSet<&str> = raw.steps.iter().filter(|s| s.output.is_none()).map(|s| s.id.as_str()).collect();
    outputs.extend(defaults.iter().map(|id| ((*id).to_owned(), default_output(id))));
    for (i, (a, pa)) in outputs.iter().enumerate() {
        if let Some((b, pb)) = outputs[..i].iter().find(|(_, pb)| pa.is_within(pb) || pb.is_within(pa)) {
            // Which one's value the board would end with depends on timing.
            return Err(bad(
                Some(a),
                "output",
                if defaults.contains(a.as_str()) {
                    format!(
                        "(none: the step's result goes to its own place {pa}) overlaps step {b:?}'s output {pb}; each step writes a place of its own"
                    )
                } else {
                    format!("{pa} overlaps step {b:?}'s output {pb}; each step writes a place of its own")
                },
            ));
        }
    }

    let c = StepCheck { file, known, steps: &raw.steps, outputs: &outputs, defaults: &defaults, ids: &ids, adaptive };
    let mut steps = Vec::with_capacity(raw.steps.len());
    let mut warnings = Vec::new();
    // What each step's slice names, and the field it is named in.
    let mut reads: Vec<Reads> = Vec::with_capacity(raw.steps.len());
    for (i, s) in raw.steps.iter().enumerate() {
        let (step, read, warning) = check_step(&c, i, s)?;
        steps.push(step);
        reads.push(read);
        warnings.extend(warning);
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
        id,
        kind: raw.kind,
        description: raw.description,
        steps,
        repeat,
        file: file.into(),
        targets: raw.targets,
        warnings,
    })
}

/// The `output` each step names, as board paths: none into what the VM writes
/// itself or over the user's input.
fn explicit_outputs(file: &str, steps: &[RawStep]) -> Result<Vec<(String, BoardPath)>> {
    let bad = |step: Option<&str>, field: &str, reason: String| Error::invalid(file, step, field, reason);
    steps
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
        .collect()
}

/// What one step is checked against: the blueprint's other steps and their outputs.
struct StepCheck<'a> {
    file: &'a str,
    known: &'a Known<'a>,
    steps: &'a [RawStep],
    outputs: &'a [(String, BoardPath)],
    /// Steps without `output`, writing to their own place.
    defaults: &'a BTreeSet<&'a str>,
    ids: &'a BTreeSet<&'a str>,
    adaptive: bool,
}

/// What a step's slice reads, with the field that names it (`scope`, `template`).
type Reads = (&'static str, Vec<String>);

/// Checks step `i`, `s`: the step, what its slice reads, and a warning if it
/// loads but looks wrong.
fn check_step(c: &StepCheck<'_>, i: usize, s: &RawStep) -> Result<(Step, Reads, Option<String>)> {
    let bad = |step: Option<&str>, field: &str, reason: String| Error::invalid(c.file, step, field, reason);
    let at = Some(s.id.as_str());
    let (role, component) = match (&s.worker, &s.skill) {
        (Some(w), None) => (w.clone(), Component::Worker),
        (None, Some(k)) => (k.clone(), Component::Skill),
        (None, None) => return Err(bad(at, "worker", "the step needs `worker` or `skill` (a role id)".into())),
        (Some(_), Some(_)) => return Err(bad(at, "worker", "has both `worker` and `skill`; keep one".into())),
    };
    let field = if component == Component::Worker { "worker" } else { "skill" };
    if !(c.known.roles)(&role) {
        return Err(bad(at, field, format!("role {role:?} is not configured under [roles]")));
    }
    let fallback = match &s.fallback {
        Some(Some(f)) if !(c.known.roles)(f) => {
            return Err(bad(at, "fallback", format!("role {f:?} is not configured under [roles]")));
        }
        Some(Some(f)) if *f == role => {
            return Err(bad(at, "fallback", format!("{f:?} is the step's own role; name another, or null for none")));
        }
        Some(f) => f.clone(),
        None if component == Component::Worker => {
            SKILL_OF.iter().find(|(w, k)| *w == role && (c.known.roles)(k)).map(|(_, k)| (*k).to_owned())
        }
        None => None,
    };
    let (slice, field, scope_texts) = slice_of(c, i, s)?;
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
    let max_tokens = s.max_tokens.or_else(|| component_budget(&role, component));
    let mut warning = None;
    if let (Component::Worker, Some(n)) = (component, max_tokens)
        && n > worker_ceiling(&role)
    {
        warning = Some(format!(
            "{}: steps[{i}].max_tokens ({}): {n} tokens for worker {role:?}, over the worker ceiling of {} \
             (seed 001: a worker takes under {WORKER_CEILING}); make it a `skill` step or lower the budget",
            c.file,
            s.id,
            worker_ceiling(&role)
        ));
    }
    if let Some(n) = s.retry
        && n > MAX_RETRY
    {
        return Err(bad(at, "retry", format!("{n} retries; at most {MAX_RETRY}")));
    }
    let after = after_of(c, i, s)?;
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
        let own = c.outputs.iter().find(|(id, _)| *id == s.id).map(|(_, p)| p);
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
        Some(_) if !c.adaptive => {
            return Err(bad(at, "when", "conditions are for adaptive blueprints; this one is static_linear".into()));
        }
        Some(text) => {
            let cond = Condition::parse(text).map_err(|r| bad(at, "when", r))?;
            if let Some(reason) = unwritten_path(&cond.path, c.outputs) {
                return Err(bad(at, "when", format!("{}: {reason}", cond.path)));
            }
            Some(cond)
        }
        None => None,
    };
    let step = Step {
        id: s.id.clone(),
        role,
        component,
        slice,
        max_tokens,
        output: c.outputs.iter().find(|(id, _)| *id == s.id).map(|(_, p)| p.clone()),
        output_default: c.defaults.contains(s.id.as_str()),
        retry: s.retry,
        fallback,
        after,
        compete: s.compete,
        selector: s.selector.unwrap_or_default(),
        middleware: s.middleware.clone(),
        when,
    };
    Ok((step, (field, scope_texts), warning))
}

/// The slice step `i` declares (its scope resolved to board paths), the field
/// it is declared in, and the paths it reads, each written before the step runs.
fn slice_of(c: &StepCheck<'_>, i: usize, s: &RawStep) -> Result<(SliceOf, &'static str, Vec<String>)> {
    let bad = |field: &str, reason: String| Error::invalid(c.file, Some(&s.id), field, reason);
    let slice = match (&s.scope, &s.template) {
        (Some(_), Some(_)) => return Err(bad("scope", "has both `scope` and `template`; keep one".into())),
        (None, None) => return Err(bad("scope", "the step needs `scope` (board paths) or `template`".into())),
        (Some(RawScope::One(one)), None) => {
            SliceOf::Scope(vec![resolve(one, i, c.steps, c.outputs).map_err(|r| bad("scope", r))?])
        }
        (Some(RawScope::List(list)), None) => SliceOf::Scope(
            list.iter()
                .map(|t| resolve(t, i, c.steps, c.outputs))
                .collect::<std::result::Result<_, _>>()
                .map_err(|r| bad("scope", r))?,
        ),
        (None, Some(t)) => SliceOf::Template(t.clone()),
    };
    let scope_texts = match &slice {
        SliceOf::Scope(list) => {
            Scope::parse(list).map_err(|e| bad("scope", e.to_string()))?;
            list.clone()
        }
        SliceOf::Template(t) => match c.known.templates.get(t) {
            Some(tpl) => tpl.scope.texts(),
            None => {
                let names: Vec<&str> = c.known.templates.keys().map(String::as_str).collect();
                return Err(bad("template", format!("{t:?} is not a known template ({})", names.join(", "))));
            }
        },
    };
    let field = if matches!(slice, SliceOf::Template(_)) { "template" } else { "scope" };
    for text in &scope_texts {
        if let Some(reason) = unwritten(text, c.outputs) {
            return Err(bad(field, format!("{text:?}: {reason}")));
        }
    }
    Ok((slice, field, scope_texts))
}

/// Every step `s` waits for: its `depends_on`, and the step before it in the
/// file unless it is `parallel`.
fn after_of(c: &StepCheck<'_>, i: usize, s: &RawStep) -> Result<Vec<String>> {
    let bad = |field: &str, reason: String| Error::invalid(c.file, Some(&s.id), field, reason);
    let mut after: Vec<String> = Vec::new();
    for d in &s.depends_on {
        if !c.ids.contains(d.as_str()) {
            return Err(bad("depends_on", format!("{d:?} is not a step of this blueprint")));
        }
        if d == &s.id {
            return Err(bad("depends_on", "a step cannot depend on itself".into()));
        }
        if !after.contains(d) {
            after.push(d.clone());
        }
    }
    if !s.parallel
        && i > 0
        && let Some(prev) = c.steps.get(i - 1)
        && !after.contains(&prev.id)
    {
        after.push(prev.id.clone());
    }
    Ok(after)
}

/// A scope item as a board path. Besides `zone.key…`, `zone.*` and `all`, seed
/// 001 writes a bare field (`intent`: the one zone that has such a field) and an
/// earlier step's result (`hook.output`, `hook.output.title`: the step `hook`'s
/// output path). `at` is the index of the step whose scope it is.
fn resolve(
    text: &str,
    at: usize,
    steps: &[RawStep],
    outputs: &[(String, BoardPath)],
) -> std::result::Result<String, String> {
    let (first, rest) = text.split_once('.').map_or((text, None), |(a, b)| (a, Some(b)));
    if text == "all" || Zone::parse(first).is_some() {
        return Ok(text.to_owned());
    }
    let step_ref = rest.and_then(|r| r.strip_prefix("output")).filter(|r| r.is_empty() || r.starts_with('.'));
    if let Some(below) = step_ref {
        let earlier: Vec<&str> = steps[..at].iter().map(|s| s.id.as_str()).collect();
        if !earlier.contains(&first) {
            let why = if steps.iter().any(|s| s.id == first) {
                "does not come before this step"
            } else {
                "is not a step of this blueprint"
            };
            let list = if earlier.is_empty() { "none".to_owned() } else { earlier.join(", ") };
            return Err(format!(
                "{text:?}: step {first:?} {why}; a scope reads the output of an earlier step (steps before this one: {list})"
            ));
        }
        let path = outputs.iter().find(|(id, _)| id == first).map(|(_, p)| p.to_string()).unwrap_or_default();
        return Ok(format!("{path}{below}"));
    }
    let zones: Vec<Zone> = Zone::ALL
        .into_iter()
        .filter(|z| matches!(clawboard_core::formats::zone_spec(*z).child(first), Ok(Some(_))))
        .collect();
    match zones.as_slice() {
        [z] => Ok(format!("{}.{text}", z.name())),
        [] => Err(format!(
            "{text:?}: {first:?} is not a zone (meta, content, control), a field of one, or an earlier step's `STEP.output`"
        )),
        many => Err(format!(
            "{text:?}: {first:?} is a field of several zones ({}); write the zone",
            many.iter().map(|z| format!("{}.{first}", z.name())).collect::<Vec<_>>().join(", ")
        )),
    }
}

mod graph;
use graph::{check_loop, check_order, find_cycle, unwritten, unwritten_path};

#[cfg(test)]
mod tests;
