//! The seed's write operations as data ([`Op`]), what each needs of the zone
//! table, how a value is checked before it lands, and how a write folds into a
//! board. Pure: no I/O here (that is [`crate::TaskBoard`]).

use clawboard_core::acl::BoardOp;
use clawboard_core::formats::{BoardFile, STEP_STATES, Ty, Zone, zone_spec};
use clawboard_core::schema::describe;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::path::{BoardPath, check_key};

/// A value larger than this (as compact JSON) is refused.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 4 << 20;
/// Nesting of a value at most.
pub const MAX_DEPTH: usize = 64;

/// The seed's write operations (seed 000, 写入操作).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpName {
    WriteMeta,
    WriteContent,
    WriteControl,
    AppendError,
    UpdateStepStatus,
    /// Our addition: a value removed (a run's temporary data at its end; the
    /// history keeps what it was).
    Clear,
}

impl OpName {
    pub fn as_str(self) -> &'static str {
        match self {
            OpName::WriteMeta => "write_meta",
            OpName::WriteContent => "write_content",
            OpName::WriteControl => "write_control",
            OpName::AppendError => "append_error",
            OpName::UpdateStepStatus => "update_step_status",
            OpName::Clear => "clear",
        }
    }
}

/// One write: an operation, the path it lands on, and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub name: OpName,
    pub path: BoardPath,
    pub value: Value,
}

/// `append_error(error)`'s argument (seed 000 `control_zone.errors[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEntry {
    pub step_id: String,
    pub error_type: String,
    pub message: String,
    pub timestamp: String,
}

/// Why an op cannot be built or applied: the path (as text) and the reason.
pub type Refusal = (String, String);

fn keys(path: &str) -> Result<Vec<String>, Refusal> {
    let mut out = Vec::new();
    if path.split('.').nth(crate::path::MAX_KEYS).is_some() {
        let shown: String = path.chars().take(60).collect();
        return Err((shown, format!("more than {} keys", crate::path::MAX_KEYS)));
    }
    for k in path.split('.') {
        check_key(k).map_err(|r| (path.to_owned(), r))?;
        out.push(k.to_owned());
    }
    Ok(out)
}

impl Op {
    /// `write_meta(key, value)`; `key` may be nested (`constraints.tone`).
    pub fn write_meta(key: &str, value: Value) -> Result<Op, Refusal> {
        let path = BoardPath { zone: Zone::Meta, keys: keys(key).map_err(|(p, r)| (format!("meta.{p}"), r))? };
        Ok(Op { name: OpName::WriteMeta, path, value })
    }

    /// `write_content(zone, key, value)`: `content.{zone}.{key}`; an empty `key`
    /// writes `content.{zone}` itself (`hashtags`).
    pub fn write_content(zone: &str, key: &str, value: Value) -> Result<Op, Refusal> {
        let joined = if key.is_empty() { zone.to_owned() } else { format!("{zone}.{key}") };
        let path =
            BoardPath { zone: Zone::Content, keys: keys(&joined).map_err(|(p, r)| (format!("content.{p}"), r))? };
        Ok(Op { name: OpName::WriteContent, path, value })
    }

    /// `write_control(key, value)`; `key` may be nested (`quality_scores.virality`).
    pub fn write_control(key: &str, value: Value) -> Result<Op, Refusal> {
        let path = BoardPath { zone: Zone::Control, keys: keys(key).map_err(|(p, r)| (format!("control.{p}"), r))? };
        Ok(Op { name: OpName::WriteControl, path, value })
    }

    /// The write a `zone.key…` path names: `write_meta`, `write_content` or `write_control`.
    pub fn set(path: BoardPath, value: Value) -> Result<Op, Refusal> {
        if path.keys.is_empty() {
            return Err((path.to_string(), "names a whole zone; write a key inside it".into()));
        }
        let name = match path.zone {
            Zone::Meta => OpName::WriteMeta,
            Zone::Content => OpName::WriteContent,
            Zone::Control => OpName::WriteControl,
        };
        Ok(Op { name, path, value })
    }

    /// `append_error(error)`.
    pub fn append_error(e: &ErrorEntry) -> Op {
        let value = serde_json::to_value(e).unwrap_or(Value::Null);
        Op { name: OpName::AppendError, path: BoardPath::new(Zone::Control, &["errors"]), value }
    }

