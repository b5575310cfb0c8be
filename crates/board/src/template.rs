//! Slice templates (seed 003, 预定义切片模板): a scope, and the shape the slice
//! is handed over in (`output_format`, whose `{path}` placeholders name values by
//! their path without the zone: `{intent}`, `{hook.selected}`,
//! `{constraints.word_count.max}`).
//!
//! - A string that is exactly one placeholder takes the value as it is (an array
//!   stays an array); a placeholder inside other text is replaced by the value's
//!   text. A key whose placeholder has no value is left out and noted as missing.
//! - `flatten: true`: the output is one level deep (a nested object is refused
//!   when the template is loaded); `false`: objects may nest (`sensitive_check`).
//! - `required` (ours): the output keys the compression ladder's last rung keeps;
//!   without it every key is required and that rung is skipped.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ops::get;
use crate::path::{BoardPath, check_key};
use crate::scope::{Item, Scope};
use clawboard_core::formats::BoardFile;

/// The seed's four templates, embedded from `config/templates/`.
pub const SEED_TEMPLATES: &[(&str, &str)] = &[
    ("config/templates/title_generation.json", include_str!("../../../config/templates/title_generation.json")),
    ("config/templates/body_generation.json", include_str!("../../../config/templates/body_generation.json")),
    ("config/templates/platform_adaptation.json", include_str!("../../../config/templates/platform_adaptation.json")),
    ("config/templates/sensitive_check.json", include_str!("../../../config/templates/sensitive_check.json")),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    template_id: String,
    #[serde(default)]
    description: Option<String>,
    scope: Vec<String>,
    #[serde(default)]
    flatten: bool,
    output_format: Map<String, Value>,
    #[serde(default)]
    required: Option<Vec<String>>,
}

/// A loaded, checked template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub id: String,
    pub description: Option<String>,
    pub scope: Scope,
    pub flatten: bool,
    pub output_format: Map<String, Value>,
    /// Output keys the last compression rung must keep (`None`: all of them).
    pub required: Option<Vec<String>>,
    /// Where it was loaded from.
    pub file: String,
}

/// What a template renders to: the output, where each whole-placeholder key came
/// from (for summaries), and what was missing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    pub data: Map<String, Value>,
    pub sources: BTreeMap<String, BoardPath>,
    pub missing: Vec<String>,
}

/// The placeholders in a string: `{a.b}` → `a.b`.
fn placeholders(s: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(open) = s[rest..].find('{') {
        let start = rest + open;
        let Some(close) = s[start..].find('}') else { break };
        let end = start + close;
        out.push((start, end + 1, &s[start + 1..end]));
        rest = end + 1;
    }
    out
}

