//! Scopes (seed 003, Scope 语法): which parts of the board a step sees.
//!
//! An item is `zone.key(.nested)*`, a wildcard `zone.*` or `zone.key.*` (every key
//! under it, each under its own name), or `all` (the whole board, alone). A value
//! lands in the slice under its last path segment, as the seed's `build_slice`
//! does; two items that would land on the same key are an error when the scope is
//! loaded (or, for keys only a wildcard finds, when the slice is built), never a
//! silent overwrite. An absent value is left out and noted as missing.

use std::collections::BTreeMap;

use clawboard_core::formats::{BoardFile, Ty, Zone};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ops::{get, spec_at};
use crate::path::BoardPath;

/// One item of a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `all`: the whole board, keyed by zone (`meta_zone` …), as `snapshot()`.
    All,
    /// `zone.key…`: one value, under its last segment.
    Path(BoardPath),
    /// `zone.*`, `zone.key.*`: every key under the path, each under its own name.
    Under(BoardPath),
}

/// A parsed scope: its items, as written and as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub items: Vec<(String, Item)>,
}

/// What a slice is before any budget: its values by key, where each came from,
/// and what was absent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Raw {
    pub data: Map<String, Value>,
    /// Slice key → the board path its value came from.
    pub sources: BTreeMap<String, BoardPath>,
    /// Scope items (or wildcard keys) whose value was absent.
    pub missing: Vec<String>,
}

fn scope_err(scope: &str, pos: usize, reason: impl Into<String>) -> Error {
    Error::Scope { scope: scope.to_owned(), pos, reason: reason.into() }
}

impl Scope {
    /// Parses a scope list; errors name the item and the character position.
    pub fn parse(list: &[String]) -> Result<Scope> {
        if list.is_empty() {
            return Err(scope_err("", 0, "the scope is empty; name at least one path, or all"));
        }
        let mut items = Vec::new();
        for text in list {
            let item = if text == "all" {
                Item::All
            } else if let Some(base) = text.strip_suffix(".*") {
                let p = BoardPath::parse(base).map_err(|e| scope_err(text, e.pos, e.reason))?;
                Item::Under(p)
            } else {
                if text.contains('*') {
                    let pos = text.chars().position(|c| c == '*').unwrap_or(0);
                    return Err(scope_err(
                        text,
                        pos,
                        "a wildcard is only allowed as the last part (zone.* or zone.key.*)",
                    ));
                }
                let p = BoardPath::parse(text).map_err(|e| scope_err(text, e.pos, e.reason))?;
                if p.keys.is_empty() {
                    return Err(scope_err(text, 0, format!("names a whole zone; write {text}.* for every key in it")));
                }
                Item::Path(p)
            };
            items.push((text.clone(), item));
        }
        if items.len() > 1 && items.iter().any(|(_, i)| *i == Item::All) {
            return Err(scope_err("all", 0, "`all` is the whole board; list it alone"));
        }
        let scope = Scope { items };
        scope.check_keys()?;
        Ok(scope)
    }

    /// The scope items as written.
    pub fn texts(&self) -> Vec<String> {
        self.items.iter().map(|(t, _)| t.clone()).collect()
    }