    /// `update_step_status(step_id, status)`: status is one of the seed's five.
    pub fn update_step_status(step_id: &str, status: &str) -> Result<Op, Refusal> {
        let at = format!("control.step_status.{step_id}");
        check_key(step_id).map_err(|r| (at.clone(), format!("step id {step_id:?}: {r}")))?;
        if !STEP_STATES.contains(&status) {
            return Err((at, format!("{status:?} is not one of {}", STEP_STATES.join(", "))));
        }
        Ok(Op {
            name: OpName::UpdateStepStatus,
            path: BoardPath::new(Zone::Control, &["step_status", step_id]),
            value: Value::String(status.to_owned()),
        })
    }

    /// `clear(path)`: the value at `path` removed (nothing when it is absent).
    pub fn clear(path: BoardPath) -> Result<Op, Refusal> {
        if path.keys.is_empty() {
            return Err((path.to_string(), "names a whole zone; clear a key inside it".into()));
        }
        Ok(Op { name: OpName::Clear, path, value: Value::Null })
    }

    /// What the zone table is asked for this op.
    pub fn access(&self) -> BoardOp {
        match self.name {
            OpName::AppendError => BoardOp::AppendError,
            _ => BoardOp::Write,
        }
    }

    /// Checks the value alone: size, depth, control characters, and the type the
    /// seed gives its path. `max_bytes` is the largest value accepted.
    pub fn check_value(&self, max_bytes: usize) -> Result<(), Refusal> {
        let at = self.path.to_string();
        if self.name == OpName::Clear {
            return if self.value.is_null() { Ok(()) } else { Err((at, "a clear carries no value (null)".into())) };
        }
        let size = serde_json::to_string(&self.value).map(|s| s.len()).unwrap_or(usize::MAX);
        if size > max_bytes {
            return Err((at, format!("the value is {size} bytes as JSON, over the limit of {max_bytes}")));
        }
        clean(&self.value, 0).map_err(|(sub, r)| (format!("{at}{sub}"), r))?;
        let ty = match self.name {
            OpName::AppendError => {
                let entry = zone_spec(Zone::Control).child("errors").ok().flatten();
                match entry {
                    Some(Ty::Arr(item)) => Some(*item),
                    _ => None,
                }
            }
            _ => spec_at(&self.path).map_err(|r| (at.clone(), r))?,
        };
        if let Some(ty) = ty {
            ty.check(&self.value).map_err(|(sub, r)| (format!("{at}{sub}"), r))?;
        }
        if self.name == OpName::AppendError {
            serde_json::from_value::<ErrorEntry>(self.value.clone())
                .map_err(|e| (at, format!("an error needs step_id, error_type, message and timestamp: {e}")))?;
        }
        Ok(())
    }
}

/// The type the seed gives `path` (`None`: not a known field, any value goes);
/// `Err` when the path goes inside a field that has no keys (`meta.intent.x`).
pub fn spec_at(path: &BoardPath) -> Result<Option<&'static Ty>, String> {
    let mut ty: Option<&'static Ty> = Some(zone_spec(path.zone));
    let mut walked = path.zone.name().to_owned();
    for k in &path.keys {
        let Some(t) = ty else { return Ok(None) };
        ty = t.child(k).map_err(|name| format!("{walked} is {name}; it has no key {k:?}"))?;
        walked.push('.');
        walked.push_str(k);
    }
    Ok(ty)
}

