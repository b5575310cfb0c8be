//! `retention.yaml` read into a [`Policy`]: its shape checked before it is
//! loaded (no aliases, one document, a few kilobytes), then every key.

use super::{Keep, Policy, PolicyError, Rule};

impl Policy {
    /// Parses `retention.yaml` (`file` names it in errors). A key left out keeps the
    /// seed's value; an unknown key, or a value that is not a duration, is refused.
    pub fn parse(file: &str, text: &str) -> Result<Policy, PolicyError> {
        use yaml_rust2::{Yaml, YamlLoader};
        let err = |key: &str, reason: String| PolicyError { file: file.to_owned(), key: key.to_owned(), reason };
        if text.len() > MAX_POLICY_BYTES {
            return Err(err(
                "(file)",
                format!("is {} bytes; a retention policy is a few lines (at most {MAX_POLICY_BYTES})", text.len()),
            ));
        }
        // Before it is loaded: an alias is expanded as it loads, and a few hundred
        // bytes of them can stand for gigabytes.
        let mut shape = Shape::default();
        yaml_rust2::parser::Parser::new_from_str(text)
            .load(&mut shape, true)
            .map_err(|e| err("(syntax)", e.to_string()))?;
        if let Some(line) = shape.alias_line {
            return Err(err("(syntax)", format!("line {line}: an alias (*name); write the value out")));
        }
        if shape.documents > 1 {
            return Err(err("(syntax)", format!("holds {} documents (---); the policy is one", shape.documents)));
        }
        let docs = YamlLoader::load_from_str(text).map_err(|e| err("(syntax)", e.to_string()))?;
        let mut policy = Policy::default();
        let Some(doc) = docs.first() else { return Ok(policy) }; // an empty file: the seed
        let Yaml::Hash(top) = doc else {
            return Err(err("(top)", "is not a mapping; start with `retention:`".into()));
        };
        for (k, v) in top {
            match k.as_str() {
                Some("retention") => {}
                Some(other) => return Err(err(other, "unknown key; the file holds one key, `retention`".into())),
                None => return Err(err("(top)", format!("{k:?} is not a key name"))),
            }
            if matches!(v, Yaml::Null) {
                continue;
            }
            let Yaml::Hash(sections) = v else { return Err(err("retention", "is not a mapping".into())) };
            for (sk, sv) in sections {
                let Some(section) = sk.as_str() else {
                    return Err(err("retention", format!("{sk:?} is not a key name")));
                };
                let skey = format!("retention.{section}");
                if !Rule::ALL.iter().any(|r| r.key().0 == section) {
                    return Err(err(&skey, "unknown key; use tasks, harvest, reports, memory-queue or entries".into()));
                }
                let Yaml::Hash(fields) = sv else { return Err(err(&skey, "is not a mapping".into())) };
                for (fk, fv) in fields {
                    let Some(field) = fk.as_str() else { return Err(err(&skey, format!("{fk:?} is not a key name"))) };
                    let key = format!("{skey}.{field}");
                    let Some(rule) = Rule::ALL.iter().copied().find(|r| r.key() == (section, field)) else {
                        let known: Vec<&str> =
                            Rule::ALL.iter().filter(|r| r.key().0 == section).map(|r| r.key().1).collect();
                        return Err(err(&key, format!("unknown key; {section} has {}", known.join(", "))));
                    };
                    let text = match fv {
                        Yaml::String(s) => s.clone(),
                        other => {
                            return Err(err(
                                &key,
                                format!("{} is not a duration such as \"30 days\"", yaml_shown(other)),
                            ));
                        }
                    };
                    let keep = Keep::parse(&text).map_err(|e| err(&key, e))?;
                    policy.keep.insert(rule, keep);
                }
            }
        }
        Ok(policy)
    }
}

/// A YAML value as it was written, for an error (not Rust's `Integer(30)`).
fn yaml_shown(v: &yaml_rust2::Yaml) -> String {
    use yaml_rust2::Yaml;
    match v {
        Yaml::Integer(n) => n.to_string(),
        Yaml::Real(r) => r.clone(),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::String(s) => format!("{s:?}"),
        Yaml::Null => "null (nothing)".into(),
        Yaml::Array(_) => "a list".into(),
        Yaml::Hash(_) => "a mapping".into(),
        _ => "this value".into(),
    }
}

/// The largest `retention.yaml` read.
const MAX_POLICY_BYTES: usize = 64 * 1024;

/// What [`Policy::parse`] looks for before loading: aliases, and how many documents.
#[derive(Default)]
struct Shape {
    alias_line: Option<usize>,
    documents: usize,
}

impl yaml_rust2::parser::MarkedEventReceiver for Shape {
    fn on_event(&mut self, ev: yaml_rust2::Event, mark: yaml_rust2::scanner::Marker) {
        match ev {
            yaml_rust2::Event::Alias(_) => {
                self.alias_line.get_or_insert(mark.line());
            }
            yaml_rust2::Event::DocumentStart => self.documents += 1,
            _ => {}
        }
    }
}
