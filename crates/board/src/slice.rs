//! Slices (seed 003): the part of the board a step is handed, built from its scope
//! or template, counted in tokens, and brought within its budget by the seed's
//! compression ladder, in order, stopping at the first rung that fits:
//!
//! 1. `truncate`: every text longer than `truncate_tokens` is cut there (at a token
//!    boundary, on a character boundary) and ends in `...`;
//! 2. `drop_variants`: a `variants` list gives way to the selected variant (or the
//!    highest-scored one): `variants` beside a `selected` is dropped, a lone
//!    `variants` becomes `selected`, and `X_variants` becomes `X`;
//! 3. `summaries`: a value whose board path has a sibling `{key}_summary` string
//!    (`content.body.content_summary` for `content.body.content`) is replaced by it;
//! 4. `drop_optional`: keys the template does not list as `required` are dropped,
//!    largest first.
//!
//! A slice that still does not fit fails its step ([`Error::OverBudget`]): it is
//! never handed over over budget. A slice is a pure function of the board, the
//! scope or template, the budget and the tokenizer.

use clawboard_core::formats::BoardFile;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ops::get;
use crate::path::BoardPath;
use crate::scope::Scope;
use crate::template::Template;
use crate::tokens;

/// One rung of the ladder: changes the slice, true when it changed something.
type Rung<'a> = dyn Fn(&mut Map<String, Value>) -> bool + 'a;

/// Texts longer than this many tokens are cut by the first rung, by default.
pub const DEFAULT_TRUNCATE_TOKENS: u64 = 100;

/// Where a step's slice comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    Scope(&'a Scope),
    Template(&'a Template),
}

/// A step's declared scope or template, owned (for callers that resolve it from config).
#[derive(Debug, Clone)]
pub enum Selector {
    Scope(Scope),
    Template(Template),
}

impl Selector {
    /// The selector a role's `scope` or `template` names (`None`: neither). `at`
    /// names the config key in errors (`roles.title-worker`).
    pub fn of(
        scope: Option<&[String]>,
        template: Option<&str>,
        templates: &std::collections::BTreeMap<String, Template>,
        at: &str,
    ) -> Result<Option<Selector>> {
        let bad = |field: &str, reason: String| Error::Template {
            file: "config".into(),
            template: template.unwrap_or("-").to_owned(),
            field: format!("{at}.{field}"),
            reason,
        };
        match (scope, template) {
            (Some(_), Some(_)) => Err(bad("scope", "has both `scope` and `template`; keep one".into())),
            (Some(items), None) => Ok(Some(Selector::Scope(Scope::parse(items)?))),
            (None, Some(t)) => match templates.get(t) {
                Some(tpl) => Ok(Some(Selector::Template(tpl.clone()))),
                None => {
                    let known: Vec<&str> = templates.keys().map(String::as_str).collect();
                    Err(bad("template", format!("{t:?} is not a known template ({})", known.join(", "))))
                }
            },
            (None, None) => Ok(None),
        }
    }

    pub fn source(&self) -> Source<'_> {
        match self {
            Selector::Scope(s) => Source::Scope(s),
            Selector::Template(t) => Source::Template(t),
        }
    }

    /// The scope items as written and the template id, for records.
    pub fn describe(&self) -> (Vec<String>, Option<String>) {
        match self {
            Selector::Scope(s) => (s.texts(), None),
            Selector::Template(t) => (t.scope.texts(), Some(t.id.clone())),
        }
    }
}

/// What to slice for a step.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    pub step: String,
    pub source: Source<'a>,
    /// The budget; `None`: unlimited.
    pub max_tokens: Option<u64>,
    pub truncate_tokens: u64,
}

/// A slice, ready to hand over, and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slice {
    pub data: Value,
    /// o200k tokens of `data` as compact JSON (what is sent).
    pub tokens: u64,
    pub budget: Option<u64>,
    /// The compression rungs that changed something, in order.
    pub rungs: Vec<String>,
    /// Scope items (or template keys) whose value was absent.
    pub missing: Vec<String>,
    /// BLAKE3 of `data` as compact JSON, first 16 hex digits.
    pub hash: String,
}