/// No control characters (but tab and newlines), no NUL, not too deep.
fn clean(v: &Value, depth: usize) -> Result<(), (String, String)> {
    if depth > MAX_DEPTH {
        return Err((String::new(), format!("the value nests deeper than {MAX_DEPTH} levels")));
    }
    let bad = |s: &str| s.chars().find(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'));
    match v {
        Value::String(s) => match bad(s) {
            Some(c) => Err((String::new(), format!("the text holds the control character U+{:04X}", u32::from(c)))),
            None => Ok(()),
        },
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                clean(x, depth + 1).map_err(|(at, r)| (format!(".{i}{at}"), r))?;
            }
            Ok(())
        }
        Value::Object(m) => {
            for (k, x) in m {
                if let Some(c) = bad(k) {
                    return Err((
                        String::new(),
                        format!("the key {k:?} holds the control character U+{:04X}", u32::from(c)),
                    ));
                }
                clean(x, depth + 1).map_err(|(at, r)| (format!(".{k}{at}"), r))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The value at `path` on `board` (`None` when absent).
pub fn get<'a>(board: &'a BoardFile, path: &BoardPath) -> Option<&'a Value> {
    let mut keys = path.keys.iter();
    let first = keys.next()?;
    let mut cur = board.zone(path.zone).get(first)?;
    for k in keys {
        cur = cur.as_object()?.get(k)?;
    }
    Some(cur)
}

/// The whole zone as a value.
pub fn zone_value(board: &BoardFile, zone: Zone) -> Value {
    Value::Object(board.zone(zone).clone())
}

/// Whether [`apply`] would change `board`: an appended error always does; any other
/// write unless the path already holds exactly its value. (A path that holds a value
/// walks through objects only, so such a write is never refused either.)
pub fn changes(board: &BoardFile, op: &Op) -> bool {
    match op.name {
        OpName::AppendError => true,
        OpName::Clear => get(board, &op.path).is_some(),
        _ => get(board, &op.path) != Some(&op.value),
    }
}

/// Applies `op` to `board` (the fold step). Refuses, changing nothing, a path that
/// runs through a value that is not an object.
pub fn apply(board: &mut BoardFile, op: &Op) -> Result<(), Refusal> {
    let (last, parents) = match op.path.keys.split_last() {
        Some(x) => x,
        None => return Err((op.path.to_string(), "names a whole zone".into())),
    };
    if op.name == OpName::Clear {
        // Nothing to remove under a parent that is absent or holds no keys.
        let mut cur = board.zone_mut(op.path.zone);
        for k in parents {
            cur = match cur.get_mut(k) {
                Some(Value::Object(m)) => m,
                _ => return Ok(()),
            };
        }
        cur.remove(last);
        return Ok(());
    }
    // Walk first without changing anything, so a refusal leaves the board as it was.
    {
        let mut cur: Option<&Map<String, Value>> = Some(board.zone(op.path.zone));
        let mut walked = op.path.zone.name().to_owned();
        for k in parents {
            walked.push('.');
            walked.push_str(k);
            cur = match cur.and_then(|m| m.get(k)) {
                None => None,
                Some(Value::Object(m)) => Some(m),
                Some(other) => {
                    return Err((op.path.to_string(), format!("{walked} is {}, not an object", describe(other))));
                }
            };
        }
        if op.name == OpName::AppendError
            && let Some(existing) = cur.and_then(|m| m.get(last))
            && !existing.is_array()
        {
            return Err((op.path.to_string(), format!("{walked}.{last} is {}, not an array", describe(existing))));
        }
    }
    let mut cur = board.zone_mut(op.path.zone);
    for k in parents {
        let slot = cur.entry(k.clone()).or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(m) = slot else { return Err((op.path.to_string(), "not an object".into())) };
        cur = m;
    }
    if op.name == OpName::AppendError {
        let slot = cur.entry(last.clone()).or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = slot {
            items.push(op.value.clone());
        }
    } else {
        cur.insert(last.clone(), op.value.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn board() -> BoardFile {
        BoardFile::empty(clawboard_core::Id::new("t1").unwrap())
    }

    #[test]
    fn a_clear_removes_a_value_and_nothing_else() {
        let mut b = board();
        apply(&mut b, &Op::write_content("hook", "selected", json!("t")).unwrap()).unwrap();
        apply(&mut b, &Op::write_content("scratch", "", json!({"a": 1})).unwrap()).unwrap();
        let clear = |p: &str| Op::clear(BoardPath::parse(p).unwrap()).unwrap();
        assert!(changes(&b, &clear("content.scratch")));
        apply(&mut b, &clear("content.scratch")).unwrap();
        assert!(get(&b, &BoardPath::parse("content.scratch").unwrap()).is_none());
        assert_eq!(get(&b, &BoardPath::parse("content.hook.selected").unwrap()), Some(&json!("t")));
        // Absent, or under an absent or scalar parent: nothing to do, nothing made.
        assert!(!changes(&b, &clear("content.scratch")));
        apply(&mut b, &clear("content.nothing.here")).unwrap();
        apply(&mut b, &clear("content.hook.selected.x")).unwrap();
        assert!(!b.content_zone.contains_key("nothing"));
        assert!(clear("content.x").check_value(DEFAULT_MAX_VALUE_BYTES).is_ok());
        let with_value = Op { value: json!(1), ..clear("content.x") };
        assert!(with_value.check_value(DEFAULT_MAX_VALUE_BYTES).is_err());
        assert!(Op::clear(BoardPath::parse("content").unwrap()).is_err());
    }

    #[test]
    fn the_seeds_title_flow() {
        let mut b = board();
        apply(&mut b, &Op::write_meta("intent", json!("写一篇关于AI的小红书")).unwrap()).unwrap();
        apply(&mut b, &Op::write_meta("platform", json!("xiaohongshu")).unwrap()).unwrap();
        let variants = json!([{"type": "numeric", "content": "5个AI工具", "score": 85}]);
        apply(&mut b, &Op::write_content("hook", "variants", variants.clone()).unwrap()).unwrap();
        apply(&mut b, &Op::write_content("hook", "selected", json!("5个AI工具")).unwrap()).unwrap();
        apply(&mut b, &Op::write_control("quality_scores.virality", json!(82)).unwrap()).unwrap();
        apply(&mut b, &Op::update_step_status("title", "completed").unwrap()).unwrap();
        let e = ErrorEntry {
            step_id: "body".into(),
            error_type: "timeout".into(),
            message: "m".into(),
            timestamp: "t".into(),
        };
        apply(&mut b, &Op::append_error(&e)).unwrap();
        apply(&mut b, &Op::append_error(&e)).unwrap();
        assert_eq!(get(&b, &BoardPath::parse("content.hook.variants").unwrap()), Some(&variants));
        assert_eq!(b.control_zone["quality_scores"]["virality"], 82);
        assert_eq!(b.control_zone["step_status"]["title"], "completed");
        assert_eq!(b.control_zone["errors"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn values_are_checked_where_they_land() {
        let check = |path: &str, v: Value| Op::set(BoardPath::parse(path).unwrap(), v).unwrap().check_value(1 << 20);
        assert!(check("meta.intent", json!("x")).is_ok());
        assert!(check("meta.mine.deep", json!({"a": [1]})).is_ok(), "unknown keys are allowed");
        assert_eq!(
            check("meta.intent", json!(42)).unwrap_err(),
            ("meta.intent".into(), "is the number 42, not a string".into())
        );
        assert!(check("meta.style", json!("loud")).unwrap_err().1.contains("not one of professional"));
        assert_eq!(check("meta.intent.x", json!(1)).unwrap_err().1, "meta.intent is a string; it has no key \"x\"");
        assert_eq!(
            check("content.hook.variants", json!([{"score": "high"}])).unwrap_err().0,
            "content.hook.variants.0.score"
        );
        assert!(check("control.step_status.x", json!("done")).is_err());
        assert!(check("meta.topic", json!("a\u{1b}b")).unwrap_err().1.contains("U+001B"));
        assert!(check("meta.topic", json!("tab\tand\nnewline")).is_ok());
        let big = Op::write_meta("topic", json!("x".repeat(100))).unwrap();
        assert!(big.check_value(50).unwrap_err().1.contains("over the limit of 50"));
        assert!(Op::update_step_status("t", "done").unwrap_err().1.contains("not one of pending"));
        assert!(Op::update_step_status("../x", "failed").is_err());
        assert!(Op::write_meta("a..b", json!(1)).is_err());
    }

    #[test]
    fn a_path_through_a_non_object_changes_nothing() {
        let mut b = board();
        apply(&mut b, &Op::write_meta("topic", json!("AI")).unwrap()).unwrap();
        let before = b.clone();
        let e = apply(&mut b, &Op::write_meta("topic.x.y", json!(1)).unwrap()).unwrap_err();
        assert_eq!(e.1, "meta.topic is \"AI\", not an object");
        assert_eq!(b, before);
        apply(&mut b, &Op::write_control("errors", json!("not a list")).unwrap()).unwrap();
        let entry =
            ErrorEntry { step_id: "s".into(), error_type: "t".into(), message: "m".into(), timestamp: "x".into() };
        assert!(apply(&mut b, &Op::append_error(&entry)).unwrap_err().1.contains("not an array"));
    }
}