impl Template {
    /// Parses and checks one template file's text; errors name the file, the
    /// template, the field and the reason.
    pub fn parse(file: &str, text: &str) -> Result<Template> {
        let bad = |template: &str, field: &str, reason: String| Error::Template {
            file: file.to_owned(),
            template: template.to_owned(),
            field: field.to_owned(),
            reason,
        };
        // The id, if the file has one, names the template in every error.
        let named = serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v.get("template_id").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| "(unnamed)".to_owned());
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawTemplate = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = clawboard_core::kind::pointer_of(e.path()).trim_start_matches('/').replace('/', ".");
            bad(&named, if field.is_empty() { "(file)" } else { &field }, e.inner().to_string())
        })?;
        let id = raw.template_id.clone();
        check_key(&id).map_err(|r| bad(&id, "template_id", r))?;
        let scope = Scope::parse(&raw.scope).map_err(|e| bad(&id, "scope", e.to_string()))?;
        if raw.output_format.is_empty() {
            return Err(bad(&id, "output_format", "is empty; name at least one output key".into()));
        }
        let t = Template {
            id: id.clone(),
            description: raw.description,
            scope,
            flatten: raw.flatten,
            output_format: raw.output_format,
            required: raw.required,
            file: file.to_owned(),
        };
        t.check_format(&t.output_format, "output_format", 0).map_err(|(f, r)| bad(&id, &f, r))?;
        if let Some(req) = &t.required {
            for k in req {
                if !t.output_format.contains_key(k) {
                    return Err(bad(&id, "required", format!("{k:?} is not a key of output_format")));
                }
            }
        }
        Ok(t)
    }

    fn check_format(
        &self,
        m: &Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> std::result::Result<(), (String, String)> {
        for (k, v) in m {
            let field = format!("{at}.{k}");
            match v {
                Value::String(s) => {
                    for (_, _, p) in placeholders(s) {
                        self.resolve_path(p).map_err(|r| (field.clone(), r))?;
                    }
                }
                Value::Object(inner) if !self.flatten && depth < 8 => self.check_format(inner, &field, depth + 1)?,
                Value::Object(_) if self.flatten => {
                    return Err((field, "is an object, but flatten is true: the output is one level deep".into()));
                }
                other => {
                    return Err((
                        field,
                        format!(
                            "is {}; a value is a string with {{path}} placeholders",
                            clawboard_core::schema::describe(other)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The board path a placeholder names: the scope item whose zone-less path is
    /// the placeholder or a prefix of it (the longest such).
    pub fn resolve_path(&self, placeholder: &str) -> std::result::Result<BoardPath, String> {
        let mut best: Option<(usize, BoardPath)> = None;
        let mut tie = false;
        for (_, item) in &self.scope.items {
            let base = match item {
                Item::All => continue,
                Item::Path(p) | Item::Under(p) => p,
            };
            let bare = base.without_zone();
            let rest = if bare.is_empty() {
                Some(placeholder)
            } else if placeholder == bare {
                Some("")
            } else {
                placeholder.strip_prefix(&format!("{bare}."))
            };
            let Some(rest) = rest else { continue };
            {
                let mut full = base.clone();
                if !rest.is_empty() {
                    for k in rest.split('.') {
                        check_key(k).map_err(|r| format!("placeholder {{{placeholder}}}: {r}"))?;
                        full.keys.push(k.to_owned());
                    }
                }
                let len = bare.len();
                match &best {
                    Some((l, p)) if *l == len && *p != full => tie = true,
                    Some((l, _)) if *l >= len => {}
                    _ => {
                        best = Some((len, full));
                        tie = false;
                    }
                }
            }
        }
        match best {
            Some(_) if tie => Err(format!("placeholder {{{placeholder}}} matches scope items in two zones")),
            Some((_, p)) => Ok(p),
            None => Err(format!("placeholder {{{placeholder}}} is not in the template's scope")),
        }
    }

    /// Renders the output over `board`.
    pub fn render(&self, board: &BoardFile) -> Rendered {
        let mut out = Rendered::default();
        let data = self.render_map(&self.output_format, board, "", &mut out);
        out.data = data;
        out
    }

    fn render_map(
        &self,
        m: &Map<String, Value>,
        board: &BoardFile,
        at: &str,
        out: &mut Rendered,
    ) -> Map<String, Value> {
        let mut data = Map::new();
        for (k, v) in m {
            let key_at = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
            match v {
                Value::String(s) => {
                    let ps = placeholders(s);
                    // A string that is one placeholder: the value as it is.
                    if ps.len() == 1 && ps[0].0 == 0 && ps[0].1 == s.len() {
                        let Ok(path) = self.resolve_path(ps[0].2) else { continue };
                        match get(board, &path) {
                            Some(v) => {
                                data.insert(k.clone(), v.clone());
                                if at.is_empty() {
                                    out.sources.insert(k.clone(), path);
                                }
                            }
                            None => out.missing.push(format!("{key_at} ({path})")),
                        }
                        continue;
                    }
                    let mut text = String::new();
                    let mut last = 0;
                    let mut absent = None;
                    for (start, end, p) in ps {
                        text.push_str(&s[last..start]);
                        last = end;
                        match self.resolve_path(p).ok().and_then(|path| get(board, &path).map(|v| (path, v))) {
                            Some((_, Value::String(v))) => text.push_str(v),
                            Some((_, v)) => text.push_str(&v.to_string()),
                            None => absent = Some(p.to_owned()),
                        }
                    }
                    text.push_str(&s[last..]);
                    match absent {
                        Some(p) => out.missing.push(format!("{key_at} ({p})")),
                        None => {
                            data.insert(k.clone(), Value::String(text));
                        }
                    }
                }
                Value::Object(inner) => {
                    let rendered = self.render_map(inner, board, &key_at, out);
                    data.insert(k.clone(), Value::Object(rendered));
                }
                _ => {}
            }
        }
        data
    }
}

/// Templates by id: the seed's four, then every `*.json` in `dir` (which may
/// replace one of them). A bad file is refused naming it.
pub fn load(dir: Option<&Path>) -> Result<BTreeMap<String, Template>> {
    let mut out = BTreeMap::new();
    for (file, text) in SEED_TEMPLATES {
        let t = Template::parse(&format!("{file} (embedded)"), text)?;
        out.insert(t.id.clone(), t);
    }
    let Some(dir) = dir else { return Ok(out) };
    let entries = std::fs::read_dir(dir).map_err(|e| clawboard_core::Error::io(dir, e))?;
    let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for p in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let name = p.display().to_string();
        let text = std::fs::read_to_string(&p).map_err(|e| clawboard_core::Error::io(&p, e))?;
        let t = Template::parse(&name, &text)?;
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if stem != t.id {
            return Err(Error::Template {
                file: name,
                template: t.id.clone(),
                field: "template_id".into(),
                reason: format!("does not match the file name {stem}.json"),
            });
        }
        out.insert(t.id.clone(), t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_seeds_templates_load() {
        let all = load(None).unwrap();
        assert_eq!(
            all.keys().collect::<Vec<_>>(),
            ["body_generation", "platform_adaptation", "sensitive_check", "title_generation"]
        );
    }

    #[test]
    fn bad_templates_name_file_template_field_and_reason() {
        let cases = [
            (
                r#"{"template_id":"t","scope":["meta.intent"],"output_format":{"a":"{topic}"}}"#,
                "output_format.a",
                "not in the template's scope",
            ),
            (r#"{"template_id":"t","scope":["meta..x"],"output_format":{"a":"{x}"}}"#, "scope", "position 5"),
            (
                r#"{"template_id":"t","scope":["meta.intent"],"flatten":true,"output_format":{"a":{"b":"{intent}"}}}"#,
                "output_format.a",
                "flatten is true",
            ),
            (
                r#"{"template_id":"t","scope":["meta.intent"],"output_format":{"a":3}}"#,
                "output_format.a",
                "the number 3",
            ),
            (
                r#"{"template_id":"t","scope":["meta.intent"],"output_format":{"a":"{intent}"},"required":["b"]}"#,
                "required",
                "\"b\"",
            ),
            (r#"{"template_id":"t","scope":["meta.intent"],"output_format":{}}"#, "output_format", "is empty"),
            (
                r#"{"template_id":"t","scope":["meta.intent"],"output_format":{"a":"{intent}"},"flaten":true}"#,
                "flaten",
                "unknown field",
            ),
            (
                r#"{"template_id":"../t","scope":["meta.intent"],"output_format":{"a":"{intent}"}}"#,
                "template_id",
                "not allowed",
            ),
        ];
        for (text, field, why) in cases {
            let e = Template::parse("x.json", text).unwrap_err().to_string();
            assert!(
                e.starts_with("x.json: template ") && e.contains(&format!(": {field}: ")) && e.contains(why),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn renders_the_seeds_body_template() {
        let all = load(None).unwrap();
        let mut b = BoardFile::empty(clawboard_core::Id::new("t").unwrap());
        b.meta_zone.insert("intent".into(), json!("写一篇关于AI的小红书"));
        b.meta_zone.insert("constraints".into(), json!({"word_count": {"min": 300, "max": 800}}));
        b.content_zone.insert("hook".into(), json!({"selected": "5个AI工具让你效率翻倍"}));
        let r = all["body_generation"].render(&b);
        assert_eq!(
            Value::Object(r.data),
            json!({"topic": "写一篇关于AI的小红书", "title": "5个AI工具让你效率翻倍", "word_limit": 800})
        );
        assert!(r.missing.is_empty());
        let r = all["title_generation"].render(&b);
        assert_eq!(Value::Object(r.data), json!({"topic": "写一篇关于AI的小红书"}));
        assert_eq!(r.missing, ["platform (meta.platform)", "style (meta.style)"]);
    }
}
