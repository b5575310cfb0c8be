//! Board paths and scope paths (seed 003): `zone.key(.nested)*` with the zones
//! `meta`, `content` and `control`. A key is letters, digits, `_` and `-`.

use std::fmt;

use clawboard_core::formats::Zone;

/// Keys in one path at most (a 10,000-segment path is refused, not walked).
pub const MAX_KEYS: usize = 32;
/// Bytes in one key at most.
pub const MAX_KEY_BYTES: usize = 64;

/// A parsed `zone.key.nested` path; `keys` may be empty (the whole zone).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BoardPath {
    pub zone: Zone,
    pub keys: Vec<String>,
}

/// Why a path did not parse, and the character position where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    pub pos: usize,
    pub reason: String,
}

/// Checks one key: the reason it is not a key, if it is not.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("an empty key (two dots in a row, or a dot at an end)".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!("a key longer than {MAX_KEY_BYTES} bytes"));
    }
    if let Some(c) = key.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("{c:?} is not allowed in a key (letters, digits, _ and - only)"));
    }
    Ok(())
}

impl BoardPath {
    pub fn new(zone: Zone, keys: &[&str]) -> BoardPath {
        BoardPath { zone, keys: keys.iter().map(|k| (*k).to_owned()).collect() }
    }

    /// Parses `meta.intent`; the error gives the character position of the bad part.
    pub fn parse(s: &str) -> Result<BoardPath, PathError> {
        let err = |pos: usize, reason: String| Err(PathError { pos, reason });
        if s.is_empty() {
            return err(0, "the path is empty".into());
        }
        if s.len() > (MAX_KEY_BYTES + 1) * (MAX_KEYS + 1) {
            return err(0, format!("the path is {} bytes long; at most {MAX_KEYS} keys fit", s.len()));
        }
        let mut parts = s.split('.');
        let zone_text = parts.next().unwrap_or_default();
        let Some(zone) = Zone::parse(zone_text) else {
            return err(0, format!("{zone_text:?} is not a zone; use meta, content or control"));
        };
        let mut pos = zone_text.chars().count() + 1;
        let mut keys = Vec::new();
        for part in parts {
            if keys.len() == MAX_KEYS {
                return err(pos, format!("more than {MAX_KEYS} keys"));
            }
            if let Err(reason) = check_key(part) {
                let at = part
                    .char_indices()
                    .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
                    .map_or(0, |(i, _)| part[..i].chars().count());
                return err(pos + at, reason);
            }
            pos += part.chars().count() + 1;
            keys.push(part.to_owned());
        }
        Ok(BoardPath { zone, keys })
    }

    /// The key a slice gives this path's value (seed 003: the last segment).
    pub fn slice_key(&self) -> &str {
        self.keys.last().map_or(self.zone.name(), String::as_str)
    }

    /// True when `self` is `other` or lies under it.
    pub fn is_within(&self, other: &BoardPath) -> bool {
        self.zone == other.zone && self.keys.starts_with(&other.keys)
    }

    /// The path without its zone (`hook.selected`), as templates name values.
    pub fn without_zone(&self) -> String {
        self.keys.join(".")
    }
}

impl fmt::Display for BoardPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.zone.name())?;
        for k in &self.keys {
            write!(f, ".{k}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_and_names_the_position() {
        let p = BoardPath::parse("content.hook.selected").unwrap();
        assert_eq!((p.zone, p.keys.len(), p.slice_key()), (Zone::Content, 2, "selected"));
        assert_eq!(p.to_string(), "content.hook.selected");
        assert_eq!(BoardPath::parse("meta").unwrap().keys.len(), 0);
        let e = BoardPath::parse("meta..x").unwrap_err();
        assert_eq!(e.pos, 5);
        assert!(e.reason.contains("empty key"), "{e:?}");
        let e = BoardPath::parse("metadata.x").unwrap_err();
        assert_eq!(e.pos, 0);
        let e = BoardPath::parse("meta.in/tent").unwrap_err();
        assert_eq!((e.pos, e.reason.contains("'/'")), (7, true), "{e:?}");
        let e = BoardPath::parse("content.../x").unwrap_err();
        assert_eq!(e.pos, 8);
        let long = format!("meta{}", ".a".repeat(10_000));
        assert!(BoardPath::parse(&long).unwrap_err().reason.contains("at most 32 keys"));
        let e = BoardPath::parse(&format!("meta{}", ".a".repeat(33))).unwrap_err();
        assert!(e.reason.contains("more than 32"), "{e:?}");
        assert!(BoardPath::parse("meta.x\u{7}").unwrap_err().reason.contains("not allowed"));
    }
}
