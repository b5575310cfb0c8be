//! JSON text → [`Value`], refusing an object that names a key twice.
//!
//! serde_json keeps the last of two equal keys, so `{"status":"open","status":"done"}`
//! reads as done, and a tool that keeps the first (many do) reads the same file
//! otherwise. Input from people and other programs goes through [`parse_value`],
//! which names the key and where it is instead.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why JSON text was refused.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON, or more than one value: serde_json's error, with its line and column.
    #[error(transparent)]
    Syntax(serde_json::Error),
    /// An object names `key` twice; `pointer` is the object's JSON pointer (`""` at the top).
    #[error(
        "the key {key:?} appears twice in {} (line {line}, column {column}); JSON readers disagree on which one counts, so remove one",
        if pointer.is_empty() { "the top-level object".to_owned() } else { format!("the object at {pointer}") }
    )]
    DuplicateKey { pointer: String, key: String, line: usize, column: usize },
}

/// Parses one JSON value, all of `bytes` (whitespace may follow it), refusing a
/// duplicate key.
pub fn parse_value(bytes: &[u8]) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let state = State::default();
    let parsed = Strict { state: &state }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| match state.duplicate.take() {
        Some((pointer, key)) => JsonError::DuplicateKey { pointer, key, line: e.line(), column: e.column() },
        None => JsonError::Syntax(e),
    })
}

/// [`parse_value`], then the value as `T` (a field's error has no line then, but names the field).
pub fn from_slice<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    serde_json::from_value(parse_value(bytes)?).map_err(JsonError::Syntax)
}

/// Where the parse is, and the duplicate key that stopped it (pointer, key).
#[derive(Default)]
struct State {
    path: RefCell<Vec<Step>>,
    duplicate: RefCell<Option<(String, String)>>,
}

/// One step into a value: an object's key or an array's index.
enum Step {
    Key(String),
    Index(usize),
}

/// The JSON pointer of `path` (`""` for the top level), escaped as RFC 6901 says.
fn pointer(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        out.push('/');
        match step {
            Step::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
            Step::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

/// Builds a [`Value`] as serde_json's own visitor does, keeping track of where it is.
#[derive(Clone, Copy)]
struct Strict<'s> {
    state: &'s State,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity, so this is always a number.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.state.path.borrow_mut().push(Step::Index(items.len()));
            let next = seq.next_element_seed(self);
            self.state.path.borrow_mut().pop();
            match next? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let at = pointer(&self.state.path.borrow());
                *self.state.duplicate.borrow_mut() = Some((at, key));
                return Err(de::Error::custom("duplicate key"));
            }
            self.state.path.borrow_mut().push(Step::Key(key));
            let value = map.next_value_seed(self);
            let Some(Step::Key(key)) = self.state.path.borrow_mut().pop() else {
                unreachable!("the step pushed above")
            };
            object.insert(key, value?);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse_value(text.as_bytes()).unwrap_err().to_string()
    }

    fn duplicate(text: &str) -> (String, String) {
        match parse_value(text.as_bytes()) {
            Err(JsonError::DuplicateKey { pointer, key, .. }) => (pointer, key),
            other => panic!("not a duplicate key: {other:?}"),
        }
    }

    #[test]
    fn same_value_as_serde_json() {
        let text = r#" {"a": [1, -2, 3.5, 1e400, 18446744073709551615, "x\u00e9", true, null, {}],
                        "b": {"c": {"d": []}}, "~/k": 0.1} "#;
        // 1e400 is out of f64's range: serde_json refuses it, and so does this.
        assert!(serde_json::from_str::<Value>(text).is_err());
        assert!(parse_value(text.as_bytes()).is_err());
        let text = text.replace("1e400, ", "");
        assert_eq!(parse_value(text.as_bytes()).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        // Key order is kept, as the workspace's serde_json keeps it.
        let v = parse_value(br#"{"z":1,"a":2}"#).unwrap();
        assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["z", "a"]);
    }

    #[test]
    fn duplicate_keys_are_named_with_their_object() {
        assert_eq!(
            err(r#"{"status":"open","status":"done"}"#),
            "the key \"status\" appears twice in the top-level object (line 1, column 25); \
             JSON readers disagree on which one counts, so remove one"
        );
        assert!(
            err("{\"p\":\n {\"a\":1,\"a\":2}}")
                .starts_with(r#"the key "a" appears twice in the object at /p (line 2, column 11)"#)
        );
        assert_eq!(duplicate(r#"{"x":[0,{"ok":1},{"a/b":{"k~":1,"k~":1}}]}"#), ("/x/2/a~1b".into(), "k~".into()));
        // Equal keys in different objects are fine.
        assert!(parse_value(br#"{"a":{"k":1},"b":{"k":1},"k":[{"k":1},{"k":2}]}"#).is_ok());
    }

    #[test]
    fn serde_json_errors_and_limits_stay() {
        assert!(err("{").contains("EOF"));
        assert!(err("{} x").starts_with("trailing characters"));
        assert!(parse_value(b"{} \n").is_ok());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(err(&deep).starts_with("recursion limit exceeded"));
    }
}
