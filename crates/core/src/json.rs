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
    /// An integer literal outside what 64 bits hold (`literal` shortened when long):
    /// serde_json, as most readers, would round it to the nearest float.
    #[error(
        "the integer {literal} at {} (line {line}, column {column}) does not fit in 64 bits; JSON readers would round it, so write it as a string",
        if pointer.is_empty() { "the top level" } else { pointer }
    )]
    BigInteger { pointer: String, literal: String, line: usize, column: usize },
}

/// Parses one JSON value, all of `bytes` (whitespace may follow it), refusing a
/// duplicate key.
pub fn parse_value(bytes: &[u8]) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let state = State::default();
    let parsed = Strict { state: &state }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    let value = parsed.map_err(|e| match state.duplicate.take() {
        Some((pointer, key)) => JsonError::DuplicateKey { pointer, key, line: e.line(), column: e.column() },
        None => JsonError::Syntax(e),
    })?;
    // Whole numbers past 64 bits came as floats: rounded if the text wrote an integer.
    let wide = state.wide.take();
    if !wide.is_empty() {
        let literals = wide_numbers(bytes);
        for (pointer, n) in wide.into_iter().zip(literals) {
            if n.integer {
                return Err(JsonError::BigInteger { pointer, literal: n.shown, line: n.line, column: n.column });
            }
        }
    }
    Ok(value)
}

/// Whether a float the parser produced is a whole number beyond i64 and u64, which
/// an integer literal too long for them also becomes.
fn is_wide(v: f64) -> bool {
    // -2^63 itself: an integer literal just below i64's least rounds to it (the
    // least itself comes as an integer, never as a float).
    const I64_MIN: f64 = -9_223_372_036_854_775_808.0; // -2^63
    const PAST_U64: f64 = 18_446_744_073_709_551_616.0; // 2^64
    v.fract() == 0.0 && (v <= I64_MIN || v >= PAST_U64)
}

/// A number of the text that [`is_wide`] holds for.
struct WideNumber {
    /// Written as an integer (no fraction, no exponent).
    integer: bool,
    /// The literal, shortened past 40 characters.
    shown: String,
    line: usize,
    column: usize,
}

/// The numbers of `bytes` (JSON text that parsed) that the parser made [`is_wide`]
/// floats of, in the order of the text, which is the order it met them in.
fn wide_numbers(bytes: &[u8]) -> Vec<WideNumber> {
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start, mut in_string) = (0, 1, 0, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    i += 1;
                }
                let text = String::from_utf8_lossy(&bytes[start..i]);
                let integer = !text.contains(['.', 'e', 'E']);
                // As the parser: an integer that i64 or u64 holds is no float.
                let float = if integer {
                    text.parse::<i64>().is_err() && text.parse::<u64>().is_err()
                } else {
                    text.parse::<f64>().is_ok_and(is_wide)
                };
                if float {
                    let shown = if text.len() > 40 {
                        format!("{}… ({} digits)", &text[..20], text.trim_start_matches('-').len())
                    } else {
                        text.into_owned()
                    };
                    out.push(WideNumber { integer, shown, line, column: start - line_start + 1 });
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
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
    /// Where the parser met [`is_wide`] floats, in order.
    wide: RefCell<Vec<String>>,
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
        if is_wide(v) {
            self.state.wide.borrow_mut().push(pointer(&self.state.path.borrow()));
        }
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
    fn integers_past_64_bits_are_refused_where_they_are() {
        assert_eq!(
            err("{\"a\": [1,\n  18446744073709551616]}"),
            "the integer 18446744073709551616 at /a/1 (line 2, column 3) does not fit in 64 bits; \
             JSON readers would round it, so write it as a string"
        );
        assert!(
            err("-9223372036854775809")
                .starts_with("the integer -9223372036854775809 at the top level (line 1, column 1)")
        );
        // The edges of i64 and u64 fit; floats that are whole numbers pass, and a
        // wide one before a wide integer does not hide the integer's place.
        let v = parse_value(br#"[-9223372036854775808, 18446744073709551615, 1e19, 2.5e30, 1.0e400]"#);
        assert!(v.is_err(), "1.0e400 is out of f64's range");
        assert!(
            parse_value(br#"[-9223372036854775808, 18446744073709551615, 1e19, 2.5e30, 20000000000000000000.0]"#)
                .is_ok()
        );
        let long = "7".repeat(60);
        assert_eq!(
            err(&format!(r#"{{"x": 1e19, "s": "99999999999999999999", "y": {{"z": {long}}}}}"#)),
            format!(
                "the integer 77777777777777777777… (60 digits) at /y/z (line 1, column 53) does not fit in 64 bits; \
                 JSON readers would round it, so write it as a string"
            )
        );
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
