//! Timestamps as the seed writes them: RFC 3339 strings with their own offset
//! (`2026-02-25T19:00:00+08:00`). The original text is kept, so a file read and
//! written back is byte-for-byte the same.

use std::fmt;

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// An RFC 3339 timestamp; keeps the text it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Timestamp(String);

impl Timestamp {
    pub fn parse(s: &str) -> Result<Self, chrono::ParseError> {
        DateTime::parse_from_rfc3339(s)?;
        Ok(Self(s.to_owned()))
    }

    /// Formats a UTC instant with second precision (`2026-02-25T11:00:00Z`).
    pub fn from_utc(t: DateTime<Utc>) -> Self {
        Self(t.to_rfc3339_opts(SecondsFormat::Secs, true))
    }

    pub fn now() -> Self {
        Self::from_utc(Utc::now())
    }

    /// Now, with millisecond precision (`2026-02-25T11:00:00.123Z`): for records
    /// whose intervals are measured, as a run's attempt.
    pub fn now_millis() -> Self {
        Self(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The instant, with the offset it was written in.
    pub fn instant(&self) -> DateTime<FixedOffset> {
        // Every constructor checked the text, so this cannot fail; fall back to the
        // epoch rather than panic should that ever change.
        DateTime::parse_from_rfc3339(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "{s:?} is not an RFC 3339 timestamp ({e}); write e.g. 2026-02-25T19:00:00+08:00"
            ))
        })
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "RFC 3339 timestamp with offset, e.g. 2026-02-25T19:00:00+08:00",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_millis_has_three_fraction_digits_and_reads_back() {
        let t = Timestamp::now_millis();
        let (_, frac) = t.as_str().split_once('.').unwrap();
        assert_eq!(frac.len(), "123Z".len(), "{t}");
        let back: Timestamp = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.instant(), t.instant());
    }

    #[test]
    fn keeps_text_and_offset() {
        let t: Timestamp = serde_json::from_str("\"2026-02-25T19:00:00+08:00\"").unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"2026-02-25T19:00:00+08:00\"");
        assert_eq!(t.instant().offset().local_minus_utc(), 8 * 3600);
    }

    #[test]
    fn refuses_non_rfc3339() {
        for bad in ["...", "2026-02-25", "2026-02-25 19:00", "yesterday", ""] {
            let e = serde_json::from_str::<Timestamp>(&format!("{bad:?}")).unwrap_err();
            assert!(e.to_string().contains("RFC 3339"), "{bad}: {e}");
        }
    }
}