/// Tokens of a value as compact JSON.
pub fn count_value(v: &Value) -> u64 {
    tokens::count(&serde_json::to_string(v).unwrap_or_default())
}

fn hash_of(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    blake3::hash(text.as_bytes()).to_hex()[..16].to_owned()
}

/// Builds the slice for `spec` from `board` (seed 003's `build_slice` and
/// `check_token_budget`).
pub fn build(board: &BoardFile, spec: &Spec<'_>) -> Result<Slice> {
    let (mut data, sources, missing, required) = match spec.source {
        Source::Scope(scope) => {
            let raw = scope.build(board)?;
            (raw.data, raw.sources, raw.missing, None)
        }
        Source::Template(t) => {
            let r = t.render(board);
            (r.data, r.sources, r.missing, t.required.clone())
        }
    };
    let mut rungs = Vec::new();
    // Within a budget, counting stops past it: a 1 MB slice over a 300-token budget
    // is found over in the time 300 tokens take.
    let measure = |d: &Map<String, Value>| {
        let text = serde_json::to_string(d).unwrap_or_default();
        match spec.max_tokens {
            Some(b) => tokens::count_till_limit(&text, b).unwrap_or(b.saturating_add(1)),
            None => tokens::count(&text),
        }
    };
    let mut size = measure(&data);
    if let Some(budget) = spec.max_tokens {
        let ladder: [(&str, &Rung); 3] = [
            ("truncate", &|d| truncate_texts(d, spec.truncate_tokens)),
            ("drop_variants", &|d| drop_variants(d)),
            ("summaries", &|d| use_summaries(d, &sources, board)),
        ];
        for (name, rung) in ladder {
            if size <= budget {
                break;
            }
            if rung(&mut data) {
                rungs.push(name.to_owned());
                size = measure(&data);
            }
        }
        if size > budget
            && let Some(required) = &required
        {
            let mut optional: Vec<(usize, String)> = data
                .iter()
                .filter(|(k, _)| !required.contains(k))
                .map(|(k, v)| (serde_json::to_string(v).map(|s| s.len()).unwrap_or(0), k.clone()))
                .collect();
            optional.sort_by(|a, b| b.cmp(a));
            let mut dropped = false;
            for (_, k) in optional {
                if size <= budget {
                    break;
                }
                data.remove(&k);
                dropped = true;
                size = measure(&data);
            }
            if dropped {
                rungs.push("drop_optional".to_owned());
            }
        }
        if size > budget {
            let size = count_value(&Value::Object(data));
            return Err(Error::OverBudget { step: spec.step.clone(), budget, size, rungs });
        }
    }
    let data = Value::Object(data);
    Ok(Slice { hash: hash_of(&data), data, tokens: size, budget: spec.max_tokens, rungs, missing })
}

/// Rung 1: cuts every text over `n` tokens to `n` tokens and `...`.
fn truncate_texts(data: &mut Map<String, Value>, n: u64) -> bool {
    fn walk(v: &mut Value, n: u64) -> bool {
        match v {
            Value::String(s) => {
                if tokens::count_till_limit(s, n).is_some() {
                    return false;
                }
                let cut = format!("{}...", tokens::truncate(s, n));
                *s = cut;
                true
            }
            Value::Array(items) => items.iter_mut().fold(false, |acc, x| walk(x, n) | acc),
            Value::Object(m) => m.values_mut().fold(false, |acc, x| walk(x, n) | acc),
            _ => false,
        }
    }
    data.values_mut().fold(false, |acc, v| walk(v, n) | acc)
}

/// The content of the selected variant, or of the highest-scored one.
fn best_variant(variants: &[Value], selected: Option<&str>) -> Option<String> {
    let content = |v: &Value| v.get("content").and_then(Value::as_str).map(str::to_owned);
    if let Some(s) = selected
        && variants.iter().any(|v| content(v).as_deref() == Some(s))
    {
        return Some(s.to_owned());
    }
    let score = |v: &Value| v.get("score").and_then(Value::as_f64).unwrap_or(f64::MIN);
    let mut best: Option<&Value> = None;
    for v in variants {
        if best.is_none_or(|b| score(v) > score(b)) {
            best = Some(v);
        }
    }
    best.and_then(content)
}

