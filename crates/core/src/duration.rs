//! Durations as people write them in config: `250ms`, `30s`, `5m`, `2h`,
//! `30 days`, `24 hours`, `1 week`, `1 year` (365 days).

use std::time::Duration;

/// Parses a duration; the error says what is accepted.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration; write e.g. \"30s\", \"5m\", \"2h\" or \"30 days\""))?;
    let secs = |mult: u64| n.checked_mul(mult).map(Duration::from_secs);
    let d = match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" | "sec" | "secs" | "second" | "seconds" => secs(1),
        "m" | "min" | "mins" | "minute" | "minutes" => secs(60),
        "h" | "hour" | "hours" => secs(3600),
        "d" | "day" | "days" => secs(86_400),
        "w" | "week" | "weeks" => secs(7 * 86_400),
        "y" | "year" | "years" => secs(365 * 86_400),
        "" => return Err(format!("{s:?} has no unit; write e.g. \"{n}s\"")),
        other => {
            return Err(format!("unknown unit {other:?} in {s:?}; use ms, s, m, h, days, weeks or years"));
        }
    };
    d.ok_or_else(|| format!("{s:?} is too long"))
}

/// serde helper: a duration field written as a string (`"30s"`).
pub mod serde_str {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_millis()))
    }

    /// The same for an optional duration (`#[serde(default, with = "serde_str::option")]`).
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer};

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            let s = String::deserialize(d)?;
            super::super::parse_duration(&s).map(Some).map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("30 days"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("1 year"), Ok(Duration::from_secs(365 * 86_400)));
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("3 fortnights").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("soon").is_err());
    }
}
