//! Identifiers that name directories and files: task ids, role ids, instance ids.
//!
//! One rule for all of them, so that no id can ever address anything outside the
//! directory it names: 1 to 128 bytes of ASCII letters, digits, `.`, `_` and `-`,
//! starting with a letter or digit. That refuses `..`, `.`, `/`, `\`, NUL, absolute
//! paths and the empty string, each with its own reason. New ids: [`random_hex`]
//! suffixes and [`new_task_id`].

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// Longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// The id rule as a JSON Schema / regex pattern (kept equal to [`check_id`] by a test).
pub const ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$";

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("is empty")]
    Empty,
    #[error("is {0} bytes long; at most {MAX_ID_LEN} are allowed")]
    TooLong(usize),
    #[error("is {0:?}, which names a directory, not an id")]
    DotPath(String),
    #[error("contains a path separator {0:?}; an id must be a single name")]
    Separator(char),
    #[error("contains a NUL byte")]
    Nul,
    #[error("starts with {0:?}; it must start with a letter or digit")]
    BadStart(char),
    #[error("contains {0:?}; only letters, digits, '.', '_' and '-' are allowed")]
    BadChar(char),
}

/// Checks `s` against the id rule, giving the most specific reason on failure.
pub fn check_id(s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s == "." || s == ".." {
        return Err(IdError::DotPath(s.to_owned()));
    }
    if let Some(c) = s.chars().find(|c| matches!(c, '/' | '\\')) {
        return Err(IdError::Separator(c));
    }
    if s.contains('\0') {
        return Err(IdError::Nul);
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong(s.len()));
    }
    let mut chars = s.chars();
    if let Some(first) = chars.next()
        && !first.is_ascii_alphanumeric()
    {
        return Err(IdError::BadStart(first));
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(IdError::BadChar(c));
    }
    Ok(())
}

/// A checked identifier. Constructing one is the only way to get one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Id(String);

impl Id {
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        check_id(&s)?;
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Id {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Id::new(s.clone()).map_err(|e| serde::de::Error::custom(format!("id {s:?} {e}")))
    }
}

impl JsonSchema for Id {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Id".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_ID_LEN,
            "pattern": ID_PATTERN,
            "description": "1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit",
        })
    }
}

/// `n` random bytes as lowercase hex (from the OS's random source), for ids that must
/// not collide. Not for secrets: see [`crate::token::secret_hex`].
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    if getrandom::fill(&mut buf).is_err() {
        // No OS randomness (never seen on Linux): fall back to time and pid, which
        // is still unique enough for ids, though not for secrets.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8).wrapping_mul(i as u8 + 1);
        }
    }
    crate::token::hex(&buf)
}

/// A fresh task id: `task-YYYYMMDD-HHMMSS-xxxxxx`.
pub fn new_task_id() -> Id {
    let id = format!("task-{}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"), random_hex(3));
    Id::new(id).unwrap_or_else(|_| unreachable!("generated task ids are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    #[case("", IdError::Empty)]
    #[case(".", IdError::DotPath(".".into()))]
    #[case("..", IdError::DotPath("..".into()))]
    #[case("a/b", IdError::Separator('/'))]
    #[case("/etc", IdError::Separator('/'))]
    #[case("a\\b", IdError::Separator('\\'))]
    #[case("a\0b", IdError::Nul)]
    #[case(".hidden", IdError::BadStart('.'))]
    #[case("-x", IdError::BadStart('-'))]
    #[case("a b", IdError::BadChar(' '))]
    #[case("tâche", IdError::BadChar('â'))]
    fn refuses(#[case] id: &str, #[case] why: IdError) {
        assert_eq!(check_id(id), Err(why));
    }

    #[test]
    fn length_boundary() {
        assert_eq!(check_id(&"a".repeat(128)), Ok(()));
        assert_eq!(check_id(&"a".repeat(129)), Err(IdError::TooLong(129)));
    }

    #[rstest]
    #[case("task-20260225-001")]
    #[case("inst-xxx")]
    #[case("analyst-code")]
    #[case("a..b")]
    #[case("v1.2_rc")]
    fn accepts(#[case] id: &str) {
        assert_eq!(check_id(id), Ok(()));
    }

    proptest! {
        /// The Rust check and the schema pattern agree on every string.
        #[test]
        fn pattern_agrees_with_check(s in "\\PC{0,4}|[A-Za-z0-9._/\\\\-]{0,140}") {
            let re = regex::Regex::new(ID_PATTERN).unwrap();
            // `{0,127}` in the pattern counts chars; the rule is ASCII-only, so bytes == chars
            // whenever the pattern matches.
            prop_assert_eq!(re.is_match(&s), check_id(&s).is_ok());
        }

        /// An accepted id is always exactly one normal path component.
        #[test]
        fn accepted_ids_are_single_components(s in "[ -~]{0,10}") {
            if check_id(&s).is_ok() {
                let p = std::path::Path::new(&s);
                let comps: Vec<_> = p.components().collect();
                prop_assert_eq!(comps.len(), 1);
                prop_assert!(matches!(comps[0], std::path::Component::Normal(_)));
            }
        }
    }
}