/// Rung 2: variants give way to the selected (or best) one.
fn drop_variants(data: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    let keys: Vec<String> = data.keys().cloned().collect();
    for k in keys {
        let base =
            if k == "variants" { Some("selected".to_owned()) } else { k.strip_suffix("_variants").map(str::to_owned) };
        if let Some(base) = base
            && let Some(Value::Array(vs)) = data.get(&k)
        {
            let selected = data.get("selected").and_then(Value::as_str);
            let best = best_variant(vs, selected);
            data.remove(&k);
            if !data.contains_key(&base)
                && let Some(b) = best
            {
                data.insert(base, Value::String(b));
            }
            changed = true;
            continue;
        }
        if let Some(Value::Object(inner)) = data.get_mut(&k) {
            changed |= drop_variants(inner);
        }
    }
    changed
}

/// Rung 3: a value with a `{key}_summary` sibling on the board is replaced by it.
fn use_summaries(
    data: &mut Map<String, Value>,
    sources: &std::collections::BTreeMap<String, BoardPath>,
    board: &BoardFile,
) -> bool {
    let mut changed = false;
    for (key, from) in sources {
        let Some(last) = from.keys.last() else { continue };
        if last.ends_with("_summary") || !data.contains_key(key) {
            continue;
        }
        let mut sibling = from.clone();
        if let Some(l) = sibling.keys.last_mut() {
            *l = format!("{last}_summary");
        }
        if let Some(Value::String(summary)) = get(board, &sibling) {
            data.insert(key.clone(), Value::String(summary.clone()));
            changed = true;
        }
    }
    changed
}

/// Tokens of the whole board (every zone), what full-context passing would send.
pub fn full_tokens(board: &BoardFile) -> u64 {
    tokens::count(&board.zones_json())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn scope(items: &[&str]) -> Scope {
        Scope::parse(&items.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    fn board(v: Value) -> BoardFile {
        let mut b = BoardFile::empty(clawboard_core::Id::new("t").unwrap());
        b.meta_zone = v["meta_zone"].as_object().cloned().unwrap_or_default();
        b.content_zone = v["content_zone"].as_object().cloned().unwrap_or_default();
        b.control_zone = v["control_zone"].as_object().cloned().unwrap_or_default();
        b
    }

    #[test]
    fn within_budget_nothing_is_touched() {
        let b = board(json!({"meta_zone": {"intent": "写一篇关于AI的小红书", "platform": "xiaohongshu"}}));
        let s = scope(&["meta.intent", "meta.platform"]);
        let out = build(
            &b,
            &Spec { step: "title".into(), source: Source::Scope(&s), max_tokens: Some(150), truncate_tokens: 100 },
        )
        .unwrap();
        assert_eq!(out.data, json!({"intent": "写一篇关于AI的小红书", "platform": "xiaohongshu"}));
        assert!(out.rungs.is_empty() && out.tokens <= 150 && out.tokens == count_value(&out.data));
    }

    #[test]
    fn summaries_replace_long_values() {
        let long = "正文".repeat(400);
        let b = board(json!({"content_zone": {"body": {"content": long, "content_summary": "五个工具的介绍"}}}));
        let s = scope(&["content.body.content"]);
        let spec = Spec { step: "x".into(), source: Source::Scope(&s), max_tokens: Some(20), truncate_tokens: 100 };
        let out = build(&b, &spec).unwrap();
        assert_eq!(out.data, json!({"content": "五个工具的介绍"}));
        assert_eq!(out.rungs, ["truncate", "summaries"]);
    }

    #[test]
    fn over_budget_after_every_rung_fails_the_step() {
        let b = board(json!({"meta_zone": {"intent": "x ".repeat(500)}}));
        let s = scope(&["meta.intent"]);
        let e = build(
            &b,
            &Spec { step: "title".into(), source: Source::Scope(&s), max_tokens: Some(10), truncate_tokens: 100 },
        )
        .unwrap_err();
        match e {
            Error::OverBudget { step, budget, size, rungs } => {
                assert_eq!((step.as_str(), budget, rungs), ("title", 10, vec!["truncate".to_owned()]));
                assert!(size > 10);
            }
            e => panic!("{e}"),
        }
    }
}