    /// Every key the scope is known to produce, with the item that produces it: an
    /// explicit path's last segment, and the known fields under a wildcard.
    fn check_keys(&self) -> Result<()> {
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (text, item) in &self.items {
            let keys: Vec<String> = match item {
                Item::All => Vec::new(),
                Item::Path(p) => vec![p.slice_key().to_owned()],
                Item::Under(p) => match spec_at(p) {
                    Ok(Some(Ty::Obj(fields))) => fields.iter().map(|(k, _)| (*k).to_owned()).collect(),
                    Ok(_) => Vec::new(),
                    Err(why) => return Err(scope_err(text, 0, why)),
                },
            };
            for k in keys {
                if let Some(other) = seen.insert(k.clone(), text) {
                    return Err(scope_err(
                        text,
                        0,
                        format!(
                            "lands on the slice key {k:?}, as {other:?} does; a slice keys a value by its last segment, so keep one of them or use a template"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The zones the scope reads.
    pub fn zones(&self) -> Vec<Zone> {
        let mut z: Vec<Zone> = self
            .items
            .iter()
            .flat_map(|(_, i)| match i {
                Item::All => Zone::ALL.to_vec(),
                Item::Path(p) | Item::Under(p) => vec![p.zone],
            })
            .collect();
        z.sort();
        z.dedup();
        z
    }

    /// Builds the raw slice from `board` (seed 003's `build_slice`).
    pub fn build(&self, board: &BoardFile) -> Result<Raw> {
        let mut raw = Raw::default();
        let put = |raw: &mut Raw, key: String, value: Value, from: BoardPath, text: &str| -> Result<()> {
            if let Some(prev) = raw.sources.get(&key) {
                return Err(scope_err(
                    text,
                    0,
                    format!(
                        "{from} lands on the slice key {key:?}, which {prev} already holds; narrow the scope or use a template"
                    ),
                ));
            }
            raw.sources.insert(key.clone(), from);
            raw.data.insert(key, value);
            Ok(())
        };
        for (text, item) in &self.items {
            match item {
                Item::All => {
                    for z in Zone::ALL {
                        let v = Value::Object(board.zone(z).clone());
                        put(&mut raw, z.key().to_owned(), v, BoardPath { zone: z, keys: Vec::new() }, text)?;
                    }
                }
                Item::Path(p) => match get(board, p) {
                    Some(v) => put(&mut raw, p.slice_key().to_owned(), v.clone(), p.clone(), text)?,
                    None => raw.missing.push(text.clone()),
                },
                Item::Under(p) => {
                    let under = if p.keys.is_empty() {
                        Some(board.zone(p.zone))
                    } else {
                        get(board, p).and_then(Value::as_object)
                    };
                    match under {
                        Some(m) if !m.is_empty() => {
                            for (k, v) in m {
                                let mut from = p.clone();
                                from.keys.push(k.clone());
                                put(&mut raw, k.clone(), v.clone(), from, text)?;
                            }
                        }
                        _ => raw.missing.push(text.clone()),
                    }
                }
            }
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn s(items: &[&str]) -> Result<Scope> {
        Scope::parse(&items.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn parse_errors_name_the_item_and_position() {
        match s(&["meta.intent", "meta..x"]).unwrap_err() {
            Error::Scope { scope, pos, .. } => assert_eq!((scope.as_str(), pos), ("meta..x", 5)),
            e => panic!("{e}"),
        }
        assert!(s(&["meta.*.x"]).unwrap_err().to_string().contains("only allowed as the last part"));
        assert!(s(&["all", "meta.intent"]).unwrap_err().to_string().contains("list it alone"));
        assert!(s(&["content"]).unwrap_err().to_string().contains("content.*"));
        assert!(s(&["../x"]).is_err());
        assert!(s(&[]).is_err());
    }

    #[test]
    fn two_items_on_one_key_are_refused_when_loaded() {
        let e = s(&["content.hook.title", "content.body.sections"]);
        assert!(e.is_ok(), "different keys");
        let e = s(&["content.hook.title", "content.x.title"]).unwrap_err().to_string();
        assert!(e.contains("lands on the slice key \"title\""), "{e}");
        let e = s(&["meta.topic", "content.body.sections", "content.x.topic"]).unwrap_err().to_string();
        assert!(e.contains("\"topic\"") && e.contains("content.x.topic"), "{e}");
        let e =
            s(&["content.hook.*", "content.body.content", "meta.style", "content.selected"]).unwrap_err().to_string();
        assert!(e.contains("\"selected\""), "{e}");
        // The seed's skills load fine.
        s(&["meta.*", "content.hook.*", "content.body.key_points"]).unwrap();
        s(&["meta.*", "control.quality_scores"]).unwrap();
    }

    #[test]
    fn builds_the_seeds_slice_and_notes_what_is_missing() {
        let mut b = BoardFile::empty(clawboard_core::Id::new("t").unwrap());
        b.meta_zone.insert("intent".into(), json!("写一篇关于AI的小红书"));
        b.content_zone.insert("hook".into(), json!({"selected": "5个AI工具让你效率翻倍"}));
        let raw = s(&["meta.intent", "content.hook.selected", "meta.style"]).unwrap().build(&b).unwrap();
        assert_eq!(
            Value::Object(raw.data),
            json!({"intent": "写一篇关于AI的小红书", "selected": "5个AI工具让你效率翻倍"})
        );
        assert_eq!(raw.missing, vec!["meta.style"]);
        let all = s(&["all"]).unwrap().build(&b).unwrap();
        assert_eq!(Value::Object(all.data), b.zones());
        // A key only the board knows, found by two wildcards: refused at build time.
        b.content_zone.insert("topic".into(), json!("x"));
        b.meta_zone.insert("topic".into(), json!("y"));
        assert!(s(&["meta.*", "content.*"]).unwrap().build(&b).unwrap_err().to_string().contains("already holds"));
    }
}
